/**
 * The races of `run` (src/cli/run.ts) with the cluster: joining it (the task's server and its
 * registration) while a termination notice may come first, and creating the session while the
 * cluster may fail first.
 *
 * @module
 */

import type { Clock } from "../time/Clock.js";
import type { Logger } from "../Logger.js";
import type { MonitoredSession } from "../pipeline/MonitoredSession.js";
import type { TerminationNotices } from "../preemption/TerminationNotices.js";
import { ClusterStartError, startClusterTask, type ClusterRuntime, type ClusterTask, type ReplicaGroup } from "../runtime/index.js";
import { ExitCodes } from "../runtime/exitCodes.js";
import { isPreemptionReport } from "../runtime/preemptionReport.js";
import { launchTaskName } from "../runtime/launchStatus.js";
import { abandonStart } from "../runtime/startLeave.js";
import { failureMessage } from "./faults.js";

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Starts the task's server and registers it with the cluster: the runtime, or the exit code when
 * it cannot (2 for what the user fixes, with one line; 42 for a termination notice that came
 * while it waited for the other tasks; 1 for anything else).
 */
export const startCluster = async (
  task: ClusterTask,
  io: { readonly env: NodeJS.ProcessEnv; readonly err: NodeJS.WritableStream },
  logger: Logger,
  clock: Clock,
  notices: TerminationNotices,
  group: ReplicaGroup | undefined,
  maxWaitSecs: number | undefined,
): Promise<ClusterRuntime | number> => {
  let onNotice: ((what: string) => void) | undefined;
  const noticed = new Promise<string>((ok) => {
    onNotice = ok;
  });
  const subscription = notices.notices$.subscribe((n) => onNotice?.(notices.describe(n)));
  // A notice while the task starts stops the start; once every task registered, the others hear of it.
  const starting = startClusterTask(task, { env: io.env, logger, clock, group, maxWaitSecs, leave: noticed });
  try {
    const first = await Promise.race([starting, noticed.then(() => "notice" as const)]);
    if (first !== "notice") return first;
    // The start stops (telling the others when every task registered), within a bound; a start
    // that finished meanwhile leaves the cluster.
    await abandonStart(starting, clock);
    logger.info(`Termination notice (${notices.first === undefined ? "notice" : notices.describe(notices.first)}) while ${task.name} joined the cluster: exiting without saving (run the same command again to resume).`);
    return ExitCodes.preempted;
  } catch (e) {
    // Another task left for its termination notice while this one started: nothing was trained.
    if (isPreemptionReport(e)) {
      logger.info(`${e.failure?.kind === "preemption" ? `${launchTaskName(e.failure.reporter)}'s termination notice (${e.failure.notice})` : "another task's termination notice"} while ${task.name} joined the cluster: exiting with ${ExitCodes.preempted} without saving (run the same command again to resume).`);
      return ExitCodes.preempted;
    }
    if (e instanceof ClusterStartError) {
      io.err.write(`${e.message}\n`);
      return ExitCodes.usage;
    }
    io.err.write(failureMessage(e, false, `${task.name} could not join the cluster`));
    return ExitCodes.failure;
  } finally {
    subscription.unsubscribe();
  }
};

/**
 * The session being created, unless the cluster fails first (its error). A termination notice
 * meanwhile goes to the preemption handler once it exists (a worker's agreement tells the others).
 */
export const raceCreation = async (creating: Promise<MonitoredSession>, clusterFailed: Promise<never> | undefined): Promise<MonitoredSession> =>
  clusterFailed === undefined ? creating : Promise.race([creating, clusterFailed]);
