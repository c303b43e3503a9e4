/**
 * `resumeToFirstStepMs` of `npm run bench -- cluster-control` (bench/cluster-control.bench.ts),
 * here so that the smoke test (test/integration/cluster-control-bench.test.ts) runs the same code
 * with tiny sizes: how soon a worker starts training once its chief has published its model, when
 * a 2-task cluster of the bundled job resumes from a checkpoint.
 *
 * `monitored-session launch --workers 2` of examples/tfjs-classifier.yaml (copied with a
 * temporary checkpoint directory and `lastStep`), once fresh (to `steps`), then `resumes` times
 * again in the same directory, each launch `steps` further (`lastStep` = (k + 1) × `steps`), so
 * each one restores the previous launch's final checkpoint. The figure is measured from the
 * lines' arrival times in this process: from the chief's `model published to the workers` to the
 * worker's `Starting at global step`. `waitedForPublish` counts the launches whose worker asked
 * for the model before the chief had published it (the wait that the coordination service's watch
 * ends). Equal work: every launch must exit 0 with both tasks done at its last step, and every
 * resume must start at the previous launch's last step.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parse, stringify } from "yaml";

import { repoRoot } from "../test/util/cliChild.js";
import { median, round } from "./stats.js";

/** Sizes of the measurement. */
export interface ResumeSizes {
  /** Launches after the fresh one. */
  readonly resumes: number;
  /** Steps each launch trains. */
  readonly steps: number;
}

const hostNow = (): number => performance.timeOrigin + performance.now();
const PUBLISHED = /^\[chief:0\] .*model published to the workers/;
const STARTING = /^\[worker:0\] .*Starting at global step (\d+)/;
/** The worker asked for the chief's model before it was published (the path the watch serves). */
const WAITING = /^\[worker:0\] .*Waiting for the chief at /;

/** One launch's figure, and whether the worker had asked before the chief published. */
interface Launch {
  readonly ms: number;
  readonly waitedForPublish: boolean;
}

/** The bundled job's configuration with its checkpoints in `dir` and `lastStep`. */
const writeConfig = (dir: string, lastStep: number): string => {
  const config = parse(readFileSync(join(repoRoot, "examples/tfjs-classifier.yaml"), "utf8")) as Record<string, unknown> & { checkpoint: Record<string, unknown> };
  config["module"] = join(repoRoot, "examples/tfjs-classifier.job.ts");
  config.checkpoint["dir"] = join(dir, "ck");
  config["lastStep"] = lastStep;
  const file = join(dir, "job.yaml");
  writeFileSync(file, stringify(config));
  return file;
};

/** One launch to `lastStep`: the published-to-starting time, checked for equal work. */
const launchOnce = async (dir: string, lastStep: number, startStep: number, label: string): Promise<Launch> => {
  const config = writeConfig(dir, lastStep);
  const child = spawn(process.execPath, ["--import", "tsx", "src/cli/main.ts", "launch", "--workers", "2", config], {
    cwd: repoRoot,
    env: { ...process.env, CI: "true" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines: string[] = [];
  let publishedAt: number | undefined;
  let startingAt: number | undefined;
  let startedStep: number | undefined;
  let waitedForPublish = false;
  const onLine = (line: string): void => {
    const t = hostNow();
    lines.push(line);
    if (publishedAt === undefined && PUBLISHED.test(line)) publishedAt = t;
    if (publishedAt === undefined && WAITING.test(line)) waitedForPublish = true;
    const m = STARTING.exec(line);
    if (startingAt === undefined && m !== null) {
      startingAt = t;
      startedStep = Number(m[1]);
    }
  };
  createInterface({ input: child.stdout }).on("line", onLine);
  createInterface({ input: child.stderr }).on("line", onLine);
  const timer = setTimeout(() => child.kill("SIGKILL"), 300_000);
  const code = await new Promise<number | null>((ok) => child.once("close", (c) => ok(c)));
  clearTimeout(timer);
  const out = lines.join("\n");
  const done = lines.filter((l) => new RegExp(`^\\[(chief|worker):0\\] INFO Done at global step ${lastStep}\\.$`).test(l)).length;
  if (code !== 0 || done !== 2) throw new Error(`${label}: expected exit 0 with both tasks done at step ${lastStep}, got exit ${code} and ${done} tasks done:\n${out}`);
  if (publishedAt === undefined || startingAt === undefined) throw new Error(`${label}: no "model published to the workers" from the chief or no "Starting at global step" from the worker:\n${out}`);
  if (startedStep !== startStep) throw new Error(`${label}: the worker started at global step ${startedStep}, expected ${startStep}:\n${out}`);
  return { ms: startingAt - publishedAt, waitedForPublish };
};

/** The fresh launch's figure and the resumes' (see the module comment). */
export const measureResumeToFirstStep = async (sizes: ResumeSizes) => {
  const dir = mkdtempSync(join(tmpdir(), "ms-bench-resume-"));
  try {
    const fresh = await launchOnce(dir, sizes.steps, 0, "fresh launch");
    const say = (what: string, l: Launch): void =>
      console.log(`${what}: worker started ${round(l.ms, 1)} ms after the chief published${l.waitedForPublish ? " (it had asked before)" : ""}`);
    say("fresh launch", fresh);
    const launches: Launch[] = [];
    for (let k = 1; k <= sizes.resumes; k++) {
      launches.push(await launchOnce(dir, (k + 1) * sizes.steps, k * sizes.steps, `resume ${k}/${sizes.resumes}`));
      say(`resume ${k}/${sizes.resumes}`, launches.at(-1) as Launch);
    }
    const resumes = launches.map((l) => l.ms);
    return {
      job: "examples/tfjs-classifier.yaml under launch --workers 2",
      stepsPerLaunch: sizes.steps,
      /** Counted: every launch exited 0 with both tasks done at its last step (else it threw). */
      launchesDone: 1 + resumes.length,
      resumeToFirstStepMs: { median: round(median(resumes), 1), samples: resumes.map((x) => round(x, 1)) },
      freshLaunchToFirstStepMs: round(fresh.ms, 1),
      /** Launches whose worker asked for the model before the chief published it (it logged "Waiting for the chief"). */
      waitedForPublish: { fresh: fresh.waitedForPublish, resumes: launches.filter((l) => l.waitedForPublish).length },
      goalMs: 1000,
      goalMet: median(resumes) <= 1000,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
};
