/**
 * EventRecorder: what a session said (its lines as `log` events) and did (its typed events), in
 * order, and the error of a creation that failed, which an rxjs subscriber without an error
 * handler would report as uncaught.
 */
import { Subject } from "rxjs";
import { describe, expect, it } from "vitest";

import type { SessionEvent } from "../../src/events/SessionEvent.js";
import { MonitoredSession } from "../../src/pipeline/MonitoredSession.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { FakeSessionCreator } from "../../src/testing/FakeSession.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";

describe("EventRecorder", () => {
  it("keeps events in order: lines by level, typed events by type, types; clear() forgets them", () => {
    const recorder = new EventRecorder();
    const stream = new Subject<SessionEvent>();
    const subscription = recorder.record(stream);
    stream.next({ type: "log", time: 1, level: "info", message: "one" });
    stream.next({ type: "warning", time: 2, message: "two" });
    stream.next({ type: "log", time: 3, level: "warn", message: "two" });
    expect(recorder.types()).toEqual(["log", "warning", "log"]);
    expect(recorder.messages()).toEqual(["one", "two"]);
    expect(recorder.messages("warn")).toEqual(["two"]);
    expect(recorder.ofType("warning")).toEqual([{ type: "warning", time: 2, message: "two" }]);
    recorder.clear();
    expect(recorder.events).toEqual([]);
    subscription.unsubscribe();
  });

  it("as a session's observer, a failed creation is kept as failure (create() rejects with the same error), never an uncaught error", async () => {
    const recorder = new EventRecorder();
    const broken = new Error("no session today");
    const creator = new FakeSessionCreator();
    creator.createSession = () => Promise.reject(broken);
    await expect(MonitoredSession.create({ sessionCreator: creator, clock: new VirtualClock(), logObserver: null, observer: recorder.observer })).rejects.toBe(broken);
    expect(recorder.failure).toBe(broken);
  });

  it("a stream that ends with an error: failure holds it, the events before it are kept", () => {
    const recorder = new EventRecorder();
    const stream = new Subject<SessionEvent>();
    recorder.record(stream);
    stream.next({ type: "log", time: 1, level: "error", message: "it broke" });
    stream.error(new RangeError("bad"));
    expect(recorder.messages("error")).toEqual(["it broke"]);
    expect(recorder.failure).toBeInstanceOf(RangeError);
  });
});
