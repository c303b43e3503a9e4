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
 * For the goal (max ≤ one step + one save + 50 ms) it also reports the median step time
 * (training time before the signal over the steps trained, per run) and the median time of one
 * durable save of the bundled model's variables (through `CheckpointManager`, in this process),
 * and the children's event-loop delay while training (p99, from bench/probe.ts). The exit
 * includes Node's own teardown after the `exit` event: that part is Node's, and
 * `nodeTeardownMs` measures it (bench/teardownChild.ts, median of 7).
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import job from "../examples/tfjs-classifier.job.js";
import { CheckpointManager } from "../src/checkpoint/index.js";
import { silentLogger } from "../src/Logger.js";
import type { Session, VariableStore } from "../src/Session.js";
import { repoRoot, startCli } from "../test/util/cliChild.js";
import { median, mulberry32, round } from "./stats.js";

const RUNS = 20;
const exampleJob = join(repoRoot, "examples/tfjs-classifier.job.ts");
const probe = join(repoRoot, "bench/probe.ts");


/** Median milliseconds from a tsx + TensorFlow.js child's `exit` event to its exit as the parent sees it. */
const teardownMs = async (): Promise<number> => {
  const times: number[] = [];
  for (let i = 0; i < 7; i++) {
    const child = spawn(process.execPath, ["--import", "tsx", join(repoRoot, "bench/teardownChild.ts")], { cwd: repoRoot, stdio: ["ignore", "pipe", "inherit"] });
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

export default async (): Promise<Record<string, unknown>> => {
  const seed = Number(process.env["BENCH_SEED"] ?? Date.now() % 1_000_000);
  console.log(`preemption: seed ${seed} (BENCH_SEED=${seed} repeats these signal moments)`);
  const random = mulberry32(seed);
  const signalToExit: number[] = [];
  const stepMs: number[] = [];
  const loopP99: number[] = [];
  let saved = 0;
  for (let i = 0; i < RUNS; i++) {
    const dir = mkdtempSync(join(tmpdir(), "ms-bench-preempt-"));
    try {
      const cfg = join(dir, "job.yaml");
      writeFileSync(cfg, `module: ${exampleJob}\ncheckpoint:\n  dir: ck\n  saveSecs: 600\nlastStep: 100000000\nlogStepCountSteps: 0\n`);
      const probeOut = join(dir, "probe.json");
      const run = startCli(["run", cfg], { nodeArgs: ["--import", probe], env: { MS_BENCH_PROBE_OUT: probeOut } });
      await run.waitFor("Starting at global step 0");
      const startedAt = performance.now();
      await new Promise((r) => setTimeout(r, 1000 + random() * 4000));
      const signalledAt = performance.now();
      run.process.kill("SIGTERM");
      const exitedAt = await new Promise<number>((ok) => run.process.once("exit", () => ok(performance.now())));
      const r = await run.done;
      const m = /Preemption checkpoint for step (\d+) saved/.exec(r.stderr);
      if (r.code !== 42 || m === null) throw new Error(`run ${i}: expected exit 42 with a preemption checkpoint, got ${r.code}:\n${r.stderr}`);
      saved += 1;
      const step = Number(m[1]);
      signalToExit.push(exitedAt - signalledAt);
      stepMs.push((signalledAt - startedAt) / step);
      loopP99.push((JSON.parse(readFileSync(probeOut, "utf8")) as { p99Ms: number }).p99Ms);
      console.log(`  run ${i + 1}/${RUNS}: step ${step}, signal to exit ${round(exitedAt - signalledAt, 1)} ms`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  const save = await saveMs();
  const teardown = await teardownMs();
  const goal = median(stepMs) + save + 50;
  const max = Math.max(...signalToExit);
  return {
    seed,
    runs: RUNS,
    preemptionCheckpointsSaved: saved,
    signalToExitMs: { p50: round(median(signalToExit), 1), max: round(max, 1) },
    medianStepMs: round(median(stepMs), 3),
    medianSaveMs: round(save, 2),
    nodeTeardownMs: round(teardown, 1),
    eventLoopDelayP99Ms: { median: round(median(loopP99), 2), max: round(Math.max(...loopP99), 2) },
    goalMaxMs: round(goal, 1),
    goalMet: max <= goal,
  };
};
