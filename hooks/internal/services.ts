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
 * Whether a hook prints its own lines: with a logger of its own (`own.logger`), or outside a
 * session. Otherwise its `warning` and `stepRate` events are its lines (the session's log
 * observer prints them); when it prints them itself, those events say `logged`.
 */
export const printsItself = (own: OwnServices, env: HookEnv | undefined): boolean => env === undefined || own.logger !== undefined;

/** Warns `message`: a `warning` event in a session, and `logger.warn` when the hook {@link printsItself}. */
export const warn = (own: OwnServices, env: HookEnv | undefined, message: string, error?: unknown): void => {
  const { clock, logger } = hookServices(own, env);
  const logged = printsItself(own, env);
  if (logged) logger.warn(message);
  env?.emit({ type: "warning", time: clock.now(), message, ...(error === undefined ? {} : { error }), ...(logged ? { logged: true } : {}) });
};
