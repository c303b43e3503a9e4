/**
 * One rank of the `cluster` benchmark (bench/cluster.bench.ts), in its own process. It talks to
 * the benchmark in JSON lines: events on stdout (`{"event": ...}`), commands on stdin.
 *
 * 1. It listens (a TcpCollective on loopback; rank 0 of a `raw` group also a plain TCP server),
 *    prints `listening` with the addresses, and reads every rank's addresses from stdin.
 * 2. It connects and prints `ready`.
 * 3. `allreduce` mode: `warmups`, then `samples` rounds, each an all-reduce (sum) of `elements`
 *    float32 and, with `raw`, the baseline: both ranks send `elements × 4` bytes to each other at
 *    once on one plain socket pair; and the stricter baseline, the same exchange read as the
 *    collective reads (`onread` into one reused buffer, each rank receiving on a socket it
 *    dialed). The order of the three rotates from round to round. Every timing starts
 *    when this rank leaves a barrier and stops when this rank has everything (the all-reduce's
 *    result, reduction included; or every byte from the other rank). It checks every result and
 *    prints `samples` with its timings and the payload bytes it received in each.
 *    `train` mode: an MLP 128 → 256 → 256 → 10 replica (tfjsSession with the collective) on its
 *    shard; commands `train <steps>` (prints `trained`: each step's ms, its local compute ms (the
 *    step minus the time inside collective calls), the wall-clock time it entered its all-reduce
 *    (epoch ms, comparable across processes) and the round's wall ms),
 *    `gradients <samples>` (prints `allreduced`: all-reduces, "mean", of a buffer of the
 *    gradients' size, back to back after a barrier), `gradientsAfterCompute <samples>` (prints
 *    `allreducedAfterCompute`: the same all-reduce entered as a step enters it, right after a
 *    barrier and one step's local compute of the gradients, with the wall-clock time it was
 *    entered) and `exit` (prints `done` with the global step and a digest of the weights).
 *
 *    With `smallSamples`, it then measures the gradients' size (`smallElements`): an all-reduce
 *    and the plain exchange, each back to back and after `idleMs` of sleep on both ranks (prints
 *    `small`).
 *
 * It ends by itself after `deadlineMs`. Usage: node --import tsx bench/collectiveRank.ts '<json args>'.
 */

import { createHash } from "node:crypto";
import { createServer, connect, type Socket } from "node:net";
import { createInterface } from "node:readline";
import * as tf from "@tensorflow/tfjs";
import type { Collective } from "../src/session/Collective.js";
import { TcpCollective } from "../src/cluster/collective/TcpCollective.js";
import { silentLogger } from "../src/Logger.js";
import { InMemoryDataSource, tfjsSession, useBackend, type TfjsBackendName } from "../src/tfjs/index.js";
import { buildMlp, mlpDataset, mlpLoss, mlpOptimizer } from "./mlp.js";

interface Args {
  readonly mode: "allreduce" | "train";
  readonly rank: number;
  readonly size: number;
  readonly deadlineMs: number;
  // allreduce
  readonly elements?: number;
  readonly warmups?: number;
  readonly samples?: number;
  readonly raw?: boolean;
  /** With `raw`: float32 elements of the small all-reduce and exchange, back to back and after `idleMs` idle (0: none). */
  readonly smallElements?: number;
  readonly smallSamples?: number;
  readonly idleMs?: number;
  // train
  readonly backend?: TfjsBackendName;
  readonly batch?: number;
}

const args = JSON.parse(process.argv[2] ?? "{}") as Args;
const print = (event: Record<string, unknown>): void => void process.stdout.write(`${JSON.stringify({ rank: args.rank, size: args.size, ...event })}\n`);
setTimeout(() => {
  print({ event: "failed", name: "DeadlineExceededError", message: `rank ${args.rank} of ${args.size}: no end within ${args.deadlineMs} ms` });
  process.exit(3);
}, args.deadlineMs).unref();

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const nextLine = async (): Promise<string> => {
  const { value, done } = await lines.next();
  if (done === true) throw new Error("stdin closed");
  return value as string;
};

const collective = new TcpCollective({
  rank: args.rank,
  addresses: Array.from({ length: args.size }, () => "127.0.0.1:0"),
  collectiveTimeoutSecs: 120,
  connectTimeoutSecs: 120,
  logger: silentLogger,
});

// ---------------------------------------------------------------------------------------------
// the raw baseline: one plain socket pair between ranks 0 and 1
// ---------------------------------------------------------------------------------------------

/** A socket that counts what it received, and waits for a total. */
interface RawLink {
  readonly socket: Socket;
  received(): number;
  /** Resolves once `total` bytes were received since the start. */
  until(total: number): Promise<void>;
}

const rawLink = (socket: Socket): RawLink => {
  let received = 0;
  let wanted: { total: number; resolve: () => void } | undefined;
  socket.on("data", (chunk: Buffer) => {
    received += chunk.length;
    if (wanted !== undefined && received >= wanted.total) {
      const { resolve } = wanted;
      wanted = undefined;
      resolve();
    }
  });
  socket.on("error", (e) => {
    print({ event: "failed", name: e.name, message: `raw socket: ${e.message}` });
    process.exit(3);
  });
  return {
    socket,
    received: () => received,
    until: (total) => (received >= total ? Promise.resolve() : new Promise((resolve) => (wanted = { total, resolve }))),
  };
};

/** Rank 0's listening server (resolves with the link once rank 1 connected) and its address. */
const rawServer = async (): Promise<{ address: string; link: Promise<RawLink> }> => {
  const server = createServer();
  const link = new Promise<RawLink>((resolve) => server.once("connection", (s) => (server.close(), resolve(rawLink(s)))));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return { address: `127.0.0.1:${port}`, link };
};

/**
 * The stricter baseline, as the collective reads (`onread`): each rank receives on a socket it
 * dialed, into one reused 4 MiB buffer (no buffer per read, no `data` events), and sends on the
 * one it accepted. Returns the listening half first (the peer's address comes later).
 */
const onreadServer = async (): Promise<{ address: string; link: (peer: string) => Promise<RawLink> }> => {
  const server = createServer();
  const accepted = new Promise<Socket>((resolve) => server.once("connection", (s) => (server.close(), resolve(s))));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  const link = async (peer: string): Promise<RawLink> => {
    const [host, peerPort] = peer.split(":") as [string, string];
    let received = 0;
    let wanted: { total: number; resolve: () => void } | undefined;
    const into = Buffer.allocUnsafeSlow(4 * 1024 * 1024);
    const dialed = connect({
      host,
      port: Number(peerPort),
      onread: {
        buffer: into,
        callback: (n: number) => {
          received += n;
          if (wanted !== undefined && received >= wanted.total) {
            const { resolve } = wanted;
            wanted = undefined;
            resolve();
          }
          return true;
        },
      },
    });
    dialed.on("error", (e) => {
      print({ event: "failed", name: e.name, message: `raw onread socket: ${e.message}` });
      process.exit(3);
    });
    await new Promise<void>((resolve) => dialed.once("connect", () => resolve()));
    const send = await accepted;
    send.setNoDelay(true);
    return {
      socket: send,
      received: () => received,
      until: (total) => (received >= total ? Promise.resolve() : new Promise((resolve) => (wanted = { total, resolve }))),
    };
  };
  return { address: `127.0.0.1:${port}`, link };
};

const rawConnect = (address: string): Promise<RawLink> =>
  new Promise((resolve, reject) => {
    const [host, port] = address.split(":") as [string, string];
    const s = connect({ host, port: Number(port) }, () => resolve(rawLink(s)));
    s.once("error", reject);
  });

// ---------------------------------------------------------------------------------------------
// allreduce mode
// ---------------------------------------------------------------------------------------------

const now = (): number => performance.now();
/** Milliseconds on CLOCK_MONOTONIC (`process.hrtime`), which every process of the machine shares. */
const monotonicMs = (): number => Number(process.hrtime.bigint()) / 1e6;

const allReduceMode = async (raw: RawLink | undefined, rawOnread: RawLink | undefined): Promise<void> => {
  const elements = args.elements ?? 0;
  const bytes = elements * 4;
  const buffer = new Float32Array(elements);
  const outgoing = Buffer.alloc(bytes, 1);
  const expected = (args.size * (args.size + 1)) / 2; // Σ (rank + 1), exact in float32
  const rounds = new Map<RawLink, number>();

  const allReduce = async (): Promise<{ ms: number; bytes: number }> => {
    buffer.fill(args.rank + 1);
    const before = collective.stats().bytesReceived;
    await collective.barrier();
    const t0 = now();
    await collective.allReduce(buffer, "sum");
    const ms = now() - t0;
    for (let i = 0; i < elements; i++) {
      if (buffer[i] !== expected) throw new Error(`rank ${args.rank}: element ${i} is ${buffer[i]} after the all-reduce; expected ${expected}`);
    }
    return { ms, bytes: collective.stats().bytesReceived - before };
  };
  const baseline = async (link: RawLink): Promise<{ ms: number; bytes: number }> => {
    const before = link.received();
    await collective.barrier();
    const t0 = now();
    const n = (rounds.get(link) ?? 0) + 1;
    rounds.set(link, n);
    link.socket.write(outgoing);
    await link.until(n * bytes);
    const ms = now() - t0;
    // The barrier of the next round waits for the other rank to have everything too.
    return { ms, bytes: link.received() - before };
  };

  const warmups = args.warmups ?? 0;
  const samples = args.samples ?? 0;
  const allReduceMs: number[] = [];
  const allReduceBytes: number[] = [];
  const rawMs: number[] = [];
  const rawBytes: number[] = [];
  const rawOnreadMs: number[] = [];
  const rawOnreadBytes: number[] = [];
  // The order rotates from sample to sample, so no variant always runs first.
  const variants = ["allReduce", "raw", "rawOnread"] as const;
  for (let i = 0; i < warmups + samples; i++) {
    const order = variants.map((_, k) => variants[(k + i) % variants.length] as (typeof variants)[number]);
    for (const which of order) {
      const link = which === "raw" ? raw : which === "rawOnread" ? rawOnread : undefined;
      if (which !== "allReduce" && link === undefined) continue;
      const r = link === undefined ? await allReduce() : await baseline(link);
      if (i < warmups) continue;
      (which === "raw" ? rawMs : which === "rawOnread" ? rawOnreadMs : allReduceMs).push(r.ms);
      (which === "raw" ? rawBytes : which === "rawOnread" ? rawOnreadBytes : allReduceBytes).push(r.bytes);
    }
  }
  await collective.barrier();
  print({ event: "samples", elements, allReduceMs, allReduceBytes, rawMs, rawBytes, rawOnreadMs, rawOnreadBytes });
  if (raw !== undefined && (args.smallSamples ?? 0) > 0) await smallExchanges(raw);
};

/**
 * The gradients' size, back to back and after an idle wait: an all-reduce (mean) of
 * `smallElements` float32 and the same bytes exchanged on the plain socket pair, each started
 * right after a barrier (back to back) or after a barrier and `idleMs` of sleep on both ranks
 * (as the rank that waits in a training step's all-reduce has slept). The four alternate in an
 * order that rotates from round to round; each timing is this rank's, to having everything.
 */
const smallExchanges = async (raw: RawLink): Promise<void> => {
  const elements = args.smallElements ?? 0;
  const bytes = elements * 4;
  const buffer = new Float32Array(elements);
  const outgoing = Buffer.alloc(bytes, 1);
  let expectedTotal = raw.received();
  const timings = { allReduceMs: [] as number[], rawMs: [] as number[], allReduceAfterIdleMs: [] as number[], rawAfterIdleMs: [] as number[] };
  const received = { allReduce: [] as number[], raw: [] as number[] };
  const variants = ["allReduce", "raw", "allReduceAfterIdle", "rawAfterIdle"] as const;
  for (let i = 0; i < (args.smallSamples ?? 0); i++) {
    for (let k = 0; k < variants.length; k++) {
      const which = variants[(k + i) % variants.length] as (typeof variants)[number];
      const isRaw = which === "raw" || which === "rawAfterIdle";
      buffer.fill(args.rank + 1);
      const before = isRaw ? raw.received() : collective.stats().bytesReceived;
      await collective.barrier();
      if (which.endsWith("AfterIdle")) await new Promise((resolve) => setTimeout(resolve, args.idleMs ?? 0));
      const t0 = now();
      if (isRaw) {
        expectedTotal += bytes;
        raw.socket.write(outgoing);
        await raw.until(expectedTotal);
      } else {
        await collective.allReduce(buffer, "mean");
      }
      timings[`${which}Ms`].push(now() - t0);
      if (isRaw) received.raw.push(raw.received() - before);
      else {
        received.allReduce.push(collective.stats().bytesReceived - before);
        if (buffer[0] !== 1.5 || buffer[elements - 1] !== 1.5) throw new Error(`rank ${args.rank}: the small all-reduce gave ${buffer[0]}; expected 1.5`);
      }
    }
  }
  await collective.barrier();
  print({ event: "small", elements, idleMs: args.idleMs ?? 0, ...timings, allReduceBytes: received.allReduce, rawBytes: received.raw });
};

// ---------------------------------------------------------------------------------------------
// train mode
// ---------------------------------------------------------------------------------------------

const trainMode = async (): Promise<void> => {
  await useBackend(args.backend ?? "wasm");
  tf.enableProdMode();
  const batch = args.batch ?? 128;
  const model = buildMlp();
  const timed = timedCollective(collective);
  const session = await tfjsSession({
    model,
    optimizer: mlpOptimizer(),
    data: new InMemoryDataSource({ ...mlpDataset(batch), batchSize: batch, seed: 5, shard: { index: args.rank, count: args.size } }),
    lossFn: mlpLoss,
    collective: timed.collective,
  });
  await session.variables.initialize();
  // What each step all-reduces: every trainable parameter's gradient, and the loss.
  const gradientElements = model.trainableWeights.reduce((n, w) => n + w.shape.reduce((a: number, b) => a * (b ?? 1), 1), 0) + 1;
  let steps = 0;
  const sample = mlpDataset(batch);
  const xs = tf.tensor((sample.xs as { data: Float32Array }).data.subarray(0, batch * 128), [batch, 128]);
  const ys = tf.tensor((sample.ys as { data: Int32Array }).data.subarray(0, batch), [batch], "int32");
  /** One step's local compute without the update: the gradients of a batch, flattened into `buffer`. */
  const localGradients = (buffer: Float32Array): void => {
    const { value, grads } = tf.variableGrads(() => mlpLoss(ys, model.apply(xs, { training: true }) as tf.Tensor));
    let offset = 0;
    for (const w of model.trainableWeights) {
      const g = grads[(w.read() as tf.Variable).name];
      if (g === undefined) throw new Error(`no gradient for ${w.name}`);
      buffer.set(g.dataSync() as Float32Array, offset);
      offset += g.size;
    }
    buffer[offset] = (value.dataSync() as Float32Array)[0] as number;
    tf.dispose([value, ...Object.values(grads)]);
  };
  print({ event: "model", parameters: gradientElements - 1, gradientElements, batch });
  for (;;) {
    const [command, count] = (await nextLine()).split(" ") as [string, string | undefined];
    const n = Number(count ?? "0");
    if (command === "train") {
      const stepMs: number[] = [];
      const computeMs: number[] = [];
      const entryMs: number[] = [];
      /** When each step ended, on CLOCK_MONOTONIC: one clock for every process of the machine. */
      const endMs: number[] = [];
      await collective.barrier();
      const t0 = now();
      for (let i = 0; i < n; i++) {
        timed.startStep();
        const s0 = now();
        await session.run("train");
        const ms = now() - s0;
        endMs.push(monotonicMs());
        stepMs.push(ms);
        computeMs.push(ms - timed.inCollectiveMs);
        entryMs.push(timed.entryEpochMs);
      }
      const wallMs = now() - t0;
      steps += n;
      print({ event: "trained", steps: n, examples: n * batch, stepMs, computeMs, entryMs, endMs, wallMs });
    } else if (command === "gradients") {
      const buffer = new Float32Array(gradientElements);
      const ms: number[] = [];
      const before = collective.stats().bytesReceived;
      for (let i = 0; i < n; i++) {
        buffer.fill(1);
        await collective.barrier();
        const t0 = now();
        await collective.allReduce(buffer, "mean");
        ms.push(now() - t0);
      }
      print({ event: "allreduced", samples: n, elements: gradientElements, ms, bytes: collective.stats().bytesReceived - before });
    } else if (command === "gradientsAfterCompute") {
      // The same all-reduce, entered the way a training step enters it: right after one step's
      // local compute (forward and backward on a batch, the gradients packed into the buffer),
      // with caches and the idle peer as the step leaves them. Nothing is applied.
      const buffer = new Float32Array(gradientElements);
      const ms: number[] = [];
      const entryMs: number[] = [];
      const before = collective.stats().bytesReceived;
      for (let i = 0; i < n; i++) {
        await collective.barrier();
        localGradients(buffer);
        const t0 = now();
        entryMs.push(performance.timeOrigin + t0);
        await collective.allReduce(buffer, "mean");
        ms.push(now() - t0);
      }
      print({ event: "allreducedAfterCompute", samples: n, elements: gradientElements, ms, entryMs, bytes: collective.stats().bytesReceived - before });
    } else if (command === "exit") {
      const digest = createHash("sha256");
      for (const w of model.getWeights()) digest.update(Buffer.from((w.dataSync() as Float32Array).buffer));
      const globalStep = Number((session.variables.snapshot().get("global_step")?.data as BigInt64Array | undefined)?.[0] ?? -1n);
      print({ event: "done", steps, globalStep, digest: digest.digest("hex") });
      return;
    } else throw new Error(`unknown command "${command}"`);
  }
};

/**
 * The collective the session trains with, timed: per step, the time spent inside collective
 * calls (the rest of the step is local compute) and when the step's first all-reduce was
 * entered, on the machine's wall clock (`timeOrigin + now()`, comparable across the ranks'
 * processes), so the benchmark can tell the ranks' skew from the collective's own cost.
 */
const timedCollective = (inner: Collective) => {
  let inCollectiveMs = 0;
  let entryEpochMs = Number.NaN;
  const time = async <T>(call: () => Promise<T>, entry: boolean): Promise<T> => {
    const t0 = now();
    if (entry && Number.isNaN(entryEpochMs)) entryEpochMs = performance.timeOrigin + t0;
    try {
      return await call();
    } finally {
      inCollectiveMs += now() - t0;
    }
  };
  const wrapper: Collective = {
    rank: inner.rank,
    size: inner.size,
    get tasks() {
      return inner.tasks;
    },
    get stopVote() {
      return inner.stopVote;
    },
    allReduce: (buffer, op, options) => time(() => inner.allReduce(buffer, op, options), true),
    broadcast: (buffer, root, options) => time(() => inner.broadcast(buffer, root, options), false),
    barrier: (options) => time(() => inner.barrier(options), false),
    onPeerFailed: (task, error) => inner.onPeerFailed(task, error),
    close: () => inner.close(),
  };
  return {
    collective: wrapper,
    /** Resets the per-step figures. */
    startStep(): void {
      inCollectiveMs = 0;
      entryEpochMs = Number.NaN;
    },
    get inCollectiveMs(): number {
      return inCollectiveMs;
    },
    /** When this step's first all-reduce was entered (epoch ms); NaN if it made none. */
    get entryEpochMs(): number {
      return entryEpochMs;
    },
  };
};

// ---------------------------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------------------------

const main = async (): Promise<void> => {
  const useRaw = args.mode === "allreduce" && args.raw === true;
  const served = useRaw && args.rank === 0 ? await rawServer() : undefined;
  const onread = useRaw ? await onreadServer() : undefined;
  print({ event: "listening", collective: await collective.listen(), raw: served?.address, rawOnread: onread?.address });
  const peers = JSON.parse(await nextLine()) as { collective: string[]; raw?: string; rawOnread?: string[] };
  await collective.connect(peers.collective);
  const raw = !useRaw ? undefined : served !== undefined ? await served.link : await rawConnect(peers.raw as string);
  const rawOnread = onread === undefined ? undefined : await onread.link(peers.rawOnread?.[1 - args.rank] as string);
  print({ event: "ready" });
  if (args.mode === "allreduce") await allReduceMode(raw, rawOnread);
  else await trainMode();
  raw?.socket.end();
  rawOnread?.socket.end();
  await collective.close();
  process.exit(0);
};

main().catch((e: unknown) => {
  print({ event: "failed", name: (e as Error).name, message: (e as Error).message });
  process.exit(3);
});
