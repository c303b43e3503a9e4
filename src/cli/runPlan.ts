/**
 * `run`'s plan: everything the command decides and checks before it creates anything (TF_CONFIG
 * or the pod's environment, the configuration, the job module, the cluster task and its replica
 * group, the session's options, the notices it watches). Every exit 2 for bad input is here.
 *
 * @module
 */

import { isLeft, right } from "fp-ts/lib/Either.js";
import { resolve } from "node:path";

import { resolveTfConfig } from "../cluster/ClusterResolver.js";
import { DEFAULT_COORDINATION_BACKEND } from "../cluster/coordination/backends.js";
import { decodePodEnvironment, PeerNotResolvedError, waitForPodTfConfig } from "../cluster/PodClusterResolver.js";
import { TF_CONFIG, type TfConfig } from "../cluster/TfConfig.js";
import { ConfigError, toMonitoredTrainingSessionOptions, type Job, type JobContext, type SessionRole, type TrainingConfig } from "../config/index.js";
import { ValueError } from "../errors.js";
import type { Logger, LogLevel } from "../Logger.js";
import { createPlatformWatcher } from "../preemption/platforms/index.js";
import type { TerminationNotices } from "../preemption/TerminationNotices.js";
import { clusterTaskOf, readTfConfig, type ClusterTask } from "../runtime/clusterTask.js";
import { ExitCodes } from "../runtime/exitCodes.js";
import { ReplicaGroup } from "../runtime/replicaGroup.js";
import type { Clock } from "../time/Clock.js";
import type { MonitoredTrainingSessionOptions } from "../training/monitoredTrainingSession.js";
import type { CliIo } from "./cliIo.js";
import { jsonLogLine, type LogFormat } from "./logFormat.js";
import { prepareRun, printIssues } from "./preflight.js";
import { createProgress } from "./progress.js";
import { exitCodeOf } from "./runPreemption.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of `run`. */
export interface RunCommandOptions {
  /** `false` forces plain lines even on a terminal. */
  readonly progress?: boolean;
  readonly logLevel?: LogLevel;
  /** Print stack traces of failures (default: one line each). */
  readonly verbose?: boolean;
  /** Serve `monitored-session board` on the summaries beside training (the chief), on this port (0: a free one). */
  readonly board?: number | undefined;
  /** `json`: every line on stderr and stdout is one JSON object (src/cli/logFormat.ts); default `text`. */
  readonly logFormat?: LogFormat | undefined;
}

/** Where `run`'s log and progress write, in which format (the streams unwrapped for JSON records). */
export interface LogSink {
  readonly format: LogFormat;
  readonly out: NodeJS.WritableStream;
  readonly err: NodeJS.WritableStream;
}

/** What `run` decided and checked before it creates anything ({@link planRun}). */
export interface RunPlan {
  readonly verbose: boolean;
  readonly config: TrainingConfig;
  readonly baseDir: string;
  readonly job: Job;
  /** This process's task of a cluster (TF_CONFIG), if any. */
  readonly task: ClusterTask | undefined;
  readonly isChief: boolean;
  /** The data-parallel group, when the job took it. */
  readonly group: ReplicaGroup | undefined;
  readonly progress: ReturnType<typeof createProgress>;
  readonly logger: Logger;
  readonly sessionOptions: MonitoredTrainingSessionOptions;
  /** `--board`'s port, when asked. */
  readonly board: number | undefined;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Everything `run` decides before it creates anything: TF_CONFIG, the configuration, the job
 * module, the cluster task and its replica group, the session's options, the notices it
 * watches. Every exit 2 for bad input is here; a notice that came meanwhile ends it with the
 * preemption code, nothing created.
 */
export const planRun = async (configPath: string, options: RunCommandOptions, io: CliIo, clock: Clock, notices: TerminationNotices, sink: LogSink): Promise<RunPlan | number> => {
  const verbose = options.verbose === true;
  // The cluster comes from the environment: checked first, before the module loads.
  const tfConfig = await readClusterEnvironment(io, clock, sink);
  if (typeof tfConfig === "number") return tfConfig;
  const resolved = tfConfig === undefined ? undefined : resolveTfConfig(tfConfig);
  // The data-parallel group the job may take (rank and size from TF_CONFIG); joined only if the job reads it.
  const replicas = resolved === undefined ? undefined : ReplicaGroup.of(resolved);
  let group: ReplicaGroup | undefined;
  const contextOf = (c: Pick<TrainingConfig, "cluster">): JobContext =>
    replicas === undefined || c.cluster?.dataParallel === false
      ? {}
      : {
          get replica() {
            group = replicas;
            return replicas.context;
          },
        };
  // With TF_CONFIG, keys the task decides are problems of the file, reported with the others.
  const fromTfConfig = tfConfig;
  const clusterIssues = (c: Pick<TrainingConfig, "isChief" | "master" | "cluster">, dir: string) => {
    const r = fromTfConfig === undefined ? right(undefined) : clusterTaskOf(fromTfConfig, c, dir);
    return isLeft(r) ? r.left : [];
  };
  const prepared = await prepareRun(configPath, io.err, verbose, resolved !== undefined && !resolved.isChief, contextOf, clusterIssues);
  if (isLeft(prepared)) return prepared.left;
  const { config, baseDir, file, job, registry, backendNote } = prepared.right;
  const clustered = tfConfig === undefined ? right(undefined) : clusterTaskOf(tfConfig, config, baseDir);
  if (isLeft(clustered)) {
    printIssues(io.err, file, clustered.left);
    return ExitCodes.usage;
  }
  const task = clustered.right;
  const isChief = task?.isChief ?? config.isChief ?? true;

  const ci = io.env["CI"] !== undefined && io.env["CI"] !== "" && io.env["CI"] !== "false" && io.env["CI"] !== "0";
  const progress = createProgress({
    tty: io.isTTY && !ci && options.progress !== false,
    out: sink.out,
    err: sink.err,
    clock,
    format: sink.format,
    ...(options.logLevel === undefined ? {} : { logLevel: options.logLevel }),
  });
  const logger = progress.logger;
  if (backendNote !== undefined) logger.info(backendNote);
  const role: SessionRole | undefined = task === undefined ? undefined : { isChief: task.isChief, master: task.master };
  if (task !== undefined) logger.info(`Cluster task ${describeTask(task)}.`);
  if (group !== undefined) {
    const perReplica = job.batchSize === undefined ? "the per-replica batch" : String(job.batchSize);
    const global = job.batchSize === undefined ? "" : ` = ${job.batchSize * group.size}`;
    logger.info(`Data-parallel training: rank ${group.rank} of ${group.size}; global batch = ${perReplica} × ${group.size}${global}.`);
  }

  let sessionOptions;
  try {
    sessionOptions = toMonitoredTrainingSessionOptions(config, job, { baseDir, logger, clock, registry, ...(role === undefined ? {} : { role }) });
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    printIssues(io.err, file, e.issues);
    return ExitCodes.usage;
  }

  // In data-parallel training the chief's step counter also counts the global batch.
  if (job.batchSize !== undefined && group !== undefined) sessionOptions = { ...sessionOptions, examplesPerStep: job.batchSize * group.size };
  const unwatched = watchConfiguredNotices(config, baseDir, file, notices, io, clock, logger);
  if (unwatched !== undefined) return unwatched;
  const early = notices.first;
  if (early !== undefined) {
    // Nothing was created: the restart resumes from the newest checkpoint there is.
    logger.info(`Termination notice (${notices.describe(early)}) before training started: exiting with ${exitCodeOf(config)} without saving (run the same command again to resume).`);
    return exitCodeOf(config);
  }

  return { verbose, config, baseDir, job, task, isChief, group, progress, logger, sessionOptions, board: options.board };
};

/**
 * The cluster this process is a task of: TF_CONFIG, or without it the pod's environment of a
 * generated manifest (docs/kubernetes.md), once the peers' DNS names resolve; `undefined` for a
 * process that is no task of a cluster, or the exit code (2: either is malformed; 1: a peer never
 * resolved).
 */
const readClusterEnvironment = async (io: CliIo, clock: Clock, sink: LogSink): Promise<TfConfig | undefined | number> => {
  const read = readTfConfig(io.env);
  if (isLeft(read)) {
    printIssues(io.err, TF_CONFIG, read.left);
    return ExitCodes.usage;
  }
  if (read.right !== undefined) return read.right;
  const pod = decodePodEnvironment(io.env);
  if (isLeft(pod)) {
    printIssues(io.err, "the pod's environment", pod.left);
    return ExitCodes.usage;
  }
  if (pod.right === undefined) return undefined;
  try {
    const log = (line: string): void => void (sink.format === "json" ? sink.err.write(jsonLogLine(clock.now(), "info", line)) : io.err.write(`${line}\n`));
    return await waitForPodTfConfig({ env: io.env, clock, log });
  } catch (e) {
    if (!(e instanceof PeerNotResolvedError || e instanceof ValueError)) throw e;
    io.err.write(`${e.message}\n`);
    return e instanceof ValueError ? ExitCodes.usage : ExitCodes.failure;
  }
};

/**
 * Starts the notices the configuration asks for: a watched file, a platform's poller (polling
 * starts on a timer: it never delays the start). Returns exit code 2 for an unknown
 * platform, with `undefined` otherwise.
 */
const watchConfiguredNotices = (config: TrainingConfig, baseDir: string, file: string, notices: TerminationNotices, io: CliIo, clock: Clock, logger: Logger): number | undefined => {
  const watchFile = config.preemption?.watchFile === undefined ? undefined : resolve(baseDir, config.preemption.watchFile);
  if (watchFile !== undefined) notices.watchFile(watchFile);
  try {
    const platform = createPlatformWatcher(config.preemption?.platform ?? "signals", { env: io.env, clock, logger });
    if (platform !== undefined) notices.watchPlatform(platform);
    return undefined;
  } catch (e) {
    if (!(e instanceof ValueError)) throw e;
    io.err.write(`${file}: preemption.platform: ${e.message}\n`);
    return ExitCodes.usage;
  }
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** One line on the task: `chief:0, the chief of 3 training tasks (grpc://127.0.0.1:2222; coordination: embedded)`. */
const describeTask = (task: ClusterTask): string =>
  `${task.name}, ${task.isChief ? "the chief" : "a worker"} of ${task.numWorkers} training task${task.numWorkers === 1 ? "" : "s"} (${task.master}; coordination: ${task.options.backend ?? DEFAULT_COORDINATION_BACKEND})`;
