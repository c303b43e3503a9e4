/**
 * Disposing a session's owned resources within its stop grace period.
 *
 * @module
 */

import type { Clock, TimerHandle } from "../time/Clock.js";
import type { Logger } from "../Logger.js";

/**
 * Disposes `resources` in order, waiting at most `graceMs` on `clock`: a checkpoint manager
 * waits for a save still in flight, which a hook may already have given up on. Past the period
 * the disposal goes on in the background and a warning says so.
 */
export const disposeWithin = async (resources: readonly AsyncDisposable[], graceMs: number, clock: Clock, logger: Logger): Promise<void> => {
  if (resources.length === 0) return;
  const disposing = (async () => {
    for (const r of resources) await r[Symbol.asyncDispose]();
  })();
  let timer: TimerHandle | undefined;
  const late = new Promise<boolean>((resolve) => {
    timer = clock.setTimer(graceMs, () => resolve(true));
  });
  const timedOut = await Promise.race([disposing.then(() => false), late]).finally(() => timer?.cancel());
  if (timedOut) {
    logger.warn("MonitoredSession.close: the session's resources (its checkpoint manager, waiting for a save) were not released within the stop grace period; they are released when it finishes.");
    disposing.catch((e: unknown) => logger.error(`MonitoredSession.close: releasing the session's resources failed: ${String(e)}`));
  }
};
