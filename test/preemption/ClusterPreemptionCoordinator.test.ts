/**
 * The multi-worker PreemptionCheckpointHandler (failure_handler_test's multi-worker scenarios,
 * ported in our own words): three tasks in one process, each with its own handler, session and
 * coordination client of one in-process embedded coordination service, on a virtual clock. The
 * tasks' loops interleave at every await; nothing sleeps. The same protocol across real
 * processes and both backends: test/runtime/preemptionProcesses.process.test.ts.
 */

import { EventEmitter } from "node:events";
import { existsSync } from "node:fs";
import { mkdir, readdir, rename, unlink, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { describe, expect, it, vi } from "vitest";

import { CheckpointManager } from "../../src/checkpoint/index.js";
import { EmbeddedCoordinationClient, EmbeddedCoordinationService, inProcessTransport, taskName } from "../../src/cluster/coordination/index.js";
import { CancelledError, DataLossError, OpError, ResourceExhaustedError, UnavailableError, UnimplementedError, ValueError } from "../../src/errors.js";
import {
  CHIEF_LOST_EXIT_CODE,
  CHECKPOINTED_RUNS,
  PREEMPTION_EXIT_CODE,
  PreemptionCheckpointHandler,
  TerminationConfig,
  type PreemptionCheckpointHandlerOptions,
  type PreemptionClusterResolver,
  type PreemptionEvent,
  type PreemptionKeyValueStore,
} from "../../src/preemption/index.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { RecordingLogger } from "../../src/testing/RecordingLogger.js";
import { flush, VirtualClock } from "../../src/testing/VirtualClock.js";
import { ClusterPreemptionCoordinator } from "../../src/preemption/ClusterPreemptionCoordinator.js";
import { sharedFileCommitter } from "../../src/checkpoint/internal/fileJobs.js";
import { counterModel } from "./counterModel.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-mwpch-");

/** Thrown by a task's exit function: unwinds its loop. */
class Exited extends Error {
  constructor(readonly code: number) {
    super(`exited ${code}`);
  }
}

const NAMES = ["chief:0", "worker:0", "worker:1"] as const;
const TASKS = [taskName("chief", 0), taskName("worker", 0), taskName("worker", 1)];

const model = counterModel;

interface Task {
  readonly name: string;
  readonly handler: PreemptionCheckpointHandler;
  readonly signals: EventEmitter;
  readonly events: PreemptionEvent[];
  /**
   * The handler's `events$` from its creation on: its lines, its coordinator's and its
   * manager's (the lines of `create()` itself come before anyone can subscribe).
   */
  readonly recorder: EventRecorder;
  /**
   * What the handler's `logger` option printed: every line while no session adopts the
   * handler, those after `close()` ended its `events$` included (which only it has).
   */
  readonly logger: RecordingLogger;
  readonly client: EmbeddedCoordinationClient;
  exit: number | undefined;
  /** Runs completed when the task exited (or stopped). */
  runs: number;
  /** Whether a save ran. */
  saves: number[];
  error: unknown;
  /** Trains until `lastRun`, an exit, or an error; `gate` (if any) is awaited before each step. */
  train(lastRun: number, gate?: () => Promise<void>): Promise<void>;
}

/** Three tasks of one cluster (chief:0, worker:0, worker:1) on one in-process service. */
const cluster = async (
  options: {
    graceSecs?: number;
    dir?: string;
    resolver?: (r: PreemptionClusterResolver, clock: VirtualClock) => PreemptionClusterResolver;
    /** The chief's handler takes a manager made here, which removes no leftover (the workers' handlers are the ones under test). */
    chiefManagerKeepsLeftovers?: boolean;
    /** The coordination service's heartbeat timeout (default 10 s): how soon a silent task is declared failed. */
    heartbeatTimeoutMs?: number;
    /** Every task saves with this `TerminationConfig.saveFn` instead of its checkpoint manager. */
    saveFn?: () => unknown;
    /** Called by a task's exit function, before it unwinds the task's loop. */
    onExit?: (id: number, code: number) => void;
    /** More options (or other ones) of task `id`'s handler. */
    handlerOptions?: (id: number) => Partial<PreemptionCheckpointHandlerOptions>;
  } = {},
) => {
  const clock = new VirtualClock();
  const heartbeat = options.heartbeatTimeoutMs === undefined ? {} : { heartbeatTimeoutMs: options.heartbeatTimeoutMs };
  const service = new EmbeddedCoordinationService({ clock, ...heartbeat });
  const dir = options.dir ?? join(tempDir(), "ckpt");
  const clients = TASKS.map((task, i) => new EmbeddedCoordinationClient(inProcessTransport(service), { task, tasks: TASKS, isChief: i === 0, clock, heartbeats: "inline", timeouts: heartbeat }));
  await Promise.all(clients.map((c) => c.connect()));
  const tasks = await Promise.all(
    NAMES.map(async (name, id): Promise<Task> => {
      const session = model();
      // A handler that restores nothing trains from the initial values.
      if (options.handlerOptions?.(id).restoreOnCreate === false) await session.variables.initialize();
      const signals = new EventEmitter();
      const logger = new RecordingLogger();
      const [taskType, index] = name.split(":") as [string, string];
      const base: PreemptionClusterResolver = {
        clusterSpec: { jobs: ["chief", "worker"] },
        taskType,
        taskIndex: Number(index),
        isChief: id === 0,
        numWorkers: 3,
        idInCluster: id,
        coordination: clients[id],
        livenessTimeoutMs: 10_000,
        isChiefLoss: (e) => e instanceof Error && e.message.includes(TASKS[0] as string),
      };
      const t: Task = {
        name,
        signals,
        recorder: new EventRecorder(),
        logger,
        client: clients[id] as EmbeddedCoordinationClient,
        events: [],
        exit: undefined,
        runs: 0,
        saves: [],
        error: undefined,
        handler: await PreemptionCheckpointHandler.create({
          clusterResolver: options.resolver === undefined ? base : options.resolver(base, clock),
          ...(id === 0 && options.chiefManagerKeepsLeftovers === true
            ? { checkpointManager: await CheckpointManager.create({ directory: dir, maxToKeep: 1, removeLeftovers: false, clock }) }
            : { checkpointDir: dir }),
          store: session.variables,
          initFn: () => session.variables.initialize(),
          terminationConfig: new TerminationConfig({
            gracePeriodSecs: options.graceSecs ?? 0,
            ...(options.saveFn === undefined ? {} : { saveFn: options.saveFn }),
            exitFn: (code) => {
              options.onExit?.(id, code);
              throw new Exited(code);
            },
          }),
          signalTarget: signals,
          clock,
          logger,
          ...options.handlerOptions?.(id),
        }),
        train: async (lastRun, gate) => {
          try {
            while (t.handler.totalRunCalls < lastRun) {
              await gate?.();
              await t.handler.run(() => session.run("train"));
              // Interleave the tasks: each step gives the others (and the service) a turn.
              await flush();
            }
          } catch (e) {
            if (e instanceof Exited) t.exit = e.code;
            else t.error = e;
          }
          t.runs = t.handler.totalRunCalls;
        },
      };
      t.recorder.record(t.handler.events$);
      t.handler.events$.subscribe((e) => {
        t.events.push(e);
        if (e.type === "preemptionCheckpointSaved") t.saves.push(e.run);
      });
      return t;
    }),
  );
  const close = async (): Promise<void> => {
    await Promise.all(tasks.map((t) => t.handler.close()));
    await Promise.all(clients.map((c) => c.close()));
    service.close();
  };
  return { clock, service, dir, tasks, clients, close };
};

/** Trains every task to `lastRun`, with `act(task, run)` called before each of its steps. */
const trainAll = (tasks: readonly Task[], lastRun: number, act: (t: Task) => void = () => undefined): Promise<void[]> =>
  Promise.all(tasks.map((t) => t.train(lastRun, async () => act(t))));

/** The runs recorded in the chief's directory (checkpoint numbers), newest last. */
const checkpointsIn = async (dir: string): Promise<number[]> => {
  const m = await CheckpointManager.create({ directory: dir, lock: false });
  try {
    return m.checkpoints.map((c) => Number(/-(\d+)$/.exec(c)?.[1]));
  } finally {
    await m.close();
  }
};

describe("PreemptionCheckpointHandler in a cluster (failure_handler_test, multi-worker)", () => {
  for (const victim of [0, 1, 2]) {
    it(`test_preemption_checkpointing: SIGTERM to ${NAMES[victim]}: every task saves at the same run and exits 42; only the chief's directory holds it, no workertemp is left`, async () => {
      const c = await cluster();
      await trainAll(c.tasks, 100, (t) => {
        if (t === c.tasks[victim] && t.handler.totalRunCalls === 5) t.signals.emit("SIGTERM");
      });
      const saved = c.tasks.map((t) => t.saves);
      expect(c.tasks.map((t) => t.exit)).toEqual([PREEMPTION_EXIT_CODE, PREEMPTION_EXIT_CODE, PREEMPTION_EXIT_CODE]);
      expect(new Set(saved.map((s) => s.join()))).toEqual(new Set([saved[0]?.join()]));
      expect(saved[0]?.length).toBe(1);
      const run = saved[0]?.[0] as number;
      expect(run).toBeGreaterThanOrEqual(6);
      expect(c.tasks.map((t) => t.runs)).toEqual([run, run, run]);
      // Only the chief's directory holds the checkpoint; the workers' temporary ones are gone.
      const parent = dirname(c.dir);
      expect((await readdir(parent)).filter((f) => f.startsWith("workertemp_"))).toEqual([]);
      expect(await checkpointsIn(c.dir)).toHaveLength(1);
      // The agreement's steps are events: the leader claimed, every task heard the agreed run.
      const leader = c.tasks[victim] as Task;
      expect(leader.events.find((e) => e.type === "preemptionClaimed")).toMatchObject({ leader: NAMES[victim], task: NAMES[victim] });
      for (const t of c.tasks) {
        expect(t.events.filter((e) => e.type === "preemptionStepAgreed")).toMatchObject([{ run, round: 0, exit: true }]);
        expect(t.events.at(-1)).toMatchObject({ type: "preemptionExiting", code: 42, saved: true });
      }
      await c.close();

      // A restart resumes every task at that run, with the same totalRunCalls (and a new generation's keys).
      const again = await cluster({ dir: c.dir });
      expect(again.tasks.map((t) => t.handler.totalRunCalls)).toEqual([run, run, run]);
      await trainAll(again.tasks, run + 3);
      expect(again.tasks.map((t) => t.exit)).toEqual([undefined, undefined, undefined]);
      expect(again.tasks.map((t) => t.runs)).toEqual([run + 3, run + 3, run + 3]);
      await again.close();
    });
  }

  it("test_multiple_workers_preempted_consecutively: two notices at once make one leader and one agreed run", async () => {
    const c = await cluster();
    // Both workers get their notice in the same moment, before either heard the other's proposal.
    await trainAll(c.tasks, 100, (t) => {
      if (t === c.tasks[1] && t.handler.totalRunCalls === 4) for (const w of c.tasks.slice(1)) w.signals.emit("SIGTERM");
    });
    const claims = c.tasks.flatMap((t) => t.events.filter((e) => e.type === "preemptionClaimed"));
    expect(claims).toHaveLength(2);
    // The chief, which got no notice, heard the leader's claim (its proposal).
    const heard = c.tasks[0]?.events.filter((e) => e.type === "preemptionClaimHeard") ?? [];
    expect(heard).toEqual([expect.objectContaining({ claimant: (claims[0] as { leader: string }).leader })]);
    const leaders = new Set(claims.map((e) => (e as { leader: string }).leader));
    expect(leaders.size).toBe(1);
    const [leader] = [...leaders];
    const follower = claims.find((e) => (e as { task: string }).task !== leader) as { task: string };
    expect(c.tasks.find((t) => t.name === follower.task)?.recorder.messages().some((l) => l.includes(`leaving it to ${leader as string}`))).toBe(true);
    // The coordinator writes through its handler's logger: the line is the handler's (source preemption).
    const leaving = c.tasks.find((t) => t.name === follower.task)?.recorder.lines().filter((e) => e.message.includes(`leaving it to ${leader as string}`));
    expect(leaving?.map((e) => e.source)).toEqual(["preemption"]);
    const runs = new Set(c.tasks.map((t) => t.saves.join()));
    expect(runs.size).toBe(1);
    expect(c.tasks.map((t) => t.exit)).toEqual([42, 42, 42]);
    await c.close();
  });

  it("workers that train apart: the run is one past the furthest task's, so a task past the leader's run + 1 still saves (TensorFlow's rule would not)", async () => {
    const c = await cluster();
    const [chief, w0, w1] = c.tasks as [Task, Task, Task];
    // worker:1 trains ahead alone, then everyone trains on together; the chief gets the notice at run 3.
    await w1.train(20);
    await trainAll(c.tasks, 100, (t) => {
      if (t === chief && t.handler.totalRunCalls === 3) t.signals.emit("SIGTERM");
    });
    // worker:1 is past 20 when it hears the proposal (run 4): every task saves where worker:1 holds.
    const run = w1.saves[0] as number;
    expect(run).toBeGreaterThanOrEqual(20);
    expect([chief.saves, w0.saves, w1.saves]).toEqual([[run], [run], [run]]);
    expect(c.tasks.map((t) => t.exit)).toEqual([42, 42, 42]);
    const agreed = chief.recorder.messages().map((l) => /every task saves at run (\d+) \(proposed (\d+); a task had trained past it\)/.exec(l)).find((m) => m !== null);
    expect(Number(agreed?.[1])).toBe(run);
    expect(Number(agreed?.[2])).toBeLessThan(20);
    await c.close();
  });

  it("test_error_propagation: an OpError in one task's step is raised by every other task's next run, same class and code, naming the reporter", async () => {
    const c = await cluster();
    const [chief, w0, w1] = c.tasks as [Task, Task, Task];
    const failing = w0.train(100, async () => {
      if (w0.handler.totalRunCalls === 3) {
        await w0.handler.run(() => {
          throw new ResourceExhaustedError("out of memory on worker:0");
        });
      }
    });
    await Promise.all([failing, chief.train(100), w1.train(100)]);
    expect(w0.error).toBeInstanceOf(ResourceExhaustedError);
    for (const t of [chief, w1]) {
      expect(t.error).toBeInstanceOf(ResourceExhaustedError);
      expect((t.error as OpError).code).toBe((w0.error as OpError).code);
      expect((t.error as Error).message).toContain("out of memory on worker:0");
      expect((t.error as Error).message).toContain(`reported by task ${TASKS[1] as string}`);
    }
    await c.close();
  });

  it("only an OpError is reported: a plain Error stays on its task", async () => {
    const c = await cluster();
    const [chief, w0] = c.tasks as [Task, Task, Task];
    await expect(w0.handler.run(() => Promise.reject(new TypeError("a bug")))).rejects.toThrow(TypeError);
    await chief.train(5);
    expect(chief.error).toBeUndefined();
    expect(chief.runs).toBe(5);
    await c.close();
  });

  it("test_grace_period_continue_training: a first save, training goes on, the last save near the end of the grace period, then exit 42", async () => {
    const c = await cluster({ graceSecs: 10 });
    await trainAll(c.tasks, 10_000, (t) => {
      // Each step takes 100 ms of virtual time on the chief's clock (shared).
      if (t === c.tasks[0]) c.clock.set(c.clock.now() + 100);
      if (t === c.tasks[1] && t.handler.totalRunCalls === 5) t.signals.emit("SIGTERM");
    });
    const saves = c.tasks.map((t) => t.saves);
    expect(new Set(saves.map((s) => s.join())).size).toBe(1);
    expect(saves[0]).toHaveLength(2);
    const [first, last] = saves[0] as [number, number];
    expect(last).toBeGreaterThan(first + 10);
    expect(c.tasks.map((t) => t.exit)).toEqual([42, 42, 42]);
    expect(c.tasks[0]?.events.filter((e) => e.type === "preemptionStepAgreed").map((e) => (e as { round: number }).round)).toEqual([0, 1]);
    expect(await checkpointsIn(c.dir)).toHaveLength(1);
    await c.close();
  });

  it("the deadline budget: a notice whose deadline leaves no time for one more step saves at the boundary the leader reaches next, and it restores", async () => {
    const c = await cluster();
    const [, w0] = c.tasks as [Task, Task, Task];
    await trainAll(c.tasks, 100, (t) => {
      if (t === w0 && t.handler.totalRunCalls === 6) t.handler.noticeTermination("a pod's grace period", { deadlineMs: c.clock.now() });
    });
    // The leader proposed the boundary it was at (L), not TensorFlow's L + 1.
    const proposal = w0.recorder.messages().map((l) => /proposing run (\d+), the boundary worker:0 reaches next, instead of run (\d+)/.exec(l)).find((m) => m !== null);
    expect(proposal).toBeDefined();
    const at = Number(proposal?.[1]);
    expect(Number(proposal?.[2])).toBe(at + 1);
    const run = w0.saves[0] as number;
    expect(c.tasks.map((t) => t.saves)).toEqual([[run], [run], [run]]);
    // Only a task already past L moves the run on (to its own boundary).
    if (run !== at) expect(w0.recorder.messages().some((l) => l.includes(`every task saves at run ${run} (proposed ${at}; a task had trained past it)`))).toBe(true);
    await c.close();
    const again = await cluster({ dir: c.dir });
    expect(again.tasks.map((t) => t.handler.totalRunCalls)).toEqual([run, run, run]);
    await again.close();
  });

  it("a task lost during the agreement: the others save where they are and exit 42 instead of waiting for it", async () => {
    const c = await cluster();
    const [chief, w0, w1] = c.tasks as [Task, Task, Task];
    await Promise.all([chief.train(5), w0.train(5), w1.train(5)]);
    // worker:1 freezes: it steps no more and its heartbeats stop.
    await c.clients[2]?.close();
    chief.signals.emit("SIGTERM");
    const training = Promise.all([chief.train(100), w0.train(100)]);
    // Time passes: the service declares worker:1 failed after the heartbeat timeout.
    for (let i = 0; i < 15 && (chief.exit === undefined || w0.exit === undefined); i++) await c.clock.advanceSecs(1);
    await training;
    expect([chief.exit, w0.exit]).toEqual([42, 42]);
    expect(chief.saves).toHaveLength(1);
    expect(await checkpointsIn(c.dir)).toHaveLength(1);
    expect(chief.recorder.messages().some((l) => l.includes("a task was lost during the preemption agreement") && l.includes(TASKS[2] as string))).toBe(true);
    // The run is the chief's own boundary: nobody acknowledges it, and the chief does not say they did not.
    expect(chief.recorder.messages().filter((l) => l.includes("did not acknowledge"))).toEqual([]);
    await c.close();
  });

  it("the chief lost during the agreement: the workers exit with CHIEF_LOST_EXIT_CODE (43) without saving", async () => {
    const c = await cluster();
    const [chief, w0, w1] = c.tasks as [Task, Task, Task];
    await Promise.all([chief.train(5), w0.train(5), w1.train(5)]);
    await c.clients[0]?.close();
    w0.signals.emit("SIGTERM");
    const training = Promise.all([w0.train(100), w1.train(100)]);
    for (let i = 0; i < 15 && (w0.exit === undefined || w1.exit === undefined); i++) await c.clock.advanceSecs(1);
    await training;
    expect([w0.exit, w1.exit]).toEqual([CHIEF_LOST_EXIT_CODE, CHIEF_LOST_EXIT_CODE]);
    expect([w0.saves, w1.saves]).toEqual([[], []]);
    expect(w1.events.at(-1)).toMatchObject({ type: "preemptionExiting", code: 43, saved: false });
    await c.close();
  });

  it("close() ends only this task's watch: a later agreement does not wait for it, and nothing of it stays pending", async () => {
    const c = await cluster();
    const [chief, w0, w1] = c.tasks as [Task, Task, Task];
    await w1.train(3);
    await w1.handler.close();
    await trainAll([chief, w0], 100, (t) => {
      if (t === w0 && t.handler.totalRunCalls === 4) t.signals.emit("SIGTERM");
    });
    expect([chief.exit, w0.exit]).toEqual([42, 42]);
    expect(chief.saves).toEqual(w0.saves);
    await c.close();
  });

  it("checkpointed_runs is restored on every task: the non-chief reads the chief's directory without its lock", async () => {
    const c = await cluster();
    await trainAll(c.tasks, 100, (t) => {
      if (t === c.tasks[2] && t.handler.totalRunCalls === 2) t.signals.emit("SIGTERM");
    });
    expect(c.tasks[1]?.handler.checkpointManager?.holdsLock).toBe(false);
    await c.close();
    const state = await CheckpointManager.create({ directory: c.dir, lock: false });
    expect(state.checkpoints).toHaveLength(1);
    await state.close();
    expect(CHECKPOINTED_RUNS).toBe("checkpointed_runs");
  });

  it("a non-chief never takes the chief's lock, and makes its workertemp directory only when it saves (deleted on close)", async () => {
    const c = await cluster();
    // Every worker's handler reads the chief's directory, beside the chief's (which holds the lock).
    expect(c.tasks.map((t) => t.handler.checkpointManager?.holdsLock)).toEqual([true, false, false]);
    const temp = join(dirname(c.dir), "workertemp_1");
    expect(existsSync(temp)).toBe(false);
    await c.tasks[1]?.handler.save();
    expect(existsSync(join(temp, "ckpt"))).toBe(true);
    await c.close();
    expect(existsSync(temp)).toBe(false);
  });

  it("a non-chief's save into its workertemp directory is written on the calling thread: the writer thread gets no job from it (the chief's save, same size, does)", async () => {
    const c = await cluster();
    const writer = sharedFileCommitter();
    if (writer === null) throw new Error("this process cannot run the checkpoint writer thread (code generation from strings is disallowed)");
    // The chief's manager started the thread when it took its directory's lock; once it is
    // online, a save small enough for it is sent to it.
    await writer.whenReady();
    const jobs = vi.spyOn(writer, "run");
    try {
      await c.tasks[1]?.handler.save();
      expect(existsSync(join(dirname(c.dir), "workertemp_1", "ckpt"))).toBe(true);
      expect(jobs).not.toHaveBeenCalled();
      await c.tasks[0]?.handler.save();
      expect(jobs).toHaveBeenCalledTimes(1);
    } finally {
      jobs.mockRestore();
    }
    await c.close();
  });

  it("a workertemp directory that cannot be deleted is a warning naming it and why, and the close goes on", async () => {
    // The checkpoint directory's parent is replaced by a file after the save: the deletion of
    // <parent>/workertemp_1 then fails with ENOTDIR (no permission stops root).
    const base = tempDir();
    const parent = join(base, "run");
    const c = await cluster({ dir: join(parent, "ckpt") });
    const worker = c.tasks[1] as Task;
    const temp = join(parent, "workertemp_1");
    await worker.handler.save();
    expect(existsSync(join(temp, "ckpt"))).toBe(true);
    await rename(parent, join(base, "run.moved"));
    await writeFile(parent, "");
    try {
      await worker.handler.close();
      // (Its manager's lock, inside it, cannot be released either: a warning of the lock's own.)
      // An event too: close() ends the handler's events$ only after it deleted the directory.
      const warning = `PreemptionCheckpointHandler: could not delete ${temp}: ENOTDIR: not a directory, lstat '${temp}'`;
      expect(worker.recorder.lines("warn").filter((e) => e.message.startsWith("PreemptionCheckpointHandler:")).map((e) => [e.source, e.message])).toEqual([["preemption", warning]]);
      expect(worker.recorder.messages("warn").some((m) => m.includes("lock"))).toBe(true);
      expect(worker.logger.messages("warn").filter((m) => m.startsWith("PreemptionCheckpointHandler:"))).toEqual([warning]);
    } finally {
      await unlink(parent);
      await rename(join(base, "run.moved"), parent);
    }
    await c.close();
  });
});

/** What {@link acknowledgingThrough} saw of the acknowledgement keys (`…/ack/<id>`). */
interface AckTraffic {
  /** Every acknowledgement key the service stored. */
  readonly stored: Set<string>;
  /** Every get of an acknowledgement key: by which task, when it started and settled, on the clock. */
  readonly gets: { readonly by: number; readonly key: string; readonly startMs: number; endMs?: number }[];
}

/**
 * `inner`, whose task's acknowledgement (the first insert of an acknowledgement key: a close's
 * mark goes straight) reaches the service through `hop` (a slow network, a failure); `traffic`
 * records what the service stored and each wait for an acknowledgement.
 */
const acknowledgingThrough = (
  inner: PreemptionKeyValueStore,
  id: number,
  clock: VirtualClock,
  traffic: AckTraffic,
  hop: (insert: () => Promise<void>) => Promise<void>,
): PreemptionKeyValueStore => {
  let acknowledged = false;
  const isAck = (key: string): boolean => /\/ack\/\d+$/.test(key);
  return {
    get generation() {
      return inner.generation;
    },
    insert: (key, value) => {
      const insert = (): Promise<void> => inner.insert(key, value).then(() => void (isAck(key) && traffic.stored.add(key)));
      if (!isAck(key) || acknowledged) return insert();
      acknowledged = true;
      return hop(insert);
    },
    get: (key, options) => {
      if (!isAck(key)) return inner.get(key, options);
      const get: AckTraffic["gets"][number] = { by: id, key, startMs: clock.now() };
      traffic.gets.push(get);
      return inner.get(key, options).finally(() => (get.endMs = clock.now()));
    },
    reportErrorToCluster: (error, options) => inner.reportErrorToCluster(error, options),
  };
};

describe("PreemptionCheckpointHandler in a cluster: every acknowledgement is stored before its task exits", () => {
  /** The resolvers' liveness deadline: what a wait before an exit may take at most. */
  const LIVENESS_MS = 10_000;

  /**
   * Three tasks that save with a `saveFn` (no file to write: the save gives the event loop no
   * turn) and whose exit is a process's death (its coordination client closes at once). Each
   * task's acknowledgement reaches the service through `hop(id, insert, clock)`. SIGTERM to
   * worker:1 at run 5; the tasks train with no pause between steps while virtual time passes,
   * 50 ms a turn (a task's real I/O, its manager's close, may take many turns: the bound is loose).
   */
  const preempted = async (
    hop: (id: number, insert: () => Promise<void>, clock: VirtualClock) => Promise<void>,
    options: { heartbeatTimeoutMs?: number; agreement?: PreemptionCheckpointHandlerOptions["agreement"] } = {},
  ) => {
    const traffic: AckTraffic = { stored: new Set(), gets: [] };
    /** At each task's exit function: the time, and whether its acknowledgement was stored. */
    const exits = new Map<number, { readonly timeMs: number; readonly acknowledged: boolean }>();
    const box: { c?: Awaited<ReturnType<typeof cluster>> } = {};
    const { agreement, ...clusterOptions } = options;
    const c = await cluster({
      ...clusterOptions,
      ...(agreement === undefined ? {} : { handlerOptions: () => ({ agreement }) }),
      saveFn: () => undefined,
      resolver: (r, clock) => {
        const id = r.idInCluster as number;
        return { ...r, coordination: acknowledgingThrough(r.coordination as PreemptionKeyValueStore, id, clock, traffic, (insert) => hop(id, insert, clock)) };
      },
      onExit: (id) => {
        exits.set(id, { timeMs: (box.c as { clock: VirtualClock }).clock.now(), acknowledged: [...traffic.stored].some((k) => k.endsWith(`/ack/${id}`)) });
        void box.c?.clients[id]?.close();
      },
    });
    box.c = c;
    const training = trainAll(c.tasks, 1_000, (t) => {
      if (t === c.tasks[2] && t.handler.totalRunCalls === 5) t.signals.emit("SIGTERM");
    });
    for (let i = 0; i < 2_000 && c.tasks.some((t) => t.exit === undefined && t.error === undefined); i++) await c.clock.advance(50);
    await training;
    /** The time of `task`'s event of `type`. */
    const timeOf = (task: Task, type: PreemptionEvent["type"]): number => (task.events.find((e) => e.type === type) as { time: number }).time;
    /** Closes the cluster while time passes: a leader's close waits until every task acknowledged, or was declared failed. */
    const close = async (): Promise<void> => {
      let closed = false;
      const closing = c.close().finally(() => (closed = true));
      for (let i = 0; i < 2_000 && !closed; i++) await c.clock.advance(50);
      await closing;
    };
    return { c, traffic, exits, timeOf, close };
  };

  it("a non-chief at the agreed run that saves with a saveFn and exits at once has its acknowledgement stored first: the chief neither warns nor waits the liveness deadline", async () => {
    const { c, traffic, exits, close } = await preempted((_, insert, clock) => clock.sleep(50).then(insert));
    expect(c.tasks.map((t) => t.error)).toEqual([undefined, undefined, undefined]);
    expect(c.tasks.map((t) => t.exit)).toEqual([42, 42, 42]);
    const run = c.tasks[0]?.saves[0] as number;
    expect(c.tasks.map((t) => t.saves)).toEqual([[run], [run], [run]]);
    expect([exits.get(1)?.acknowledged, exits.get(2)?.acknowledged]).toEqual([true, true]);
    expect(c.tasks.flatMap((t) => t.recorder.messages("warn"))).toEqual([]);
    // The chief's waits for the others' acknowledgements ended as soon as each was in: nowhere near the liveness deadline.
    const waits = traffic.gets.filter((g) => g.by === 0);
    expect(waits.map((g) => g.key.replace(/.*\//, "")).sort()).toEqual(["1", "2"]);
    for (const g of waits) expect((g.endMs as number) - g.startMs).toBeLessThan(LIVENESS_MS / 10);
    await close();
  });

  it("a non-chief whose acknowledgement fails to be stored says so in one line and exits all the same; the chief names it alone, with the time it actually waited", async () => {
    // A short heartbeat timeout: the service declares the exited worker:0 failed well before the liveness deadline.
    const { c, traffic, close } = await preempted((id, insert) => (id === 1 ? Promise.reject(new UnavailableError("the coordination service did not answer")) : insert()), { heartbeatTimeoutMs: 3_000 });
    const [chief, w0] = c.tasks as [Task, Task, Task];
    expect(c.tasks.map((t) => t.exit)).toEqual([42, 42, 42]);
    const run = chief.saves[0] as number;
    expect(w0.recorder.messages("warn")).toEqual([
      `PreemptionCheckpointHandler: worker:0 could not acknowledge the agreed run ${run} (UnavailableError: the coordination service did not answer); it saves there and exits all the same.`,
    ]);
    const warned = chief.recorder.messages("warn");
    expect(warned).toHaveLength(1);
    const m = /^PreemptionCheckpointHandler: (.*) did not acknowledge the agreed run (\d+); the chief waited ([\d.]+) s \((.*)\) and exits all the same\.$/.exec(warned[0] as string);
    expect(m, warned[0]).not.toBeNull();
    expect([m?.[1], Number(m?.[2])]).toEqual(["worker:0", run]);
    expect(m?.[4]).toMatch(/^worker:0: UnavailableError: .*declared failed/);
    // The time is the chief's wait on the clock, from its start to worker:0's declaration: not the liveness deadline.
    const waits = traffic.gets.filter((g) => g.by === 0);
    expect(waits).toHaveLength(2);
    const waitedMs = Math.max(...waits.map((g) => g.endMs as number)) - Math.min(...waits.map((g) => g.startMs));
    expect(Number(m?.[3])).toBe(Math.round(waitedMs / 100) / 10);
    expect(waitedMs).toBeGreaterThan(0);
    expect(waitedMs).toBeLessThan(LIVENESS_MS);
    await close();
  });

  it('"chiefSaves": the workers exit 42 once their acknowledgements of the chief\'s save are stored; one that fails says so in one line, and the chief names it alone', async () => {
    const fine = await preempted((_, insert, clock) => clock.sleep(50).then(insert), { agreement: "chiefSaves" });
    expect(fine.c.tasks.map((t) => t.exit)).toEqual([42, 42, 42]);
    expect([fine.exits.get(1)?.acknowledged, fine.exits.get(2)?.acknowledged]).toEqual([true, true]);
    expect(fine.c.tasks.flatMap((t) => t.recorder.messages("warn"))).toEqual([]);
    await fine.close();

    const { c, close } = await preempted((id, insert) => (id === 1 ? Promise.reject(new UnavailableError("the coordination service did not answer")) : insert()), {
      heartbeatTimeoutMs: 3_000,
      agreement: "chiefSaves",
    });
    const [chief, w0] = c.tasks as [Task, Task, Task];
    expect(c.tasks.map((t) => t.exit)).toEqual([42, 42, 42]);
    expect(w0.recorder.messages("warn")).toEqual([
      "PreemptionCheckpointHandler: worker:0 could not acknowledge the chief's preemption checkpoint (UnavailableError: the coordination service did not answer); it exits all the same.",
    ]);
    const warned = chief.recorder.messages("warn");
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatch(/^PreemptionCheckpointHandler: worker:0 did not acknowledge the chief's preemption checkpoint \(its run \d+\); the chief waited [\d.]+ s \(worker:0: /);
    await close();
  });

  it("a non-chief whose acknowledgement never answers waits for it no longer than the liveness deadline, says so in one line, and exits", async () => {
    const { c, timeOf, close } = await preempted((id, insert) => (id === 1 ? new Promise<void>(() => undefined) : insert()));
    const [chief, w0] = c.tasks as [Task, Task, Task];
    expect(c.tasks.map((t) => t.exit)).toEqual([42, 42, 42]);
    const run = chief.saves[0] as number;
    expect(w0.recorder.messages("warn")).toEqual([
      `PreemptionCheckpointHandler: worker:0's acknowledgement of the agreed run ${run} was not stored within 10 s; it exits all the same (the chief waits for it up to its liveness deadline).`,
    ]);
    expect(timeOf(w0, "preemptionExiting") - timeOf(w0, "preemptionCheckpointSaved")).toBeGreaterThanOrEqual(LIVENESS_MS);
    expect(chief.recorder.messages("warn")).toEqual([expect.stringMatching(/^PreemptionCheckpointHandler: worker:0 did not acknowledge the agreed run \d+; the chief waited 10 s \(worker:0: nothing within the 10 s deadline\) and exits all the same\.$/)]);
    await close();
  });
});

/** A lockstep "all-reduce" of the three tasks: step k of each resolves once every task entered step k (data-parallel ranks). */
const lockstep = () => {
  const entered = new Map<number, number>();
  const waiters = new Map<number, (() => void)[]>();
  return (k: number): Promise<void> => {
    const n = (entered.get(k) ?? 0) + 1;
    entered.set(k, n);
    if (n === NAMES.length) {
      for (const w of waiters.get(k) ?? []) w();
      return Promise.resolve();
    }
    return new Promise<void>((ok) => waiters.set(k, [...(waiters.get(k) ?? []), ok]));
  };
};

describe("PreemptionCheckpointHandler in a cluster: tasks in lockstep, a leader that closes, a step that fails for another's error", () => {
  for (const deadline of [false, true]) {
    it(`data-parallel ranks through the coordination path${deadline ? " with a deadline (the budget proposes the boundary the leader reaches next)" : ""}: the ranks answer the proposal from where their loop is, so no rank waits for another's step; all save at one run`, async () => {
      const c = await cluster();
      const step = lockstep();
      const [, w0] = c.tasks as [Task, Task, Task];
      // Each task's step waits for every task's same step, as a collective does.
      await Promise.all(
        c.tasks.map(async (t) => {
          try {
            while (t.handler.totalRunCalls < 200) {
              const k = t.handler.totalRunCalls;
              if (t === w0 && k === 5) {
                if (deadline) t.handler.noticeTermination("a notice with its deadline now", { deadlineMs: c.clock.now() });
                else t.signals.emit("SIGTERM");
              }
              await t.handler.run(() => step(k));
            }
          } catch (e) {
            if (e instanceof Exited) t.exit = e.code;
            else t.error = e;
          }
        }),
      );
      expect(c.tasks.map((t) => t.exit)).toEqual([42, 42, 42]);
      const run = c.tasks[0]?.saves[0] as number;
      expect(c.tasks.map((t) => t.saves)).toEqual([[run], [run], [run]]);
      expect(run).toBeLessThan(200);
      await c.close();
    });
  }

  it("a leader whose loop ends right after its claim sees its round through when it closes: the others save at one run and exit 42", async () => {
    const c = await cluster();
    const [chief, w0, w1] = c.tasks as [Task, Task, Task];
    await Promise.all([chief.train(3), w0.train(3), w1.train(3)]);
    w1.signals.emit("SIGTERM");
    for (let i = 0; i < 5; i++) await flush();
    expect(w1.events.find((e) => e.type === "preemptionClaimed")).toMatchObject({ leader: "worker:1" });
    // worker:1's loop is over: it closes without another step.
    const closing = w1.handler.close();
    await Promise.all([chief.train(100), w0.train(100), closing]);
    expect([chief.exit, w0.exit]).toEqual([42, 42]);
    expect(chief.saves).toEqual(w0.saves);
    // The proposal went out with the claim (run 3 + 1); the others hold from where they are.
    expect(chief.saves[0]).toBeGreaterThanOrEqual(4);
    expect(w1.recorder.messages().some((l) => l.includes("worker:1 claimed the preemption"))).toBe(true);
    expect(chief.recorder.messages().some((l) => l.includes("still waits for"))).toBe(false);
    await c.close();
  });

  it("a step that failed because of another task's reported error raises that error (same class), and reports nothing itself", async () => {
    const c = await cluster();
    const [chief] = c.tasks as [Task, Task, Task];
    const reported = new ResourceExhaustedError("worker:0 ran out of memory (reported by task /job:worker/replica:0/task:0)", {
      failure: { kind: "reported", reporter: "/job:worker/replica:0/task:0", errorName: "ResourceExhaustedError" },
    });
    const wrapped = new Error("the replica group failed", { cause: new Error("the collective failed", { cause: reported }) });
    await expect(chief.handler.run(() => Promise.reject(wrapped))).rejects.toBe(reported);
    // Nothing was reported by the chief: the other tasks train on.
    await c.tasks[1]?.train(3);
    expect(c.tasks[1]?.error).toBeUndefined();
    await c.close();
  });

  it("an exitFn that returns leaves the handler unusable, with an error that says so", async () => {
    const session = model();
    const signals = new EventEmitter();
    const exits: number[] = [];
    const h = await PreemptionCheckpointHandler.create({
      checkpointDir: tempDir(),
      store: session.variables,
      initFn: () => session.variables.initialize(),
      terminationConfig: new TerminationConfig({ exitFn: (code) => void exits.push(code) }),
      signalTarget: signals,
      clock: new VirtualClock(),
      logger: new RecordingLogger(),
    });
    await h.run(() => session.run("train"));
    signals.emit("SIGTERM");
    await h.run(() => session.run("train"));
    await h.run(() => session.run("train"));
    expect(exits).toEqual([42]);
    await expect(h.run(() => session.run("train"))).rejects.toThrow("exitFn returned; create a new handler to train on");
    await h.close();
  });

  it("a non-chief's handler leaves the chief's directory alone: a data file whose index is still being written (the chief's save under way) is not removed", async () => {
    const dir = join(tempDir(), "ckpt");
    await mkdir(dir, { recursive: true });
    const inFlight = join(dir, "ckpt-9.data-00000-of-00001");
    await writeFile(inFlight, "the chief's save under way");
    const c = await cluster({ dir, chiefManagerKeepsLeftovers: true });
    expect(existsSync(inFlight)).toBe(true);
    await c.close();
  });
});

describe("PreemptionCheckpointHandler's cluster resolver", () => {
  const base: PreemptionClusterResolver = { clusterSpec: { jobs: ["chief", "worker"] }, taskType: "worker", taskIndex: 0, isChief: false, numWorkers: 2, idInCluster: 1 };

  it("a cluster with a ps job is UnimplementedError with TensorFlow's message", async () => {
    const session = model();
    await expect(
      PreemptionCheckpointHandler.create({ clusterResolver: { ...base, clusterSpec: { jobs: ["chief", "worker", "ps"] } }, checkpointDir: tempDir(), store: session.variables }),
    ).rejects.toThrow(new UnimplementedError("PreemptionCheckpointHandler does not support usage with parameter server strategy."));
  });

  it("a plain resolver that has not joined the coordination service is refused with one line saying how to start the task", async () => {
    const session = model();
    const e = await PreemptionCheckpointHandler.create({ clusterResolver: base, checkpointDir: tempDir(), store: session.variables }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(ValueError);
    expect((e as Error).message).toMatch(/has not joined the coordination service; start the task with .*startTask\(\).*clusterResolver: task/);
    expect((e as Error).message).not.toContain("\n");
  });

  it("a cluster of no jobs is local mode", async () => {
    const session = model();
    const dir = tempDir();
    const h = await PreemptionCheckpointHandler.create({
      clusterResolver: { ...base, clusterSpec: { jobs: [] } },
      checkpointDir: dir,
      store: session.variables,
      initFn: () => session.variables.initialize(),
      signalTarget: new EventEmitter(),
    });
    expect(h.checkpointManager?.holdsLock).toBe(true);
    await h.close();
  });
});

describe("ClusterPreemptionCoordinator without the loop's position (a coordinator of a custom handler)", () => {
  it("a claimant whose loop has no boundary left proposes its last run when it closes: the others do not wait for a proposal that would never come", async () => {
    const clock = new VirtualClock();
    const service = new EmbeddedCoordinationService({ clock });
    const clients = TASKS.map((task, i) => new EmbeddedCoordinationClient(inProcessTransport(service), { task, tasks: TASKS, isChief: i === 0, clock, heartbeats: "inline" }));
    await Promise.all(clients.map((c) => c.connect()));
    const loggers = NAMES.map(() => new RecordingLogger());
    const coordinators = NAMES.map(
      (_, id) =>
        new ClusterPreemptionCoordinator({ store: clients[id] as EmbeddedCoordinationClient, id, workers: NAMES, isChief: id === 0, clock, logger: loggers[id] as RecordingLogger }),
    );
    const [chief, w0, w1] = coordinators as [ClusterPreemptionCoordinator, ClusterPreemptionCoordinator, ClusterPreemptionCoordinator];
    // worker:1 is noticed before any boundary (no position to propose from), claims, and its loop ends.
    w1.notifyTermination(clock.now());
    for (let i = 0; i < 5; i++) await flush();
    const closing = w1.close();
    // The others train on from run 7 until they are told to save.
    const train = async (c: ClusterPreemptionCoordinator): Promise<number> => {
      for (let run = 7; run < 50; run++) {
        const d = await c.beforeStep(run, 1);
        if (d.save) return run;
        await flush();
      }
      throw new Error("never told to save");
    };
    const [a, b] = await Promise.all([train(chief), train(w0), closing]);
    expect(a).toBe(b);
    expect(loggers[2]?.messages()).toContain("PreemptionCheckpointHandler: worker:1 closes before it proposed: proposing run 0 for the other tasks.");
    await Promise.all([chief.close(), w0.close()]);
    await Promise.all(clients.map((c) => c.close()));
  });
});

describe("ClusterPreemptionCoordinator: a malformed stored value (another version of the library, a corrupted key)", () => {
  /** One coordinator, `id`, of a three-task cluster whose keys `stored` already hold (relative to the agreement's prefix). */
  const withStored = async (id: number, stored: Readonly<Record<string, string>>) => {
    const clock = new VirtualClock();
    const service = new EmbeddedCoordinationService({ clock });
    const clients = TASKS.map((task, i) => new EmbeddedCoordinationClient(inProcessTransport(service), { task, tasks: TASKS, isChief: i === 0, clock, heartbeats: "inline" }));
    await Promise.all(clients.map((c) => c.connect()));
    const prefix = `monitored-session/preemption/${clients[0]?.generation ?? 0}`;
    const writer = clients[(id + 1) % clients.length] as EmbeddedCoordinationClient;
    for (const [k, v] of Object.entries(stored)) await writer.insert(`${prefix}/${k}`, v);
    const coordinator = new ClusterPreemptionCoordinator({
      store: clients[id] as EmbeddedCoordinationClient,
      id,
      workers: NAMES,
      isChief: id === 0,
      clock,
      logger: new RecordingLogger(),
    });
    for (let i = 0; i < 10; i++) await flush();
    /** The error the coordinator's next check raises. */
    const raised = (): unknown => {
      try {
        void coordinator.beforeStep(2, 1);
        return undefined;
      } catch (e) {
        return e;
      }
    };
    const close = async () => {
      await coordinator.close();
      await Promise.all(clients.map((c) => c.close()));
    };
    return { prefix, coordinator, raised, close };
  };

  it("a proposal that is not JSON is a one-line DataLossError naming the key and what it holds", async () => {
    const c = await withStored(1, { "round0/proposal/1": "{oops" });
    const e = c.raised();
    expect(e).toBeInstanceOf(DataLossError);
    expect((e as Error).message).toBe(
      `PreemptionCheckpointHandler: the preemption proposal for worker:0 at coordination key ${c.prefix}/round0/proposal/1 is malformed (written by another version of monitored-session, or corrupted): expected JSON, got "{oops"`,
    );
    expect(c.coordinator.pendingFailure).toBe(e);
    await c.close();
  });

  it("a proposal of another shape names each field's problem with its path", async () => {
    const c = await withStored(1, { "round0/proposal/1": JSON.stringify({ step: "3", exit: 1 }) });
    const e = c.raised();
    expect(e).toBeInstanceOf(DataLossError);
    expect((e as Error).message).toMatch(/ at coordination key \S+\/round0\/proposal\/1 is malformed .*: step: expected an integer >= 0, got "3"; exit: expected true or false, got 1$/);
    expect((e as Error).message).not.toContain("\n");
    await c.close();
  });

  it("an agreed run that is not an object is a DataLossError naming the key and the expected shape", async () => {
    const c = await withStored(2, { "round0/proposal/2": JSON.stringify({ step: 3, exit: true }), "round0/step/2": "[3,true]" });
    const e = c.raised();
    expect(e).toBeInstanceOf(DataLossError);
    expect((e as Error).message).toBe(
      `PreemptionCheckpointHandler: the agreed preemption run for worker:1 at coordination key ${c.prefix}/round0/step/2 is malformed (written by another version of monitored-session, or corrupted): expected {"step": an integer >= 0, "exit": true or false}, got [3,true]`,
    );
    await c.close();
  });

  it("a hold the chief collects that is malformed is a DataLossError naming the key and whose hold it is; the chief publishes no run", async () => {
    const c = await withStored(0, {
      "round0/proposal/0": JSON.stringify({ step: 3, exit: true }),
      "round0/hold/0": JSON.stringify({ hold: 3, run: 2 }),
      "round0/hold/1": JSON.stringify({ hold: -1, run: 2 }),
      "round0/hold/2": "closed",
    });
    const e = c.raised();
    expect(e).toBeInstanceOf(DataLossError);
    expect((e as Error).message).toBe(
      `PreemptionCheckpointHandler: worker:0's hold at coordination key ${c.prefix}/round0/hold/1 is malformed (written by another version of monitored-session, or corrupted): hold: expected an integer >= 0, got -1`,
    );
    await c.close();
  });
});

describe("ClusterPreemptionCoordinator: a task alive to the service that never answers, a close with no service, a handler that only agrees", () => {
  it("a task whose hold never reaches the service (alive: its heartbeats go on, its event loop blocked) is left out after twice the liveness deadline: the others save at one run and exit 42, and the leader names it", async () => {
    // worker:1's hold insert never answers; its heartbeats (the client's own) go on, so nobody declares it failed.
    const c = await cluster({
      resolver: (r) => {
        const store = r.coordination as PreemptionKeyValueStore;
        if (r.idInCluster !== 2) return r;
        return {
          ...r,
          coordination: {
            get generation() {
              return store.generation;
            },
            insert: (k, v) => (k.includes("/hold/") ? new Promise<void>(() => undefined) : store.insert(k, v)),
            get: (k, o) => store.get(k, o),
            reportErrorToCluster: (e, o) => store.reportErrorToCluster(e, o),
          },
        };
      },
    });
    const [chief, w0, w1] = c.tasks as [Task, Task, Task];
    const training = trainAll(c.tasks, 1_000, (t) => {
      if (t === w0 && t.handler.totalRunCalls === 5) t.signals.emit("SIGTERM");
    });
    for (let i = 0; i < 400 && c.tasks.some((t) => t.exit === undefined && t.error === undefined && t.runs === 0); i++) await c.clock.advance(100);
    await training;
    expect(w1.exit).toBe(42);
    expect([chief.exit, w0.exit]).toEqual([42, 42]);
    expect(chief.saves).toEqual(w0.saves);
    expect(chief.saves).toHaveLength(1);
    expect(w0.recorder.messages("warn")).toContainEqual(
      "PreemptionCheckpointHandler: worker:1 did not answer the proposal within 20 s (alive to the coordination service, its event loop blocked?): the run is agreed without its hold.",
    );
    expect(c.tasks.map((t) => t.error)).toEqual([undefined, undefined, undefined]);
    // worker:1's close marks its hold key too, which never answers: its close gives up after the bound.
    let closed = false;
    const closing = c.close().finally(() => (closed = true));
    for (let i = 0; i < 400 && !closed; i++) await c.clock.advance(100);
    await closing;
  });

  it("a task at its hold whose agreed run never comes (the leader and the chief silent, not declared failed) saves where it is after three liveness deadlines, in one warning line", async () => {
    const clock = new VirtualClock();
    const logger = new RecordingLogger();
    const values = new Map<string, string>([["monitored-session/preemption/1/round0/proposal/1", JSON.stringify({ step: 3, exit: true, by: "worker:1" })]]);
    const store: PreemptionKeyValueStore = {
      generation: 1,
      insert: async (k, v) => void values.set(k, v),
      // The stored proposal answers; anything else never does (its publishers' event loops are blocked).
      get: (k) => (values.has(k) && k.includes("/proposal/") ? Promise.resolve(values.get(k) as string) : new Promise<string>(() => undefined)),
      reportErrorToCluster: async () => undefined,
    };
    const coordinator = new ClusterPreemptionCoordinator({ store, id: 1, workers: ["chief:0", "worker:0", "worker:1"], isChief: false, livenessTimeoutMs: 10_000, clock, logger });
    await flush();
    expect(coordinator.beforeStep(2, 1)).toEqual({ save: false });
    expect(values.get("monitored-session/preemption/1/round0/hold/1")).toBe(JSON.stringify({ hold: 3, run: 2 }));
    let decision: unknown;
    void Promise.resolve(coordinator.beforeStep(3, 1)).then((d) => (decision = d));
    await clock.advance(29_999);
    expect(decision).toBeUndefined();
    await clock.advance(1);
    await flush();
    expect(decision).toEqual({ save: true, exit: true, deadlineMs: undefined });
    expect(logger.messages("warn")).toEqual([
      "PreemptionCheckpointHandler: a task was lost during the preemption agreement (worker:0 held at run 3 and the agreed run did not come within 30 s (the leader and the chief alive to the coordination service, but silent)); worker:0 saves at run 3, the boundary it is at, and exits.",
    ]);
    const closing = coordinator.close();
    await clock.advance(20_000);
    await closing;
  });

  it("close() with a coordination service that never answers returns after twice the liveness deadline, in one warning line", async () => {
    const clock = new VirtualClock();
    const logger = new RecordingLogger();
    const never = <T>(): Promise<T> => new Promise<T>(() => undefined);
    const store: PreemptionKeyValueStore = { generation: 1, insert: never, get: never, reportErrorToCluster: never };
    const coordinator = new ClusterPreemptionCoordinator({ store, id: 1, workers: ["chief:0", "worker:0"], isChief: false, livenessTimeoutMs: 10_000, clock, logger });
    let closed = false;
    const closing = coordinator.close().then(() => (closed = true));
    await clock.advance(19_999);
    expect(closed).toBe(false);
    await clock.advance(1);
    await closing;
    expect(logger.messages("warn")).toEqual(["PreemptionCheckpointHandler: worker:0 closed before its coordination calls settled (none answered within 20 s)."]);
  });

  it("a handler with neither a manager nor a directory agrees on the run and calls its saveFn; save() is refused; without a saveFn it is refused at creation", async () => {
    const saved: number[] = [];
    const c = await cluster({
      handlerOptions: (id) =>
        id === 2 ? { checkpointDir: undefined, restoreOnCreate: false, terminationConfig: new TerminationConfig({ saveFn: () => void saved.push(id), exitFn: (code) => { throw new Exited(code); } }) } : {},
    });
    const [chief, w0, w1] = c.tasks as [Task, Task, Task];
    expect(w1.handler.checkpointManager).toBeUndefined();
    await expect(w1.handler.save()).rejects.toThrow(/this handler has no checkpoint manager/);
    await trainAll(c.tasks, 100, (t) => {
      if (t === chief && t.handler.totalRunCalls === 4) t.signals.emit("SIGTERM");
    });
    expect([w1.exit, w0.exit, chief.exit], String([w1.error, w0.error, chief.error, ...chief.recorder.messages()])).toEqual([42, 42, 42]);
    expect(saved).toEqual([2]);
    expect(w1.saves).toEqual(chief.saves);
    expect(w1.recorder.messages().some((l) => /^PreemptionCheckpointHandler: saveFn ran at run \d+\. Exiting\.$/.test(l))).toBe(true);
    await c.close();
    const session = model();
    await expect(
      PreemptionCheckpointHandler.create({ store: session.variables, restoreOnCreate: false, signalTarget: new EventEmitter() }),
    ).rejects.toThrow(/needs a checkpointManager or a checkpointDir \(or, for a handler that only agrees on the run, a terminationConfig with a saveFn and restoreOnCreate: false\)/);
  });

  it("reportErrors: false: an OpError of this task's step is not reported; the others train on", async () => {
    const c = await cluster({ handlerOptions: (id) => (id === 2 ? { reportErrors: false } : {}) });
    const [chief, w0, w1] = c.tasks as [Task, Task, Task];
    await expect(w1.handler.run(() => Promise.reject(new ResourceExhaustedError("out of memory on worker:1")))).rejects.toThrow(ResourceExhaustedError);
    await Promise.all([chief.train(5), w0.train(5)]);
    expect([chief.error, w0.error]).toEqual([undefined, undefined]);
    expect([chief.runs, w0.runs]).toEqual([5, 5]);
    await c.close();
  });
});

describe('PreemptionCheckpointHandler in a cluster, agreement "chiefSaves" (tasks that share no step: only the chief saves)', () => {
  const chiefSaves = (): Partial<PreemptionCheckpointHandlerOptions> => ({ agreement: "chiefSaves" });
  /** The chief's line that its save is stored, as a worker logs it when it exits. */
  const storedLine = /the chief's preemption save is done \(at its run (\d+)\): worker:\d exits with the preemption code without saving/;

  for (const victim of [0, 1, 2]) {
    it(`SIGTERM to ${NAMES[victim]}, the tasks far apart: the chief saves once at its own next boundary (not held to the fastest task's count), the workers exit 42 without saving once it is stored`, async () => {
      const c = await cluster({ handlerOptions: chiefSaves });
      const [chief, w0, w1] = c.tasks as [Task, Task, Task];
      // worker:1 trains far ahead alone: an agreed run would hold the chief until run 40.
      await w1.train(40);
      await trainAll(c.tasks, 1000, (t) => {
        if (t === c.tasks[victim] && t.handler.totalRunCalls === (victim === 2 ? 41 : 5)) t.signals.emit("SIGTERM");
      });
      expect(c.tasks.map((t) => t.exit)).toEqual([42, 42, 42]);
      expect(chief.saves).toHaveLength(1);
      expect(chief.saves[0]).toBeLessThan(40);
      expect([w0.saves, w1.saves]).toEqual([[], []]);
      expect(await checkpointsIn(c.dir)).toHaveLength(1);
      expect((await readdir(dirname(c.dir))).filter((f) => f.startsWith("workertemp_"))).toEqual([]);
      for (const w of [w0, w1]) {
        const line = w.recorder.messages().map((l) => storedLine.exec(l)).find((m) => m !== null);
        expect(Number(line?.[1]), w.name).toBe(chief.saves[0]);
        expect(w.events.at(-1)).toMatchObject({ type: "preemptionExiting", code: 42, saved: false });
        // A normal exit of a task the chief saves for: no error line.
        expect(w.recorder.messages("error")).toEqual([]);
      }
      expect(chief.events.at(-1)).toMatchObject({ type: "preemptionExiting", code: 42, saved: true });
      // Every worker's acknowledgement was stored before it exited: the chief neither warns nor waits.
      expect(chief.recorder.messages().filter((l) => l.includes("did not acknowledge"))).toEqual([]);
      if (victim !== 0) expect(chief.events.find((e) => e.type === "preemptionClaimHeard")).toMatchObject({ claimant: NAMES[victim] });
      // The noticed task's line says what this agreement does (no agreed run).
      const noticed = c.tasks[victim] as Task;
      expect(noticed.recorder.messages().find((l) => l.includes("termination notice (SIGTERM)"))).toMatch(
        victim === 0
          ? /on chief:0; every task stops at its next step boundary, and the chief saves there\.$/
          : new RegExp(`on ${NAMES[victim]}; every task stops at its next step boundary; this one exits once the chief's save is done\\.$`),
      );
      await c.close();
    });
  }

  it("the chief lost (its heartbeats stop), then SIGTERM to a worker: every worker exits 43 without saving, and nothing is saved", async () => {
    const c = await cluster({ handlerOptions: chiefSaves });
    const [chief, w0, w1] = c.tasks as [Task, Task, Task];
    await Promise.all([chief.train(5), w0.train(5), w1.train(5)]);
    await c.clients[0]?.close();
    w0.signals.emit("SIGTERM");
    const training = Promise.all([w0.train(1000), w1.train(1000)]);
    for (let i = 0; i < 15 && (w0.exit === undefined || w1.exit === undefined); i++) await c.clock.advanceSecs(1);
    await training;
    expect([w0.exit, w1.exit]).toEqual([CHIEF_LOST_EXIT_CODE, CHIEF_LOST_EXIT_CODE]);
    expect([chief.saves, w0.saves, w1.saves]).toEqual([[], [], []]);
    expect(w0.events.at(-1)).toMatchObject({ type: "preemptionExiting", code: 43, saved: false });
    expect(w0.recorder.messages().some((l) => l.includes("the chief was lost before worker:0 heard that its preemption save was done"))).toBe(true);
    await c.close();
  });

  it("a worker lost while the tasks stop: the chief saves at its boundary and exits 42, the other worker exits 42 without saving", async () => {
    const c = await cluster({ handlerOptions: chiefSaves });
    const [chief, w0, w1] = c.tasks as [Task, Task, Task];
    await Promise.all([chief.train(5), w0.train(5), w1.train(5)]);
    await c.clients[2]?.close();
    w0.signals.emit("SIGTERM");
    const training = Promise.all([chief.train(1000), w0.train(1000)]);
    for (let i = 0; i < 15 && (chief.exit === undefined || w0.exit === undefined); i++) await c.clock.advanceSecs(1);
    await training;
    expect([chief.exit, w0.exit]).toEqual([42, 42]);
    expect(chief.saves).toHaveLength(1);
    expect(w0.saves).toEqual([]);
    expect(await checkpointsIn(c.dir)).toHaveLength(1);
    await c.close();
  });

  it("the chief finished before the notice: a worker's SIGTERM ends it with 42 at once, saying the restart resumes from the chief's last checkpoint", async () => {
    const c = await cluster({ handlerOptions: chiefSaves });
    const [chief, w0, w1] = c.tasks as [Task, Task, Task];
    await Promise.all([chief.train(5), w0.train(5), w1.train(5)]);
    await chief.handler.close();
    w0.signals.emit("SIGTERM");
    await Promise.all([w0.train(1000), w1.train(1000)]);
    expect([w0.exit, w1.exit]).toEqual([42, 42]);
    expect(w0.recorder.messages().some((l) => l.includes("the chief left the cluster without a preemption save (its training ended)"))).toBe(true);
    await c.close();
  });

  it("a grace period: the chief saves at once, trains on, saves last near the end; the workers wait for that last save, then exit 42", async () => {
    const c = await cluster({ graceSecs: 10, handlerOptions: chiefSaves });
    const [chief, w0, w1] = c.tasks as [Task, Task, Task];
    await trainAll(c.tasks, 10_000, (t) => {
      if (t === chief) c.clock.set(c.clock.now() + 100);
      if (t === w1 && t.handler.totalRunCalls === 5) t.signals.emit("SIGTERM");
    });
    expect(c.tasks.map((t) => t.exit)).toEqual([42, 42, 42]);
    expect(chief.saves).toHaveLength(2);
    const [first, last] = chief.saves as [number, number];
    expect(last).toBeGreaterThan(first + 10);
    const stored = w0.recorder.messages().map((l) => storedLine.exec(l)).find((m) => m !== null);
    expect(Number(stored?.[1])).toBe(last);
    expect([w0.saves, w1.saves]).toEqual([[], []]);
    await c.close();
  });

  it("a malformed stored save of the chief (another version, a corrupted key) is a one-line DataLossError naming the key", async () => {
    const c = await cluster({ handlerOptions: chiefSaves });
    const [, w0] = c.tasks as [Task, Task, Task];
    const prefix = `monitored-session/preemption/${c.clients[0]?.generation ?? 0}`;
    await c.clients[2]?.insert(`${prefix}/chief-saved`, '{"run": -3}');
    w0.signals.emit("SIGTERM");
    await w0.train(1000);
    expect(w0.error).toBeInstanceOf(DataLossError);
    expect((w0.error as Error).message).toBe(
      `PreemptionCheckpointHandler: the chief's stored preemption save at coordination key ${prefix}/chief-saved is malformed (written by another version of monitored-session, or corrupted): run: expected an integer >= 0, got -3`,
    );
    await c.close();
  });

  it("a worker in a long step acknowledges the chief's save before its step ends: the chief goes without waiting for it, and the worker still exits 42 after the chief's service is gone", async () => {
    const c = await cluster({ handlerOptions: chiefSaves });
    const [chief, w0, w1] = c.tasks as [Task, Task, Task];
    await Promise.all([chief.train(3), w0.train(3), w1.train(3)]);
    // worker:1's next step does not end until released: a long synchronous step, whose loop still turns here.
    let release: () => void = () => undefined;
    const long = new Promise<void>((r) => (release = r));
    const w1Training = w1.train(1000, () => (w1.handler.totalRunCalls === 3 ? long : Promise.resolve()));
    chief.signals.emit("SIGTERM");
    await Promise.all([chief.train(1000), w0.train(1000)]);
    expect([chief.exit, w0.exit]).toEqual([42, 42]);
    // The chief waited for nobody: worker:1 acknowledged while its step still ran.
    expect(chief.recorder.messages().filter((l) => l.includes("did not acknowledge"))).toEqual([]);
    await c.clients[0]?.close();
    release();
    await w1Training;
    expect(w1.exit).toBe(42);
    expect(w1.recorder.messages().some((l) => storedLine.test(l))).toBe(true);
    await c.close();
  });

  it("a notice reported to the cluster by a task whose handler had closed is taken as the claim: the chief's own report (its training over) ends the workers with 42 and no save, even once its service is gone", async () => {
    const c = await cluster({ handlerOptions: chiefSaves });
    const [chief, w0, w1] = c.tasks as [Task, Task, Task];
    await Promise.all([chief.train(3), w0.train(3), w1.train(3)]);
    await chief.handler.close();
    await c.clients[0]?.reportErrorToCluster(
      new CancelledError("cluster preemption: task chief:0 got a termination notice (SIGTERM)", { failure: { kind: "preemption", reporter: "chief:0", notice: "SIGTERM" } }),
    );
    await Promise.all([w0.train(1000), w1.train(1000)]);
    expect([w0.exit, w1.exit], w0.recorder.messages().join("\n")).toEqual([42, 42]);
    for (const w of [w0, w1]) {
      expect(w.recorder.messages().some((l) => l.includes("the chief got a termination notice after its training ended (reported to the cluster): no preemption save"))).toBe(true);
      expect(w.recorder.messages("error")).toEqual([]);
    }
    await c.close();
  });

  it("a cluster that fails before the claim reaches the service: nobody stops for it, and the failure stands on every task (not a 42 with nothing saved)", async () => {
    const c = await cluster({ handlerOptions: chiefSaves, heartbeatTimeoutMs: 3_000 });
    const [chief, w0, w1] = c.tasks as [Task, Task, Task];
    await Promise.all([chief.train(3), w0.train(3), w1.train(3)]);
    // worker:1 is lost, and declared failed before worker:0's notice.
    await c.clients[2]?.close();
    await c.clock.advanceSecs(5);
    w0.signals.emit("SIGTERM");
    await Promise.all([chief.train(1000), w0.train(1000)]);
    expect([chief.exit, w0.exit]).toEqual([undefined, undefined]);
    for (const t of [chief, w0]) {
      expect(t.error, t.name).toBeInstanceOf(UnavailableError);
      expect((t.error as Error).message).toContain(TASKS[2] as string);
    }
    expect(chief.saves).toEqual([]);
    await c.close();
  });

  it("the chief's own notice with a deadline, after another task's claim, ends its grace period by that deadline", async () => {
    const c = await cluster({ graceSecs: 60, handlerOptions: chiefSaves });
    const [chief, w0] = c.tasks as [Task, Task, Task];
    let deadline = 0;
    await trainAll(c.tasks, 10_000, (t) => {
      if (t === chief) c.clock.set(c.clock.now() + 100);
      if (t === w0 && t.handler.totalRunCalls === 5) t.signals.emit("SIGTERM");
      if (t === chief && t.handler.totalRunCalls === 20 && deadline === 0) {
        deadline = c.clock.now() + 3_000;
        t.handler.noticeTermination("a platform's notice", { deadlineMs: deadline });
      }
    });
    expect(chief.saves).toHaveLength(2);
    const last = chief.events.filter((e) => e.type === "preemptionCheckpointSaved").at(-1) as { time: number };
    // By the deadline, not the 60 s grace period: at the first boundary past the countdown's target
    // (the deadline less 6 mean run times; the harness's 100 ms per step pass outside run(), so the
    // mean is 0 and the save is at most one step past it).
    expect(last.time - deadline).toBeLessThanOrEqual(100);
    expect(c.tasks.map((t) => t.exit)).toEqual([42, 42, 42]);
    await c.close();
  });

  it('is refused beside a data-parallel group\'s stop vote, in one line, before anything is opened', async () => {
    const vote = { requestStop: () => undefined, stopAgreed: false, votes: true };
    const dir = join(tempDir(), "ckpt");
    const resolver: PreemptionClusterResolver = {
      clusterSpec: { jobs: ["chief", "worker"] },
      taskType: "chief",
      taskIndex: 0,
      isChief: true,
      numWorkers: 2,
      idInCluster: 0,
      coordination: { generation: 1, insert: () => Promise.resolve(), get: () => new Promise(() => undefined), reportErrorToCluster: () => Promise.resolve() },
      replicaStop: vote,
    };
    await expect(PreemptionCheckpointHandler.create({ clusterResolver: resolver, checkpointDir: dir, store: model().variables, agreement: "chiefSaves" })).rejects.toThrow(
      new ValueError('PreemptionCheckpointHandler: agreement "chiefSaves" is for tasks that share no step; a data-parallel group stops through its stop vote (leave agreement out)'),
    );
    expect(existsSync(dir)).toBe(false);
  });
});
