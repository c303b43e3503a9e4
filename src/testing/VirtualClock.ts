/**
 * A {@link Clock} whose time moves only when a test says so. Timers and sleeps fire in time
 * order as the test advances the clock, so "every 600 seconds" takes microseconds.
 *
 * @example
 * ```ts
 * import { VirtualClock } from "monitored-session/testing";
 *
 * const clock = new VirtualClock();
 * const done = clock.sleep(600_000);
 * await clock.advanceSecs(600); // `done` is now resolved
 * await done;
 * ```
 *
 * @module
 */

import type { Clock, TimerHandle } from "../time/Clock.js";

interface Pending {
  readonly at: number;
  readonly seq: number;
  readonly fn: () => void;
  cancelled: boolean;
}

/** Options of {@link VirtualClock}. */
export interface VirtualClockOptions {
  /** The starting time in epoch milliseconds (default 1_700_000_000_000, a fixed date). */
  readonly startMs?: number;
  /**
   * When `true`, `sleep(ms)` advances the clock by `ms` itself and resolves at once. Handy for
   * sequential code that polls (a waiter, a retry loop) with no other task to advance time.
   */
  readonly autoAdvance?: boolean;
}

/** A manually driven clock for tests. */
export class VirtualClock implements Clock {
  private current: number;
  /** What {@link set} moved the time by, in all: {@link monotonic} leaves it out. */
  private jumped = 0;
  private seq = 0;
  private readonly queue: Pending[] = [];
  private readonly autoAdvance: boolean;
  /** Every `sleep` duration requested, in order (milliseconds). */
  readonly sleeps: number[] = [];
  /** How many event-loop turns were yielded through {@link yieldTurn} (a session's fairness yields). */
  turnsYielded = 0;

  constructor(options: VirtualClockOptions = {}) {
    this.current = options.startMs ?? 1_700_000_000_000;
    this.autoAdvance = options.autoAdvance ?? false;
  }

  now(): number {
    return this.current;
  }

  /** Virtual time that {@link set} does not move (a clock jump), as a monotonic clock would not. */
  monotonic(): number {
    return this.current - this.jumped;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    this.sleeps.push(ms);
    if (signal?.aborted === true || ms <= 0) return Promise.resolve();
    if (this.autoAdvance) {
      this.current += ms;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      const handle = this.setTimer(ms, () => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      });
      const onAbort = (): void => {
        handle.cancel();
        resolve();
      };
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  setTimer(ms: number, fn: () => void): TimerHandle {
    const p: Pending = { at: this.current + Math.max(0, ms), seq: this.seq++, fn, cancelled: false };
    this.queue.push(p);
    return {
      cancel: () => {
        p.cancelled = true;
      },
    };
  }

  /** A real macrotask turn (no virtual time passes), counted in {@link turnsYielded}. */
  yieldTurn(): Promise<void> {
    this.turnsYielded += 1;
    return flush();
  }

  /** Sets the time without firing timers (e.g. to simulate a clock jump). */
  set(ms: number): void {
    this.jumped += ms - this.current;
    this.current = ms;
  }

  /**
   * Moves time forward by `ms`, firing every timer that falls due in time order. After each
   * timer, pending promise callbacks run, so loops woken by a timer can schedule their next one.
   */
  async advance(ms: number): Promise<void> {
    const target = this.current + ms;
    await flush();
    for (;;) {
      const next = this.nextDue(target);
      if (next === undefined) break;
      this.current = Math.max(this.current, next.at);
      next.fn();
      await flush();
    }
    this.current = Math.max(this.current, target);
    await flush();
  }

  /** {@link advance} in seconds. */
  advanceSecs(s: number): Promise<void> {
    return this.advance(s * 1000);
  }

  /** Fires the next pending timer, whenever it is due. Returns `false` if none is pending. */
  async runNext(): Promise<boolean> {
    const next = this.nextDue(Number.POSITIVE_INFINITY);
    if (next === undefined) return false;
    this.current = Math.max(this.current, next.at);
    next.fn();
    await flush();
    return true;
  }

  /** The number of timers not yet fired or cancelled. */
  get pendingTimers(): number {
    return this.queue.filter((p) => !p.cancelled).length;
  }

  private nextDue(limit: number): Pending | undefined {
    let best = -1;
    for (let i = 0; i < this.queue.length; i++) {
      const p = this.queue[i] as Pending;
      if (p.cancelled) continue;
      if (p.at > limit) continue;
      const b = this.queue[best];
      if (b === undefined || p.at < b.at || (p.at === b.at && p.seq < b.seq)) best = i;
    }
    if (best < 0) return undefined;
    const [p] = this.queue.splice(best, 1);
    for (let i = this.queue.length - 1; i >= 0; i--) if ((this.queue[i] as Pending).cancelled) this.queue.splice(i, 1);
    return p;
  }
}

/** Lets every queued promise callback run (a macrotask turn; no real time passes). */
export const flush = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
