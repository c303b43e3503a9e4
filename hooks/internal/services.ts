/**
 * Where a built-in hook's time and log lines come from: the clock and logger of its own options
 * first, then the session's ({@link HookEnv}, given to `begin`), then the system clock and the
 * default logger. One rule for every hook. Internal to the built-in hooks.
 *
 * In a session, the session's logger is an event logger: a hook's lines are `log` events that
 * the session's log observer prints. A warning is a `warning` event (progress displays count
 * them), printed by that observer too; a hook given a logger of its own prints it there and
 * marks the event `logged`.
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

/**
 * Warns `message`: in a session (`env`), a `warning` event that the session's log observer
 * prints; with a logger of the hook's own (`own.logger`), or outside a session, `logger.warn` too
 * (the event then says `logged`, so that it is not printed twice).
 */
export const warn = (own: OwnServices, env: HookEnv | undefined, services: HookServices, message: string, error?: unknown): void => {
  const printsItself = env === undefined || own.logger !== undefined;
  if (printsItself) services.logger.warn(message);
  env?.emit({ type: "warning", time: services.clock.now(), message, ...(error === undefined ? {} : { error }), ...(printsItself ? { logged: true } : {}) });
};
