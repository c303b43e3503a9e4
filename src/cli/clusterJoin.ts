/**
 * The races of `run` (src/cli/run.ts) with the cluster: joining it (the task's server and its
 * registration) while a termination notice may come first, and creating the session while the
 * cluster may fail first.
 *
 * @module
 */

import { processPerTaskProblem } from "../cluster/coordination/backends.js";
import { taskNamesOf } from "../cluster/coordination/identity.js";
import { ComponentEvents } from "../events/componentEvents.js";
import type { Clock } from "../time/Clock.js";
import type { Logger } from "../Logger.js";
import type { MonitoredSession } from "../pipeline/MonitoredSession.js";
import type { TerminationNotices } from "../preemption/TerminationNotices.js";
import { ClusterStartError, type ClusterTask, type ReplicaGroup, type RuntimeEvent, type TaskRuntime } from "../runtime/index.js";
import { ExitCodes } from "../runtime/exitCodes.js";
import { launchStatusWriter } from "../runtime/launchStatus.js";
import { joinAsTask } from "../runtime/startTask.js";
import { failureMessage } from "./faults.js";

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Starts the task's server and registers it with the cluster, as `startTask()` does (the same
 * task object: src/runtime/startTask.ts): the task, or the exit code when it cannot (2 for what
 * the user fixes, with one line; the preemption code for a termination notice while it joined,
 * its own or another task's; 1 for anything else).
 */
export const startCluster = async (
  task: ClusterTask,
  io: { readonly env: NodeJS.ProcessEnv; readonly err: NodeJS.WritableStream },
  logger: Logger,
  clock: Clock,
  notices: TerminationNotices,
  group: ReplicaGroup | undefined,
  maxWaitSecs: number | undefined,
  exitCode: number,
): Promise<TaskRuntime | number> => {
  const spec = task.clusterSpec;
  const perProcess = processPerTaskProblem(task.options.backend, taskNamesOf(spec).length, "monitored-session run");
  if (perProcess !== undefined) {
    io.err.write(`${task.name}: ${perProcess}\n`);
    return ExitCodes.usage;
  }
  // The task's lines are its events: `logger` prints them until `run`'s session adopts them.
  const events = new ComponentEvents<RuntimeEvent>(logger, () => clock.now(), "runtime");
  try {
    const joined = await joinAsTask({
      task,
      group,
      notices,
      env: io.env,
      maxWaitSecs,
      events,
      clock,
      // The parent's exit is one of `run`'s notices (a save, then the preemption code).
      watchParent: false,
      toLaunch: launchStatusWriter(io.env),
      exitCode,
      // A second notice is `run`'s (the grace period: src/cli/forcedExit.ts); a chief lost while the
      // notice is held ends the session's wait for it (43).
      held: { holder: "the preemption handler" },
    });
    if ("runtime" in joined) return joined.runtime;
    events.complete();
    return joined.exitCode;
  } catch (e) {
    events.complete();
    if (e instanceof ClusterStartError) {
      io.err.write(`${e.message}\n`);
      return ExitCodes.usage;
    }
    io.err.write(failureMessage(e, false, `${task.name} could not join the cluster`));
    return ExitCodes.failure;
  }
};

/**
 * The session being created, unless the cluster fails first (its error). A termination notice
 * meanwhile goes to the preemption handler once it exists (a worker's agreement tells the others).
 */
export const raceCreation = async (creating: Promise<MonitoredSession>, clusterFailed: Promise<never> | undefined): Promise<MonitoredSession> =>
  clusterFailed === undefined ? creating : Promise.race([creating, clusterFailed]);
