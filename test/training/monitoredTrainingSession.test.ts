import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { CheckpointSaverHook } from "../../hooks/CheckpointSaverHook.js";
import { StepCounterHook } from "../../hooks/StepCounterHook.js";
import { SummarySaverHook } from "../../hooks/SummarySaverHook.js";
import { CheckpointDirInUseError, CheckpointManager, getCheckpointState, type RetentionPolicy } from "../../src/checkpoint/index.js";
import { DeadlineExceededError, UnavailableError, ValueError } from "../../src/errors.js";
import { Graph } from "../../src/session/Graph.js";
import { silentLogger } from "../../src/Logger.js";
import { withSession } from "../../src/pipeline/MonitoredSession.js";
import { monitoredTrainingSession, resolveCadences, type CheckpointingOptions, type SummaryOptions } from "../../src/training/monitoredTrainingSession.js";
import type { SessionEvent } from "../../src/events/SessionEvent.js";
import { defaultSessionTargets } from "../../src/pipeline/SessionTarget.js";
import { USE_DEFAULT } from "../../src/util/useDefault.js";
import { EventRecorder, FakeSession, HookRecorder, RecordingLogger, VirtualClock } from "../../src/testing/index.js";
import { fakeTask } from "../util/fakeTask.js";
import { computeGoodput, readGoodputLogs } from "../../src/index.js";
import { useTempDirs } from "../util/tempDirs.js";
import { eventFiles, readEvents } from "../summary/decoder.js";

const tempDir = useTempDirs("mts-test-");

const model = () => {
  const g = new Graph();
  const step = g.globalStep();
  g.op("train", (ctx) => ctx.assignAdd(step, 1));
  g.op("my_summary", () => 3.5);
  return g;
};

/** A graph whose `w` starts at `initial` and grows by 1 a step. */
const counter = (initial: number) => {
  const g = new Graph();
  const step = g.globalStep();
  const w = g.variable("w", initial);
  g.op("train", (ctx) => {
    ctx.assign(w, ctx.read(w) + 1);
    return ctx.assignAdd(step, 1);
  });
  return g;
};

const train = (n: number) => async (sess: { run(f: string): Promise<unknown> }) => {
  for (let i = 0; i < n; i++) await sess.run("train");
};

const tagsIn = (dir: string): string[] =>
  [...new Set(eventFiles(dir).flatMap(readEvents).flatMap((e) => e.summary?.value?.map((v) => v.tag as string) ?? []))].sort();

describe("monitoredTrainingSession", () => {
  it("takes its settings as the named groups a caller keeps apart (flat names at the call: spread)", async () => {
    const dir = tempDir();
    const checkpointing: CheckpointingOptions = { checkpointDir: dir, saveCheckpointSteps: 2, maxToKeep: 1 };
    const summaries: SummaryOptions = { saveSummariesSteps: null, logStepCountSteps: null };
    await withSession(monitoredTrainingSession({ graph: model(), logger: silentLogger, clock: new VirtualClock(), ...checkpointing, ...summaries }), train(5));
    // Saves at steps 0, 2, 4 and the end (5); one kept.
    expect((await getCheckpointState(dir))?.allModelCheckpointPaths.map((p) => p.split("-").pop())).toEqual(["5"]);
    // No summaries and no step rate: no tag in the event files (the saver's checkpoint records only).
    expect(tagsIn(dir)).toEqual([]);
  });

  it("resolves cadences as TensorFlow does", () => {
    expect(resolveCadences({})).toEqual({
      saveCheckpointSecs: 600,
      saveCheckpointSteps: undefined,
      saveSummariesSecs: undefined,
      saveSummariesSteps: 100,
      logStepCountSteps: 100,
      logStepCountSecs: undefined,
    });
    // Our seconds form of the step rate (a configuration file's default): the steps default gives way.
    expect(resolveCadences({ logStepCountSecs: 10 })).toMatchObject({ logStepCountSteps: undefined, logStepCountSecs: 10 });
    expect(resolveCadences({ logStepCountSecs: 0 })).toMatchObject({ logStepCountSteps: undefined, logStepCountSecs: undefined });
    expect(() => resolveCadences({ logStepCountSecs: 10, logStepCountSteps: 100 })).toThrow(
      new ValueError("give only one of logStepCountSecs and logStepCountSteps (got 10 and 100)"),
    );
    expect(resolveCadences({ saveCheckpointSteps: 10, saveSummariesSecs: 30 })).toMatchObject({
      saveCheckpointSecs: undefined,
      saveCheckpointSteps: 10,
      saveSummariesSecs: 30,
      saveSummariesSteps: undefined,
    });
    expect(resolveCadences({ saveCheckpointSecs: 0, saveSummariesSteps: null, logStepCountSteps: 0 })).toMatchObject({
      saveCheckpointSecs: undefined,
      saveCheckpointSteps: undefined,
      saveSummariesSteps: undefined,
      logStepCountSteps: undefined,
    });
    expect(resolveCadences({ saveCheckpointSecs: USE_DEFAULT, saveCheckpointSteps: USE_DEFAULT }).saveCheckpointSecs).toBe(600);
    expect(() => resolveCadences({ saveCheckpointSecs: 60, saveCheckpointSteps: 100 })).toThrow(
      new ValueError("give only one of saveCheckpointSecs and saveCheckpointSteps (got 60 and 100)"),
    );
    expect(() => resolveCadences({ saveSummariesSteps: 100, saveSummariesSecs: 0 })).toThrow(/saveSummariesSecs and saveSummariesSteps/);
    expect(() => resolveCadences({ saveSummariesSteps: -1 })).toThrow(/saveSummariesSteps must be a number >= 0/);
  });

  it("MonitoredTrainingSessionTest: on the chief, hooks are chief-only, step counter, summary, checkpoint, then user hooks", async () => {
    const log: string[] = [];
    const dir = tempDir();
    const sess = await monitoredTrainingSession({
      graph: model(),
      checkpointDir: dir,
      chiefOnlyHooks: [new HookRecorder("chiefOnly", { log })],
      hooks: [new HookRecorder("user", { log })],
      clock: new VirtualClock(),
      logger: silentLogger,
    });
    const hooks = (sess as unknown as { hooks: readonly object[] }).hooks;
    expect(hooks.map((h) => h.constructor.name)).toEqual(["HookRecorder", "StepCounterHook", "SummarySaverHook", "CheckpointSaverHook", "HookRecorder"]);
    expect(hooks[1]).toBeInstanceOf(StepCounterHook);
    expect(hooks[2]).toBeInstanceOf(SummarySaverHook);
    expect(hooks[3]).toBeInstanceOf(CheckpointSaverHook);
    expect(log.slice(0, 2)).toEqual(["chiefOnly.begin", "user.begin"]);
    await sess.close();
  });

  it("MonitoredTrainingSessionTest: a worker gets no default hooks and ignores chief-only hooks", async () => {
    const chiefOnly = new HookRecorder("chiefOnly");
    const user = new HookRecorder("user");
    const sess = await monitoredTrainingSession({
      isChief: false,
      sessionFactory: () => new FakeSession(),
      checkpointDir: tempDir(),
      chiefOnlyHooks: [chiefOnly],
      hooks: [user],
      logger: silentLogger,
    });
    expect((sess as unknown as { hooks: readonly object[] }).hooks).toEqual([user]);
    expect(chiefOnly.counts.begin).toBe(0);
    await sess.close();
  });

  it("MonitoredTrainingSessionTest.test_saving_restoring_checkpoint: a restart resumes at global step 2", async () => {
    const dir = tempDir();
    const opts = { checkpointDir: dir, clock: new VirtualClock(), logger: silentLogger };
    await withSession(monitoredTrainingSession({ ...opts, graph: model() }), train(2));
    const step = await withSession(monitoredTrainingSession({ ...opts, graph: model() }), (s) => s.run("global_step"));
    expect(step).toBe(2);
  });

  it("goodput: true (not in TensorFlow): the chief appends its goodput log beside the checkpoints, a process per session, ready at its restored step, ended at close; without it, none", async () => {
    const dir = tempDir();
    const clock = new VirtualClock();
    const opts = { checkpointDir: dir, saveCheckpointSteps: 2, clock, logger: silentLogger, goodput: true };
    await withSession(monitoredTrainingSession({ ...opts, graph: model() }), train(4));
    await withSession(monitoredTrainingSession({ ...opts, graph: model() }), train(2));
    const records = readGoodputLogs(dir)[0]?.records ?? [];
    expect(readGoodputLogs(dir).map((l) => l.task)).toEqual(["local"]);
    expect(records.filter((r) => r.type === "start")).toHaveLength(2);
    expect(records.filter((r) => r.type === "ready").map((r) => r.type === "ready" && r.step)).toEqual([0, 4]);
    expect(records.filter((r) => r.type === "end").map((r) => r.type === "end" && r.exitCode)).toEqual([null, null]);
    // The saves (steps 0, 2, 4, then 4 and 6) are their blocking part and marks of their steps.
    expect(records.filter((r) => r.type === "mark").map((r) => r.type === "mark" && r.step)).toEqual([0, 2, 4, 4, 6]);
    expect(records.filter((r) => r.type === "phase" && r.bucket === "checkpointSave")).toHaveLength(5);
    const run = computeGoodput(readGoodputLogs(dir));
    expect(run.tasks[0]).toMatchObject({ task: "local", chief: true, processes: 2, lastStep: 6 });
    // Without the option: no goodput folder.
    const plain = tempDir();
    await withSession(monitoredTrainingSession({ ...opts, checkpointDir: plain, goodput: false, graph: model() }), train(1));
    expect(readdirSync(plain)).not.toContain("goodput");
  });

  it("goodput: true on a worker writes only into a log directory that is there (the chief's), never making it; it names the task", async () => {
    const missing = join(tempDir(), "not-made");
    const worker = await monitoredTrainingSession({ isChief: false, sessionFactory: () => new FakeSession(), checkpointDir: missing, logger: silentLogger, goodput: true });
    await worker.close();
    expect(existsSync(missing)).toBe(false);
    const shared = tempDir();
    const task = { ...fakeTask({ isChief: false, log: [] }), name: "worker:1" };
    const w = await monitoredTrainingSession({ task, sessionFactory: () => new FakeSession(), checkpointDir: shared, logger: silentLogger, goodput: true });
    await w.close();
    expect(readGoodputLogs(shared).map((l) => [l.task, l.records.map((r) => r.type)])).toEqual([["worker:1", ["start", "ready", "end"]]]);
  });

  it("goodput: true where the goodput log cannot be opened (goodput/ is a regular file): one warning naming why, and training goes on without it", async () => {
    const dir = tempDir();
    const inTheWay = join(dir, "goodput");
    writeFileSync(inTheWay, "not a folder\n");
    // The log is opened before the session exists: its warning is a line and a `warning` event
    // of the session from its creation on, printed once by the session's log observer.
    const logger = new RecordingLogger();
    const events = new EventRecorder();
    await withSession(monitoredTrainingSession({ graph: model(), checkpointDir: dir, saveCheckpointSteps: 2, clock: new VirtualClock(), logger, goodput: true, observer: events.listener }), train(3));
    const expected = `No goodput log for this session: EEXIST: file already exists, mkdir '${inTheWay}'`;
    expect(events.lines("warn").filter((e) => e.source === "goodput").map((e) => e.message)).toEqual([expected]);
    expect(events.ofType("warning")).toEqual([expect.objectContaining({ message: expected, error: expect.objectContaining({ code: "EEXIST" }) })]);
    expect(logger.messages("warn").filter((m) => m.startsWith("No goodput log for this session: "))).toEqual([expected]);
    expect(readFileSync(inTheWay, "utf8")).toBe("not a folder\n");
    expect((await getCheckpointState(dir))?.modelCheckpointPath).toBe(join(dir, "model.ckpt-3"));
  });

  it("a task that names a goodput directory (launch --chaos, for its report) gets its log there, whatever the options say", async () => {
    const chaosLogs = tempDir();
    const ckpt = tempDir();
    const chief = { ...fakeTask({ isChief: true, log: [] }), name: "chief:0", goodputDir: chaosLogs };
    await withSession(monitoredTrainingSession({ task: chief, graph: model(), checkpointDir: ckpt, clock: new VirtualClock(), logger: silentLogger }), train(2));
    const worker = { ...fakeTask({ isChief: false, log: [] }), name: "worker:0", goodputDir: chaosLogs };
    const w = await monitoredTrainingSession({ task: worker, sessionFactory: () => new FakeSession(), logger: silentLogger, goodput: false });
    await w.close();
    expect(readGoodputLogs(chaosLogs).map((l) => [l.task, l.records.filter((r) => r.type === "start" || r.type === "end").map((r) => r.type)])).toEqual([
      ["chief:0", ["start", "end"]],
      ["worker:0", ["start", "end"]],
    ]);
    // Not beside the checkpoints: the task's directory wins.
    expect(readdirSync(ckpt)).not.toContain("goodput");
  });

  it("sessionCreated events say which checkpoint a session was restored from", async () => {
    const dir = tempDir();
    const seen: (string | null)[] = [];
    const observer = { next: (e: SessionEvent) => void (e.type === "sessionCreated" && seen.push(e.restoredFrom)) };
    const opts = { checkpointDir: dir, observer, clock: new VirtualClock(), logger: silentLogger };
    await withSession(monitoredTrainingSession({ ...opts, graph: model() }), train(3));
    await withSession(monitoredTrainingSession({ ...opts, graph: model() }), train(1));
    expect(seen).toEqual([null, join(dir, "model.ckpt-3")]);
  });

  it("MonitoredTrainingSessionTest.test_save_checkpoint_steps: saveCheckpointSteps 100 over 100 runs, a restart sees 100", async () => {
    const dir = tempDir();
    const opts = { checkpointDir: dir, saveCheckpointSteps: 100, clock: new VirtualClock(), logger: silentLogger };
    await withSession(monitoredTrainingSession({ ...opts, graph: model() }), train(100));
    const step = await withSession(monitoredTrainingSession({ ...opts, graph: model() }), (s) => s.run("global_step"));
    expect(step).toBe(100);
  });

  it("MonitoredTrainingSessionTest.test_save_checkpoint_secs: a save after the interval, a restart sees 11", async () => {
    const dir = tempDir();
    const clock = new VirtualClock();
    const opts = { checkpointDir: dir, saveCheckpointSecs: 0.1, clock, logger: silentLogger };
    await withSession(monitoredTrainingSession({ ...opts, graph: model() }), async (sess) => {
      await sess.run("train");
      await clock.advance(200);
      for (let i = 0; i < 10; i++) await sess.run("train");
    });
    const step = await withSession(monitoredTrainingSession({ ...opts, graph: model() }), (s) => s.run("global_step"));
    expect(step).toBe(11);
  });

  it("MonitoredTrainingSessionTest.test_summaries_steps: the summary op's tag and global_step/sec appear", async () => {
    const dir = tempDir();
    const clock = new VirtualClock();
    await withSession(
      monitoredTrainingSession({
        graph: model(),
        checkpointDir: dir,
        saveSummariesSteps: 100,
        logStepCountSteps: 10,
        clock,
        logger: silentLogger,
        chiefOnlyHooks: [new SummarySaverHook({ saveSteps: 100, outputDir: dir, summaryOp: ["my_summary"] })],
      }),
      async (sess) => {
        for (let i = 0; i < 101; i++) {
          await sess.run("train");
          await clock.advance(10);
        }
      },
    );
    expect(tagsIn(dir)).toEqual(expect.arrayContaining(["global_step/sec", "my_summary"]));
  });

  it("logStepCountSecs (ours, a configuration's default): the chief's step counter measures every N seconds, whatever the step speed", async () => {
    const dir = tempDir();
    const clock = new VirtualClock();
    const events = new EventRecorder();
    await withSession(
      monitoredTrainingSession({ graph: model(), checkpointDir: dir, saveCheckpointSecs: 0, saveSummariesSteps: null, logStepCountSecs: 10, clock, logger: silentLogger, observer: events.listener }),
      async (sess) => {
        // A fast job: 1,000 steps a second, for 25 seconds.
        for (let i = 0; i < 25_000; i++) {
          await sess.run("train");
          if (i % 1000 === 999) await clock.advance(1000);
        }
      },
    );
    // Anchored at the first run, then a rate over 10 seconds each time (100 steps would span 0.1 s).
    expect(events.messages("info").filter((m) => m.startsWith("global_step/sec"))).toEqual(["global_step/sec: 1000", "global_step/sec: 1000"]);
    expect(events.ofType("stepRate").map((e) => e.stepsPerSec)).toEqual([1000, 1000]);
  });

  it("MonitoredTrainingSessionTest.test_custom_saving: saveCheckpointSecs 0 writes no checkpoint; a chief-only hook begins once", async () => {
    const dir = tempDir();
    const custom = new HookRecorder("custom");
    await withSession(
      monitoredTrainingSession({ graph: model(), checkpointDir: dir, saveCheckpointSecs: 0, chiefOnlyHooks: [custom], clock: new VirtualClock(), logger: silentLogger }),
      train(3),
    );
    expect(custom.counts.begin).toBe(1);
    expect(readdirSync(dir).filter((f) => f.includes("model.ckpt"))).toEqual([]);
  });

  describe("task: the task object of startTask() in place of master, sessionTargets and isChief", () => {
    const quiet = { saveSummariesSteps: null, logStepCountSteps: null, clock: new VirtualClock({ autoAdvance: true }), logger: silentLogger } as const;

    it("the chief: the target's model hooks, the task's hooks, the defaults and the user's run in that order; the start barrier is passed once, after every hook saw the first session", async () => {
      const log: string[] = [];
      const task = fakeTask({ isChief: true, log });
      const dir = tempDir();
      const sess = await monitoredTrainingSession({ ...quiet, task, graph: counter(0), checkpointDir: dir, saveCheckpointSteps: 1, hooks: [new HookRecorder("user", { log })] });
      const names = (sess as unknown as { hooks: readonly { name?: string; constructor: { name: string } }[] }).hooks.map((h) => h.name ?? h.constructor.name);
      expect(names).toEqual(["publisher", "task", "CheckpointSaverHook", "user", "SessionsCreated"]);
      expect(log.filter((l) => !l.endsWith(".begin"))).toEqual(["publisher.afterCreateSession", "task.afterCreateSession", "user.afterCreateSession", "sessionsCreated"]);
      await sess.run("train");
      await sess.close();
      // The chief saved: the task's isChief was used.
      expect(readdirSync(dir).filter((f) => f.endsWith(".index")).sort()).toEqual(["model.ckpt-0.index", "model.ckpt-1.index"]);
    });

    it("a worker: the task's hooks, then the user's; it starts from the chief's values through the task's target; a re-created session does not pass the start barrier again", async () => {
      const log: string[] = [];
      // The task's hook stands for the chief recovery: its second beforeRun finds the chief lost.
      const task = fakeTask({ isChief: false, log, chiefGraph: () => counter(7), chiefSteps: 3, hook: { throwIn: { method: "beforeRun", at: 2, error: new UnavailableError("lost the chief") } } });
      const dir = tempDir();
      const sess = await monitoredTrainingSession({ ...quiet, task, graph: counter(-1), checkpointDir: dir, hooks: [new HookRecorder("user", { log })], recoveryWaitSecs: 1 });
      expect(log.filter((l) => l.endsWith(".afterCreateSession") || l === "sessionsCreated")).toEqual(["task.afterCreateSession", "user.afterCreateSession", "sessionsCreated"]);
      expect(await sess.run(["global_step", "w"])).toEqual([3, 10]);
      // The recovery: a new session, from the chief's values again; the barrier is not passed again.
      expect(await sess.run(["global_step", "w"])).toEqual([3, 10]);
      expect(task.pulls()).toBe(2);
      expect(log.filter((l) => l.endsWith(".afterCreateSession") || l === "sessionsCreated")).toEqual([
        "task.afterCreateSession",
        "user.afterCreateSession",
        "sessionsCreated",
        "task.afterCreateSession",
        "user.afterCreateSession",
      ]);
      await sess.close();
      // A worker writes nothing under its checkpointDir.
      expect(readdirSync(dir)).toEqual([]);
    });

    it("master, sessionTargets or isChief given too, with another value, is a ValueError naming both options; the same values are accepted", async () => {
      const task = fakeTask({ isChief: true, log: [] });
      const opts = { ...quiet, task, graph: counter(0), saveCheckpointSecs: null };
      await expect(monitoredTrainingSession({ ...opts, master: "grpc://127.0.0.1:1" })).rejects.toThrow(
        new ValueError('give either task or master, not both: master is "grpc://127.0.0.1:1", the task\'s is "fake://task0" (task sets master, sessionTargets and isChief)'),
      );
      await expect(monitoredTrainingSession({ ...opts, isChief: false })).rejects.toThrow(
        new ValueError("give either task or isChief, not both: isChief is false, the task's is true (task sets master, sessionTargets and isChief)"),
      );
      await expect(monitoredTrainingSession({ ...opts, sessionTargets: defaultSessionTargets })).rejects.toThrow(
        new ValueError("give either task or sessionTargets, not both: sessionTargets is another registry than the task's (task sets master, sessionTargets and isChief)"),
      );
      const same = await monitoredTrainingSession({ ...opts, master: task.master, sessionTargets: task.sessionTargets, isChief: true });
      await same.close();
    });

    it("a start barrier that fails fails the creation, and the chief's checkpoint directory is released", async () => {
      const dir = tempDir();
      const failing = fakeTask({ isChief: true, log: [], barrier: () => Promise.reject(new DeadlineExceededError("barrier timed out: stragglers: worker:0")) });
      const opts = { ...quiet, graph: counter(0), checkpointDir: dir, saveCheckpointSteps: 1 };
      await expect(monitoredTrainingSession({ ...opts, task: failing })).rejects.toThrow(new DeadlineExceededError("barrier timed out: stragglers: worker:0"));
      expect(readdirSync(dir)).not.toContain("checkpoint.lock");
      const sess = await monitoredTrainingSession({ ...opts, graph: counter(0), task: fakeTask({ isChief: true, log: [] }) });
      await sess.close();
    });
  });

  describe("one CheckpointManager per checkpoint directory", () => {
    it("a second session on a directory in use fails naming this process, until the first closes", async () => {
      const dir = tempDir();
      const opts = { checkpointDir: dir, saveCheckpointSteps: 1, clock: new VirtualClock(), logger: silentLogger };
      const first = await monitoredTrainingSession({ ...opts, graph: model() });
      const second = monitoredTrainingSession({ ...opts, graph: model() });
      await expect(second).rejects.toThrow(CheckpointDirInUseError);
      await expect(second).rejects.toThrow(new RegExp(`^${dir} is in use by pid ${process.pid} .*\\(this process: hand the owner's CheckpointManager`));
      await first.run("train");
      await first.close();
      expect(readdirSync(dir)).not.toContain("checkpoint.lock");
      expect(await withSession(monitoredTrainingSession({ ...opts, graph: model() }), (s) => s.run("global_step"))).toBe(1);
    });

    it("a session that ends with an error (hooks' end does not run) still releases the directory it locked", async () => {
      const dir = tempDir();
      const g = model();
      g.op("boom", () => {
        throw new Error("kernel failed");
      });
      const opts = { checkpointDir: dir, saveCheckpointSteps: 1, clock: new VirtualClock(), logger: silentLogger };
      await expect(withSession(monitoredTrainingSession({ ...opts, graph: g }), (s) => s.run("boom"))).rejects.toThrow("kernel failed");
      expect(readdirSync(dir)).not.toContain("checkpoint.lock");
      // The same process can open the directory again at once.
      expect(await withSession(monitoredTrainingSession({ ...opts, graph: model() }), (s) => s.run("global_step"))).toBe(0);
    });

    it("keepCheckpointEveryNHours and retentionPolicy reach the directory's manager; beside each other or a checkpointManager they are ValueErrors", async () => {
      const dir = tempDir();
      const clock = new VirtualClock();
      const firstTwo: RetentionPolicy = (cps) => ({ keep: cps.filter((c) => (c.checkpointNumber ?? 0) <= 2).map((c) => c.path) });
      await withSession(monitoredTrainingSession({ checkpointDir: dir, saveCheckpointSteps: 1, clock, logger: silentLogger, graph: model(), retentionPolicy: firstTwo }), train(5));
      // Steps 0..5 saved; the policy keeps 0, 1, 2 and the newest.
      expect(readdirSync(dir).filter((f) => f.endsWith(".index")).sort()).toEqual(["model.ckpt-0.index", "model.ckpt-1.index", "model.ckpt-2.index", "model.ckpt-5.index"]);
      const hourly = tempDir();
      const stepThenHour = async (s: { run: (f: string) => Promise<unknown> }): Promise<void> => {
        for (let i = 0; i < 4; i++) {
          await clock.advanceSecs(3600);
          await s.run("train");
        }
      };
      await withSession(monitoredTrainingSession({ checkpointDir: hourly, saveCheckpointSteps: 1, clock, logger: silentLogger, graph: model(), maxToKeep: 1, keepCheckpointEveryNHours: 1 }), stepThenHour);
      // Step 0's save (at creation) is within the hour of the manager's start, and is deleted;
      // each later one is an hour past the last preserved, and stays when maxToKeep lets it go.
      expect(readdirSync(hourly).filter((f) => f.endsWith(".index")).sort()).toEqual(["model.ckpt-1.index", "model.ckpt-2.index", "model.ckpt-3.index", "model.ckpt-4.index"]);
      await expect(monitoredTrainingSession({ checkpointDir: tempDir(), graph: model(), maxToKeep: 2, retentionPolicy: firstTwo })).rejects.toThrow(
        "monitoredTrainingSession: give retentionPolicy or maxToKeep and keepCheckpointEveryNHours, not both",
      );
      const manager = await CheckpointManager.create({ directory: tempDir(), checkpointName: "model.ckpt", clock, logger: silentLogger });
      await expect(monitoredTrainingSession({ checkpointManager: manager, graph: model(), maxToKeep: 2 })).rejects.toThrow("monitoredTrainingSession: the checkpointManager's retention applies");
      await manager.close();
    });

    it("sessions handed the owner's manager share it: one retention state, one writer of the state file", async () => {
      const dir = tempDir();
      const clock = new VirtualClock();
      const manager = await CheckpointManager.create({ directory: dir, checkpointName: "model.ckpt", maxToKeep: 2, clock, logger: silentLogger });
      const opts = { checkpointManager: manager, saveCheckpointSteps: 1, clock, logger: silentLogger };
      await withSession(monitoredTrainingSession({ ...opts, graph: model() }), train(2));
      await withSession(monitoredTrainingSession({ ...opts, graph: model() }), train(2));
      // The second session restored step 2 through the manager and saved 3 and 4; retention spans both sessions.
      expect(manager.lastRestored).toBe(join(dir, "model.ckpt-2"));
      expect(manager.checkpoints).toEqual([join(dir, "model.ckpt-3"), join(dir, "model.ckpt-4")]);
      expect(readdirSync(dir).filter((f) => f.endsWith(".index")).sort()).toEqual(["model.ckpt-3.index", "model.ckpt-4.index"]);
      expect(readdirSync(dir)).toContain("checkpoint.lock"); // the caller's manager still holds it
      await manager.close();
      expect(readdirSync(dir)).not.toContain("checkpoint.lock");
    });

    it("a garbage state file does not start training over: the session resumes from the newest verified checkpoint", async () => {
      const dir = tempDir();
      const opts = { checkpointDir: dir, saveCheckpointSteps: 1, clock: new VirtualClock(), logger: silentLogger };
      await withSession(monitoredTrainingSession({ ...opts, graph: model() }), train(7));
      const before = readdirSync(dir).filter((f) => f.endsWith(".index")).sort();
      expect(before).toHaveLength(5);
      writeFileSync(join(dir, "checkpoint"), "this is not a state file");
      const seen: (string | null)[] = [];
      const observer = { next: (e: SessionEvent) => void (e.type === "sessionCreated" && seen.push(e.restoredFrom)) };
      const step = await withSession(monitoredTrainingSession({ ...opts, observer, graph: model() }), (s) => s.run("global_step"));
      expect(step).toBe(7);
      expect(seen).toEqual([join(dir, "model.ckpt-7")]);
      expect((await getCheckpointState(dir))?.modelCheckpointPath).toBe(join(dir, "model.ckpt-7"));
      const corrupt = readdirSync(dir).filter((f) => f.startsWith("checkpoint.corrupt-"));
      expect(corrupt.map((f) => readFileSync(join(dir, f), "utf8"))).toEqual(["this is not a state file"]);
      expect(readdirSync(dir).filter((f) => f.endsWith(".index")).sort()).toEqual(before);
    });
  });
});

describe("monitoredTrainingSession: the checkpoint manager's lines are the session's events", () => {
  it("a corrupt latest checkpoint: the manager's warning while restoring is a log event, printed by the session's log observer", async () => {
    const dir = tempDir();
    const quiet = { checkpointDir: dir, saveCheckpointSteps: 2, saveSummariesSteps: null, logStepCountSteps: null, logger: silentLogger } as const;
    await withSession(monitoredTrainingSession({ graph: counter(0), ...quiet }), train(4));
    const data = readdirSync(dir).find((f) => f.startsWith("model.ckpt-4.data"));
    expect(data).toBeDefined();
    const path = join(dir, data as string);
    const bytes = readFileSync(path);
    bytes[0] = (bytes[0] as number) ^ 0xff;
    writeFileSync(path, bytes);

    const logger = new RecordingLogger();
    const events = new EventRecorder();
    const sess = await monitoredTrainingSession({ graph: counter(0), ...quiet, logger, observer: events.listener });
    await sess.close();
    const corrupt = /^Checkpoint \S*model\.ckpt-4 is corrupt or incomplete and was skipped; trying the previous one\./;
    // Printed by the session's log observer through its `logger` (what this test is about)...
    expect(logger.messages("warn").filter((m) => corrupt.test(m))).toHaveLength(1);
    // ...because it is a log event on events$, the manager's (its source kept).
    const logged = events.messages("warn");
    expect(logged.filter((m) => corrupt.test(m))).toHaveLength(1);
    expect(events.lines("warn").filter((e) => corrupt.test(e.message)).map((e) => e.source)).toEqual(["checkpoint"]);
    expect(logged).toContain(`Restored the previous valid checkpoint ${join(dir, "model.ckpt-2")} (step 2).`);
  });
});
