/**
 * The steps of `startClusterTask` (clusterRuntime.ts) after the task registered and joined its
 * group: how the task outlives a loss, how it watches the cluster, and what it tells the cluster.
 *
 * - {@link survivalOf}: a data-parallel group re-forms after a lost worker (`GroupRejoin`),
 *   started by hand or by `launch` when it restarts a lost worker alone; a worker without a group
 *   waits for its lost chief (`ChiefRecovery`), not under `launch` (which restarts the group when
 *   the chief is lost); both stop waiting on a preemption (`GroupPreemption`).
 * - {@link watchTaskFailures}: the cluster's first failure, handed to the group, the blocked
 *   collective and `launch`.
 * - {@link preemptionReporter}, {@link failureReporter}: a termination notice no agreement carries,
 *   or this task's failure, told to every task.
 *
 * @module
 */

import type { CoordinationHost } from "../cluster/coordination/backend.js";
import type { CoordinationClient } from "../cluster/coordination/CoordinationClient.js";
import { chiefTaskOf } from "../cluster/coordination/identity.js";
import { fromStatus } from "../cluster/coordination/status.js";
import type { TcpCollective } from "../cluster/collective/TcpCollective.js";
import type { ModelPublisher } from "../cluster/ModelPublisher.js";
import { clusterFailureOf, OpError, UnknownError } from "../errors.js";
import type { Logger } from "../Logger.js";
import { TerminationNotices } from "../preemption/TerminationNotices.js";
import type { Clock } from "../time/Clock.js";
import { ChiefRecovery } from "./chiefRecovery.js";
import type { ClusterTask } from "./clusterTask.js";
import { failGroup } from "./collectiveJoin.js";
import { connectCurrent } from "./coordinationSetup.js";
import type { RuntimeEmit } from "./events.js";
import { lostOf, watchCluster } from "./failureWatch.js";
import { GroupPreemption, preemptionReport } from "./groupPreemption.js";
import { GroupRejoin } from "./groupRejoin.js";
import { LAUNCH_READY_ENV } from "./launchReady.js";
import { LAUNCH_RESTARTS_ALONE_ENV, launchStatusWriter, launchTaskName } from "./launchStatus.js";
import type { ReplicaGroup } from "./replicaGroup.js";
import type { TaskExit } from "./taskExit.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What a started task is made of, which its later steps share. */
export interface TaskParts {
  readonly task: ClusterTask;
  /** This task's coordination name. */
  readonly me: string;
  /** Every task's coordination name, this one included. */
  readonly tasks: readonly string[];
  readonly client: CoordinationClient;
  /** The coordination service, when this task hosts it. */
  readonly host: CoordinationHost | undefined;
  readonly group: ReplicaGroup | undefined;
  readonly exit: TaskExit;
  readonly env: NodeJS.ProcessEnv;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly emit: RuntimeEmit;
}

/** How the task waits out a loss, when it does. */
export interface Survival {
  /** The group's wait for a lost rank (a group started by hand, or by `launch` when it restarts a lost worker alone). */
  readonly rejoin: GroupRejoin | undefined;
  /** A worker's wait for its lost chief (no group, not started by `launch`). */
  readonly recovery: ChiefRecovery | undefined;
  /** What this rank knows of a preemption; while the group waits for a lost rank, it ends the wait. */
  readonly preemptions: GroupPreemption;
}

/** What {@link survivalOf} needs besides the task's parts. */
export interface SurvivalOptions {
  /** How long a wait for the chief or a lost rank lasts. */
  readonly maxWaitSecs: number;
  /** How long a rank goes on registering while nobody answers at the chief's service (the heartbeat timeout). */
  readonly unreachableTimeoutMs: number;
  /** The barrier every task passes once its session exists. */
  readonly startBarrier: string;
  /** Joins the group's ring again once it re-forms. */
  readonly joinGroup: (group: ReplicaGroup) => Promise<TcpCollective>;
  /** The chief's publisher: a returning worker asks for the chief's model while the chief's step waits for it. */
  readonly publisher: ModelPublisher | undefined;
  /** Take the parent's death as a termination notice (tasks of `launch -- <command>`). */
  readonly watchParent: boolean;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * How the task outlives a loss: a worker that trains its own replica outlives its chief; a group
 * outlives a lost worker. Leaving, the task stops watching its parent and ends a wait for its
 * chief or a lost rank.
 */
export const survivalOf = (parts: TaskParts, options: SurvivalOptions): Survival => {
  const { task, client, host, group, exit, clock, logger, emit } = parts;
  const { maxWaitSecs, startBarrier } = options;
  const chief = task.isChief ? undefined : chiefTaskOf(task.clusterSpec);
  const launched = parts.env[LAUNCH_READY_ENV] === "1";
  // Under launch, a group waits for a lost worker only when launch restarts one alone.
  const restartedAlone = launched && parts.env[LAUNCH_RESTARTS_ALONE_ENV] === "1";
  const rejoin =
    group === undefined || (launched && !restartedAlone)
      ? undefined
      : new GroupRejoin({
          client,
          group,
          name: task.name,
          isChief: task.isChief,
          maxWaitSecs,
          unreachableTimeoutMs: options.unreachableTimeoutMs,
          startBarrier: (timeoutMs) => client.barrier(startBarrier, { timeoutMs }),
          join: async () => exit.ringFormed(await options.joinGroup(group)),
          waiting: (waiting) => options.publisher?.stepWaits(waiting),
          // The chief lost while the group waited: launch ends it at once (a frozen one would hold the group until its restart).
          ended: launchTeller(parts),
          clock,
          logger,
          emit,
        });
  const preemptions = new GroupPreemption({ name: task.name, client, host, rejoin, exit, logger });
  if (rejoin !== undefined && group !== undefined) group.rejoinWith((cause) => preemptions.answerLoss(group, cause));
  const recovery =
    group !== undefined || chief === undefined || launched
      ? undefined
      : new ChiefRecovery({
          client,
          name: task.name,
          chief,
          tasks: parts.tasks,
          maxWaitSecs,
          connect: (timeoutMs) => connectCurrent(client, timeoutMs, clock, logger, "maxWaitSecs"),
          startBarrier: () => client.barrier(startBarrier),
          clock,
          logger,
          emit,
        });
  const parentWatch = options.watchParent ? watchParentOf(parts.me, clock, logger, () => exit.leaving) : undefined;
  exit.cancelOnLeave(parentWatch);
  exit.cancelOnLeave(recovery);
  exit.cancelOnLeave(rejoin);
  exit.skipWhenTelling(() => rejoin?.lost);
  return { rejoin, recovery, preemptions };
};

/**
 * The cluster's first failure. A loss the group waits for re-forms it; any other failure ends a
 * wait under way, and the group. Nobody may be listening: the failure is read when the run loop
 * asks. A rank blocked in a collective hears of it at once, not at the collective's deadline;
 * under `launch`, the tasks found lost are told to `launch`, which ends them at once (a frozen one
 * would otherwise be waited out for its kill delay), also when the group waits for a lost worker
 * (`launch` then starts it again alone).
 */
export const watchTaskFailures = (parts: TaskParts, survival: Survival): Promise<OpError> => {
  const { client, group, exit } = parts;
  const { rejoin, recovery, preemptions } = survival;
  const tellLaunch = launchTeller(parts);
  const lost =
    rejoin === undefined || group === undefined
      ? undefined
      : async (e: OpError): Promise<void> => {
          if (!rejoin.isLoss(e)) {
            rejoin.cancel(e);
            throw e;
          }
          // Under a launch that restarts a lost worker alone: a frozen one is ended at once, then started again.
          tellLaunch(e);
          await group.reform(e);
        };
  const failed = watchCluster(client, () => exit.leaving, recovery, lost);
  // Another rank's preemption report reached this one: nothing more to tell.
  failed.then((e) => void (clusterFailureOf(e)?.kind === "preemption" && preemptions.heard()), () => undefined);
  failed.catch(() => undefined);
  if (group !== undefined) failed.then((e) => failGroup(group, e), () => undefined);
  failed.then(tellLaunch, () => undefined);
  return failed;
};

/** Tells `launch` (when it started this task) the tasks `e` found lost, this one left out; does nothing otherwise. */
const launchTeller = (parts: TaskParts): ((e: OpError) => void) => {
  const { task, me } = parts;
  const toLaunch = launchStatusWriter(parts.env);
  return (e) => {
    const lostTasks = lostOf(e, task.isChief ? undefined : chiefTaskOf(task.clusterSpec)).filter((t) => t !== me);
    if (lostTasks.length > 0) toLaunch({ type: "lost", tasks: lostTasks.map(launchTaskName), why: e.failure?.kind === "declaredFailed" ? "declaredFailed" : "serviceGone" });
  };
};

/**
 * Tells every task of a termination notice that no preemption agreement carries (one while the
 * task starts, or after its handler closed), so that every task exits with the preemption code.
 */
export const preemptionReporter =
  (parts: TaskParts, survival: Survival) =>
  async (what: string): Promise<void> => {
    const { task, client, host, exit } = parts;
    const { rejoin, recovery, preemptions } = survival;
    const report = preemptionReport(task.name, what);
    // This rank told the group already (or heard another's report): every rank knows.
    if (preemptions.told) {
      rejoin?.cancel(report);
      return;
    }
    // A worker waiting for its chief has nobody to tell: it stops waiting and exits with the preemption code.
    if (recovery?.cancel(report) === true) return;
    // A group waiting for a lost rank stops waiting: its ranks exit with the preemption code.
    const wasRegrouping = rejoin?.waiting === true;
    rejoin?.cancel(report);
    // A notice while the chief serves the others after its own exit: they exit with the
    // preemption code, and the chief's wait ends. While the group re-forms, the chief's client
    // is between generations and the others wait to register in its next one: they hear it
    // from the service itself too.
    if (exit.draining && host !== undefined) return host.report(report);
    if (wasRegrouping && host !== undefined) {
      // Final: a rank that registers again after this task left still hears it (see `finish`).
      return host.report(report, { final: true });
    }
    // A rank other than the chief, between generations: its client has no current one, so
    // the report is final, taken from its last registration; the chief's service passes it to
    // every rank in any generation.
    const sent = client.reportErrorToCluster(report, wasRegrouping ? { final: true } : {}).catch(() => undefined);
    exit.reported(sent);
    await sent;
  };

/**
 * Tells every task that this one failed with `error`. An OpError keeps its class and code on every
 * task (a ResourceExhaustedError stays one), and its own name in the failure (a ModelMismatchError
 * is told apart without its message); anything else is UnknownError.
 */
export const failureReporter =
  (parts: Pick<TaskParts, "task" | "me" | "client">) =>
  async (error: unknown): Promise<void> => {
    const { task, me, client } = parts;
    const message = error instanceof Error ? `${error.name}: ${error.message.split("\n")[0] ?? ""}` : String(error);
    const reported =
      error instanceof OpError
        ? fromStatus({ code: error.code, message: `task ${task.name} failed: ${message}`, failure: { kind: "reported", reporter: me, errorName: error.name } })
        : new UnknownError(`task ${task.name} failed: ${message}`);
    await client.reportErrorToCluster(reported).catch(() => undefined);
  };

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/**
 * Watches the parent process with the notices' own parent watch (no signal is taken over): once
 * it died (this process was re-parented), this process gets SIGTERM, once.
 */
const watchParentOf = (me: string, clock: Clock, logger: Logger, finishing: () => boolean): { cancel(): void } => {
  const notices = TerminationNotices.start({ signals: [], watchParent: true, watchOutputs: [], clock, logger });
  notices.notices$.subscribe(() => {
    if (finishing()) return;
    // Whoever read this task's output is gone with launch: a write to the broken pipe must not end the task before its save.
    for (const stream of [process.stdout, process.stderr]) stream.on("error", () => undefined);
    logger.warn(`${me}: the parent process (launch) exited: taking it as a termination notice (SIGTERM to this process).`);
    process.kill(process.pid, "SIGTERM");
  });
  return { cancel: () => notices.close() };
};
