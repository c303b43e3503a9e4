/**
 * A component that lives before or without a session has its own stream: its lines are `log`
 * events there, printed by its own logger until a session adopts them, and again after.
 */
import { describe, expect, it } from "vitest";

import { ComponentEvents } from "../../src/events/componentEvents.js";
import type { SessionEvent } from "../../src/events/SessionEvent.js";
import { MonitoredSession } from "../../src/pipeline/MonitoredSession.js";
import { RecordingLogger } from "../../src/testing/RecordingLogger.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { trainingGraph } from "../util/driveHooks.js";

const session = (logger: RecordingLogger, extra: { eventSources?: ComponentEvents[]; observer?: (e: SessionEvent) => void } = {}): Promise<MonitoredSession> =>
  MonitoredSession.create({ graph: trainingGraph(), clock: new VirtualClock(), logger, ...extra });

/** The messages of `logger` that are not the session manager's own ("Running local_init_op."). */
const mine = (logger: RecordingLogger): string[] => logger.messages().filter((m) => !m.includes("local_init_op"));

describe("ComponentEvents", () => {
  it("its lines are log events on events$, stamped by its clock, and its fallback prints them while no session adopts them", () => {
    const fallback = new RecordingLogger();
    const events = new ComponentEvents(fallback, () => 7);
    const heard: SessionEvent[] = [];
    events.events$.subscribe((e) => heard.push(e));
    events.logger.warn("the lock was stale", { pid: 1 });
    events.emit({ type: "terminationNoticed", time: 8, source: "SIGTERM" });
    expect(heard).toEqual([
      { type: "log", time: 7, level: "warn", message: "the lock was stale", fields: { pid: 1 } },
      { type: "terminationNoticed", time: 8, source: "SIGTERM" },
    ]);
    expect(fallback.entries).toEqual([{ level: "warn", message: "the lock was stale", fields: { pid: 1 } }]);
  });

  it("a component given a source name stamps it on each of its lines (the session's own lines have none)", () => {
    const events = new ComponentEvents(new RecordingLogger(), () => 3, "runtime");
    const heard: SessionEvent[] = [];
    events.events$.subscribe((e) => heard.push(e));
    events.logger.info("registered");
    expect(heard).toEqual([{ type: "log", time: 3, level: "info", message: "registered", source: "runtime" }]);
  });

  it("nests: a component whose fallback is another's logger passes its lines to that stream whole (its own source kept), printed once", () => {
    const printed = new RecordingLogger();
    const outer = new ComponentEvents(printed, () => 1, "runtime");
    const inner = new ComponentEvents(outer.logger, () => 2, "server");
    const onOuter: SessionEvent[] = [];
    const onInner: SessionEvent[] = [];
    outer.events$.subscribe((e) => onOuter.push(e));
    inner.events$.subscribe((e) => onInner.push(e));
    inner.logger.warn("rejected a call", { peer: "127.0.0.1" });
    inner.emit({ type: "terminationNoticed", time: 3, source: "SIGTERM" });
    const line = { type: "log", time: 2, level: "warn", message: "rejected a call", fields: { peer: "127.0.0.1" }, source: "server" };
    expect(onInner).toEqual([line, { type: "terminationNoticed", time: 3, source: "SIGTERM" }]);
    // Only lines go up (the inner component's data events are its own stream's), and only once.
    expect(onOuter).toEqual([line]);
    expect(printed.entries).toEqual([{ level: "warn", message: "rejected a call", fields: { peer: "127.0.0.1" } }]);
    // The outer stream adopted: the outer component no longer prints, the inner line is still on its stream.
    const release = outer.adopt();
    inner.logger.info("serving");
    expect(onOuter.map((e) => (e.type === "log" ? e.message : e.type))).toEqual(["rejected a call", "serving"]);
    expect(printed.entries).toHaveLength(1);
    release();
  });

  it("forwarded into a session, its lines are printed by the session's log observer only; after close() its fallback prints them again", async () => {
    const fallback = new RecordingLogger();
    const sessionLogger = new RecordingLogger();
    const events = new ComponentEvents(fallback, () => 0);
    events.logger.info("before");
    const sess = await session(sessionLogger);
    sess.forwardEvents(events);
    events.logger.info("during");
    await sess.close();
    events.logger.info("after");
    expect(mine(fallback)).toEqual(["before", "after"]);
    expect(mine(sessionLogger)).toEqual(["during"]);
  });

  it("a forwarding stopped by its caller hands the lines back; two adopters print until both stopped", async () => {
    const fallback = new RecordingLogger();
    const first = new RecordingLogger();
    const second = new RecordingLogger();
    const events = new ComponentEvents(fallback, () => 0);
    const a = await session(first);
    const b = await session(second);
    const fa = a.forwardEvents(events);
    const fb = b.forwardEvents(events);
    events.logger.info("both");
    fa.unsubscribe();
    fa.unsubscribe();
    events.logger.info("second only");
    fb.unsubscribe();
    events.logger.info("nobody");
    expect(mine(first)).toEqual(["both"]);
    expect(mine(second)).toEqual(["both", "second only"]);
    expect(mine(fallback)).toEqual(["nobody"]);
    await a.close();
    await b.close();
  });

  it("MonitoredSession's eventSources are forwarded before anything else: their events are the session's from creation on", async () => {
    const fallback = new RecordingLogger();
    const sessionLogger = new RecordingLogger();
    const events = new ComponentEvents(fallback, () => 0);
    const seen: SessionEvent[] = [];
    const sess = await session(sessionLogger, { eventSources: [events], observer: (e) => seen.push(e) });
    events.logger.info("a manager's line");
    expect(mine(sessionLogger)).toEqual(["a manager's line"]);
    expect(mine(fallback)).toEqual([]);
    expect(seen).toContainEqual({ type: "log", time: 0, level: "info", message: "a manager's line" });
    await sess.close();
  });

  it("a stream completed while a session forwards it (a handler closed before its session) prints its later lines through its fallback, once", async () => {
    const fallback = new RecordingLogger();
    const sessionLogger = new RecordingLogger();
    const events = new ComponentEvents(fallback, () => 0);
    const sess = await session(sessionLogger);
    sess.forwardEvents(events);
    events.logger.info("adopted");
    events.complete();
    events.logger.error("late: the lock could not be released");
    events.logger.error("later still");
    // An adoption after the end adopts nothing.
    sess.forwardEvents(events);
    events.logger.error("after a second forward");
    await sess.close();
    expect(mine(sessionLogger)).toEqual(["adopted"]);
    expect(mine(fallback)).toEqual(["late: the lock could not be released", "later still", "after a second forward"]);
  });
});
