/**
 * Preemption latency on the real workload: the bundled TensorFlow.js job run by the
 * `monitored-session` command (node directly) with TensorFlow's default checkpoint cadence,
 * `saveSecs: 600`, so no periodic save helps. Each of `RUNS` children is sent SIGTERM at a
 * random moment 1–5 s into its training (the first second is TensorFlow.js's warm-up, whose
 * slow first steps would dominate the event-loop percentiles of short runs);
 * `signalToExitMs` is the time from `kill()` to the child's exit,
 * measured by this process. Every run must exit 42 with a preemption checkpoint, or the
 * benchmark fails.
 *
 * Two ways of running the command, interleaved run by run so that both see the same machine:
 * - `installed`: compiled JavaScript run by plain node, as the installed bin (`npx
 *   monitored-session`) runs it; the package, the bundled job and the probe are compiled with
 *   the project's build settings into bench/.installed/ (git-ignored) before the runs. The goal is checked on this way.
 * - `tsx`: src/cli/main.ts through tsx, as `npm start` runs it from a clone.
 *
 * For the goal (max ≤ one step + one save + 50 ms) it also reports the median step time
 * (training time before the signal over the steps trained, per run) and the median time of one
 * durable save of the bundled model's variables (through `CheckpointManager`, in this process),
 * and the children's event-loop delay while training (p99, from bench/probe.ts). The exit
 * includes Node's own teardown after the `exit` event: that part is Node's, and
 * `nodeTeardownMs` measures it for each way (bench/teardownChild.ts, median of 7).
 *
 * Beside them, the cluster's figures (bench/clusterPreemption.ts): `agreementSteps` and
 * `agreementMs`, SIGTERM to one of 4 tasks of `launch --workers 4` running bench/preemptionLoop.ts,
 * in three modes interleaved launch by launch (`BENCH_AGREEMENT_RUNS` launches per mode, default
 * 4, the task signalled round-robin, so each task once): `lockstep`, the headline and the goal's (one replica group,
 * the agreement through the coordination service: TensorFlow's MultiWorkerMirroredStrategy
 * setting), `stopVote` (the same group with its stop vote) and `independent` (independent
 * replicas); and `clusterCheckOverheadUs`, the handler's per-step check in a cluster over local
 * mode, in this process (`BENCH_CHECK_ROUNDS` rounds, default 21). `BENCH_PREEMPTION_CLUSTER_ONLY=1`
 * measures only these.
 */
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os, { tmpdir } from "node:os";
import { join } from "node:path";

import job from "../examples/tfjs-classifier.job.js";
import { CheckpointManager } from "../src/checkpoint/index.js";
import { silentLogger } from "../src/Logger.js";
import type { Session, VariableStore } from "../src/session/Session.js";
import { repoRoot, startCli, type CliChild } from "../test/util/cliChild.js";
import { agreementModes, measureAgreement, measureCheckOverhead } from "./clusterPreemption.js";
import { measureFaults } from "./faultRecovery.js";
import { median, round } from "./stats.js";
import { mulberry32 } from "../src/util/mulberry32.js";

// BENCH_PREEMPTION_RUNS: fewer runs for a quick check of the benchmark itself (results need ≥ 20).
const RUNS = Number(process.env["BENCH_PREEMPTION_RUNS"] ?? 20);
// BENCH_AGREEMENT_RUNS (launches per mode), BENCH_CHECK_ROUNDS: the cluster figures' sizes; BENCH_PREEMPTION_CLUSTER_ONLY=1: only those.
const AGREEMENT_RUNS = Number(process.env["BENCH_AGREEMENT_RUNS"] ?? 4);
const CHECK_ROUNDS = Number(process.env["BENCH_CHECK_ROUNDS"] ?? 21);
const CLUSTER_ONLY = process.env["BENCH_PREEMPTION_CLUSTER_ONLY"] === "1";
// BENCH_FAULT_RUNS: launches per fault scenario (bench/faultRecovery.ts); BENCH_PREEMPTION_FAULTS_ONLY=1: only those.
const FAULT_RUNS = Number(process.env["BENCH_FAULT_RUNS"] ?? 3);
const FAULTS_ONLY = process.env["BENCH_PREEMPTION_FAULTS_ONLY"] === "1";
const exampleJob = join(repoRoot, "examples/tfjs-classifier.job.ts");
const probe = join(repoRoot, "bench/probe.ts");


/** The package, the bundled job and the probe compiled with the build's settings: paths of the CLI, the job and the probe. */
interface Installed {
  readonly cli: string;
  readonly job: string;
  readonly probe: string;
  readonly teardownChild: string;
}

const compileInstalled = (): Installed => {
  // Inside the repository (git-ignored), so that it resolves node_modules and the package's own name as dist/ would.
  const out = join(repoRoot, "bench/.installed");
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  const config = join(out, "tsconfig.json");
  const sources = ["src", "hooks", "examples/tfjs-classifier.job.ts", "examples/tfjs-classifier-data.ts", "bench/probe.ts", "bench/teardownChild.ts"];
  writeFileSync(config, JSON.stringify({
    extends: join(repoRoot, "tsconfig.build.json"),
    compilerOptions: { outDir: out, rootDir: repoRoot, declaration: false, declarationMap: false, sourceMap: false },
    include: sources.map((f) => join(repoRoot, f)),
  }));
  execFileSync(process.execPath, [join(repoRoot, "node_modules/typescript/bin/tsc"), "-p", config], { stdio: "inherit" });
  return {
    cli: join(out, "src/cli/main.js"),
    job: join(out, "examples/tfjs-classifier.job.js"),
    probe: join(out, "bench/probe.js"),
    teardownChild: join(out, "bench/teardownChild.js"),
  };
};

/** Median milliseconds from a TensorFlow.js child's `exit` event to its exit as the parent sees it. */
const teardownMs = async (nodeArgs: readonly string[]): Promise<number> => {
  const times: number[] = [];
  for (let i = 0; i < 7; i++) {
    const child = spawn(process.execPath, nodeArgs, { cwd: repoRoot, stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
    const exitedAt = await new Promise<number>((ok) => child.once("exit", () => ok(performance.timeOrigin + performance.now())));
    times.push(exitedAt - Number(out.trim()));
  }
  return median(times);
};

/** Median milliseconds of one durable save of the bundled model's variables. */
const saveMs = async (): Promise<number> => {
  const factory = job({}).sessionFactory as () => Session | Promise<Session>;
  const session = await factory();
  const store = session.variables as VariableStore;
  await store.initialize();
  const dir = mkdtempSync(join(tmpdir(), "ms-bench-save-"));
  try {
    const manager = await CheckpointManager.create({ directory: dir, maxToKeep: 2, logger: silentLogger });
    const times: number[] = [];
    for (let i = 0; i < 11; i++) {
      const t0 = process.hrtime.bigint();
      await manager.save(store, { checkpointNumber: i, step: i, checkInterval: false });
      times.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    return median(times.slice(1));
  } finally {
    await session.close?.();
    rmSync(dir, { recursive: true, force: true });
  }
};

/** What one way of running the command gave over its runs. */
interface Way {
  readonly signalToExit: number[];
  readonly stepMs: number[];
  readonly loopP99: number[];
  saved: number;
}

/** One preempted run: start, SIGTERM after `waitMs` of training, check exit 42 with its checkpoint. */
const preemptOnce = async (way: Way, start: (cfg: string, probeOut: string) => CliChild, job: string, waitMs: number, label: string): Promise<void> => {
  const dir = mkdtempSync(join(tmpdir(), "ms-bench-preempt-"));
  try {
    const cfg = join(dir, "job.yaml");
    writeFileSync(cfg, `module: ${job}\ncheckpoint:\n  dir: ck\n  saveSecs: 600\nlastStep: 100000000\nlogStepCountSteps: 0\n`);
    const probeOut = join(dir, "probe.json");
    const run = start(cfg, probeOut);
    await run.waitFor("Starting at global step 0");
    const startedAt = performance.now();
    await new Promise((r) => setTimeout(r, waitMs));
    const signalledAt = performance.now();
    run.process.kill("SIGTERM");
    const exitedAt = await new Promise<number>((ok) => run.process.once("exit", () => ok(performance.now())));
    const r = await run.done;
    const m = /Preemption checkpoint for step (\d+) saved/.exec(r.stderr);
    if (r.code !== 42 || m === null) throw new Error(`${label}: expected exit 42 with a preemption checkpoint, got ${r.code}:\n${r.stderr}`);
    way.saved += 1;
    const step = Number(m[1]);
    way.signalToExit.push(exitedAt - signalledAt);
    way.stepMs.push((signalledAt - startedAt) / step);
    way.loopP99.push((JSON.parse(readFileSync(probeOut, "utf8")) as { p99Ms: number }).p99Ms);
    console.log(`  ${label}: step ${step}, signal to exit ${round(exitedAt - signalledAt, 1)} ms`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
};

const summary = (way: Way, teardown: number, save: number): Record<string, unknown> => {
  const goal = median(way.stepMs) + save + 50;
  const max = Math.max(...way.signalToExit);
  return {
    preemptionCheckpointsSaved: way.saved,
    signalToExitMs: { p50: round(median(way.signalToExit), 1), max: round(max, 1) },
    medianStepMs: round(median(way.stepMs), 3),
    nodeTeardownMs: round(teardown, 1),
    eventLoopDelayP99Ms: { median: round(median(way.loopP99), 2), max: round(Math.max(...way.loopP99), 2) },
    goalMaxMs: round(goal, 1),
    goalMet: max <= goal,
  };
};

/** `agreementSteps`, `agreementMs` (each mode) and `clusterCheckOverheadUs`, with their details and the load average around them. */
const clusterFigures = async (seed: number): Promise<Record<string, unknown>> => {
  const loadBefore = os.loadavg().map((x) => round(x, 2));
  console.log(`preemption: ${AGREEMENT_RUNS} launches of 4 tasks per mode (${agreementModes.join(", ")}), SIGTERM to one (agreementSteps)`);
  const agreement = await measureAgreement({ runs: AGREEMENT_RUNS, tasks: 4, seed });
  console.log(`preemption: the handler's check in a cluster against local mode, ${CHECK_ROUNDS} rounds (clusterCheckOverheadUs)`);
  const check = await measureCheckOverhead({ rounds: CHECK_ROUNDS, warmupRounds: 2, stepsPerRound: 50_000 });
  return {
    // The headline is lockstep's (the goal's setting); null: more than half its launches stalled.
    agreementSteps: agreement.lockstep.agreementSteps.median,
    agreementMs: agreement.lockstep.agreementMs.median,
    agreementStepsStopVote: agreement.stopVote.agreementSteps.median,
    agreementMsStopVote: agreement.stopVote.agreementMs.median,
    agreementStepsIndependent: agreement.independent.agreementSteps.median,
    agreementMsIndependent: agreement.independent.agreementMs.median,
    clusterCheckOverheadUs: check.clusterCheckOverheadUs,
    clusterLoadAverage: { before: loadBefore, after: os.loadavg().map((x) => round(x, 2)) },
    agreement,
    clusterCheck: check,
  };
};

/** The fields of bench/results/preemption.json that a cluster-only run does not measure (its header fields are the runner's). */
const previousSingleProcessFigures = (): Record<string, unknown> => {
  const path = join(repoRoot, "bench/results/preemption.json");
  let earlier: Record<string, unknown>;
  try {
    earlier = JSON.parse(readFileSync(path, "utf8")) as Record<string, unknown>;
  } catch {
    return {};
  }
  const cluster = /^(?:agreement|cluster)/;
  const header = new Set(["benchmark", "date", "node", "cpus", "cpuModel"]);
  const kept = Object.fromEntries(Object.entries(earlier).filter(([k]) => !cluster.test(k) && !header.has(k)));
  return { ...kept, singleProcessRunDate: earlier["singleProcessRunDate"] ?? earlier["date"] };
};

/** The fault figures (bench/faultRecovery.ts), with the load average around them. */
const faultFigures = async (): Promise<Record<string, unknown>> => {
  const loadBefore = os.loadavg().map((x) => round(x, 2));
  const faults = await measureFaults({ runs: FAULT_RUNS });
  return {
    faultFrozenChiefAllExitedMs: faults.frozenChief.allExitedMs.median,
    faultFrozenChiefDeclarationMs: faults.frozenChief.declarationMs.median,
    faultFrozenRankAllExitedMs: faults.frozenRank.allExitedMs.median,
    faultFrozenRankDeclarationMs: faults.frozenRank.declarationMs.median,
    faultRunDate: new Date().toISOString(),
    faultLoadAverage: { before: loadBefore, after: os.loadavg().map((x) => round(x, 2)) },
    faults,
  };
};

export default async (): Promise<Record<string, unknown>> => {
  if (FAULTS_ONLY) {
    const earlier = JSON.parse(readFileSync(join(repoRoot, "bench/results/preemption.json"), "utf8")) as Record<string, unknown>;
    const kept = Object.fromEntries(Object.entries(earlier).filter(([k]) => !/^fault/.test(k) && !["benchmark", "date", "node", "cpus", "cpuModel"].includes(k)));
    // The header's date becomes this run's: the measured figures kept say when they were measured.
    return { ...kept, singleProcessRunDate: earlier["singleProcessRunDate"] ?? earlier["date"], clusterRunDate: earlier["clusterRunDate"] ?? earlier["date"], ...(await faultFigures()) };
  }
  const seed = Number(process.env["BENCH_SEED"] ?? Date.now() % 1_000_000);
  console.log(`preemption: seed ${seed} (BENCH_SEED=${seed} repeats these signal moments)`);
  if (CLUSTER_ONLY) {
    // The single-process figures of the last full run stay beside the new cluster figures.
    const earlier = previousSingleProcessFigures();
    return { ...earlier, clusterSeed: seed, clusterRunDate: new Date().toISOString(), ...(await clusterFigures(seed)), ...(await faultFigures()) };
  }
  const installed = compileInstalled();
  const random = mulberry32(seed);
  const ways = { installed: { signalToExit: [], stepMs: [], loopP99: [], saved: 0 } as Way, tsx: { signalToExit: [], stepMs: [], loopP99: [], saved: 0 } as Way };
  for (let i = 0; i < RUNS; i++) {
    // One signal moment per pair; the order within the pair alternates.
    const waitMs = 1000 + random() * 4000;
    const order = i % 2 === 0 ? (["installed", "tsx"] as const) : (["tsx", "installed"] as const);
    for (const name of order) {
      const label = `run ${i + 1}/${RUNS} ${name}`;
      if (name === "installed") {
        await preemptOnce(ways.installed, (cfg, probeOut) => startCli(["run", cfg], { compiledCli: installed.cli, nodeArgs: ["--import", installed.probe], env: { MS_BENCH_PROBE_OUT: probeOut } }), installed.job, waitMs, label);
      } else {
        await preemptOnce(ways.tsx, (cfg, probeOut) => startCli(["run", cfg], { nodeArgs: ["--import", probe], env: { MS_BENCH_PROBE_OUT: probeOut } }), exampleJob, waitMs, label);
      }
    }
  }
  const save = await saveMs();
  const installedSummary = summary(ways.installed, await teardownMs([installed.teardownChild]), save);
  const tsxSummary = summary(ways.tsx, await teardownMs(["--import", "tsx", join(repoRoot, "bench/teardownChild.ts")]), save);
  return {
    seed,
    runs: RUNS,
    medianSaveMs: round(save, 2),
    ...installedSummary,
    tsx: tsxSummary,
    ...(await clusterFigures(seed)),
    ...(await faultFigures()),
  };
};
