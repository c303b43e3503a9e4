/**
 * `npm run bench -- startup`: how long a task of the bundled job (examples/tfjs-classifier.yaml,
 * the WASM backend) takes from its process start to its first training step, the time a restart
 * costs before it trains again. Two ways to start the same command, measured in the same run:
 *
 * - `clone`: from a checkout, `node --import tsx src/cli/main.ts run …` (what `npm start` runs);
 *   every module of the program is transpiled by tsx at each start;
 * - `compiled`: the package's `bin` as `npm install` gives it, `node dist/src/cli/main.js run …`
 *   (built here with `npm run build` first); the job module is TypeScript, so tsx still loads it.
 *
 * Each is measured idle and loaded (two busy processes on the machine's cores meanwhile), `RUNS`
 * times, alternating, each run in a fresh checkpoint directory (nothing restored). Per run: the
 * spawn to the first line on stderr (the program loaded: its first log line) and to the first
 * progress line (`step 1/…`, after the first step). Equal work: every run must print its first
 * step and end with `Done at global step <LAST_STEP>` and exit 0, or the benchmark fails.
 * Medians, and the compiled way's ratio to the clone's.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parse, stringify } from "yaml";

import { repoRoot } from "../test/util/cliChild.js";
import { buildPackage, COMPILED_CLI, writePackagedJob } from "./packagedJob.js";
import { median, round } from "./stats.js";

const RUNS = 5;
const LAST_STEP = 20;
const BURNERS = 2;

type Way = "clone" | "compiled";

/** One start's figures, ms from the spawn. */
interface Start {
  readonly firstLineMs: number;
  readonly firstStepMs: number;
}

const ARGS: Record<Way, readonly string[]> = {
  clone: ["--conditions=monitored-session-source", "--import", "tsx", "src/cli/main.ts"],
  compiled: [COMPILED_CLI],
};

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
  const starts: Record<Way, Start[]> = { clone: [], compiled: [] };
  for (let i = 0; i < RUNS; i++) for (const way of i % 2 === 0 ? (["clone", "compiled"] as const) : (["compiled", "clone"] as const)) starts[way].push(await startOnce(way));
  const summary = (way: Way) => ({
    firstLineMsMedian: round(median(starts[way].map((s) => s.firstLineMs)), 0),
    firstStepMsMedian: round(median(starts[way].map((s) => s.firstStepMs)), 0),
    firstStepMs: starts[way].map((s) => round(s.firstStepMs, 0)),
  });
  const clone = summary("clone");
  const compiled = summary("compiled");
  return { clone, compiled, firstStepRatioCompiledToClone: round(compiled.firstStepMsMedian / clone.firstStepMsMedian, 3) };
};

export default async (): Promise<Record<string, unknown>> => {
  buildPackage("startup");
  try {
    // A first start of each way warms the filesystem cache (and tsx's), as any start after the first finds it.
    await startOnce("clone");
    await startOnce("compiled");
    const idle = await measure();
    const stop = burn();
    let loaded: Record<string, unknown>;
    try {
      loaded = await measure();
    } finally {
      stop();
    }
    return { job: "examples/tfjs-classifier.yaml (wasm)", lastStep: LAST_STEP, runs: RUNS, burners: BURNERS, idle, loaded };
  } finally {
    rmSync(JOB_DIR, { recursive: true, force: true });
  }
};
