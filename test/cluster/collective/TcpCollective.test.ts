/**
 * The TCP ring collective, in-process ranks on loopback: the conformance suite (sum and mean
 * against an independent reference, bit for bit, at 1 to 16 Mi elements on 2 and 3 ranks;
 * broadcast; barrier) and the faults not in the fault matrix (faults.test.ts): a rank that
 * closes mid-collective, a frame of another generation from a fake peer, a wrong token, per-call
 * and connect deadlines, a stopped reader (backpressure), and ranks that disagree on the call.
 */
import { type AddressInfo, connect, createServer, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { FrameKind, DType, OpCode, HEADER_BYTES } from "../../../src/cluster/collective/frames.js";
import { TcpCollective } from "../../../src/cluster/collective/TcpCollective.js";
import { EventRecorder } from "../../../src/testing/EventRecorder.js";
import type { Clock } from "../../../src/time/Clock.js";
import {
  AbortedError,
  CancelledError,
  DeadlineExceededError,
  ErrorCode,
  FailedPreconditionError,
  InvalidArgumentError,
  UnauthenticatedError,
  UnavailableError,
} from "../../../src/errors.js";
import { rankInput, ringReference } from "../../util/ringReference.js";
import { bytes, closeAll, frame, group, internals, make, pending, proxiedGroup, rejection, sockets, task, until, virtualClock } from "./inProcessRanks.js";

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

afterEach(closeAll);

/** A raw client socket to `address`, tracked for cleanup; resolves once connected. */
const rawSocket = async (address: string): Promise<{ socket: Socket; received: Buffer[]; closed: Promise<void> }> => {
  const [host, port] = [address.slice(0, address.lastIndexOf(":")), Number(address.slice(address.lastIndexOf(":") + 1))];
  const socket = connect({ host, port });
  sockets.push(socket);
  const received: Buffer[] = [];
  socket.on("data", (d: Buffer) => received.push(d));
  socket.on("error", () => undefined);
  const closed = new Promise<void>((resolve) => socket.on("close", () => resolve()));
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  return { socket, received, closed };
};

const hello = (fields: { rank: number; size: number; generation: number; incarnation: bigint }, auth?: Buffer): Buffer =>
  frame({ kind: FrameKind.hello, rank: fields.rank, elements: fields.size, generation: fields.generation, incarnation: fields.incarnation }, auth);

const dataFrame = (fields: { generation: number; incarnation: bigint; seq: number; elements: number }): Buffer =>
  frame(
    { kind: FrameKind.data, op: OpCode.sum, dtype: DType.float32, generation: fields.generation, incarnation: fields.incarnation, collective: 1, seq: fields.seq, elements: fields.elements, arrived: 1 },
    Buffer.from(new Float32Array(fields.elements).fill(7).buffer),
  );

// ---------------------------------------------------------------------------------------------
// conformance
// ---------------------------------------------------------------------------------------------

describe("allReduce: the same bits on every rank, equal to the ring-order reference", () => {
  const sizes = [
    { elements: 1, chunkBytes: 8 },
    { elements: 1024, chunkBytes: 256 },
    { elements: 1024 * 1024, chunkBytes: 64 * 1024 },
    { elements: 16 * 1024 * 1024, chunkBytes: undefined },
  ];
  for (const ranks of [2, 3]) {
    for (const { elements, chunkBytes } of sizes) {
      it(`${elements} float32 elements × ${ranks} ranks (sum, then mean)`, async () => {
        const g = await group(ranks, { chunkBytes });
        for (const op of ["sum", "mean"] as const) {
          const inputs = g.map((_, r) => rankInput(Float32Array, elements, r, op === "sum" ? 1 : 2));
          const expected = ringReference(inputs, op);
          const buffers = inputs.map((x) => x.slice());
          const results = await Promise.all(g.map((c, r) => c.allReduce(buffers[r] as Float32Array, op)));
          for (let r = 0; r < ranks; r++) {
            expect(results[r]).toBe(buffers[r]); // in place
            expect(bytes(results[r] as Float32Array).equals(bytes(expected)), `rank ${r}, ${op}`).toBe(true);
          }
        }
        // Every rank sent (and received) 2(N−1) segments of the buffer: 2(N−1)/N of it; summed over
        // the ranks, each segment went N−1 times around in each phase, for each of the 2 calls.
        const total = (field: "bytesSent" | "bytesReceived"): number => g.reduce((sum, c) => sum + c.stats()[field], 0);
        expect(total("bytesReceived")).toBe(2 * 2 * (ranks - 1) * elements * 4);
        expect(total("bytesSent")).toBe(total("bytesReceived"));
        for (const c of g) expect(c.stats().maxBufferedChunksPerPeer).toBeLessThanOrEqual(2);
      });
    }
  }

  it("float64 buffers, and a buffer shorter than the ring (1 element × 3 ranks)", async () => {
    const g = await group(3, { chunkBytes: 64 });
    for (const elements of [1, 1024, 1000]) {
      const inputs = g.map((_, r) => rankInput(Float64Array, elements, r));
      const expected = ringReference(inputs, "mean");
      const results = await Promise.all(g.map((c, r) => c.allReduce((inputs[r] as Float64Array).slice(), "mean")));
      for (const res of results) expect(bytes(res).equals(bytes(expected))).toBe(true);
    }
  });

  it("calls that differ only in op, element size or length each get their own chunk schedule", async () => {
    // 16-byte chunks: 4 float32 or 2 float64 elements, so the element size changes the chunks.
    const g = await group(3, { chunkBytes: 16 });
    const check = async <B extends Float32Array | Float64Array>(call: string, type: new (n: number) => B, elements: number, op: "sum" | "mean"): Promise<void> => {
      const inputs = g.map((_, r) => rankInput(type, elements, r));
      const expected = ringReference(inputs, op);
      const results = await Promise.all(g.map((c, r) => c.allReduce((inputs[r] as B).slice() as B, op)));
      for (const [r, res] of results.entries()) expect(bytes(res).equals(bytes(expected)), `${call}, rank ${r}`).toBe(true);
    };
    await check("float32 × 10, mean", Float32Array, 10, "mean");
    await check("the same again", Float32Array, 10, "mean");
    await check("float64 × 10, mean", Float64Array, 10, "mean");
    await check("float32 × 10, sum", Float32Array, 10, "sum");
    await check("float32 × 11, mean", Float32Array, 11, "mean");
    await check("float32 × 10, mean, again", Float32Array, 10, "mean");
  });

  it("the reference's order matters: a rank-order sum differs in some bits (so the comparison can fail)", () => {
    const inputs = [0, 1, 2].map((r) => rankInput(Float32Array, 1024, r));
    const ring = ringReference(inputs, "sum");
    const rankOrder = new Float32Array(1024).map((_, i) => Math.fround(Math.fround((inputs[0]![i] as number) + (inputs[1]![i] as number)) + (inputs[2]![i] as number)));
    expect(bytes(ring).equals(bytes(rankOrder))).toBe(false);
  });

  it("one rank: allReduce, broadcast and barrier are local", async () => {
    const [c] = await group(1);
    const x = new Float32Array([1, 2, 3]);
    await expect(c!.allReduce(x, "mean")).resolves.toEqual(new Float32Array([1, 2, 3]));
    await expect(c!.broadcast(x, 0)).resolves.toBe(x);
    await expect(c!.barrier()).resolves.toBeUndefined();
  });
});

describe("broadcast and barrier", () => {
  it("broadcast copies the root's buffer to every rank (root 1 of 3, then root 0 of 3)", async () => {
    const g = await group(3, { chunkBytes: 128 });
    for (const root of [1, 0]) {
      const buffers = g.map((_, r) => rankInput(Float32Array, 1000, r));
      const sent = (buffers[root] as Float32Array).slice();
      await Promise.all(g.map((c, r) => c.broadcast(buffers[r] as Float32Array, root)));
      for (const b of buffers) expect(bytes(b).equals(bytes(sent))).toBe(true);
    }
  });

  it("a barrier resolves on no rank before every rank entered it", async () => {
    const g = await group(3);
    const first = [g[0]!.barrier(), g[1]!.barrier()];
    await until(() => g[1]!.stats().chunksReceived >= 1, "rank 1 to hear from rank 0");
    expect(await pending(first[0]!)).toBe(true);
    expect(await pending(first[1]!)).toBe(true);
    await Promise.all([...first, g[2]!.barrier()]);
  });

  it("two ranks pass a barrier by exchange, one frame each way, and neither leaves before the other entered", async () => {
    const g = await group(2);
    const first = g[0]!.barrier();
    await until(() => g[1]!.stats().chunksReceived === 1, "rank 1 to hear from rank 0");
    expect(await pending(first)).toBe(true);
    await Promise.all([first, g[1]!.barrier()]);
    for (const c of g) expect(c.stats()).toMatchObject({ chunksSent: 1, chunksReceived: 1 });
  });

  it("calls run in call order on each rank, one at a time", async () => {
    const g = await group(2, { chunkBytes: 64 });
    const a = g.map((_, r) => new Float32Array(100).fill(r + 1));
    const b = g.map((_, r) => new Float64Array(50).fill(10 * (r + 1)));
    await Promise.all(g.flatMap((c, r) => [c.allReduce(a[r]!, "sum"), c.barrier(), c.allReduce(b[r]!, "mean")]));
    for (let r = 0; r < 2; r++) {
      expect(a[r]).toEqual(new Float32Array(100).fill(3));
      expect(b[r]).toEqual(new Float64Array(50).fill(15));
    }
  });
});

// ---------------------------------------------------------------------------------------------
// faults
// ---------------------------------------------------------------------------------------------

describe("a rank that leaves mid-collective", () => {
  it("close() on one rank: its pending call raises CancelledError, the others UnavailableError naming it", async () => {
    const g = await group(3);
    const calls = [g[0]!.barrier(), g[1]!.barrier()].map(rejection); // rank 2 holds back
    await until(() => g[1]!.stats().chunksReceived >= 1, "rank 1 to be in the barrier");
    await g[0]!.close();
    expect(await calls[0]).toBeInstanceOf(CancelledError);
    const e = await calls[1]!;
    expect(e).toBeInstanceOf(UnavailableError);
    expect(e.message).toContain(`rank 0 (${task(0)}) closed its connection`);
    await until(() => internals(g[2]!).broken !== undefined, "rank 2 to hear of it");
    await expect(g[2]!.barrier()).rejects.toThrow(`rank 0 (${task(0)}) closed its connection`);
  });
});

describe("deadlines", () => {
  it("a per-call timeoutSecs overrides collectiveTimeoutSecs; a bad one is refused", async () => {
    const clock = virtualClock();
    const g = await group(2, { clock });
    const call = rejection(g[0]!.barrier({ timeoutSecs: 5 }));
    await clock.advanceSecs(6);
    const e = await call;
    expect(e).toBeInstanceOf(DeadlineExceededError);
    expect(e.message).toContain(`the slowest rank is rank 1 (${task(1)})`);
    await expect(g[1]!.barrier({ timeoutSecs: 0 })).rejects.toThrow(new InvalidArgumentError("barrier: timeoutSecs 0 must be a positive number of seconds"));
  });

  it("a call expires exactly at its deadline, also while an earlier call's deadline timer is still armed, and a step of the wall clock moves no deadline", async () => {
    const clock = virtualClock();
    /** `call` is still pending 1 ms before 60 s of clock time from now, and raises DeadlineExceededError at 60 s. */
    const expiresIn60s = async (call: Promise<unknown>): Promise<void> => {
      const error = rejection(call);
      await clock.advance(59_999);
      expect(await pending(call)).toBe(true);
      await clock.advance(1);
      expect(await error).toBeInstanceOf(DeadlineExceededError);
    };
    const g = await group(2, { clock, collectiveTimeoutSecs: 60 });
    await expiresIn60s(g[0]!.barrier());

    const h = await group(2, { clock, collectiveTimeoutSecs: 60 });
    await Promise.all(h.map((c) => c.barrier())); // its deadline timer stays armed, for 60 s from now
    await clock.advance(500);
    await expiresIn60s(h[0]!.barrier()); // due 0.5 s after that timer fires

    const k = await group(2, { clock, collectiveTimeoutSecs: 60 });
    const jumped = k[0]!.barrier();
    clock.set(clock.now() + 3_600_000); // the system clock steps an hour ahead
    await expiresIn60s(jumped);
  });

  it("calls share one deadline timer: a training loop's calls arm none of their own", async () => {
    const clock = virtualClock();
    let timers = 0;
    const counting: Clock = { now: () => clock.now(), monotonic: () => clock.monotonic(), sleep: (ms, signal) => clock.sleep(ms, signal), setTimer: (ms, fn) => (timers++, clock.setTimer(ms, fn)) };
    const g = await group(2, { clock: counting, collectiveTimeoutSecs: 60 });
    const armedBefore = timers;
    for (let i = 0; i < 10; i++) {
      const inputs = g.map((_, r) => rankInput(Float32Array, 64, r, i));
      await Promise.all(g.map((c, r) => c.allReduce(inputs[r] as Float32Array, "mean")));
    }
    // The first call armed each rank's timer; every later call was due after it.
    expect(timers - armedBefore).toBe(2);
    // A call due before the armed deadline arms the timer again, for itself.
    await Promise.all(g.map((c) => c.barrier({ timeoutSecs: 5 })));
    expect(timers - armedBefore).toBe(4);
  });

  it("connect() has a deadline that names the rank that never came", async () => {
    const clock = virtualClock();
    const lonely = make({ rank: 0, size: 2, clock, connectTimeoutSecs: 10 });
    const address = await lonely.listen();
    const connecting = lonely.connect([address, "127.0.0.1:1"]); // nothing listens on port 1
    const e = rejection(connecting);
    for (let i = 0; i < 20; i++) await clock.advance(1000);
    const error = await e;
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error.message).toContain(`could not connect to rank 1 (${task(1)}) at 127.0.0.1:1`);
    expect(error.message).toContain(`was not connected to by rank 1 (${task(1)})`);
  });
});

describe("backpressure", () => {
  it("a rank that does not read holds at most 2 chunks from its peer; the sender waits for credit", async () => {
    const g = await group(2, { chunkBytes: 4096 });
    const inputs = g.map((_, r) => rankInput(Float32Array, 64 * 1024, r)); // 32 chunks per segment
    const expected = ringReference(inputs, "sum");
    const first = g[0]!.allReduce(inputs[0]!.slice(), "sum");
    await until(() => g[0]!.stats().creditWaits >= 1 && g[1]!.stats().bufferedChunks === 2, "rank 0 to run out of credit");
    expect(g[1]!.stats().maxBufferedChunksPerPeer).toBe(2);
    expect(g[0]!.stats().chunksSent).toBe(2);
    const second = g[1]!.allReduce(inputs[1]!.slice(), "sum");
    const results = await Promise.all([first, second]);
    for (const res of results) expect(bytes(res).equals(bytes(expected))).toBe(true);
    for (const c of g) expect(c.stats().maxBufferedChunksPerPeer).toBeLessThanOrEqual(2);
  });

  it("two ranks: the other rank's data frame frees the credit of this rank's chunks of earlier collectives, so credits held back on the way stall nothing", async () => {
    // Rank 1's credit frames to rank 0 wait in the proxy; its data frames come on the other link.
    const { ranks: g, proxy } = await proxiedGroup(2, { chunkBytes: 4096, clock: virtualClock() });
    proxy.hold("toTarget");
    for (let round = 0; round < 4; round++) {
      // Rank 0 broadcasts (rank 1 sends nothing back), so from the second round on its frame of
      // the all-reduce waits for credit until rank 1's frame of the all-reduce arrives (the
      // credit-wait path). Two broadcasts in a row would wait for the held credit frames.
      const sent = rankInput(Float64Array, 16, 0, round);
      const got = await Promise.all(g.map((c, r) => c.broadcast(r === 0 ? sent.slice() : new Float64Array(16), 0)));
      for (const x of got) expect(bytes(x).equals(bytes(sent))).toBe(true);
      const inputs = g.map((_, r) => rankInput(Float32Array, 256, r, round)); // one chunk: the exchange
      const expected = bytes(ringReference(inputs, "mean"));
      const results = await Promise.all(g.map((c, r) => c.allReduce(inputs[r] as Float32Array, "mean")));
      for (const res of results) expect(bytes(res).equals(expected)).toBe(true);
    }
    expect(g[0]!.stats().creditWaits).toBeGreaterThanOrEqual(1);
    expect(g[1]!.stats().maxBufferedChunksPerPeer).toBeLessThanOrEqual(2);
    expect(g[0]!.stats().unacknowledgedChunks).toBeGreaterThanOrEqual(1);
    // The held credits arrive, and count once: nothing is left unacknowledged.
    proxy.heal();
    await until(() => g[0]!.stats().unacknowledgedChunks === 0, "rank 1's held credits");
    const inputs = g.map((_, r) => rankInput(Float32Array, 256, r, 9));
    const expected = bytes(ringReference(inputs, "sum"));
    const results = await Promise.all(g.map((c, r) => c.allReduce(inputs[r] as Float32Array, "sum")));
    for (const res of results) expect(bytes(res).equals(expected)).toBe(true);
  });
});

describe("the two-rank exchange's credit", () => {
  it("goes back at the next turn of the event loop, after the call resolved, as one credit frame", async () => {
    const g = await group(2, { chunkBytes: 4096, clock: virtualClock() });
    const inputs = g.map((_, r) => rankInput(Float32Array, 256, r));
    const expected = bytes(ringReference(inputs, "sum"));
    const written = (c: TcpCollective): number => internals(c).inbound!.socket.bytesWritten;
    const before = g.map(written);
    const atResolve: number[] = [];
    // Right when its call resolved (no turn of the event loop since), a rank has not written its credit yet.
    const results = await Promise.all(g.map((c, r) => c.allReduce(inputs[r] as Float32Array, "sum").then((res) => ((atResolve[r] = written(c)), res))));
    expect(atResolve).toEqual(before);
    for (const res of results) expect(bytes(res).equals(expected)).toBe(true);
    await new Promise((r) => setImmediate(r));
    expect(g.map(written)).toEqual(before.map((n) => n + HEADER_BYTES));
    for (const c of g) await until(() => c.stats().unacknowledgedChunks === 0, "the other rank's credit");
  });
});

describe("chunks in place", () => {
  it("a chunk queued right behind the end of the previous collective goes into the caller's buffer when the caller starts its call at once (not whole into a slot)", async () => {
    // On plain TCP the parser reads a frame at a time, and microtasks run between reads: the
    // caller's next call has started before the chunk's header is parsed. (Where one read holds
    // both, as TLS's 'data' events can, the header is held for a turn of the event loop first:
    // the parser's side of that is in frames.test.ts.)
    const g = await group(2, { chunkBytes: 4096 });
    const inputs = g.map((_, r) => rankInput(Float32Array, 2 * 1024, r)); // 1 chunk per segment
    const expected = ringReference(inputs, "sum");
    // Rank 1 reads nothing from rank 0 until resumed. Both pass the barrier's exchange; rank 0
    // has rank 1's frame, leaves the barrier and sends its first chunk, which waits in the
    // kernel behind its barrier frame to rank 1.
    const inbound = internals(g[1]!).inbound!.socket;
    inbound.pause();
    const barrier0 = g[0]!.barrier().then(() => g[0]!.allReduce(inputs[0]!.slice(), "sum"));
    const reduced1 = g[1]!.barrier().then(() => g[1]!.allReduce(inputs[1]!.slice(), "sum"));
    await until(() => g[0]!.stats().chunksSent === 2, "rank 0 to send its first chunk");
    for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
    expect(g[1]!.stats().chunksReceived).toBe(0);
    inbound.resume(); // one read: the barrier's frame, then the chunk
    const results = await Promise.all([barrier0, reduced1]);
    for (const res of results) expect(bytes(res).equals(bytes(expected))).toBe(true);
    expect(g[1]!.stats().slottedChunks).toBe(0);
  });

  it("a chunk that comes before its call starts waits whole in a slot, and is consumed when the call starts", async () => {
    const g = await group(2, { chunkBytes: 4096 });
    const inputs = g.map((_, r) => rankInput(Float32Array, 4 * 1024, r)); // 2 chunks per segment
    const expected = ringReference(inputs, "sum");
    const first = g[0]!.allReduce(inputs[0]!.slice(), "sum");
    await until(() => g[1]!.stats().bufferedChunks === 2, "rank 1 to hold rank 0's first 2 chunks");
    expect(g[1]!.stats().slottedChunks).toBe(2);
    const results = await Promise.all([first, g[1]!.allReduce(inputs[1]!.slice(), "sum")]);
    for (const res of results) expect(bytes(res).equals(bytes(expected))).toBe(true);
    expect(g[1]!.stats().slottedChunks).toBe(2);
  });
});

describe("two ranks and a buffer of at most one chunk: an exchange, with the ring's bits", () => {
  it("sends one frame each way and gives the ring-order reference (sum and mean, float32 and float64, 1 element to a whole chunk)", async () => {
    const g = await group(2, { chunkBytes: 4096 });
    const check = async <B extends Float32Array | Float64Array>(type: new (n: number) => B, elements: number, op: "sum" | "mean"): Promise<void> => {
      const inputs = g.map((_, r) => rankInput(type, elements, r, 7));
      const expected = ringReference(inputs, op);
      const sent = g.map((c) => c.stats().chunksSent);
      const results = await Promise.all(g.map((c, r) => c.allReduce((inputs[r] as B).slice() as B, op)));
      for (const [r, res] of results.entries()) {
        expect(bytes(res).equals(bytes(expected)), `${type.name} × ${elements}, ${op}, rank ${r}`).toBe(true);
        expect(g[r]!.stats().chunksSent - sent[r]!, `${type.name} × ${elements}, rank ${r}: frames sent`).toBe(1);
      }
    };
    for (const op of ["sum", "mean"] as const) {
      for (const n of [1, 2, 3, 1000, 1024]) await check(Float32Array, n, op);
      for (const n of [1, 511, 512]) await check(Float64Array, n, op);
    }
  });

  it("a buffer one element over a chunk goes around the ring: two frames each way", async () => {
    const g = await group(2, { chunkBytes: 4096 });
    const inputs = g.map((_, r) => rankInput(Float32Array, 1025, r));
    const expected = ringReference(inputs, "mean");
    const results = await Promise.all(g.map((c, r) => c.allReduce(inputs[r]!.slice(), "mean")));
    for (const res of results) expect(bytes(res).equals(bytes(expected))).toBe(true);
    for (const c of g) expect(c.stats().chunksSent).toBe(2);
  });

  it("gives exactly the ring's bits, NaN payloads included (each segment's operands in the ring's order)", async () => {
    const elements = 1000; // 4000 bytes: one chunk of 4096, or 16 chunks of 256
    const inputs = [0, 1].map((r) => {
      const x = rankInput(Float32Array, elements, r);
      const raw = new Uint32Array(x.buffer);
      // In each half (each rank's segment): NaNs with different payloads at one index on both ranks, and one on each side alone.
      for (const at of [10, 700]) {
        raw[at] = 0x7fc00000 | (r + 1);
        raw[at + 1 + r] = 0x7fc00000 | (0x100 + r);
      }
      return x;
    });
    const exchanged = await group(2, { chunkBytes: 4096 });
    const ring = await group(2, { chunkBytes: 256 });
    for (const op of ["sum", "mean"] as const) {
      const viaExchange = await Promise.all(exchanged.map((c, r) => c.allReduce(inputs[r]!.slice(), op)));
      const viaRing = await Promise.all(ring.map((c, r) => c.allReduce(inputs[r]!.slice(), op)));
      expect(exchanged[0]!.stats().chunksSent).toBeLessThan(ring[0]!.stats().chunksSent);
      for (const res of [...viaExchange, viaRing[1]!]) expect(bytes(res).equals(bytes(viaRing[0]!)), op).toBe(true);
    }
  });
});

describe("termination notices around the ring", () => {
  /** What each rank heard, by rank. */
  const listen = (g: TcpCollective[]): string[][] =>
    g.map((c) => {
      const heard: string[] = [];
      c.onNoticeHeard((t, r) => heard.push(t === task(r) ? t : `${t} is not rank ${r}`));
      return heard;
    });

  it("a rank's notice reaches every other rank once, both ways around the ring, and never comes back to it", async () => {
    const g = await group(5);
    const heard = listen(g);
    g[2]!.announceNotice();
    g[2]!.announceNotice();
    await until(() => heard.every((h, r) => r === 2 || h.length > 0), "every rank to hear rank 2's notice");
    // Both directions went all the way round: each frame ends where rank 2's own comes back.
    await until(() => heard.flat().length === 4, "the notices to settle");
    for (let r = 0; r < 5; r++) expect(heard[r], `rank ${r}`).toEqual(r === 2 ? [] : [task(2)]);
    // Two ranks' notices: each rank hears the other's.
    g[4]!.announceNotice();
    await until(() => heard.every((h, r) => r === 4 || h.includes(task(4))), "rank 4's notice");
    expect(heard[2]).toEqual([task(4)]);
    expect(heard[4]).toEqual([task(2)]);
  });

  it("a frozen rank stops the notice on its side only: every live rank still hears it, and the group is not broken", async () => {
    const g = await group(5, { clock: virtualClock() });
    const heard = listen(g);
    // Rank 0 reads nothing (frozen): the notice of rank 2 goes 2 → 3 → 4 one way (rank 4 hears it
    // only as rank 3 passes it on) and 2 → 1 the other.
    internals(g[0]!).inbound?.socket.pause();
    internals(g[0]!).outbound?.socket.pause();
    g[2]!.announceNotice();
    await until(() => heard[1]!.length > 0 && heard[4]!.length > 0, "ranks 1 and 4 to hear rank 2's notice");
    expect(heard.map((h) => h.length)).toEqual([0, 1, 0, 1, 1]);
    for (const c of g) expect(internals(c).broken).toBeUndefined();
  });

  it("notices cross the ring in the middle of an all-reduce of many chunks, which still gives the reference's bits", async () => {
    const g = await group(3, { chunkBytes: 4096 });
    const heard = listen(g);
    const inputs = g.map((_, r) => rankInput(Float32Array, 64 * 1024, r));
    const expected = ringReference(inputs, "sum");
    const calls = g.map((c, r) => c.allReduce(inputs[r]!.slice(), "sum"));
    await until(() => g[0]!.stats().chunksSent > 0, "the all-reduce to start");
    g[1]!.announceNotice();
    g[0]!.announceNotice();
    for (const res of await Promise.all(calls)) expect(bytes(res).equals(bytes(expected))).toBe(true);
    await until(() => heard[2]!.length === 2, "rank 2 to hear both notices");
    expect([...heard[2]!].sort()).toEqual([task(0), task(1)]);
    const again = await Promise.all(g.map((c, r) => c.allReduce(inputs[r]!.slice(), "sum")));
    for (const res of again) expect(bytes(res).equals(bytes(expected))).toBe(true);
  });

  it("a notice before connect() or after the group broke goes nowhere and raises nothing", async () => {
    const lone = make({ rank: 0, size: 2 });
    expect(() => lone.announceNotice()).not.toThrow();
    const g = await group(3);
    const heard = listen(g);
    const calls = [g[1]!.barrier(), g[2]!.barrier()].map(rejection);
    await g[0]!.close();
    for (const e of await Promise.all(calls)) expect(e).toBeInstanceOf(UnavailableError);
    expect(() => g[1]!.announceNotice()).not.toThrow();
    expect(() => g[0]!.announceNotice()).not.toThrow();
    // Ranks 1 and 2 are still linked (1 → 2), but a broken rank sends nothing.
    await g[2]!.barrier().catch(() => undefined);
    expect(heard).toEqual([[], [], []]);
  });
});

describe("handshake: token, generation, incarnation", () => {
  it("a connection without the token is dropped before any frame after the hello is read, and the rank says so on its events$", async () => {
    const g = await group(2, { token: "s3cret" });
    const heard = new EventRecorder();
    heard.record(g[1]!.events$);
    const target = g[1]!.address as string;
    const { socket, received, closed } = await rawSocket(target);
    const auth = Buffer.from("Bearer wrong");
    socket.write(Buffer.concat([hello({ rank: 0, size: 2, generation: 0, incarnation: 1n }, auth), dataFrame({ generation: 0, incarnation: 1n, seq: 0, elements: 16 })]));
    await closed;
    expect(g[1]!.stats().rejectedConnections).toBe(1);
    expect(g[1]!.stats().chunksReceived).toBe(0);
    const reply = Buffer.concat(received);
    expect(reply.readUInt8(5)).toBe(FrameKind.reject);
    expect(JSON.parse(reply.subarray(HEADER_BYTES).toString("utf8"))).toMatchObject({ code: ErrorCode.UNAUTHENTICATED });
    // A connection that skips the hello and sends data at once is dropped too, unread.
    const bare = await rawSocket(target);
    bare.socket.write(dataFrame({ generation: 0, incarnation: 1n, seq: 0, elements: 16 }));
    await bare.closed;
    expect(Buffer.concat(bare.received).length).toBe(0);
    expect(g[1]!.stats()).toMatchObject({ rejectedConnections: 2, chunksReceived: 0 });
    await until(() => heard.lines("warn").length === 2, "the two warnings");
    expect(heard.lines("warn").map((e) => e.source)).toEqual(["collective", "collective"]);
    expect(heard.messages("warn")).toEqual([
      "collective: rank 1 (/job:worker/replica:0/task:1) refused a connection from 127.0.0.1: it did not present the cluster token; give every task the same token",
      expect.stringMatching(/^collective: rank 1 \(\/job:worker\/replica:0\/task:1\) dropped a connection from 127\.0\.0\.1:\d+: /),
    ]);
    expect(heard.messages().join("\n")).not.toContain("s3cret");
    // The group is unharmed.
    const x = g.map((_, r) => new Float32Array([r + 1]));
    await Promise.all(g.map((c, r) => c.allReduce(x[r]!, "sum")));
    expect(x[1]).toEqual(new Float32Array([3]));
  });

  it("a welcome without the token: the rank that dialed (the receiver) refuses it and reads no data after it", async () => {
    // A listener at rank 1's address that answers rank 0's hello with a tokenless welcome, then data.
    const server = createServer((socket) => {
      socket.on("error", () => undefined);
      socket.once("data", () =>
        socket.write(Buffer.concat([frame({ kind: FrameKind.welcome, generation: 0, incarnation: 9n, elements: 2 }), dataFrame({ generation: 0, incarnation: 9n, seq: 0, elements: 16 })])),
      );
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const rank0 = make({ rank: 0, size: 2, token: "s3cret", connectTimeoutSecs: 30 });
      const own = await rank0.listen();
      const e = await rejection(rank0.connect([own, `127.0.0.1:${(server.address() as AddressInfo).port}`]));
      expect(e).toBeInstanceOf(UnauthenticatedError);
      expect(e.message).toContain("did not present the cluster token");
      expect(rank0.stats()).toMatchObject({ rejectedConnections: 1, chunksReceived: 0, bytesReceived: 0 });
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it("a rank with the wrong token gets UnauthenticatedError at connect()", async () => {
    const right = make({ rank: 1, size: 2, token: "s3cret" });
    const wrong = make({ rank: 0, size: 2, token: "guess" });
    const addresses = await Promise.all([wrong.listen(), right.listen()]);
    const e = await rejection(wrong.connect(addresses));
    expect(e).toBeInstanceOf(UnauthenticatedError);
    expect(e.message).toContain("did not present the cluster token");
  });

  it("a frame of another generation or incarnation after the handshake breaks the group with AbortedError", async () => {
    const acceptor = make({ rank: 1, size: 2, generation: 3, incarnation: "7" });
    const address = await acceptor.listen();
    const { socket, closed } = await rawSocket(address);
    socket.write(hello({ rank: 0, size: 2, generation: 3, incarnation: 5n }));
    await until(() => internals(acceptor).outbound !== undefined, "the handshake");
    socket.write(dataFrame({ generation: 2, incarnation: 5n, seq: 0, elements: 4 }));
    await closed;
    expect(acceptor.stats().chunksReceived).toBe(0);
    const e = await rejection(acceptor.connect(["127.0.0.1:1", address]));
    expect(e).toBeInstanceOf(AbortedError);
    expect(e.message).toContain("a frame of generation 2 incarnation 5");
  });
});

describe("misuse", () => {
  it("ranks that disagree on the call get InvalidArgumentError naming both calls", async () => {
    const g = await group(2);
    const calls = [g[0]!.allReduce(new Float32Array(10), "sum"), g[1]!.allReduce(new Float32Array(12), "sum")].map(rejection);
    for (const call of calls) {
      const e = await call;
      expect(e).toBeInstanceOf(InvalidArgumentError);
      expect(e.message).toMatch(/allReduce\(sum\) #1 over 1[02] float32 elements/);
    }
  });

  it("bad options are one-line errors; a collective before connect() is a FailedPreconditionError", async () => {
    expect(() => new TcpCollective({ rank: 2, addresses: ["127.0.0.1:0", "127.0.0.1:0"] })).toThrow(new InvalidArgumentError("TcpCollective: rank 2 is not an index of addresses (0..1)"));
    expect(() => new TcpCollective({ rank: 0, addresses: ["nowhere"] })).toThrow(new InvalidArgumentError('TcpCollective: addresses[0] "nowhere" is not host:port (of 1 ranks)'));
    expect(() => new TcpCollective({ rank: 0, addresses: ["127.0.0.1:0"], chunkBytes: 12 })).toThrow(/chunkBytes 12 must be a multiple of 8/);
    expect(() => new TcpCollective({ rank: 0, addresses: ["127.0.0.1:0"], incarnation: "x" })).toThrow(/incarnation "x" is not a decimal 64-bit incarnation/);
    const c = make({ rank: 0, size: 2 });
    await expect(c.barrier()).rejects.toBeInstanceOf(FailedPreconditionError);
    await expect(c.broadcast(new Float32Array(1), 2)).rejects.toThrow(new InvalidArgumentError("broadcast: root 2 is not a rank of this group (0..1)"));
  });

  it("listen() on a port in use is an UnavailableError naming the address", async () => {
    const first = make({ rank: 0, size: 1 });
    const address = await first.listen();
    const second = make({ rank: 0, size: 1, addresses: [address] });
    await expect(second.listen()).rejects.toThrow(`cannot listen on ${address}: EADDRINUSE`);
  });
});
