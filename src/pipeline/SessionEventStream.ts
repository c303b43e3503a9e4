/**
 * The one event stream of a monitored session: the rxjs Subject that every layer and hook
 * publishes to (a second one carries the per-run events), the replay of the latest
 * `sessionCreated` for late subscribers, and the forwarding of other streams (a preemption
 * handler's) into it until the session closes.
 *
 * The session's log observers subscribe to the first Subject, with two differences from the
 * subscribers of `events$`:
 * - they do not hear the per-run events (`beforeRun`, `afterRun`, `hookTimings`), which go
 *   through a second Subject that only subscribers join, and do not count as observers: without
 *   a subscriber of `events$`, a run builds no event at all, so the default log observer costs
 *   the hot path nothing;
 * - their subscription outlives `complete()`: `events$` completes when the session closes, but
 *   a line written later (a background save that fails after `close()`) still reaches them.
 *
 * @module
 */

import { Observable, Subject, Subscription, type PartialObserver, type Subscriber } from "rxjs";

import type { SessionEventListener } from "../events/logObserver.js";
import { describeCause, type SessionEvent, type SessionEventOf } from "../events/SessionEvent.js";

/** How the stream ended, for a subscriber that comes after: `undefined` while it is live. */
type Ending = { readonly error: false } | { readonly error: true; readonly cause: unknown };

export class SessionEventStream {
  /** Every event but the per-run ones, to everyone; never completed (log observers hear late lines on it). */
  private readonly subject = new Subject<SessionEvent>();
  /** The per-run events, to the subscribers only: a log observer costs a run nothing, not even a skip. */
  private readonly perRun = new Subject<SessionEvent>();
  /** Fires once, when the stream ends: the `events$` subscribers complete (or error) on it. */
  private readonly ends = new Subject<Ending>();
  private ending: Ending | undefined;
  /** Subscribers of `events$` and `subscribe()`: the ones a per-run event is built for. */
  private subscribers = 0;
  private latestCreated: SessionEventOf<"sessionCreated"> | undefined;
  /** The cause of the last `sessionAborted`, carried by the next `sessionCreated`. */
  private abortCause: string | undefined;
  private readonly forwarded = new Subscription();

  /** Subscribes a log observer (see the module doc): it hears the events from now on. */
  listen(listener: SessionEventListener): Subscription {
    let failed = false;
    return this.subject.subscribe((e) => {
      try {
        listener(e);
      } catch (error) {
        // A broken observer must not fail the hook or the run that emitted: said once, on stderr.
        if (failed) return;
        failed = true;
        console.error(`monitored-session: a log observer threw on a ${e.type} event (${describeCause(error)}); the session goes on, and this observer's later errors are not reported`);
      }
    });
  }

  /** Replays the latest `sessionCreated`, then the live events; completes when the stream ends. */
  readonly events$: Observable<SessionEvent> = new Observable<SessionEvent>((subscriber) => {
    const created = this.latestCreated;
    if (created !== undefined) subscriber.next(created);
    return this.attach(subscriber);
  });

  /** Whether anyone listens: emitters skip building events otherwise. */
  get observed(): boolean {
    return this.subscribers > 0;
  }

  /** Emits `e` (not a per-run event) to the log observers and to current subscribers. */
  next(e: SessionEvent): void {
    this.subject.next(e);
  }

  /** Emits a per-run event (`beforeRun`, `afterRun`, `hookTimings`) to current subscribers only. */
  nextPerRun(e: SessionEvent): void {
    this.perRun.next(e);
  }

  /** Records (for replay) and emits a session creation; after a recovery it carries the cause. */
  created(e: Omit<SessionEventOf<"sessionCreated">, "cause">): void {
    const cause = e.recovery > 0 ? this.abortCause : undefined;
    const event: SessionEventOf<"sessionCreated"> = cause === undefined ? e : { ...e, cause };
    this.latestCreated = event;
    this.abortCause = undefined;
    this.subject.next(event);
  }

  /** Emits `sessionAborted` with the error's one-line cause. */
  aborted(error: unknown, time: number): void {
    const cause = describeCause(error);
    this.abortCause = cause;
    const event: SessionEventOf<"sessionAborted"> = { type: "sessionAborted", time, error, cause };
    this.subject.next(event);
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
    return new Observable<SessionEvent>((subscriber) => this.attach(subscriber)).subscribe(observer);
  }

  /** Ends the stream: stops forwarding, completes the subscribers (not the log observers). */
  complete(): void {
    this.end({ error: false });
  }

  /** Ends the stream with an error (creation failed: there is no session to observe). */
  error(e: unknown): void {
    this.end({ error: true, cause: e });
  }

  private end(ending: Ending): void {
    if (this.ending !== undefined) return;
    this.ending = ending;
    this.forwarded.unsubscribe();
    this.ends.next(ending);
    this.ends.complete();
  }

  /** Gives `subscriber` the live events until the stream ends, counted as an observer meanwhile. */
  private attach(subscriber: Subscriber<SessionEvent>): Subscription | undefined {
    const ended = this.ending;
    if (ended !== undefined) {
      settle(subscriber, ended);
      return undefined;
    }
    this.subscribers += 1;
    const live = this.subject.subscribe(subscriber);
    live.add(this.perRun.subscribe(subscriber));
    live.add(this.ends.subscribe((e) => settle(subscriber, e)));
    live.add(() => {
      this.subscribers -= 1;
    });
    return live;
  }
}

/** Ends `subscriber` as the stream ended. */
const settle = (subscriber: Subscriber<SessionEvent>, ending: Ending): void => {
  if (ending.error) subscriber.error(ending.cause);
  else subscriber.complete();
};
