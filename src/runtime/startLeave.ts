/**
 * A task that gets a termination notice while it starts (registration, the start barrier,
 * joining its replica group) stops its start: `run` (src/cli/clusterJoin.ts) and `startTask()`
 * both leave through {@link abandonStart}.
 *
 * @module
 */

import type { Clock } from "../time/Clock.js";
import { settledWithin } from "../time/settledWithin.js";

/** How long a task that leaves while it starts waits for its start to stop (its report to the others is bounded by the heartbeat timeout, three times). */
const LEAVE_BOUND_MS = 60_000;

/**
 * Waits, within a bound, for a start stopped by a notice (`StartClusterOptions.leave`) to stop;
 * a start that finished meanwhile leaves the cluster without a save. It tells the other tasks
 * once every task registered. Never rejects.
 */
export const abandonStart = async (starting: Promise<{ finish(saved: boolean): Promise<unknown> }>, clock: Clock): Promise<void> =>
  settledWithin(
    starting.then((runtime) => runtime.finish(false)),
    LEAVE_BOUND_MS,
    clock,
  );
