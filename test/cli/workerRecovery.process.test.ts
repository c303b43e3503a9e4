/**
 * A worker of a cluster without data parallelism outlives its chief (issue 12 §4, §6), with real
 * `run` processes and hand-set TF_CONFIGs (test/fixtures/cli/cluster-model-job.ts: w and b start
 * at random values in each process; each session prints its pid, global step and the bits of its
 * starting values; a `gate`d task waits after its third step until the test releases it). The chief is SIGKILLed after it saved a checkpoint and started again by hand:
 * the same worker process (never restarted) re-registers, re-creates its session from the
 * restored values and both finish at the last step. A chief that never comes back makes the
 * worker exit 1 with one line naming the chief and `maxWaitSecs`; a termination notice while it
 * waits exits 43 (nobody can write the checkpoint). Each test acts when a line appears, never after a fixed time, and asserts
 * outcomes and named tasks only.
 */
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

import { freePorts, repoRoot, startCli, type CliChild, type CliRun } from "../util/cliChild.js";
import { waitFor } from "../util/cli.js";
import { etcdBinary, EtcdProcess } from "../cluster/coordination/etcdHarness.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-worker-recovery-");
const job = join(repoRoot, "test/fixtures/cli/cluster-model-job.ts");
const CHIEF = "/job:chief/replica:0/task:0";
const LAST_STEP = 30;

const started: CliChild[] = [];
afterEach(async () => {
  for (const c of started.splice(0)) {
    c.process.kill("SIGKILL");
    await c.done;
  }
});

interface Start {
  readonly task: string;
  readonly pid: number;
  readonly step: number;
  readonly digest: string;
}

/** The job's `start` lines. */
const startsOf = (output: string): Start[] =>
  [...output.matchAll(/^start (\S+) pid (\d+) step (\d+) digest ([0-9a-f]{32})$/gm)].map((m) => ({
    task: m[1] as string,
    pid: Number(m[2]),
    step: Number(m[3]),
    digest: m[4] as string,
  }));

/** A config of the job in `dir`: checkpoints every step in `dir/ck`, last step 30, no data parallelism, plus `extra` top-level lines and `cluster` lines. */
const config = (dir: string, extra = "", cluster = ""): string => {
  const file = join(dir, "job.yaml");
  writeFileSync(
    file,
    `module: ${job}\nlogStepCountSteps: 0\nlastStep: ${LAST_STEP}\ncheckpoint:\n  dir: ck\n  saveSteps: 1\nsummaries:\n  saveSteps: 0\n${extra}cluster:\n  dataParallel: false\n  timeouts:\n    heartbeatTimeoutSecs: 5\n${cluster}`,
  );
  return file;
};

const lines = (text: string): string[] => text.split("\n").filter((l) => l !== "");

/** The lines that are not the logger's: what a failure prints. */
const problems = (r: CliRun): string[] => lines(r.stderr).filter((l) => !/^(DEBUG|INFO|WARN) /.test(l));

/** A chief and a worker (`run`, hand-set TF_CONFIG) of the job, both gated after their third step; the chief restarts ungated. */
const cluster = async (file: string, dir: string): Promise<{ chief: CliChild; worker: CliChild; startChief: () => CliChild }> => {
  const [p0, p1] = await freePorts(2);
  const spec = { chief: [`127.0.0.1:${p0}`], worker: [`127.0.0.1:${p1}`] };
  const plan = JSON.stringify({ "chief:0": ["gate", "train"], "worker:0": "gate" });
  const env = (type: string): Record<string, string> => ({ TF_CONFIG: JSON.stringify({ cluster: spec, task: { type, index: 0 } }), CLUSTER_TEST_PLAN: plan, CLUSTER_TEST_DIR: dir });
  const run = (type: string): CliChild => {
    const c = startCli(["run", file], { env: env(type), timeoutMs: 170_000 });
    started.push(c);
    return c;
  };
  return { chief: run("chief"), worker: run("worker"), startChief: () => run("chief") };
};

/** Starts the cluster, waits until both train and the chief saved a checkpoint, SIGKILLs the chief, and waits until the worker says it lost it. */
const killTheChief = async (file: string, dir: string): Promise<{ worker: CliChild; startChief: () => CliChild }> => {
  const { chief, worker, startChief } = await cluster(file, dir);
  await Promise.all([chief.waitFor("training chief:0", 90_000), worker.waitFor("training worker:0", 90_000)]);
  await waitFor(() => existsSync(join(dir, "ck", "checkpoint")), 30_000);
  chief.process.kill("SIGKILL");
  expect((await chief.done).signal).toBe("SIGKILL");
  // Detected at once on the embedded backend (the service's connections reset), after the lease (5 s) on etcd.
  await worker.waitFor(`worker:0 lost the chief ${CHIEF}`, 60_000);
  // The worker trains on: its next step finds the chief lost.
  writeFileSync(join(dir, "release"), "");
  return { worker, startChief };
};

/** SIGKILL the chief, start it again by hand: the same worker process recovers from the restored checkpoint; both exit 0 at the last step. */
const workerOutlivesTheChief = async (clusterLines: string): Promise<void> => {
  const dir = tempDir();
  const file = config(dir, "", clusterLines);
  const { worker, startChief } = await killTheChief(file, dir);
  const first = startsOf(worker.output());
  expect(first.map((s) => s.pid)).toEqual([worker.process.pid]);

  const chief = startChief();
  const [c, w] = await Promise.all([chief.done, worker.done]);
  expect(c.code, c.stderr).toBe(0);
  expect(w.code, w.stderr).toBe(0);

  // The restarted chief restored its checkpoint and waited at the start barrier for the worker.
  const restored = /Starting at global step (\d+) \(restored from .*model\.ckpt-(\d+)\)/.exec(c.stderr);
  if (restored === null) throw new Error(`the restarted chief did not restore a checkpoint:\n${c.stderr}`);
  const step = Number(restored[1]);
  expect(step).toBeGreaterThan(0);
  const chiefStart = startsOf(c.stdout)[0];
  expect(chiefStart?.step).toBe(step);

  // The same worker process: a second session, started from exactly the restored values.
  const starts = startsOf(w.stdout);
  expect(starts.map((s) => s.pid)).toEqual([worker.process.pid, worker.process.pid]);
  expect(starts[1]).toMatchObject({ step, digest: chiefStart?.digest });
  // Once: the task's line is the session's event while it trains, never printed by both.
  expect(w.stderr.match(/The chief is back: worker:0 registered again \(generation \d+\)/g), w.stderr).toHaveLength(1);
  expect(w.stderr).toContain(`INFO Starting from the chief's values: ${CHIEF}`);
  expect(w.stderr).toMatch(/Session re-created \(recovery 1 after UnavailableError: lost the chief/);
  for (const r of [c, w]) expect(r.stderr).toContain(`Done at global step ${LAST_STEP}.`);
  expect(w.stderr).not.toContain("Training failed");
};

describe("a worker without data parallelism outlives its chief (run, hand-set TF_CONFIG)", { timeout: 180_000 }, () => {
  it("SIGKILL the chief and start it again: the worker re-registers, re-creates its session from the restored checkpoint, both exit 0 at the last step", () =>
    workerOutlivesTheChief(""));

  it("a chief that never comes back: the worker exits 1 with one line naming the chief and maxWaitSecs", async () => {
    const dir = tempDir();
    const { worker } = await killTheChief(config(dir, "maxWaitSecs: 10\n"), dir);
    const r = await worker.done;
    expect(r.code, r.stderr).toBe(1);
    expect(problems(r), r.stderr).toEqual([
      expect.stringMatching(new RegExp(`^Training failed: DeadlineExceededError: worker:0 lost the chief ${CHIEF}, which did not come back within 10 s \\(maxWaitSecs\\): `)) as unknown as string,
    ]);
  });

  it("a termination notice while the worker waits for its chief: nobody can save, it exits 43 with one line naming itself, the chief and the loss", async () => {
    const dir = tempDir();
    const { worker } = await killTheChief(config(dir), dir);
    await worker.waitFor("Session aborted", 60_000);
    worker.process.kill("SIGTERM");
    const r = await worker.done;
    expect(r.code, r.stderr).toBe(43);
    expect(r.stderr).toMatch(
      new RegExp(`^ERROR Preempted \\(SIGTERM\\): worker:0 stops for its termination notice while its chief ${CHIEF} is lost \\(\\w+Error: .*\\): nobody can write the checkpoint; exiting with 43 without saving \\(the restart resumes from the last checkpoint\\)\\.$`, "m"),
    );
    expect(r.stderr).not.toContain("cluster preemption:");
  });
});

/**
 * A chief (held once its session exists, before it publishes its model) and a worker that
 * registered and waits for that model to create its first session: the chief is SIGKILLed in
 * that window. The chief's later starts train without holding.
 */
const killTheChiefBeforeItPublishes = async (file: string, dir: string): Promise<{ worker: CliChild; startChief: () => CliChild }> => {
  const [p0, p1] = await freePorts(2);
  const spec = { chief: [`127.0.0.1:${p0}`], worker: [`127.0.0.1:${p1}`] };
  const plan = JSON.stringify({ "chief:0": ["hold", "train"], "worker:0": "train" });
  const run = (type: string): CliChild => {
    const c = startCli(["run", file], { env: { TF_CONFIG: JSON.stringify({ cluster: spec, task: { type, index: 0 } }), CLUSTER_TEST_PLAN: plan, CLUSTER_TEST_DIR: dir }, timeoutMs: 170_000 });
    started.push(c);
    return c;
  };
  // The worker first: it waits for the chief to register, then for its model.
  const worker = run("worker");
  await worker.waitFor("registering with the coordination service", 90_000);
  const chief = run("chief");
  await Promise.all([chief.waitFor("holding chief:0", 90_000), worker.waitFor("Every task of the cluster registered", 90_000)]);
  chief.process.kill("SIGKILL");
  expect((await chief.done).signal).toBe("SIGKILL");
  return { worker, startChief: () => run("chief") };
};

/** SIGKILL the chief before it publishes, start it again: the worker's first session starts from the restarted chief's values; both exit 0 at the last step. */
const firstSessionOutlivesTheChief = async (clusterLines = ""): Promise<void> => {
  const dir = tempDir();
  const { worker, startChief } = await killTheChiefBeforeItPublishes(config(dir, "", clusterLines), dir);
  // Embedded: at once (the service's connections reset); etcd (checked by hand, not in the suite): after the chief's lease (5 s).
  await worker.waitFor(`worker:0 lost the chief ${CHIEF}`, 60_000);
  const chief = startChief();
  const [c, w] = await Promise.all([chief.done, worker.done]);
  expect(c.code, c.stderr).toBe(0);
  expect(w.code, w.stderr).toBe(0);
  // One session in the worker process, started from exactly the restarted chief's values.
  const chiefStart = startsOf(c.stdout)[0];
  if (chiefStart === undefined) throw new Error(`the restarted chief printed no start line:\n${c.stdout}`);
  expect(startsOf(w.stdout)).toEqual([{ task: "worker:0", pid: worker.process.pid, step: chiefStart.step, digest: chiefStart.digest }]);
  // Once: the task's line is the session's event while it trains, never printed by both.
  expect(w.stderr.match(/The chief is back: worker:0 registered again \(generation \d+\)/g), w.stderr).toHaveLength(1);
  expect(w.stderr).toContain(`INFO Starting from the chief's values: ${CHIEF}`);
  for (const r of [c, w]) expect(r.stderr).toContain(`Done at global step ${LAST_STEP}.`);
  expect(w.stderr).not.toContain("Training failed");
};

describe("a worker loses its chief while it creates its first session (run, hand-set TF_CONFIG, no data parallelism)", { timeout: 180_000 }, () => {
  it("SIGKILL the chief before it publishes its model and start it again: the worker gets the restarted chief's model and both exit 0 at the last step", () =>
    firstSessionOutlivesTheChief());

  it("a chief that never comes back: the worker exits 1 with one line naming the chief and maxWaitSecs", async () => {
    const dir = tempDir();
    const { worker } = await killTheChiefBeforeItPublishes(config(dir, "maxWaitSecs: 10\n"), dir);
    const r = await worker.done;
    expect(r.code, r.stderr).toBe(1);
    expect(startsOf(r.stdout)).toEqual([]);
    expect(problems(r), r.stderr).toEqual([
      expect.stringMatching(new RegExp(`^Training failed: DeadlineExceededError: worker:0 lost the chief ${CHIEF}, which did not come back within 10 s \\(maxWaitSecs\\): `)) as unknown as string,
    ]);
  });
});

describe.skipIf(etcdBinary === undefined)("with backend: etcd (a real etcd on loopback)", { timeout: 240_000 }, () => {
  it("SIGKILL the chief and start it again: the worker re-registers in the chief's new generation and recovers from the restored checkpoint", async () => {
    const etcd = await EtcdProcess.start();
    try {
      await workerOutlivesTheChief(`  backend: etcd\n  etcdEndpoints: [${etcd.endpoint}]\n`);
    } finally {
      await etcd.stop();
    }
  });
});
