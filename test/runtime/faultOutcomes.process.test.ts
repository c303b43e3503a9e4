/**
 * Faults and what each one ends in, on real processes of the custom TensorFlow.js loop
 * (test/fixtures/preemption/customLoop.ts, the loop of examples/preemption-custom-loop.ts) with no
 * delay between steps, on both coordination backends (etcd skipped with a message without its
 * binary): `launch` names the task whose notice started a preemption (its status channel says
 * so, not its log text); a frozen task declared failed is SIGKILLed at once; SIGTERM at any
 * moment of `startTask()` ends in exit 42, never 143. Tests assert causes and outcomes (exit
 * codes, the lines that name them), never durations; every wait has a deadline.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";

import { LAUNCH_READY_ENV, LAUNCH_READY_LINE } from "../../src/runtime/launchReady.js";
import { etcdBinary, EtcdProcess } from "../cluster/coordination/etcdHarness.js";
import { freePorts, killLaunchTree, repoRoot, startCli, type CliChild } from "../util/cliChild.js";
import { useTempDirs } from "../util/tempDirs.js";
import { spawnBareWorker } from "../util/bareTask.js";
import { exitsOf, pidOf } from "../util/launchOutput.js";

const tempDir = useTempDirs("ms-fault-outcomes-");
const loop = join(repoRoot, "test/fixtures/preemption/customLoop.ts");
const TASKS = ["chief:0", "worker:0", "worker:1"] as const;

const launched: CliChild[] = [];
const children: import("node:child_process").ChildProcess[] = [];
afterEach(async () => {
  for (const l of launched.splice(0)) await killLaunchTree(l);
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
});

/** A task of the custom loop started by hand (no `launch`), with its output so far and its exit. */
interface LoopTask {
  readonly child: import("node:child_process").ChildProcess;
  readonly output: () => string;
  readonly exited: Promise<number | null>;
}
const spawnLoop = (env: Record<string, string>): LoopTask => {
  const child = spawn(process.execPath, ["--import", "tsx", loop], { cwd: repoRoot, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  children.push(child);
  let text = "";
  child.stdout?.setEncoding("utf8").on("data", (d: string) => (text += d));
  child.stderr?.setEncoding("utf8").on("data", (d: string) => (text += d));
  return { child, output: () => text, exited: new Promise((resolve) => child.once("exit", (code) => resolve(code))) };
};

if (etcdBinary === undefined) console.warn("faultOutcomes: no etcd binary (apt-get install etcd-server): the etcd half of these fault tests is skipped");

const backends: { readonly name: string; readonly skip: boolean; readonly args: () => string[]; readonly settings: () => Record<string, unknown> }[] = [];
let etcd: EtcdProcess | undefined;
backends.push({ name: "embedded", skip: false, args: () => [], settings: () => ({}) });
backends.push({
  name: "etcd",
  skip: etcdBinary === undefined,
  args: () => ["--backend", "etcd", "--etcd-endpoints", (etcd as EtcdProcess).endpoint, "--etcd-prefix", `faults-${Math.random().toString(16).slice(2)}/`],
  settings: () => ({ backend: "etcd", etcdEndpoints: [(etcd as EtcdProcess).endpoint], etcdPrefix: `faults-${Math.random().toString(16).slice(2)}/` }),
});

for (const backend of backends) {
  describe.skipIf(backend.skip)(`fault outcomes (${backend.name} coordination)`, () => {
    beforeAll(async () => {
      if (backend.name === "etcd") etcd = await EtcdProcess.start();
    }, 60_000);
    afterAll(async () => {
      if (backend.name === "etcd") await etcd?.stop();
    });

    const start = (env: Record<string, string>, launchArgs: readonly string[] = []): { run: CliChild; ckpt: string } => {
      const ckpt = join(tempDir(), "ckpt");
      const run = startCli(["launch", "--workers", "3", "--kill-after", "60", ...backend.args(), ...launchArgs, "--", process.execPath, "--import", "tsx", loop], {
        env: { CHECKPOINT_DIR: ckpt, ...env },
        timeoutMs: 240_000,
      });
      launched.push(run);
      return { run, ckpt };
    };
    const allTraining = async (run: CliChild): Promise<void> => {
      for (const t of TASKS) await run.waitFor(`[${t}] ${t}: training`, 120_000);
    };

    it("launch names the task whose termination notice started the preemption, from its status channel, whichever task exits first", async () => {
      const { run } = start({});
      await allTraining(run);
      process.kill(pidOf(run.output(), "worker:1"), "SIGTERM");
      const r = await run.done;
      expect(r.code, run.output()).toBe(42);
      expect(exitsOf(run.output())).toEqual({ "chief:0": 42, "worker:0": 42, "worker:1": 42 });
      expect(run.output()).toContain("[launch] worker:1 got a termination notice (SIGTERM)");
      expect(run.output()).toMatch(/^\[launch\] worker:1 was preempted \((exit 42|\S+ exited 42 first)\)/m);
      expect(run.output()).not.toMatch(/^\[launch\] (chief:0|worker:0) was preempted/m);
      expect(run.output()).toMatch(/^\[launch\] worker:1 exited with 42(; the preemption started with worker:1's termination notice)?: exiting with 42$|the preemption started with worker:1's termination notice: exiting with 42$/m);
    }, 300_000);

    it("a frozen task (SIGSTOP) declared failed by the coordination service is SIGKILLed by launch at once: no kill delay waited out", async () => {
      const { run } = start({});
      await allTraining(run);
      const frozen = pidOf(run.output(), "worker:0");
      process.kill(frozen, "SIGSTOP");
      const r = await run.done;
      const out = run.output();
      // Found lost by a peer, or seen stopped by launch itself once the group stops (whichever comes first).
      expect(out).toMatch(/^\[launch\] worker:0 ((was declared failed by the coordination service|is lost: \S.*) \((chief:0|worker:1) says so\)|is stopped \(SIGSTOP\): it can neither save nor exit): SIGKILL$/m);
      expect(exitsOf(out)["worker:0"]).toBe(137);
      // The kill delay (60 s) never ran out for it: launch did not wait for it.
      expect(out).not.toMatch(/worker:0.* still running after 60 s/);
      // The first failure decides: the frozen task's 137, or the chief's 1 (it failed for the
      // cluster's failure) when its exit is read first. No preemption: nobody got a notice of its own.
      expect([1, 137], out).toContain(r.code);
      expect(exitsOf(out)["chief:0"], out).toBe(1);
      expect(out).not.toMatch(/got a termination notice/);
    }, 300_000);

    it("a frozen chief (SIGSTOP), then SIGTERM to a worker: the noticed worker exits 43 without saving, launch SIGKILLs the lost chief and exits 43, nothing is saved", async () => {
      const { run, ckpt } = start({});
      await allTraining(run);
      process.kill(pidOf(run.output(), "chief:0"), "SIGSTOP");
      process.kill(pidOf(run.output(), "worker:1"), "SIGTERM");
      const r = await run.done;
      const out = run.output();
      const exits = exitsOf(out);
      expect(exits["worker:1"], out).toBe(43);
      // worker:0 never heard of the notice (it went to the frozen service): on the embedded
      // backend it fails for the lost chief (1); on etcd it hears the claim and exits 43 too.
      expect(backend.name === "etcd" ? [43] : [1, 43], out).toContain(exits["worker:0"]);
      expect(exits["chief:0"], out).toBe(137);
      expect(out).toMatch(/^\[launch\] chief:0 (is lost|was declared failed|is stopped \(SIGSTOP\)).*: SIGKILL$/m);
      expect(r.code, out).toBe(43);
      expect(out).not.toMatch(/preemptionCheckpointSaved/);
      expect(existsSync(join(ckpt, "checkpoint"))).toBe(false);
    }, 300_000);

    it("a data-parallel group with a frozen rank (SIGSTOP worker:0), then SIGTERM to worker:1: the chief saves its last completed step, the live tasks exit 42, and the restart resumes there", async () => {
      const { run, ckpt } = start({ DATA_PARALLEL: "1" });
      await allTraining(run);
      process.kill(pidOf(run.output(), "worker:0"), "SIGSTOP");
      process.kill(pidOf(run.output(), "worker:1"), "SIGTERM");
      const r = await run.done;
      const out = run.output();
      expect(r.code, out).toBe(42);
      expect(exitsOf(out), out).toEqual({ "chief:0": 42, "worker:0": 137, "worker:1": 42 });
      const saved = [...out.matchAll(/^\[chief:0\] chief:0: event (\{"type":"preemptionCheckpointSaved".*\})$/gm)].map((m) => (JSON.parse(m[1] as string) as { run: number }).run);
      expect(saved, out).toHaveLength(1);
      expect(existsSync(join(ckpt, "checkpoint"))).toBe(true);
      expect(out).toMatch(/the replica group lost a rank while it stopped for worker:1's termination notice/);
      const at = saved[0] as number;
      // The same checkpoint directory: the restart resumes every rank at the saved run.
      const resumed = startCli(["launch", "--workers", "3", ...backend.args(), "--", process.execPath, "--import", "tsx", loop], {
        env: { CHECKPOINT_DIR: ckpt, DATA_PARALLEL: "1", STEPS: String(at + 10) },
        timeoutMs: 240_000,
      });
      launched.push(resumed);
      expect((await resumed.done).code, resumed.output()).toBe(0);
      for (const t of TASKS) expect(resumed.output()).toContain(`[${t}] ${t}: starting at run ${at}`);
    }, 300_000);

    it("a data-parallel group with a frozen chief, then SIGTERM to worker:1: every live worker exits 43 without saving (the one without a notice heard it over the ring), launch 43", async () => {
      const { run, ckpt } = start({ DATA_PARALLEL: "1" });
      await allTraining(run);
      process.kill(pidOf(run.output(), "chief:0"), "SIGSTOP");
      process.kill(pidOf(run.output(), "worker:1"), "SIGTERM");
      const r = await run.done;
      const out = run.output();
      expect(r.code, out).toBe(43);
      // worker:0 got no notice: it hears of worker:1's over the group's ring (the frozen chief
      // hosts the embedded service, so the claim reaches nobody there).
      expect(exitsOf(out), out).toMatchObject({ "worker:0": 43, "worker:1": 43 });
      expect(out).toMatch(/^\[worker:0\] .*worker:1 got a termination notice; worker:0 stops where the tasks agree/m);
      expect(existsSync(join(ckpt, "checkpoint"))).toBe(false);
    }, 300_000);

    for (const failing of ["worker:0", "chief:0"] as const) {
      it(`a data-parallel group: an OpError raised in ${failing}'s step is what every rank raises (its class and code, naming the reporter), ranks blocked in the all-reduce included`, async () => {
        const { run } = start({ DATA_PARALLEL: "1", FAIL_TASK: failing, FAIL_AT_RUN: "30" });
        expect((await run.done).code, run.output()).toBe(1);
        const out = run.output();
        expect(out).toContain(`[${failing}] ${failing}: error ResourceExhaustedError: ${failing} ran out of memory at run 30`);
        for (const t of TASKS.filter((x) => x !== failing)) {
          expect(out).toMatch(new RegExp(`^\\[${t}\\] ${t}: error ResourceExhaustedError: .*${failing} ran out of memory at run 30`, "m"));
          expect(out).not.toMatch(new RegExp(`^\\[${t}\\] ${t}: error UnavailableError`, "m"));
        }
      }, 300_000);
    }

    it("outside launch, a worker of the custom loop (its own session, a handler) whose chief is SIGKILLed says it cannot wait for the chief, and fails with the loss", async () => {
      const [chiefPort, workerPort] = await freePorts(2);
      const cluster = { chief: [`127.0.0.1:${chiefPort}`], worker: [`127.0.0.1:${workerPort}`] };
      const ckpt = join(tempDir(), "ckpt");
      // One etcd prefix for both tasks (settings() draws a new one each call).
      const settings = JSON.stringify(backend.settings());
      const spawnTask = (type: string): LoopTask => spawnLoop({ TF_CONFIG: JSON.stringify({ cluster, task: { type, index: 0 } }), CHECKPOINT_DIR: ckpt, MONITORED_SESSION_CLUSTER: settings });
      const chief = spawnTask("chief");
      const worker = spawnTask("worker");
      for (let i = 0; i < 1200 && !worker.output().includes("worker:0: training"); i++) await new Promise((r) => setTimeout(r, 100));
      expect(worker.output()).toContain("worker:0: training");
      chief.child.kill("SIGKILL");
      expect(await worker.exited, worker.output()).toBe(1);
      expect(worker.output()).toMatch(/lost the chief \/job:chief\/replica:0\/task:0 \(.*\): no session of this task is made from its session targets and hooks .*; the task fails with the loss\./);
      expect(worker.output()).not.toContain("waiting up to");
    }, 180_000);

    describe("SIGTERM while startTask() runs: the task leaves the cluster and exits 42, never 143", () => {
      /** worker:0 of a two-task cluster whose chief never starts: it stays in registration until told. */
      const lonelyWorker = async (): Promise<LoopTask> => {
        const [chiefPort, workerPort] = await freePorts(2);
        const tfConfig = JSON.stringify({ cluster: { chief: [`127.0.0.1:${chiefPort}`], worker: [`127.0.0.1:${workerPort}`] }, task: { type: "worker", index: 0 } });
        return spawnLoop({ TF_CONFIG: tfConfig, CHECKPOINT_DIR: join(tempDir(), "ckpt"), [LAUNCH_READY_ENV]: "1", MONITORED_SESSION_CLUSTER: JSON.stringify(backend.settings()) });
      };
      const until = async (output: () => string, pattern: string, exited: Promise<unknown>): Promise<void> => {
        let gone = false;
        void exited.then(() => (gone = true));
        for (let i = 0; i < 1200 && !output().includes(pattern); i++) {
          if (gone) throw new Error(`exited before printing ${pattern}:\n${output()}`);
          await new Promise((r) => setTimeout(r, 100));
        }
        if (!output().includes(pattern)) throw new Error(`no ${pattern} within 120 s:\n${output()}`);
      };

      it("at its first line (its handlers are installed as it says it is ready)", async () => {
        const w = await lonelyWorker();
        await until(w.output, LAUNCH_READY_LINE, w.exited);
        w.child.kill("SIGTERM");
        expect(await w.exited, w.output()).toBe(42);
        expect(w.output()).toMatch(/worker:0: termination notice \(SIGTERM\) while it joined the cluster: leaving the cluster and exiting with 42/);
      }, 180_000);

      it("while it joins the replica group (every task registered; one never joins): the others hear of it and exit 42 too, never waiting out the heartbeat timeout", async () => {
        // chief:0 and worker:0 are the custom loop, data-parallel; worker:1 is a bare
        // coordination client that registers and never joins the group, so both wait in the join.
        const [chiefPort, workerPort, otherPort] = await freePorts(3);
        const cluster = { chief: [`127.0.0.1:${chiefPort}`], worker: [`127.0.0.1:${workerPort}`, `127.0.0.1:${otherPort}`] };
        const settings = backend.settings();
        const spawnTask = (type: string, index: number): LoopTask =>
          spawnLoop({ TF_CONFIG: JSON.stringify({ cluster, task: { type, index } }), CHECKPOINT_DIR: join(tempDir(), "ckpt"), DATA_PARALLEL: "1", MONITORED_SESSION_CLUSTER: JSON.stringify(settings) });
        const chief = spawnTask("chief", 0);
        const worker = spawnTask("worker", 0);
        const etcdSettings = settings as { etcdEndpoints?: string[]; etcdPrefix?: string };
        const bare = spawnBareWorker(
          1,
          backend.name === "etcd" ? { etcdEndpoints: etcdSettings.etcdEndpoints ?? [], etcdPrefix: etcdSettings.etcdPrefix ?? "" } : { chiefTarget: `grpc://127.0.0.1:${chiefPort}` },
        );
        children.push(bare);
        await until(worker.output, "Every task of the cluster registered", worker.exited);
        await until(chief.output, "Every task of the cluster registered", chief.exited);
        expect(worker.output()).not.toContain("Joined the replica group");
        worker.child.kill("SIGTERM");
        expect(await worker.exited, worker.output()).toBe(42);
        expect(worker.output()).toMatch(/worker:0: termination notice \(SIGTERM\) while it joined the cluster: leaving the cluster and exiting with 42/);
        // Every task registered: the chief hears of worker:0's notice and leaves too, with no notice of its own.
        expect(await chief.exited, chief.output()).toBe(42);
        expect(chief.output()).toMatch(/chief:0: worker:0's termination notice \(SIGTERM\) while it joined the cluster: exiting with 42 without saving/);
        expect(chief.output()).not.toContain("Joined the replica group");
      }, 180_000);

      it("while it waits for the other tasks to register", async () => {
        const w = await lonelyWorker();
        await until(w.output, "registering with the coordination service", w.exited);
        w.child.kill("SIGTERM");
        expect(await w.exited, w.output()).toBe(42);
        expect(w.output()).toMatch(/worker:0: termination notice \(SIGTERM\) while it joined the cluster/);
      }, 180_000);
    });
  });
}
