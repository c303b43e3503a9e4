/**
 * {@link hookEnv}: the environment for hooks run outside a monitored session, which prints every
 * line of theirs through a logger (the session's own is made by its pipeline).
 *
 * @module
 */

import type { Logger } from "../Logger.js";
import { systemClock, type Clock } from "../time/Clock.js";
import { logObserver, type SessionEventListener } from "../events/logObserver.js";
import type { HookEnv } from "./SessionRunHook.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link hookEnv}. */
export interface HookEnvOptions {
  /** Where every line of the hooks goes, their warnings and step rates included. */
  readonly logger: Logger;
  /** The hooks' clock (default the system clock). */
  readonly clock?: Clock | undefined;
  /** Hears every event the hooks emit. */
  readonly onEvent?: SessionEventListener | undefined;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * The environment to give hooks run outside a monitored session (a harness of your own, or
 * TensorFlow's `_HookedSession` tests ported): whoever hands hooks their environment decides
 * how their lines are printed, and this one prints every line through `logger`: a hook writes
 * its lines (its warnings and `global_step/sec` lines included) to `HookEnv.logger`, and a `log`
 * event emitted directly is printed too ({@link logObserver}). Every event reaches `onEvent`.
 *
 * @example
 * ```ts
 * import { consoleLogger, hookEnv } from "monitored-session";
 * import { StepCounterHook } from "monitored-session/hooks";
 *
 * const hook = new StepCounterHook({ everyNSteps: 10 });
 * hook.begin(hookEnv({ logger: consoleLogger("info") }));
 * ```
 */
export const hookEnv = (options: HookEnvOptions): HookEnv => {
  const print = logObserver(options.logger);
  const hear = options.onEvent;
  return {
    clock: options.clock ?? systemClock,
    logger: options.logger,
    emit: (e) => {
      print(e);
      hear?.(e);
    },
  };
};
