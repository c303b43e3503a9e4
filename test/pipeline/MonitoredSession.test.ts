import { describe, expect, it, vi } from "vitest";
import { lastValueFrom, toArray } from "rxjs";
import {
  AbortedError,
  CancelledError,
  OutOfRangeError,
  RuntimeError,
  StopIteration,
  UnavailableError,
  UnknownError,
  ValueError,
} from "../../src/errors.js";
import { MonitoredSession, SingularMonitoredSession, withSession, type StepContext } from "../../src/pipeline/MonitoredSession.js";
import { Coordinator, type CoordinatorOptions } from "../../src/coordinator/Coordinator.js";
import { Graph } from "../../src/session/Graph.js";
import { SessionRunArgs, SessionRunHook, hook, type SessionRunContext } from "../../src/hook/SessionRunHook.js";
import type { SessionEvent } from "../../src/events/SessionEvent.js";
import { silentLogger } from "../../src/Logger.js";
import { EventRecorder, FakeSession, FakeSessionCreator, flush, HookRecorder, RecordingLogger, VirtualClock } from "../../src/testing/index.js";

const create = (creator: FakeSessionCreator, hooks: SessionRunHook[] = [], extra: object = {}) =>
  MonitoredSession.create({ sessionCreator: creator, hooks, logger: silentLogger, clock: new VirtualClock(), ...extra });

/**
 * A coordinator task that takes a while to wind down once told to stop: a few event-loop turns
 * after the stop, no real time. `ended` says it finished; `sessionClosed`, whether `session` was
 * already closed then (closing joins the tasks first, so it must not be).
 */
const slowTask = (session: FakeSession) => {
  const state = { ended: false, sessionClosed: false };
  const body = async (signal: AbortSignal): Promise<void> => {
    if (!signal.aborted) await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
    for (let i = 0; i < 10; i++) await new Promise((resolve) => setImmediate(resolve));
    state.sessionClosed = session.closed;
    state.ended = true;
  };
  return { state, body };
};

describe("HookedSession (through MonitoredSession)", () => {
  it("HookedSessionTest.testRunPassesAllArguments: fetches, feeds, options and metadata reach the raw session", async () => {
    const creator = new FakeSessionCreator(() => new FakeSession({ ops: { echo: (c) => c.feeds["x"] } }));
    const sess = await create(creator);
    const meta = {};
    const out = await sess.run({ a: "echo" }, { x: 7 }, { traceLevel: 2 }, meta);
    expect(out).toEqual({ a: 7 });
    const call = creator.last?.calls[0];
    expect(call?.fetches).toEqual({ a: "echo" });
    expect(call?.feeds).toEqual({ x: 7 });
    expect(call?.options).toEqual({ traceLevel: 2 });
    await sess.close();
  });

  it("HookedSessionTest.testCallsHooksBeginEnd: one beforeRun and afterRun per hook, null results, the same context", async () => {
    const creator = new FakeSessionCreator();
    const a = new HookRecorder("a");
    const b = new HookRecorder("b");
    const sess = await create(creator, [a, b]);
    await sess.run("train", { unused: 1 });
    for (const h of [a, b]) {
      expect(h.counts.beforeRun).toBe(1);
      expect(h.counts.afterRun).toBe(1);
      const run = h.runs[0];
      expect(run?.values?.results).toBeNull();
      expect(run?.values?.options).toEqual({});
      expect(run?.values?.runMetadata).toEqual({});
      expect(run?.ctx.originalArgs).toEqual(SessionRunArgs("train", { unused: 1 }));
      expect(run?.ctx.session).toBe(creator.last);
    }
    await sess.close();
  });

  it("HookedSessionTest.testShouldStop: a hook's stop request takes effect after the run; a further run raises", async () => {
    const stopper = new HookRecorder("stopper", { requestStopAtRun: 2 });
    const other = new HookRecorder("other");
    const sess = await create(new FakeSessionCreator(), [stopper, other]);
    await sess.run("train");
    expect(sess.shouldStop()).toBe(false);
    await sess.run("train");
    // Every hook got afterRun for the run that requested the stop.
    expect(other.counts.afterRun).toBe(2);
    expect(sess.shouldStop()).toBe(true);
    await expect(sess.run("train")).rejects.toThrow(new RuntimeError("Run called even after should_stop requested."));
    await sess.close();
  });

  it("HookedSessionTest.testFetchesHookRequests: hook fetches ride on the same run and are split back out", async () => {
    const creator = new FakeSessionCreator(() => new FakeSession({ ops: { a: () => 1, b: () => 2, c: () => 3 } }));
    const h1 = new HookRecorder("h1", { fetches: "b" });
    const h2 = new HookRecorder("h2", { fetches: { nested: ["c", "a"] } });
    const sess = await create(creator, [h1, h2]);
    expect(await sess.run(["a"])).toEqual([1]);
    expect(h1.runs[0]?.values?.results).toBe(2);
    expect(h2.runs[0]?.values?.results).toEqual({ nested: [3, 1] });
    expect(creator.last?.calls).toHaveLength(1);
    await sess.close();
  });

  const adder = () => new FakeSession({ ops: { sum: (c) => Object.values(c.feeds).reduce((x: number, y) => x + (y as number), 0) } });

  it("HookedSessionTest.testOnlyHooksHaveFeeds: feeds from two hooks are merged (5 + 10 = 15)", async () => {
    const sess = await create(new FakeSessionCreator(adder), [
      new HookRecorder("a", { feeds: { x: 5 } }),
      new HookRecorder("b", { feeds: { y: 10 } }),
    ]);
    expect(await sess.run("sum")).toBe(15);
    await sess.close();
  });

  it("HookedSessionTest.testBothHooksAndUserHaveFeeds: user and hook feeds merge (35); the user's object is untouched", async () => {
    const sess = await create(new FakeSessionCreator(adder), [
      new HookRecorder("a", { feeds: { x: 5 } }),
      new HookRecorder("b", { feeds: { y: 10 } }),
    ]);
    const userFeeds = { z: 20 };
    expect(await sess.run("sum", userFeeds)).toBe(35);
    expect(userFeeds).toEqual({ z: 20 });
    await sess.close();
  });

  it("HookedSessionTest.testHooksFeedConflicts: two hooks feeding one input is an error", async () => {
    const sess = await create(new FakeSessionCreator(adder), [
      new HookRecorder("a", { feeds: { x: 5 } }),
      new HookRecorder("b", { feeds: { x: 10 } }),
    ]);
    await expect(sess.run("sum")).rejects.toThrow(/Same tensor is fed by two hooks\. Conflict\(s\): \['x'\]/);
    await sess.close();
  });

  it("HookedSessionTest.testHooksAndUserFeedConflicts: a hook and the user feeding one input is an error", async () => {
    const sess = await create(new FakeSessionCreator(adder), [new HookRecorder("a", { feeds: { x: 5 } })]);
    await expect(sess.run("sum", { x: 1 })).rejects.toThrow(/Same tensor is fed by a SessionRunHook and user/);
    await sess.close();
  });

  it("afterRun is not called when the run throws; beforeRun of later hooks is skipped when one throws", async () => {
    const creator = new FakeSessionCreator(() => new FakeSession().injectError(new UnknownError("boom"), { atCall: 1 }));
    const log: string[] = [];
    const sess = await create(creator, [new HookRecorder("a", { log }), new HookRecorder("b", { log })]);
    await expect(sess.run("train")).rejects.toThrow("boom");
    expect(log.filter((l) => l.includes("Run"))).toEqual(["a.beforeRun", "b.beforeRun"]);

    const log2: string[] = [];
    const sess2 = await create(new FakeSessionCreator(), [
      new HookRecorder("a", { log: log2, throwIn: { method: "beforeRun", error: new Error("hook failed") } }),
      new HookRecorder("b", { log: log2 }),
    ]);
    await expect(sess2.run("train")).rejects.toThrow("hook failed");
    expect(log2.filter((l) => l.includes("Run"))).toEqual(["a.beforeRun"]);
    // Closed as after an error: hooks' end does not run.
    await withSession(sess, () => Promise.reject(new Error("x"))).catch(() => undefined);
    await withSession(sess2, () => Promise.reject(new Error("x"))).catch(() => undefined);
  });

  it("an afterRun error skips later hooks' afterRun and does not record the stop request", async () => {
    const log: string[] = [];
    const sess = await create(new FakeSessionCreator(), [
      new HookRecorder("stopper", { log, requestStopAtRun: 1 }),
      new HookRecorder("bad", { log, throwIn: { method: "afterRun", error: new Error("after failed") } }),
      new HookRecorder("late", { log }),
    ]);
    await expect(sess.run("train")).rejects.toThrow("after failed");
    expect(log).not.toContain("late.afterRun");
    expect(sess.shouldStop()).toBe(false);
    await sess.close();
  });

  it("async hooks are awaited in order, interleaved with sync ones", async () => {
    const log: string[] = [];
    const sess = await create(new FakeSessionCreator(), [
      new HookRecorder("a", { log, async: true, fetches: "global_step" }),
      new HookRecorder("b", { log }),
      new HookRecorder("c", { log, async: true }),
    ]);
    await sess.run("train");
    await sess.close();
    expect(log).toEqual([
      "a.begin", "b.begin", "c.begin",
      "a.afterCreateSession", "b.afterCreateSession", "c.afterCreateSession",
      "a.beforeRun", "b.beforeRun", "c.beforeRun",
      "a.afterRun", "b.afterRun", "c.afterRun",
      "a.end", "b.end", "c.end",
    ]);
  });

  it("MonitoredSessionTest.test_merge_run_options_from_hooks: max of numbers, OR of flags, watches concatenated", async () => {
    const creator = new FakeSessionCreator();
    const sess = await create(creator, [
      new HookRecorder("a", { options: { traceLevel: 3, timeoutInMs: 5000, outputPartitionGraphs: false, debugTensorWatchOpts: ["a"] } }),
      new HookRecorder("b", { options: { traceLevel: 2, timeoutInMs: 60000, outputPartitionGraphs: true, debugTensorWatchOpts: ["b"], reportTensorAllocationsUponOom: true } }),
    ]);
    await sess.run("train");
    expect(creator.last?.calls[0]?.options).toEqual({
      traceLevel: 3,
      timeoutInMs: 60000,
      outputPartitionGraphs: true,
      debugTensorWatchOpts: ["a", "b"],
      reportTensorAllocationsUponOom: true,
    });
    await sess.close();
  });

  it("MonitoredSessionTest.test_merge_caller_and_hook_run_options: the caller's watches come first", async () => {
    const creator = new FakeSessionCreator();
    const sess = await create(creator, [new HookRecorder("a", { options: { traceLevel: 1, debugTensorWatchOpts: ["hook"] } })]);
    const callerOptions = { traceLevel: 2, debugTensorWatchOpts: ["caller"] };
    await sess.run("train", undefined, callerOptions);
    expect(creator.last?.calls[0]?.options).toEqual({ traceLevel: 2, debugTensorWatchOpts: ["caller", "hook"] });
    expect(callerOptions).toEqual({ traceLevel: 2, debugTensorWatchOpts: ["caller"] });
    await sess.close();
  });
});

describe("hook ordering constraints", () => {
  const named = (name: string, extra: object = {}, log: string[]) =>
    Object.assign(hook(name, { beforeRun: () => void log.push(name) }), extra);

  it("keeps registration order without constraints and moves a hook after its provider", async () => {
    const log: string[] = [];
    const hooks = [
      named("consumer", { runsAfter: ["metrics"] }, log),
      named("plain", {}, log),
      named("producer", { provides: ["metrics"] }, log),
    ];
    const sess = await create(new FakeSessionCreator(), hooks);
    await sess.run("train");
    expect(log).toEqual(["plain", "producer", "consumer"]);
    await sess.close();
  });

  it("rejects a missing provider and a cycle at construction, naming them", async () => {
    const log: string[] = [];
    await expect(create(new FakeSessionCreator(), [named("x", { runsAfter: ["nothing"] }, log)])).rejects.toThrow(
      new ValueError('hook "x" runs after "nothing", but no hook provides "nothing"'),
    );
    await expect(
      create(new FakeSessionCreator(), [
        named("a", { provides: ["A"], runsAfter: ["B"] }, log),
        named("b", { provides: ["B"], runsAfter: ["A"] }, log),
      ]),
    ).rejects.toThrow(/cycle: (a -> b -> a|b -> a -> b)/);
  });
});

describe("MonitoredSession", () => {
  it("MonitoredSessionTest.test_defaults: begin once, session created eagerly, afterCreateSession with a coordinator", async () => {
    const creator = new FakeSessionCreator();
    const rec = new HookRecorder("rec");
    const sess = await create(creator, [rec]);
    expect(creator.created).toHaveLength(1);
    expect(rec.counts).toEqual({ begin: 1, afterCreateSession: 1, beforeRun: 0, afterRun: 0, end: 0 });
    expect(rec.sessions[0]?.coord).toBe(sess.coord);
    expect(sess.rawSession).toBe(creator.last);
    expect(sess.shouldStop()).toBe(false);
    await sess.close();
    expect(rec.counts.end).toBe(1);
    expect(sess.closed).toBe(true);
    expect(sess.shouldStop()).toBe(true);
    expect(creator.last?.closed).toBe(true);
  });

  it("MonitoredSessionTest.test_retry_initialization_on_aborted_error: session creation retries preemption errors", async () => {
    const creator = new FakeSessionCreator(undefined, [new AbortedError("init aborted"), new UnavailableError("down")]);
    const rec = new HookRecorder("rec");
    const sess = await create(creator, [rec]);
    expect(creator.created).toHaveLength(1);
    expect(rec.counts.afterCreateSession).toBe(1);
    await sess.close();
  });

  it("a non-preemption error during creation propagates", async () => {
    await expect(create(new FakeSessionCreator(undefined, [new UnknownError("bad config")]))).rejects.toThrow("bad config");
  });

  for (const [name, ErrorType] of [["aborted", AbortedError], ["unavailable", UnavailableError]] as const) {
    it(`MonitoredSessionTest.test_retry_on_${name}_error: a hook raising in the 4th beforeRun re-creates the session and retries`, async () => {
      const creator = new FakeSessionCreator();
      let calls = 0;
      const flaky = hook("flaky", {
        beforeRun: () => {
          if (++calls === 4) throw new ErrorType("preempted");
        },
      });
      const rec = new HookRecorder("rec");
      const sess = await create(creator, [flaky, rec]);
      for (let i = 1; i <= 3; i++) expect(await sess.run("train")).toBe(i);
      // The 4th call fails in beforeRun; a new session (global step back at 0) runs it.
      expect(await sess.run("train")).toBe(1);
      expect(creator.created).toHaveLength(2);
      expect(creator.created[0]?.closed).toBe(true);
      expect(rec.counts.begin).toBe(1);
      expect(rec.counts.afterCreateSession).toBe(2);
      await sess.close();
    });
  }

  it("a raw session that answers synchronously (runMaybeSync) and throws AbortedError is replaced, and the run retried on the new one", async () => {
    const g = new Graph();
    const step = g.globalStep();
    let calls = 0;
    g.op("train", (ctx) => {
      calls++;
      if (calls === 3) throw new AbortedError("abort on the third call");
      return ctx.assignAdd(step, 1);
    });
    const created: ReturnType<Graph["session"]>[] = [];
    const sess = await MonitoredSession.create({
      sessionCreator: {
        createSession: async () => {
          const s = g.session();
          await s.variables.initialize();
          created.push(s);
          return s;
        },
      },
      logger: silentLogger,
      clock: new VirtualClock(),
    });
    expect(await sess.run("train")).toBe(1);
    expect(await sess.run("train")).toBe(2);
    // The third call throws synchronously; a new session (its global step at 0) runs it again.
    expect(await sess.run("train")).toBe(1);
    expect(created).toHaveLength(2);
    await sess.close();
  });

  it("RecoverableSessionTest.test_recovery: sessions aborting after 1, 2 and 3 runs are replaced in turn", async () => {
    const abortAfter = (n: number) => {
      const s = new FakeSession({ ops: { v: (c) => c.call } });
      s.injectError(new AbortedError(`abort after ${n}`), { atCall: n + 1 });
      return s;
    };
    const sessions = [abortAfter(1), abortAfter(2), abortAfter(3)];
    const creator = new FakeSessionCreator(() => {
      throw new RangeError("no more sessions");
    }, sessions);
    const sess = await create(creator);
    expect(await sess.run("v")).toBe(1);
    expect(await sess.run("v")).toBe(1); // first aborted, second session's 1st call
    expect(await sess.run("v")).toBe(2);
    expect(await sess.run("v")).toBe(1); // third session
    expect(await sess.run("v")).toBe(2);
    expect(await sess.run("v")).toBe(3);
    // The third session aborts, and the creator's own error surfaces.
    await expect(sess.run("v")).rejects.toThrow("no more sessions");
    expect(creator.created).toEqual(sessions);
  });

  it("RecoverableSessionTest.test_recovery_from_coordinator_exception: a task's Aborted error makes shouldStop false and re-creates", async () => {
    const creator = new FakeSessionCreator();
    const sess = await create(creator);
    sess.coord?.requestStop(new AbortedError("task preempted"));
    expect(sess.shouldStop()).toBe(false);
    expect(await sess.run("train")).toBe(1);
    expect(creator.created).toHaveLength(2);
    expect(sess.shouldStop()).toBe(false);
    await sess.close();
  });

  it("RecoverableSessionTest.test_recovery_from_non_preemption_in_coordinator: shouldStop is true, no re-creation, close raises", async () => {
    const creator = new FakeSessionCreator();
    const sess = await create(creator);
    sess.coord?.requestStop(new UnknownError("task failed"));
    expect(sess.shouldStop()).toBe(true);
    expect(creator.created).toHaveLength(1);
    // run() still works after a non-preemption task error.
    expect(await sess.run("train")).toBe(1);
    await expect(sess.close()).rejects.toThrow("task failed");
    expect(sess.closed).toBe(true);
  });

  it("RecoverableSessionTest.test_recovery_from_session_getting_stuck: Cancelled in the main run with Aborted in the coordinator recovers", async () => {
    const creator = new FakeSessionCreator();
    const sess = await create(creator);
    creator.last?.injectError(new CancelledError("stuck"), { atCall: 2 });
    expect(await sess.run("train")).toBe(1);
    sess.coord?.requestStop(new AbortedError("worker lost"));
    expect(await sess.run("train")).toBe(1); // new session
    expect(creator.created).toHaveLength(2);
    await sess.close();
  });

  it("RecoverableSessionTest.test_recovery_from_coordinator_exception, then close(): end() gets the re-created session and close() waits for the old one", async () => {
    // TensorFlow's should_stop() closes and re-creates the session before returning, so a
    // close() right after it runs hooks' end() on the new session, and nothing of the old one
    // outlives close().
    const creator = new FakeSessionCreator();
    const ends: { session: unknown; step: unknown }[] = [];
    const finalStep: SessionRunHook = {
      end: async (s) => {
        ends.push({ session: s, step: await s.run("global_step") });
      },
    };
    const sess = await create(creator, [finalStep]);
    const first = creator.last as FakeSession;
    // A task that takes a while to wind down once told to stop.
    const slow = slowTask(first);
    sess.coord?.spawn("slow", slow.body);
    sess.coord?.requestStop(new AbortedError("task preempted"));
    expect(sess.shouldStop()).toBe(false);
    await sess.close();
    expect(slow.state).toEqual({ ended: true, sessionClosed: false });
    expect(first.closed).toBe(true);
    expect(creator.created).toHaveLength(2);
    expect(ends).toEqual([{ session: creator.created[1], step: 0 }]);
    expect(creator.created[1]?.closed).toBe(true);
  });

  it("RecoverableSessionTest.test_recovery_from_coordinator_exception, then a failing body: the old session is closed before withSession rethrows", async () => {
    const creator = new FakeSessionCreator();
    const sess = await create(creator);
    const first = creator.last as FakeSession;
    const slow = slowTask(first);
    sess.coord?.spawn("slow", slow.body);
    sess.coord?.requestStop(new AbortedError("task preempted"));
    await expect(
      withSession(sess, (s) => {
        expect(s.shouldStop()).toBe(false);
        throw new UnknownError("body failed");
      }),
    ).rejects.toThrow("body failed");
    expect(slow.state).toEqual({ ended: true, sessionClosed: false });
    expect(first.closed).toBe(true);
    expect(creator.created).toHaveLength(1);
  });

  it("HookedSession with an async beforeRun: a hook/user feed conflict while a task reported Aborted recovers (the coordinator's root cause wins)", async () => {
    const creator = new FakeSessionCreator();
    let conflicting = true;
    const asyncFeeder: SessionRunHook = {
      beforeRun: async () => {
        if (!conflicting) return undefined;
        conflicting = false;
        return SessionRunArgs(null, { x: 1 });
      },
    };
    const sess = await create(creator, [asyncFeeder]);
    sess.coord?.requestStop(new AbortedError("worker lost"));
    // TensorFlow: the RuntimeError of the conflict meets the coordinator's AbortedError, which
    // is raised instead, so the session is re-created and the run retried.
    expect(await sess.run("train", { x: 2 })).toBe(1);
    expect(creator.created).toHaveLength(2);
    await sess.close();
  });

  for (const async of [false, true]) {
    it(`MonitoredSessionTest.test_retry_on_aborted_error: a raw session whose run throws (not rejects) AbortedError is recovered from (${async ? "async" : "sync"} hooks)`, async () => {
      let calls = 0;
      const creator = new FakeSessionCreator(() => {
        const s = new FakeSession();
        const run = s.run.bind(s);
        // A hand-written Session whose run throws synchronously on the first call.
        Object.assign(s, {
          run: (...args: Parameters<FakeSession["run"]>) => {
            if (calls++ === 0) throw new AbortedError("connection reset");
            return run(...args);
          },
        });
        return s;
      });
      const sess = await create(creator, [new HookRecorder("h", { async })]);
      expect(await sess.run("train")).toBe(1);
      expect(creator.created).toHaveLength(2);
      await sess.close();
    });
  }

  it("CoordinatedSessionTest.test_dont_request_stop_on_exception_in_main_thread", async () => {
    const creator = new FakeSessionCreator(() => new FakeSession().injectError(new UnknownError("main"), { atCall: 1 }));
    const sess = await create(creator);
    await expect(sess.run("train")).rejects.toThrow("main");
    expect(sess.coord?.shouldStop()).toBe(false);
    expect(sess.shouldStop()).toBe(false);
    await sess.close();
  });

  it("CoordinatedSessionTest.test_stop_threads_on_close: registered tasks are stopped and joined by close", async () => {
    const sess = await create(new FakeSessionCreator());
    const coord = sess.coord;
    let stopped = false;
    coord?.spawn("worker", async (signal) => {
      await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve()));
      stopped = true;
    });
    await sess.close();
    expect(stopped).toBe(true);
    expect(coord?.joined).toBe(true);
  });

  it("MonitoredSessionTest.test_regular_exception_reported_to_coord_pass_through_run: the original run error wins over a non-preemption task error", async () => {
    const creator = new FakeSessionCreator(() => new FakeSession().injectError(new UnknownError("main error"), { atCall: 2 }));
    const sess = await create(creator);
    await sess.run("train");
    sess.coord?.requestStop(new RangeError("task error"));
    await expect(sess.run("train")).rejects.toThrow("main error");
    await expect(sess.close()).rejects.toThrow("task error");
  });

  it("MonitoredSessionTest.test_with_statement_and_close: a second close raises 'Session is already closed.'", async () => {
    const rec = new HookRecorder("rec");
    const sess = await create(new FakeSessionCreator(), [rec]);
    await sess.close();
    await expect(sess.close()).rejects.toThrow(new RuntimeError("Session is already closed."));
    await expect(sess.run("train")).rejects.toThrow("Session is already closed.");
    expect(rec.counts.end).toBe(1);
  });

  it("MonitoredSessionTest.test_graph_finalized_during_run_unfinalized_after_exit / test_keep_finalized_graph_as_finalized", async () => {
    const g = new Graph();
    g.globalStep();
    const creator = { createSession: async () => { const s = g.session(); await s.variables.initialize(); return s; } };
    const sess = await MonitoredSession.create({ sessionCreator: creator, graph: g, logger: silentLogger });
    expect(g.finalized).toBe(true);
    expect(sess.graph).toBe(g);
    await sess.close();
    expect(g.finalized).toBe(false);
    expect(sess.graph).toBeUndefined();

    g.finalize();
    const sess2 = await MonitoredSession.create({ sessionCreator: creator, graph: g, logger: silentLogger });
    await sess2.close();
    expect(g.finalized).toBe(true);
  });

  it("hook end() errors propagate, and the session is still closed", async () => {
    const creator = new FakeSessionCreator();
    const sess = await create(creator, [new HookRecorder("bad", { throwIn: { method: "end", error: new Error("end failed") } })]);
    await expect(sess.close()).rejects.toThrow("end failed");
    expect(sess.closed).toBe(true);
    expect(creator.last?.closed).toBe(true);
  });

  it("validates its options", async () => {
    await expect(MonitoredSession.create({} as never)).rejects.toThrow(ValueError);
    await expect(create(new FakeSessionCreator(), [], { stopGracePeriodSecs: -1 })).rejects.toThrow(/stopGracePeriodSecs/);
  });
});

describe("withSession and await using", () => {
  it("MonitoredSessionTest.test_stop_cleanly_when_no_exception_in_with_body", async () => {
    const rec = new HookRecorder("rec");
    let captured: MonitoredSession | undefined;
    const result = await withSession(create(new FakeSessionCreator(), [rec]), async (sess) => {
      captured = sess;
      await sess.run("train");
      return "done";
    });
    expect(result).toBe("done");
    expect(rec.counts.end).toBe(1);
    expect(captured?.closed).toBe(true);
  });

  for (const [name, error] of [["out_of_range", new OutOfRangeError("input exhausted")], ["stop_iteration", new StopIteration("done")]] as const) {
    it(`MonitoredSessionTest.test_exit_cleanly_on_${name}_exception: end() runs, the error is suppressed, shouldStop is true`, async () => {
      const rec = new HookRecorder("rec");
      const creator = new FakeSessionCreator(() => new FakeSession().injectError(error, { atCall: 2 }));
      let captured: MonitoredSession | undefined;
      const result = await withSession(create(creator, [rec]), async (sess) => {
        captured = sess;
        for (;;) await sess.run("train");
      });
      expect(result).toBeUndefined();
      expect(rec.counts.afterRun).toBe(1);
      expect(rec.counts.end).toBe(1);
      expect(captured?.shouldStop()).toBe(true);
    });
  }

  it("MonitoredSessionTest.test_raises_regular_exceptions_in_with_body: end() is skipped, the session closed, the error rethrown", async () => {
    const rec = new HookRecorder("rec");
    const creator = new FakeSessionCreator();
    let captured: MonitoredSession | undefined;
    await expect(
      withSession(create(creator, [rec]), async (sess) => {
        captured = sess;
        throw new RangeError("body failed");
      }),
    ).rejects.toThrow("body failed");
    expect(rec.counts.end).toBe(0);
    expect(captured?.closed).toBe(true);
    expect(creator.last?.closed).toBe(true);
  });

  it("MonitoredSessionTest.test_regular_exception_pass_through_run", async () => {
    const rec = new HookRecorder("rec");
    const creator = new FakeSessionCreator(() => new FakeSession().injectError(new UnknownError("run failed"), { atCall: 3 }));
    await expect(
      withSession(create(creator, [rec]), async (sess) => {
        for (;;) await sess.run("train");
      }),
    ).rejects.toThrow("run failed");
    expect(rec.counts.end).toBe(0);
  });

  it("withSession accepts options and creates the session", async () => {
    const creator = new FakeSessionCreator();
    const v = await withSession({ sessionCreator: creator, logger: silentLogger }, (sess) => sess.run("train"));
    expect(v).toBe(1);
    expect(creator.last?.closed).toBe(true);
  });

  it("await using closes the session (hooks' end runs) at the end of the block", async () => {
    const rec = new HookRecorder("rec");
    const creator = new FakeSessionCreator();
    {
      await using sess = await create(creator, [rec]);
      await sess.run("train");
    }
    expect(rec.counts.end).toBe(1);
    expect(creator.last?.closed).toBe(true);
  });
});

describe("runStepFn", () => {
  it("MonitoredSessionTest.test_step_fn_example: returns the step function's value; runWithHooks goes through hooks", async () => {
    const rec = new HookRecorder("rec", { fetches: "global_step" });
    const sess = await create(new FakeSessionCreator(), [rec]);
    const v = await sess.runStepFn(async (ctx: StepContext) => {
      const raw = await ctx.session.run("global_step");
      const step = await ctx.runWithHooks("train");
      return [raw, step];
    });
    expect(v).toEqual([0, 1]);
    expect(rec.counts.beforeRun).toBe(1);
    expect(rec.runs[0]?.values?.results).toBe(0);
    await sess.close();
  });

  for (const Kind of [MonitoredSession, SingularMonitoredSession]) {
    it(`MonitoredSessionTest.test_step_fn_with_hooks (${Kind.name}): runWithHooks takes run() arguments, run metadata included`, async () => {
      // TensorFlow's run_with_hooks(*args, **kwargs) is MonitoredSession.run with every argument.
      const rec = new HookRecorder("rec");
      const sess = await Kind.create({ sessionCreator: new FakeSessionCreator(), hooks: [rec], logger: silentLogger, clock: new VirtualClock() });
      const meta = {};
      await sess.runStepFn((ctx) => ctx.runWithHooks("train", undefined, { traceLevel: 3 }, meta));
      expect(rec.runs[0]?.values?.options).toEqual({ traceLevel: 3 });
      expect(rec.runs[0]?.values?.runMetadata).toBe(meta);
      await sess.close();
    });
  }

  it("MonitoredSessionTest.test_step_with_extra_arguments: a step function must take exactly one parameter", async () => {
    const sess = await create(new FakeSessionCreator());
    await expect(sess.runStepFn(((a: StepContext, b: number) => [a, b]) as never)).rejects.toThrow(ValueError);
    await expect(sess.runStepFn((() => 1) as never)).rejects.toThrow(/may either have one `step_context` argument/);
    await sess.close();
  });

  it("MonitoredSessionTest.test_step_request_stop_without_a_with_block: StopIteration reaches the caller; shouldStop stays false", async () => {
    const sess = await create(new FakeSessionCreator());
    await expect(sess.runStepFn((ctx: StepContext) => ctx.requestStop())).rejects.toThrow(
      new StopIteration("step_fn has requested the iterations to stop."),
    );
    expect(sess.shouldStop()).toBe(false);
    await sess.close();
  });

  it("MonitoredSessionTest.test_step_request_stop_in_a_loop / test_step_fn_with_hooks_and_request_stop: clean exit in withSession; hooks never called", async () => {
    const rec = new HookRecorder("rec");
    let steps = 0;
    await withSession(create(new FakeSessionCreator(), [rec]), async (sess) => {
      while (!sess.shouldStop()) {
        await sess.runStepFn((ctx: StepContext) => {
          if (++steps === 3) ctx.requestStop();
        });
      }
    });
    expect(steps).toBe(3);
    expect(rec.counts.beforeRun).toBe(0);
    expect(rec.counts.end).toBe(1);
  });

  it("MonitoredSessionTest.test_recovers_from_an_exception_in_step_fn_after_hooks: the whole step function re-runs after recovery", async () => {
    const creator = new FakeSessionCreator();
    const sideEffects: number[] = [];
    const sess = await create(creator);
    let attempt = 0;
    const v = await sess.runStepFn(async (ctx: StepContext) => {
      sideEffects.push(++attempt);
      const step = await ctx.runWithHooks("train");
      if (attempt === 1) throw new AbortedError("preempted inside step_fn");
      return [step, ctx.session];
    });
    expect(sideEffects).toEqual([1, 2]);
    expect(creator.created).toHaveLength(2);
    expect(v).toEqual([1, creator.created[1]]);
    await sess.close();
  });

  it("MonitoredSessionTest.test_step_fn_exception_from_before_run: recovery re-runs the step function", async () => {
    let calls = 0;
    const flaky = hook("flaky", {
      beforeRun: () => {
        if (++calls === 1) throw new AbortedError("abort in beforeRun");
      },
    });
    const creator = new FakeSessionCreator();
    const sess = await create(creator, [flaky]);
    let runs = 0;
    const v = await sess.runStepFn(async (ctx: StepContext) => {
      runs++;
      return ctx.runWithHooks("train");
    });
    expect(runs).toBe(2);
    expect(v).toBe(1);
    expect(creator.created).toHaveLength(2);
    await sess.close();
  });

  it("MonitoredSessionTest.test_step_fn_doesnt_recover_when_it_wasnt_asked_to (Singular)", async () => {
    const creator = new FakeSessionCreator();
    const sess = await SingularMonitoredSession.create({ sessionCreator: creator, logger: silentLogger });
    await expect(
      sess.runStepFn(async (_ctx: StepContext) => {
        throw new AbortedError("no recovery");
      }),
    ).rejects.toThrow("no recovery");
    expect(creator.created).toHaveLength(1);
    await sess.close();
  });
});

describe("SingularMonitoredSession", () => {
  it("SingularMonitoredSessionTest.test_do_not_handle_aborted_error", async () => {
    const creator = new FakeSessionCreator(() => new FakeSession().injectError(new AbortedError("aborted"), { atCall: 1 }));
    const sess = await SingularMonitoredSession.create({ sessionCreator: creator, logger: silentLogger });
    await expect(sess.run("train")).rejects.toThrow(AbortedError);
    expect(creator.created).toHaveLength(1);
    await sess.close();
  });

  it("SingularMonitoredSessionTest: shouldStop raises a task's error; run still works; close raises it", async () => {
    const sess = await SingularMonitoredSession.create({ sessionCreator: new FakeSessionCreator(), logger: silentLogger });
    sess.coord?.requestStop(new UnknownError("task error"));
    expect(() => sess.shouldStop()).toThrow("task error");
    expect(await sess.run("train")).toBe(1);
    await expect(sess.close()).rejects.toThrow("task error");
  });

  it("SingularMonitoredSessionTest.test_raw_session / stops cleanly: rawSession is undefined after close", async () => {
    const creator = new FakeSessionCreator();
    const sess = await SingularMonitoredSession.create({ sessionCreator: creator, logger: silentLogger });
    expect(sess.rawSessionOrUndefined()).toBe(creator.last);
    await withSession(sess, async (s) => {
      await s.run("train");
    });
    expect(sess.rawSessionOrUndefined()).toBeUndefined();
    expect(sess.shouldStop()).toBe(true);
  });
});

describe("events$", () => {
  it("carries session created, before/after run, stop requested, end and closed, in order", async () => {
    const clock = new VirtualClock();
    const sess = await MonitoredSession.create({
      sessionCreator: new FakeSessionCreator(),
      hooks: [new HookRecorder("stopper", { requestStopAtRun: 2 })],
      clock,
      logger: silentLogger,
    });
    const all = lastValueFrom(sess.events$.pipe(toArray()));
    while (!sess.shouldStop()) await sess.run("train");
    await sess.close();
    const events: SessionEvent[] = await all;
    // A subscriber after create() first gets the replayed sessionCreated.
    expect(events.map((e) => e.type)).toEqual(["sessionCreated", "beforeRun", "afterRun", "beforeRun", "stopRequested", "afterRun", "end", "closed"]);
    expect(events[4]).toMatchObject({ type: "stopRequested", by: "stopper" });
    expect(events[2]).toMatchObject({ type: "afterRun", run: 1, results: 1, stopRequested: false, time: clock.now() });
  });

  it("an observer given in the options also sees the creation of the first session", async () => {
    const creator = new FakeSessionCreator();
    const events: SessionEvent[] = [];
    const sess = await create(creator, [], { observer: { next: (e: SessionEvent) => events.push(e) } });
    expect(events).toMatchObject([{ type: "sessionCreated", recovery: 0, restoredFrom: null, session: creator.last }]);
    await sess.close();
    expect(events.map((e) => e.type)).toEqual(["sessionCreated", "end", "closed"]);
  });

  it("an observer given in the options gets the error when creation fails", async () => {
    let failure: unknown;
    await expect(
      create(new FakeSessionCreator(undefined, [new UnknownError("cannot connect")]), [], { observer: { error: (e: unknown) => (failure = e) } }),
    ).rejects.toThrow("cannot connect");
    expect(failure).toBeInstanceOf(UnknownError);
  });

  it("emits sessionAborted and sessionCreated on recovery", async () => {
    const first = new FakeSession().injectError(new AbortedError("x"), { atCall: 1 });
    const creator = new FakeSessionCreator(undefined, [first]);
    const sess = await create(creator);
    const events: SessionEvent[] = [];
    const sub = sess.events$.subscribe((e) => events.push(e));
    expect(await sess.run("train")).toBe(1);
    sub.unsubscribe();
    // The recoverable layer's line about the error is a `log` event too (the log observer prints it).
    expect(events.map((e) => e.type)).toEqual(["sessionCreated", "beforeRun", "log", "sessionAborted", "sessionCreated", "beforeRun", "afterRun"]);
    expect(events[2]).toMatchObject({ type: "log", level: "info", message: expect.stringMatching(/^An error was raised\. .*Error: AbortedError: x$/) as unknown });
    expect(events[4]).toMatchObject({ type: "sessionCreated", recovery: 1, session: creator.created[1], cause: "AbortedError: x" });
    await sess.close();
  });

  it("hooks can publish their own events through begin(env)", async () => {
    const sess = await create(new FakeSessionCreator(), [
      {
        name: "announcer",
        begin(env) {
          this.env = env;
        },
        afterRun() {
          this.env?.emit({ type: "warning", time: 0, message: "hello" });
        },
      } as SessionRunHook & { env?: import("../../src/hook/SessionRunHook.js").HookEnv },
    ]);
    const recorder = new EventRecorder();
    recorder.record(sess.events$);
    await sess.run("train");
    expect(recorder.ofType("warning").map((e) => e.message)).toEqual(["hello"]);
    // An event emitted directly is data: no line comes with it.
    expect(recorder.messages()).toEqual([]);
    await sess.close();
  });

  it("loop$ runs until a stop and completes", async () => {
    const sess = await create(new FakeSessionCreator(), [new HookRecorder("s", { requestStopAtRun: 3 })]);
    const values = await lastValueFrom(sess.loop$("train").pipe(toArray()));
    expect(values).toEqual([1, 2, 3]);
    await sess.close();
  });
});

describe("coordinatorFactory", () => {
  /** A fake coordinator: records the options it was made with and its stop requests. */
  class RecordingCoordinator extends Coordinator {
    stops = 0;
    constructor(readonly made: CoordinatorOptions) {
      super(made);
    }
    override requestStop(ex?: unknown): void {
      this.stops++;
      super.requestStop(ex);
    }
  }

  it("each session's coordinator comes from the factory, with the session's clock and logger (its lines reach the session's log observer); close stops it", async () => {
    const made: RecordingCoordinator[] = [];
    const clock = new VirtualClock();
    const first = new FakeSession().injectError(new AbortedError("x"), { atCall: 1 });
    const logger = new RecordingLogger();
    const recorder = new EventRecorder();
    const sess = await MonitoredSession.create({
      sessionCreator: new FakeSessionCreator(undefined, [first]),
      clock,
      logger,
      observer: recorder.listener,
      coordinatorFactory: (options) => {
        const c = new RecordingCoordinator(options);
        made.push(c);
        return c;
      },
    });
    expect(sess.coord).toBe(made[0]);
    expect(made[0]?.made).toMatchObject({ cleanStopExceptionTypes: [], clock });
    made[0]?.made.logger?.warn("from the coordinator", { n: 1 });
    // The coordinator's line is the session's: a `log` event on events$, stamped on its clock...
    expect(recorder.lines("warn")).toEqual([{ type: "log", time: clock.now(), level: "warn", message: "from the coordinator", fields: { n: 1 } }]);
    // ...which the session's log observer prints through its `logger` (the plain-logger path).
    expect(logger.entries).toContainEqual({ level: "warn", message: "from the coordinator", fields: { n: 1 } });
    await sess.run("train"); // aborted: a new session, with a new coordinator
    expect(made).toHaveLength(2);
    expect(sess.coord).toBe(made[1]);
    expect(made[0]?.stops).toBeGreaterThan(0);
    // A stop requested on the fake reaches the session.
    made[1]?.requestStop();
    expect(sess.shouldStop()).toBe(true);
    await sess.close();
  });
});

describe("SessionRunHook base class", () => {
  it("a subclass overriding one method is a hook; SessionRunContext.requestStop is sticky", async () => {
    class StopAfterTwo extends SessionRunHook {
      private n = 0;
      override afterRun(ctx: SessionRunContext): void {
        if (++this.n === 2) ctx.requestStop();
      }
    }
    const sess = await create(new FakeSessionCreator(), [new StopAfterTwo()]);
    let runs = 0;
    while (!sess.shouldStop()) {
      await sess.run("train");
      runs++;
    }
    expect(runs).toBe(2);
    await sess.close();
  });
});

describe("closing: what goes wrong while releasing is said, never lost", () => {
  /** A raw session whose close fails with `error` (a parameter server gone while closing). */
  class FailingClose extends FakeSession {
    constructor(private readonly error: Error) {
      super();
    }
    override close(): void {
      super.close();
      throw this.error;
    }
  }

  it("_WrappedSession.close: a preemption error from closing the aborted session is a line at error, and the session is re-created", async () => {
    const first = new FailingClose(new UnavailableError("ps:0 is gone")).injectError(new AbortedError("x"), { atCall: 1 });
    const creator = new FakeSessionCreator(undefined, [first]);
    const recorder = new EventRecorder();
    const sess = await create(creator, [], { logObserver: recorder.listener });
    expect(await sess.run("train")).toBe(1);
    expect(first.closeCount).toBe(1);
    expect(creator.created).toHaveLength(2);
    expect(recorder.messages("error")).toEqual(["An error occurred when attempting to close the session: UnavailableError: ps:0 is gone"]);
    await sess.close();
  });

  it("MonitoredSession.close: a preemption error from closing the raw session is the session's line (its observers), never the console's", async () => {
    const raw = new FailingClose(new UnavailableError("ps:0 is gone"));
    const recorder = new EventRecorder();
    const printed: string[] = [];
    const spies = (["log", "info", "warn", "error"] as const).map((level) => vi.spyOn(console, level).mockImplementation((...args: unknown[]) => void printed.push(args.map(String).join(" "))));
    try {
      const sess = await create(new FakeSessionCreator(undefined, [raw]), [], { logObserver: recorder.listener });
      await sess.run("train");
      await sess.close();
    } finally {
      for (const spy of spies) spy.mockRestore();
    }
    expect(raw.closeCount).toBe(1);
    expect(recorder.messages("error")).toEqual(["An error occurred when attempting to close the session: UnavailableError: ps:0 is gone"]);
    expect(printed.filter((l) => l.includes("attempting to close the session"))).toEqual([]);
  });

  it("owned resources not released within stopGracePeriodSecs: close returns with a warning; their later failure is a line at error (virtual clock)", async () => {
    const clock = new VirtualClock();
    const recorder = new EventRecorder();
    let failRelease!: (e: Error) => void;
    let disposeCalls = 0;
    const manager: AsyncDisposable = {
      [Symbol.asyncDispose]: () => {
        disposeCalls++;
        return new Promise<void>((_, reject) => (failRelease = reject));
      },
    };
    const sess = await MonitoredSession.create({
      sessionCreator: new FakeSessionCreator(),
      clock,
      logObserver: recorder.listener,
      stopGracePeriodSecs: 3,
      ownedResources: [manager],
    });
    let closed = false;
    const closing = sess.close().then(() => void (closed = true));
    await clock.advance(2999);
    expect(disposeCalls).toBe(1);
    expect(closed).toBe(false);
    expect(recorder.messages("warn")).toEqual([]);
    await clock.advance(1);
    await closing;
    expect(recorder.messages("warn")).toEqual([
      "MonitoredSession.close: the session's resources (its checkpoint manager, waiting for a save) were not released within the stop grace period; they are released when it finishes.",
    ]);
    // The warning comes before the session says it closed.
    expect(recorder.types().slice(-2)).toEqual(["log", "closed"]);
    expect(recorder.messages("error")).toEqual([]);
    failRelease(new Error("EIO: the last save could not be written"));
    await flush();
    expect(recorder.messages("error")).toEqual(["MonitoredSession.close: releasing the session's resources failed: Error: EIO: the last save could not be written"]);
  });

  it("owned resources released within stopGracePeriodSecs: no warning", async () => {
    const clock = new VirtualClock();
    const recorder = new EventRecorder();
    let released = 0;
    const sess = await MonitoredSession.create({
      sessionCreator: new FakeSessionCreator(),
      clock,
      logObserver: recorder.listener,
      stopGracePeriodSecs: 3,
      ownedResources: [{ [Symbol.asyncDispose]: async () => void released++ }],
    });
    await sess.close();
    expect(released).toBe(1);
    expect(recorder.messages("warn")).toEqual([]);
  });
});
