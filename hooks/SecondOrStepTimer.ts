/**
 * The timers behind every periodic hook: `SecondOrStepTimer` fires every N seconds or every N
 * global steps, `NeverTriggerTimer` never fires. TensorFlow's `_HookTimer` family.
 *
 * @module
 */

import { systemClock, type Clock } from "../src/time/Clock.js";
import { ValueError } from "../src/errors.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What {@link HookTimer.updateLastTriggeredStep} returns: elapsed seconds and steps, or nothing on the first trigger. */
export type ElapsedSinceTrigger = readonly [elapsedSecs: number, elapsedSteps: number] | readonly [undefined, undefined];

/**
 * A timer that decides when a periodic hook fires (TensorFlow's `_HookTimer`).
 *
 * @example
 * ```ts
 * import type { HookTimer } from "monitored-session/hooks";
 *
 * // Fire on every power of two.
 * let last: number | undefined;
 * const powersOfTwo: HookTimer = {
 *   reset: () => (last = undefined),
 *   shouldTriggerForStep: (s) => s !== last && (s & (s - 1)) === 0,
 *   updateLastTriggeredStep: (s) => ((last = s), [undefined, undefined]),
 *   lastTriggeredStep: () => last,
 * };
 * ```
 */
export interface HookTimer {
  /** Forgets the last trigger, so the next step triggers. */
  reset(): void;
  /** `true` if the timer should fire at `step`. */
  shouldTriggerForStep(step: number): boolean;
  /** Records a trigger at `step` now; returns the time and steps since the previous one. */
  updateLastTriggeredStep(step: number): ElapsedSinceTrigger;
  /** The step of the last trigger, or `undefined` if it never triggered. */
  lastTriggeredStep(): number | undefined;
}

/** Options of {@link SecondOrStepTimer}: exactly one of `everySecs` and `everySteps`. */
export interface SecondOrStepTimerOptions {
  /** Fire when at least this many seconds passed since the last trigger. */
  readonly everySecs?: number | undefined;
  /** Fire when the step is at least this many steps past the last trigger. */
  readonly everySteps?: number | undefined;
  /** Where time comes from (default: the system clock). */
  readonly clock?: Clock | undefined;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

const NOTHING_ELAPSED: ElapsedSinceTrigger = Object.freeze([undefined, undefined] as const);

/**
 * Fires every `everySecs` seconds or every `everySteps` steps (TensorFlow's
 * `SecondOrStepTimer`). It never fires twice for the same step, so `everySecs: 0` fires on
 * every new step.
 *
 * @example
 * ```ts
 * // @prelude docs/preludes/session.ts
 * import { SecondOrStepTimer } from "monitored-session/hooks";
 *
 * const timer = new SecondOrStepTimer({ everySteps: 100 });
 * if (timer.shouldTriggerForStep(step)) {
 *   const [secs, steps] = timer.updateLastTriggeredStep(step);
 *   if (secs !== undefined && steps !== undefined) logger.info(`${steps / secs} steps/sec`);
 * }
 * ```
 */
export class SecondOrStepTimer implements HookTimer {
  private readonly everySecs: number | undefined;
  private readonly everySteps: number | undefined;
  private readonly clock: Clock;
  private lastStep: number | undefined;
  private lastTimeMs: number | undefined;

  constructor(options: SecondOrStepTimerOptions) {
    const { everySecs, everySteps } = options;
    if (everySecs === undefined && everySteps === undefined) {
      throw new ValueError("Either everySecs or everySteps should be provided.");
    }
    if (everySecs !== undefined && everySteps !== undefined) {
      throw new ValueError("Can not provide both everySecs and everySteps.");
    }
    this.everySecs = everySecs;
    this.everySteps = everySteps;
    this.clock = options.clock ?? systemClock;
  }

  reset(): void {
    this.lastStep = undefined;
    this.lastTimeMs = undefined;
  }

  shouldTriggerForStep(step: number): boolean {
    const last = this.lastStep;
    if (last === undefined) return true;
    if (last === step) return false;
    if (this.everySecs !== undefined && this.clock.now() >= (this.lastTimeMs as number) + this.everySecs * 1000) {
      return true;
    }
    if (this.everySteps !== undefined && step >= last + this.everySteps) return true;
    return false;
  }

  updateLastTriggeredStep(step: number): ElapsedSinceTrigger {
    const now = this.clock.now();
    const lastTime = this.lastTimeMs;
    const lastStep = this.lastStep;
    this.lastTimeMs = now;
    this.lastStep = step;
    if (lastTime === undefined || lastStep === undefined) return NOTHING_ELAPSED;
    return [(now - lastTime) / 1000, step - lastStep];
  }

  lastTriggeredStep(): number | undefined {
    return this.lastStep;
  }
}

/**
 * A timer that never fires (TensorFlow's `NeverTriggerTimer`), for hooks that act only at the
 * end, such as a `LoggingTensorHook` with only `atEnd`.
 *
 * @example
 * ```ts
 * import { NeverTriggerTimer, SecondOrStepTimer, type HookTimer } from "monitored-session/hooks";
 *
 * declare const atEndOnly: boolean;
 * const timer: HookTimer = atEndOnly ? new NeverTriggerTimer() : new SecondOrStepTimer({ everySteps: 10 });
 * ```
 */
export class NeverTriggerTimer implements HookTimer {
  reset(): void {}

  shouldTriggerForStep(_step: number): boolean {
    return false;
  }

  updateLastTriggeredStep(_step: number): ElapsedSinceTrigger {
    return NOTHING_ELAPSED;
  }

  lastTriggeredStep(): number | undefined {
    return undefined;
  }
}
