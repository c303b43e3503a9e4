/**
 * Faults on what users run: the bundled TensorFlow.js job under `monitored-session launch
 * --workers 3 examples/tfjs-classifier.yaml` (data-parallel, no delay between steps), on both
 * coordination backends (etcd skipped with a message without its binary). A frozen chief (SIGSTOP)
 * while a worker gets SIGTERM ends in 43 on every worker with nothing saved; a frozen rank while another gets
 * SIGTERM ends in 42 with the chief's save of its last completed step, which the restart resumes,
 * and `launch` SIGKILLs the stopped rank at once instead of waiting out its kill delay. Without
 * data parallelism (each task its own replica), SIGTERM to a worker ends in 42 everywhere once the
 * chief's save is stored, and with the chief frozen in 43 for the noticed worker. Started by hand
 * (`run` with TF_CONFIG, no data parallelism), the same notice goes through the same agreement
 * (no report to the cluster), and a worker waiting for its frozen chief exits 43 on a SIGTERM. Causes and
 * outcomes only (exit codes, the lines that name them), never durations; every wait has a deadline.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

import { freePorts, killLaunchTree, startCli, type CliChild, type CliRun } from "../util/cliChild.js";
import { coordinationBackends } from "../util/coordinationBackends.js";
import { exampleTree } from "../util/exampleTree.js";
import { exitsOf, pidOf } from "../util/launchOutput.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-bundled-faults-");
const TASKS = ["chief:0", "worker:0", "worker:1"] as const;

/** The step of the chief's preemption checkpoint, as its line in `out` says; asserts it went to the example's directory under `root`. */
const chiefSave = (out: string, root: string): number => {
  const saved = /^\[chief:0\] INFO Preemption checkpoint for step (\d+) saved: (\S+)\.$/m.exec(out);
  expect(saved, out).not.toBeNull();
  const step = Number(saved?.[1]);
  expect(saved?.[2]).toBe(join(root, "runs/tfjs-classifier", `model.ckpt-${step}`));
  return step;
};

const launched: CliChild[] = [];
afterEach(async () => {
  for (const l of launched.splice(0)) await killLaunchTree(l);
});


const backends = coordinationBackends("bundledFaults", "bundled-faults");

for (const backend of backends) {
  describe.skipIf(backend.skip)(`the bundled job under launch, faults (${backend.name} coordination)`, () => {
    backend.serve();

    /**
     * Launches the example (its YAML edited by `edit`) in a fresh tree; once every rank trains.
     * `dataParallel: false`: each task trains its own replica (no group), and only the chief's save is kept.
     */
    const launchTraining = async (root: string, edit: (yaml: string) => string = (y) => y, dataParallel = true): Promise<{ l: CliChild; yaml: string }> => {
      const cluster = backend.cluster();
      const own = dataParallel ? "" : "  dataParallel: false\n";
      const yaml = exampleTree(root, (y) => edit(y) + (own === "" ? cluster : cluster === "" ? `cluster:\n${own}` : cluster + own));
      const l = startCli(["launch", "--workers", "3", "--kill-after", "60", yaml], { env: { CI: "true" }, timeoutMs: 280_000 });
      launched.push(l);
      for (const task of TASKS) await l.waitFor(new RegExp(`^\\[${task}\\] step [1-9]\\d*/\\d+ `, "m"), 200_000);
      return { l, yaml };
    };

    /** Launches the example (with or without data parallelism), freezes the chief, SIGTERMs worker:1; asserts worker:1 exits 43. */
    const frozenChiefThenNotice = async (dataParallel: boolean): Promise<{ r: CliRun; out: string; exits: Record<string, number> }> => {
      const { l } = await launchTraining(tempDir(), undefined, dataParallel);
      process.kill(pidOf(l.output(), "chief:0"), "SIGSTOP");
      process.kill(pidOf(l.output(), "worker:1"), "SIGTERM");
      const r = await l.done;
      const out = l.output();
      const exits = exitsOf(out);
      expect(exits["worker:1"], out).toBe(43);
      return { r, out, exits };
    };

    /**
     * Launches the example in `root` (with or without data parallelism), freezes worker:0, SIGTERMs
     * worker:1; asserts the chief saved, the live tasks exit 42, and launch SIGKILLed the stopped
     * worker for what it is (stopped, or lost), never waiting out a kill delay.
     */
    const frozenWorkerThenNotice = async (root: string, dataParallel: boolean): Promise<{ yaml: string; out: string; step: number }> => {
      const { l, yaml } = await launchTraining(root, undefined, dataParallel);
      process.kill(pidOf(l.output(), "worker:0"), "SIGSTOP");
      process.kill(pidOf(l.output(), "worker:1"), "SIGTERM");
      const r = await l.done;
      const out = l.output();
      expect(r.code, out).toBe(42);
      expect(exitsOf(out), out).toEqual({ "chief:0": 42, "worker:0": 137, "worker:1": 42 });
      const step = chiefSave(out, root);
      expect(out).toMatch(/^\[launch\] worker:0 (is stopped \(SIGSTOP\)|is lost|was declared failed).*: SIGKILL$/m);
      expect(out).not.toMatch(/still running (after|\d+ s after)/);
      return { yaml, out, step };
    };

    // Every task preempts through the agreement: worker:1's notice is its stop vote, its claim, and
    // a notice frame around the group's ring. worker:0 hears of it over the ring (on the embedded
    // backend the frozen chief hosts the service, so the claim reaches nobody; on etcd the claim
    // comes too), so both workers know of the notice when they lose the chief: both exit 43.
    it("a frozen chief (SIGSTOP), then SIGTERM to a worker: every worker exits 43 without saving, launch SIGKILLs the chief and exits 43", { timeout: 300_000 }, async () => {
      const { r, out, exits } = await frozenChiefThenNotice(true);
      expect(out).toMatch(/^\[worker:1\] ERROR Preempted \(SIGTERM\), and the chief was lost meanwhile .*: nobody can write the checkpoint; exiting with 43 without saving/m);
      expect(exits["worker:0"], out).toBe(43);
      expect(out).toMatch(/^\[worker:0\] INFO PreemptionCheckpointHandler: worker:1 got a termination notice/m);
      expect(out).toMatch(/^\[worker:0\] ERROR Preempted \(worker:1's termination notice\), and the chief was lost meanwhile /m);
      expect(exits["chief:0"], out).toBe(137);
      expect(out).toMatch(/^\[launch\] chief:0 (is lost|was declared failed|is stopped).*: SIGKILL$/m);
      expect(r.code, out).toBe(43);
      expect(out).not.toMatch(/Preemption checkpoint for step \d+ saved/);
    });

    it("a frozen rank (SIGSTOP worker:0), then SIGTERM to worker:1: the chief saves its last completed step, the live tasks exit 42, launch SIGKILLs the stopped rank at once, and the restart resumes there", { timeout: 300_000 }, async () => {
      const root = tempDir();
      const { yaml, step } = await frozenWorkerThenNotice(root, true);

      // The same command on the same directory, to two more steps: every rank starts at the saved step.
      writeFileSync(yaml, readFileSync(yaml, "utf8").replace(/^lastStep: \d+$/m, `lastStep: ${step + 2}`));
      const restart = startCli(["launch", "--workers", "3", yaml], { env: { CI: "true" }, timeoutMs: 280_000 });
      launched.push(restart);
      const r2 = await restart.done;
      expect(r2.code, restart.output()).toBe(0);
      expect(restart.output()).toMatch(new RegExp(`^\\[chief:0\\] INFO Starting at global step ${step} \\(restored from \\S+model\\.ckpt-${step}\\)`, "m"));
      expect(restart.output()).toMatch(new RegExp(`^\\[chief:0\\] INFO Done at global step ${step + 2}\\.$`, "m"));
    });

    // Without data parallelism every task preempts through its handler's "chiefSaves" agreement:
    // the noticed task's claim stops each task at its own next boundary, the chief saves there,
    // and the workers exit once the chief's checkpoint is stored (the chief waits for their
    // acknowledgements before it goes).
    it("without data parallelism, SIGTERM to a worker: the chief saves at its own next step, every task exits 42 (the workers once the chief's checkpoint is stored), launch exits 42", { timeout: 300_000 }, async () => {
      const root = tempDir();
      const { l } = await launchTraining(root, undefined, false);
      process.kill(pidOf(l.output(), "worker:1"), "SIGTERM");
      const r = await l.done;
      const out = l.output();
      expect(r.code, out).toBe(42);
      expect(exitsOf(out), out).toEqual({ "chief:0": 42, "worker:0": 42, "worker:1": 42 });
      chiefSave(out, root);
      for (const w of ["worker:0", "worker:1"]) {
        expect(out).toMatch(new RegExp(`^\\[${w}\\] INFO PreemptionCheckpointHandler: the chief's preemption save is done \\(at its run \\d+\\): ${w} exits with the preemption code without saving`, "m"));
      }
      expect(out).toMatch(/^\[chief:0\] INFO PreemptionCheckpointHandler: worker:1 got a termination notice; chief:0 saves at its next step boundary\.$/m);
      // Every acknowledgement was stored before its task went: the chief waited for nobody.
      expect(out).not.toContain("did not acknowledge");
      // Named for its notice, whichever task exited first.
      expect(out).toMatch(/^\[launch\] worker:1 was preempted \((exit 42|\S+ exited 42 first)\)/m);
    });

    it("without data parallelism, a frozen worker (SIGSTOP worker:0), then SIGTERM to worker:1: the chief saves at its own next step, the live tasks exit 42, launch SIGKILLs the stopped worker at once", { timeout: 300_000 }, async () => {
      await frozenWorkerThenNotice(tempDir(), false);
    });

    it("without data parallelism, a frozen chief (SIGSTOP), then SIGTERM to a worker: that worker exits 43 without saving (never 42: nobody saved), nothing is saved, launch exits 43", { timeout: 300_000 }, async () => {
      const { r, out, exits } = await frozenChiefThenNotice(false);
      expect(out).toMatch(/^\[worker:1\] ERROR PreemptionCheckpointHandler: the chief was lost before worker:1 heard that its preemption save was done /m);
      expect(out).toMatch(/^\[worker:1\] ERROR Preempted \(SIGTERM\), and the chief was lost meanwhile .*: nobody can write the checkpoint; exiting with 43 without saving/m);
      if (backend.name === "etcd") {
        // The claim reached worker:0 through etcd: it stopped too, and lost the chief while it waited.
        expect(exits["worker:0"], out).toBe(43);
        expect(out).toMatch(/^\[worker:0\] INFO PreemptionCheckpointHandler: worker:1 got a termination notice; worker:0 stops at its next step boundary/m);
      } else {
        // The frozen chief hosts the service: the claim reached nobody, and worker:0 fails for the lost chief (docs/distributed.md).
        expect(exits["worker:0"], out).toBe(1);
      }
      expect(exits["chief:0"], out).toBe(137);
      expect(r.code, out).toBe(43);
      expect(out).not.toMatch(/Preemption checkpoint for step \d+ saved/);
    });
  });

  describe.skipIf(backend.skip)(`the bundled job, tasks started by hand (run, TF_CONFIG, no data parallelism), faults (${backend.name} coordination)`, () => {
    backend.serve();

    /** `run` of the example for each task, with a hand-set TF_CONFIG; resolves once every task trains. */
    const startByHand = async (root: string): Promise<Record<(typeof TASKS)[number], CliChild>> => {
      const cluster = backend.cluster();
      const own = "  dataParallel: false\n";
      const yaml = exampleTree(root, (y) => y + (cluster === "" ? `cluster:\n${own}` : cluster + own));
      const ports = await freePorts(3);
      const spec = { chief: [`127.0.0.1:${ports[0]}`], worker: [`127.0.0.1:${ports[1]}`, `127.0.0.1:${ports[2]}`] };
      const start = (type: string, index: number): CliChild => {
        const c = startCli(["run", yaml], { env: { CI: "true", TF_CONFIG: JSON.stringify({ cluster: spec, task: { type, index } }) }, timeoutMs: 280_000 });
        launched.push(c);
        return c;
      };
      const tasks = { "chief:0": start("chief", 0), "worker:0": start("worker", 0), "worker:1": start("worker", 1) };
      for (const c of Object.values(tasks)) await c.waitFor(/^step [1-9]\d*\/\d+ /m, 200_000);
      return tasks;
    };

    it("SIGTERM to a worker: its claim stops every task, the chief saves at its own next step, every task exits 42 (the workers once the chief's checkpoint is stored)", { timeout: 300_000 }, async () => {
      const root = tempDir();
      const tasks = await startByHand(root);
      tasks["worker:1"].process.kill("SIGTERM");
      const [chief, w0, w1] = await Promise.all([tasks["chief:0"].done, tasks["worker:0"].done, tasks["worker:1"].done]);
      expect([chief.code, w0.code, w1.code], `${chief.stderr}\n${w0.stderr}\n${w1.stderr}`).toEqual([42, 42, 42]);
      const saved = /^INFO Preemption checkpoint for step (\d+) saved: (\S+)\.$/m.exec(chief.stderr);
      expect(saved, chief.stderr).not.toBeNull();
      expect(saved?.[2]).toBe(join(root, "runs/tfjs-classifier", `model.ckpt-${saved?.[1]}`));
      expect(chief.stderr).toMatch(/^INFO PreemptionCheckpointHandler: worker:1 got a termination notice; chief:0 saves at its next step boundary\.$/m);
      for (const [w, r] of [["worker:0", w0], ["worker:1", w1]] as const) {
        expect(r.stderr).toMatch(new RegExp(`^INFO PreemptionCheckpointHandler: the chief's preemption save is done \\(at its run \\d+\\): ${w} exits with the preemption code without saving`, "m"));
      }
      // The one protocol: no notice went to the cluster as its error, and nobody waited for an acknowledgement.
      for (const r of [chief, w0, w1]) expect(r.stderr).not.toContain("cluster preemption:");
      expect(chief.stderr).not.toContain("did not acknowledge");
    });

    it("a frozen chief (SIGSTOP): each worker waits for it; a SIGTERM to a waiting worker ends its wait with 43 and nothing saved, the line naming the task, the chief and the loss", { timeout: 300_000 }, async () => {
      const tasks = await startByHand(tempDir());
      const chief = tasks["chief:0"];
      process.kill(chief.process.pid as number, "SIGSTOP");
      try {
        for (const w of ["worker:0", "worker:1"] as const) await tasks[w].waitFor(`${w} lost the chief /job:chief/replica:0/task:0`, 120_000);
        for (const w of ["worker:0", "worker:1"] as const) {
          tasks[w].process.kill("SIGTERM");
          const r = await tasks[w].done;
          expect(r.code, r.stderr).toBe(43);
          expect(r.stderr).toMatch(
            new RegExp(`^ERROR Preempted \\(SIGTERM\\): ${w} stops for its termination notice while its chief /job:chief/replica:0/task:0 is lost \\(\\w+Error: .*\\): nobody can write the checkpoint; exiting with 43 without saving`, "m"),
          );
          expect(r.stderr).not.toContain("Preemption checkpoint for step");
        }
      } finally {
        chief.process.kill("SIGKILL");
        process.kill(chief.process.pid as number, "SIGCONT");
      }
      expect((await chief.done).signal).toBe("SIGKILL");
    });
  });
}
