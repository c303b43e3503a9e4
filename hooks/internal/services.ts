/**
 * Where a built-in hook's time and log lines come from: the clock and logger of its own options
 * first, then the session's ({@link HookEnv}, given to `begin`), then the system clock and the
 * default logger. One rule for every hook. Internal to the built-in hooks.
 *
 * @module
 */

import { systemClock, type Clock } from "../../src/time/Clock.js";
import { defaultLogger, type Logger } from "../../src/Logger.js";
import type { HookEnv } from "../../src/hook/SessionRunHook.js";

/** The clock and logger a hook uses. */
export interface HookServices {
  readonly clock: Clock;
  readonly logger: Logger;
}

/** The clock and logger a hook's options may give (`undefined`: the session's). */
export type OwnServices = { readonly [K in keyof HookServices]?: HookServices[K] | undefined };

/** A hook's clock and logger: its own, else the session's (`env`), else the defaults. */
export const hookServices = (own: OwnServices, env?: HookEnv): HookServices => ({
  clock: own.clock ?? env?.clock ?? systemClock,
  logger: own.logger ?? env?.logger ?? defaultLogger,
});
