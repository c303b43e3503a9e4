/**
 * The session's one event stream: log observers and subscribers share its Subject of every
 * event but the per-run ones (which only subscribers get), and only
 * subscribers count as observers (a run builds its events for them alone), and only
 * subscribers complete when the stream ends.
 */
import { Subject } from "rxjs";
import { describe, expect, it } from "vitest";

import type { SessionEvent } from "../../src/events/SessionEvent.js";
import { SessionEventStream } from "../../src/pipeline/SessionEventStream.js";

const line = (message: string): SessionEvent => ({ type: "log", time: 1, level: "info", message });
const afterRun: SessionEvent = { type: "afterRun", time: 1, run: 1, results: [], stopRequested: false };

describe("SessionEventStream", () => {
  it("a log observer is not an observer; a subscriber is, until it unsubscribes", () => {
    const stream = new SessionEventStream();
    stream.listen(() => undefined);
    expect(stream.observed).toBe(false);
    const sub = stream.events$.subscribe(() => undefined);
    const live = stream.subscribe(() => undefined);
    expect(stream.observed).toBe(true);
    sub.unsubscribe();
    expect(stream.observed).toBe(true);
    live.unsubscribe();
    expect(stream.observed).toBe(false);
  });

  it("log observers skip per-run events; subscribers get them, in emission order with the rest", () => {
    const stream = new SessionEventStream();
    const heard: string[] = [];
    const seen: string[] = [];
    stream.listen((e) => heard.push(e.type));
    stream.events$.subscribe((e) => seen.push(e.type));
    stream.next(line("a"));
    stream.nextPerRun(afterRun);
    stream.next(line("b"));
    expect(heard).toEqual(["log", "log"]);
    expect(seen).toEqual(["log", "afterRun", "log"]);
  });

  it("complete() ends the subscribers (a late one replays the creation, then completes) but not the log observers", () => {
    const stream = new SessionEventStream();
    const heard: string[] = [];
    stream.listen((e) => e.type === "log" && heard.push(e.message));
    let completed = 0;
    stream.events$.subscribe({ complete: () => (completed += 1) });
    stream.created({ type: "sessionCreated", time: 1, recovery: 0 } as Parameters<SessionEventStream["created"]>[0]);
    stream.complete();
    expect(completed).toBe(1);
    expect(stream.observed).toBe(false);
    stream.next(line("late: a background save failed"));
    expect(heard).toEqual(["late: a background save failed"]);
    const late: string[] = [];
    stream.events$.subscribe({ next: (e) => late.push(e.type), complete: () => late.push("complete") });
    expect(late).toEqual(["sessionCreated", "complete"]);
  });

  it("error() fails the subscribers, now and later, and stops forwarding", () => {
    const stream = new SessionEventStream();
    const errors: unknown[] = [];
    stream.subscribe({ error: (e: unknown) => errors.push(e) });
    const heard: string[] = [];
    stream.listen((e) => e.type === "log" && heard.push(e.message));
    const source = new Subject<SessionEvent>();
    stream.forward(source, () => 1);
    source.next(line("while live"));
    const boom = new Error("creation failed");
    stream.error(boom);
    stream.events$.subscribe({ error: (e: unknown) => errors.push(e) });
    source.next(line("after the end"));
    expect(errors).toEqual([boom, boom]);
    expect(heard).toEqual(["while live"]);
    expect(stream.observed).toBe(false);
  });

  it("a log observer that throws is reported once on stderr and the others still hear", () => {
    const stream = new SessionEventStream();
    const errors: string[] = [];
    const original = console.error;
    console.error = (...args: unknown[]) => void errors.push(args.join(" "));
    const heard: string[] = [];
    try {
      stream.listen(() => {
        throw new Error("disk full");
      });
      stream.listen((e) => heard.push(e.type));
      stream.next(line("a"));
      stream.next(line("b"));
    } finally {
      console.error = original;
    }
    expect(heard).toEqual(["log", "log"]);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toContain("a log observer threw on a log event (Error: disk full)");
  });
});
