/**
 * The TcpCollective fault matrix, in-process ranks on loopback with a virtual clock (deadlines
 * cost no real time): every fault at 2 and 3 ranks, with buffers of 1 (3 ranks: one chunk, and
 * two ranks with empty segments), 3, 1 Ki, 1 Mi and 16 Mi float32 elements (the ring, in several
 * chunks), and the faults of the exchange that 2 ranks make for a buffer of one chunk (1 element).
 *
 * - a peer killed mid-call (its sockets reset);
 * - a frozen peer, reported by the liveness source, or not (then the deadline names it);
 * - a partition of the link from rank 0 to rank 1, through the partition tests' TcpProxy: packets
 *   dropped (blackhole: the deadline, or the liveness source) or connections reset;
 * - traffic that is not the link's next frame, written into that link by the proxy: a replayed or
 *   skipped sequence number, a frame of a previous generation or of another incarnation;
 * - a stale peer (previous generation, restarted incarnation) at the handshake.
 *
 * Outcomes and names only, never timings: real time only passes while the ranks exchange frames.
 */
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { DType, FrameKind, OpCode } from "../../../src/cluster/collective/frames.js";
import type { TcpCollective } from "../../../src/cluster/collective/TcpCollective.js";
import { AbortedError, DataLossError, DeadlineExceededError, UnavailableError } from "../../../src/errors.js";
import { rankInput, ringReference } from "../../util/ringReference.js";
import { bytes, closeAll, frame, group, internals, make, pending, proxiedGroup, rejection, task, until, virtualClock } from "./inProcessRanks.js";

afterEach(closeAll);

const MATRIX = [2, 3].flatMap((ranks) =>
  [
    // 1 element: 3 ranks only (2 ranks exchange a buffer of one chunk: its faults are below).
    ...(ranks === 3 ? [{ elements: 1, chunkBytes: 8 }] : []),
    // 3 elements of 8-byte chunks: more than one chunk, so 2 ranks go around the ring as 3 do.
    { elements: 3, chunkBytes: 8 },
    { elements: 1024, chunkBytes: 1024 },
    { elements: 1024 * 1024, chunkBytes: 64 * 1024 },
    // The default chunk size.
    { elements: 16 * 1024 * 1024, chunkBytes: 4 * 1024 * 1024 },
  ].map((size) => ({ ranks, ...size })),
);

const who = (rank: number): string => `rank ${rank} (${task(rank)})`;
/** Generating 1 Mi inputs and their reference costs more than the faults: each is made once per file. */
const memo = new Map<string, Float32Array>();
const once = (key: string, make: () => Float32Array): Float32Array => memo.get(key) ?? (memo.set(key, make()).get(key) as Float32Array);
/** A fresh copy of rank `rank`'s input (the collective reduces in place). */
const input = (elements: number, rank: number, salt = 0): Float32Array => once(`${elements}/${rank}/${salt}`, () => rankInput(Float32Array, elements, rank, salt)).slice();

/** Every rank all-reduces (sum) its input; asserts the bits equal the ring-order reference on each. */
const allReduceChecked = async (g: readonly TcpCollective[], elements: number, salt: number): Promise<void> => {
  const inputs = g.map((_, r) => input(elements, r, salt));
  const expected = bytes(once(`sum of ${g.length} × ${elements}/${salt}`, () => ringReference(inputs, "sum")));
  const results = await Promise.all(g.map((c, r) => c.allReduce(inputs[r] as Float32Array, "sum")));
  for (const [r, res] of results.entries()) expect(bytes(res).equals(expected), `rank ${r}`).toBe(true);
};

/** The group broke on every rank of `g`: each one's next call raises an error that passes `check`. */
const expectBrokenEverywhere = async (g: readonly TcpCollective[], check: (e: Error, rank: number) => void): Promise<void> => {
  await until(() => g.every((c) => internals(c).broken !== undefined), "the failure to reach every rank");
  for (const [r, c] of g.entries()) check(await rejection(c.barrier()), r);
};

/** A killed process: the kernel resets its connections (it had unread data). */
const kill = (c: TcpCollective): void => {
  internals(c).outbound?.socket.resetAndDestroy();
  internals(c).inbound?.socket.resetAndDestroy();
};

/** A frozen process reads nothing; its frames stay in the kernel's buffers. */
const stopReading = (c: TcpCollective): void => void internals(c).inbound?.socket.pause();

describe.each(MATRIX)("faults at $elements float32 elements × $ranks ranks", ({ ranks, elements, chunkBytes }) => {
  const options = { chunkBytes, collectiveTimeoutSecs: 60 };
  // Each size's inputs and references are made once for its tests, then let go (16 Mi: 64 MiB each).
  afterAll(() => memo.clear());

  it("a peer killed mid-call (its sockets reset): every other rank raises UnavailableError naming it, at once and at every later call", async () => {
    const g = await group(ranks, { ...options, clock: virtualClock() });
    const victim = ranks - 1;
    stopReading(g[victim]!); // it sends but never takes what it is sent, so no rank can finish
    const calls = g.map((c, r) => rejection(c.allReduce(input(elements, r), "sum")));
    await until(() => g[0]!.stats().chunksReceived >= 1, `rank 0 to receive rank ${victim}'s first chunk`);
    kill(g[victim]!);
    const namesVictim = (e: Error, r: number): void => {
      expect(e, `rank ${r}`).toBeInstanceOf(UnavailableError);
      expect(e.message).toContain(`${who(victim)} closed its connection`);
    };
    for (const [r, call] of calls.slice(0, victim).entries()) namesVictim(await call, r);
    await expectBrokenEverywhere(g.slice(0, victim), namesVictim);
  });

  it("a frozen peer reported by the liveness source: every other rank raises that UnavailableError, with no deadline passed", async () => {
    const g = await group(ranks, { ...options, clock: virtualClock() });
    const victim = 1;
    stopReading(g[victim]!); // and it makes no call
    const survivors = g.filter((_, r) => r !== victim);
    const calls = survivors.map((c) => rejection(c.allReduce(input(elements, c.rank), "sum")));
    await until(() => survivors.every((c) => c.stats().chunksSent >= 1), "every other rank to be in the call");
    const heartbeat = new UnavailableError(`Task ${task(victim)} heartbeat timeout: it failed, got preempted, or crashed`);
    g[0]!.onPeerFailed(task(victim), heartbeat);
    expect(await calls[0]).toBe(heartbeat);
    const isHeartbeat = (e: Error): void => {
      expect(e).toBeInstanceOf(UnavailableError);
      expect(e.message).toBe(heartbeat.message);
    };
    for (const call of calls) isHeartbeat(await call);
    await expectBrokenEverywhere(survivors, isHeartbeat);
  });

  it("a rank that never makes the call (slow or frozen before it): every rank raises DeadlineExceededError naming it, at the deadline", async () => {
    const clock = virtualClock();
    const g = await group(ranks, { ...options, clock });
    const slow = 1;
    const callers = g.filter((_, r) => r !== slow);
    const calls = callers.map((c) => c.allReduce(input(elements, c.rank), "sum"));
    const errors = calls.map(rejection);
    // Rank r knows that the ranks between the slow one and itself entered (they sent it data).
    const knows = (c: TcpCollective): boolean => (internals(c).active?.upstreamArrived ?? -1) >= (c.rank - slow + ranks) % ranks - 1;
    await until(() => callers.every(knows), "every caller to hear from the ranks upstream of it");
    await clock.advanceSecs(59);
    for (const call of calls) expect(await pending(call)).toBe(true);
    await clock.advanceSecs(2);
    for (const error of errors) {
      const e = await error;
      expect(e).toBeInstanceOf(DeadlineExceededError);
      expect(e.message).toMatch(/^allReduce\(sum\) #1 over \d+ float32 elements did not finish within 60 s/);
      expect(e.message).toContain(`the slowest rank is ${who(slow)}, which had not entered it`);
    }
    // The slow rank learns it too (abort frames), and raises the same class.
    await until(() => internals(g[slow]!).broken !== undefined, "the slow rank to hear of the deadline");
    await expect(g[slow]!.allReduce(input(elements, slow), "sum")).rejects.toBeInstanceOf(DeadlineExceededError);
  });

  it("a peer that freezes mid-call, not reported: every rank raises DeadlineExceededError; the rank whose chunks it stopped taking names it", async () => {
    const clock = virtualClock();
    const g = await group(ranks, { ...options, clock });
    const frozen = 1;
    stopReading(g[frozen]!); // it enters the call, sends what it can, and then takes nothing
    const calls = g.map((c, r) => c.allReduce(input(elements, r), "sum"));
    const errors = calls.map(rejection);
    // Rank 0 sends to the frozen rank; it waits once it knows that every rank entered.
    await until(() => internals(g[0]!).active?.upstreamArrived === ranks - 1, "rank 0 to hear that every rank entered");
    await clock.advanceSecs(61);
    const e = await errors[0]!;
    expect(e).toBeInstanceOf(DeadlineExceededError);
    expect(e.message).toContain(`the slowest rank is ${who(frozen)}, whose credit did not come`);
    for (const error of errors) expect(await error).toBeInstanceOf(DeadlineExceededError);
  });

  describe("a partition of the link from rank 0 to rank 1 (userspace proxy)", () => {
    it("blackhole (packets dropped, connections open): every rank raises DeadlineExceededError naming an end of the cut link; rank 0 names rank 1", async () => {
      const clock = virtualClock();
      const { ranks: g, proxy } = await proxiedGroup(ranks, { ...options, clock });
      await allReduceChecked(g, elements, 1); // the link works through the proxy
      proxy.blackhole();
      const calls = g.map((c, r) => c.allReduce(input(elements, r, 2), "sum"));
      const errors = calls.map(rejection);
      await until(() => internals(g[0]!).active?.upstreamArrived === ranks - 1, "rank 0 to hear that every rank entered");
      await clock.advanceSecs(59);
      for (const call of calls) expect(await pending(call)).toBe(true);
      await clock.advanceSecs(2);
      const ends = [0, 1].map((r) => `the slowest rank is ${who(r)},`);
      for (const error of errors) {
        const e = await error;
        expect(e).toBeInstanceOf(DeadlineExceededError);
        expect(ends.some((end) => e.message.includes(end)), e.message).toBe(true);
      }
      expect((await errors[0])!.message).toContain(`the slowest rank is ${who(1)}, whose credit did not come`);
    });

    it("blackhole, and the liveness source reports rank 1: every rank raises that UnavailableError before the deadline", async () => {
      const { ranks: g, proxy } = await proxiedGroup(ranks, { ...options, clock: virtualClock() });
      await allReduceChecked(g, elements, 1);
      proxy.blackhole();
      const errors = g.map((c, r) => rejection(c.allReduce(input(elements, r, 2), "sum")));
      await until(() => g.every((c) => internals(c).active !== undefined), "every rank to be in the call");
      const heartbeat = new UnavailableError(`Task ${task(1)} heartbeat timeout: it failed, got preempted, or crashed`);
      g[0]!.onPeerFailed(task(1), heartbeat);
      for (const error of errors) {
        const e = await error;
        expect(e).toBeInstanceOf(UnavailableError);
        expect(e.message).toBe(heartbeat.message);
      }
    });

    it("connections reset: every rank raises UnavailableError naming the ends of the cut link; each end names the other", async () => {
      const { ranks: g, proxy } = await proxiedGroup(ranks, { ...options, clock: virtualClock() });
      await allReduceChecked(g, elements, 1);
      proxy.drop();
      await until(() => internals(g[0]!).outboundGone !== undefined && internals(g[1]!).inboundGone !== undefined, "both ends to see the reset");
      const errors = g.map((c, r) => rejection(c.allReduce(input(elements, r, 2), "sum")));
      const cut = [`${who(1)} closed its connection to ${who(0)}`, `${who(0)} closed its connection to ${who(1)}`];
      const namesTheLink = (e: Error): void => {
        expect(e).toBeInstanceOf(UnavailableError);
        expect(cut.some((m) => e.message.startsWith(m)), e.message).toBe(true);
        expect(e.message).toContain("or the network between them failed");
      };
      for (const error of errors) namesTheLink(await error);
      expect((await errors[0])!.message.startsWith(cut[0]!)).toBe(true);
      expect((await errors[1])!.message.startsWith(cut[1]!)).toBe(true);
      await expectBrokenEverywhere(g, namesTheLink);
    });
  });

  describe("a frame that is not the link's next one, written into the link from rank 0 to rank 1", () => {
    const incarnations = ["101", "102", "103"];
    const generation = 5;
    /** A group at `generation` whose link 0 → 1 went quiet after one all-reduce; the next sequence numbers both ways. */
    const quietLink = async () => {
      const { ranks: g, proxy } = await proxiedGroup(ranks, { ...options, clock: virtualClock(), generation, peerIncarnations: incarnations.slice(0, ranks) }, (r) => ({
        incarnation: incarnations[r],
      }));
      await allReduceChecked(g, elements, 1);
      // Every chunk rank 0 sent was credited: nothing is on the link either way.
      await until(() => g[0]!.stats().unacknowledgedChunks === 0, "rank 1's last credit");
      return { g, proxy, nextData: g[0]!.stats().chunksSent, nextCredit: g[1]!.stats().chunksReceived };
    };
    const data = (fields: { seq: number; generation?: number; incarnation?: bigint }): Buffer =>
      frame(
        { kind: FrameKind.data, op: OpCode.sum, dtype: DType.float32, generation, incarnation: 101n, collective: 1, elements: 2, arrived: 1, ...fields },
        Buffer.from(new Float32Array([1, 2]).buffer),
      );

    /** What is written into the link, which way, and what every rank must then raise. */
    interface Injection {
      readonly to: "toTarget" | "toClient";
      readonly bytes: Buffer;
      readonly error: typeof DataLossError | typeof AbortedError;
      readonly message: string;
    }
    const cases: readonly { name: string; inject: (link: { nextData: number; nextCredit: number }) => Injection }[] = [
      {
        name: "a data frame replayed (sequence number 0)",
        inject: (l) => ({ to: "toClient", bytes: data({ seq: 0 }), error: DataLossError, message: `frame 0 came from ${who(0)} where frame ${l.nextData} was expected` }),
      },
      {
        name: "a data frame that skips a sequence number (a lost frame)",
        inject: (l) => ({ to: "toClient", bytes: data({ seq: l.nextData + 1 }), error: DataLossError, message: `frame ${l.nextData + 1} came from ${who(0)} where frame ${l.nextData} was expected` }),
      },
      {
        name: "a credit replayed back to rank 0 (sequence number 0)",
        inject: (l) => ({
          to: "toTarget",
          bytes: frame({ kind: FrameKind.credit, generation, rank: 1, incarnation: 102n, seq: 0, elements: 1 }),
          error: DataLossError,
          message: `frame 0 came from ${who(1)} where frame ${l.nextCredit} was expected`,
        }),
      },
      {
        name: "a notice frame with a payload (a notice has none)",
        inject: (l) => ({
          to: "toClient",
          bytes: frame({ kind: FrameKind.notice, generation, rank: 0, incarnation: 101n, seq: l.nextData }, Buffer.alloc(4)),
          error: DataLossError,
          message: `${who(0)} sent a notice frame with 4 bytes of payload`,
        }),
      },
      {
        name: "a notice of a rank outside the group, back to rank 0",
        inject: (l) => ({
          to: "toTarget",
          bytes: frame({ kind: FrameKind.notice, generation, rank: 9, incarnation: 102n, seq: l.nextCredit }),
          error: DataLossError,
          message: `${who(1)} sent the notice of rank 9, outside the group of ${ranks}`,
        }),
      },
      {
        name: "a data frame of the previous generation, in sequence",
        inject: (l) => ({ to: "toClient", bytes: data({ seq: l.nextData, generation: generation - 1 }), error: AbortedError, message: `a frame of generation ${generation - 1} incarnation 101 came on the link from ${who(0)}` }),
      },
      {
        name: "a data frame of another incarnation (a restarted sender), in sequence",
        inject: (l) => ({ to: "toClient", bytes: data({ seq: l.nextData, incarnation: 999n }), error: AbortedError, message: `a frame of generation ${generation} incarnation 999 came on the link from ${who(0)}` }),
      },
    ];

    for (const { name, inject } of cases) {
      it(`${name}: every rank raises the error naming the sender, and the group stays broken; its payload is not read`, async () => {
        const link = await quietLink();
        const { to, bytes: injected, error, message } = inject(link);
        const received = link.g[1]!.stats().chunksReceived;
        link.proxy.inject(to, injected);
        await expectBrokenEverywhere(link.g, (e, r) => {
          expect(e, `rank ${r}`).toBeInstanceOf(error);
          expect(e.message).toContain(message);
        });
        expect(link.g[1]!.stats().chunksReceived).toBe(received);
      });
    }
  });

  it("a stale peer (previous generation, or a restarted incarnation) is refused with AbortedError at the handshake; the current group then all-reduces", async () => {
    const clock = virtualClock();
    const incarnations = ["11", "22", "33"].slice(0, ranks);
    const current = Array.from({ length: ranks }, (_, rank) => make({ ...options, clock, rank, size: ranks, generation: 5, incarnation: incarnations[rank], peerIncarnations: incarnations }));
    const addresses = await Promise.all(current.map((c) => c.listen()));
    // The last rank (rank 0's previous: a receiver dials its sender) waits for rank 0's connection.
    const last = ranks - 1;
    const joining = current.slice(1).map((c) => c.connect(addresses));

    const oldGeneration = make({ ...options, clock, rank: 0, size: ranks, generation: 4, incarnation: "11" });
    await oldGeneration.listen();
    const stale = await rejection(oldGeneration.connect(addresses));
    expect(stale).toBeInstanceOf(AbortedError);
    expect(stale.message).toContain(`${who(0)} of generation 4 was refused by ${who(last)} of generation 5`);

    const restarted = make({ ...options, clock, rank: 0, size: ranks, generation: 5, incarnation: "99" });
    await restarted.listen();
    const impostor = await rejection(restarted.connect(addresses));
    expect(impostor).toBeInstanceOf(AbortedError);
    expect(impostor.message).toContain(`${who(0)} has incarnation 99, not 11`);

    await Promise.all([current[0]!.connect(addresses), ...joining]);
    await allReduceChecked(current, elements, 1);
    expect(current[last]!.stats().rejectedConnections).toBe(2);
  });
});

describe("faults of the two-rank exchange (1 float32 element, one chunk): a rank that has the other's frame is done", () => {
  const options = { chunkBytes: 8, collectiveTimeoutSecs: 60 };
  const elements = 1;
  const ringSum = (salt: number): Buffer => bytes(ringReference([0, 1].map((r) => input(elements, r, salt)), "sum"));

  it("a peer killed while the other waits for its frame: UnavailableError naming it, at once and at every later call", async () => {
    const g = await group(2, { ...options, clock: virtualClock() });
    const call = rejection(g[0]!.allReduce(input(elements, 0), "sum"));
    await until(() => g[0]!.stats().chunksSent === 1, "rank 0 to send its frame");
    kill(g[1]!);
    const namesVictim = (e: Error): void => {
      expect(e).toBeInstanceOf(UnavailableError);
      expect(e.message).toContain(`${who(1)} closed its connection`);
    };
    namesVictim(await call);
    await expectBrokenEverywhere(g.slice(0, 1), namesVictim);
  });

  it("a peer killed after its frame arrived: the other rank's call gives the ring's bits; its next call raises UnavailableError naming it", async () => {
    const g = await group(2, { ...options, clock: virtualClock() });
    stopReading(g[1]!); // it sends its frame, and takes nothing
    void rejection(g[1]!.allReduce(input(elements, 1), "sum"));
    const done = await g[0]!.allReduce(input(elements, 0), "sum");
    expect(bytes(done).equals(ringSum(0))).toBe(true);
    kill(g[1]!);
    const e = await rejection(g[0]!.allReduce(input(elements, 0, 2), "sum"));
    expect(e).toBeInstanceOf(UnavailableError);
    expect(e.message).toContain(`${who(1)} closed its connection`);
  });

  it("a peer that freezes after sending: the other rank's call completes; its next call raises DeadlineExceededError at the deadline", async () => {
    const clock = virtualClock();
    const g = await group(2, { ...options, clock });
    stopReading(g[1]!);
    void rejection(g[1]!.allReduce(input(elements, 1), "sum"));
    expect(bytes(await g[0]!.allReduce(input(elements, 0), "sum")).equals(ringSum(0))).toBe(true);
    const next = g[0]!.allReduce(input(elements, 0, 2), "sum");
    const error = rejection(next);
    await clock.advanceSecs(59);
    expect(await pending(next)).toBe(true);
    await clock.advanceSecs(2);
    // In this process the "frozen" rank's own timer still runs (a stopped process runs none), and
    // its first call, never finished, may reach its deadline first and break the group: either
    // way rank 0 raises the deadline's class, at the deadline and not before.
    expect(await error).toBeInstanceOf(DeadlineExceededError);
  });

  it("a link cut one way (blackhole from rank 0 to rank 1): rank 0 completes; rank 1 raises DeadlineExceededError naming rank 0 at the deadline, and so does rank 0's next call", async () => {
    const clock = virtualClock();
    const { ranks: g, proxy } = await proxiedGroup(2, { ...options, clock });
    await allReduceChecked(g, elements, 1); // the link works through the proxy
    proxy.blackhole();
    const stuck = g[1]!.allReduce(input(elements, 1, 2), "sum");
    const stuckError = rejection(stuck);
    expect(bytes(await g[0]!.allReduce(input(elements, 0, 2), "sum")).equals(ringSum(2))).toBe(true);
    // Rank 0's next call comes a second later: deadlines due at the same instant on both ranks
    // (no virtual time passes between calls here) may fire in either order.
    await clock.advanceSecs(1);
    const next = rejection(g[0]!.allReduce(input(elements, 0, 3), "sum"));
    await clock.advanceSecs(58);
    expect(await pending(stuck)).toBe(true);
    await clock.advanceSecs(2);
    const e = await stuckError;
    expect(e).toBeInstanceOf(DeadlineExceededError);
    expect(e.message).toContain(`the slowest rank is ${who(0)}, which had not entered it`);
    expect(await next).toBeInstanceOf(DeadlineExceededError);
  });
});
