import { describe, expect, it } from "vitest";
import { Subject } from "rxjs";

import { AbortedError } from "../../src/errors.js";
import { silentLogger } from "../../src/Logger.js";
import { MonitoredSession } from "../../src/pipeline/MonitoredSession.js";
import { describeCause, type SessionEvent, type SessionEventOf } from "../../src/events/SessionEvent.js";
import type { HookEnv, SessionRunHook } from "../../src/hook/SessionRunHook.js";
import { FakeSession, FakeSessionCreator, VirtualClock } from "../../src/testing/index.js";

/** A virtual clock that counts its reads. */
class CountingClock extends VirtualClock {
  reads = 0;
  override now(): number {
    this.reads++;
    return super.now();
  }
}

const create = (creator: FakeSessionCreator, hooks: SessionRunHook[], clock: VirtualClock, extra: object = {}) =>
  MonitoredSession.create({ sessionCreator: creator, hooks, logger: silentLogger, clock, ...extra });

/** A hook whose `beforeRun`/`afterRun` take `ms` of virtual time. */
const slowHook = (name: string, clock: VirtualClock, beforeMs: number, afterMs: number): SessionRunHook => ({
  name,
  beforeRun: () => clock.set(clock.now() + beforeMs),
  afterRun: () => clock.set(clock.now() + afterMs),
});

const ofType = <K extends SessionEvent["type"]>(events: readonly SessionEvent[], type: K): SessionEventOf<K>[] =>
  events.filter((e): e is SessionEventOf<K> => e.type === type);

describe("events$: one stream per session", () => {
  it("replays the latest sessionCreated to a late subscriber, then live events", async () => {
    const creator = new FakeSessionCreator();
    const sess = await create(creator, [], new VirtualClock());
    await sess.run("train");
    const events: SessionEvent[] = [];
    const sub = sess.events$.subscribe((e) => events.push(e));
    await sess.run("train");
    sub.unsubscribe();
    expect(events.map((e) => e.type)).toEqual(["sessionCreated", "beforeRun", "afterRun"]);
    expect(events[0]).toMatchObject({ recovery: 0, session: creator.last });
    await sess.close();
  });

  it("after a recovery, a late subscriber gets the re-created session, with the one-line cause", async () => {
    const first = new FakeSession().injectError(new AbortedError("worker 3 was preempted\nmore detail"), { atCall: 1 });
    const creator = new FakeSessionCreator(undefined, [first]);
    const sess = await create(creator, [], new VirtualClock());
    const live: SessionEvent[] = [];
    const sub = sess.events$.subscribe((e) => live.push(e));
    await sess.run("train");
    sub.unsubscribe();
    expect(ofType(live, "sessionAborted")).toMatchObject([{ cause: "AbortedError: worker 3 was preempted" }]);
    expect(ofType(live, "sessionAborted")[0]?.error).toBeInstanceOf(AbortedError);

    const late: SessionEvent[] = [];
    sess.events$.subscribe((e) => late.push(e)).unsubscribe();
    expect(late).toHaveLength(1);
    expect(late[0]).toMatchObject({ type: "sessionCreated", recovery: 1, session: creator.created[1], cause: "AbortedError: worker 3 was preempted" });
    await sess.close();
  });

  it("delivers a run's events before the run's promise resolves", async () => {
    const sess = await create(new FakeSessionCreator(), [], new VirtualClock());
    const events: string[] = [];
    sess.events$.subscribe((e) => events.push(e.type));
    await sess.run("train").then(() => events.push("resolved"));
    expect(events).toEqual(["sessionCreated", "beforeRun", "afterRun", "resolved"]);
    await sess.close();
  });

  it("forwardEvents puts another stream's events on events$ until the session closes; its error becomes a warning", async () => {
    const sess = await create(new FakeSessionCreator(), [], new VirtualClock());
    const events: SessionEvent[] = [];
    sess.events$.subscribe((e) => events.push(e));
    const source = new Subject<SessionEvent>();
    sess.forwardEvents(source);
    source.next({ type: "terminationNoticed", time: 1, source: "SIGTERM" });
    source.error(new Error("watcher died"));
    const other = new Subject<SessionEvent>();
    sess.forwardEvents(other);
    await sess.close();
    expect(other.observed).toBe(false);
    expect(events.map((e) => e.type)).toEqual(["sessionCreated", "terminationNoticed", "log", "warning", "end", "closed"]);
    expect(events[2]).toMatchObject({ level: "warn", message: "a forwarded event stream failed: Error: watcher died" });
    expect(events[3]).toMatchObject({ message: "a forwarded event stream failed: Error: watcher died" });
  });

  it("describeCause gives the error's name and the first line of its message", () => {
    expect(describeCause(new AbortedError("a\nb"))).toBe("AbortedError: a");
    expect(describeCause(new TypeError(""))).toBe("TypeError");
    expect(describeCause("plain\nstring")).toBe("plain");
  });
});

describe("hookTimings: per-hook time attribution", () => {
  const timedSession = async (clock: VirtualClock, extra: object = {}, hooks?: SessionRunHook[]) => {
    const creator = new FakeSessionCreator(
      () =>
        new FakeSession({
          ops: {
            step: () => {
              clock.set(clock.now() + 7);
              return 1;
            },
          },
        }),
    );
    return create(creator, hooks ?? [slowHook("a", clock, 1, 2), slowHook("b", clock, 3, 4)], clock, extra);
  };

  it("is off by default: no hookTimings event, and hooks add no clock read to a run", async () => {
    const clock = new CountingClock();
    const bare = await timedSession(clock, {}, []);
    clock.reads = 0;
    await bare.run("step");
    const bareReads = clock.reads;
    await bare.close();

    const sess = await timedSession(clock);
    clock.reads = 0;
    await sess.run("step");
    // Only the hooks' own reads (two each, for clock.set(clock.now() + ms)) come on top.
    expect(clock.reads).toBe(bareReads + 4);
    const events: SessionEvent[] = [];
    sess.events$.subscribe((e) => events.push(e));
    await sess.run("step");
    expect(ofType(events, "hookTimings")).toEqual([]);
    await sess.close();
  });

  it("with hookTiming: true, spans come in hook order with the virtual clock's durations", async () => {
    const clock = new VirtualClock({ startMs: 1000 });
    const sess = await timedSession(clock, { hookTiming: true });
    const events: SessionEvent[] = [];
    sess.events$.subscribe((e) => events.push(e));
    const start = clock.now();
    await sess.run("step");
    const [t] = ofType(events, "hookTimings");
    expect(t).toEqual({
      type: "hookTimings",
      time: start + 17,
      run: 1,
      runStartMs: start,
      sessionRunStartMs: start + 4,
      sessionRunMs: 7,
      spans: [
        { hook: "a", method: "beforeRun", startMs: start, durationMs: 1 },
        { hook: "b", method: "beforeRun", startMs: start + 1, durationMs: 3 },
        { hook: "a", method: "afterRun", startMs: start + 11, durationMs: 2 },
        { hook: "b", method: "afterRun", startMs: start + 13, durationMs: 4 },
      ],
    });
    // After every afterRun, before the afterRun event.
    expect(events.map((e) => e.type).slice(-2)).toEqual(["hookTimings", "afterRun"]);
    await sess.close();
  });

  it("measures an async hook until its promise settles", async () => {
    const clock = new VirtualClock({ startMs: 0 });
    const asyncHook: SessionRunHook = {
      name: "async",
      afterRun: async () => {
        await Promise.resolve();
        clock.set(clock.now() + 5);
      },
    };
    const sess = await timedSession(clock, { hookTiming: true }, [asyncHook]);
    const events: SessionEvent[] = [];
    sess.events$.subscribe((e) => events.push(e));
    await sess.run("step");
    expect(ofType(events, "hookTimings")[0]?.spans).toEqual([{ hook: "async", method: "afterRun", startMs: 7, durationMs: 5 }]);
    await sess.close();
  });

  it("a hook turns timing on with env.requestHookTiming() while it holds the request", async () => {
    const clock = new VirtualClock();
    let release: (() => void) | undefined;
    const profiler: SessionRunHook = {
      name: "profiler",
      begin: (env: HookEnv) => {
        release = env.requestHookTiming?.();
      },
    };
    const sess = await timedSession(clock, {}, [profiler, slowHook("a", clock, 1, 1)]);
    const events: SessionEvent[] = [];
    sess.events$.subscribe((e) => events.push(e));
    await sess.run("step");
    await sess.run("step");
    release?.();
    release?.(); // idempotent
    await sess.run("step");
    expect(ofType(events, "hookTimings").map((e) => e.run)).toEqual([1, 2]);
    expect(ofType(events, "hookTimings")[0]?.spans.map((s) => `${s.hook}.${s.method}`)).toEqual(["a.beforeRun", "a.afterRun"]);
    await sess.close();
  });
});
