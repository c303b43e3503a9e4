import { readdirSync } from "node:fs";
import { join } from "node:path";
import { filter, firstValueFrom } from "rxjs";
import { describe, expect, it } from "vitest";
import { CheckpointDirInUseError, CheckpointManager } from "../../../src/checkpoint/index.js";
import { DeadlineExceededError, InvalidArgumentError, OutOfRangeError, RuntimeError, UnavailableError, UnknownError, ValueError } from "../../../src/errors.js";
import { Graph } from "../../../src/session/Graph.js";
import { silentLogger } from "../../../src/Logger.js";
import { encodeSummary } from "../../../src/summary/EventProto.js";
import { fileWriterCache } from "../../../src/summary/FileWriterCache.js";
import { scalarValue } from "../../../src/summary/summaryValues.js";
import { Supervisor } from "../../../src/compat/v1/Supervisor.js";
import { USE_DEFAULT } from "../../../src/util/useDefault.js";
import { EventRecorder, FakeSession, FakeSessionCreator, RecordingLogger, VirtualClock } from "../../../src/testing/index.js";
import { MonitoredSession } from "../../../src/pipeline/MonitoredSession.js";
import { fakeTask } from "../../util/fakeTask.js";
import { useTempDirs } from "../../util/tempDirs.js";
import { eventFiles, readEvents, type DecodedEvent } from "../../summary/decoder.js";

const tempDir = useTempDirs("sv-test-");

const model = () => {
  const g = new Graph();
  const step = g.globalStep();
  const w = g.variable("w", 0);
  g.op("train", (ctx) => {
    ctx.assign(w, ctx.read(w) + 1);
    return ctx.assignAdd(step, 1);
  });
  // A summary op returns a record of scalars, as SummarySaverHook's summary ops do.
  g.op("summary", (ctx) => ({ w: ctx.read(w) }));
  return g;
};

const events = (dir: string): DecodedEvent[] => eventFiles(dir).flatMap(readEvents);
const sessionLogs = (dir: string) =>
  events(dir)
    .filter((e) => e.sessionLog !== undefined)
    .map((e) => `${e.sessionLog?.status}@${e.step ?? "0"}`);

describe("Supervisor", () => {
  it("managedSession: the chief initializes, runs the standard services and stops them", async () => {
    const logdir = tempDir();
    const clock = new VirtualClock();
    const sv = new Supervisor({ graph: model(), logdir, summaryOp: "summary", saveSummariesSecs: 10, saveModelSecs: 30, clock, logger: silentLogger });
    const firstSave = firstValueFrom(sv.events$.pipe(filter((e) => e.type === "checkpointSaved")));
    const result = await sv.managedSession(async (sess) => {
      // The services' first iteration runs at once; let its checkpoint (real disk I/O) land.
      expect(await firstSave).toMatchObject({ globalStep: 0, time: expect.any(Number) as unknown as number, durationMs: expect.any(Number) as unknown as number });
      for (let i = 0; i < 3; i++) {
        await sess.run("train");
        await clock.advanceSecs(10);
      }
      return sess.run("global_step");
    });
    expect(result).toBe(3);
    expect(sv.shouldStop()).toBe(true);
    // Checkpoints: the first service iteration runs at once (step 0), then every 30 s (step 3).
    const ckpts = readdirSync(logdir).filter((f) => f.endsWith(".index")).sort();
    expect(ckpts).toEqual(["model.ckpt-0.index", "model.ckpt-3.index"]);
    expect(readdirSync(logdir)).toContain("checkpoint");
    const logs = sessionLogs(logdir);
    expect(logs[0]).toBe("START@0");
    expect(logs).toContain("CHECKPOINT@3");
    expect(logs.at(-1)).toBe("STOP@0");
    const tags = events(logdir).flatMap((e) => e.summary?.value?.map((v) => `${v.tag}@${e.step ?? "0"}`) ?? []);
    expect(tags).toEqual(expect.arrayContaining(["w@0", "w@1", "w@2", "w@3", "global_step/sec@1", "global_step/sec@3"]));
    // The step-rate service is anchored at its start: no point for the immediate first iteration (no infinite rate).
    expect(tags).not.toContain("global_step/sec@0");
  });

  it("a second chief on a logdir in use fails before it restores or writes anything, until the first stops; a shared manager is allowed", async () => {
    const logdir = tempDir();
    const opts = { logdir, saveSummariesSecs: null, saveModelSecs: 600, clock: new VirtualClock(), logger: silentLogger };
    const first = new Supervisor({ ...opts, graph: model() });
    const sess = await first.prepareOrWaitForSession();
    await sess.run("train");
    const second = new Supervisor({ ...opts, graph: model() });
    await expect(second.prepareOrWaitForSession()).rejects.toThrow(CheckpointDirInUseError);
    await first.stop();
    expect(readdirSync(logdir)).not.toContain("checkpoint.lock");
    await second.prepareOrWaitForSession();
    const restored = second.sessionManager.lastRestored; // the first chief's checkpoint
    expect(restored).toMatch(/model\.ckpt-[01]$/);
    await second.stop();

    const manager = await CheckpointManager.create({ directory: logdir, checkpointName: "model.ckpt", clock: opts.clock, logger: silentLogger });
    const shared = new Supervisor({ ...opts, graph: model(), checkpointManager: manager });
    await shared.prepareOrWaitForSession();
    expect(manager.lastRestored).toBe(restored);
    await shared.stop();
    expect(manager.holdsLock).toBe(true); // the caller's, not closed by stop()
    await manager.close();
  });

  it("a restarted chief resumes from the latest checkpoint instead of initializing", async () => {
    const logdir = tempDir();
    const clock = new VirtualClock();
    const first = new Supervisor({ graph: model(), logdir, saveModelSecs: 60, clock, logger: silentLogger });
    await first.managedSession(async (sess) => {
      for (let i = 0; i < 5; i++) await sess.run("train");
      await clock.advanceSecs(60); // the timed checkpoint at step 5
    });
    const second = new Supervisor({ graph: model(), logdir, saveModelSecs: null, clock, logger: silentLogger });
    const restored = await second.managedSession((sess) => sess.run(["global_step", "w"]));
    expect(restored).toEqual([5, 5]);
  });

  it("managed_session semantics: OutOfRange ends cleanly; another error is rethrown after the services stop", async () => {
    const clock = new VirtualClock();
    const sv = new Supervisor({ graph: model(), logdir: tempDir(), clock, logger: silentLogger });
    await expect(sv.managedSession(async () => { throw new OutOfRangeError("end of input"); })).resolves.toBeUndefined();
    expect(sv.shouldStop()).toBe(true);

    const sv2 = new Supervisor({ graph: model(), logdir: tempDir(), clock, logger: silentLogger });
    const ticks: number[] = [];
    await expect(
      sv2.managedSession(async () => {
        sv2.loop(1, () => void ticks.push(clock.now()));
        await clock.advanceSecs(2);
        throw new UnknownError("body failed");
      }),
    ).rejects.toThrow("body failed");
    const n = ticks.length;
    await clock.advanceSecs(5);
    expect(ticks.length).toBe(n); // the looper stopped with the supervisor
    expect(n).toBe(3); // at 0, 1 and 2 s
  });

  it("managedSession without a function works with await using", async () => {
    const sv = new Supervisor({ graph: model(), logdir: null, clock: new VirtualClock(), logger: silentLogger });
    {
      await using managed = await sv.managedSession();
      expect(await managed.session.run("train")).toBe(1);
    }
    expect(sv.shouldStop()).toBe(true);
  });

  it("a non-chief waits for the chief, polling every recoveryWaitSecs, and gives up after maxWaitSecs", async () => {
    const clock = new VirtualClock({ autoAdvance: true });
    const start = clock.now();
    const chiefReadyAt = start + 95_000;
    const factory = () => new FakeSession({ initialized: clock.now() >= chiefReadyAt });
    const worker = new Supervisor({ sessionFactory: factory, isChief: false, recoveryWaitSecs: 30, clock, logger: silentLogger });
    const sess = await worker.prepareOrWaitForSession();
    expect(sess.variables?.reportUninitialized()).toEqual([]);
    expect(clock.sleeps).toEqual([30_000, 30_000, 30_000, 30_000]);
    expect(worker.summaryWriter).toBeUndefined();
    expect(worker.savePath).toBeUndefined();

    const never = new Supervisor({ sessionFactory: () => new FakeSession({ initialized: false }), isChief: false, clock, logger: silentLogger });
    await expect(never.prepareOrWaitForSession({ maxWaitSecs: 100 })).rejects.toThrow(DeadlineExceededError);
  });

  it("defaults versus null: null disables the saver and the writer; USE_DEFAULT keeps them", async () => {
    const logdir = tempDir();
    const g = model();
    const sv = new Supervisor({ graph: g, logdir, saver: null, summaryWriter: null, clock: new VirtualClock(), logger: silentLogger });
    expect(sv.saver).toBeUndefined();
    expect(sv.summaryWriter).toBeUndefined();
    expect(sv.globalStep).toBe("global_step");
    expect(sv.savePath).toBe(join(logdir, "model.ckpt"));
    expect(sv.saveSummariesSecs).toBe(120);
    expect(sv.saveModelSecs).toBe(600);
    const sess = await sv.prepareOrWaitForSession();
    await expect(sv.summaryComputed(sess, [scalarValue("x", 1)])).rejects.toThrow(RuntimeError);
    await sv.stop();
    expect(readdirSync(logdir)).toEqual([]);
    const sv2 = new Supervisor({ graph: model(), logdir: tempDir(), saver: USE_DEFAULT, clock: new VirtualClock(), logger: silentLogger });
    expect(sv2.saver).toBeDefined();
    await sv2.stop();
  });

  it("saveModelSecs and saveSummariesSecs: null disables the service; absent keeps 600 and 120", async () => {
    const clock = new VirtualClock();
    const off = new Supervisor({ graph: model(), logdir: tempDir(), summaryOp: "summary", saveModelSecs: null, saveSummariesSecs: null, clock, logger: silentLogger });
    expect(off.saveModelSecs).toBeUndefined();
    expect(off.saveSummariesSecs).toBeUndefined();
    const sess = await off.prepareOrWaitForSession({ startStandardServices: false });
    expect(await off.startStandardServices(sess)).toEqual([]);
    await off.stop();
    const on = new Supervisor({ graph: model(), logdir: tempDir(), clock, logger: silentLogger });
    expect([on.saveModelSecs, on.saveSummariesSecs]).toEqual([600, 120]);
    await on.stop();
  });

  it("only the chief starts standard services; bad options are named", async () => {
    const worker = new Supervisor({ sessionFactory: () => new FakeSession(), isChief: false, logger: silentLogger });
    await expect(worker.startStandardServices(new FakeSession())).rejects.toThrow("Only chief supervisor can start standard services.");
    expect(() => new Supervisor({})).toThrow(ValueError);
    expect(() => new Supervisor({ graph: model(), saveModelSecs: -1 })).toThrow(/saveModelSecs/);
  });

  it("a chief without a logdir starts no standard services and says why (supervisor.py's warning)", async () => {
    const sv = new Supervisor({ graph: model(), logdir: null, saveSummariesSecs: 10, saveModelSecs: 30, clock: new VirtualClock(), logger: silentLogger });
    const recorder = new EventRecorder();
    recorder.record(sv.events$);
    const sess = await sv.prepareOrWaitForSession();
    expect(recorder.lines("warn").map((e) => [e.source, e.message])).toEqual([["supervisor", "Standard services need a 'logdir' passed to the SessionManager"]]);
    recorder.clear();
    expect(await sv.startStandardServices(sess)).toEqual([]);
    expect(recorder.lines("warn").map((e) => [e.source, e.message])).toEqual([["supervisor", "Standard services need a 'logdir' passed to the SessionManager"]]);
    await sv.stop();
  });

  it("its lines are events on events$ (source supervisor), printed by its logger until a session adopts them", async () => {
    const logger = new RecordingLogger();
    const clock = new VirtualClock();
    const sv = new Supervisor({ graph: model(), logdir: null, clock, logger });
    const recorder = new EventRecorder();
    recorder.record(sv.events$);
    const sess = await sv.prepareOrWaitForSession();
    const line = "Standard services need a 'logdir' passed to the SessionManager";
    expect(recorder.ofType("log").filter((e) => e.message === line)).toEqual([expect.objectContaining({ level: "warn", source: "supervisor", message: line })]);
    expect(logger.messages("warn")).toEqual([line]);
    // Adopted by a session: that session's observers print the Supervisor's lines, its own logger no longer does.
    const heard = new EventRecorder();
    const session = await MonitoredSession.create({ sessionCreator: new FakeSessionCreator(), clock, logger: silentLogger, logObserver: heard.listener });
    session.forwardEvents(sv);
    logger.clear();
    await sv.startStandardServices(sess);
    expect(heard.messages("warn")).toEqual([line]);
    expect(logger.messages()).toEqual([]);
    // The session closed: the Supervisor prints its lines again.
    await session.close();
    await sv.startStandardServices(sess);
    expect(logger.messages("warn")).toEqual([line]);
    await sv.stop();
  });

  it("stop() rethrows an error reported by a service", async () => {
    const clock = new VirtualClock();
    const sv = new Supervisor({ graph: model(), logdir: null, clock, logger: silentLogger });
    await sv.prepareOrWaitForSession();
    sv.loop(1, () => {
      throw new UnknownError("service failed");
    });
    await clock.advance(0);
    expect(sv.shouldStop()).toBe(true);
    await expect(sv.stop()).rejects.toThrow("service failed");
  });

  it("summaryOp defaults to all the graph's summary ops (merge_all); null disables the summary service", async () => {
    const g = new Graph();
    const step = g.globalStep();
    g.op("train", (ctx) => ctx.assignAdd(step, 1));
    g.op("loss_summary", () => 0.5, { summary: true });
    g.op("metrics", () => ({ accuracy: 0.75 }), { summary: true });
    const logdir = tempDir();
    const clock = new VirtualClock();
    const sv = new Supervisor({ graph: g, logdir, saveModelSecs: null, clock, logger: silentLogger });
    expect(sv.summaryOp).toBeTypeOf("function");
    const written = firstValueFrom(sv.events$.pipe(filter((e) => e.type === "summaryWritten")));
    await sv.managedSession(async () => {
      await written;
    });
    // A session event like the hooks': its time, step, duration and emitter.
    expect(await written).toMatchObject({ type: "summaryWritten", hook: "Supervisor", time: clock.now() });
    const values = events(logdir).flatMap((e) => e.summary?.value ?? []);
    expect(values.map((v) => v.tag).filter((t) => t !== undefined && !t.endsWith("/sec"))).toEqual(["loss_summary", "accuracy"]);

    const off = new Supervisor({ graph: model(), logdir: tempDir(), summaryOp: null, saveModelSecs: null, clock, logger: silentLogger });
    expect(off.summaryOp).toBeUndefined();
    const sess = await off.prepareOrWaitForSession({ startStandardServices: false });
    expect((await off.startStandardServices(sess)).map((l) => l.name)).toEqual(["SVStepCounterThread"]);
    await off.stop();
    // Without summary ops in the graph there is nothing to merge: no summary service.
    expect(new Supervisor({ graph: model(), logdir: tempDir(), clock, logger: silentLogger }).summaryOp).toBeUndefined();
  });

  it("stop() closes only a summary writer it made, unless told to", async () => {
    const clock = new VirtualClock();
    const own = new Supervisor({ graph: model(), logdir: tempDir(), saveModelSecs: null, clock, logger: silentLogger });
    await own.prepareOrWaitForSession({ startStandardServices: false });
    await own.stop();
    expect(own.summaryWriter?.closed).toBe(true);

    const dir = tempDir();
    const writer = fileWriterCache.getWriter(dir, { clock, logger: silentLogger });
    const sv = new Supervisor({ graph: model(), logdir: tempDir(), summaryWriter: writer, saveModelSecs: null, clock, logger: silentLogger });
    await sv.managedSession(async () => undefined);
    expect(writer.closed).toBe(false); // the caller's writer stays open for its owner
    await sv.prepareOrWaitForSession({ startStandardServices: false });
    await sv.stop({ closeSummaryWriter: true });
    expect(writer.closed).toBe(true);
  });

  it("startQueueRunners starts each runner with the session and registers it; stop joins them and rethrows a runner's error", async () => {
    const clock = new VirtualClock();
    const sv = new Supervisor({ graph: model(), logdir: null, clock, logger: silentLogger });
    const sess = await sv.prepareOrWaitForSession();
    const seen: string[] = [];
    const tasks = sv.startQueueRunners(sess, [
      {
        name: "reader",
        run: async (s, signal) => {
          seen.push(`started ${String(await s.run("global_step"))}`);
          await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
          seen.push("stopped");
        },
      },
    ]);
    expect(tasks.map((t) => t.name)).toEqual(["reader"]);
    await clock.advance(0);
    expect(seen).toEqual(["started 0"]);
    expect(tasks[0]?.isAlive()).toBe(true);
    await sv.stop();
    expect(seen).toEqual(["started 0", "stopped"]);
    expect(tasks[0]?.isAlive()).toBe(false);

    const failing = new Supervisor({ graph: model(), logdir: null, clock, logger: silentLogger });
    const s2 = await failing.prepareOrWaitForSession();
    failing.startQueueRunners(s2, [{ name: "bad", run: () => Promise.reject(new UnknownError("input file missing")) }]);
    await clock.advance(0); // the runner fails (a stop requested before that would drop its error, as TensorFlow's does)
    await expect(failing.stop()).rejects.toThrow(/input file missing/);
  });

  it("the step rate: the first point comes one interval after the start, from the anchored step and time", async () => {
    const logdir = tempDir();
    const clock = new VirtualClock();
    const sv = new Supervisor({ graph: model(), logdir, summaryOp: null, saveModelSecs: null, saveSummariesSecs: 10, clock, logger: silentLogger });
    const recorder = new EventRecorder();
    recorder.record(sv.events$);
    await sv.managedSession(async (sess) => {
      for (let i = 0; i < 5; i++) await sess.run("train");
      await clock.advanceSecs(10);
    });
    const rates = events(logdir).flatMap((e) => (e.summary?.value ?? []).map((v) => [e.step ?? "0", v.simpleValue]));
    expect(rates).toEqual([["5", 0.5]]); // 5 steps in 10 s; no infinite first point
    // The point's line, as the summary has it.
    expect(recorder.lines("info").filter((e) => e.message.includes("/sec: ")).map((e) => [e.source, e.message])).toEqual([["supervisor", "global_step/sec: 0.5"]]);
  });

  it("localInitRunOptions reach the local init op's run", async () => {
    const g = new Graph();
    const counter = g.variable("counter", { initialValue: 0, collection: "local" });
    const seen: unknown[] = [];
    const factory = () => {
      const s = g.session();
      const run = s.run.bind(s);
      s.run = ((fetches: never, feeds: never, options: never) => {
        if (fetches === "local_init") seen.push(options);
        return run(fetches, feeds, options);
      }) as typeof s.run;
      return s;
    };
    g.op("local_init", (ctx) => ctx.assign(counter, 0));
    const sv = new Supervisor({ graph: g, sessionFactory: factory, logdir: null, localInitOp: "local_init", localInitRunOptions: { traceLevel: 3 }, clock: new VirtualClock(), logger: silentLogger });
    await sv.prepareOrWaitForSession();
    expect(seen).toEqual([{ traceLevel: 3 }]);
    await sv.stop();
  });

  it("summaryComputed accepts a serialized Summary (TensorFlow's summary op output); other bytes are an InvalidArgumentError", async () => {
    const logdir = tempDir();
    const sv = new Supervisor({ graph: model(), logdir, saveModelSecs: null, saveSummariesSecs: null, clock: new VirtualClock(), logger: silentLogger });
    const sess = await sv.prepareOrWaitForSession();
    const bytes = encodeSummary({ value: [{ tag: "loss", simpleValue: 0.25 }, { tag: "hist", histo: { min: 0, max: 2, num: 2, sum: 2, sumSquares: 4, bucketLimit: [1, 2], bucket: [1, 1] } }] });
    await sv.summaryComputed(sess, bytes, 7);
    await expect(sv.summaryComputed(sess, Uint8Array.of(0x0a, 0x05, 0x01), 8)).rejects.toThrow(InvalidArgumentError);
    await sv.stop();
    const written = events(logdir).filter((e) => e.summary !== undefined);
    expect(written.map((e) => [e.step, e.summary?.value?.map((v) => v.tag)])).toEqual([["7", ["loss", "hist"]]]);
    expect(written[0]?.summary?.value?.[0]?.simpleValue).toBe(0.25);
  });

  it("await using cannot report the block's error (JavaScript gives dispose no error): the services stop as on a clean exit", async () => {
    const sv = new Supervisor({ graph: model(), logdir: null, clock: new VirtualClock(), logger: silentLogger });
    const body = async () => {
      await using managed = await sv.managedSession();
      await managed.session.run("train");
      throw new UnknownError("boom");
    };
    await expect(body()).rejects.toThrow(/boom/);
    expect(sv.shouldStop()).toBe(true);
    // The callback form reports it: stop() rethrows after the services stopped.
    const sv2 = new Supervisor({ graph: model(), logdir: null, clock: new VirtualClock(), logger: silentLogger });
    await expect(sv2.managedSession(() => Promise.reject(new UnknownError("boom")))).rejects.toThrow(/boom/);
  });
});

describe("Supervisor with a task: the task object of startTask() in place of isChief, master and sessionTargets", () => {
  it("the chief: publishes through the task's target, then the task's hooks see the session, then the start barrier (once per Supervisor), then the services start", async () => {
    const log: string[] = [];
    const task = fakeTask({ isChief: true, log });
    const logdir = tempDir();
    const sv = new Supervisor({ task, graph: model(), logdir, saveSummariesSecs: null, clock: new VirtualClock(), logger: silentLogger });
    expect(sv.isChief).toBe(true);
    const saved = firstValueFrom(sv.events$.pipe(filter((e) => e.type === "checkpointSaved")));
    await sv.managedSession(async (sess) => {
      expect(log).toEqual(["publisher.afterCreateSession", "task.afterCreateSession", "sessionsCreated"]);
      await saved;
      await sess.run("train");
    });
    expect(log.at(-1)).toBe("task.beforeRun");
    await sv.managedSession(async (sess) => sess.run("train"));
    expect(log.filter((l) => l === "sessionsCreated")).toHaveLength(1);
    expect(readdirSync(logdir)).toContain("model.ckpt-0.index");
  });

  it("a worker: waits for the chief's values through the task's target; a run first asks the task's hooks, so a lost chief fails the run; the next managedSession starts from the chief's values again", async () => {
    const log: string[] = [];
    // The task's hook stands for the chief recovery: its second beforeRun finds the chief lost.
    const task = fakeTask({ isChief: false, log, chiefGraph: model, chiefSteps: 4, hook: { throwIn: { method: "beforeRun", at: 2, error: new UnavailableError("lost the chief") } } });
    const logdir = tempDir();
    const sv = new Supervisor({ task, graph: model(), logdir, recoveryWaitSecs: 1, clock: new VirtualClock({ autoAdvance: true }), logger: silentLogger });
    expect(sv.isChief).toBe(false);
    const first = sv.managedSession(async (sess) => {
      expect(await sess.run(["global_step", "w"])).toEqual([4, 4]);
      await sess.run("train");
    });
    await expect(first).rejects.toThrow(new UnavailableError("lost the chief"));
    expect(await sv.managedSession(async (sess) => sess.run(["global_step", "w"]))).toEqual([4, 4]);
    expect(task.pulls()).toBe(2);
    expect(log).toEqual([
      "task.afterCreateSession",
      "sessionsCreated",
      "task.beforeRun",
      "task.beforeRun",
      "task.afterCreateSession",
      "task.beforeRun",
    ]);
    // A worker writes nothing under its logdir.
    expect(readdirSync(logdir)).toEqual([]);
  });

  it("isChief, master or sessionTargets given too, with another value, is a ValueError naming both options", async () => {
    const task = fakeTask({ isChief: true, log: [] });
    expect(() => new Supervisor({ task, isChief: false, graph: model(), logger: silentLogger })).toThrow(
      new ValueError("give either task or isChief, not both: isChief is false, the task's is true (task sets master, sessionTargets and isChief)"),
    );
    const sv = new Supervisor({ task, isChief: true, graph: model(), logdir: null, clock: new VirtualClock(), logger: silentLogger });
    await expect(sv.prepareOrWaitForSession({ master: "" })).rejects.toThrow(
      new ValueError('give either task or master, not both: master is "", the task\'s is "fake://task0" (task sets master, sessionTargets and isChief)'),
    );
    await expect(sv.managedSession(() => undefined, { master: "fake://task0", sessionTargets: task.sessionTargets })).resolves.toBeUndefined();
  });

  it("a start barrier that fails fails the preparation: the session is closed and the chief's checkpoint directory released", async () => {
    const logdir = tempDir();
    const task = fakeTask({ isChief: true, log: [], barrier: () => Promise.reject(new DeadlineExceededError("barrier timed out: stragglers: worker:0")) });
    const sv = new Supervisor({ task, graph: model(), logdir, clock: new VirtualClock(), logger: silentLogger });
    await expect(sv.prepareOrWaitForSession()).rejects.toThrow(new DeadlineExceededError("barrier timed out: stragglers: worker:0"));
    expect(readdirSync(logdir)).not.toContain("checkpoint.lock");
  });
});

