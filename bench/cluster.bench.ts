/**
 * The collective and data-parallel training across processes on loopback, in one run. Every
 * rank is its own process (bench/collectiveRank.ts); the numbers (see docs/performance.md,
 * "Collective"):
 *
 * - `allReduceOverRawTcp`: an all-reduce (sum, reduction included) of 4 Mi float32 (16 MiB)
 *   between 2 processes over TcpCollective, against the baseline: the same 2 processes send the
 *   same 16 MiB to each other at once on one plain loopback socket pair. 2 warm-ups, then ≥ 10
 *   rounds of both, interleaved (ABBA). A sample's time is the slower rank's, from leaving a
 *   barrier to having everything; the ratio is of the medians. `allReduceOverRawTcpOnread` is the
 *   same all-reduce over a stricter baseline measured in the same rounds: the same exchange read
 *   the way the collective reads (each rank receives on a socket it dialed, with `onread` into
 *   one reused buffer: no buffer per read, no `data` events). The three alternate in an order
 *   that rotates from round to round.
 * - `gradientAllReduceOverRawTcp` and `gradientAllReduceOverRawTcpAfterIdle`: the same
 *   comparison at the gradients' size (101,387 float32), in the same 2 processes after the 16 MiB
 *   rounds: an all-reduce (mean) against the plain exchange of the same bytes, each started right
 *   after a barrier (back to back) or after a barrier and `idleMs` of sleep on both ranks; the
 *   four alternate in a rotating order, ratios of the medians (`gradientSize` holds the times).
 * - `allReduceBusGBps`: size × 2(N−1)/N ÷ time (NCCL's bus bandwidth) at 2 and 4 processes; the
 *   bound is the baseline's throughput (16 MiB ÷ its median time), in the same run.
 * - `scaling2`: examples per second (the global batch) of an MLP 128 → 256 → 256 → 10
 *   (bench/mlpJob.ts) trained by `monitored-session launch --workers 2` over the same job and
 *   per-worker batch under `launch --workers 1`: the rates the chief's step counter logs
 *   (`examples/sec`, the global batch), the first interval of each run (warm-up) left out; runs
 *   alternate N = 1 and N = 2 (ABBA), and the result is the median of the per-pair ratios of the
 *   runs' medians. `scaling2Ranks` is the same ratio for the ranks this benchmark drives itself
 *   (bench/collectiveRank.ts, no CLI): the collective's scaling without `run`'s machinery.
 * - `collectiveOverheadUs`: per step at N = 2, the group's step time − the slower rank's local
 *   compute at that step (its step minus its time inside collective calls) − the all-reduce
 *   alone (the median all-reduce, "mean", of the gradients' size measured by the N = 2
 *   processes); the median over the timed steps after each round's first, in µs. The group's
 *   step ends when its last rank ends it; its step time runs from the end of the group's step
 *   before (stamps on CLOCK_MONOTONIC, which the processes share), so the mean step time is the
 *   wall time per step. `collectiveOverheadSlowerRankUs` keeps the definition of runs F–N, which
 *   took the slower rank's own step (its start to its end) as the group's step: the ranks start
 *   and end their steps at different moments, differently at every step, so the larger of the
 *   two durations exceeds the group's step time (by 76–108 µs at the median in runs O and P).
 *   A rank that finished its compute first waits for the other inside the all-reduce: that wait is the ranks' skew, not the
 *   collective's cost, so it is reported apart: `rankSkewUs`, the median over steps of how far
 *   apart the ranks entered the step's all-reduce (wall clock, shared by the processes).
 *   `collectiveOverheadPairMediansUs` keeps the earlier definition: the median step at N = 2 −
 *   (the median local step + the median all-reduce), the local step that of two independent
 *   groups of 1 trained at the same time (`pair`: the same two training processes on the
 *   machine, without the group); it counts the skew. `collectiveOverheadVsAloneUs` takes the
 *   N = 1 process alone instead, so it also counts the two processes' contention.
 *   `collectiveOverheadAfterComputeUs` is the per-step figure against the all-reduce entered the
 *   way a step enters it (`gradientAllReduceAfterComputeMs`: a barrier, one step's local compute
 *   of the gradients on both ranks, then the all-reduce; per sample the time of the rank that
 *   entered last).
 *   Rounds run N = 1, N = 2 and the pair in an order that rotates from round to round.
 *
 * Equal work is checked, not assumed: the payload bytes each rank received in each sample, the
 * sample and step counts, the global steps and the replicas' digests; the benchmark fails when
 * they differ. `BENCH_CLUSTER_SMOKE=1` runs small sizes and few samples (for the test), and says
 * so in the JSON (`smoke: true`).
 */

import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type ChildEvent, type JsonChild, killAll, spawnJsonChild } from "./jsonChild.js";
import { median, round } from "./stats.js";

/** How much to measure. */
export interface ClusterBenchSizes {
  readonly smoke: boolean;
  /** float32 elements of the all-reduce (a multiple of 4, so that every rank gets equal segments). */
  readonly elements: number;
  readonly warmups: number;
  /** Interleaved samples of the all-reduce and the baseline (2 ranks), and of the all-reduce at 4 ranks. */
  readonly samples: number;
  /** Per-worker batch of the MLP. */
  readonly batch: number;
  readonly warmupSteps: number;
  readonly rounds: number;
  readonly stepsPerRound: number;
  /** All-reduces of the gradients' size. */
  readonly gradientSamples: number;
  /** Rounds of the gradients' size between 2 processes: all-reduce and plain exchange, back to back and after `idleMs` idle. */
  readonly smallSamples: number;
  readonly idleMs: number;
  /** Pairs of `launch` runs (N = 1 and N = 2) for `scaling2`. */
  readonly launchPairs: number;
  /** Steps of each `launch` run, and the chief's step-counter interval (the first is the warm-up). */
  readonly launchSteps: number;
  readonly launchLogSteps: number;
}

const FULL: ClusterBenchSizes = {
  smoke: false,
  elements: 4 * 1024 * 1024,
  warmups: 2,
  samples: 11,
  batch: 128,
  warmupSteps: 20,
  rounds: 6,
  stepsPerRound: 200,
  gradientSamples: 1200,
  smallSamples: 200,
  idleMs: 20,
  launchPairs: 3,
  launchSteps: 700,
  launchLogSteps: 100,
};

/** Small sizes and few samples: the shape of the result, not its numbers. */
export const SMOKE: ClusterBenchSizes = {
  smoke: true,
  elements: 16 * 1024,
  warmups: 1,
  samples: 3,
  batch: 16,
  warmupSteps: 2,
  rounds: 2,
  stepsPerRound: 3,
  gradientSamples: 4,
  smallSamples: 3,
  idleMs: 2,
  launchPairs: 1,
  launchSteps: 6,
  launchLogSteps: 2,
};

const BACKEND = "wasm"; // one thread (useBackend pins it)
/** What each training step all-reduces (bench/collectiveRank.ts): the MLP's 101,386 parameters' gradients and the loss. */
const GRADIENT_ELEMENTS = 128 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10 + 1;
const REPO_ROOT = fileURLToPath(new URL("..", import.meta.url));
/** Loading tsx, tfjs and wasm in several processes at once on a shared 2-core machine. */
const LOAD_BOUND_MS = 240_000;
/** The most one phase may take (a full-size phase is ~1 min on a quiet 2-core machine). */
const PHASE_BOUND_MS = 900_000;
const CHILD_DEADLINE_MS = 1_800_000;

const summarize = (xs: readonly number[], digits = 3) => ({ median: round(median(xs), digits), samples: xs.map((x) => round(x, digits)) });

/** Fails the benchmark unless every named count equals `expected`. */
const sameWork = (what: string, expected: number, counts: Record<string, readonly number[]>): void => {
  for (const [name, xs] of Object.entries(counts)) {
    const bad = xs.findIndex((x) => x !== expected);
    if (bad >= 0) throw new Error(`unequal work in ${what}: ${name}[${bad}] is ${xs[bad]}, expected ${expected}; the comparison would be unfair`);
  }
};

/** `size` ranks of `mode`, listening, given each other's addresses, connected. */
const group = async (mode: "allreduce" | "train", size: number, extra: Record<string, unknown>, children: JsonChild[]): Promise<JsonChild[]> => {
  const ranks = Array.from({ length: size }, (_, rank) => spawnJsonChild("bench/collectiveRank.ts", { mode, rank, size, deadlineMs: CHILD_DEADLINE_MS, ...extra }));
  children.push(...ranks);
  const listening = await Promise.all(ranks.map((c) => c.next("listening", LOAD_BOUND_MS)));
  const peers = { collective: listening.map((e) => e.collective as string), raw: listening[0]?.raw, rawOnread: listening.map((e) => e.rawOnread as string | undefined) };
  for (const c of ranks) c.send(JSON.stringify(peers));
  await Promise.all(ranks.map((c) => c.next("ready", LOAD_BOUND_MS)));
  return ranks;
};

/** Per-sample `combine` over the ranks' `field` arrays. */
const perSample = (events: readonly ChildEvent[], field: string, combine: (xs: number[]) => number): number[] => {
  const rows = events.map((e) => e[field] as number[]);
  return (rows[0] ?? []).map((_, i) => combine(rows.map((r) => r[i] as number)));
};

/** Per-sample maximum over the ranks' `field` arrays (a sample ends when the slowest rank is done). */
const slowest = (events: readonly ChildEvent[], field: string): number[] => perSample(events, field, (xs) => Math.max(...xs));

/** Per sample, the `field` of the rank that entered last (the largest `entryField`): what the all-reduce cost the rank nobody waited for. */
const ofLastEntered = (events: readonly ChildEvent[], field: string, entryField: string): number[] => {
  const entries = events.map((e) => e[entryField] as number[]);
  return (events[0]?.[field] as number[] | undefined ?? []).map((_, i) => {
    const last = entries.reduce((best, row, r) => ((row[i] as number) > (entries[best]?.[i] as number) ? r : best), 0);
    return (events[last]?.[field] as number[])[i] as number;
  });
};

/** Per-sample max − min over the ranks' `field` arrays. */
const spread = (events: readonly ChildEvent[], field: string): number[] => perSample(events, field, (xs) => Math.max(...xs) - Math.min(...xs));

const allReduces = async (size: number, sizes: ClusterBenchSizes, children: JsonChild[]) => {
  const raw = size === 2;
  const small = raw ? { smallElements: GRADIENT_ELEMENTS, smallSamples: sizes.smallSamples, idleMs: sizes.idleMs } : {};
  const ranks = await group("allreduce", size, { elements: sizes.elements, warmups: sizes.warmups, samples: sizes.samples, raw, ...small }, children);
  const events = await Promise.all(ranks.map((c) => c.next("samples", PHASE_BOUND_MS)));
  const smallEvents = raw ? await Promise.all(ranks.map((c) => c.next("small", PHASE_BOUND_MS))) : [];
  const bytes = sizes.elements * 4;
  const received = (bytes * 2 * (size - 1)) / size;
  sameWork(`the all-reduce at ${size} ranks (payload bytes received per rank and sample)`, received, Object.fromEntries(events.map((e, r) => [`rank ${r} allReduceBytes`, e.allReduceBytes as number[]])));
  sameWork(`the all-reduce at ${size} ranks (samples per rank)`, sizes.samples, Object.fromEntries(events.map((e, r) => [`rank ${r}`, [(e.allReduceMs as number[]).length]])));
  if (raw) {
    // The baseline must move what the all-reduce moved: at 2 ranks, the whole buffer each way.
    sameWork("the baseline (payload bytes received per rank and sample)", received, Object.fromEntries(events.map((e, r) => [`rank ${r} rawBytes`, e.rawBytes as number[]])));
    sameWork("the baseline (samples per rank)", sizes.samples, Object.fromEntries(events.map((e, r) => [`rank ${r}`, [(e.rawMs as number[]).length]])));
    sameWork("the onread baseline (payload bytes received per rank and sample)", received, Object.fromEntries(events.map((e, r) => [`rank ${r} rawOnreadBytes`, e.rawOnreadBytes as number[]])));
    sameWork("the onread baseline (samples per rank)", sizes.samples, Object.fromEntries(events.map((e, r) => [`rank ${r}`, [(e.rawOnreadMs as number[]).length]])));
    // At the gradients' size, each rank receives the whole buffer in both, back to back and after idling.
    const smallBytes = GRADIENT_ELEMENTS * 4;
    for (const field of ["allReduceBytes", "rawBytes"]) {
      sameWork(`the gradients' size, ${field} (payload bytes received per rank and sample)`, smallBytes, Object.fromEntries(smallEvents.map((e, r) => [`rank ${r}`, e[field] as number[]])));
      sameWork(`the gradients' size, ${field} (samples per rank)`, 2 * sizes.smallSamples, Object.fromEntries(smallEvents.map((e, r) => [`rank ${r}`, [(e[field] as number[]).length]])));
    }
  }
  await killAll(ranks);
  const gradientSize = raw
    ? {
        elements: GRADIENT_ELEMENTS,
        idleMs: sizes.idleMs,
        allReduceMs: slowest(smallEvents, "allReduceMs"),
        rawMs: slowest(smallEvents, "rawMs"),
        allReduceAfterIdleMs: slowest(smallEvents, "allReduceAfterIdleMs"),
        rawAfterIdleMs: slowest(smallEvents, "rawAfterIdleMs"),
      }
    : undefined;
  return { allReduceMs: slowest(events, "allReduceMs"), rawMs: raw ? slowest(events, "rawMs") : [], rawOnreadMs: raw ? slowest(events, "rawOnreadMs") : [], bytes, receivedPerRank: received, gradientSize };
};

const training = async (sizes: ClusterBenchSizes, children: JsonChild[]) => {
  const common = { backend: BACKEND, batch: sizes.batch };
  // `pair`: two independent groups of 1 trained at the same time, the local step under the same
  // contention as the N = 2 group (two training processes on the machine's 2 cores).
  const [one, two, pairA, pairB] = await Promise.all([
    group("train", 1, common, children),
    group("train", 2, common, children),
    group("train", 1, common, children),
    group("train", 1, common, children),
  ]);
  const pair = [...pairA, ...pairB];
  const all = [...one, ...two, ...pair];
  const models = await Promise.all(all.map((c) => c.next("model", LOAD_BOUND_MS)));
  const gradientElements = models[0]?.gradientElements as number;
  if (gradientElements !== GRADIENT_ELEMENTS) throw new Error(`the model all-reduces ${gradientElements} elements per step, but the gradients' size measured beside the 16 MiB all-reduce is ${GRADIENT_ELEMENTS}`);
  const trainAll = async (ranks: readonly JsonChild[], steps: number): Promise<ChildEvent[]> => {
    for (const c of ranks) c.send(`train ${steps}`);
    return Promise.all(ranks.map((c) => c.next("trained", PHASE_BOUND_MS)));
  };
  await trainAll(one, sizes.warmupSteps);
  await trainAll(two, sizes.warmupSteps);
  await trainAll(pair, sizes.warmupSteps);
  const perSecond: Record<1 | 2, number[]> = { 1: [], 2: [] };
  const stepMs: Record<1 | 2 | "pair", number[]> = { 1: [], 2: [], pair: [] };
  /**
   * Per step at N = 2: the slower rank's local compute, and how far apart the ranks entered the
   * all-reduce; and per step after a round's first, the group's step time (from the end of the
   * group's step before, when its last rank ended it, to the end of this one) with the slower
   * rank's local compute at that step.
   */
  const group2 = { maxComputeMs: [] as number[], entrySkewMs: [] as number[], stepMs: [] as number[], stepComputeMs: [] as number[] };
  const examples: Record<1 | 2 | "pair", number> = { 1: 0, 2: 0, pair: 0 };
  const variants = [1, 2, "pair"] as const;
  for (let r = 0; r < sizes.rounds; r++) {
    // The order rotates from round to round, so no variant always runs first.
    const order = variants.map((_, i) => variants[(i + r) % variants.length] as 1 | 2 | "pair");
    for (const n of order) {
      const events = await trainAll(n === 1 ? one : n === 2 ? two : pair, sizes.stepsPerRound);
      const global = events.reduce((sum, e) => sum + (e.examples as number), 0); // the global batch × steps
      examples[n] += global;
      if (n !== "pair") perSecond[n].push(global / (Math.max(...events.map((e) => e.wallMs as number)) / 1000));
      stepMs[n].push(...slowest(events, "stepMs"));
      if (n === 2) {
        const maxComputeMs = slowest(events, "computeMs");
        group2.maxComputeMs.push(...maxComputeMs);
        group2.entrySkewMs.push(...spread(events, "entryMs"));
        const ends = slowest(events, "endMs");
        for (let i = 1; i < ends.length; i++) {
          const ms = (ends[i] as number) - (ends[i - 1] as number);
          if (!(ms > 0)) throw new Error(`the group's step ${i} ended ${ms} ms after the one before it; the ranks' CLOCK_MONOTONIC stamps are broken`);
          group2.stepMs.push(ms);
          group2.stepComputeMs.push(maxComputeMs[i] as number);
        }
      }
    }
  }
  for (const c of two) c.send(`gradients ${sizes.gradientSamples}`);
  const reduced = await Promise.all(two.map((c) => c.next("allreduced", PHASE_BOUND_MS)));
  for (const c of two) c.send(`gradientsAfterCompute ${sizes.gradientSamples}`);
  const reducedAfterCompute = await Promise.all(two.map((c) => c.next("allreducedAfterCompute", PHASE_BOUND_MS)));
  for (const c of all) c.send("exit");
  const done = await Promise.all(all.map((c) => c.next("done", PHASE_BOUND_MS)));
  await killAll(all);

  const steps = sizes.warmupSteps + sizes.rounds * sizes.stepsPerRound;
  sameWork("training (steps and global step per process)", steps, Object.fromEntries(done.map((e, i) => [`process ${i}`, [e.steps as number, e.globalStep as number]])));
  sameWork("training (timed steps per variant)", sizes.rounds * sizes.stepsPerRound, {
    "N=1": [stepMs[1].length],
    "N=2": [stepMs[2].length],
    "N=1 pair": [stepMs.pair.length],
    "N=2 local compute": [group2.maxComputeMs.length],
    "N=2 steps with an all-reduce on every rank": [group2.entrySkewMs.filter(Number.isFinite).length],
  });
  sameWork("training (N=2 group step times: each round's steps after its first)", sizes.rounds * (sizes.stepsPerRound - 1), { "N=2": [group2.stepMs.length, group2.stepComputeMs.length] });
  sameWork("training (examples per worker)", sizes.rounds * sizes.stepsPerRound * sizes.batch, { "N=1": [examples[1]], "N=2": [examples[2] / 2], "N=1 pair": [examples.pair / 2] });
  sameWork("the gradients' all-reduce (samples, payload bytes per rank)", sizes.gradientSamples, {
    samples: reduced.map((e) => (e.ms as number[]).length),
    bytesPerSample: reduced.map((e) => (e.bytes as number) / (gradientElements * 4)),
  });
  sameWork("the gradients' all-reduce after compute (samples, payload bytes per rank)", sizes.gradientSamples, {
    samples: reducedAfterCompute.map((e) => (e.ms as number[]).length),
    bytesPerSample: reducedAfterCompute.map((e) => (e.bytes as number) / (gradientElements * 4)),
  });
  if (done[1]?.digest !== done[2]?.digest) throw new Error(`the N=2 replicas ended with different weights (${String(done[1]?.digest)} and ${String(done[2]?.digest)})`);
  return {
    parameters: models[0]?.parameters as number,
    gradientElements,
    steps,
    perSecond,
    stepMs,
    group2,
    gradientMs: slowest(reduced, "ms"),
    gradientAfterComputeMs: ofLastEntered(reducedAfterCompute, "ms", "entryMs"),
    examples,
  };
};

/**
 * One `launch --workers <workers>` run of bench/mlpJob.ts in `dir` (a fresh checkpoint
 * directory: from step 0): the chief's logged examples/sec after the first interval. Fails
 * unless launch exits 0 with every task done at the last step.
 */
const launchRun = async (workers: 1 | 2, sizes: ClusterBenchSizes, dir: string): Promise<number[]> => {
  const config = join(dir, "job.yaml");
  writeFileSync(
    config,
    `module: ${join(REPO_ROOT, "bench/mlpJob.ts")}\nlastStep: ${sizes.launchSteps}\nlogStepCountSteps: ${sizes.launchLogSteps}\ncheckpoint:\n  dir: ck\n  saveSecs: 1000000\ntfjs:\n  backend: ${BACKEND}\n`,
  );
  const child = spawn(process.execPath, ["--import", "tsx", "src/cli/main.ts", "launch", "--workers", String(workers), config], {
    cwd: REPO_ROOT,
    env: { ...process.env, BENCH_MLP_BATCH: String(sizes.batch), NO_COLOR: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.on("data", (d: Buffer) => (output += d.toString()));
  child.stderr.on("data", (d: Buffer) => (output += d.toString()));
  const timer = setTimeout(() => child.kill("SIGKILL"), PHASE_BOUND_MS);
  const code = await new Promise<number | null>((ok) => child.on("close", ok));
  clearTimeout(timer);
  const tail = output.split("\n").slice(-15).join("\n");
  if (code !== 0) throw new Error(`launch --workers ${workers} exited with ${code}:\n${tail}`);
  const done = output.match(new RegExp(`^\\[(chief|worker):\\d+\\] INFO Done at global step ${sizes.launchSteps}\\.$`, "gm")) ?? [];
  if (done.length !== workers) throw new Error(`launch --workers ${workers}: ${done.length} tasks reached step ${sizes.launchSteps}, expected ${workers}:\n${tail}`);
  const rates = [...output.matchAll(/^\[chief:0\] INFO examples\/sec: ([0-9.e+]+)$/gm)].map((m) => Number(m[1]));
  return rates.slice(1);
};

/** `scaling2` through the CLI: pairs of `launch --workers 1` and `--workers 2` runs (ABBA). */
const scalingByLaunch = async (sizes: ClusterBenchSizes) => {
  const root = mkdtempSync(join(os.tmpdir(), "ms-bench-scaling-"));
  try {
    const perSecond: Record<1 | 2, number[][]> = { 1: [], 2: [] };
    for (let p = 0; p < sizes.launchPairs; p++) {
      const order: (1 | 2)[] = p % 2 === 0 ? [1, 2] : [2, 1];
      for (const n of order) {
        const dir = join(root, `pair${p}-n${n}`);
        mkdirSync(dir);
        perSecond[n].push(await launchRun(n, sizes, dir));
        console.log(`launch --workers ${n} (pair ${p + 1}): ${round(median(perSecond[n].at(-1) as number[]), 1)} examples/sec`);
      }
    }
    // Equal work: every run trained the same steps (checked in launchRun) and logged as many intervals.
    // The counter logs at the end of each interval but the first (its start), and the first logged one holds the warm-up.
    const intervals = sizes.launchSteps / sizes.launchLogSteps - 2;
    sameWork("the launch runs (examples/sec intervals after the warm-up, per run)", intervals, { "N=1": perSecond[1].map((r) => r.length), "N=2": perSecond[2].map((r) => r.length) });
    const ratios = perSecond[2].map((r, i) => median(r) / median(perSecond[1][i] as number[]));
    return { perSecond: { 1: perSecond[1].map(median), 2: perSecond[2].map(median) }, ratios, intervals };
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
};

const gbps = (bytes: number, ms: number): number => bytes / (ms / 1000) / 1e9;

/** Runs the benchmark at `sizes` and returns its JSON. */
export const runClusterBench = async (sizes: ClusterBenchSizes) => {
  const loadBefore = os.loadavg().map((x) => round(x, 2));
  const children: JsonChild[] = [];
  try {
    const two = await allReduces(2, sizes, children);
    console.log(`all-reduce at 2 ranks: ${round(median(two.allReduceMs), 2)} ms, baseline ${round(median(two.rawMs), 2)} ms, onread baseline ${round(median(two.rawOnreadMs), 2)} ms`);
    const small = two.gradientSize as NonNullable<typeof two.gradientSize>;
    console.log(`the gradients' size at 2 ranks: all-reduce ${round(median(small.allReduceMs), 3)} ms, exchange ${round(median(small.rawMs), 3)} ms; after ${small.idleMs} ms idle ${round(median(small.allReduceAfterIdleMs), 3)} / ${round(median(small.rawAfterIdleMs), 3)} ms`);
    const four = await allReduces(4, sizes, children);
    console.log(`all-reduce at 4 ranks: ${round(median(four.allReduceMs), 2)} ms`);
    const train = await training(sizes, children);
    const launched = await scalingByLaunch(sizes);

    const ratio = median(two.allReduceMs) / median(two.rawMs);
    const ratioOnread = median(two.allReduceMs) / median(two.rawOnreadMs);
    const bus = (n: number, ms: readonly number[]) => ({ ranks: n, ...summarize(ms.map((t) => gbps((two.bytes * 2 * (n - 1)) / n, t))) });
    const scalingRanks = train.perSecond[2].map((x, i) => x / (train.perSecond[1][i] as number));
    const scaling = launched.ratios;
    // Per step at N = 2: the group's step time (end to end of the group's steps) − the slower
    // rank's local compute at that step − the all-reduce alone. Waiting for the other rank is
    // skew, reported apart.
    const gradientMs = median(train.gradientMs);
    /** The median over steps of `stepMs[i]` − `computeMs[i]` − `allReduceMs`, in µs. */
    const overheadUsOf = (stepMs: readonly number[], computeMs: readonly number[], allReduceMs: number): number =>
      median(stepMs.map((step, i) => step - (computeMs[i] as number) - allReduceMs)) * 1000;
    const overheadUs = overheadUsOf(train.group2.stepMs, train.group2.stepComputeMs, gradientMs);
    // Runs F–N: the slower rank's own step (its start to its end) as the group's step.
    const overheadSlowerRankUs = overheadUsOf(train.stepMs[2], train.group2.maxComputeMs, gradientMs);
    const skewUs = median(train.group2.entrySkewMs) * 1000;
    // The earlier definition, from medians: the local step is the pair's (the same two-process
    // contention as N = 2, without the group); it counts the ranks' skew as overhead.
    const overheadPairMediansUs = (median(train.stepMs[2]) - (median(train.stepMs.pair) + gradientMs)) * 1000;
    const overheadVsAloneUs = (median(train.stepMs[2]) - (median(train.stepMs[1]) + median(train.gradientMs))) * 1000;
    // The same, against the all-reduce entered as a step enters it (after the local compute):
    // what the cluster machinery costs beyond the all-reduce in the state a step leaves it in.
    const gradientAfterComputeMs = median(train.gradientAfterComputeMs);
    const overheadAfterComputeUs = overheadUsOf(train.group2.stepMs, train.group2.stepComputeMs, gradientAfterComputeMs);
    return {
      smoke: sizes.smoke,
      loadAverage: { before: loadBefore, after: os.loadavg().map((x) => round(x, 2)) },
      sizes,
      allReduceOverRawTcp: round(ratio, 3),
      allReduceOverRawTcpOnread: round(ratioOnread, 3),
      allReduceBusGBps: {
        ranks2: bus(2, two.allReduceMs),
        ranks4: bus(4, four.allReduceMs),
        boundGBps: round(gbps(two.bytes, median(two.rawMs)), 3),
        boundOnreadGBps: round(gbps(two.bytes, median(two.rawOnreadMs)), 3),
      },
      scaling2: round(median(scaling), 3),
      scaling2Ranks: round(median(scalingRanks), 3),
      collectiveOverheadUs: round(overheadUs, 1),
      collectiveOverheadSlowerRankUs: round(overheadSlowerRankUs, 1),
      rankSkewUs: round(skewUs, 1),
      collectiveOverheadPairMediansUs: round(overheadPairMediansUs, 1),
      collectiveOverheadVsAloneUs: round(overheadVsAloneUs, 1),
      collectiveOverheadAfterComputeUs: round(overheadAfterComputeUs, 1),
      gradientAllReduceOverRawTcp: round(median(small.allReduceMs) / median(small.rawMs), 3),
      gradientAllReduceOverRawTcpAfterIdle: round(median(small.allReduceAfterIdleMs) / median(small.rawAfterIdleMs), 3),
      gradientSize: {
        elements: small.elements,
        bytes: small.elements * 4,
        idleMs: small.idleMs,
        samples: small.allReduceMs.length,
        allReduceMs: summarize(small.allReduceMs),
        rawTcpMs: summarize(small.rawMs),
        allReduceAfterIdleMs: summarize(small.allReduceAfterIdleMs),
        rawTcpAfterIdleMs: summarize(small.rawAfterIdleMs),
      },
      allReduce: {
        bytes: two.bytes,
        ranks2Ms: summarize(two.allReduceMs),
        rawTcpMs: summarize(two.rawMs),
        rawTcpOnreadMs: summarize(two.rawOnreadMs),
        ranks4Ms: summarize(four.allReduceMs),
        payloadBytesReceivedPerRank: { ranks2: two.receivedPerRank, rawTcp: two.bytes, ranks4: four.receivedPerRank },
      },
      training: {
        model: "MLP 128-256-256-10, Adam, tfjsSession({ collective }) over TcpCollective",
        backend: `${BACKEND} (1 thread)`,
        parameters: train.parameters,
        batchPerWorker: sizes.batch,
        stepsPerProcess: train.steps,
        timedStepsPerVariant: train.stepMs[1].length,
        examplesPerSecond: { n1: summarize(train.perSecond[1], 1), n2: summarize(train.perSecond[2], 1) },
        scalingPerRound: scalingRanks.map((x) => round(x, 3)),
        stepMs: { n1: round(median(train.stepMs[1]), 3), n2: round(median(train.stepMs[2]), 3), n1Pair: round(median(train.stepMs.pair), 3) },
        n2MaxComputeMs: round(median(train.group2.maxComputeMs), 3),
        n2GroupStepMs: round(median(train.group2.stepMs), 3),
        n2OverheadSteps: train.group2.stepMs.length,
        gradientAllReduceMs: round(median(train.gradientMs), 3),
        gradientAllReduceSamples: train.gradientMs.length,
        gradientAllReduceAfterComputeMs: round(gradientAfterComputeMs, 3),
        gradientAllReduceAfterComputeSamples: train.gradientAfterComputeMs.length,
      },
      launch: {
        job: "bench/mlpJob.ts (the same MLP, data and per-worker batch) under monitored-session launch",
        stepsPerRun: sizes.launchSteps,
        intervalsPerRun: launched.intervals,
        examplesPerSecond: { n1: summarize(launched.perSecond[1], 1), n2: summarize(launched.perSecond[2], 1) },
        scalingPerPair: launched.ratios.map((x) => round(x, 3)),
      },
      goals: { allReduceOverRawTcp: "<= 1.3", scaling2: ">= 1.5", collectiveOverheadUs: "<= 200" },
      bars: { allReduceOverRawTcp: "<= 1.5" },
      goalsMet: { allReduceOverRawTcp: ratio <= 1.3, scaling2: median(scaling) >= 1.5, collectiveOverheadUs: overheadUs <= 200 },
      barsMet: { allReduceOverRawTcp: ratio <= 1.5 },
    };
  } finally {
    await killAll(children);
  }
};

export default (): Promise<Record<string, unknown>> => runClusterBench(process.env.BENCH_CLUSTER_SMOKE === "1" ? SMOKE : FULL);
