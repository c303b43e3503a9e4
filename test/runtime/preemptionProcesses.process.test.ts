/**
 * PreemptionCheckpointHandler across real processes, on both coordination backends: the
 * scenarios of TensorFlow's failure_handling tests, written anew. Three tasks run a custom
 * TensorFlow.js loop (test/fixtures/preemption/customLoop.ts, the loop of
 * examples/preemption-custom-loop.ts with knobs) under `monitored-session launch -- <command>`,
 * each a child process training with no delay between steps; the handler gets the task object
 * of `startTask()` as its cluster resolver. Tests act when a line appears, never after a fixed
 * time; every wait has a deadline. Without an etcd binary the etcd half is skipped with a message.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";

import { etcdBinary, EtcdProcess } from "../cluster/coordination/etcdHarness.js";
import { alive, killLaunchTree, repoRoot, startCli, type CliChild } from "../util/cliChild.js";
import { useTempDirs } from "../util/tempDirs.js";
import { exitsOf, pidOf } from "../util/launchOutput.js";

const tempDir = useTempDirs("ms-preemption-processes-");
const loop = join(repoRoot, "test/fixtures/preemption/customLoop.ts");
const TASKS = ["chief:0", "worker:0", "worker:1"] as const;

const launched: CliChild[] = [];
afterEach(async () => {
  for (const l of launched.splice(0)) await killLaunchTree(l);
});

/** One event a task printed (`<task>: event {json}`). */
interface TaskEvent {
  readonly task: string;
  readonly type: string;
  readonly [key: string]: unknown;
}

const eventsOf = (output: string): TaskEvent[] =>
  [...output.matchAll(/^\[(\S+)\] \S+: event (\{.*\})$/gm)].map((m) => ({ task: m[1] as string, ...(JSON.parse(m[2] as string) as { type: string }) }));

/** The runs each task saved a preemption checkpoint at, by task. */
const savesOf = (output: string): Record<string, number[]> => {
  const out: Record<string, number[]> = Object.fromEntries(TASKS.map((t) => [t, []]));
  for (const e of eventsOf(output)) if (e.type === "preemptionCheckpointSaved") out[e.task]?.push(e["run"] as number);
  return out;
};

const backends: { readonly name: string; readonly skip: boolean; readonly args: () => string[] }[] = [];
let etcd: EtcdProcess | undefined;
backends.push({ name: "embedded", skip: false, args: () => [] });
backends.push({ name: "etcd", skip: etcdBinary === undefined, args: () => ["--backend", "etcd", "--etcd-endpoints", (etcd as EtcdProcess).endpoint] });

for (const backend of backends) {
  describe.skipIf(backend.skip)(`PreemptionCheckpointHandler with a cluster resolver, 3 processes under launch (${backend.name} coordination)`, () => {
    beforeAll(async () => {
      if (backend.name === "etcd") etcd = await EtcdProcess.start();
    }, 60_000);
    afterAll(async () => {
      if (backend.name === "etcd") await etcd?.stop();
    });

    /** `launch --workers 3 … -- node --import tsx customLoop.ts`, the checkpoints under a new directory. */
    const start = (env: Record<string, string>, launchArgs: readonly string[] = [], dir = tempDir()): { run: CliChild; dir: string; ckpt: string } => {
      const ckpt = join(dir, "ckpt");
      const run = startCli(["launch", "--workers", "3", "--kill-after", "20", ...backend.args(), ...launchArgs, "--", process.execPath, "--import", "tsx", loop], {
        env: { CHECKPOINT_DIR: ckpt, ...env },
        timeoutMs: Number(process.env["PREEMPTION_TEST_TIMEOUT_MS"] ?? 240_000),
      });
      launched.push(run);
      return { run, dir, ckpt };
    };
    const allTraining = async (run: CliChild): Promise<void> => {
      for (const t of TASKS) await run.waitFor(`[${t}] ${t}: training`, 120_000);
    };

    for (const victim of TASKS) {
      it(`test_preemption_checkpointing: SIGTERM to ${victim}: every task saves at one run and exits 42; only the chief's directory holds it, no workertemp is left${victim === "chief:0" ? "; a restart resumes every task at that run" : ""}`, async () => {
        const { run, dir, ckpt } = start({});
        await allTraining(run);
        process.kill(pidOf(run.output(), victim), "SIGTERM");
        const r = await run.done;
        expect(r.code, run.output()).toBe(42);
        expect(exitsOf(run.output())).toEqual({ "chief:0": 42, "worker:0": 42, "worker:1": 42 });
        const saves = savesOf(run.output());
        const at = saves["chief:0"]?.[0] as number;
        expect(saves).toEqual({ "chief:0": [at], "worker:0": [at], "worker:1": [at] });
        expect(readdirSync(dir)).toEqual(["ckpt"]);
        expect(existsSync(join(ckpt, "checkpoint"))).toBe(true);
        // Every acknowledgement was stored before its task exited: the chief waited for none, nobody warned.
        expect(run.output()).not.toMatch(/did not acknowledge|could not acknowledge|acknowledgement of the agreed run \d+ was not stored/);
        // The leader claimed; every task heard the same agreed run.
        const events = eventsOf(run.output());
        expect(events.filter((e) => e.type === "preemptionClaimed").map((e) => [e.task, e["leader"]])).toEqual([[victim, victim]]);
        expect(events.filter((e) => e.type === "preemptionStepAgreed").map((e) => [e.task, e["run"]]).sort()).toEqual(TASKS.map((t) => [t, at]));
        if (victim !== "chief:0") return;
        const again = start({ STEPS: String(at + 30) }, [], dir);
        expect((await again.run.done).code, again.run.output()).toBe(0);
        for (const t of TASKS) {
          expect(again.run.output()).toContain(`[${t}] ${t}: starting at run ${at}`);
          expect(again.run.output()).toContain(`[${t}] ${t}: done at run ${at + 30}`);
        }
      }, 300_000);
    }

    it("test_multiple_workers_preempted_consecutively: SIGTERM to two tasks at once makes one leader and one agreed run", async () => {
      const { run } = start({});
      await allTraining(run);
      process.kill(pidOf(run.output(), "worker:0"), "SIGTERM");
      process.kill(pidOf(run.output(), "worker:1"), "SIGTERM");
      expect((await run.done).code, run.output()).toBe(42);
      const claims = eventsOf(run.output()).filter((e) => e.type === "preemptionClaimed");
      const leaders = new Set(claims.map((e) => e["leader"]));
      expect(leaders.size, run.output()).toBe(1);
      expect(claims.filter((e) => e.task === e["leader"])).toHaveLength(1);
      const saves = savesOf(run.output());
      expect(new Set(Object.values(saves).map((s) => s.join())).size).toBe(1);
      expect(saves["chief:0"]).toHaveLength(1);
    }, 300_000);

    it("test_grace_period_continue_training: a first save, training goes on, the last save near the end of the grace period, then exit 42", async () => {
      const { run, dir } = start({ GRACE_PERIOD_SECS: "4" });
      await allTraining(run);
      process.kill(pidOf(run.output(), "worker:1"), "SIGTERM");
      expect((await run.done).code, run.output()).toBe(42);
      const saves = savesOf(run.output());
      const [first, last] = saves["chief:0"] as [number, number];
      expect(saves).toEqual({ "chief:0": [first, last], "worker:0": [first, last], "worker:1": [first, last] });
      expect(last).toBeGreaterThan(first);
      expect(run.output()).toContain("continue training for the grace period");
      expect(run.output()).toContain("grace period almost ended. Final call to save a checkpoint!");
      expect(readdirSync(dir)).toEqual(["ckpt"]);
    }, 300_000);

    it("test_error_propagation: an OpError raised in one task's step is raised by every other task, same class, naming the reporter", async () => {
      const { run } = start({ FAIL_TASK: "worker:0", FAIL_AT_RUN: "40" });
      expect((await run.done).code, run.output()).toBe(1);
      const out = run.output();
      expect(out).toContain("[worker:0] worker:0: error ResourceExhaustedError: worker:0 ran out of memory at run 40");
      for (const t of ["chief:0", "worker:1"]) {
        expect(out).toMatch(new RegExp(`^\\[${t}\\] ${t}: error ResourceExhaustedError: worker:0 ran out of memory at run 40 \\(reported by task /job:worker/replica:0/task:0\\)$`, "m"));
      }
    }, 300_000);

    it("a task frozen (SIGSTOP) during the agreement: the others do not hang; the chief saves where it is and the live tasks exit 42", async () => {
      const { run, dir } = start({}, ["--heartbeat-timeout", "3"]);
      await allTraining(run);
      const frozen = pidOf(run.output(), "worker:1");
      process.kill(frozen, "SIGSTOP");
      try {
        process.kill(pidOf(run.output(), "worker:0"), "SIGTERM");
        await run.waitFor("[launch] chief:0 exited with 42", 120_000);
        await run.waitFor("[launch] worker:0 exited with 42", 120_000);
      } finally {
        // launch SIGKILLs it itself once a task says it was declared failed (its status channel).
        try {
          process.kill(frozen, "SIGKILL");
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== "ESRCH") throw e;
        }
      }
      const r = await run.done;
      expect(r.code, run.output()).toBe(42);
      expect(run.output()).toMatch(/\[chief:0\] WARN PreemptionCheckpointHandler: a task was lost during the preemption agreement \(.*task:1.*\); chief:0 saves at run \d+/);
      expect(savesOf(run.output())["chief:0"]).toHaveLength(1);
      expect(readdirSync(dir)).toEqual(["ckpt"]);
    }, 300_000);

    it("the deadline budget: a notice whose deadline is now makes the leader propose the boundary it reaches next, and the checkpoint restores", async () => {
      const { run, dir } = start({ DEADLINE_TASK: "worker:0", DEADLINE_AT_RUN: "40" });
      expect((await run.done).code, run.output()).toBe(42);
      const m = /\[worker:0\] INFO PreemptionCheckpointHandler: the notice's deadline is \d+ ms away, less than one more step and the save \(\d+ ms\): proposing run (\d+), the boundary worker:0 reaches next, instead of run (\d+)/.exec(run.output());
      expect(m, run.output()).not.toBeNull();
      expect(Number(m?.[2])).toBe(Number(m?.[1]) + 1);
      const saves = savesOf(run.output());
      const at = saves["chief:0"]?.[0] as number;
      expect(saves).toEqual({ "chief:0": [at], "worker:0": [at], "worker:1": [at] });
      // A task ahead of the leader only moves the run to its own boundary.
      expect(at).toBeGreaterThanOrEqual(Number(m?.[1]));
      const again = start({ STEPS: String(at + 10) }, [], dir);
      expect((await again.run.done).code, again.run.output()).toBe(0);
      for (const t of TASKS) expect(again.run.output()).toContain(`[${t}] ${t}: starting at run ${at}`);
    }, 300_000);

    it("launch killed (SIGKILL): every task takes its parent's death as a notice, they save at one run and exit (no orphan trains on)", async () => {
      const logs = tempDir();
      const { run, dir } = start({ TASK_LOG_DIR: logs });
      await allTraining(run);
      const pids = TASKS.map((t) => pidOf(run.output(), t));
      run.process.kill("SIGKILL");
      await run.done;
      // Bounded wait for the orphans to go (each polls its parent every second, then saves).
      for (let i = 0; i < 600 && pids.some(alive); i++) await new Promise((r) => setTimeout(r, 100));
      expect(pids.filter(alive)).toEqual([]);
      expect(readdirSync(dir)).toEqual(["ckpt"]);
      const again = start({ STEPS: "1" }, [], dir);
      expect((await again.run.done).code, again.run.output()).toBe(0);
      const starts = TASKS.map((t) => Number(new RegExp(`\\[${t}\\] ${t}: starting at run (\\d+)`).exec(again.run.output())?.[1]));
      // What the orphans said once launch was gone, for a failure's message.
      const orphans = readdirSync(logs).map((f) => `--- ${f}:\n${readFileSync(join(logs, f), "utf8")}`).join("\n");
      const said = `${run.output()}\n--- restart:\n${again.run.output()}\n${orphans}`;
      expect(starts[0], said).toBeGreaterThan(0);
      expect(new Set(starts).size, said).toBe(1);
    }, 300_000);

    it("a data-parallel custom loop: the stop vote stops every rank after the same step, through the library API alone", async () => {
      const { run, dir } = start({ DATA_PARALLEL: "1" });
      await allTraining(run);
      process.kill(pidOf(run.output(), "worker:1"), "SIGTERM");
      expect((await run.done).code, run.output()).toBe(42);
      const agreed = eventsOf(run.output()).filter((e) => e.type === "preemptionStepAgreed");
      const at = agreed[0]?.["run"] as number;
      expect(agreed.map((e) => [e.task, e["run"]]).sort(), run.output()).toEqual(TASKS.map((t) => [t, at]));
      expect(savesOf(run.output())).toEqual({ "chief:0": [at], "worker:0": [at], "worker:1": [at] });
      // No claim over the coordination service: the vote rode the step's all-reduce.
      expect(eventsOf(run.output()).filter((e) => e.type === "preemptionClaimed")).toEqual([]);
      expect(readdirSync(dir)).toEqual(["ckpt"]);
    }, 300_000);
  });
}

describe("examples/preemption-custom-loop.ts under launch, as its header says to run it", () => {
  const example = join(repoRoot, "examples/preemption-custom-loop.ts");
  const launchExample = (ckpt: string, steps: number): CliChild => {
    const run = startCli(["launch", "--workers", "3", "--", process.execPath, "--import", "tsx", example], { env: { CHECKPOINT_DIR: ckpt, STEPS: String(steps) }, timeoutMs: 240_000 });
    launched.push(run);
    return run;
  };

  it("trains to the end (exit 0) with a final checkpoint; SIGTERM to launch makes every task save at one run and exit 42; the same command resumes every task there", async () => {
    const dir = tempDir();
    const ckpt = join(dir, "ckpt");
    const done = launchExample(ckpt, 40);
    expect((await done.done).code, done.output()).toBe(0);
    expect(done.output()).toMatch(/\[chief:0\] chief:0: done at run 40; final checkpoint \S+ckpt-1/);
    expect(readdirSync(dir)).toEqual(["ckpt"]);

    const stopped = launchExample(ckpt, 100_000);
    for (const t of TASKS) await stopped.waitFor(`[${t}] ${t}: starting at run 40`, 120_000);
    await stopped.waitFor(/\[chief:0\] chief:0: run 500,/, 120_000);
    stopped.process.kill("SIGTERM");
    expect((await stopped.done).code, stopped.output()).toBe(42);
    const saved = [...stopped.output().matchAll(/^\[(\S+)\] INFO PreemptionCheckpointHandler: checkpoint saved at run (\d+)/gm)].map((m) => [m[1], Number(m[2])]);
    const at = saved[0]?.[1] as number;
    expect(saved.sort()).toEqual(TASKS.map((t) => [t, at]));
    expect(readdirSync(dir)).toEqual(["ckpt"]);

    const resumed = launchExample(ckpt, at + 20);
    expect((await resumed.done).code, resumed.output()).toBe(0);
    for (const t of TASKS) expect(resumed.output()).toContain(`[${t}] ${t}: starting at run ${at} of ${at + 20}`);
  }, 400_000);
});

if (etcdBinary === undefined) {
  describe("PreemptionCheckpointHandler across processes (etcd coordination)", () => {
    it.skip("skipped: no etcd binary on this machine (install Debian's etcd-server; .ci/run does)", () => undefined);
  });
}
