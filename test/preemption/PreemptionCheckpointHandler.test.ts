/**
 * PreemptionCheckpointHandler unit tests: a fake signal target, a fake watcher and a
 * VirtualClock; local mode of failure_handler_test (save at run_counter + 1, exit, grace period
 * saves twice, passed-in save_fn, restore of checkpointed_runs).
 */

import { EventEmitter } from "node:events";
import { existsSync } from "node:fs";
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { beforeEach, describe, expect, it } from "vitest";

import { CheckpointManager } from "../../src/checkpoint/index.js";
import {
  kubernetesWatcher,
  LocalPreemptionCoordinator,
  PreemptionCheckpointHandler,
  TerminationConfig,
  type PlatformNotice,
  type PlatformWatcher,
  type PreemptionEvent,
} from "../../src/preemption/index.js";
import { InternalError, ValueError } from "../../src/errors.js";
import { silentLogger } from "../../src/Logger.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { GatedSaver } from "../checkpoint/helpers.js";
import { counterModel } from "./counterModel.js";
import { useTempDirs } from "../util/tempDirs.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { RecordingLogger } from "../../src/testing/RecordingLogger.js";
import type { SessionEvent } from "../../src/events/SessionEvent.js";
import { MonitoredSession } from "../../src/pipeline/MonitoredSession.js";
import { trainingGraph } from "../util/driveHooks.js";

const tempDir = useTempDirs("ms-ckpt-");

let dir: string;
beforeEach(async () => {
  dir = tempDir();
});
const model = counterModel;

const setup = async (config: ConstructorParameters<typeof TerminationConfig>[0] = {}, extra: { manager?: CheckpointManager } = {}) => {
  const session = model();
  const signals = new EventEmitter();
  const clock = new VirtualClock();
  const logger = new RecordingLogger();
  const exits: number[] = [];
  // Every event from the handler's first line (`observer`: what create() says comes before it
  // resolves); its lines are `log` events in `recorder`, `events` holds the typed ones.
  const recorder = new EventRecorder();
  const events: PreemptionEvent[] = [];
  const handler = await PreemptionCheckpointHandler.create({
    ...(extra.manager === undefined ? { checkpointDir: dir } : { checkpointManager: extra.manager }),
    store: session.variables,
    initFn: () => session.variables.initialize(),
    terminationConfig: new TerminationConfig({ exitFn: () => exits.push(handler.totalRunCalls), ...config }),
    signalTarget: signals,
    clock,
    logger,
    observer: (e) => {
      recorder.listener(e);
      if (e.type !== "log") events.push(e);
    },
  });
  const step = () => handler.run(() => session.run("train"));
  return { session, signals, clock, logger, exits, handler, events, recorder, step };
};

/** A handler whose saves wait for `saver.release()` (a save that outlives a deadline). */
const gatedSetup = async (config: ConstructorParameters<typeof TerminationConfig>[0]) => {
  const saver = new GatedSaver();
  const clock = new VirtualClock();
  const manager = await CheckpointManager.create({ directory: dir, saver, clock });
  const session = model();
  const signals = new EventEmitter();
  const handler = await PreemptionCheckpointHandler.create({
    checkpointManager: manager,
    store: session.variables,
    initFn: () => session.variables.initialize(),
    terminationConfig: new TerminationConfig({ exitFn: () => undefined, ...config }),
    signalTarget: signals,
    clock,
    logger: silentLogger,
  });
  const recorder = new EventRecorder();
  recorder.record(handler.events$);
  const step = () => handler.run(() => session.run("train"));
  return { saver, clock, manager, signals, recorder, handler, step };
};

const indexes = async (): Promise<string[]> => (await readdir(dir)).filter((f) => f.endsWith(".index")).sort();

describe("PreemptionCheckpointHandler", () => {
  it("needs exactly one of checkpointManager and checkpointDir", async () => {
    const session = model();
    await expect(PreemptionCheckpointHandler.create({ store: session.variables })).rejects.toThrow(ValueError);
  });

  it("SIGTERM only sets a flag; it saves at run_counter + 1 before the step, then calls exitFn", async () => {
    const { signals, exits, handler, step, events } = await setup();
    await step();
    await step();
    signals.emit("SIGTERM");
    expect(handler.terminationReceived).toBe(true);
    expect(await indexes()).toEqual([]); // nothing saved in the signal handler
    await step(); // decides: save at run 3; runs step 3
    expect(await indexes()).toEqual([]);
    await step(); // saves at run 3, exits (the fake exit returns, so the step runs)
    expect(exits).toEqual([3]);
    expect(await indexes()).toEqual(["ckpt-1.index"]);
    expect(events.map((e) => e.type)).toEqual(["terminationNoticed", "preemptionCheckpointSaved", "preemptionExiting"]);
    expect(events.at(-1)).toMatchObject({ code: 42, saved: true });
    expect(signals.listenerCount("SIGTERM")).toBe(0); // removed before exiting
  });

  it("saveAtNextBoundary (one process, no peer to agree with): the save is at the first boundary after the notice, no extra step", async () => {
    const session = model();
    const signals = new EventEmitter();
    const clock = new VirtualClock();
    const exits: number[] = [];
    const logger = new RecordingLogger();
    const handler = await PreemptionCheckpointHandler.create({
      checkpointDir: dir,
      store: session.variables,
      initFn: () => session.variables.initialize(),
      terminationConfig: new TerminationConfig({ exitFn: () => exits.push(handler.totalRunCalls) }),
      coordinator: new LocalPreemptionCoordinator({ saveAtNextBoundary: true, clock, logger }),
      signalTarget: signals,
      clock,
      logger,
    });
    const step = () => handler.run(() => session.run("train"));
    await step();
    await step();
    signals.emit("SIGTERM");
    expect(await indexes()).toEqual([]);
    await step(); // saves at run 2 before the step, exits
    expect(exits).toEqual([2]);
    expect(await indexes()).toEqual(["ckpt-1.index"]);
    await handler.close();
  });

  it("with globalStep, its messages name the global step instead of the run count", async () => {
    const session = model();
    const signals = new EventEmitter();
    const recorder = new EventRecorder();
    const handler = await PreemptionCheckpointHandler.create({
      checkpointDir: dir,
      store: session.variables,
      initFn: () => session.variables.initialize(),
      terminationConfig: new TerminationConfig({ exitFn: () => undefined }),
      signalTarget: signals,
      clock: new VirtualClock(),
      logger: silentLogger,
      observer: recorder.listener,
      globalStep: () => Number(session.variables.snapshot().get("global_step")?.data[0]) + 100,
    });
    const step = () => handler.run(() => session.run("train"));
    await step();
    signals.emit("SIGTERM");
    await step();
    await step();
    const messages = recorder.messages().join("\n");
    expect(messages).toContain("termination notice (SIGTERM) at global step 101;");
    expect(messages).toContain("checkpoint saved at global step 102");
    expect(messages).not.toMatch(/at run \d/);
    expect(recorder.lines().filter((e) => e.message.includes("global step 10")).map((e) => e.source)).toEqual(["preemption", "preemption"]);
    // Nor do create()'s own lines (the recorder heard them through the handler's observer).
    expect(recorder.messages().join("\n")).not.toMatch(/at run \d/);
    await handler.close();
  });

  it("restores the latest checkpoint and totalRunCalls from checkpointed_runs", async () => {
    const a = await setup();
    for (let i = 0; i < 4; i++) await a.step();
    a.signals.emit("SIGTERM");
    await a.step();
    await a.step();
    expect(a.exits).toEqual([5]);
    await a.handler.close();

    const b = await setup();
    expect(b.handler.totalRunCalls).toBe(5);
    expect(await b.session.run(["v", "global_step"])).toEqual([5, 5]);
    await b.handler.close();
  });

  it("says which checkpoint it restored and at which run; a fresh directory (initFn) says nothing of a restore", async () => {
    const a = await setup();
    expect(a.recorder.messages().filter((m) => m.includes("restored"))).toEqual([]);
    for (let i = 0; i < 3; i++) await a.step();
    const path = await a.handler.save();
    expect(path).toBe(join(dir, "ckpt-1"));
    await a.handler.close();

    const b = await setup();
    expect(b.recorder.lines().filter((e) => e.message.includes("restored"))).toEqual([
      { type: "log", time: b.clock.now(), level: "info", message: `PreemptionCheckpointHandler: restored ${join(dir, "ckpt-1")} at run 3.`, fields: { path: join(dir, "ckpt-1"), run: 3 }, source: "preemption" },
    ]);
    // Printed once by the handler's logger too: no session adopted its lines.
    expect(b.logger.messages().filter((m) => m.includes("restored"))).toHaveLength(1);
    await b.handler.close();
  });

  it("restoreOnCreate: false leaves an already restored (or initialized) session alone", async () => {
    const a = await setup();
    for (let i = 0; i < 3; i++) await a.step();
    a.signals.emit("SIGTERM");
    await a.step();
    await a.handler.close();

    const session = model();
    await session.variables.initialize();
    const handler = await PreemptionCheckpointHandler.create({
      checkpointDir: dir,
      store: session.variables,
      restoreOnCreate: false,
      signalTarget: new EventEmitter(),
      clock: new VirtualClock(),
      logger: new RecordingLogger(),
    });
    expect(handler.totalRunCalls).toBe(0);
    expect(await session.run(["v", "global_step"])).toEqual([0, 0]);
    await handler.close();
  });

  it("a checkpoint without checkpointed_runs (e.g. a CheckpointSaverHook's) restores as 0 runs", async () => {
    const session = model();
    await session.variables.initialize();
    const manager = await CheckpointManager.create({ directory: dir, maxToKeep: 1 });
    await manager.save(session.variables);
    const { handler } = await setup({}, { manager });
    expect(handler.totalRunCalls).toBe(0);
    await handler.close();
  });

  it("test_grace_period_continue_training: saves, trains on until the period nearly ends, saves again and exits", async () => {
    const { signals, clock, exits, step, events } = await setup({ gracePeriodSecs: 10 });
    await step();
    signals.emit("SIGTERM");
    await step(); // sets the run to save at: 2
    await step(); // saves at 2 (first), continues
    expect(exits).toEqual([]);
    expect(await indexes()).toEqual(["ckpt-1.index"]);
    for (let i = 0; i < 5; i++) await step(); // within the grace period: no save
    clock.set(clock.now() + 10_001);
    await step(); // final call: save at run_counter + 1
    await step(); // saves and exits
    expect(exits).toEqual([9]);
    expect(await indexes()).toEqual(["ckpt-2.index"]);
    expect(events.filter((e) => e.type === "preemptionCheckpointSaved").map((e) => [e.type === "preemptionCheckpointSaved" && e.run, e.type === "preemptionCheckpointSaved" && e.exit])).toEqual([
      [2, false],
      [9, true],
    ]);
  });

  it("a save that outlives the grace period is logged as an error naming the run", async () => {
    const { saver, clock, signals, recorder, handler, step } = await gatedSetup({ gracePeriodSecs: 5 });
    signals.emit("SIGTERM");
    await step();
    const saving = step(); // first save at run 1 hangs
    await saver.waitStarted(1);
    await clock.advanceSecs(6);
    expect(recorder.messages("error")).toEqual([expect.stringMatching(/checkpoint at run 1 has not finished within the grace period of 5 s/)]);
    expect(recorder.lines("error").map((e) => e.source)).toEqual(["preemption"]);
    // The line's typed event says the same.
    expect(recorder.ofType("gracePeriodExceeded")).toEqual([expect.objectContaining({ run: 1, message: recorder.messages("error")[0] })]);
    saver.release();
    await saving;
    expect(await indexes()).toEqual(["ckpt-1.index"]);
    await handler.close();
  });

  it("test_passed_in_save_fn: a custom saveFn replaces the manager (no ckpt files)", async () => {
    const saved: number[] = [];
    const { signals, exits, step, handler } = await setup({ saveFn: () => void saved.push(handler.totalRunCalls) });
    signals.emit("SIGTERM");
    await step();
    await step();
    expect(saved).toEqual([1]);
    expect(exits).toEqual([1]);
    expect(await indexes()).toEqual([]);
  });

  it("a custom terminationWatcherFn is polled on the clock instead of SIGTERM", async () => {
    let terminating = false;
    let polls = 0;
    const { signals, clock, exits, step, handler } = await setup({
      terminationWatcherFn: () => {
        polls++;
        return terminating;
      },
    });
    expect(signals.listenerCount("SIGTERM")).toBe(0);
    await clock.advanceSecs(3);
    expect(polls).toBe(3);
    await step();
    expect(handler.terminationReceived).toBe(false);
    terminating = true;
    await clock.advanceSecs(1);
    expect(handler.terminationReceived).toBe(true);
    await clock.advanceSecs(5);
    expect(polls).toBe(4); // polling stops after the notice
    await step();
    await step();
    expect(exits).toEqual([2]);
    // Polling stopped, and the directory's lock (its lease refresh) was released before the exit.
    expect(clock.pendingTimers).toBe(0);
    await handler.close();
    expect(clock.pendingTimers).toBe(0);
  });

  it("a failing watcher is logged and polling goes on", async () => {
    let calls = 0;
    const { clock, recorder, handler } = await setup({
      terminationWatcherFn: () => {
        calls++;
        if (calls === 1) throw new Error("probe down");
        return calls === 2;
      },
    });
    await clock.advanceSecs(1);
    expect(recorder.lines("warn").map((e) => [e.source, e.message])).toEqual([["preemption", expect.stringContaining("probe down")]]);
    await clock.advanceSecs(1);
    expect(handler.terminationReceived).toBe(true);
    await handler.close();
  });

  it("saveCheckpointIfPreempted counts a run per call and passes the save options", async () => {
    const { signals, session, exits, handler } = await setup();
    for (let i = 0; i < 3; i++) {
      await session.run("train");
      await handler.saveCheckpointIfPreempted({ checkpointNumber: handler.totalRunCalls });
    }
    signals.emit("SIGTERM");
    for (let i = 0; i < 2; i++) {
      await session.run("train");
      await handler.saveCheckpointIfPreempted({ checkpointNumber: handler.totalRunCalls });
    }
    expect(exits).toEqual([4]);
    expect(await indexes()).toEqual(["ckpt-4.index"]);
  });

  it("close() removes the signal handlers; run() afterwards is a RuntimeError", async () => {
    const { signals, handler, step } = await setup();
    expect(signals.listenerCount("SIGTERM")).toBe(1);
    await handler.close();
    expect(signals.listenerCount("SIGTERM")).toBe(0);
    await expect(step()).rejects.toThrow("PreemptionCheckpointHandler is closed.");
  });

  it("a step's error propagates through run() and watchPreemptionScope(); only an OpError is reported to the coordinator, as TensorFlow reports only OpErrors", async () => {
    const reported: unknown[] = [];
    const clock = new VirtualClock();
    const coordinator = new LocalPreemptionCoordinator({ clock, logger: new RecordingLogger() });
    Object.assign(coordinator, { reportError: (e: unknown) => void reported.push(e) });
    const session = model();
    const handler = await PreemptionCheckpointHandler.create({
      checkpointDir: dir,
      store: session.variables,
      initFn: () => session.variables.initialize(),
      coordinator,
      signalTarget: new EventEmitter(),
      clock,
    });
    const boom = new InternalError("boom");
    const bug = new TypeError("a bug");
    await expect(handler.run(() => Promise.reject(boom))).rejects.toBe(boom);
    await expect(handler.watchPreemptionScope(() => { throw boom; })).rejects.toBe(boom);
    await expect(handler.run(() => Promise.reject(bug))).rejects.toBe(bug);
    await expect(handler.watchPreemptionScope(() => { throw bug; })).rejects.toBe(bug);
    expect(reported).toEqual([boom, boom]);
    expect(handler.totalRunCalls).toBe(0);
    await handler.close();
  });

  it("TerminationConfig validates the grace period", () => {
    expect(() => new TerminationConfig({ gracePeriodSecs: -1 })).toThrow(/gracePeriodSecs must be a finite number >= 0, got -1/);
  });
});

describe("PreemptionCheckpointHandler with a platform watcher", () => {
  /** A platform whose next poll answers what the test sets; records acknowledgements. */
  const fakePlatform = () => {
    const state: { answer: PlatformNotice | undefined; acks: string[]; order: string[] } = { answer: undefined, acks: [], order: [] };
    const watcher: PlatformWatcher = {
      platform: "azure",
      check: async () => state.answer,
      acknowledge: async (n) => {
        state.acks.push(n.eventId ?? "");
        state.order.push("ack");
      },
    };
    return { state, watcher };
  };

  it("a platform notice is a notice; its deadline ends the grace period early; the event is acknowledged before the exit", async () => {
    const { state, watcher } = fakePlatform();
    const { clock, handler, step, events, exits } = await setup({ gracePeriodSecs: 100, platform: watcher });
    const exitOrder = state.order;
    await step();
    state.answer = { platform: "azure", detail: "Scheduled Event Preempt e1", deadlineMs: clock.now() + 10_000, eventId: "e1" };
    await clock.advanceSecs(1); // the poll sees the event
    expect(handler.terminationReceived).toBe(true);
    expect(events[0]).toMatchObject({ type: "terminationNoticed", source: "azure: Scheduled Event Preempt e1" });
    await step(); // decides: save at 2
    await step(); // first save, trains on
    expect(await indexes()).toEqual(["ckpt-1.index"]);
    clock.set(clock.now() + 5_000);
    await step(); // 5 s in: the platform's 10 s deadline is not near yet
    expect(exits).toEqual([]);
    clock.set(clock.now() + 5_001); // past the platform's deadline, long before the configured 100 s
    await step();
    expect(state.acks).toEqual([]);
    await step(); // the final save, then the acknowledgement, then the exit
    expect(exits).toHaveLength(1);
    expect(state.acks).toEqual(["e1"]);
    expect(exitOrder).toEqual(["ack"]);
    await handler.close();
  });

  it("Kubernetes: SIGTERM with the pod's grace period as the deadline of the save", async () => {
    const { saver, clock, signals, recorder, handler, step, manager } = await gatedSetup({ platform: kubernetesWatcher({ env: { TERMINATION_GRACE_PERIOD_SECONDS: "3" } }) });
    signals.emit("SIGTERM");
    await step();
    const saving = step();
    await saver.waitStarted(1);
    await clock.advanceSecs(4);
    expect(recorder.messages("error")).toEqual([expect.stringMatching(/checkpoint at run 1 has not finished within the grace period of 3 s/)]);
    saver.release();
    await saving;
    await handler.close();
    await manager.close();
  });

  it("a manager and a directory: the directory is ignored with a warning, as TensorFlow does", async () => {
    const clock = new VirtualClock();
    const manager = await CheckpointManager.create({ directory: dir, clock });
    const session = model();
    const recorder = new EventRecorder();
    const handler = await PreemptionCheckpointHandler.create({
      checkpointManager: manager,
      checkpointDir: "/elsewhere",
      store: session.variables,
      initFn: () => session.variables.initialize(),
      signalTarget: new EventEmitter(),
      clock,
      logger: silentLogger,
      observer: recorder.listener,
    });
    expect(handler.checkpointManager).toBe(manager);
    expect(recorder.messages("warn")).toEqual([expect.stringContaining("checkpointDir /elsewhere is ignored")]);
    await handler.close();
    await manager.close();
  });
  it("the warning names the ignored directory and the manager's, and nothing is written to the ignored one", async () => {
    const clock = new VirtualClock();
    const manager = await CheckpointManager.create({ directory: dir, clock });
    const session = model();
    const recorder = new EventRecorder();
    const ignored = join(tempDir(), "ignored");
    const handler = await PreemptionCheckpointHandler.create({
      checkpointManager: manager,
      checkpointDir: ignored,
      store: session.variables,
      initFn: () => session.variables.initialize(),
      signalTarget: new EventEmitter(),
      clock,
      logger: silentLogger,
      observer: recorder.listener,
    });
    expect(recorder.lines("warn")).toEqual([
      {
        type: "log",
        time: clock.now(),
        level: "warn",
        message: `PreemptionCheckpointHandler: checkpointDir ${ignored} is ignored: checkpoints go through the given checkpointManager (${dir}).`,
        source: "preemption",
      },
    ]);
    expect(await handler.save()).toBe(join(dir, "ckpt-1"));
    expect(existsSync(ignored)).toBe(false);
    await handler.close();
    await manager.close();
  });
});

describe("PreemptionCheckpointHandler's lines, forwarded into a session", () => {
  it("before forwardEvents(handler) they go to its logger; after, they are the session's log events, printed by the session's log observer", async () => {
    const { signals, exits, handler, step, logger, recorder } = await setup();
    const sessionLogger = new RecordingLogger();
    const seen: SessionEvent[] = [];
    const sess = await MonitoredSession.create({ graph: trainingGraph(), clock: new VirtualClock(), logger: sessionLogger, observer: (e) => seen.push(e) });
    sess.forwardEvents(handler);
    await step();
    signals.emit("SIGTERM");
    await step();
    await step();
    expect(exits).toEqual([2]);
    const saved = /^PreemptionCheckpointHandler: checkpoint saved /;
    expect(sessionLogger.messages("info").filter((m) => saved.test(m))).toHaveLength(1);
    expect(logger.messages().filter((m) => saved.test(m))).toEqual([]);
    expect(seen.filter((e) => e.type === "log" && saved.test(e.message))).toHaveLength(1);
    // Forwarded whole: the session's event still names the handler as its source; the
    // handler's own stream carries the line whoever prints it.
    expect(seen.flatMap((e) => (e.type === "log" && saved.test(e.message) ? [e.source] : []))).toEqual(["preemption"]);
    expect(recorder.lines("info").filter((e) => saved.test(e.message)).map((e) => e.source)).toEqual(["preemption"]);
    // Its typed events are forwarded as before.
    expect(seen.map((e) => e.type)).toContain("preemptionCheckpointSaved");
    await sess.close();
    await handler.close();
  });
});
