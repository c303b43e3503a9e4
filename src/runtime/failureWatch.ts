/**
 * The failure-watch step of a task's start (clusterRuntime.ts `startClusterTask`): a blocking
 * wait on the coordination service that ends as soon as the cluster fails ({@link watchCluster}),
 * with a lost chief waited out and a lost rank of a re-forming group waited for first; and which
 * tasks a failure finds lost ({@link lostOf}), for `launch`.
 *
 * @module
 */

import { servedByChief } from "../cluster/coordination/backends.js";
import type { CoordinationClient } from "../cluster/coordination/CoordinationClient.js";
import { clusterFailureOf, DeadlineExceededError, OpError, UnknownError } from "../errors.js";
import type { ChiefRecovery } from "./chiefRecovery.js";
import { ReplicaGroupError } from "./replicaGroup.js";

/** The key the watch waits on: nobody writes it. */
const WATCH_KEY = "monitored-session/run/watch";

/** The tasks the cluster's failure `e` finds lost: those declared failed; the chief (`chief`, on a worker) when the service it hosts is gone. */
export const lostOf = (e: OpError, chief: string | undefined): readonly string[] => {
  const f = e.failure;
  if (f?.kind === "declaredFailed") return f.tasks;
  return f?.kind === "serviceGone" && servedByChief(f.backend) && chief !== undefined ? [chief] : [];
};

/**
 * Waits on a key nobody writes, again after each timeout: the coordination client rejects the
 * wait as soon as the cluster fails. Rejections after `finishing()` (the task left) are not
 * failures. With a `recovery`, a loss of the chief is waited out: the failure is the recovery's
 * (the chief did not come back in time, or a termination notice). With `lost` (a data-parallel
 * group that waits for a lost worker), each failure goes there first: the watch goes on once the
 * group re-formed, and reports what `lost` rejects with.
 */
export const watchCluster = async (
  client: CoordinationClient,
  finishing: () => boolean,
  recovery: ChiefRecovery | undefined,
  lost: ((e: OpError) => Promise<void>) | undefined,
): Promise<OpError> => {
  for (;;) {
    const generation = client.generation;
    try {
      await client.get(WATCH_KEY);
    } catch (e) {
      if (e instanceof DeadlineExceededError) continue;
      if (finishing()) return new Promise<OpError>(() => undefined);
      let error = e;
      // A group that waits for its lost ranks: watch again once it re-formed (a new generation).
      if (lost !== undefined && clusterFailureOf(e)?.kind !== "preemption" && e instanceof OpError) {
        try {
          await lost(e);
          continue;
        } catch (f) {
          if (finishing()) return new Promise<OpError>(() => undefined);
          error = f instanceof ReplicaGroupError ? f.cause : f;
        }
      }
      if (recovery?.isChiefLoss(e) === true) {
        try {
          await recovery.recover(e as OpError, generation);
          continue;
        } catch (f) {
          if (finishing()) return new Promise<OpError>(() => undefined);
          error = f;
        }
      }
      return error instanceof OpError ? error : new UnknownError(String(error));
    }
  }
};
