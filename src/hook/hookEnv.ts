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
  /** Hears every event the hooks emit (after `logger` got its line, for those that have one). */
  readonly onEvent?: SessionEventListener | undefined;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * The environment to give hooks run outside a monitored session (a harness of your own, or
 * TensorFlow's `_HookedSession` tests ported): whoever hands hooks their environment decides
 * how their lines are printed, and this one prints every line through `logger`, `warning` and
 * `stepRate` events included ({@link logObserver}), as a session's log observer would. An
 * environment whose `emit` drops events would lose a hook's warnings and its step-rate lines.
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
