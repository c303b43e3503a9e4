/**
 * How a task of a cluster registers with its coordination service (again after each new
 * generation, saying while it waits), and the `cluster.timeouts` section as the service's
 * timeouts. Used by clusterRuntime.ts; the backend itself is the registry's (cluster/coordination/backend.ts).
 *
 * @module
 */

import type { Clock } from "../time/Clock.js";
import type { CoordinationClient } from "../cluster/coordination/CoordinationClient.js";
import type { CoordinationTimeouts } from "../cluster/coordination/CoordinationConfig.js";
import { AbortedError } from "../errors.js";
import type { Logger } from "../Logger.js";
import type { ClusterTask } from "./clusterTask.js";

/** How often {@link connectCurrent} says that registration still waits. */
const REGISTRATION_PROGRESS_MS = 30_000;

/**
 * Registers, again after each AbortedError (a previous launch's generation, before the new chief
 * started its own: under etcd the old keys outlive the old cluster), until `timeoutMs` has passed.
 * While it waits, it says so every {@link REGISTRATION_PROGRESS_MS} (a worker whose peers resolve
 * but never answer would otherwise wait in silence for the whole timeout); `limit` names the
 * setting that bounds the wait.
 */
export const connectCurrent = async (
  client: CoordinationClient,
  timeoutMs: number,
  clock: Clock,
  logger: Logger,
  limit = "cluster.timeouts.registrationTimeoutSecs",
): Promise<void> => {
  const startMs = clock.now();
  const deadline = startMs + timeoutMs;
  // Neither backend's client can tell which tasks have not registered yet (the service knows).
  const tick = (): void => {
    logger.info(
      `Still registering with the coordination service after ${Math.round((clock.now() - startMs) / 1000)} s (waiting for every task of the cluster; up to ${Math.round(timeoutMs / 1000)} s, ${limit}).`,
    );
    progress = clock.setTimer(REGISTRATION_PROGRESS_MS, tick);
  };
  let progress = clock.setTimer(REGISTRATION_PROGRESS_MS, tick);
  try {
    for (let backoffMs = 100; ; backoffMs = Math.min(2 * backoffMs, 1000)) {
      try {
        await client.connect();
        return;
      } catch (e) {
        if (!(e instanceof AbortedError) || clock.now() + backoffMs >= deadline) throw e;
        if (backoffMs === 100) logger.info(`Registration aborted (${e.message}); registering again for the chief's new generation.`);
        await new Promise<void>((resolve) => clock.setTimer(backoffMs, resolve));
      }
    }
  } finally {
    progress.cancel();
  }
};

/** The `cluster.timeouts` section (seconds) as the coordination service's overrides (ms). */
export const timeoutsOf = (t: ClusterTask["options"]["timeouts"]): Partial<CoordinationTimeouts> => {
  if (t === undefined) return {};
  const ms = (s: number | undefined): number | undefined => (s === undefined ? undefined : s * 1000);
  const entries: [keyof CoordinationTimeouts, number | undefined][] = [
    ["heartbeatIntervalMs", ms(t.heartbeatIntervalSecs)],
    ["heartbeatTimeoutMs", ms(t.heartbeatTimeoutSecs)],
    ["registrationTimeoutMs", ms(t.registrationTimeoutSecs)],
    ["barrierTimeoutMs", ms(t.barrierTimeoutSecs)],
    ["getTimeoutMs", ms(t.getTimeoutSecs)],
    ["shutdownTimeoutMs", ms(t.shutdownTimeoutSecs)],
  ];
  return Object.fromEntries(entries.filter(([, v]) => v !== undefined)) as Partial<CoordinationTimeouts>;
};
