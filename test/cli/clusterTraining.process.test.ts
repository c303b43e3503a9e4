/**
 * `run` and `launch` as a cluster, with real processes on loopback (test/fixtures/cli/
 * cluster-model-job.ts: w and b start at random values in each process; each task prints its pid
 * and the bits of its starting values): workers start from the chief's values; a SIGKILLed worker
 * is named by the others' UnavailableError; a SIGKILLed chief is restarted with the group and
 * restores its checkpoint; a SIGTERM to one worker makes every task exit 42; a port in use and a
 * wrong token exit 2 with one line. Each test acts when a line appears, never after a fixed time,
 * and asserts outcomes and named tasks only.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type Server as NetServer } from "node:net";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

import { alive, freePorts, repoRoot, startCli, type CliChild, type CliRun } from "../util/cliChild.js";
import { waitFor } from "../util/cli.js";
import { etcdBinary, EtcdProcess } from "../cluster/coordination/etcdHarness.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-cluster-training-");
const modelJob = join(repoRoot, "test/fixtures/cli/cluster-model-job.ts");

/** Every child a test started, and every task pid they printed: all killed after the test. */
const started: CliChild[] = [];
const held: NetServer[] = [];
afterEach(async () => {
  for (const c of started.splice(0)) {
    const pids = startsOf(c.output()).map((s) => s.pid);
    c.process.kill("SIGKILL");
    for (const pid of pids) if (alive(pid)) process.kill(pid, "SIGKILL");
    await c.done;
  }
  for (const s of held.splice(0)) s.close();
});

interface Start {
  readonly task: string;
  readonly pid: number;
  readonly step: number;
  readonly w: number;
  readonly b: number;
  readonly digest: string;
}

/** The `start` lines of the job (launch prefixes them with the task). */
const startsOf = (output: string): Start[] =>
  [...output.matchAll(/start (\S+) pid (\d+) step (\d+) digest ([0-9a-f]{32})$/gm)].map((m) => {
    const digest = m[4] as string;
    return {
      task: m[1] as string,
      pid: Number(m[2]),
      step: Number(m[3]),
      w: Buffer.from(digest.slice(0, 16), "hex").readDoubleBE(),
      b: Buffer.from(digest.slice(16), "hex").readDoubleBE(),
      digest,
    };
  });

/** The digest after `steps` steps of the job's update from (w, b): the same float64 operations, so the same bits. */
const digestAfter = (w0: number, b0: number, steps: number): string => {
  const xs = Float64Array.from({ length: 16 }, (_, i) => i / 8 - 1);
  let [w, b] = [w0, b0];
  for (let s = 0; s < steps; s++) {
    let gw = 0;
    let gb = 0;
    for (const x of xs) {
      const e = w * x + b - (3 * x + 2);
      gw += (2 * e * x) / xs.length;
      gb += (2 * e) / xs.length;
    }
    [w, b] = [w - 0.1 * gw, b - 0.1 * gb];
  }
  const buf = Buffer.alloc(16);
  buf.writeDoubleBE(w, 0);
  buf.writeDoubleBE(b, 8);
  return buf.toString("hex");
};

/** A config of the model job in `dir`: checkpoints every step in `dir/ck`, a 5 s heartbeat timeout, plus `cluster` lines. */
const config = (dir: string, cluster = ""): string => {
  const file = join(dir, "job.yaml");
  writeFileSync(
    file,
    `module: ${modelJob}\nlogStepCountSteps: 0\ncheckpoint:\n  dir: ck\n  saveSteps: 1\nsummaries:\n  saveSteps: 0\ncluster:\n  timeouts:\n    heartbeatTimeoutSecs: 5\n${cluster}`,
  );
  return file;
};

const listen = (port: number): Promise<NetServer> =>
  new Promise((ok, fail) => {
    const s = createServer();
    s.once("error", fail);
    s.listen(port, "127.0.0.1", () => ok(s));
  });

const tfConfig = (cluster: Record<string, string[]>, type: string, index: number): string => JSON.stringify({ cluster, task: { type, index } });

const start = (args: readonly string[], env: Record<string, string>, timeoutMs = 170_000): CliChild => {
  const c = startCli(args, { env, timeoutMs });
  started.push(c);
  return c;
};

const lines = (text: string): string[] => text.split("\n").filter((l) => l !== "");

/** The lines that are not the logger's (`INFO ...`): what a failure prints. */
const problems = (r: CliRun): string[] => lines(r.stderr).filter((l) => !/^(DEBUG|INFO|WARN) /.test(l));

/** `launch --workers 3` with the `cluster:` lines `extra`: every worker starts from the chief's values, every task exits 0. */
const workersStartFromTheChief = async (extra: string): Promise<void> => {
  const dir = tempDir();
  const l = start(["launch", "--workers", "3", config(dir, extra)], { CLUSTER_TEST_DIR: dir });
  const r = await l.done;
  expect(r.code, r.stderr).toBe(0);
  const starts = startsOf(r.stdout);
  const chief = starts.find((s) => s.task === "chief:0");
  expect(chief?.step).toBe(0);
  for (const name of ["worker:0", "worker:1"]) {
    const w = starts.find((s) => s.task === name);
    if (chief === undefined || w === undefined) throw new Error(`no start line of chief:0 or ${name}:\n${r.stdout}`);
    // The chief may have trained a few steps before the worker asked: its values at that step.
    expect(w.digest, name).toBe(digestAfter(chief.w, chief.b, w.step));
    expect(r.stderr).toContain(`[${name}] INFO Starting from the chief's values: /job:chief/replica:0/task:0`);
  }
  expect(r.stderr).toContain("[launch] every task exited 0");
};

/** Three `run`s with hand-set TF_CONFIGs and the `cluster:` lines `extra`: SIGKILL worker:1, the others exit 1 naming it. */
const killedWorkerIsNamed = async (extra: string): Promise<void> => {
  const dir = tempDir();
  const file = config(dir, extra);
  const [p0, p1, p2] = await freePorts(3);
  const cluster = { chief: [`127.0.0.1:${p0}`], worker: [`127.0.0.1:${p1}`, `127.0.0.1:${p2}`] };
  const plan = JSON.stringify({ "chief:0": "train", "worker:0": "train", "worker:1": "train" });
  const tasks = [
    ["chief", 0],
    ["worker", 0],
    ["worker", 1],
  ] as const;
  const [chief, worker0, worker1] = tasks.map(([type, index]) => start(["run", file], { TF_CONFIG: tfConfig(cluster, type, index), CLUSTER_TEST_PLAN: plan, CLUSTER_TEST_DIR: dir })) as [CliChild, CliChild, CliChild];
  await Promise.all([chief.waitFor("training chief:0", 90_000), worker0.waitFor("training worker:0", 90_000), worker1.waitFor("training worker:1", 90_000)]);
  const victim = startsOf(worker1.output())[0];
  if (victim === undefined) throw new Error(`worker:1 printed no start line:\n${worker1.output()}`);
  process.kill(victim.pid, "SIGKILL");
  // Heartbeat timeout 5 s: the deadline of each wait is far above it.
  for (const c of [chief, worker0]) {
    const r = await c.done;
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toMatch(/Training failed: UnavailableError: .*\/job:worker\/replica:0\/task:1/);
  }
};


/** The step of the newest checkpoint in `dir/ck` (-1 when there is none yet). */
const newestCheckpointStep = (dir: string): number => {
  const file = join(dir, "ck", "checkpoint");
  if (!existsSync(file)) return -1;
  const m = /^model_checkpoint_path: ".*-(\d+)"$/m.exec(readFileSync(file, "utf8"));
  return m === null ? -1 : Number(m[1]);
};

/**
 * `launch --workers 3 --max-restarts 1` with the `cluster:` lines `extra`: the workers start from
 * the chief's values; `whileTraining` runs once every task trains and the chief saved (no task may
 * fail of it); then the chief is SIGKILLed, the group restarts, the chief restores its checkpoint,
 * the workers start from the restored values, and every task exits 0.
 */
const chiefRestartsWithTheGroup = async (extra: string, whileTraining: (dir: string) => Promise<void> = () => Promise.resolve()): Promise<CliRun> => {
  const dir = tempDir();
  const plan = { "chief:0": ["train", "ok"], "worker:0": ["train", "ok"], "worker:1": ["train", "ok"] };
  const l = start(["launch", "--workers", "3", "--max-restarts", "1", "--no-standby", config(dir, extra)], { CLUSTER_TEST_DIR: dir, CLUSTER_TEST_PLAN: JSON.stringify(plan) });
  for (const task of ["chief:0", "worker:0", "worker:1"]) await l.waitFor(`[${task}] training ${task}`, 90_000);
  await waitFor(() => newestCheckpointStep(dir) >= 0, 30_000);
  const first = startsOf(l.output());
  const chief = first.find((s) => s.task === "chief:0");
  if (chief === undefined) throw new Error(`chief:0 printed no start line:\n${l.output()}`);
  expect(chief.step).toBe(0);
  for (const name of ["worker:0", "worker:1"]) {
    const w = first.find((s) => s.task === name);
    if (w === undefined) throw new Error(`no start line of ${name}:\n${l.output()}`);
    expect(w.digest, name).toBe(digestAfter(chief.w, chief.b, w.step));
  }
  await whileTraining(dir);
  // Nothing failed so far: the chief's SIGKILL is the group's first exit.
  expect(l.output()).not.toContain("[launch] restarting");
  expect(l.output()).not.toMatch(/\[launch\] \S+ exited with/);
  expect(l.output()).not.toContain("Training failed");
  const firstPids = new Set(startsOf(l.output()).map((s) => s.pid));
  process.kill(chief.pid, "SIGKILL");
  const r = await l.done;
  expect(r.code, r.stderr).toBe(0);
  expect(r.stderr).toContain("[launch] chief:0 exited with 137: restarting the group (restart 1 of 1)");
  const second = startsOf(r.stdout).filter((s) => !firstPids.has(s.pid));
  const restarted = second.find((s) => s.task === "chief:0");
  if (restarted === undefined) throw new Error(`no second start of chief:0:\n${r.stdout}`);
  expect(restarted.step).toBeGreaterThan(0);
  expect(r.stderr).toMatch(/\[chief:0\] INFO Starting at global step \d+ \(restored from .*model\.ckpt-\d+\)/);
  for (const name of ["worker:0", "worker:1"]) {
    const w = second.find((s) => s.task === name);
    if (w === undefined) throw new Error(`no second start of ${name}:\n${r.stdout}`);
    expect(w.step).toBeGreaterThanOrEqual(restarted.step);
    expect(w.digest, name).toBe(digestAfter(restarted.w, restarted.b, w.step - restarted.step));
  }
  expect(r.stderr).toContain("[launch] every task exited 0");
  return r;
};

// A group start is a few node processes loading tsx (seconds each on a busy machine).
describe("run and launch as a cluster", { timeout: 180_000 }, () => {
  it("launch --workers 3: every worker starts from the chief's values (bit for bit) and every task exits 0", () => workersStartFromTheChief(""));

  it("run with a hand-set TF_CONFIG: SIGKILL a worker and the others fail with UnavailableError naming it (exit 1); nobody hangs", () => killedWorkerIsNamed(""));

  it("SIGTERM to one worker: its claim stops every task, the chief saves at its own next step, every task exits 42 (the workers once the chief's checkpoint is stored) and launch exits 42", async () => {
    const dir = tempDir();
    const l = start(["launch", "--workers", "3", config(dir)], { CLUSTER_TEST_DIR: dir, CLUSTER_TEST_PLAN: JSON.stringify({ "chief:0": "train", "worker:0": "train", "worker:1": "train" }) });
    for (const task of ["chief:0", "worker:0", "worker:1"]) await l.waitFor(`[${task}] training ${task}`, 90_000);
    const victim = startsOf(l.output()).find((s) => s.task === "worker:0");
    if (victim === undefined) throw new Error(`worker:0 printed no start line:\n${l.output()}`);
    process.kill(victim.pid, "SIGTERM");
    const r = await l.done;
    expect(r.code, r.stderr).toBe(42);
    for (const task of ["chief:0", "worker:0", "worker:1"]) expect(r.stderr).toContain(`[launch] ${task} exited with 42`);
    expect(r.stderr).toContain("[chief:0] INFO Preempted: checkpoint saved; exiting with 42");
    expect(r.stderr).toMatch(/\[worker:0\] INFO Preempted \(SIGTERM\): a worker exits with 42 without saving/);
  });

  it("launch --max-restarts 1: SIGKILL the chief, the group restarts, the chief restores its checkpoint, the workers start from the restored values, exit 0", () =>
    chiefRestartsWithTheGroup(""));
});

describe("a cluster task that cannot start exits 2 with one line", { timeout: 120_000 }, () => {
  it("its address is already in use", async () => {
    const dir = tempDir();
    const [p0, p1] = await freePorts(2);
    held.push(await listen(p0 as number));
    const cluster = { chief: [`127.0.0.1:${p0}`], worker: [`127.0.0.1:${p1}`] };
    const r = await start(["run", config(dir)], { TF_CONFIG: tfConfig(cluster, "chief", 0) }, 60_000).done;
    expect(r.code, r.stderr).toBe(2);
    expect(problems(r), r.stderr).toEqual([expect.stringMatching(new RegExp(`127\\.0\\.0\\.1:${p0} is already in use`)) as unknown as string]);
  });

  it("a worker with a wrong cluster token", async () => {
    const dir = tempDir();
    writeFileSync(join(dir, "good.token"), "right-token\n");
    writeFileSync(join(dir, "bad.token"), "wrong-token\n");
    const [p0, p1] = await freePorts(2);
    const cluster = { chief: [`127.0.0.1:${p0}`], worker: [`127.0.0.1:${p1}`] };
    writeFileSync(join(dir, "chief.yaml"), `module: ${modelJob}\nlogStepCountSteps: 0\ncluster:\n  tokenFile: good.token\n`);
    writeFileSync(join(dir, "worker.yaml"), `module: ${modelJob}\nlogStepCountSteps: 0\ncluster:\n  tokenFile: bad.token\n`);
    const chief = start(["run", join(dir, "chief.yaml")], { TF_CONFIG: tfConfig(cluster, "chief", 0) }, 60_000);
    await chief.waitFor("registering with the coordination service");
    const r = await start(["run", join(dir, "worker.yaml")], { TF_CONFIG: tfConfig(cluster, "worker", 0) }, 60_000).done;
    expect(r.code, r.stderr).toBe(2);
    expect(problems(r), r.stderr).toEqual([expect.stringMatching(/^worker:0: the coordination service rejected this task's cluster token/) as unknown as string]);
  });
});

describe.skipIf(etcdBinary === undefined)("with backend: etcd (a real etcd on loopback)", { timeout: 180_000 }, () => {
  let etcd: EtcdProcess | undefined;
  // A fresh etcd for each cluster (one cluster per etcd prefix).
  beforeEach(async () => {
    etcd = await EtcdProcess.start();
  }, 60_000);
  afterEach(async () => {
    await etcd?.stop();
  });
  const etcdLines = (): string => `  backend: etcd\n  etcdEndpoints: [${(etcd as EtcdProcess).endpoint}]\n`;

  // One launch for three behaviours: workers start from the chief's values (as on the embedded
  // backend), etcd SIGKILLed and back on the same data dir and port within the heartbeat timeout
  // (training goes on, no task fails), and a SIGKILLed chief restarted with the group.
  it("launch --max-restarts 1: etcd SIGKILLed and restarted mid-training fails nobody; SIGKILL the chief, the group restarts in a new generation, restores the chief's checkpoint, exit 0", async () => {
    const r = await chiefRestartsWithTheGroup(etcdLines(), async (dir) => {
      const e = etcd as EtcdProcess;
      await e.kill();
      await e.resume();
      // Training went on: the chief saves again after etcd is back.
      const saved = newestCheckpointStep(dir);
      await waitFor(() => newestCheckpointStep(dir) > saved, 60_000);
      // An observation window of a heartbeat timeout (5 s) after that, in which no task may fail: a
      // task that took the outage for a failure exits within it.
      await new Promise((r) => setTimeout(r, 5_000));
    });
    // The restarted group registered in the next generation of the same etcd prefix.
    const generations = [...r.stderr.matchAll(/^\[chief:0\] INFO Every task of the cluster registered \(generation (\d+)\)\.$/gm)].map((m) => Number(m[1]));
    expect(generations).toHaveLength(2);
    expect(generations[1]).toBeGreaterThan(generations[0] as number);
  });

  it("run with a hand-set TF_CONFIG: SIGKILL a worker and the others fail with UnavailableError naming it", () => killedWorkerIsNamed(etcdLines()));

  it("etcd SIGKILLed and not back within the heartbeat timeout: every task exits 1 with one line naming etcd's endpoint and the fix; nobody hangs", async () => {
    const dir = tempDir();
    const e = etcd as EtcdProcess;
    // Independent replicas: each task finds etcd gone by itself, none through a collective.
    const file = config(dir, `${etcdLines()}  dataParallel: false\n`);
    const [p0, p1] = await freePorts(2);
    const cluster = { chief: [`127.0.0.1:${p0}`], worker: [`127.0.0.1:${p1}`] };
    const plan = JSON.stringify({ "chief:0": "train", "worker:0": "train" });
    const tasks = [start(["run", file], { TF_CONFIG: tfConfig(cluster, "chief", 0), CLUSTER_TEST_PLAN: plan, CLUSTER_TEST_DIR: dir }), start(["run", file], { TF_CONFIG: tfConfig(cluster, "worker", 0), CLUSTER_TEST_PLAN: plan, CLUSTER_TEST_DIR: dir })];
    await Promise.all([tasks[0]?.waitFor("training chief:0", 90_000), tasks[1]?.waitFor("training worker:0", 90_000)]);
    await e.kill();
    for (const t of tasks) {
      const r = await t.done;
      expect(r.code, r.stderr).toBe(1);
      expect(problems(r), r.stderr).toEqual([expect.stringMatching(new RegExp(`^Training failed: UnavailableError: etcd \\(${e.endpoint}\\) unreachable .*heartbeat timeout 5000 ms.*: start etcd again`)) as unknown as string]);
    }
  });
});
