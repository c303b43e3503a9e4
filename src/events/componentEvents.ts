/**
 * {@link ComponentEvents}: the event stream of a component that lives before or without a
 * session (a `PreemptionCheckpointHandler`, the checkpoint manager `monitoredTrainingSession`
 * opens before its session). Its lines are `log` events on its own `events$`, like a session's.
 *
 * Until a session adopts the stream (`session.forwardEvents(component)`), nobody else prints
 * them, so the component's own log observer does (`logObserver(fallback)`, the component's
 * `logger` option). While a session forwards the stream, that session's log observers print
 * them instead (each adopting session's, if several do), and when the forwarding ends (the
 * session closed, or the stream completed) the component prints them again. A line always has
 * a printer: its own, or the adopting session's (which prints nothing with `logObserver: null`).
 *
 * Components nest: a component whose fallback is another's `logger` (the task runtime hands
 * its logger to the server, the collective and the notices it starts) passes its lines to that
 * stream as `log` events, its own `source` on them, so they are printed once, by the outer
 * component's printer, and the outer `events$` carries them.
 *
 * @example
 * ```ts
 * import { ComponentEvents, consoleLogger } from "monitored-session";
 *
 * const events = new ComponentEvents(consoleLogger("info"), () => Date.now(), "myComponent");
 * events.events$.subscribe((e) => console.log(e.type)); // "log"
 * events.logger.info("printed by the fallback: no session adopted these events yet");
 * ```
 *
 * @module
 */

import { Observable, Subject } from "rxjs";

import type { Logger } from "../Logger.js";
import { eventLogger, eventSinkOf, logObserver, type SessionEventListener } from "./logObserver.js";
import type { SessionEvent, SessionEventOf } from "./SessionEvent.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/**
 * What a session's `forwardEvents` takes besides a plain stream: an object with events, whose
 * lines the session prints while it forwards them ({@link ComponentEvents.adopt}).
 */
export interface EventSource {
  readonly events$: Observable<SessionEvent>;
  /** The caller prints this source's lines from now on; call the result to hand them back. */
  adopt?(): () => void;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** A component's own stream of events, its lines among them (see the module doc). */
export class ComponentEvents<E extends SessionEvent = SessionEvent> implements EventSource {
  /** Every event the component emits, its `log` lines included. */
  readonly events$: Observable<E | SessionEventOf<"log">>;
  /** The component's logger: each call is a `log` event on {@link events$}. */
  readonly logger: Logger;
  private readonly subject = new Subject<E | SessionEventOf<"log">>();
  private readonly print: SessionEventListener;
  /** The adoptions in force (see {@link adopt}): a session's, until it hands the lines back. */
  private readonly adoptions = new Set<object>();
  /** {@link complete} ran: no session hears this stream any more. */
  private completed = false;

  /**
   * `fallback` prints the lines while no session adopts them; `now` stamps them; `source` names
   * the component on each of its `log` events (`runtime`, `preemption`, `checkpoint`, `supervisor`).
   */
  constructor(fallback: Logger, now: () => number, source?: string) {
    // A fallback that is itself an event logger (a task's runtime handing its logger to the
    // server it starts) receives the lines as events, with this component's source on them.
    const sink = eventSinkOf(fallback);
    this.print =
      sink === undefined
        ? logObserver(fallback)
        : (e) => {
            if (e.type === "log") sink(e);
          };
    this.events$ = this.subject.asObservable();
    this.logger = eventLogger((e) => this.emit(e as SessionEventOf<"log">), now, source);
  }

  /** Emits `e`: printed by the fallback when it is a line and no session adopted the stream. */
  emit(e: E | SessionEventOf<"log">): void {
    if (this.completed || this.adoptions.size === 0) this.print(e);
    this.subject.next(e);
  }

  /** A session prints the lines from now on; the function returned hands them back (idempotent). */
  adopt(): () => void {
    const adoption = {};
    if (!this.completed) this.adoptions.add(adoption);
    return () => void this.adoptions.delete(adoption);
  }

  /** Ends {@link events$}: no session hears it any more, so later lines are printed by the fallback. */
  complete(): void {
    this.completed = true;
    this.adoptions.clear();
    this.subject.complete();
  }
}
