/**
 * The deadlines of a collective's calls: one timer serves them all. It is armed for the earliest
 * deadline and left armed when that call ends: a training loop's calls, each due after the one
 * before, then arm and cancel no timer (a timer each took about 0.05 ms of a step's all-reduce).
 * Deadlines are read on the clock's monotonic time, which a step of the system clock does not
 * move.
 *
 * @module
 */

import type { Clock, TimerHandle } from "../../time/Clock.js";

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** The one deadline timer of a collective: `onFire` looks for the call past its deadline and arms it again. */
export class DeadlineTimer {
  /** The timer, and the deadline it was armed for (monotonic time). */
  private armed: { readonly at: number; readonly handle: TimerHandle } | undefined;

  constructor(
    private readonly clock: Clock,
    private readonly onFire: () => void,
  ) {}

  /** The clock's monotonic time, in milliseconds. */
  now(): number {
    return this.clock.monotonic?.() ?? this.clock.now();
  }

  /** Makes the timer fire by `at` (monotonic time). */
  arm(at: number): void {
    const armed = this.armed;
    if (armed !== undefined && armed.at <= at) return; // it fires first, and arms again for the calls still waiting
    armed?.handle.cancel();
    this.armed = {
      at,
      handle: this.clock.setTimer(at - this.now(), () => {
        this.armed = undefined;
        this.onFire();
      }),
    };
  }
}
