/**
 * What `run`'s training opens before its session (runTraining.ts), in this order: the chief's
 * checkpoint directory (its lock first), the goodput log, the task's server and its registration
 * with the cluster, the goodput observers, and the board beside training.
 *
 * @module
 */

import { existsSync } from "node:fs";
import { resolve } from "node:path";

import { BundleSaver, CheckpointDirInUseError, openCheckpointDirectory, type CheckpointManager } from "../checkpoint/index.js";
import { checkpointDirOf } from "../config/index.js";
import { logObserver } from "../events/logObserver.js";
import { GoodputRecorder } from "../goodput/GoodputRecorder.js";
import { goodputSummaries } from "../goodput/goodputSummaries.js";
import type { TerminationNotices } from "../preemption/TerminationNotices.js";
import { ExitCodes } from "../runtime/exitCodes.js";
import type { TaskRuntime } from "../runtime/index.js";
import { fileWriterCache } from "../summary/index.js";
import type { Clock } from "../time/Clock.js";
import type { MonitoredTrainingSessionOptions } from "../training/monitoredTrainingSession.js";
import type { CliIo } from "./cliIo.js";
import type { raceCreation } from "./clusterJoin.js";
import { failureMessage } from "./faults.js";
import { startBoardBeside } from "./runBoard.js";
import { exitCodeOf } from "./runPreemption.js";
import type { RunPlan } from "./runPlan.js";
// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** This process's goodput log, once `train` opened it, and the global step it last knew. */
export interface Accounting {
  recorder: GoodputRecorder | undefined;
  step: number | null;
}

/** What {@link openRunResources} opened before the session, which `train` releases. */
export interface RunResources {
  /** The chief's checkpoint directory's one manager (its lock taken). */
  readonly manager: CheckpointManager | undefined;
  /** The task's runtime (its server, its registration), in a cluster. */
  readonly cluster: TaskRuntime | undefined;
  /** How the session's creation races the cluster's failure (loaded with the cluster's modules). */
  readonly raceCreation: typeof raceCreation | undefined;
  /** The session's options, with what the directory, the cluster and the goodput log add. */
  readonly sessionOptions: MonitoredTrainingSessionOptions;
  /** The board beside training (`--board`, the chief). */
  readonly board: { close(): Promise<void> } | undefined;
  /** Prints where the checkpoints and summaries are (the chief). */
  readonly where: () => void;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Everything training needs before its session, in this order: the chief's checkpoint directory
 * (its lock: a second run on the directory stops here, having written nothing), the goodput log,
 * the task's server and its registration with the cluster, the goodput observers, the board.
 * Resolves with the exit code instead when the directory is in use (2) or the task did not join
 * (a notice, a failure); what was opened by then is released.
 */
export const openRunResources = async (plan: RunPlan, io: CliIo, clock: Clock, notices: TerminationNotices, goodput: Accounting): Promise<RunResources | number> => {
  const { config, baseDir, task, isChief, group, logger } = plan;
  let { sessionOptions } = plan;
  // Only the chief writes checkpoints; a worker never does.
  const checkpointDir = checkpointDirOf(config, baseDir);
  const opened = checkpointDir !== undefined && isChief ? await openRunCheckpoints(checkpointDir, plan, io, clock) : undefined;
  if (typeof opened === "number") return opened;
  const manager = opened?.manager;
  if (opened !== undefined) sessionOptions = opened.sessionOptions;
  // The goodput log, in the log directory. The chief opens it once it took the directory (a
  // second run on it appends nothing to this one's log). A worker never makes the directory (only
  // the chief writes there): it opens its log once it joined the cluster, when the chief has made
  // the directory, and only if the directory is there (a file system it shares with the chief).
  // Accounting never stops training: a log that cannot be opened is a warning.
  const logDir = config.summaries?.dir === undefined ? checkpointDir : resolve(baseDir, config.summaries.dir);
  const openAccounting = (): GoodputRecorder | undefined => {
    if (logDir === undefined || (!isChief && !existsSync(logDir))) return undefined;
    try {
      return GoodputRecorder.open({ logDir, task: task?.name ?? "local", chief: isChief, clock, logger, processStartMs: io.processStartMs });
    } catch (e) {
      logger.warn(`No goodput log for this run: ${e instanceof Error ? e.message : String(e)}`);
      return undefined;
    }
  };
  goodput.recorder = isChief ? openAccounting() : undefined;
  // Then the task's server and its registration with the cluster (every task, before training).
  // The cluster's modules (gRPC, the coordination service) load only here: a process that is no
  // task of a cluster starts without them (docs/performance.md, "Process start to first step").
  let cluster: TaskRuntime | undefined;
  let race: typeof raceCreation | undefined;
  if (task !== undefined) {
    // A failed load (a broken install) releases the directory's lock first, as any failure here does.
    const { startCluster, raceCreation } = await import("./clusterJoin.js").catch(async (e: unknown) => {
      await manager?.close();
      throw e;
    });
    race = raceCreation;
    const joinStart = clock.now();
    const joined = await startCluster(task, io, logger, clock, notices, group, config.maxWaitSecs, exitCodeOf(config));
    goodput.recorder ??= openAccounting();
    goodput.recorder?.phase("clusterJoin", clock.now() - joinStart);
    if (typeof joined === "number") {
      await manager?.close();
      return joined;
    }
    cluster = joined;
    sessionOptions = { ...sessionOptions, sessionTargets: cluster.sessionTargets, hooks: [...cluster.hooks, ...(sessionOptions.hooks ?? [])] };
  }
  const accounting = goodput.recorder;
  // Its saves (the first one's, made while the session is created, included), step rates,
  // summaries and recoveries: a log observer beside the one that prints (rare events, never per
  // run). The chief also writes the group's goodput as summaries (goodput/fraction,
  // badput/<bucket>_secs) at the summary cadence and at the end.
  if (accounting !== undefined && logDir !== undefined) {
    const summaries = isChief ? [goodputSummaries({ logDir, recorder: accounting, writer: () => fileWriterCache.getWriter(logDir), clock, logger })] : [];
    sessionOptions = { ...sessionOptions, logObserver: [logObserver(sessionOptions.logger ?? logger), accounting.listener, ...summaries] };
  }
  // The board beside training, in a process of its own (runBoard.ts): whatever happens to it is a warning, never the end of training.
  const board = plan.board === undefined || !isChief || logDir === undefined ? undefined : startBoardBeside(logDir, plan.board, logger, clock);
  const where = (): void => {
    if (!isChief) return;
    if (checkpointDir !== undefined) logger.info(`Checkpoints: ${checkpointDir}`);
    if (logDir !== undefined) {
      logger.info(`TensorBoard logs: ${logDir}`);
      logger.info(`View them with: tensorboard --logdir ${logDir}`);
      logger.info(`Or, without Python: monitored-session board ${logDir}`);
    }
  };
  return { manager, cluster, raceCreation: race, sessionOptions, board, where };
};

/**
 * The chief's checkpoint directory, taken (its lock) before anything else is created: a second
 * run on the directory stops here, having written nothing. Resolves with its manager and the
 * session's options that share it, or with the exit code (2: the directory is in use).
 */
const openRunCheckpoints = async (
  checkpointDir: string,
  plan: Pick<RunPlan, "config" | "sessionOptions" | "verbose" | "logger">,
  io: Pick<CliIo, "err">,
  clock: Clock,
): Promise<{ readonly manager: CheckpointManager; readonly sessionOptions: MonitoredTrainingSessionOptions } | number> => {
  const { config, sessionOptions, verbose, logger } = plan;
  let manager: CheckpointManager;
  try {
    manager = await openCheckpointDirectory({
      directory: checkpointDir,
      checkpointName: config.checkpoint?.basename,
      maxToKeep: config.checkpoint?.maxToKeep,
      keepCheckpointEveryNHours: config.checkpoint?.keepCheckpointEveryNHours,
      // A plugin's retention type, made once with the hook's (see toMonitoredTrainingSessionOptions).
      retentionPolicy: sessionOptions.retentionPolicy,
      saver: sessionOptions.scaffold?.saver ?? new BundleSaver({ clock }),
      // A predecessor with this host's name on another boot (a pod recreated on another node) is
      // gone; only its lease may run on: wait it out rather than exit 2 (docs/kubernetes.md).
      lock: { leaseTimeoutSecs: config.checkpoint?.lockTimeoutSecs, waitOutPredecessorLease: true },
      clock,
      logger,
    }, "saver");
  } catch (e) {
    if (e instanceof CheckpointDirInUseError) {
      io.err.write(`${e.message}\n`);
      return ExitCodes.usage;
    }
    io.err.write(failureMessage(e, verbose, `Opening the checkpoint directory ${checkpointDir} failed`));
    return ExitCodes.failure;
  }
  // The chief's restore and the checkpoint hook (through HookEnv) share it; the options and
  // their hooks are built once.
  const { retentionPolicy: _applied, ...rest } = sessionOptions;
  return { manager, sessionOptions: { ...rest, checkpointManager: manager } };
};

