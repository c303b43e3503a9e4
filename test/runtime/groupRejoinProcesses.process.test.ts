/**
 * A data-parallel group outlives a lost worker (issue 13 §6, "Stale peers"), with real `run`
 * processes and hand-set TF_CONFIGs: a chief and two workers of the data-parallel classifier
 * (test/fixtures/cli/dp-classifier-job.ts); worker 1 pauses after step 3 (the others wait in the
 * next all-reduce) and is SIGKILLed there. Started again by hand (a new process, a new
 * incarnation), it registers in the chief's new generation, the group re-forms its ring, every
 * rank takes rank 0's live state, and all three finish the last step with one digest, exit 0,
 * the chief and worker 0 being the same processes. A worker that never comes back: the others
 * exit 1 with one line naming it and `maxWaitSecs`. A worker frozen (SIGSTOP) past the heartbeat
 * timeout that resumes (SIGCONT): the same process rejoins. A chief lost (SIGKILL), frozen
 * (SIGSTOP) or told to stop while the group waits. Every test runs on the embedded backend and on etcd (skipped without the
 * binary). The group's state machine is unit-tested in
 * test/runtime/groupRejoin.test.ts. Each test acts when a line appears, never after a fixed time,
 * and asserts outcomes and named tasks only.
 */
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as tf from "@tensorflow/tfjs";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";

import { makeSpirals } from "../../examples/tfjs-classifier-data.js";
import { readBundle } from "../../src/checkpoint/index.js";
import { InMemoryDataSource } from "../../src/tfjs/index.js";
import { etcdBinary, EtcdProcess } from "../cluster/coordination/etcdHarness.js";
import { bits } from "../util/tensorBits.js";
import { freePorts, repoRoot, startCli, type CliChild, type CliRun } from "../util/cliChild.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-group-rejoin-");
const job = join(repoRoot, "test/fixtures/cli/dp-classifier-job.ts");
const W1 = "/job:worker/replica:0/task:1";
const LAST_STEP = 8;

const started: CliChild[] = [];
afterEach(async () => {
  for (const c of started.splice(0)) {
    c.process.kill("SIGKILL");
    await c.done;
  }
});

/** The coordination backend of the tests under way: its `cluster:` lines, and the same as `MONITORED_SESSION_CLUSTER` settings. */
let backendLines = "";
let backendSettings: Record<string, unknown> = {};

/** A config of the job in `dir`, plus `extra` top-level lines. */
const config = (dir: string, extra = ""): string => {
  const file = join(dir, "job.yaml");
  writeFileSync(file, `module: ${job}\nlogStepCountSteps: 0\n${extra}tfjs:\n  backend: cpu\ncluster:\n${backendLines}  timeouts:\n    heartbeatTimeoutSecs: 5\n`);
  return file;
};

/** The data position saved in the checkpoint `prefix`, as bits. */
const dataPositionOf = async (prefix: string): Promise<Record<string, unknown>> => {
  const { values } = await readBundle(prefix);
  return bits(new Map([...values].filter(([name]) => name.startsWith("data/"))));
};

/** The data position of the fixture's rank 0 after `steps` steps, as bits (every rank's: it is global). */
const dataPositionAfter = (steps: number): Record<string, unknown> => {
  const data = makeSpirals(42);
  const source = new InMemoryDataSource({ xs: data.xs, ys: data.ys, batchSize: 64, seed: 7, shard: { index: 0, count: 3 } });
  for (let i = 0; i < steps; i++) {
    const b = source.next();
    tf.dispose([b.xs, b.ys] as tf.Tensor[]);
  }
  return bits(new Map([...source.state()].map(([name, t]) => [`data/${name}`, t])));
};

const lines = (text: string): string[] => text.split("\n").filter((l) => l !== "");

/** The lines that are not the logger's: what a failure prints. */
const problems = (r: CliRun): string[] => lines(r.stderr).filter((l) => !/^(DEBUG|INFO|WARN) /.test(l));

/**
 * A chief and two workers (`run`, hand-set TF_CONFIGs); worker 1 pauses after step 3. Waits
 * until it paused, SIGKILLs it, and waits until the chief says it lost it.
 */
const killWorker1 = async (file: string, dir: string, signal: "SIGKILL" | "SIGSTOP" = "SIGKILL") => {
  const ports = await freePorts(3);
  const spec = { chief: [`127.0.0.1:${ports[0]}`], worker: [`127.0.0.1:${ports[1]}`, `127.0.0.1:${ports[2]}`] };
  const run = (type: string, index: number, env: Record<string, string> = {}): CliChild => {
    const c = startCli(["run", file], {
      env: { TF_CONFIG: JSON.stringify({ cluster: spec, task: { type, index } }), DP_OUT: dir, DP_LAST_STEP: String(LAST_STEP), DP_PRINT_STEPS: "1", ...env },
      timeoutMs: 240_000,
    });
    started.push(c);
    return c;
  };
  const chief = run("chief", 0);
  const worker0 = run("worker", 0);
  const worker1 = run("worker", 1, { DP_PAUSE_STEP: "3" });
  await worker1.waitFor(/^trained 3$/m, 150_000);
  worker1.process.kill(signal);
  if (signal === "SIGKILL") expect((await worker1.done).signal).toBe("SIGKILL");
  await chief.waitFor(`chief:0 lost ${W1}`, 60_000);
  return { chief, worker0, worker1, restart: () => run("worker", 1) };
};

/** The loop of examples/preemption-custom-loop.ts with the tests' knobs (startTask, a multi-worker PreemptionCheckpointHandler, no pause between steps). */
const customLoop = "test/fixtures/preemption/customLoop.ts";

/**
 * Chief, worker 0 and worker 1 of a data-parallel group started by hand, each the loop of your own
 * (`customLoop`, no pause between steps, `env` added); worker 1 is SIGKILLed after its first step,
 * and both others said they lost it. `task` starts one more.
 */
const customLoopLosingWorker1 = async (dir: string, env: Record<string, string> = {}) => {
  const ports = await freePorts(3);
  const spec = { chief: [`127.0.0.1:${ports[0]}`], worker: [`127.0.0.1:${ports[1]}`, `127.0.0.1:${ports[2]}`] };
  const settings = JSON.stringify({ ...backendSettings, timeouts: { heartbeatTimeoutSecs: 5 } });
  const task = (type: string, index: number): CliChild => {
    const c = startCli([], {
      program: customLoop,
      env: { TF_CONFIG: JSON.stringify({ cluster: spec, task: { type, index } }), MONITORED_SESSION_CLUSTER: settings, DATA_PARALLEL: "1", CHECKPOINT_DIR: join(dir, "ck"), ...env },
      timeoutMs: 240_000,
    });
    started.push(c);
    return c;
  };
  const [chief, worker0, worker1] = [task("chief", 0), task("worker", 0), task("worker", 1)];
  await worker1.waitFor(/^worker:1: training$/m, 150_000);
  worker1.process.kill("SIGKILL");
  expect((await worker1.done).signal).toBe("SIGKILL");
  await chief.waitFor(`chief:0 lost ${W1}`, 60_000);
  await worker0.waitFor(`worker:0 lost ${W1}`, 60_000);
  return { chief, worker0, task };
};

const finalsOf = (r: CliRun): string[] => [...r.stdout.matchAll(/^final (\d) digest ([0-9a-f]{64})$/gm)].map((m) => `${m[1] as string} ${m[2] as string}`);

/** The tests, on the embedded backend or on etcd. */
const suite = (etcd: boolean): void => {
  it("SIGKILL worker 1 after a step and start it again: it rejoins in the chief's new generation, every rank takes rank 0's state, all exit 0 with one digest", async () => {
    const dir = tempDir();
    const { chief, worker0, restart } = await killWorker1(config(dir), dir);
    await worker0.waitFor(`worker:0 lost ${W1}`, 60_000);
    const worker1 = restart();
    // The restarted worker first: if it fails, the others would wait for it up to maxWaitSecs.
    const w1 = await worker1.done;
    expect(w1.code, `${w1.stderr}\n--- chief:\n${chief.output()}`).toBe(0);
    const [c, w0] = await Promise.all([chief.done, worker0.done]);
    for (const r of [c, w0]) expect(r.code, r.stderr).toBe(0);

    // The survivors: one line each naming the lost worker and maxWaitSecs, then the new ring.
    for (const [r, name] of [[c, "chief:0"], [w0, "worker:0"]] as const) {
      const lost = lines(r.stderr).filter((l) => l.includes(`${name} lost `));
      expect(lost, r.stderr).toHaveLength(1);
      expect(lost[0]).toMatch(new RegExp(`^WARN ${name} lost ${W1} \\(.*\\): waiting up to 7200 s \\(maxWaitSecs\\) for it to rejoin the replica group\\.$`));
      // Printed once: the task's line is the session's event while it trains, never both.
      expect(lines(r.stderr).filter((l) => /^INFO The replica group re-formed its ring in generation \d+/.test(l)), r.stderr).toHaveLength(1);
      expect(r.stderr).not.toContain("Training failed");
    }
    // The restarted worker registered in the current generation (after an AbortedError if it met the old one).
    expect(w1.stderr).toMatch(/Every task of the cluster registered \(generation \d+\)/);
    expect(w1.stderr).toContain("Joined the replica group: rank 2 of 3");

    // Bit-identical replicas at the last step.
    const finals = [...finalsOf(c), ...finalsOf(w0), ...finalsOf(w1)];
    expect(finals.map((f) => f.split(" ")[0])).toEqual(["0", "1", "2"]);
    expect(new Set(finals.map((f) => f.split(" ")[1])).size, finals.join("\n")).toBe(1);
    for (const r of [c, w0, w1]) expect(r.stderr).toContain(`Done at global step ${LAST_STEP}.`);
  });

  it("a worker that never comes back: the others exit 1 with one line naming it and maxWaitSecs", async () => {
    const dir = tempDir();
    // maxWaitSecs also bounds the workers' first wait for the chief's session, which can take
    // more than 30 s while 3 processes load TensorFlow.js on a loaded 2-core machine (CI).
    const { chief, worker0 } = await killWorker1(config(dir, "maxWaitSecs: 60\n"), dir);
    const [c, w0] = await Promise.all([chief.done, worker0.done]);
    for (const [r, name] of [[c, "chief:0"], [w0, "worker:0"]] as const) {
      expect(r.code, r.stderr).toBe(1);
      expect(problems(r), r.stderr).toEqual([
        expect.stringMatching(new RegExp(`^Training failed: DeadlineExceededError: ${name} lost ${W1}, which did not rejoin the replica group within 60 s \\(maxWaitSecs\\): `)) as unknown as string,
      ]);
    }
  });
  // Embedded, a dead chief's service refuses connections; a frozen one keeps them open and never
  // answers (the registration's own call may rightly wait that long: only a probe can tell).
  // etcd: the chief's liveness key is gone either way.
  const chiefGone = {
    SIGKILL: /^Training failed: .*the coordination service at grpc:\/\/127\.0\.0\.1:\d+ is unreachable/,
    SIGSTOP: /^Training failed: .*the coordination service at grpc:\/\/127\.0\.0\.1:\d+ has not answered for \d+ ms \(the heartbeat timeout is 5000 ms\): its host \(the chief\) is frozen or unreachable/,
  } as const;
  it.each(["SIGKILL", "SIGSTOP"] as const)("the chief gets %s while the group waits: worker 0 does not wait maxWaitSecs, it exits 1 in one line naming the chief's service (embedded: unreachable, or not answering) or the chief (etcd)", async (signal) => {
    const dir = tempDir();
    const { chief, worker0 } = await killWorker1(config(dir, "maxWaitSecs: 600\n"), dir);
    await worker0.waitFor(`worker:0 lost ${W1}`, 60_000);
    chief.process.kill(signal);
    if (signal === "SIGKILL") expect((await chief.done).signal).toBe("SIGKILL");
    // Without the bound on silence, worker 0 would register for 600 s (maxWaitSecs); its
    // process deadline (240 s) would end this test with a failure.
    const w0 = await worker0.done;
    expect(w0.code, w0.stderr).toBe(1);
    const line = etcd ? /^Training failed: UnavailableError: task \/job:chief\/replica:0\/task:0 declared failed: / : chiefGone[signal];
    expect(problems(w0), w0.stderr).toEqual([expect.stringMatching(line) as unknown as string]);
  });

  it("a termination notice to the chief while the group waits: the chief saves its last completed step, tells worker 0, and both exit 42", async () => {
    const dir = tempDir();
    const { chief, worker0 } = await killWorker1(config(dir, "maxWaitSecs: 60\ncheckpoint:\n  dir: ck\n"), dir);
    await worker0.waitFor(`worker:0 lost ${W1}`, 60_000);
    chief.process.kill("SIGTERM");
    const c = await chief.done;
    expect(c.code, c.stderr).toBe(42);
    // Worker 1 paused after global step 3; the chief's step 4 waited in the group and applied nothing.
    const saved = /^INFO Preemption checkpoint for step (\d+) saved: \S*model\.ckpt-(\d+)\.$/m.exec(c.stderr);
    expect(saved?.slice(1), c.stderr).toEqual(["3", "3"]);
    expect(existsSync(join(dir, "ck", "model.ckpt-3.index"))).toBe(true);
    // The interrupted step gave its batch back: the checkpoint's data position is that of 3 steps,
    // so a restart trains step 4 on the batch step 4 would have had.
    expect(await dataPositionOf(join(dir, "ck", "model.ckpt-3"))).toEqual(dataPositionAfter(3));
    expect(c.stderr).toMatch(/Preempted: checkpoint saved; exiting with 42/);
    // Embedded: the chief's service told worker 0 before it stopped (worker 0 was between
    // generations). etcd keeps the chief's final report: nothing to wait for.
    if (!etcd) expect(c.stderr).toContain("Telling the other task of the termination notice through the coordination service");
    expect(c.stderr).not.toMatch(/did not hear of the termination notice/);
    const w0 = await worker0.done;
    expect(w0.code, w0.stderr).toBe(42);
    expect(w0.stderr).not.toContain("Training failed");
    expect(w0.stderr).not.toMatch(/Done at global step/);
  });

  it("a termination notice to worker 0 while the group waits: it tells the chief through the coordination service (a final report); the chief saves its last completed step, and both exit 42", async () => {
    const dir = tempDir();
    const { chief, worker0 } = await killWorker1(config(dir, "maxWaitSecs: 600\ncheckpoint:\n  dir: ck\n"), dir);
    await worker0.waitFor(`worker:0 lost ${W1}`, 60_000);
    worker0.process.kill("SIGTERM");
    const w0 = await worker0.done;
    expect(w0.code, w0.stderr).toBe(42);
    // Without the final report, the chief would wait for worker 0 too, up to maxWaitSecs (600 s),
    // past its process deadline.
    const c = await chief.done;
    expect(c.code, c.stderr).toBe(42);
    expect(c.stderr).toContain("task worker:0 got a termination notice");
    // Worker 1 paused after global step 3; the chief's step 4 waited in the group and applied nothing.
    const saved = /^INFO Preemption checkpoint for step (\d+) saved: \S*model\.ckpt-(\d+)\.$/m.exec(c.stderr);
    expect(saved?.slice(1), c.stderr).toEqual(["3", "3"]);
    expect(existsSync(join(dir, "ck", "model.ckpt-3.index"))).toBe(true);
    for (const r of [c, w0]) {
      expect(r.stderr).not.toContain("Training failed");
      expect(r.stderr).not.toMatch(/Done at global step/);
    }
  });

  it("a loop of your own (startTask with dataParallel, its PreemptionCheckpointHandler, no pause between steps): worker 1 SIGKILLed, then a termination notice to worker 0 while the group waits: the chief saves its last completed run, and both exit 42", async () => {
    const dir = tempDir();
    const { chief, worker0 } = await customLoopLosingWorker1(dir);
    worker0.process.kill("SIGTERM");
    const [c, w0] = await Promise.all([chief.done, worker0.done]);
    expect(w0.code, w0.stderr + w0.stdout).toBe(42);
    expect(c.code, c.stderr + c.stdout).toBe(42);
    // The handler took the report as the claim: the step that waited applied nothing, and the chief saved the last one every rank completed.
    expect(c.stderr).toMatch(/PreemptionCheckpointHandler: the replica group stopped for a termination notice \(SIGTERM\), told through the coordination service by worker:0 while the group could not step together; chief:0 saves at run \d+, its last completed step, and exits\./);
    const saved = [...c.stdout.matchAll(/^chief:0: event (\{.*"type":"preemptionCheckpointSaved".*\})$/gm)].map((m) => JSON.parse(m[1] as string) as { path?: string });
    expect(saved.length, c.stdout).toBe(1);
    expect(existsSync(`${saved[0]?.path ?? "(none)"}.index`), c.stdout).toBe(true);
    for (const r of [c, w0]) expect(r.stdout).not.toMatch(/: error |: done at run/);
  });

  it("a loop of your own that stops at a run count: worker 1 SIGKILLed and started again takes the chief's run counter (not its restore's), and every rank stops at the same run, exit 0", async () => {
    const dir = tempDir();
    const steps = 300;
    const { chief, worker0, task } = await customLoopLosingWorker1(dir, { STEPS: String(steps) });
    const back = task("worker", 1);
    const b = await back.done;
    expect(b.code, b.stderr + b.stdout).toBe(0);
    const [c, w0] = await Promise.all([chief.done, worker0.done]);
    for (const r of [c, w0]) expect(r.code, r.stderr + r.stdout).toBe(0);
    // It restored nothing (no checkpoint was saved), and counts on from the chief's runs, at least the one every rank completed.
    const start = /^worker:1: starting at run (\d+)$/m.exec(b.stdout);
    expect(Number(start?.[1] ?? 0), b.stdout).toBeGreaterThanOrEqual(1);
    expect(b.stderr + b.stdout).toMatch(new RegExp(`PreemptionCheckpointHandler: worker:1 counts the replica group's runs: ${start?.[1] ?? "?"} \\(the chief's\\), not 0 \\(its own restore\\)`));
    for (const [r, name] of [[c, "chief:0"], [w0, "worker:0"], [b, "worker:1"]] as const) expect(r.stdout).toContain(`${name}: done at run ${steps}`);
  });

  it("a worker frozen past the heartbeat timeout (SIGSTOP) resumes (SIGCONT): the same process rejoins, all exit 0 with one digest", async () => {
    const dir = tempDir();
    const { chief, worker0, worker1 } = await killWorker1(config(dir), dir, "SIGSTOP");
    writeFileSync(join(dir, "go"), "");
    worker1.process.kill("SIGCONT");
    const [c, w0, w1] = await Promise.all([chief.done, worker0.done, worker1.done]);
    for (const r of [c, w0, w1]) expect(r.code, r.stderr).toBe(0);
    expect(w1.stderr).toMatch(/WARN worker:1 lost .*: waiting up to 7200 s \(maxWaitSecs\) for it to rejoin the replica group\./);
    const finals = [...finalsOf(c), ...finalsOf(w0), ...finalsOf(w1)];
    expect(finals.map((f) => f.split(" ")[0])).toEqual(["0", "1", "2"]);
    expect(new Set(finals.map((f) => f.split(" ")[1])).size, finals.join("\n")).toBe(1);
  });
};

describe("a data-parallel group outlives a lost worker (run, hand-set TF_CONFIG; embedded coordination service)", { timeout: 300_000 }, () => {
  beforeAll(() => {
    backendLines = "";
  });
  suite(false);
});

describe.skipIf(etcdBinary === undefined)("a data-parallel group outlives a lost worker (run, hand-set TF_CONFIG; backend: etcd, a real etcd on loopback)", { timeout: 300_000 }, () => {
  let etcd: EtcdProcess | undefined;
  beforeAll(async () => {
    etcd = await EtcdProcess.start();
    backendLines = `  backend: etcd\n  etcdEndpoints: [${etcd.endpoint}]\n`;
    backendSettings = { backend: "etcd", etcdEndpoints: [etcd.endpoint] };
  });
  afterAll(async () => {
    backendLines = "";
    backendSettings = {};
    await etcd?.stop();
  });
  suite(true);
});
