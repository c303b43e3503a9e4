/**
 * The session's log lines are events: hooks and the session's layers emit, and log observers
 * print. A replaced log observer, or a second one, gets every line a hook would have logged.
 */
import { describe, expect, it } from "vitest";

import { NanTensorHook } from "../../hooks/NanTensorHook.js";
import { StepCounterHook } from "../../hooks/StepCounterHook.js";
import { eventLogger, logObserver, type SessionEventListener } from "../../src/events/logObserver.js";
import { hookEnv } from "../../src/hook/hookEnv.js";
import type { SessionEvent } from "../../src/events/SessionEvent.js";
import { SessionRunArgs, SessionRunContext, type HookEnv, type SessionRunHook } from "../../src/hook/SessionRunHook.js";
import { MonitoredSession, type MonitoredSessionOptions } from "../../src/pipeline/MonitoredSession.js";
import { RecordingLogger } from "../../src/testing/RecordingLogger.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { trainingGraph } from "../util/driveHooks.js";

const NAN = "Model diverged with loss = NaN.";

/** A session whose `loss` is NaN, watched by a NanTensorHook that warns and stops. */
const divergingSession = (options: MonitoredSessionOptions & { hookLogger?: RecordingLogger }): Promise<MonitoredSession> =>
  MonitoredSession.create({
    graph: trainingGraph({ ops: { loss: () => Number.NaN } }),
    clock: new VirtualClock(),
    hooks: [new NanTensorHook({ lossTensor: "loss", failOnNanLoss: false, ...(options.hookLogger === undefined ? {} : { logger: options.hookLogger }) })],
    ...options,
  });

/** Runs `train` once and closes. */
const runOnce = async (sess: MonitoredSession): Promise<void> => {
  await sess.run("train");
  await sess.close();
};

describe("eventLogger", () => {
  it("emits a log event per call, with its level, message, fields and the clock's time", () => {
    const events: SessionEvent[] = [];
    const log = eventLogger((e) => events.push(e), () => 42);
    log.info("hello");
    log.warn("careful", { step: 3 });
    log.debug("detail");
    log.error("broken");
    expect(events).toEqual([
      { type: "log", time: 42, level: "info", message: "hello" },
      { type: "log", time: 42, level: "warn", message: "careful", fields: { step: 3 } },
      { type: "log", time: 42, level: "debug", message: "detail" },
      { type: "log", time: 42, level: "error", message: "broken" },
    ]);
  });
});

describe("logObserver", () => {
  it("prints log events at their level, with their fields; every other event is data and prints nothing", () => {
    const logger = new RecordingLogger();
    const observe = logObserver(logger);
    observe({ type: "log", time: 0, level: "debug", message: "d" });
    observe({ type: "log", time: 0, level: "error", message: "e", fields: { k: 1 } });
    observe({ type: "warning", time: 0, message: "w" });
    observe({ type: "stepRate", time: 0, globalStep: 7, stepsPerSec: 1234567 });
    observe({ type: "checkpointSaved", time: 0, globalStep: 1, path: "/x", durationMs: 1 });
    observe({ type: "end", time: 0 });
    expect(logger.entries).toEqual([
      { level: "debug", message: "d", fields: undefined },
      { level: "error", message: "e", fields: { k: 1 } },
    ]);
  });
});

describe("a session's log lines reach its log observers", () => {
  it("by default, the session's logger prints a hook's warning once, and events$ carries it as a warning event", async () => {
    const logger = new RecordingLogger();
    const sess = await divergingSession({ logger });
    const warnings: string[] = [];
    sess.events$.subscribe((e) => e.type === "warning" && warnings.push(e.message));
    await runOnce(sess);
    expect(logger.messages("warn")).toEqual([NAN]);
    expect(warnings).toEqual([NAN]);
  });

  it("a replaced log observer gets the hook's warning; the session's logger gets nothing", async () => {
    const logger = new RecordingLogger();
    const mine = new RecordingLogger();
    await runOnce(await divergingSession({ logger, logObserver: logObserver(mine) }));
    expect(mine.messages("warn")).toEqual([NAN]);
    expect(logger.entries).toEqual([]);
  });

  it("a second log observer (given as `observer`, or as a second listener) gets every line the first does", async () => {
    const first = new RecordingLogger();
    const second = new RecordingLogger();
    const third = new RecordingLogger();
    await runOnce(await divergingSession({ logObserver: [logObserver(first), logObserver(second)], observer: logObserver(third) }));
    expect(first.messages("warn")).toEqual([NAN]);
    expect(second.entries).toEqual(first.entries);
    expect(third.entries).toEqual(first.entries);
  });

  it("logObserver: null prints nothing; the lines are still events", async () => {
    const events: SessionEvent[] = [];
    await runOnce(await divergingSession({ logObserver: null, observer: (e) => events.push(e) }));
    expect(events.filter((e) => e.type === "warning").map((e) => e.type === "warning" && e.message)).toEqual([NAN]);
  });

  it("a hook given a logger of its own prints there and only there; its warning is still a warning event", async () => {
    const logger = new RecordingLogger();
    const hookLogger = new RecordingLogger();
    const events: SessionEvent[] = [];
    await runOnce(await divergingSession({ logger, hookLogger, observer: (e) => events.push(e) }));
    expect(hookLogger.messages("warn")).toEqual([NAN]);
    expect(logger.messages("warn")).toEqual([]);
    expect(events.filter((e) => e.type === "warning")).toEqual([{ type: "warning", time: 1_700_000_000_000, message: NAN }]);
    expect(events.some((e) => e.type === "log" && e.message === NAN)).toBe(false);
  });

  it("in a session, a hook's warning is a log event at warn, then a warning event (the line, then the data)", async () => {
    const events: SessionEvent[] = [];
    await runOnce(await divergingSession({ logObserver: null, observer: (e) => events.push(e) }));
    const at = events.findIndex((e) => e.type === "warning");
    expect(events[at - 1]).toEqual({ type: "log", time: 1_700_000_000_000, level: "warn", message: NAN });
  });

  it("StepCounterHook's rate is TensorFlow's lines as log events, then one stepRate event with the data", async () => {
    const clock = new VirtualClock();
    const logger = new RecordingLogger();
    const events: SessionEvent[] = [];
    const graph = trainingGraph();
    graph.op("tick", () => clock.advance(10));
    const sess = await MonitoredSession.create({ graph, clock, logger, hooks: [new StepCounterHook({ everyNSteps: 10, examplesPerStep: 32 })], observer: (e) => events.push(e) });
    for (let i = 0; i < 21; i++) await sess.run(["train", "tick"]);
    await sess.close();
    expect(logger.entries.filter((e) => e.message.includes("/sec"))).toEqual([
      { level: "info", message: "global_step/sec: 100", fields: { step: 11, stepsPerSec: 100 } },
      { level: "info", message: "examples/sec: 3200", fields: { step: 11, examplesPerSec: 3200 } },
      { level: "info", message: "global_step/sec: 100", fields: { step: 21, stepsPerSec: 100 } },
      { level: "info", message: "examples/sec: 3200", fields: { step: 21, examplesPerSec: 3200 } },
    ]);
    // The session manager's lines are events too ("Running local_init_op."), and so are the rates.
    expect(events.filter((e) => e.type === "log").map((e) => e.type === "log" && e.message)).toEqual([
      "Running local_init_op.",
      "Done running local_init_op.",
      "global_step/sec: 100",
      "examples/sec: 3200",
      "global_step/sec: 100",
      "examples/sec: 3200",
    ]);
    const rate = events.findIndex((e) => e.type === "stepRate");
    expect(events[rate - 1]).toMatchObject({ type: "log", message: "examples/sec: 3200", fields: { step: 11, examplesPerSec: 3200 } });
    expect(events.filter((e) => e.type === "stepRate").map((e) => e.type === "stepRate" && [e.globalStep, e.tag, e.examplesPerSec])).toEqual([
      [11, "global_step/sec", 3200],
      [21, "global_step/sec", 3200],
    ]);
  });

  it("a hook's line after close() still reaches the log observer (a background write that fails late)", async () => {
    const logger = new RecordingLogger();
    let env: HookEnv | undefined;
    const hook: SessionRunHook = {
      begin(e) {
        env = e;
      },
    } as SessionRunHook;
    const sess = await MonitoredSession.create({ graph: trainingGraph(), clock: new VirtualClock(), logger, hooks: [hook] });
    await sess.close();
    env?.logger.error("late: the background write failed");
    expect(logger.messages("error")).toEqual(["late: the background write failed"]);
  });

  it("listeners do not hear the per-run events (beforeRun, afterRun, hookTimings)", async () => {
    const heard: string[] = [];
    const listener: SessionEventListener = (e) => heard.push(e.type);
    const sess = await MonitoredSession.create({ graph: trainingGraph(), clock: new VirtualClock(), logObserver: listener });
    await sess.run("train");
    await sess.close();
    // The session manager's two lines (local_init_op), then the life cycle; no beforeRun, afterRun.
    expect(heard).toEqual(["log", "log", "sessionCreated", "end", "closed"]);
  });
});

describe("a log observer that throws", () => {
  it("does not fail the hook or the run that emitted; one line on stderr names it, once", async () => {
    const errors: unknown[] = [];
    const original = console.error;
    console.error = (...args: unknown[]) => void errors.push(args.join(" "));
    try {
      const broken: SessionEventListener = (e) => {
        if (e.type === "warning" || e.type === "log") throw new Error("disk full");
      };
      // The NaN hook's warning (then its stop) and the session manager's lines all reach it.
      const sess = await divergingSession({ logObserver: broken });
      await sess.run("train");
      expect(sess.shouldStop()).toBe(true);
      await sess.close();
    } finally {
      console.error = original;
    }
    expect(errors).toEqual([
      "monitored-session: a log observer threw on a log event (Error: disk full); the session goes on, and this observer's later errors are not reported",
    ]);
  });
});

describe("hookEnv: hooks run outside a monitored session (TensorFlow's _HookedSession, a harness of one's own)", () => {
  /** Runs `hook` around `runs` runs of `train` by hand, as TensorFlow's `_HookedSession` tests do, with `env`; advancing the clock 100 ms per run. */
  const byHand = async (hook: SessionRunHook, env: HookEnv, clock: VirtualClock, runs: number, stepsPerRun: number): Promise<void> => {
    const session = trainingGraph({ stepsPerRun }).session();
    await session.variables.initialize();
    await hook.begin?.(env);
    await hook.afterCreateSession?.(session, undefined as never);
    for (let i = 0; i < runs; i++) {
      await clock.advance(100);
      const ctx = new SessionRunContext(SessionRunArgs("train"), session);
      const args = await hook.beforeRun?.(ctx);
      const [, results] = (await session.run(["train", args?.fetches ?? "noop"])) as [unknown, unknown];
      await hook.afterRun?.(ctx, { results: args === undefined ? null : results, options: {}, runMetadata: {} });
    }
    await hook.end?.(session);
  };

  it("every line of a hook reaches the logger: StepCounterHook's global_step/sec lines, and its warnings when the step does not increase", async () => {
    const clock = new VirtualClock();
    const logger = new RecordingLogger();
    const heard: string[] = [];
    await byHand(new StepCounterHook({ everyNSteps: 2 }), hookEnv({ logger, clock, onEvent: (e) => heard.push(e.type) }), clock, 5, 1);
    expect(logger.messages("info")).toEqual(["global_step/sec: 10", "global_step/sec: 10"]);
    expect(heard.filter((t) => t === "stepRate")).toHaveLength(2);

    const frozen = new RecordingLogger();
    await byHand(new StepCounterHook({ everyNSteps: 1 }), hookEnv({ logger: frozen, clock }), clock, 12, 0);
    expect(frozen.messages("warn").length).toBeGreaterThan(0);
    expect(frozen.messages("warn")[0]).toContain("It seems that global step (global_step) has not been increased.");
  });

  it("an environment of one's own with a plain logger prints every line through it, whatever its emit does (one rule: a line goes to the logger)", async () => {
    const clock = new VirtualClock();
    const logger = new RecordingLogger();
    await byHand(new StepCounterHook({ everyNSteps: 2 }), { clock, logger, emit: () => undefined }, clock, 5, 1);
    expect(logger.messages("info")).toEqual(["global_step/sec: 10", "global_step/sec: 10"]);
    const frozen = new RecordingLogger();
    await byHand(new StepCounterHook({ everyNSteps: 1 }), { clock, logger: frozen, emit: () => undefined }, clock, 12, 0);
    expect(frozen.messages("warn")[0]).toContain("It seems that global step (global_step) has not been increased.");
  });
});
