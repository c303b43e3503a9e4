/**
 * Where a built-in hook's time and log lines come from: the clock and logger of its own options
 * first, then the session's ({@link HookEnv}, given to `begin`), then the system clock and the
 * default logger. One rule for every hook. Internal to the built-in hooks.
 *
 * One rule for every line: a hook writes it to its logger. In a session, that logger is the
 * session's event logger, so the line is a `log` event that the session's log observers print; a
 * hook given a logger of its own (or run outside a session) prints there instead. A warning is
 * also a `warning` event (the data: message and error, which progress displays count), and a
 * step rate a `stepRate` event; neither is printed: the line beside it is.
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

/** Warns `message`: a line at `warn` on the hook's logger, and a `warning` event in a session. */
export const warn = (own: OwnServices, env: HookEnv | undefined, message: string, error?: unknown): void => {
  const { clock, logger } = hookServices(own, env);
  logger.warn(message);
  env?.emit({ type: "warning", time: clock.now(), message, ...(error === undefined ? {} : { error }) });
};
