/**
 * What `run`'s training (runTraining.ts `train`) shares between its loop, its failure path and its
 * clean-up, as one value ({@link RunState}), and the failure path itself
 * ({@link exitCodeOfFailure}): the exit code of training that ended with an error, and the one
 * line that says why.
 *
 * @module
 */

import type { TrainingConfig } from "../config/index.js";
import { CheckpointDirInUseError } from "../checkpoint/index.js";
import { clusterFailureOf, InvalidArgumentError, ModelMismatchError } from "../errors.js";
import type { Logger } from "../Logger.js";
import type { PreemptionCheckpointHandler } from "../preemption/PreemptionCheckpointHandler.js";
import { ChiefLostError } from "../preemption/PreemptionCluster.js";
import type { TerminationNotices } from "../preemption/TerminationNotices.js";
import type { ClusterTask } from "../runtime/clusterTask.js";
import { ExitCodes } from "../runtime/exitCodes.js";
import type { TaskRuntime } from "../runtime/index.js";
import { ReplicaGroupError, type ReplicaGroup } from "../runtime/replicaGroup.js";
import { fileWriterCache } from "../summary/index.js";
import type { Clock } from "../time/Clock.js";
import { settledWithin } from "../time/settledWithin.js";
import { failureMessage } from "./faults.js";
import type { createProgress, Following } from "./progress.js";
import { exitCodeOf, PreemptedExit } from "./runPreemption.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What `train` learns as it goes, read by its failure path and its clean-up. */
export interface RunState {
  /** The preemption handler, once the session exists (a chief with a checkpoint directory, or any task of a cluster). */
  handler: PreemptionCheckpointHandler | undefined;
  /** Set before the handler closes: a notice after that finds training over. */
  handlerClosing: boolean;
  /** Training began (the progress display started). */
  started: boolean;
  /** The progress display's subscription to the session's events. */
  following: Following | undefined;
  /** The cluster's first failure that was no preemption (a task declared failed, a reported error, the service gone). */
  clusterFailure: Error | undefined;
  /** Another task's termination notice, told through the cluster: this task's preemption too. */
  clusterPreemption: Error | undefined;
  /** The global step where the replica group stopped (a worker's line says it). */
  groupStopStep: number | undefined;
  /** The error of the step that failed, if one did (the agreement may turn it into a preemption). */
  stepFailure: unknown;
  /** Steps this process trained. */
  runs: number;
  /** The handler is closed and the task is leaving through the shutdown barrier: the clean-up does not leave the cluster again. */
  finished: boolean;
}

/** What the failure path reads besides the state: the run's settings and its parts. */
export interface RunParts {
  readonly io: { readonly err: NodeJS.WritableStream };
  readonly progress: Pick<ReturnType<typeof createProgress>, "stop">;
  readonly verbose: boolean;
  readonly config: TrainingConfig;
  readonly task: ClusterTask | undefined;
  readonly isChief: boolean;
  readonly group: ReplicaGroup | undefined;
  readonly cluster: TaskRuntime | undefined;
  readonly notices: TerminationNotices;
  readonly logger: Logger;
  readonly clock: Clock;
  /** Prints where the checkpoints and summaries are (the chief). */
  readonly where: () => void;
}

/** How long a rank whose collective failed waits for the coordination service to say why (a preemption exits 42, not 1). */
const WHY_A_PEER_LEFT_MS = 5_000;

/** How the replicas' signature check's error starts (to print it without the report's framing). */
const MODEL_MISMATCH = "The replicas' models differ:";

/** The name a reported model mismatch carries (its failure's `errorName`). */
const MODEL_MISMATCH_ERROR = new ModelMismatchError().name;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** The state of a run that has not started yet. */
export const initialRunState = (): RunState => ({
  handler: undefined,
  handlerClosing: false,
  started: false,
  following: undefined,
  clusterFailure: undefined,
  clusterPreemption: undefined,
  groupStopStep: undefined,
  stepFailure: undefined,
  runs: 0,
  finished: false,
});

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Whether this task is being preempted: its notice, another task's told through the cluster, the group's agreed stop, or the handler's. */
export const preempting = (state: RunState, notices: TerminationNotices, group: ReplicaGroup | undefined): boolean =>
  notices.first !== undefined || state.clusterPreemption !== undefined || group?.stopAgreed === true || state.handler?.terminationReceived === true;

/** Why this task is preempted, for its last line. */
export const whyPreempted = (state: RunState, notices: TerminationNotices, group: ReplicaGroup | undefined): string =>
  notices.first !== undefined
    ? notices.describe(notices.first)
    : (state.clusterPreemption?.message ??
      (state.handler?.claimHeardFrom !== undefined
        ? `${state.handler.claimHeardFrom}'s termination notice`
        : group !== undefined
          ? "a stop the replica group agreed on (another rank's termination notice)"
          : "another task's termination notice, agreed through the coordination service"));

/** The exit code of training that ended with `e` (printing why, and telling the cluster when this task failed). */
export const exitCodeOfFailure = async (e: unknown, state: RunState, parts: RunParts): Promise<number> => {
  const { io, progress, verbose, config, task, isChief, group, cluster, notices, logger, clock, where } = parts;
  const why = (): string => whyPreempted(state, notices, group);
  await state.following?.settled();
  if (state.started) progress.stop();
  await fileWriterCache.closeAll().catch(() => undefined);
  if (e instanceof CheckpointDirInUseError) {
    io.err.write(`${e.message}\n`);
    return ExitCodes.usage;
  }
  // A collective's failure carries the collective's error.
  const groupFailure = e instanceof ReplicaGroupError ? e.cause : undefined;
  // Another task's termination notice that ended the group's wait for a lost rank.
  if (groupFailure !== undefined && clusterFailureOf(groupFailure)?.kind === "preemption") state.clusterPreemption ??= groupFailure;
  // A peer that leaves the group for a termination notice looks like a peer gone: the
  // coordination service says which, shortly after (its report, or the failure it declares).
  if (groupFailure !== undefined && cluster !== undefined && !preempting(state, notices, group)) await settledWithin(cluster.failed, WHY_A_PEER_LEFT_MS, clock);
  // A preemption report that ended a wait of this task (a data-parallel group started by hand, re-forming after a lost rank).
  if (clusterFailureOf(e)?.kind === "preemption") e = new PreemptedExit(exitCodeOf(config), false);
  // The replicas build different models: a configuration to fix, before any update. Found by
  // the replicas' signature check at the first step, or by a worker that cannot take the
  // chief's values; the others learn it from the cluster (the reported error).
  const mismatch =
    e instanceof ModelMismatchError
      ? e.message
      : group !== undefined && !isChief && !state.started && e instanceof InvalidArgumentError && / mismatch/.test(e.message)
        ? `${MODEL_MISMATCH} ${task?.name ?? "this task"} (rank ${group.rank}) cannot take the chief's values: ${e.message}. Every worker must build the same model (same layers, shapes and dtypes).`
        : state.clusterFailure !== undefined && reportsModelMismatch(state.clusterFailure)
          ? // For the line only: the reporter's description, without the report's framing.
            state.clusterFailure.message.slice(Math.max(0, state.clusterFailure.message.indexOf(MODEL_MISMATCH)))
          : undefined;
  if (mismatch !== undefined && group !== undefined) {
    io.err.write(`${task?.name ?? "this task"}: ${mismatch.split("\n")[0] ?? ""}\n`);
    if (cluster !== undefined && state.clusterFailure === undefined) await cluster.reportFailure(new ModelMismatchError(mismatch));
    return ExitCodes.usage;
  }
  // A notice while this worker's session waited for its lost chief (before its handler existed).
  const chiefLost = e instanceof ChiefLostError ? e : undefined;
  if (chiefLost !== undefined) e = new PreemptedExit(ExitCodes.chiefLost, false);
  if (e instanceof PreemptedExit) {
    // The checkpoint is durable: a platform waiting for it (Azure) may go on.
    if (e.saved) await notices.acknowledge();
    if (e.exitCode === ExitCodes.chiefLost && !e.saved) {
      // What said the chief was lost: the collective's error, the failed step's, or the cluster's.
      const { stepFailure } = state;
      const loss = groupFailure ?? (stepFailure instanceof ReplicaGroupError ? stepFailure.cause : stepFailure) ?? chiefLost ?? state.clusterFailure;
      if (loss instanceof ChiefLostError) {
        logger.error(`Preempted (${why()}): ${loss.message}; exiting with ${e.exitCode} without saving (the restart resumes from the last checkpoint).`);
        return e.exitCode;
      }
      logger.error(
        `Preempted (${why()}), and the chief was lost meanwhile (${loss === undefined ? "see above" : describeError(loss)}): nobody can write the checkpoint; exiting with ${e.exitCode} without saving (the restart resumes from the last checkpoint).`,
      );
      return e.exitCode;
    }
    logger.info(
      e.saved
        ? `Preempted: checkpoint saved; exiting with ${e.exitCode} (run the same command again to resume).`
        : groupFailure !== undefined || (group !== undefined && state.stepFailure !== undefined)
          ? `Preempted (${why()}) during a collective, which was cancelled: exiting with ${e.exitCode} without saving (the run resumes from the last checkpoint).`
          : task !== undefined && !isChief
            ? `Preempted (${why()}): a worker exits with ${e.exitCode}${state.groupStopStep === undefined ? "" : ` at global step ${state.groupStopStep}, where the replica group stopped,`} without saving (the chief saves).`
            : state.handler !== undefined && state.runs === 0
              ? `Preempted (${why()}) before the first step: exiting with ${e.exitCode} without saving (nothing was trained since the checkpoint this run started from; run the same command again to resume).`
              : `Preempted (${why()}) with no preemption checkpoint configured: exiting with ${e.exitCode} without saving.`,
    );
    where();
    return e.exitCode;
  }
  io.err.write(failureMessage(groupFailure ?? e, verbose));
  // The others stop too, naming this task (unless the failure came from the cluster).
  if (cluster !== undefined && e !== state.clusterFailure && state.clusterFailure === undefined) await cluster.reportFailure(groupFailure ?? e);
  return ExitCodes.failure;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** Another task reported a {@link ModelMismatchError} to the cluster (told by the failure's class name, never by its message). */
const reportsModelMismatch = (e: Error): boolean => {
  const f = clusterFailureOf(e);
  return f?.kind === "reported" && f.errorName === MODEL_MISMATCH_ERROR;
};

/** `Name: first line of the message`. */
const describeError = (e: unknown): string => (e instanceof Error ? `${e.name}: ${e.message.split("\n")[0] ?? ""}` : String(e));
