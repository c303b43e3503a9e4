/**
 * An RxJS scheduler whose time is a {@link Clock}'s: `debounceTime`, `throttleTime`, `timeout`,
 * `bufferTime` and friends run on the session's clock, so on a `VirtualClock` in tests.
 *
 * @example
 * ```ts
 * import { interval } from "rxjs";
 * import { VirtualClock } from "monitored-session/testing";
 * import { ClockScheduler } from "monitored-session";
 *
 * const clock = new VirtualClock();
 * const ticks: number[] = [];
 * const sub = interval(1000, new ClockScheduler(clock)).subscribe((i) => ticks.push(i));
 * await clock.advanceSecs(3); // ticks is [0, 1, 2]
 * sub.unsubscribe();
 * ```
 *
 * @module
 */

import { Subscription, type SchedulerAction, type SchedulerLike } from "rxjs";

import type { Clock, TimerHandle } from "./Clock.js";

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** Schedules RxJS work with a {@link Clock}'s timers; `now()` is the clock's. */
export class ClockScheduler implements SchedulerLike {
  constructor(readonly clock: Clock) {}

  now(): number {
    return this.clock.now();
  }

  schedule<T>(work: (this: SchedulerAction<T>, state: T) => void, delay = 0, state?: T): Subscription {
    return new ClockAction<T>(this.clock, work).schedule(state, delay);
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/**
 * One scheduled piece of work. Rescheduling from inside the work (what `interval` does) reuses
 * the action, as RxJS's own actions do; unsubscribing cancels the pending timer.
 */
class ClockAction<T> extends Subscription implements SchedulerAction<T> {
  private timer: TimerHandle | undefined;

  constructor(
    private readonly clock: Clock,
    private readonly work: (this: SchedulerAction<T>, state: T) => void,
  ) {
    super(() => {
      this.timer?.cancel();
      this.timer = undefined;
    });
  }

  schedule(state?: T, delay = 0): Subscription {
    if (this.closed) return this;
    this.timer?.cancel();
    this.timer = this.clock.setTimer(delay, () => {
      this.timer = undefined;
      if (this.closed) return;
      try {
        this.work.call(this, state as T);
      } catch (e) {
        // RxJS's actions unsubscribe on a throwing work item and rethrow; the error then reaches
        // the clock's timer, as an error in a `setTimeout` callback would.
        this.unsubscribe();
        throw e;
      }
    });
    return this;
  }
}
