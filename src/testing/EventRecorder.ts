/**
 * `EventRecorder`: keeps every event a session (or a component with a stream of its own: a
 * started task, a preemption handler) emits, for assertions on what it said and did. Lines are
 * `log` events, so one recorder sees both: what a user reads (`messages`) and the data beside it
 * (`ofType`). A `RecordingLogger` hears only the lines one printer prints; the recorder hears the
 * stream, whoever prints it.
 *
 * @example
 * ```ts
 * import { MonitoredSession, withSession } from "monitored-session";
 * import { StopAtStepHook } from "monitored-session/hooks";
 * import { EventRecorder, FakeSessionCreator, VirtualClock } from "monitored-session/testing";
 *
 * const recorder = new EventRecorder();
 * const session = MonitoredSession.create({
 *   sessionCreator: new FakeSessionCreator(),
 *   hooks: [new StopAtStepHook({ lastStep: 3 })],
 *   clock: new VirtualClock(),
 *   observer: recorder.observer,
 *   logObserver: null, // nothing printed: the recorder has the lines
 * });
 * await withSession(session, async (s) => {
 *   while (!s.shouldStop()) await s.run("train");
 * });
 * recorder.ofType("stopRequested"); // [{ type: "stopRequested", by: "StopAtStepHook", ... }]
 * recorder.messages("info"); // the lines, as a RecordingLogger would have them
 * ```
 *
 * @module
 */

import type { Observable, Observer, Subscription } from "rxjs";

import type { Logger, LogLevel } from "../Logger.js";
import { eventLogger } from "../events/logObserver.js";
import type { SessionEvent, SessionEventMap, SessionEventOf } from "../events/SessionEvent.js";

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** Records events, in order (see the module doc). */
export class EventRecorder {
  /** Every event so far, oldest first. */
  readonly events: SessionEvent[] = [];

  /**
   * Records one event: pass it as a `logObserver`, `startTask`'s `observer`, or
   * `events$.subscribe(recorder.listener)`; a session's `observer` is {@link observer}.
   */
  readonly listener = (event: SessionEvent): void => {
    this.events.push(event);
  };

  /**
   * The error the recorded stream ended with (a session whose creation failed errors its
   * `events$`), or `undefined`.
   */
  failure: unknown;

  /**
   * Records every event and the stream's error ({@link failure}): pass it as a session's
   * `observer`. An rxjs subscriber without an error handler would report a failed creation as
   * an uncaught error, though `create()` rejects with it too.
   */
  readonly observer: Observer<SessionEvent> = {
    next: this.listener,
    error: (e: unknown) => void (this.failure = e),
    complete: () => undefined,
  };

  /** Records every event of `events$` from now on (and its error), until the subscription returned ends. */
  record(events$: Observable<SessionEvent>): Subscription {
    return events$.subscribe(this.observer);
  }

  /**
   * A `Logger` whose lines are recorded here as `log` events (stamped with `now()`, `0` if
   * omitted, and with `source` when given): for a part that takes a logger and, inside a session
   * or a started task, gets that owner's event logger.
   */
  logger(now: () => number = () => 0, source?: string): Logger {
    return eventLogger(this.listener, now, source);
  }

  /** The events of `type`, oldest first. */
  ofType<K extends keyof SessionEventMap>(type: K): SessionEventOf<K>[] {
    return this.events.filter((e): e is SessionEventOf<K> => e.type === type);
  }

  /** The `log` events at `level` (every level if omitted), oldest first. */
  lines(level?: LogLevel): SessionEventOf<"log">[] {
    return this.ofType("log").filter((e) => level === undefined || e.level === level);
  }

  /** The messages of the `log` events at `level` (every level if omitted): what a user reads. */
  messages(level?: LogLevel): string[] {
    return this.lines(level).map((e) => e.message);
  }

  /** The types of the events so far, in order (`log` included). */
  types(): string[] {
    return this.events.map((e) => e.type);
  }

  /** Forgets every event so far. */
  clear(): void {
    this.events.length = 0;
  }
}
