/**
 * A lost worker restarted alone, on what users run: the bundled TensorFlow.js job under
 * `monitored-session launch --workers 3 --max-restarts 1` (data-parallel, no delay between
 * steps), on both coordination backends (etcd skipped with a message without its binary). A
 * worker SIGKILLed while the group trains is started again alone, with the same TF_CONFIG, and
 * rejoins the group, whose chief and other worker (the same processes) waited for it; a second
 * loss, with no restart left, stops the group: the chief saves its last completed step and
 * `launch` exits with the loss's code. A frozen worker (SIGSTOP) is declared failed, SIGKILLed
 * by `launch` at once and started again alone the same way; a SIGTERM to `launch` after it
 * rejoined is a preemption of the whole group, as before any loss. A chief that freezes while a
 * worker restarts alone is found stopped by `launch` (or lost by a waiting worker) and SIGKILLed,
 * and the group restarts from its checkpoint. A program of your own under
 * `launch -- <command>` (examples/preemption-custom-loop.ts: `startTask({ dataParallel: true })`
 * and a `PreemptionCheckpointHandler`) gets the same: its lost worker, killed or frozen, starts
 * again alone and counts the group's runs, so that a later SIGTERM saves every task at one run.
 * Causes and outcomes only (exit codes, pids, the lines that name them), never durations; every
 * wait has a deadline.
 */
import { join } from "node:path";

import { afterEach, describe, expect, it } from "vitest";

import { killLaunchTree, startCli, type CliChild } from "../util/cliChild.js";
import { coordinationBackends } from "../util/coordinationBackends.js";
import { exampleTree } from "../util/exampleTree.js";
import { exitsOf, pidOf } from "../util/launchOutput.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-restart-alone-");

const launched: CliChild[] = [];
afterEach(async () => {
  for (const l of launched.splice(0)) await killLaunchTree(l);
});


const backends = coordinationBackends("restartAlone", "restart-alone");

/** How often `pattern` occurs in `text`. */
const count = (text: string, pattern: RegExp): number => [...text.matchAll(new RegExp(pattern.source, "gm"))].length;

const JOINED = /^\[launch\] every task joined the replica group, which waits for a lost worker: a worker that dies is restarted alone$/m;
/** {@link JOINED} twice: a restarted worker joined the group's new ring and said so (launch may restart it again). */
const JOINED_AGAIN = new RegExp(`${JOINED.source}[\\s\\S]*${JOINED.source.slice(1)}`, "m");

/**
 * Starts `launch --workers 3 <args>` and waits until every task joined the replica group and
 * trained: `trained(task)` is the line a task prints once it trains.
 */
const launchTraining = async (args: readonly string[], trained: (task: string) => RegExp, env: NodeJS.ProcessEnv = {}): Promise<CliChild> => {
  const l = startCli(["launch", "--workers", "3", "--no-standby", ...args], { env: { CI: "true", ...env }, timeoutMs: 380_000 });
  launched.push(l);
  await l.waitFor(JOINED, 200_000);
  for (const task of ["chief:0", "worker:0", "worker:1"]) await l.waitFor(trained(task), 200_000);
  return l;
};

/** SIGTERM to `launch`, with the chief still the first process: every task exits 42; resolves with the output. */
const preemptTheGroup = async (l: CliChild, chief: number): Promise<string> => {
  expect(pidOf(l.output(), "chief:0")).toBe(chief);
  l.process.kill("SIGTERM");
  const r = await l.done;
  const out = l.output();
  expect(r.code, out).toBe(42);
  expect(exitsOf(out), out).toEqual({ "chief:0": 42, "worker:0": 42, "worker:1": 42 });
  return out;
};

/** The bundled job's progress line of `task` past its first step. */
const stepLine = (task: string): RegExp => new RegExp(`^\\[${task}\\] step [1-9]\\d*/\\d+ `, "m");

for (const backend of backends) {
  describe.skipIf(backend.skip)(`launch restarts a lost worker alone (${backend.name} coordination)`, () => {
    backend.serve();

    it("a SIGKILLed worker starts again alone and rejoins while the chief's process trains on; a second loss with no restart left stops the group, the chief saves, launch exits 137", { timeout: 400_000 }, async () => {
      const root = tempDir();
      // Far more steps than the test lasts: it ends on the second loss, never at the last step.
      const yaml = exampleTree(root, (y) => y.replace(/^lastStep: \d+$/m, "lastStep: 10000000") + backend.cluster());
      const l = await launchTraining(["--max-restarts", "1", "--kill-after", "60", yaml], stepLine);
      const chief = pidOf(l.output(), "chief:0");
      const worker0 = pidOf(l.output(), "worker:0");
      const first = pidOf(l.output(), "worker:1");
      process.kill(first, "SIGKILL");

      await l.waitFor(/^\[launch\] worker:1 died \(SIGKILL\): restarting it alone; the group waits for it to rejoin \(restart 1 of 1\)$/m, 60_000);
      await l.waitFor(/^\[launch\] started worker:1 at \S+ \(pid \d+, alone: restart 1 of 1\)$/m, 60_000);
      await l.waitFor(/^\[chief:0\] WARN chief:0 lost .*: waiting up to 7200 s \(maxWaitSecs\) for it to rejoin the replica group\.$/m, 120_000);
      await l.waitFor(/^\[chief:0\] INFO The replica group re-formed its ring in generation \d+ /m, 240_000);
      // The restarted worker joined the group's new ring and said so: launch may restart it again.
      await l.waitFor(JOINED_AGAIN, 120_000);
      const second = pidOf(l.output(), "worker:1");
      expect(second).not.toBe(first);
      // Nobody else was restarted: the same chief and worker:0 processes.
      expect(pidOf(l.output(), "chief:0")).toBe(chief);
      expect(pidOf(l.output(), "worker:0")).toBe(worker0);
      expect(count(l.output(), /^\[launch\] started chief:0 /)).toBe(1);

      // No restart left: the group stops, as without one.
      process.kill(second, "SIGKILL");
      const r = await l.done;
      const out = l.output();
      expect(r.code, out).toBe(137);
      expect(count(out, /^\[launch\] worker:1 exited with 137 \(killed by SIGKILL\)$/)).toBe(2);
      expect(out).toMatch(/^\[launch\] worker:1 failed \(exit 137\): stopping chief:0, worker:0 \(SIGTERM, SIGKILL after 60 s\)$/m);
      expect(out).toMatch(/^\[launch\] worker:1 exited with 137: exiting with 137 after 1 restart$/m);
      expect(out).not.toMatch(/restarting the group/);
      const exits = exitsOf(out);
      expect(exits["chief:0"], out).toBe(42);
      expect(exits["worker:0"], out).toBe(42);
      expect(out).toMatch(/^\[chief:0\] INFO Preemption checkpoint for step \d+ saved: \S+\.$/m);
    });

    it("a frozen worker (SIGSTOP) is declared failed, SIGKILLed by launch and started again alone; the group trains on with it, and a SIGTERM to launch then stops every task with 42 after the chief's save", { timeout: 400_000 }, async () => {
      const root = tempDir();
      const yaml = exampleTree(root, (y) => y.replace(/^lastStep: \d+$/m, "lastStep: 10000000") + backend.cluster());
      const l = await launchTraining(["--max-restarts", "1", "--kill-after", "60", yaml], stepLine);
      const chief = pidOf(l.output(), "chief:0");
      const frozen = pidOf(l.output(), "worker:0");
      process.kill(frozen, "SIGSTOP");

      // Declared failed through the heartbeat; a stopped process leaves only with SIGKILL, which launch sends.
      await l.waitFor(/^\[launch\] worker:0 was declared failed by the coordination service \((chief:0|worker:1) says so\): SIGKILL$/m, 120_000);
      await l.waitFor(/^\[launch\] worker:0 died \(SIGKILL\): restarting it alone; the group waits for it to rejoin \(restart 1 of 1\)$/m, 60_000);
      await l.waitFor(/^\[chief:0\] INFO The replica group re-formed its ring in generation \d+ /m, 240_000);
      await l.waitFor(JOINED_AGAIN, 120_000);
      expect(pidOf(l.output(), "worker:0")).not.toBe(frozen);
      const out = await preemptTheGroup(l, chief);
      expect(out).toMatch(/^\[chief:0\] INFO Preemption checkpoint for step \d+ saved: \S+\.$/m);
      expect(out).not.toMatch(/Training failed|restarting the group/);
      expect(count(out, /^\[launch\] started chief:0 /)).toBe(1);
    });

    it("a chief that freezes (SIGSTOP) while a worker restarts alone is found lost, SIGKILLed by launch, and the group restarts from its checkpoint; a SIGTERM then stops every task with 42", { timeout: 400_000 }, async () => {
      const root = tempDir();
      const yaml = exampleTree(root, (y) => y.replace(/^lastStep: \d+$/m, "lastStep: 10000000") + backend.cluster());
      const l = await launchTraining(["--max-restarts", "2", "--kill-after", "60", yaml], stepLine);
      const chief = pidOf(l.output(), "chief:0");
      process.kill(pidOf(l.output(), "worker:1"), "SIGKILL");
      await l.waitFor(/^\[launch\] worker:1 died \(SIGKILL\): restarting it alone; the group waits for it to rejoin \(restart 1 of 2\)$/m, 60_000);
      process.kill(chief, "SIGSTOP");

      // Found stopped by launch while the group waits (or by a waiting worker: its lease ended), SIGKILLed, and the group restarts.
      await l.waitFor(/^\[launch\] chief:0 (is stopped \(SIGSTOP\) while the group waits for worker:1 to rejoin: it would hold the group|was declared failed by the coordination service \(worker:0 says so\)); SIGKILL$|^\[launch\] chief:0 was declared failed by the coordination service \(worker:0 says so\): SIGKILL$/m, 120_000);
      await l.waitFor(/^\[launch\] .*: restarting the group \(restart 2 of 2\)$/m, 120_000);
      await l.waitFor(/^\[launch\] started chief:0 at \S+ \(pid \d+\)$[\s\S]*^\[chief:0\] INFO Starting at global step \d+ \(restored from /m, 200_000);
      const restarted = pidOf(l.output(), "chief:0");
      expect(restarted).not.toBe(chief);
      await l.waitFor(JOINED_AGAIN, 200_000);
      const out = await preemptTheGroup(l, restarted);
      expect(out).toMatch(/^\[chief:0\] INFO Preemption checkpoint for step \d+ saved: \S+\.$/m);
    });

    it("a program of your own (launch -- <command>, examples/preemption-custom-loop.ts): a SIGKILLed worker and then a frozen one each start again alone and count the group's runs; a SIGTERM to launch then saves every task at one run, 42 everywhere", { timeout: 400_000 }, async () => {
      const root = tempDir();
      const runLine = (task: string): RegExp => new RegExp(`^\\[${task}\\] ${task}: run [1-9]\\d*, loss `, "m");
      const l = await launchTraining(
        ["--max-restarts", "2", "--kill-after", "60", ...backend.flags(), "--", process.execPath, "--import", "tsx", "examples/preemption-custom-loop.ts"],
        runLine,
        // Far more runs than the test lasts: it ends on the SIGTERM, never at the last run.
        { STEPS: "100000000", CHECKPOINT_DIR: join(root, "ckpt") },
      );
      const chief = pidOf(l.output(), "chief:0");
      const killed = pidOf(l.output(), "worker:1");
      process.kill(killed, "SIGKILL");
      await l.waitFor(/^\[launch\] worker:1 died \(SIGKILL\): restarting it alone; the group waits for it to rejoin \(restart 1 of 2\)$/m, 60_000);
      await l.waitFor(/^\[chief:0\] INFO The replica group re-formed its ring in generation \d+ \(\/job:worker\/replica:0\/task:1 rejoined\)/m, 240_000);
      // The restarted program's handler counts the group's runs, not its own checkpoint's.
      await l.waitFor(/^\[worker:1\] INFO PreemptionCheckpointHandler: worker:1 counts the replica group's runs: [1-9]\d* \(the chief's\), not \d+ \(its own restore\), since the ranks step together\.$/m, 120_000);
      await l.waitFor(JOINED_AGAIN, 120_000);
      expect(pidOf(l.output(), "worker:1")).not.toBe(killed);

      const frozen = pidOf(l.output(), "worker:0");
      process.kill(frozen, "SIGSTOP");
      await l.waitFor(/^\[launch\] worker:0 was declared failed by the coordination service \((chief:0|worker:1) says so\): SIGKILL$/m, 120_000);
      await l.waitFor(/^\[launch\] worker:0 died \(SIGKILL\): restarting it alone; the group waits for it to rejoin \(restart 2 of 2\)$/m, 60_000);
      await l.waitFor(/^\[worker:0\] INFO PreemptionCheckpointHandler: worker:0 counts the replica group's runs: [1-9]\d* \(the chief's\)/m, 240_000);
      await l.waitFor(new RegExp(`${JOINED_AGAIN.source}[\\s\\S]*${JOINED.source.slice(1)}`, "m"), 120_000);
      // Every task trains after the second re-forming (the run lines are printed every 500 runs).
      const trainedSince = l.output().length;
      for (const task of ["chief:0", "worker:0", "worker:1"]) await l.waitFor(new RegExp(`[\\s\\S]{${trainedSince}}[\\s\\S]*${runLine(task).source.slice(1)}`, "m"), 120_000);
      const out = await preemptTheGroup(l, chief);
      // One agreed run, saved by every task (the chief's checkpoint is the one kept).
      const saves = [...out.matchAll(/^\[(\S+)\] INFO PreemptionCheckpointHandler: checkpoint saved at run (\d+)/gm)].map((m) => [m[1], Number(m[2])] as const);
      expect(saves.map(([task]) => task).sort(), out).toEqual(["chief:0", "worker:0", "worker:1"]);
      expect(new Set(saves.map(([, run]) => run)).size, out).toBe(1);
      expect(out).toMatch(/^\[chief:0\] INFO PreemptionCheckpointHandler: checkpoint saved at run \d+ \(\S+\/ckpt\/ckpt-\d+\)\. Exiting\./m);
      expect(count(out, /^\[launch\] started chief:0 /)).toBe(1);
      expect(out).not.toMatch(/restarting the group/);
    });
  });
}
