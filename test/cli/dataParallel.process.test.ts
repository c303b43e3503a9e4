/**
 * Synchronous data-parallel training from the CLI, with real processes on loopback: the bundled
 * classifier (test/fixtures/cli/dp-classifier-job.ts, the example's data, model and batch) under
 * `launch --workers 3`. One launch run serves several assertions: every rank reaches the last
 * step with bit-identical variables (a digest of every variable's bits, printed by each task);
 * they equal a single process trained on the shards concatenated in rank order within 1e-5
 * relative (the all-reduce sums in another order than one batch's gradient: float32 rounding);
 * only the chief wrote under the checkpoint directory (one `checkpoint` state file) and the chief
 * reported global examples/sec. A SIGTERM to one worker, or to launch, stops every rank after the
 * same step: the chief saves that step, every task exits 42, and the next launch resumes there.
 * So does a SIGTERM to a worker stalled between steps while the others wait for it in an
 * all-reduce; killed instead of going on, it leaves the others' all-reduce cancelled: they exit
 * 42, the chief after saving the last step every rank completed. A worker that stalls past
 * `cluster.collectiveTimeoutSecs` (15 s in the config) is named by a DeadlineExceededError.
 * With TLS and a cluster token in the config, every server and collective link uses both.
 * Under `launch --max-restarts 2` (one run for both faults), a SIGKILLed chief restarts the group
 * from the chief's last checkpoint (every task at its step); then a frozen worker, declared
 * failed through the heartbeat (not the collective's deadline), is SIGKILLed by launch and
 * restarted alone while the others wait for it (no task fails); the group re-forms its ring and
 * finishes with bit-identical replicas. A NaN loss on rank 1 fails every task at the same step (exit 1), or stops them all
 * there with `failOnNanLoss: false` (exit 0). A rank with another model makes every task exit 2
 * naming it.
 * Outcomes only, never timings.
 */
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { setTimeout as delay } from "node:timers/promises";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

import { killLaunchTree, repoRoot, startCli, type CliChild, type CliRun } from "../util/cliChild.js";
import { useTempDirs } from "../util/tempDirs.js";
import { makeCertificates, opensslVersion } from "../util/tlsCertificates.js";
import { pidOf } from "../util/launchOutput.js";

const tempDir = useTempDirs("ms-data-parallel-");
if (opensslVersion === undefined) console.warn("SKIP the TLS test of test/cli/dataParallel.process.test.ts: no openssl on PATH (apt-get install openssl)");
const job = join(repoRoot, "test/fixtures/cli/dp-classifier-job.ts");
const LAST_STEP = 8;

const started: CliChild[] = [];
afterEach(async () => {
  for (const c of started.splice(0)) await killLaunchTree(c);
});

const run = (args: readonly string[], env: Record<string, string>, timeoutMs = 240_000): CliChild => {
  const c = startCli(args, { env: { DP_LAST_STEP: String(LAST_STEP), ...env }, timeoutMs });
  started.push(c);
  return c;
};

/**
 * A config of the job in `dir`: checkpoints and summaries in `dir/ck` (a checkpoint every
 * `saveSteps` steps), the step rate every 4 steps; `extra` is appended (more top-level keys).
 */
const config = (dir: string, saveSteps = 4, extra = ""): string => {
  const file = join(dir, "job.yaml");
  writeFileSync(
    file,
    `module: ${job}\nlogStepCountSteps: 4\ncheckpoint:\n  dir: ck\n  saveSteps: ${saveSteps}\nsummaries:\n  saveSteps: 4\ntfjs:\n  backend: cpu\ncluster:\n  timeouts:\n    heartbeatTimeoutSecs: 5\n${extra}`,
  );
  return file;
};

/** Polls `dir/ck/checkpoint` (every 50 ms, up to `deadlineMs`) until it names a checkpoint of a step > `after`; that step. */
const checkpointAfterStep = async (dir: string, after: number, deadlineMs: number): Promise<number> => {
  const file = join(dir, "ck/checkpoint");
  for (const end = Date.now() + deadlineMs; Date.now() < end; await delay(50)) {
    const step = existsSync(file) ? Number(/^model_checkpoint_path: "model\.ckpt-(\d+)"/m.exec(readFileSync(file, "utf8"))?.[1] ?? 0) : 0;
    if (step > after) return step;
  }
  throw new Error(`no checkpoint past step ${after} named in ${file} within ${deadlineMs} ms`);
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
    // The chief's step counter counts the global batch: each examples/sec it logs is the
    // global_step/sec it logged just before × 64 × 3 (both printed to 6 significant digits).
    const chiefLines = r.stderr.split("\n").filter((l) => l.startsWith("[chief:0] INFO ")).join("\n");
    const rates = [...chiefLines.matchAll(/^\[chief:0\] INFO global_step\/sec: (\S+)\n\[chief:0\] INFO examples\/sec: (\S+)$/gm)].map((m) => [Number(m[1]), Number(m[2])] as const);
    expect(rates.length, chiefLines).toBeGreaterThan(0);
    for (const [steps, examples] of rates) expect(Math.abs(examples / steps / (64 * 3) - 1), `${steps} ${examples}`).toBeLessThan(2e-5);

    // The single-process reference: the same global batch (the three shards in rank order).
    writeFileSync(join(dir, "ref.yaml"), `module: ${job}\nlogStepCountSteps: 0\ntfjs:\n  backend: cpu\n`);
    const ref = await run(["run", join(dir, "ref.yaml")], { DP_OUT: dir, DP_REFERENCE: "3" }).done;
    expect(ref.code, ref.stderr).toBe(0);
    const replica = weightsOf(dir, "0");
    expect(Object.keys(replica).length).toBeGreaterThan(6);
    for (const rank of ["1", "2"]) expect(weightsOf(dir, rank)).toEqual(replica);
    expect(maxRelativeDifference(replica, weightsOf(dir, "ref"))).toBeLessThanOrEqual(1e-5);
  });

  /**
   * A preempted run (`r`, launch's result) stopped every rank after one step: the chief saved
   * that step and every task exited 42, each worker at the same step. That step.
   */
  const stoppedTogether = (r: { code: number | null; stderr: string }): number => {
    expect(r.code, r.stderr).toBe(42);
    for (const task of ["chief:0", "worker:0", "worker:1"]) expect(r.stderr, task).toContain(`[launch] ${task} exited with 42`);
    expect(r.stderr).not.toMatch(/Training failed|during a collective/);
    const saved = /^\[chief:0\] INFO Preemption checkpoint for step (\d+) saved: \S*model\.ckpt-(\d+)\.$/m.exec(r.stderr);
    expect(saved, r.stderr).not.toBeNull();
    const step = Number(saved?.[1]);
    expect(Number(saved?.[2])).toBe(step);
    for (const task of ["worker:0", "worker:1"]) {
      expect(r.stderr, task).toMatch(new RegExp(`^\\[${task}\\] INFO Preempted \\(.*\\): a worker exits with 42 at global step ${step}, where the replica group stopped, without saving`, "m"));
    }
    return step;
  };

  it("a preemption stops every rank after the same step and the chief saves it: SIGTERM to one worker, then to launch; the next launch resumes there with bit-identical replicas", { timeout: 600_000 }, async () => {
    const dir = tempDir();
    // The interval saves never come (saveSteps beyond the run): what is on disk is the preemption's.
    const file = config(dir, 100_000);
    // 1. SIGTERM to one worker: its notice is its stop vote (and its claim, which the others hear).
    const first = run(["launch", "--workers", "3", file], { DP_OUT: dir, DP_LAST_STEP: "100000", DP_PRINT_STEPS: "1" });
    await first.waitFor(/\[worker:1\] trained 3$/m, 200_000);
    process.kill(pidOf(first.output(), "worker:1"), "SIGTERM");
    const s1 = stoppedTogether(await first.done);
    expect(s1).toBeGreaterThanOrEqual(3);

    // 2. SIGTERM to launch, forwarded to every task: one agreed step again, past the first.
    const second = run(["launch", "--workers", "3", file], { DP_OUT: dir, DP_LAST_STEP: "100000", DP_PRINT_STEPS: "1" });
    await second.waitFor(new RegExp(`\\[worker:0\\] trained ${s1 + 3}$`, "m"), 200_000);
    second.process.kill("SIGTERM");
    const r2 = await second.done;
    expect(r2.stderr).toMatch(new RegExp(`^\\[chief:0\\] INFO Starting at global step ${s1} \\(restored from \\S*model\\.ckpt-${s1}\\)`, "m"));
    const s2 = stoppedTogether(r2);
    expect(s2).toBeGreaterThan(s1);

    // 3. The next launch resumes from the preemption checkpoint and finishes with one digest.
    const r3 = await run(["launch", "--workers", "3", file], { DP_OUT: dir, DP_LAST_STEP: String(s2 + 2) }).done;
    expect(r3.code, r3.stderr).toBe(0);
    expect(r3.stderr).toMatch(new RegExp(`^\\[chief:0\\] INFO Starting at global step ${s2} \\(restored from \\S*model\\.ckpt-${s2}\\)`, "m"));
    for (const task of ["worker:0", "worker:1"]) expect(r3.stderr, task).toMatch(new RegExp(`^\\[${task}\\] INFO Starting at global step ${s2}[ ;.]`, "m"));
    const digests = [...r3.stdout.matchAll(/^\[(\S+)\] final \d digest ([0-9a-f]{64})$/gm)];
    expect(digests.map((m) => m[1]).sort()).toEqual(["chief:0", "worker:0", "worker:1"]);
    expect(new Set(digests.map((m) => m[2])).size, r3.stdout).toBe(1);
    expect(tree(dir).filter((f) => f.split("/").pop() === "checkpoint")).toEqual(["ck/checkpoint"]);
  });

  /** The line a rank logs when it hears worker:1's claim (its SIGTERM) through the coordination service. */
  const heardOfWorker1 = (task: string): RegExp => new RegExp(`^\\[${task}\\] INFO PreemptionCheckpointHandler: worker:1 got a termination notice; ${task} stops where the tasks agree\\.$`, "m");

  it("a preemption while the others wait in a collective: worker:1, stalled between steps, gets SIGTERM; if it goes on, every rank stops after the step they wait in and the chief saves it; if it is killed instead, the others' all-reduce is cancelled, they exit 42 (the chief after saving the last step every rank completed), and the next launch resumes there with bit-identical replicas", { timeout: 600_000 }, async () => {
    const dir = tempDir();
    const file = config(dir, 100_000);
    /**
     * A launch whose worker:1 (rank 2) waits for `dir/go` after the step that reaches global
     * step `step`; once it waits, SIGTERM to it, and the others told of it by the coordination service.
     */
    const noticeWhileStalled = async (step: number): Promise<CliChild> => {
      const l = run(["launch", "--workers", "3", file], { DP_OUT: dir, DP_LAST_STEP: "100000", DP_PRINT_STEPS: "1", DP_PAUSE_STEP: String(step), DP_PAUSE_RANK: "2" });
      await l.waitFor(new RegExp(`^\\[worker:1\\] trained ${step}$`, "m"), 200_000);
      process.kill(pidOf(l.output(), "worker:1"), "SIGTERM");
      for (const task of ["chief:0", "worker:0"]) await l.waitFor(heardOfWorker1(task), 60_000);
      return l;
    };

    // 1. The notice while the others wait for worker:1 in step 4's all-reduce; then it goes on,
    // and its step 4 carries its stop vote.
    const first = await noticeWhileStalled(3);
    // Neither could finish step 4 without worker:1.
    expect(first.output()).not.toMatch(/\] trained 4$/m);
    writeFileSync(join(dir, "go"), "");
    expect(stoppedTogether(await first.done)).toBe(4);

    // 2. The same, but worker:1 is killed (a platform's grace period ends) instead of going on:
    // the others' step-7 all-reduce fails, and since they heard of the notice it is a
    // cancellation, not a failure. Step 7 applied nothing anywhere, so the chief saves step 6.
    rmSync(join(dir, "go"));
    const second = await noticeWhileStalled(6);
    process.kill(pidOf(second.output(), "worker:1"), "SIGKILL");
    const r2 = await second.done;
    // launch's code is the first one other than the preemption code.
    expect(r2.code, r2.stderr).toBe(137);
    expect(r2.stderr).toMatch(/^\[chief:0\] INFO Starting at global step 4 \(restored from \S*model\.ckpt-4\)/m);
    expect(r2.stderr).toContain("[launch] worker:1 exited with 137 (killed by SIGKILL)");
    for (const task of ["chief:0", "worker:0"]) expect(r2.stderr, task).toContain(`[launch] ${task} exited with 42`);
    expect(r2.stderr).toMatch(/^\[chief:0\] INFO Preemption checkpoint for step 6 saved: \S*model\.ckpt-6\.$/m);
    expect(r2.stderr).toMatch(/^\[chief:0\] INFO Preempted: checkpoint saved; exiting with 42/m);
    expect(r2.stderr).toMatch(/^\[worker:0\] INFO Preempted \(.*\) during a collective, which was cancelled: exiting with 42 without saving/m);
    expect(r2.stderr).not.toMatch(/Training failed/);
    expect(r2.stdout).not.toMatch(/\] trained 7$/m);

    // 3. The next launch resumes from step 6 and finishes with one digest.
    const r3 = await run(["launch", "--workers", "3", file], { DP_OUT: dir, DP_LAST_STEP: "8" }).done;
    expect(r3.code, r3.stderr).toBe(0);
    expect(r3.stderr).toMatch(/^\[chief:0\] INFO Starting at global step 6 \(restored from \S*model\.ckpt-6\)/m);
    const digests = [...r3.stdout.matchAll(/^\[(\S+)\] final \d digest ([0-9a-f]{64})$/gm)];
    expect(digests.map((m) => m[1]).sort()).toEqual(["chief:0", "worker:0", "worker:1"]);
    expect(new Set(digests.map((m) => m[2])).size, r3.stdout).toBe(1);
    expect(tree(dir).filter((f) => f.split("/").pop() === "checkpoint")).toEqual(["ck/checkpoint"]);
  });

  it("cluster.collectiveTimeoutSecs from the config: worker:1 stalls between steps, alive, and the first rank to give up waiting for it raises DeadlineExceededError after that many seconds, naming it (exit 1)", { timeout: 300_000 }, async () => {
    const dir = tempDir();
    const l = run(["launch", "--workers", "3", config(dir, 100_000, "  collectiveTimeoutSecs: 15\n")], { DP_OUT: dir, DP_LAST_STEP: "100000", DP_PAUSE_STEP: "3", DP_PAUSE_RANK: "2" });
    await l.waitFor(/^\[launch\] (chief|worker):0 exited with 1$/m, 200_000);
    // worker:1 need not wait for launch's SIGKILL.
    writeFileSync(join(dir, "go"), "");
    const r = await l.done;
    expect(r.code, r.stderr).toBe(1);
    for (const task of ["chief:0", "worker:0", "worker:1"]) expect(r.stderr, task).toMatch(new RegExp(`^\\[${task}\\] INFO Joined the replica group: .*collective deadline 15 s, cluster\\.collectiveTimeoutSecs\\)`, "m"));
    // The other waiting rank gets the same error (its own deadline, or the first one's abort
    // frame), or launch's SIGTERM first (exit 42), whichever reaches it first.
    const failed = /^\[launch\] ((?:chief|worker):0) exited with 1$/m.exec(r.stderr)?.[1] as string;
    expect(r.stderr, failed).toMatch(new RegExp(`^\\[${failed}\\] Training failed: DeadlineExceededError: allReduce\\(mean\\) #\\d+ over \\d+ float32 elements did not finish within 15 s on rank \\d \\(\\S+\\): the slowest rank is rank 2 \\(/job:worker/replica:0/task:1\\), which had not entered it`, "m"));
    // It was alive all along (its heartbeats went on): nobody declared it failed, and the ranks
    // that waited for it raise the deadline, not a loss. (worker:1 itself may find the chief's
    // service gone once the chief exited, before launch's SIGTERM reaches it.)
    expect(r.stderr).not.toMatch(/declared failed/);
    for (const task of ["chief:0", "worker:0"]) expect(r.stderr, task).not.toMatch(new RegExp(`^\\[${task}\\] .*UnavailableError`, "m"));
  });

  /**
   * One `launch --workers 3 --max-restarts 2` run serves the two fault tests below (each group
   * start costs three processes loading TensorFlow.js). Once the chief's state file names a
   * checkpoint past step 0, the chief is SIGKILLed (restart 1: the group). Once the restarted
   * chief has saved past the step it restored, worker:1 is frozen (SIGSTOP); declared failed, it
   * is SIGKILLed by launch and restarted alone (restart 2), and the second group finishes. What
   * launch printed, split by group, and the state-file steps seen before each fault.
   */
  interface TwoFaults {
    readonly run: CliRun;
    readonly groups: readonly string[];
    readonly saved: readonly [number, number];
  }
  const FAULTS_LAST_STEP = 30;
  let twoFaults: Promise<TwoFaults> | undefined;
  const runTwoFaults = async (): Promise<TwoFaults> => {
    const dir = tempDir();
    const l = run(["launch", "--workers", "3", "--max-restarts", "2", "--no-standby", config(dir, 2)], { DP_OUT: dir, DP_LAST_STEP: String(FAULTS_LAST_STEP) }, 400_000);
    const saved1 = await checkpointAfterStep(dir, 0, 200_000);
    process.kill(pidOf(l.output(), "chief:0"), "SIGKILL");
    // The second group: its chief's restored step, then a checkpoint of its own past it.
    await l.waitFor(/restart 1 of 2\)$[\s\S]*^\[chief:0\] INFO Starting at global step \d+ \(restored/m, 200_000);
    const restored = Number(/restart 1 of 2\)$[\s\S]*^\[chief:0\] INFO Starting at global step (\d+) \(restored/m.exec(l.output())?.[1]);
    const saved2 = await checkpointAfterStep(dir, restored, 200_000);
    const frozen = pidOf(l.output(), "worker:1");
    process.kill(frozen, "SIGSTOP");
    // The heartbeat names it; a stopped process only leaves with SIGKILL, which launch sends at
    // once when a task says it was declared failed (its status channel), then starts it again alone.
    const r = await l.done;
    expect(r.code, r.stderr).toBe(0);
    const groups = r.stderr.split(/^\[launch\] .*restarting the group \(restart \d of 2\)$/m);
    expect(groups, r.stderr).toHaveLength(2);
    // Still only the chief writes.
    expect(tree(dir).filter((f) => f.split("/").pop() === "checkpoint")).toEqual(["ck/checkpoint"]);
    return { run: r, groups, saved: [saved1, saved2] };
  };

  /**
   * `group` (after a restart) starts from the chief's checkpoint of a step ≥ `saved`: the chief
   * restores it and every worker starts at its step. That step.
   */
  const resumedFrom = (group: string, saved: number): number => {
    const restored = /^\[chief:0\] INFO Starting at global step (\d+) \(restored from \S*model\.ckpt-(\d+)\)/m.exec(group);
    expect(restored, group).not.toBeNull();
    const step = Number(restored?.[1]);
    expect(Number(restored?.[2])).toBe(step);
    expect(step).toBeGreaterThanOrEqual(saved);
    // The workers start from the chief's restored values: the same global step.
    for (const task of ["worker:0", "worker:1"]) expect(group, task).toMatch(new RegExp(`^\\[${task}\\] INFO Starting at global step ${step}[ ;.]`, "m"));
    return step;
  };

  /** The last group finishes: every task reaches the last step, with one digest. */
  const finishesBitIdentical = ({ run: r, groups }: TwoFaults): void => {
    for (const task of ["chief:0", "worker:0", "worker:1"]) expect(groups.at(-1), task).toContain(`[${task}] INFO Done at global step ${FAULTS_LAST_STEP}.`);
    const digests = [...r.stdout.matchAll(/^\[(\S+)\] final \d digest ([0-9a-f]{64})$/gm)];
    expect(digests.map((m) => m[1]).sort()).toEqual(["chief:0", "worker:0", "worker:1"]);
    expect(new Set(digests.map((m) => m[2])).size, r.stdout).toBe(1);
  };

  it("SIGKILL of the chief under --max-restarts 2: the group restarts from the chief's last checkpoint and finishes with bit-identical replicas", { timeout: 500_000 }, async () => {
    const faults = await (twoFaults ??= runTwoFaults());
    const [first = "", second = ""] = faults.groups;
    expect(first).toContain("[launch] chief:0 exited with 137 (killed by SIGKILL)");
    // Killed before the last step: no task of the first group finished.
    expect(first).not.toMatch(/Done at global step/);
    resumedFrom(second, faults.saved[0]);
    finishesBitIdentical(faults);
  });

  it("worker:1 frozen mid-step (SIGSTOP) under --max-restarts 2: declared failed through the heartbeat, SIGKILLed by launch and restarted alone while the others wait (no task fails); the group re-forms its ring and finishes with bit-identical replicas", { timeout: 500_000 }, async () => {
    const faults = await (twoFaults ??= runTwoFaults());
    const [, second = ""] = faults.groups;
    // The heartbeat names it (the collective's deadline is 60 s): never a DeadlineExceededError, and nobody fails.
    expect(second).not.toMatch(/Training failed/);
    expect(second).toMatch(/^\[launch\] worker:1 (was declared failed by the coordination service|is stopped \(SIGSTOP\)).*: SIGKILL$/m);
    expect(second).toContain("[launch] worker:1 exited with 137 (killed by SIGKILL)");
    expect(second).toContain("[launch] worker:1 died (SIGKILL): restarting it alone; the group waits for it to rejoin (restart 2 of 2)");
    expect(second).toMatch(/^\[launch\] started worker:1 at \S+ \(pid \d+, alone: restart 2 of 2\)$/m);
    expect(second).toMatch(/^\[chief:0\] WARN chief:0 lost .*: waiting up to \d+ s \(maxWaitSecs\) for it to rejoin the replica group\.$/m);
    expect(second).toMatch(/^\[chief:0\] INFO The replica group re-formed its ring in generation \d+ /m);
    // The chief and worker:0 of the second group are the processes that finish.
    expect([...second.matchAll(/^\[launch\] started (chief|worker):0 /gm)]).toHaveLength(2);
    finishesBitIdentical(faults);
  });

  it.skipIf(opensslVersion === undefined)("TLS and a cluster token from the config: 2 workers train to the last step with one digest; every server and the collective say they use both", { timeout: 300_000 }, async () => {
    const dir = tempDir();
    // One certificate (localhost, 127.0.0.1) serves every task, as server and as client.
    const { f } = makeCertificates(dir);
    writeFileSync(join(dir, "token"), "a-cluster-token-for-this-test\n", { mode: 0o600 });
    const secured = `  tokenFile: ${join(dir, "token")}\n  tls:\n    certFile: ${f("server.pem")}\n    keyFile: ${f("server.key")}\n    caFile: ${f("ca.pem")}\n`;
    const r = await run(["launch", "--workers", "2", config(dir, 4, secured)], { DP_OUT: dir }).done;
    expect(r.code, r.stderr).toBe(0);
    for (const task of ["chief:0", "worker:0"]) {
      expect(r.stderr, task).toMatch(new RegExp(`^\\[${task}\\] INFO /job:\\S+ serving \\S+ \\(bound \\S+, TLS, token required\\)`, "m"));
      expect(r.stderr, task).toMatch(new RegExp(`^\\[${task}\\] INFO Joined the replica group: rank \\d of 2 \\(with \\S+; TLS; token required; collective deadline`, "m"));
      expect(r.stderr, task).toContain(`[${task}] INFO Done at global step ${LAST_STEP}.`);
    }
    const digests = [...r.stdout.matchAll(/^\[(\S+)\] final \d digest ([0-9a-f]{64})$/gm)];
    expect(digests.map((m) => m[1]).sort()).toEqual(["chief:0", "worker:0"]);
    expect(new Set(digests.map((m) => m[2])).size, r.stdout).toBe(1);
  });

  it("a NaN loss on rank 1: every task fails with NanLossDuringTrainingError at the same step (exit 1); with failOnNanLoss false every task stops there (exit 0)", { timeout: 400_000 }, async () => {
    const NAN_STEP = 3;
    const nan = { DP_NAN_RANK: "1", DP_NAN_STEP: String(NAN_STEP), DP_PRINT_STEPS: "1", DP_LAST_STEP: "20" };
    const failing = tempDir();
    const r = await run(["launch", "--workers", "3", config(failing, 4, "hooks:\n  - type: NanTensorHook\n    lossTensor: loss\n")], { DP_OUT: failing, ...nan }).done;
    expect(r.code, r.stderr).toBe(1);
    for (const task of ["chief:0", "worker:0", "worker:1"]) {
      expect(r.stderr, task).toContain(`[launch] ${task} exited with 1`);
      expect(r.stderr, task).toMatch(new RegExp(`\\[${task}\\] Training failed: NanLossDuringTrainingError`));
      // Steps 0 to NAN_STEP − 1 finished; the step of the NaN raised.
      const trained = [...r.stdout.matchAll(new RegExp(`^\\[${task}\\] trained (\\d+)$`, "gm"))].map((m) => Number(m[1]));
      expect(trained.at(-1), task).toBe(NAN_STEP);
    }

    const stopping = tempDir();
    const s = await run(["launch", "--workers", "3", config(stopping, 4, "hooks:\n  - type: NanTensorHook\n    lossTensor: loss\n    failOnNanLoss: false\n")], { DP_OUT: stopping, ...nan }).done;
    expect(s.code, s.stderr).toBe(0);
    for (const task of ["chief:0", "worker:0", "worker:1"]) {
      expect(s.stderr, task).toContain(`[${task}] WARN Model diverged with loss = NaN.`);
      expect(s.stderr, task).toContain(`[${task}] INFO Done at global step ${NAN_STEP + 1}.`);
    }
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
