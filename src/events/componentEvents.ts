/**
 * {@link ComponentEvents}: the event stream of a component that lives before or without a
 * session (a `PreemptionCheckpointHandler`, the checkpoint manager `monitoredTrainingSession`
 * opens before its session). Its lines are `log` events on its own `events$`, like a session's.
 *
 * Until a session adopts the stream (`session.forwardEvents(component)`), nobody else prints
 * them, so the component's own log observer does (`logObserver(fallback)`, the component's
 * `logger` option). While a session forwards the stream, that session's log observers print
 * them instead, and when the forwarding ends (the session closed) the component prints them
 * again: a line is printed once, and never lost for want of a printer.
 *
 * @example
 * ```ts
 * import { ComponentEvents, consoleLogger } from "monitored-session";
 *
 * const events = new ComponentEvents(consoleLogger("info"), () => Date.now());
 * events.events$.subscribe((e) => console.log(e.type)); // "log"
 * events.logger.info("printed by the fallback: no session adopted these events yet");
 * ```
 *
 * @module
 */

import { Observable, Subject } from "rxjs";

import type { Logger } from "../Logger.js";
import { eventLogger, logObserver, type SessionEventListener } from "./logObserver.js";
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
  /** Sessions that print this stream's lines now (see {@link adopt}). */
  private adopters = 0;

  /** `fallback` prints the lines while no session adopts them; `now` stamps them. */
  constructor(fallback: Logger, now: () => number) {
    this.print = logObserver(fallback);
    this.events$ = this.subject.asObservable();
    this.logger = eventLogger((e) => this.emit(e as SessionEventOf<"log">), now);
  }

  /** Emits `e`: printed by the fallback when it is a line and no session adopted the stream. */
  emit(e: E | SessionEventOf<"log">): void {
    if (this.adopters === 0) this.print(e);
    this.subject.next(e);
  }

  /** A session prints the lines from now on; the function returned hands them back (idempotent). */
  adopt(): () => void {
    this.adopters++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.adopters--;
    };
  }

  /** Ends {@link events$}. Later lines are still printed by the fallback. */
  complete(): void {
    this.adopters = 0;
    this.subject.complete();
  }
}
