/**
 * Platform notice watchers: how a cloud platform announces that it will take the machine away
 * (a spot reclaim, a host maintenance, a pod deletion), read from the platform's own channel
 * (its instance metadata service, or the signal and grace period it sends). A watcher is a
 * plain description of one poll; {@link PlatformPoller} runs it on a clock, with a timeout on
 * every request, and hands each notice to the same path as SIGTERM.
 *
 * @module
 */

import { systemClock, type Clock, type TimerHandle } from "../../time/Clock.js";
import { ValueError } from "../../errors.js";
import type { Observable } from "rxjs";
import { ComponentEvents } from "../../events/componentEvents.js";
import type { SessionEvent } from "../../events/SessionEvent.js";
import { defaultLogger, type Logger } from "../../Logger.js";
import { FailureStreak } from "../failureStreak.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The values of `preemption.platform`: `signals` (the default) watches signals only. */
export const PREEMPTION_PLATFORMS = ["signals", "auto", "gce", "aws", "azure", "kubernetes"] as const;

/** Where termination notices come from besides signals (`auto` picks one from local evidence). */
export type PreemptionPlatform = (typeof PREEMPTION_PLATFORMS)[number];

/** A platform that has a watcher. */
export type PlatformName = Exclude<PreemptionPlatform, "signals" | "auto">;

/** One notice read from a platform. */
export interface PlatformNotice {
  readonly platform: PlatformName;
  /** What the platform said, for logs: `spot instance-action "terminate" at 2026-11-22T21:02:00Z`. */
  readonly detail: string;
  /** The clock's epoch milliseconds when the machine goes away, when the platform says. */
  readonly deadlineMs: number | undefined;
  /** The platform's id of the event (Azure's `EventId`), used to acknowledge it. */
  readonly eventId?: string | undefined;
}

/**
 * A platform's notice channel. `check` is one poll: it resolves with a notice or `undefined`,
 * and rejects for a failed, malformed or aborted answer (the poller logs it and polls on).
 */
export interface PlatformWatcher {
  readonly platform: PlatformName;
  /** One poll of the platform's metadata service; absent for a platform that only signals (Kubernetes). */
  readonly check?: ((signal: AbortSignal) => Promise<PlatformNotice | undefined>) | undefined;
  /** Seconds between SIGTERM and the kill, when the platform makes them known (Kubernetes). */
  readonly signalGraceSecs?: number | undefined;
  /** Tells the platform that the save is done and it may go on (Azure starts the event). */
  readonly acknowledge?: ((notice: PlatformNotice, signal: AbortSignal) => Promise<void>) | undefined;
}

/** Options of {@link PlatformPoller.start}. */
export interface PlatformPollerOptions {
  /** Seconds between polls (default 1, as TensorFlow polls its watcher). */
  readonly pollSecs?: number | undefined;
  /** Seconds one poll (or acknowledgement) may take before it is aborted (default 2). */
  readonly timeoutSecs?: number | undefined;
  readonly clock?: Clock | undefined;
  /**
   * Prints the poller's lines (default: the process's default logger) until a session adopts
   * its {@link PlatformPoller.events$}; given a handler's or a notice watcher's logger, they join
   * that stream instead.
   */
  readonly logger?: Logger | undefined;
}

/** The first poll's delay: 0, on a timer, so that starting never waits for the network. */
const FIRST_POLL_MS = 0;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Polls a {@link PlatformWatcher} on the clock until it gives a notice or is closed. Timers are
 * the clock's (unref'd on the real clock), so polling never keeps a finished process alive.
 */
export class PlatformPoller {
  private timer: TimerHandle | undefined;
  private inFlight: AbortController | undefined;
  private closed = false;
  private noticeValue: PlatformNotice | undefined;
  private acknowledged = false;
  private readonly events: ComponentEvents;
  private readonly logger: Logger;
  /** Its polls' failures, warned once per streak. */
  private readonly streak: FailureStreak;

  private constructor(
    readonly watcher: PlatformWatcher,
    private readonly onNotice: (notice: PlatformNotice) => void,
    private readonly pollMs: number,
    private readonly timeoutMs: number,
    private readonly clock: Clock,
    fallback: Logger,
  ) {
    this.events = new ComponentEvents(fallback, () => clock.now(), "platform");
    this.logger = this.events.logger;
    this.streak = new FailureStreak(this.logger);
  }

  /**
   * Starts polling (the first poll on a zero-delay timer: this returns at once). A watcher
   * without `check` is not polled. Throws `ValueError` for a non-positive interval or timeout.
   */
  static start(watcher: PlatformWatcher, onNotice: (notice: PlatformNotice) => void, options: PlatformPollerOptions = {}): PlatformPoller {
    const pollSecs = positive("pollSecs", options.pollSecs ?? 1);
    const timeoutSecs = positive("timeoutSecs", options.timeoutSecs ?? 2);
    const p = new PlatformPoller(watcher, onNotice, pollSecs * 1000, timeoutSecs * 1000, options.clock ?? systemClock, options.logger ?? defaultLogger);
    if (watcher.check !== undefined) p.schedule(FIRST_POLL_MS);
    return p;
  }

  /**
   * The poller's lines as `log` events (source `platform`): a metadata service that stops or
   * starts answering, an acknowledgement made or failed. Its `logger` option prints them until a
   * session adopts them (`session.forwardEvents(poller)`).
   */
  get events$(): Observable<SessionEvent> {
    return this.events.events$;
  }

  /** The caller prints the poller's lines from now on; the function returned hands them back. */
  adopt(): () => void {
    return this.events.adopt();
  }

  /** The notice, once one came. */
  get notice(): PlatformNotice | undefined {
    return this.noticeValue;
  }

  /**
   * Acknowledges the notice (once; a no-op without a notice or for a platform that takes no
   * acknowledgement). Never rejects: a failure or a timeout is logged, the platform then goes
   * on at its own deadline.
   */
  async acknowledge(): Promise<void> {
    const n = this.noticeValue;
    const ack = this.watcher.acknowledge;
    if (n === undefined || ack === undefined || this.acknowledged) return;
    this.acknowledged = true;
    try {
      await this.withTimeout((signal) => ack(n, signal));
      this.logger.info(`${n.platform}: acknowledged the termination notice${n.eventId === undefined ? "" : ` ${n.eventId}`}; the platform may proceed.`);
    } catch (e) {
      this.logger.warn(`${n.platform}: acknowledging the termination notice failed (the platform proceeds at its own deadline): ${message(e)}`);
    }
  }

  /** Stops polling and aborts a poll in flight. Idempotent. */
  close(): void {
    this.closed = true;
    this.timer?.cancel();
    this.timer = undefined;
    this.inFlight?.abort();
  }

  // -------------------------------------------------------------------------------------------
  // internals
  // -------------------------------------------------------------------------------------------

  private schedule(ms: number): void {
    this.timer = this.clock.setTimer(ms, () => {
      this.timer = undefined;
      void this.poll();
    });
  }

  private async poll(): Promise<void> {
    const check = this.watcher.check;
    if (this.closed || check === undefined) return;
    try {
      const n = await this.withTimeout(check);
      if (this.closed) return;
      this.streak.succeeded(`${this.watcher.platform}: the metadata service answers again.`);
      if (n !== undefined) {
        this.noticeValue = n;
        this.onNotice(n);
        return; // one notice is enough: the process is on its way out
      }
    } catch (e) {
      if (this.closed) return;
      // The first failure of a streak is a warning; repeating it every poll would flood the log.
      this.streak.failed(`${this.watcher.platform}: polling for termination notices failed (polling goes on): ${message(e)}`, `${this.watcher.platform}: poll failed again: ${message(e)}`);
    }
    if (!this.closed) this.schedule(this.pollMs);
  }

  /** Runs `fn` with a signal that aborts after the timeout (on the clock) or on close. */
  private async withTimeout<T>(fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const controller = new AbortController();
    this.inFlight = controller;
    let timedOut = false;
    const timer = this.clock.setTimer(this.timeoutMs, () => {
      timedOut = true;
      controller.abort();
    });
    try {
      return await fn(controller.signal);
    } catch (e) {
      if (timedOut) throw new Error(`no answer within ${this.timeoutMs / 1000} s (the request was aborted)`);
      throw e;
    } finally {
      timer.cancel();
      if (this.inFlight === controller) this.inFlight = undefined;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const positive = (name: string, v: number): number => {
  if (!(v > 0) || !Number.isFinite(v)) throw new ValueError(`PlatformPoller: ${name} must be a positive number, got ${String(v)}`);
  return v;
};

const message = (e: unknown): string => (e instanceof Error ? e.message : String(e));
