/**
 * The one event stream of a monitored session: a Subject that every layer and hook publishes
 * to, the replay of the latest `sessionCreated` for late subscribers, and the forwarding of
 * other streams (a preemption handler's) into it until the session closes.
 *
 * Beside the subscribers, the stream has listeners: the session's log observers. A listener
 * hears every event except the per-run ones (`beforeRun`, `afterRun`, `hookTimings`), even
 * after the stream completed (a background save that fails after `close()` still gets its
 * line), and does not count as an observer: without a subscriber, a run builds no event.
 *
 * @module
 */

import { Observable, Subject, Subscription, type PartialObserver } from "rxjs";

import type { SessionEventListener } from "../events/logObserver.js";
import { describeCause, type SessionEvent, type SessionEventOf } from "../events/SessionEvent.js";

export class SessionEventStream {
  private readonly subject = new Subject<SessionEvent>();
  private latestCreated: SessionEventOf<"sessionCreated"> | undefined;
  /** The cause of the last `sessionAborted`, carried by the next `sessionCreated`. */
  private abortCause: string | undefined;
  private readonly forwarded = new Subscription();
  private readonly listeners: SessionEventListener[] = [];
  private readonly failedListeners = new Set<SessionEventListener>();

  /** Adds a listener (see the module doc): it hears the events from now on. */
  listen(listener: SessionEventListener): void {
    this.listeners.push(listener);
  }

  /** Tells the listeners about `e` (not a per-run event). */
  private tell(e: SessionEvent): void {
    for (const l of this.listeners) {
      try {
        l(e);
      } catch (error) {
        // A broken observer must not fail the hook or the run that emitted: said once, on stderr.
        if (this.failedListeners.has(l)) continue;
        this.failedListeners.add(l);
        console.error(`monitored-session: a log observer threw on a ${e.type} event (${describeCause(error)}); the session goes on, and this observer's later errors are not reported`);
      }
    }
  }

  /** Replays the latest `sessionCreated`, then the live events. */
  readonly events$: Observable<SessionEvent> = new Observable<SessionEvent>((subscriber) => {
    const created = this.latestCreated;
    if (created !== undefined) subscriber.next(created);
    return this.subject.subscribe(subscriber);
  });

  /** Whether anyone listens: emitters skip building events otherwise. */
  get observed(): boolean {
    return this.subject.observed;
  }

  /** Emits `e` to the listeners and to current subscribers. */
  next(e: SessionEvent): void {
    this.tell(e);
    this.subject.next(e);
  }

  /** Emits a per-run event (`beforeRun`, `afterRun`, `hookTimings`) to current subscribers only. */
  nextPerRun(e: SessionEvent): void {
    this.subject.next(e);
  }

  /** Records (for replay) and emits a session creation; after a recovery it carries the cause. */
  created(e: Omit<SessionEventOf<"sessionCreated">, "cause">): void {
    const cause = e.recovery > 0 ? this.abortCause : undefined;
    const event: SessionEventOf<"sessionCreated"> = cause === undefined ? e : { ...e, cause };
    this.latestCreated = event;
    this.abortCause = undefined;
    this.tell(event);
    if (this.subject.observed) this.subject.next(event);
  }

  /** Emits `sessionAborted` with the error's one-line cause. */
  aborted(error: unknown, time: number): void {
    const cause = describeCause(error);
    this.abortCause = cause;
    const event: SessionEventOf<"sessionAborted"> = { type: "sessionAborted", time, error, cause };
    this.tell(event);
    if (this.subject.observed) this.subject.next(event);
  }

  /** Forwards `source$`'s events until it completes or the stream ends; an error becomes a line at `warn` and a `warning`. */
  forward(source$: Observable<SessionEvent>, now: () => number): Subscription {
    const sub = source$.subscribe({
      next: (e) => this.next(e),
      error: (error: unknown) => {
        const message = `a forwarded event stream failed: ${describeCause(error)}`;
        const time = now();
        this.next({ type: "log", time, level: "warn", message });
        this.next({ type: "warning", time, message, error });
      },
    });
    this.forwarded.add(sub);
    return sub;
  }

  /** Subscribes to live events only (no replay): for the observer given before creation. */
  subscribe(observer: PartialObserver<SessionEvent> | SessionEventListener): Subscription {
    return this.subject.subscribe(observer);
  }

  /** Ends the stream: stops forwarding, completes subscribers. */
  complete(): void {
    this.forwarded.unsubscribe();
    this.subject.complete();
  }

  /** Ends the stream with an error (creation failed: there is no session to observe). */
  error(e: unknown): void {
    this.forwarded.unsubscribe();
    this.subject.error(e);
  }
}
