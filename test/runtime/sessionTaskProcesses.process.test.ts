/**
 * `monitoredTrainingSession({ task })` and `new Supervisor({ task })` across real processes on
 * loopback: a chief and a worker, each a child running test/fixtures/runtime/sessionTask.ts with
 * its own TF_CONFIG (no CLI, no launch), started with `startTask()`, training a `Graph` session
 * whose `w` starts at the task's SEED + 0.5 and grows by 1 a step. The test drives each task on
 * its stdin and acts when a line appears, never after a fixed time; every wait has a deadline
 * far above what it needs, and every child is SIGKILLed after each test.
 *
 * For both APIs: the worker, started first, waits for the chief and starts from its values (not
 * its own seed's); only the chief writes checkpoints and summaries (the worker's directory is
 * never made). And the chief SIGKILLed and started again by hand (docs/distributed.md, "A worker
 * outlives its chief"): the same worker process waits for it, and its next session starts from
 * the restored checkpoint's values; both train on and exit 0. The same with a program's own
 * `PreemptionCheckpointHandler` on the task (the default agreement), whose agreement follows the
 * worker into the chief's new generation; and with it, a SIGTERM to the worker while it waits for
 * its lost chief exits 43 at its next step, saving nothing. Without a handler (startTask() holds
 * the notice): a SIGTERM while the worker waits for its SIGKILLed chief, or a held SIGTERM and
 * then the chief frozen, exits 43 at once. A worker whose handler closed while its session goes on
 * answers for it in the restarted chief's generation, so that chief's handler does not wait. These
 * paths of a lost chief run on both coordination backends (etcd skipped, with a message, without
 * its binary).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";

import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";

import { etcdBinary, EtcdProcess } from "../cluster/coordination/etcdHarness.js";
import { freePorts, repoRoot } from "../util/cliChild.js";
import { useTempDirs } from "../util/tempDirs.js";

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

const FIXTURE = "test/fixtures/runtime/sessionTask.ts";
/** Starting a task takes a second or two; this is many times that on a loaded machine. */
const DEADLINE_MS = 60_000;

const tempDir = useTempDirs("ms-session-task-");

interface Line {
  readonly event: string;
  readonly pid: number;
  readonly step?: number;
  readonly w?: number;
  readonly name?: string;
  readonly message?: string;
}

interface Task {
  readonly child: ChildProcess;
  readonly lines: Line[];
  /** Resolves with the first line after the `from`-th that `match` accepts; rejects at the deadline or when the child exits without one. */
  next(match: (l: Line) => boolean, from?: number): Promise<Line>;
  send(command: string): void;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  output(): string;
}

const children: ChildProcess[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) {
    if (c.exitCode !== null || c.signalCode !== null) continue;
    const closed = new Promise((ok) => c.once("close", ok));
    c.kill("SIGKILL");
    await closed;
  }
});

type Api = "mts" | "mts-handler" | "supervisor";

/** A task's `cluster:` section (MONITORED_SESSION_CLUSTER); `undefined`: none (the embedded backend). */
type Settings = Readonly<Record<string, unknown>> | undefined;

/** Starts a task of `cluster` with its own TF_CONFIG, directory and seed; `settings`: the cluster: section (default: the embedded backend). */
const start = (api: Api, cluster: object, type: string, seed: number, dir: string, settings: Settings): Task => {
  const env: NodeJS.ProcessEnv = { ...process.env, API: api, SEED: String(seed), DIR: dir, TF_CONFIG: JSON.stringify({ cluster, task: { type, index: 0 } }) };
  // Not under launch, not a replica group: a worker outlives its chief.
  delete env["MONITORED_SESSION_LAUNCH_READY"];
  delete env["MONITORED_SESSION_CLUSTER"];
  if (settings !== undefined) env["MONITORED_SESSION_CLUSTER"] = JSON.stringify(settings);
  const child = spawn(process.execPath, ["--import", "tsx", FIXTURE], { cwd: repoRoot, env, stdio: ["pipe", "pipe", "pipe"] });
  children.push(child);
  const lines: Line[] = [];
  let out = "";
  let buffered = "";
  const waiters = new Set<() => void>();
  const notify = (): void => {
    for (const w of [...waiters]) w();
  };
  child.stdout.setEncoding("utf8").on("data", (d: string) => {
    out += d;
    buffered += d;
    const parts = buffered.split("\n");
    buffered = parts.pop() ?? "";
    for (const p of parts) if (p.startsWith("{")) lines.push(JSON.parse(p) as Line);
    notify();
  });
  child.stderr.setEncoding("utf8").on("data", (d: string) => (out += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((ok) =>
    child.on("close", (code, signal) => {
      ok({ code, signal });
      notify();
    }),
  );
  const next = (match: (l: Line) => boolean, from = 0): Promise<Line> =>
    new Promise((ok, fail) => {
      const timer = setTimeout(() => {
        waiters.delete(check);
        fail(new Error(`${type}: no matching line within ${DEADLINE_MS} ms; output:\n${out}`));
      }, DEADLINE_MS);
      const check = (): void => {
        const found = lines.slice(from).find(match);
        if (found !== undefined || child.exitCode !== null || child.signalCode !== null) {
          clearTimeout(timer);
          waiters.delete(check);
          if (found !== undefined) ok(found);
          else fail(new Error(`${type} exited (${String(child.exitCode ?? child.signalCode)}) without a matching line; output:\n${out}`));
        }
      };
      waiters.add(check);
      check();
    });
  return { child, lines, next, send: (command) => void child.stdin.write(`${command}\n`), exited, output: () => out };
};

const withDeadline = <T>(p: Promise<T>, what: string): Promise<T> =>
  Promise.race([p, new Promise<never>((_, fail) => setTimeout(() => fail(new Error(`${what}: not within ${DEADLINE_MS} ms`)), DEADLINE_MS).unref())]);

const event = (name: string) => (l: Line) => l.event === name;

/** Sends `train n` and resolves with the `trained` line that follows. */
const train = async (t: Task, n: number): Promise<Line> => {
  const from = t.lines.length;
  t.send(`train ${n}`);
  return t.next(event("trained"), from);
};

/** Sends `close` to every task and expects each to leave the cluster and exit 0. */
const closeAll = async (...tasks: Task[]): Promise<void> => {
  for (const t of tasks) t.send("close");
  for (const t of tasks) {
    const { code } = await withDeadline(t.exited, "exit");
    expect(code, t.output()).toBe(0);
    expect(t.lines.filter(event("error")), t.output()).toEqual([]);
  }
};

const CHIEF_SEED = 7;
const WORKER_SEED = 99;

/** A chief and a worker on two free loopback ports, each with its own directory (`<dir>/chief`, `<dir>/worker`, not made). */
const cluster = async (api: Api, settings: Settings): Promise<{ chiefDir: string; workerDir: string; startChief: (seed?: number) => Task; startWorker: () => Task }> => {
  const [p0, p1] = await freePorts(2);
  const spec = { chief: [`127.0.0.1:${p0}`], worker: [`127.0.0.1:${p1}`] };
  const dir = tempDir();
  const chiefDir = join(dir, "chief");
  const workerDir = join(dir, "worker");
  return {
    chiefDir,
    workerDir,
    startChief: (seed = CHIEF_SEED) => start(api, spec, "chief", seed, chiefDir, settings),
    startWorker: () => start(api, spec, "worker", WORKER_SEED, workerDir, settings),
  };
};

/** The worker first, then, once its server is up (it waits for the chief), the chief. */
const startBoth = async (api: Api, settings: Settings = undefined): Promise<{ chief: Task; worker: Task; chiefDir: string; workerDir: string; startChief: (seed?: number) => Task }> => {
  const c = await cluster(api, settings);
  const worker = c.startWorker();
  await worker.next(event("serving"));
  const chief = c.startChief();
  return { chief, worker, chiefDir: c.chiefDir, workerDir: c.workerDir, startChief: c.startChief };
};

/**
 * Both tasks of `api` started (with API=mts-handler, the worker's handler made: it holds the
 * notices from then on), the chief trained 2 steps, then SIGKILLed; resolves once the worker
 * says it lost it.
 */
const chiefKilledAfterTwoSteps = async (api: Api, settings: Settings): Promise<Awaited<ReturnType<typeof startBoth>>> => {
  const both = await startBoth(api, settings);
  await both.worker.next(event("session"));
  // The "session" line is said while the session is made, before the program makes its handler:
  // a loss of the chief before that (a loaded machine) leaves the notice with startTask().
  if (api === "mts-handler") await both.worker.next(event("handler"));
  expect(await train(both.chief, 2)).toMatchObject({ step: 2 });
  both.chief.child.kill("SIGKILL");
  await withDeadline(both.chief.exited, "the chief's exit");
  await both.worker.next(event("lost"));
  return both;
};

// ---------------------------------------------------------------------------------------------
// tests
// ---------------------------------------------------------------------------------------------

const APIS: readonly { readonly api: Api; readonly name: string }[] = [
  { api: "mts", name: "monitoredTrainingSession({ task })" },
  { api: "mts-handler", name: "monitoredTrainingSession({ task }) with a PreemptionCheckpointHandler on the task (the default agreement)" },
  { api: "supervisor", name: "Supervisor({ task }).managedSession" },
];

for (const { api, name } of APIS) {
  describe(`${name} across processes (startTask, hand-set TF_CONFIG)`, () => {
    it("the worker waits for the chief and starts from its values; only the chief writes checkpoints and summaries", async () => {
      const { chief, worker, chiefDir, workerDir } = await startBoth(api);
      expect((await chief.next(event("task"))).name).toBe("chief:0");
      expect((await worker.next(event("task"))).name).toBe("worker:0");
      // The chief initialized w from its seed; the worker's first session holds the chief's w, not its own seed's.
      expect(await chief.next(event("session"))).toMatchObject({ step: 0, w: CHIEF_SEED + 0.5 });
      expect(await worker.next(event("session"))).toMatchObject({ step: 0, w: CHIEF_SEED + 0.5 });

      expect(await train(chief, 3)).toMatchObject({ step: 3, w: CHIEF_SEED + 3.5 });
      // The worker trains its own replica from there.
      expect(await train(worker, 2)).toMatchObject({ step: 2, w: CHIEF_SEED + 2.5 });
      await chief.next((l) => l.event === "saved" && l.step === 3);
      await closeAll(chief, worker);

      const chiefFiles = readdirSync(chiefDir);
      expect(chiefFiles).toContain("checkpoint");
      expect(chiefFiles).toContain("model.ckpt-3.index");
      expect(chiefFiles.filter((f) => f.includes("tfevents"))).not.toEqual([]);
      expect(existsSync(workerDir), `the worker made ${workerDir}`).toBe(false);
      expect(worker.lines.filter(event("saved"))).toEqual([]);
    }, 4 * DEADLINE_MS);

    it("the chief SIGKILLed and started again: the same worker process waits for it and re-creates its session from the restored values; both exit 0", async () => {
      const { chief, worker, startChief } = await startBoth(api);
      const first = await worker.next(event("session"));
      expect(first).toMatchObject({ step: 0, w: CHIEF_SEED + 0.5 });
      expect(await train(chief, 3)).toMatchObject({ step: 3 });
      await chief.next((l) => l.event === "saved" && l.step === 3);
      expect(await train(worker, 1)).toMatchObject({ step: 1, w: CHIEF_SEED + 1.5 });

      chief.child.kill("SIGKILL");
      expect((await withDeadline(chief.exited, "the chief's exit")).signal).toBe("SIGKILL");
      // The embedded coordination service went with the chief: the worker sees the loss at once.
      expect((await worker.next(event("lost"))).message).toMatch(/^worker:0 lost the chief \/job:chief\/replica:0\/task:0 \(.*\): waiting up to 120 s \(maxWaitSecs\)/);

      // Another seed: a chief that initialized instead of restoring would start w at 8.5.
      const restarted = startChief(CHIEF_SEED + 1);
      await worker.next(event("back"));
      // The worker's next step finds the chief lost: its session is re-created from the restarted chief's values, then the step runs.
      const from = worker.lines.length;
      expect(await train(worker, 1)).toMatchObject({ step: 4, w: CHIEF_SEED + 4.5 });
      expect(await worker.next(event("session"), from)).toMatchObject({ step: 3, w: CHIEF_SEED + 3.5, pid: first.pid });
      if (api === "supervisor") expect((await worker.next(event("recreating"), from)).message).toMatch(/^lost the chief \/job:chief\/replica:0\/task:0/);
      expect(await restarted.next(event("session"))).toMatchObject({ step: 3, w: CHIEF_SEED + 3.5 });
      expect(await train(restarted, 2)).toMatchObject({ step: 5, w: CHIEF_SEED + 5.5 });
      await closeAll(restarted, worker);
      expect(worker.lines.filter(event("session")).map((l) => [l.step, l.w, l.pid])).toEqual([
        [0, CHIEF_SEED + 0.5, worker.child.pid],
        [3, CHIEF_SEED + 3.5, worker.child.pid],
      ]);
    }, 6 * DEADLINE_MS);
  });
}

/**
 * The paths of a lost chief on both coordination backends: on the embedded one the chief hosts the
 * service (its loss is its service gone); on etcd the service outlives it (its loss is its lease
 * expired, declared by the service). etcd is skipped, with a message, without its binary.
 */
let etcd: EtcdProcess | undefined;
const backends: readonly { readonly name: string; readonly skip: boolean; readonly settings: () => Settings }[] = [
  { name: "embedded", skip: false, settings: () => undefined },
  {
    name: "etcd",
    skip: etcdBinary === undefined,
    // A prefix of its own for each cluster; the shortest lease etcd allows, so that a lost chief is declared soon.
    settings: () => ({ backend: "etcd", etcdEndpoints: [(etcd as EtcdProcess).endpoint], etcdPrefix: `session-task-${Math.random().toString(16).slice(2)}/`, timeouts: { heartbeatTimeoutSecs: 2 } }),
  },
];

for (const backend of backends) {
  describe.skipIf(backend.skip)(`${backend.name} coordination`, () => {
    beforeAll(async () => {
      if (backend.name === "etcd") etcd = await EtcdProcess.start();
    }, DEADLINE_MS);
    afterAll(async () => {
      if (backend.name === "etcd") await etcd?.stop();
    }, DEADLINE_MS);

    describe("a PreemptionCheckpointHandler on the task (the default agreement), the worker waiting for its lost chief", () => {
      it("a SIGTERM to the waiting worker: nobody can save, it exits 43 at its next step, and never saves", async () => {
        const { worker } = await chiefKilledAfterTwoSteps("mts-handler", backend.settings());
        worker.child.kill("SIGTERM");
        worker.send("train 1");
        const { code } = await withDeadline(worker.exited, "the worker's exit");
        expect(code, worker.output()).toBe(43);
        expect(worker.output()).toMatch(/ERROR PreemptionCheckpointHandler: worker:0 stops for its termination notice while its chief \/job:chief\/replica:0\/task:0 is lost \(.*\): nobody can write the checkpoint: exiting with 43 without saving/);
        expect(worker.lines.filter(event("preemptionSave"))).toEqual([]);
      }, 4 * DEADLINE_MS);
    });

    describe("a worker whose PreemptionCheckpointHandler closed, its session going on", () => {
      it("the chief SIGKILLed and started again: the restarted chief's handler does not wait for the closed one (it answered in the new generation); both train on and exit 0", async () => {
        const { chief, worker, startChief } = await startBoth("mts-handler", backend.settings());
        await worker.next(event("session"));
        expect(await train(chief, 2)).toMatchObject({ step: 2 });
        await chief.next((l) => l.event === "saved" && l.step === 2);
        let from = worker.lines.length;
        worker.send("closeHandler");
        await worker.next(event("handlerClosed"), from);
        chief.child.kill("SIGKILL");
        await withDeadline(chief.exited, "the chief's exit");
        await worker.next(event("lost"));
        const restarted = startChief(CHIEF_SEED + 1);
        await worker.next(event("back"));
        // The worker's next step re-creates its session from the restarted chief's values (the chief waits for that at its start barrier).
        from = worker.lines.length;
        expect(await train(worker, 1)).toMatchObject({ step: 3, w: CHIEF_SEED + 3.5 });
        expect(await worker.next(event("session"), from)).toMatchObject({ step: 2, w: CHIEF_SEED + 2.5 });
        // The restarted chief's handler waits for every task's restore before its first step: the closed handler answered for its task.
        expect(await train(restarted, 1)).toMatchObject({ step: 3, w: CHIEF_SEED + 3.5 });
        expect(restarted.output()).not.toContain("still waits for worker:0");
        await closeAll(restarted, worker);
      }, 6 * DEADLINE_MS);
    });

    describe("startTask() holds a notice for a handler that is not there yet: the worker whose chief is lost", () => {
      const exits43 = async (worker: Task): Promise<void> => {
        const { code } = await withDeadline(worker.exited, "the worker's exit");
        expect(code, worker.output()).toBe(43);
        expect(worker.output()).toMatch(/ERROR worker:0: worker:0 stops for its termination notice while its chief \/job:chief\/replica:0\/task:0 is lost \(.*\): nobody can write the checkpoint: exiting with 43 without saving/);
        expect(worker.lines.filter(event("error")), worker.output()).toEqual([]);
      };

      it("a SIGTERM while the worker waits for its SIGKILLed chief ends the wait: 43 at once, never the program's failure", async () => {
        const { worker } = await chiefKilledAfterTwoSteps("mts", backend.settings());
        worker.child.kill("SIGTERM");
        await exits43(worker);
      }, 4 * DEADLINE_MS);

      it("a held SIGTERM, then the chief frozen (SIGSTOP): the loss is not waited out, 43", async () => {
        const { chief, worker } = await startBoth("mts", backend.settings());
        await worker.next(event("session"));
        expect(await train(worker, 1)).toMatchObject({ step: 1 });
        worker.child.kill("SIGTERM");
        await withDeadline(
          new Promise<void>((ok) => {
            const check = setInterval(() => {
              if (!worker.output().includes("held for the PreemptionCheckpointHandler")) return;
              clearInterval(check);
              ok();
            }, 50);
          }),
          "the held notice's line",
        );
        chief.child.kill("SIGSTOP");
        await exits43(worker);
        expect(worker.lines.filter(event("lost")), "the loss was waited out").toEqual([]);
      }, 4 * DEADLINE_MS);
    });
  });
}
