/**
 * `monitored-session run` with TF_CONFIG set by hand (no `launch`), in real processes: each task
 * resolves its role and prints it, starts its server and registers with the chief's coordination
 * service (a worker started first waits); only the chief takes the checkpoint directory and writes
 * there; a bad TF_CONFIG, a cluster spec in the configuration, keys TF_CONFIG decides, and an
 * etcd heartbeat timeout under 2 s exit 2 with one line per problem, creating nothing.
 */
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

import { freePorts, repoRoot, startCli, type CliChild, type CliRun } from "../util/cliChild.js";
import { listTree } from "../util/cli.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-cluster-run-");
const clusterJob = join(repoRoot, "test/fixtures/cli/cluster-job.ts");

const started: CliChild[] = [];
afterEach(async () => {
  for (const c of started.splice(0)) {
    c.process.kill("SIGKILL");
    await c.done;
  }
});

const CLUSTER = { chief: ["127.0.0.1:7001"], worker: ["127.0.0.1:7002"] };
const tfConfig = (type: string, index: number, cluster: unknown = CLUSTER): string => JSON.stringify({ cluster, task: { type, index } });

/** A config of the cluster job in `dir` (checkpoints in `dir/ck`, no periodic saves or summaries: the job has no global step), plus `extra`. */
const config = (dir: string, extra = ""): string => {
  const file = join(dir, "job.yaml");
  writeFileSync(file, `module: ${clusterJob}\nlogStepCountSteps: 0\ncheckpoint:\n  dir: ck\n  saveSteps: 0\nsummaries:\n  saveSteps: 0\n${extra}`);
  return file;
};

const run = (file: string, env: Record<string, string>): CliChild => {
  const c = startCli(["run", file], { env, timeoutMs: 60_000 });
  started.push(c);
  return c;
};

const lines = (r: CliRun): string[] => r.stderr.split("\n").filter((l) => l !== "");

/** A chief and a worker on free loopback ports. */
const twoTasks = async (): Promise<{ chief: string[]; worker: string[] }> => {
  const [p0, p1] = await freePorts(2);
  return { chief: [`127.0.0.1:${p0}`], worker: [`127.0.0.1:${p1}`] };
};

// A short shutdown barrier: the worker finishes long before the chief, which trains until SIGTERM.
const SHORT_SHUTDOWN = "cluster:\n  timeouts:\n    shutdownTimeoutSecs: 2\n";

/**
 * A chief that makes 3 steps and a worker that trains until `dir/release` exists, short shutdown
 * barrier. `launched`: the tasks believe they run under `launch` (its environment variable), so
 * they stop through their handlers' `"chiefSaves"` agreement instead of the report route.
 */
const chiefFirst = async (launched = false): Promise<{ dir: string; chief: CliChild; worker: CliChild }> => {
  const dir = tempDir();
  const file = config(dir, SHORT_SHUTDOWN);
  const cluster = await twoTasks();
  const env = (type: string): Record<string, string> => ({
    TF_CONFIG: tfConfig(type, 0, cluster),
    CLUSTER_TEST_DIR: dir,
    CLUSTER_TEST_PLAN: JSON.stringify({ "chief:0": "ok", "worker:0": "late" }),
    ...(launched ? { MONITORED_SESSION_LAUNCH_READY: "1" } : {}),
  });
  return { dir, chief: run(file, env("chief")), worker: run(file, env("worker")) };
};

describe("run with a hand-set TF_CONFIG", { timeout: 120_000 }, () => {
  it("a worker started first waits for the chief; each prints its role; the chief holds checkpoint.dir, the worker trains beside it and writes nothing there", async () => {
    const dir = tempDir();
    const file = config(dir, SHORT_SHUTDOWN);
    const cluster = await twoTasks();
    const worker = run(file, { TF_CONFIG: tfConfig("worker", 0, cluster) });
    await worker.waitFor("registering with the coordination service");
    const chief = run(file, { TF_CONFIG: tfConfig("chief", 0, cluster), CLUSTER_TEST_PLAN: JSON.stringify({ "chief:0": "train" }) });
    await chief.waitFor("training");
    await chief.waitFor("Starting at global step (none); task chief:0 (chief).");
    expect(chief.output()).toContain(`Cluster task chief:0, the chief of 2 training tasks (grpc://${cluster.chief[0]}; coordination: embedded).`);
    const before = listTree(join(dir, "ck"));
    expect(before).toContain("checkpoint.lock");

    // The chief holds the directory's lock: a worker that tried to take it would exit 2.
    const w = await worker.done;
    expect(w.code, w.stderr).toBe(0);
    expect(w.stdout).toContain("task worker:0 up");
    expect(w.stderr).toContain(`Cluster task worker:0, a worker of 2 training tasks (grpc://${cluster.worker[0]}; coordination: embedded).`);
    expect(w.stderr).toContain("Every task of the cluster registered (generation 1).");
    expect(w.stderr).toContain("Starting at global step (none); task worker:0 (worker).");
    expect(w.stderr).not.toContain("Checkpoints:");
    expect(listTree(join(dir, "ck"))).toEqual(before);

    chief.process.kill("SIGTERM");
    const c = await chief.done;
    expect(c.code, c.stderr).toBe(42);
    expect(c.stderr).toContain(`Preemption checkpoint for step 0 saved: ${join(dir, "ck", "model.ckpt-0")}`);
  });

  it("a worker alone waits for the chief; a SIGTERM meanwhile exits 42, and nothing is created under checkpoint.dir", async () => {
    const dir = tempDir();
    const worker = run(config(dir), { TF_CONFIG: tfConfig("worker", 0, await twoTasks()) });
    await worker.waitFor("registering with the coordination service");
    worker.process.kill("SIGTERM");
    const r = await worker.done;
    expect(r.code, r.stderr).toBe(42);
    expect(r.stderr).toContain("worker:0: termination notice (SIGTERM) while it joined the cluster: leaving the cluster and exiting with 42 without saving");
    expect(listTree(join(dir, "ck"))).toEqual([]);
  });

  it("a worker does not check checkpoint.dir (it never writes there, and on its machine the path may be the chief's): a file in the way stops the chief only", async () => {
    const dir = tempDir();
    const file = config(dir);
    const cluster = await twoTasks();
    writeFileSync(join(dir, "ck"), "not a directory");
    const worker = run(file, { TF_CONFIG: tfConfig("worker", 0, cluster) });
    await worker.waitFor("registering with the coordination service");
    const chief = await run(file, { TF_CONFIG: tfConfig("chief", 0, cluster) }).done;
    expect(chief.code).toBe(2);
    expect(lines(chief)).toEqual([`${file}: checkpoint.dir: ${join(dir, "ck")} is an existing file, not a directory: choose another directory, or move the file away (line 4, column 8)`]);
  });

  for (const launched of [false, true]) {
    // Both preempt through the handlers' agreement; launch's environment also leaves out the worker's chief recovery.
    const how = launched ? " (with launch's environment)" : "";
    it(`a chief that finishes first keeps serving the coordination service until the worker leaves: both exit 0${how}`, async () => {
      const { dir, chief, worker } = await chiefFirst(launched);
      await worker.waitFor("training");
      // The chief's shutdown barrier timed out (the worker still trains): it keeps serving.
      await chief.waitFor("Serving the coordination service until every other task has left");
      writeFileSync(join(dir, "release"), "");
      const w = await worker.done;
      expect(w.code, w.stderr).toBe(0);
      expect(w.stderr).not.toContain("UnavailableError");
      const c = await chief.done;
      expect(c.code, c.stderr).toBe(0);
      expect(c.stderr).not.toContain("still in the cluster");
    });

    it(`a termination notice to a chief that serves a worker still training: the worker exits with the preemption code, the chief (done) exits 0${how}`, async () => {
      const { chief, worker } = await chiefFirst(launched);
      await chief.waitFor("Serving the coordination service until every other task has left");
      chief.process.kill("SIGTERM");
      const w = await worker.done;
      expect(w.code, w.stderr).toBe(42);
      expect(w.stderr).toContain("task chief:0 got a termination notice");
      const c = await chief.done;
      expect(c.code, c.stderr).toBe(0);
    });
  }

  for (const launched of [false, true]) {
    it(`a termination notice to a worker whose chief finished first: no save to wait for, the worker exits 42 at once saying so, the chief (done) exits 0${launched ? " (with launch's environment)" : ""}`, async () => {
      const { chief, worker } = await chiefFirst(launched);
      await chief.waitFor("Serving the coordination service until every other task has left");
      worker.process.kill("SIGTERM");
      const w = await worker.done;
      expect(w.code, w.stderr).toBe(42);
      expect(w.stderr).toContain("PreemptionCheckpointHandler: the chief left the cluster without a preemption save (its training ended); a restart resumes from its last checkpoint: worker:0 exits with the preemption code without saving");
      const c = await chief.done;
      expect(c.code, c.stderr).toBe(0);
    });
  }

  it("without a chief job, worker 0 is the chief (TensorFlow's rule)", async () => {
    const dir = tempDir();
    const file = config(dir);
    const [p0, p1] = await freePorts(2);
    const cluster = { worker: [`127.0.0.1:${p0}`, `127.0.0.1:${p1}`] };
    const [r0, r1] = await Promise.all([run(file, { TF_CONFIG: tfConfig("worker", 0, cluster) }).done, run(file, { TF_CONFIG: tfConfig("worker", 1, cluster) }).done]);
    expect(r0.code, r0.stderr).toBe(0);
    expect(r1.code, r1.stderr).toBe(0);
    expect(r0.stderr).toContain("Cluster task worker:0, the chief of 2 training tasks");
    expect(r0.stderr).toContain("Starting at global step (none); task worker:0 (chief).");
    expect(r1.stderr).toContain("Starting at global step (none); task worker:1 (worker).");
    // The chief made the directory (for its lock, released at the end).
    expect(existsSync(join(dir, "ck"))).toBe(true);
  });
});

describe("cluster configuration errors exit 2 with one line per problem, creating nothing", () => {
  const expectUsage = async (extra: string, env: Record<string, string>, expected: (file: string) => string[]): Promise<void> => {
    const dir = tempDir();
    const file = config(dir, extra);
    const r = await run(file, env).done;
    expect(r.code, r.stderr).toBe(2);
    expect(lines(r)).toEqual(expected(file));
    expect(listTree(dir)).toEqual(["job.yaml"]);
  };

  it("a bad TF_CONFIG: every problem with its path", async () => {
    await expectUsage("", { TF_CONFIG: JSON.stringify({ cluster: { chief: ["127.0.0.1:7001"], worker: ["host2"] }, task: { type: "worker", index: 4 } }) }, () => [
      "TF_CONFIG: 2 problems:",
      '  cluster.worker[0]: expected an address host:port, got "host2"',
      '  task.index: 4 is not a task of job "worker" (its tasks: 0)',
    ]);
    await expectUsage("", { TF_CONFIG: "{not json" }, () => [expect.stringMatching(/^TF_CONFIG: \(root\): not valid JSON/) as unknown as string]);
  });

  it("a cluster spec in the configuration's cluster: section (the spec comes from TF_CONFIG only)", async () => {
    await expectUsage("cluster:\n  jobs:\n    worker: [127.0.0.1:7002]\n", { TF_CONFIG: tfConfig("chief", 0) }, (file) => [
      `${file}: cluster.jobs: the cluster spec comes from TF_CONFIG only; remove it here and set TF_CONFIG on each task (line 10, column 5)`,
    ]);
  });

  it("an etcd heartbeat timeout under 2 s", async () => {
    await expectUsage(
      "cluster:\n  backend: etcd\n  etcdEndpoints: [http://127.0.0.1:2379]\n  timeouts:\n    heartbeatTimeoutSecs: 1\n",
      { TF_CONFIG: tfConfig("chief", 0) },
      (file) => [
        `${file}: cluster.timeouts.heartbeatTimeoutSecs: 1 is below the etcd backend's minimum of 2 (etcd leases are whole seconds); set 2 or more (line 12, column 27)`,
      ],
    );
  });

  it("isChief in the configuration while TF_CONFIG is set: with its line, and beside the file's other problems", async () => {
    await expectUsage("isChief: true\n", { TF_CONFIG: tfConfig("worker", 0) }, (file) => [
      `${file}: isChief: comes from TF_CONFIG's task when TF_CONFIG is set; remove it from the configuration (the same file runs on every task) (line 8, column 10)`,
    ]);
    await expectUsage("master: grpc://x:1\nlastStep: -1\n", { TF_CONFIG: tfConfig("worker", 0) }, (file) => [
      `${file}: 2 problems:`,
      "  lastStep: expected an integer >= 0, got -1 (line 9, column 11)",
      "  master: comes from TF_CONFIG's task when TF_CONFIG is set; remove it from the configuration (the same file runs on every task) (line 8, column 9)",
    ]);
  });
});
