/**
 * `npm run bench -- startup`: how long a task takes from its process start to its first training
 * step, the time a restart costs before it trains again, for two programs, each started two ways
 * in the same run:
 *
 * - the bundled job (examples/tfjs-classifier.yaml, the WASM backend) under
 *   `monitored-session run`:
 *   - `clone`: from a checkout, `node --import tsx src/cli/main.ts run …` (what `npm start`
 *     runs); every module of the program is transpiled by tsx at each start;
 *   - `compiled`: the package's `bin` as `npm install` gives it, `node dist/src/cli/main.js run …`
 *     (built here with `npm run build` first); the job module is TypeScript, so tsx still loads it;
 *   - figures: the spawn to the first line on stderr (the program loaded) and to the first
 *     progress line (`step 1/…`, after the first step);
 * - the custom-loop example (examples/preemption-custom-loop.ts: `startTask` and a
 *   `PreemptionCheckpointHandler`), as a one-task cluster (a TF_CONFIG naming one chief):
 *   - `clone`: `node --import tsx examples/preemption-custom-loop.ts` (its imports are `../src/`);
 *   - `package`: the same file with its imports rewritten to the package's name, so that the
 *     library comes from `dist/` as in a user's program (tsx still loads the example itself);
 *   - figures: the spawn to `chief:0: starting at run 0 of …` (the task registered, the model
 *     built and initialized: printed just before its first step) and to the process's exit.
 *
 * Each way is measured idle and loaded (two busy processes on the machine's cores meanwhile),
 * `RUNS` times, alternating, each run in a fresh checkpoint directory (nothing restored). Equal
 * work: every run must reach its last step (`Done at global step <LAST_STEP>`, or
 * `done at run <LAST_STEP>`) and exit 0, or the benchmark fails. Medians, and the ratio of the
 * package's way to the clone's.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parse, stringify } from "yaml";

import { repoRoot } from "../test/util/cliChild.js";
import { loopbackPorts } from "../src/cluster/loopbackPorts.js";
import { buildPackage, COMPILED_CLI, writePackagedExample, writePackagedJob } from "./packagedJob.js";
import { median, round } from "./stats.js";

const RUNS = 5;
const LAST_STEP = 20;
const BURNERS = 2;

type Way = "clone" | "compiled";
type LoopWay = "clone" | "package";

/** One start's figures, ms from the spawn. */
interface Start {
  readonly firstLineMs: number;
  readonly firstStepMs: number;
}

/** One start of the custom loop, ms from the spawn. */
interface LoopStart {
  readonly readyMs: number;
  readonly exitMs: number;
}

const ARGS: Record<Way, readonly string[]> = {
  clone: ["--conditions=monitored-session-source", "--import", "tsx", "src/cli/main.ts"],
  compiled: [COMPILED_CLI],
};

const CUSTOM_LOOP = ["preemption-custom-loop.ts", "tfjs-classifier-data.ts"] as const;

/** Where the job's package-name copy goes (under the package's gitignored `runs/`). */
const JOB_FOLDER = ".bench-startup";
const JOB_DIR = join(repoRoot, "runs", JOB_FOLDER);
const writeJob = (): string => writePackagedJob("startup", JOB_FOLDER);

/** The bundled job with its checkpoints in a fresh directory and a short last step. */
const writeConfig = (dir: string): string => {
  const config = parse(readFileSync(join(repoRoot, "examples/tfjs-classifier.yaml"), "utf8")) as Record<string, unknown> & { checkpoint: Record<string, unknown> };
  config["module"] = writeJob();
  config.checkpoint["dir"] = join(dir, "ck");
  config["lastStep"] = LAST_STEP;
  const file = join(dir, "job.yaml");
  writeFileSync(file, stringify(config));
  return file;
};

/** One start of `way`: its figures, checked for equal work. */
const startOnce = async (way: Way): Promise<Start> => {
  const dir = mkdtempSync(join(tmpdir(), "ms-bench-startup-"));
  try {
    const config = writeConfig(dir);
    const t0 = performance.now();
    const child = spawn(process.execPath, [...ARGS[way], "run", config], { cwd: repoRoot, env: { ...process.env, CI: "true" }, stdio: ["ignore", "pipe", "pipe"] });
    let firstLineMs: number | undefined;
    let firstStepMs: number | undefined;
    let done = false;
    let output = "";
    createInterface({ input: child.stderr }).on("line", (line) => {
      firstLineMs ??= performance.now() - t0;
      output += `${line}\n`;
      if (line.endsWith(`Done at global step ${LAST_STEP}.`)) done = true;
    });
    createInterface({ input: child.stdout }).on("line", (line) => {
      output += `${line}\n`;
      if (/^step 1\//.test(line)) firstStepMs ??= performance.now() - t0;
    });
    const code = await new Promise<number | null>((resolve) => child.once("close", resolve));
    if (code !== 0 || firstLineMs === undefined || firstStepMs === undefined || !done) {
      throw new Error(`startup benchmark: a ${way} start did not do the work (exit ${String(code)}, first step ${String(firstStepMs)}, done ${String(done)}):\n${output}`);
    }
    return { firstLineMs, firstStepMs };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
};

/** The custom-loop example's path for `way` (the package's copy is written once, by the caller). */
const loopProgram = (way: LoopWay): string => (way === "clone" ? join(repoRoot, "examples", CUSTOM_LOOP[0]) : join(JOB_DIR, CUSTOM_LOOP[0]));

/** One start of the custom-loop example as a one-task cluster: its figures, checked for equal work. */
const startLoopOnce = async (way: LoopWay): Promise<LoopStart> => {
  const dir = mkdtempSync(join(tmpdir(), "ms-bench-startup-loop-"));
  try {
    const [port] = await loopbackPorts(1);
    const env = {
      ...process.env,
      CI: "true",
      TF_CONFIG: JSON.stringify({ cluster: { chief: [`127.0.0.1:${String(port)}`] }, task: { type: "chief", index: 0 } }),
      STEPS: String(LAST_STEP),
      CHECKPOINT_DIR: join(dir, "ck"),
    };
    const t0 = performance.now();
    const child = spawn(process.execPath, ["--import", "tsx", loopProgram(way)], { cwd: repoRoot, env, stdio: ["ignore", "pipe", "pipe"] });
    let readyMs: number | undefined;
    let done = false;
    let output = "";
    createInterface({ input: child.stdout }).on("line", (line) => {
      output += `${line}\n`;
      if (line === `chief:0: starting at run 0 of ${LAST_STEP}`) readyMs ??= performance.now() - t0;
      if (line.startsWith(`chief:0: done at run ${LAST_STEP};`)) done = true;
    });
    createInterface({ input: child.stderr }).on("line", (line) => void (output += `${line}\n`));
    const code = await new Promise<number | null>((resolve) => child.once("close", resolve));
    const exitMs = performance.now() - t0;
    if (code !== 0 || readyMs === undefined || !done) {
      throw new Error(`startup benchmark: a ${way} start of the custom loop did not do the work (exit ${String(code)}, ready ${String(readyMs)}, done ${String(done)}):\n${output}`);
    }
    return { readyMs, exitMs };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
};

/** `RUNS` starts of the custom loop each way, alternating; medians and the ratio. */
const measureLoop = async (): Promise<Record<string, unknown>> => {
  const starts = await alternate(["clone", "package"] as const, startLoopOnce);
  const summary = (runs: readonly LoopStart[]) => ({ readyMsMedian: medianMs(runs, (s) => s.readyMs), exitMsMedian: medianMs(runs, (s) => s.exitMs), readyMs: wholeMs(runs, (s) => s.readyMs) });
  const clone = summary(starts.clone);
  const pkg = summary(starts.package);
  return { clone, package: pkg, readyRatioPackageToClone: round(pkg.readyMsMedian / clone.readyMsMedian, 3) };
};

/** `RUNS` starts of each of the two ways, alternating which goes first; each way's figures, in order. */
const alternate = async <W extends string, S>(ways: readonly [W, W], start: (way: W) => Promise<S>): Promise<Record<W, S[]>> => {
  const [a, b] = ways;
  const starts = { [a]: [], [b]: [] } as unknown as Record<W, S[]>;
  for (let i = 0; i < RUNS; i++) for (const way of i % 2 === 0 ? [a, b] : [b, a]) starts[way].push(await start(way));
  return starts;
};

/** The median of `pick` over `runs`, in whole milliseconds. */
const medianMs = <S>(runs: readonly S[], pick: (s: S) => number): number => round(median(runs.map(pick)), 0);

/** `pick` of each run, in whole milliseconds. */
const wholeMs = <S>(runs: readonly S[], pick: (s: S) => number): number[] => runs.map((s) => round(pick(s), 0));

/** Busy processes on the machine's cores until stopped. */
const burn = (): (() => void) => {
  const burners: ChildProcess[] = [];
  for (let i = 0; i < BURNERS; i++) burners.push(spawn(process.execPath, ["-e", "for (;;) {}"], { stdio: "ignore" }));
  return () => {
    for (const b of burners) b.kill("SIGKILL");
  };
};

/** `RUNS` starts of each way, alternating; medians and the ratio. */
const measure = async (): Promise<Record<string, unknown>> => {
  const starts = await alternate(["clone", "compiled"] as const, startOnce);
  const summary = (runs: readonly Start[]) => ({
    firstLineMsMedian: medianMs(runs, (s) => s.firstLineMs),
    firstStepMsMedian: medianMs(runs, (s) => s.firstStepMs),
    firstStepMs: wholeMs(runs, (s) => s.firstStepMs),
  });
  const clone = summary(starts.clone);
  const compiled = summary(starts.compiled);
  return { clone, compiled, firstStepRatioCompiledToClone: round(compiled.firstStepMsMedian / clone.firstStepMsMedian, 3) };
};

export default async (): Promise<Record<string, unknown>> => {
  buildPackage("startup");
  try {
    writePackagedExample("startup", JOB_FOLDER, CUSTOM_LOOP);
    // A first start of each way warms the filesystem cache (and tsx's), as any start after the first finds it.
    await startOnce("clone");
    await startOnce("compiled");
    await startLoopOnce("clone");
    await startLoopOnce("package");
    const idle = await measure();
    const loopIdle = await measureLoop();
    const stop = burn();
    let loaded: Record<string, unknown>;
    let loopLoaded: Record<string, unknown>;
    try {
      loaded = await measure();
      loopLoaded = await measureLoop();
    } finally {
      stop();
    }
    return {
      job: "examples/tfjs-classifier.yaml (wasm)",
      lastStep: LAST_STEP,
      runs: RUNS,
      burners: BURNERS,
      idle,
      loaded,
      customLoop: { program: "examples/preemption-custom-loop.ts (wasm, one-task cluster)", idle: loopIdle, loaded: loopLoaded },
    };
  } finally {
    rmSync(JOB_DIR, { recursive: true, force: true });
  }
};
