/**
 * Synchronous data-parallel training from the CLI, with real processes on loopback: the bundled
 * classifier (test/fixtures/cli/dp-classifier-job.ts, the example's data, model and batch) under
 * `launch --workers 3`. One launch run serves several assertions: every rank reaches the last
 * step with bit-identical variables (a digest of every variable's bits, printed by each task);
 * they equal a single process trained on the shards concatenated in rank order within 1e-5
 * relative (the all-reduce sums in another order than one batch's gradient: float32 rounding);
 * only the chief wrote under the checkpoint directory (one `checkpoint` state file) and the chief
 * reported global examples/sec. A SIGTERM to one worker makes every task exit 42; a SIGSTOPped worker
 * is named by the others' UnavailableError (the heartbeat, not the collective's deadline). A rank with
 * another model makes every task exit 2 naming it.
 * Outcomes only, never timings.
 */
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

import { alive, repoRoot, startCli, type CliChild } from "../util/cliChild.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-data-parallel-");
const job = join(repoRoot, "test/fixtures/cli/dp-classifier-job.ts");
const LAST_STEP = 8;

const started: CliChild[] = [];
afterEach(async () => {
  for (const c of started.splice(0)) {
    const pids = [...c.output().matchAll(/started \S+ at \S+ \(pid (\d+)\)/g)].map((m) => Number(m[1]));
    c.process.kill("SIGKILL");
    for (const pid of pids) if (alive(pid)) process.kill(pid, "SIGKILL");
    await c.done;
  }
});

const run = (args: readonly string[], env: Record<string, string>): CliChild => {
  const c = startCli(args, { env: { DP_LAST_STEP: String(LAST_STEP), ...env }, timeoutMs: 240_000 });
  started.push(c);
  return c;
};

/** A config of the job in `dir`: checkpoints and summaries in `dir/ck`, the step rate every 4 steps. */
const config = (dir: string): string => {
  const file = join(dir, "job.yaml");
  writeFileSync(
    file,
    `module: ${job}\nlogStepCountSteps: 4\ncheckpoint:\n  dir: ck\n  saveSteps: 4\nsummaries:\n  saveSteps: 4\ntfjs:\n  backend: cpu\ncluster:\n  timeouts:\n    heartbeatTimeoutSecs: 5\n`,
  );
  return file;
};

/** Every file under `dir`, relative. */
const tree = (dir: string): string[] => readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name).slice(dir.length + 1));

type Weights = Record<string, number[]>;
const weightsOf = (dir: string, name: string): Weights => JSON.parse(readFileSync(join(dir, `weights-${name}.json`), "utf8")) as Weights;

/** Per variable, max |a − b| over max |b|: the largest relative difference. */
const maxRelativeDifference = (a: Weights, b: Weights): number =>
  Math.max(
    ...Object.keys(b).map((k) => {
      const x = a[k] ?? [];
      const y = b[k] as number[];
      expect(x.length, k).toBe(y.length);
      const scale = Math.max(...y.map(Math.abs), Number.MIN_VALUE);
      return Math.max(0, ...y.map((v, i) => Math.abs((x[i] as number) - v))) / scale;
    }),
  );

describe("launch --workers 3: synchronous data parallelism", () => {
  it("trains to the last step with bit-identical replicas equal to one process on the concatenated shards; only the chief writes", { timeout: 300_000 }, async () => {
    const dir = tempDir();
    const r = await run(["launch", "--workers", "3", config(dir)], { DP_OUT: dir }).done;
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain("[launch] every task exited 0");

    const finals = new Map([...r.stdout.matchAll(/^\[(\S+)\] final (\d) digest ([0-9a-f]{64})$/gm)].map((m) => [m[1] as string, { rank: m[2], digest: m[3] }]));
    expect([...finals.keys()].sort()).toEqual(["chief:0", "worker:0", "worker:1"]);
    // Ranks: the chief 0, then the workers in index order.
    expect([finals.get("chief:0")?.rank, finals.get("worker:0")?.rank, finals.get("worker:1")?.rank]).toEqual(["0", "1", "2"]);
    expect(new Set([...finals.values()].map((f) => f.digest)).size, r.stdout).toBe(1);
    for (const [task, rank] of [["chief:0", 0], ["worker:0", 1], ["worker:1", 2]] as const) {
      expect(r.stderr).toContain(`[${task}] INFO Data-parallel training: rank ${rank} of 3; global batch = 64 × 3 = 192.`);
      expect(r.stderr).toContain(`[${task}] INFO Done at global step ${LAST_STEP}.`);
    }

    // Only the chief writes: one checkpoint state file, and the checkpoints of steps 0, 4 and 8 in the tree.
    const files = tree(dir);
    expect(files.filter((f) => f.split("/").pop() === "checkpoint")).toEqual(["ck/checkpoint"]);
    expect(files.filter((f) => f.startsWith("ck/model.ckpt-") && f.endsWith(".index")).sort()).toEqual(["ck/model.ckpt-0.index", "ck/model.ckpt-4.index", "ck/model.ckpt-8.index"]);
    expect(files.filter((f) => f.startsWith("ck/events.out.tfevents")).length).toBe(1);
    expect(r.stderr).not.toMatch(/\[worker:\d\] INFO (Saving checkpoints|global_step\/sec|examples\/sec)/);
    // The chief's step counter counts the global batch.
    expect(r.stderr).toMatch(/\[chief:0\] INFO examples\/sec: \d/);

    // The single-process reference: the same global batch (the three shards in rank order).
    writeFileSync(join(dir, "ref.yaml"), `module: ${job}\nlogStepCountSteps: 0\ntfjs:\n  backend: cpu\n`);
    const ref = await run(["run", join(dir, "ref.yaml")], { DP_OUT: dir, DP_REFERENCE: "3" }).done;
    expect(ref.code, ref.stderr).toBe(0);
    const replica = weightsOf(dir, "0");
    expect(Object.keys(replica).length).toBeGreaterThan(6);
    for (const rank of ["1", "2"]) expect(weightsOf(dir, rank)).toEqual(replica);
    expect(maxRelativeDifference(replica, weightsOf(dir, "ref"))).toBeLessThanOrEqual(1e-5);
  });

  it("SIGTERM to one worker: every task exits 42 (a rank blocked in a collective sees a cancellation), launch 42", { timeout: 300_000 }, async () => {
    const dir = tempDir();
    const l = run(["launch", "--workers", "3", config(dir)], { DP_OUT: dir, DP_LAST_STEP: "100000", DP_PRINT_STEPS: "1" });
    await l.waitFor(/\[worker:1\] trained 3$/m, 200_000);
    const pid = Number(/started worker:1 at \S+ \(pid (\d+)\)/.exec(l.output())?.[1]);
    process.kill(pid, "SIGTERM");
    const r = await l.done;
    expect(r.code, r.stderr).toBe(42);
    for (const task of ["chief:0", "worker:0", "worker:1"]) expect(r.stderr, task).toContain(`[launch] ${task} exited with 42`);
    expect(r.stderr).not.toMatch(/Training failed/);
  });

  it("SIGSTOP one worker: the others' collectives raise UnavailableError naming it from the heartbeat, not the collective's deadline", { timeout: 300_000 }, async () => {
    const dir = tempDir();
    const l = run(["launch", "--workers", "3", config(dir)], { DP_OUT: dir, DP_LAST_STEP: "100000", DP_PRINT_STEPS: "1" });
    await l.waitFor(/\[worker:1\] trained 3$/m, 200_000);
    const pid = Number(/started worker:1 at \S+ \(pid (\d+)\)/.exec(l.output())?.[1]);
    process.kill(pid, "SIGSTOP");
    await l.waitFor("[launch] worker:0 exited with 1", 200_000);
    const out = l.output();
    for (const task of ["chief:0", "worker:0"]) {
      // The collective's deadline is 60 s; the heartbeat timeout 5 s: the failure comes from the coordination service.
      expect(out, task).toMatch(new RegExp(`\\[${task}\\] Training failed: UnavailableError: .*/job:worker/replica:0/task:1`));
      expect(out, task).not.toMatch(new RegExp(`\\[${task}\\] Training failed: DeadlineExceededError`));
    }
    process.kill(pid, "SIGKILL");
    expect((await l.done).code).not.toBe(0);
  });

  it("a rank with another model: every task exits 2 before step 1, naming it and both shapes", { timeout: 300_000 }, async () => {
    const dir = tempDir();
    const r = await run(["launch", "--workers", "3", config(dir)], { DP_OUT: dir, DP_WIDE_RANK: "2" }).done;
    expect(r.code, r.stderr).toBe(2);
    for (const task of ["chief:0", "worker:0", "worker:1"]) {
      const line = r.stderr.split("\n").find((l) => l.startsWith(`[${task}] ${task}: The replicas' models differ`));
      // Named as the worker that cannot take the chief's values, or by the replicas' signature check (whichever sees it first).
      expect(line, r.stderr).toMatch(
        /worker:1 \(rank 2\) cannot take the chief's values: .*model\/\S+.*\[[\d, ]*48[\d, ]*\].*\[[\d, ]*32[\d, ]*\]|rank 2 \(\/job:worker\/replica:0\/task:1\) has model\/\S+ float32\[[\d, ]*48[\d, ]*\] where rank 0 \(\/job:chief\/replica:0\/task:0\) has float32\[[\d, ]*32[\d, ]*\]/,
      );
    }
    expect(r.stderr).not.toMatch(/Done at global step|step 1\//);
    expect(r.stdout).not.toMatch(/final \d digest/);
  });
});
