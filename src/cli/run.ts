/**
 * `monitored-session run <config>`: loads and checks the configuration and the job module
 * (printing every problem and exiting 2 before anything is created), builds the session with
 * `monitoredTrainingSession`, and runs the job's fetches until `shouldStop()`.
 *
 * SIGTERM and SIGINT go through a `PreemptionCheckpointHandler`: a checkpoint is saved at the
 * next step boundary, then the command exits with 42 (or `preemption.exitCode`), and running it
 * again resumes at that step.
 *
 * With TF_CONFIG set, the process is one task of a cluster (src/runtime/clusterTask.ts): the task
 * decides `isChief` and `master`, the start line names it, and only the chief takes the
 * checkpoint directory's lock and writes there (a worker exits with the preemption code without
 * saving). The task starts its server and joins the cluster before training
 * (src/runtime/clusterRuntime.ts); a worker starts from the chief's values. A cluster failure (a
 * task declared failed, a reported error) stops training with exit 1; a termination notice of any
 * task makes every task exit with the preemption code. Under `launch` every task stops through
 * its multi-worker `PreemptionCheckpointHandler`: a data-parallel group's ranks by their stop vote
 * and claim, tasks without a group by the claim and the chief's stored save ("chiefSaves"); tasks
 * started by hand report the notice to the cluster, which the others take as their own.
 * A worker without data parallelism outlives its chief: its session is re-created from the
 * restarted chief's values (src/runtime/chiefRecovery.ts).
 *
 * The preemption exit and the chief's preemption handler are in runPreemption.ts; joining the
 * cluster and creating the session while notices or the cluster's failure may come first, in
 * clusterJoin.ts; the run's state and the exit code of training that ended with an error, in
 * runOutcome.ts.
 *
 * @module
 */

import { isLeft, right } from "fp-ts/lib/Either.js";
import { existsSync } from "node:fs";
import { resolve } from "node:path";

import { BundleSaver, CheckpointDirInUseError, openCheckpointDirectory, type CheckpointManager } from "../checkpoint/index.js";
import { systemClock, type Clock } from "../time/Clock.js";
import { resolveTfConfig } from "../cluster/ClusterResolver.js";
import { decodePodEnvironment, PeerNotResolvedError, waitForPodTfConfig } from "../cluster/PodClusterResolver.js";
import { TF_CONFIG } from "../cluster/TfConfig.js";
import { DEFAULT_COORDINATION_BACKEND } from "../cluster/coordination/backends.js";
import { checkpointDirOf, ConfigError, lastStepOf, toMonitoredTrainingSessionOptions, type Job, type JobContext, type SessionRole, type TrainingConfig } from "../config/index.js";
import { clusterFailureOf, ValueError } from "../errors.js";
import type { Logger, LogLevel } from "../Logger.js";
import { withSession } from "../pipeline/MonitoredSession.js";
import { monitoredTrainingSession, readStep, type MonitoredTrainingSessionOptions } from "../training/monitoredTrainingSession.js";
import { TerminationNotices, type NoticeProcess, type TerminationNotice } from "../preemption/TerminationNotices.js";
import { createPlatformWatcher } from "../preemption/platforms/index.js";
import type { Fetches } from "../session/Session.js";
import { fileWriterCache } from "../summary/index.js";
import { describeGoodput, computeGoodput } from "../goodput/computeGoodput.js";
import { GoodputLogFollower } from "../goodput/goodputLog.js";
import { GoodputRecorder } from "../goodput/GoodputRecorder.js";
import { goodputSummaries } from "../goodput/goodputSummaries.js";
import { logObserver } from "../events/logObserver.js";
import { clusterTaskOf, readTfConfig, type ClusterTask } from "../runtime/clusterTask.js";
import type { TaskRuntime } from "../runtime/index.js";
import { ExitCodes } from "../runtime/exitCodes.js";
import { launchStatusWriter } from "../runtime/launchStatus.js";
import { ReplicaGroup } from "../runtime/replicaGroup.js";
import { failureMessage } from "./faults.js";
import { exitOnRepeatedNotice } from "./forcedExit.js";
import { prepareRun, printIssues } from "./preflight.js";
import { createProgress, followSession } from "./progress.js";
import { jsonLineStream, jsonLogger, jsonLogLine, withJsonConsole, type LogFormat } from "./logFormat.js";
import { createPreemptionHandler, exitCodeOf, PreemptedExit } from "./runPreemption.js";
import { exitCodeOfFailure, initialRunState, preempting } from "./runOutcome.js";
import { startBoardBeside } from "./runBoard.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The process the command talks to (injected by tests). */
export interface CliIo {
  readonly out: NodeJS.WritableStream;
  readonly err: NodeJS.WritableStream;
  readonly env: NodeJS.ProcessEnv;
  /** Whether `out` is a terminal. */
  readonly isTTY: boolean;
  readonly clock?: Clock;
  /** Signals that arrived while the entry point was loading (replayed as termination notices). */
  readonly earlySignals?: readonly NodeJS.Signals[];
  /** Ends the process at once (default `process.exit`): used when a second Ctrl-C gives up on the save. */
  readonly exit?: (code: number) => void;
  /** Where notices come from (default `process`; tests pass a fake). */
  readonly noticeProcess?: NoticeProcess;
  /** Called once the command watches for notices itself (the entry point drops its early handlers). */
  readonly onStarted?: () => void;
  /** When this task's start began, Unix epoch ms, for its goodput log (default the process's start; a standby's go: src/cli/standby.ts). */
  readonly processStartMs?: number;
}

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

/** What {@link planRun} gathered and checked, for {@link train}. */
interface RunPlan {
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
 * Runs the command; resolves with the exit code. Termination notices (SIGTERM, SIGINT, SIGHUP,
 * the parent's death, `preemption.watchFile`) are watched from the start: before the session
 * exists a notice makes the command exit 42 once the configuration is checked (exit 2 if it is
 * bad), without saving; after, the preemption handler saves at the next step boundary and the
 * command exits 42.
 */
export const runCommand = async (configPath: string, options: RunCommandOptions, io: CliIo): Promise<number> => {
  const clock = io.clock ?? systemClock;
  // JSON lines: the log and the progress write their own records to the streams; every other
  // line (a configuration problem, a failure) becomes an error record.
  const json = options.logFormat === "json";
  const now = (): number => clock.now();
  const runIo = json ? { ...io, err: jsonLineStream(io.err, now, "error") } : io;
  // JSON: the notices' own lines (a platform's poller, a watched file) and the global console (a
  // job's own lines, a library's notices) write records too.
  const notices = watchNotices(runIo, clock, json ? jsonLogger(io.err, now, options.logLevel) : undefined);
  const body = (): Promise<number> => runWithNotices(configPath, options, runIo, clock, notices, { format: json ? "json" : "text", out: io.out, err: io.err });
  try {
    return await (json ? withJsonConsole(io.out, io.err, now, body) : body());
  } finally {
    notices.close();
  }
};

/** Where `run`'s log and progress write, in which format (the streams unwrapped for JSON records). */
interface LogSink {
  readonly format: LogFormat;
  readonly out: NodeJS.WritableStream;
  readonly err: NodeJS.WritableStream;
}

/**
 * Starts watching the command's termination notices (signals, replaying the early ones, and the
 * parent's death), then tells the entry point to drop its early handlers.
 */
export const watchNotices = (io: CliIo, clock: Clock, logger?: Logger): TerminationNotices => {
  const notices = TerminationNotices.start({
    clock,
    ...(logger === undefined ? {} : { logger }),
    earlier: io.earlySignals,
    ...(io.noticeProcess === undefined ? {} : { process: io.noticeProcess }),
  });
  // Under launch: which task's own notice started a preemption, on the status channel.
  const toLaunch = launchStatusWriter(io.env);
  notices.notices$.subscribe((n) => {
    if (n.count === 1) toLaunch({ type: "notice", source: notices.describe(n) });
  });
  io.onStarted?.();
  return notices;
};

const runWithNotices = async (configPath: string, options: RunCommandOptions, io: CliIo, clock: Clock, notices: TerminationNotices, sink: LogSink): Promise<number> => {
  const plan = await planRun(configPath, options, io, clock, notices, sink);
  if (typeof plan === "number") return plan;
  const goodput: Accounting = { recorder: undefined, step: null };
  let code: number | null = null;
  try {
    code = await train(plan, io, clock, notices, goodput);
    return code;
  } finally {
    // Also when training threw (its exit code is then the entry point's: none recorded).
    endAccounting(goodput, code, plan.logger);
  }
};

/** This process's goodput log, once `train` opened it, and the global step it last knew. */
interface Accounting {
  recorder: GoodputRecorder | undefined;
  step: number | null;
}

/** Writes the goodput log's `end` record and prints the task's goodput across its restarts (one line). */
const endAccounting = (goodput: Accounting, code: number | null, logger: Logger): void => {
  const recorder = goodput.recorder;
  if (recorder === undefined) return;
  recorder.end(goodput.step, code);
  if (code === null) return;
  try {
    const dir = resolve(recorder.path, "..", "..");
    // This task's log only: another task's (unreadable, say) is no concern of this line.
    const own = new GoodputLogFollower(dir).readOne(recorder.path);
    const task = computeGoodput(own === undefined ? [] : [own]).tasks[0];
    if (task !== undefined) logger.info(`${describeGoodput(task)} Every task: monitored-session goodput ${dir}`);
  } catch (e) {
    logger.warn(`The goodput summary could not be computed: ${e instanceof Error ? e.message : String(e)}`);
  }
};

/**
 * Everything `run` decides before it creates anything: TF_CONFIG, the configuration, the job
 * module, the cluster task and its replica group, the session's options, the notices it
 * watches. Every exit 2 for bad input is here; a notice that came meanwhile ends it with the
 * preemption code, nothing created.
 */
const planRun = async (configPath: string, options: RunCommandOptions, io: CliIo, clock: Clock, notices: TerminationNotices, sink: LogSink): Promise<RunPlan | number> => {
  const verbose = options.verbose === true;
  // The cluster comes from the environment: checked first, before the module loads.
  const read = readTfConfig(io.env);
  if (isLeft(read)) {
    printIssues(io.err, TF_CONFIG, read.left);
    return ExitCodes.usage;
  }
  let tfConfig = read.right;
  if (tfConfig === undefined) {
    // Without TF_CONFIG, a pod of a generated manifest (docs/kubernetes.md) finds its cluster
    // in its own environment, once its peers' DNS names resolve.
    const pod = decodePodEnvironment(io.env);
    if (isLeft(pod)) {
      printIssues(io.err, "the pod's environment", pod.left);
      return ExitCodes.usage;
    }
    if (pod.right !== undefined) {
      try {
        const log = (line: string): void => void (sink.format === "json" ? sink.err.write(jsonLogLine(clock.now(), "info", line)) : io.err.write(`${line}\n`));
        tfConfig = await waitForPodTfConfig({ env: io.env, clock, log });
      } catch (e) {
        if (!(e instanceof PeerNotResolvedError || e instanceof ValueError)) throw e;
        io.err.write(`${e.message}\n`);
        return e instanceof ValueError ? ExitCodes.usage : ExitCodes.failure;
      }
    }
  }
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
  const watchFile = config.preemption?.watchFile === undefined ? undefined : resolve(baseDir, config.preemption.watchFile);
  if (watchFile !== undefined) notices.watchFile(watchFile);
  try {
    // Polling starts on a timer: it never delays the start.
    const platform = createPlatformWatcher(config.preemption?.platform ?? "signals", { env: io.env, clock, logger });
    if (platform !== undefined) notices.watchPlatform(platform);
  } catch (e) {
    if (!(e instanceof ValueError)) throw e;
    io.err.write(`${file}: preemption.platform: ${e.message}\n`);
    return ExitCodes.usage;
  }
  const early = notices.first;
  if (early !== undefined) {
    // Nothing was created: the restart resumes from the newest checkpoint there is.
    logger.info(`Termination notice (${notices.describe(early)}) before training started: exiting with ${exitCodeOf(config)} without saving (run the same command again to resume).`);
    return exitCodeOf(config);
  }

  return { verbose, config, baseDir, job, task, isChief, group, progress, logger, sessionOptions, board: options.board };
};

/**
 * Trains the plan: takes the checkpoint directory (the chief), starts the task's server and joins
 * the cluster, creates the session, the preemption handler, and runs the job's fetches until
 * `shouldStop()`; resolves with the exit code.
 */
const train = async (plan: RunPlan, io: CliIo, clock: Clock, notices: TerminationNotices, goodput: Accounting): Promise<number> => {
  const { verbose, config, baseDir, job, task, isChief, group, progress, logger } = plan;
  let { sessionOptions } = plan;
  // The input is valid: from here on, things are created. First the checkpoint directory's one
  // manager (taking its lock): a second run on the directory stops here, having written nothing.
  // Only the chief writes there; a worker never does.
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
  let join: Pick<typeof import("./clusterJoin.js"), "raceCreation"> | undefined;
  if (task !== undefined) {
    // A failed load (a broken install) releases the directory's lock first, as any failure here does.
    const { startCluster, raceCreation } = await import("./clusterJoin.js").catch(async (e: unknown) => {
      await manager?.close();
      throw e;
    });
    join = { raceCreation };
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
  const summaryDir = logDir;
  // The board beside training, in a process of its own (runBoard.ts): whatever happens to it is a warning, never the end of training.
  const board = plan.board === undefined || !isChief || summaryDir === undefined ? undefined : startBoardBeside(summaryDir, plan.board, logger, clock);
  const where = (): void => {
    if (!isChief) return;
    if (checkpointDir !== undefined) logger.info(`Checkpoints: ${checkpointDir}`);
    if (summaryDir !== undefined) {
      logger.info(`TensorBoard logs: ${summaryDir}`);
      logger.info(`View them with: tensorboard --logdir ${summaryDir}`);
      logger.info(`Or, without Python: monitored-session board ${summaryDir}`);
    }
  };
  /**
   * Every task preempts through its multi-worker `PreemptionCheckpointHandler`
   * (`ClusterPreemptionCoordinator`, the protocol of a program's own handler), never by reporting
   * a notice as the cluster's error:
   * - tasks without a data-parallel group (under `launch` or started by hand) by the claim with
   *   the `"chiefSaves"` agreement: each trains its own replica at its own pace, and only the
   *   chief's save matters; each stops at its own next boundary, the chief saves there, and the
   *   others exit once its save is done, or with 43 when the chief is lost first. A worker started
   *   by hand outlives its chief: the agreement follows it into the restarted chief's generation,
   *   and a notice while it waits for the chief exits 43 (nobody can save);
   * - the ranks of a data-parallel group through their stop vote and its claim. A group started by
   *   hand outlives a lost rank: the agreement follows it into its next generation, and a notice
   *   while it waits for the rank ends the wait, told to every rank through the coordination
   *   service (the chief saves its last completed step, every rank exits with the preemption code).
   */
  const fetches: Fetches = job.fetches ?? "train";
  const lossOf = lossExtractor(fetches);
  const lastStep = lastStepOf(config, job);
  const state = initialRunState();
  const closeHandler = async (): Promise<void> => {
    state.handlerClosing = true;
    await state.handler?.close();
  };
  const noticeToHandler = (n: TerminationNotice): void => {
    if (!state.handlerClosing) state.handler?.noticeTermination(notices.describe(n), { deadlineMs: n.deadline });
  };
  // The first notice goes to the handler (a save at the next step boundary); a later Ctrl-C or
  // SIGTERM gives the save at most the grace period, then exits without it. In a cluster the task
  // owns the notices, as a program's own task does (src/runtime/startTask.ts): it holds one that
  // comes before the handler exists (a worker whose session waits for its lost chief stops
  // waiting: 43), the handler takes them over for its agreement (a data-parallel rank's claim is
  // its stop vote too), and once the handler closed the task tells the tasks still training.
  const subscription = notices.notices$.subscribe((n) => {
    if (n.count !== 1) return;
    accounting?.notice();
    if (cluster === undefined) noticeToHandler(n);
  });
  // The cluster's first failure: another task's preemption is this task's termination notice;
  // anything else (a task declared failed, a reported error, the service gone) stops training.
  const clusterFailed = cluster?.failed.then((e) => {
    const f = clusterFailureOf(e);
    if (f?.kind === "preemption") {
      state.clusterPreemption = e;
      accounting?.notice();
      // Why this task stops where it stops, when the notice went to another task.
      if (task === undefined || f.reporter !== task.name) logger.info(`From the coordination service: ${e.message.replace(/^cluster preemption: /, "")}.`);
      if (group === undefined) state.handler?.noticeTermination(e.message);
      // While the session is being created: exit without saving (a worker has nothing to save).
      throw new PreemptedExit(exitCodeOf(config), false);
    }
    state.clusterFailure = e;
    throw e;
  });
  clusterFailed?.catch(() => undefined);

  const forced = exitOnRepeatedNotice(notices.notices$, {
    gracePeriodSecs: config.preemption?.gracePeriodSecs ?? 0,
    exitCode: exitCodeOf(config),
    clock,
    logger,
    exit: io.exit ?? ((code) => process.exit(code)),
    beforeExit: () => {
      progress.stop();
      // A repeated notice exits at once: the goodput log still gets its end.
      goodput.recorder?.end(goodput.step, exitCodeOf(config));
    },
  });
  const toLaunch = launchStatusWriter(io.env);
  try {
    const creationStart = clock.now();
    /** The part of the creation spent waiting for the other tasks' sessions (joining the cluster, for goodput). */
    let sessionsWaitMs = 0;
    // A worker waits for the chief's model here: a termination notice or a cluster failure ends the wait.
    const creating =
      cluster === undefined
        ? monitoredTrainingSession(sessionOptions)
        : monitoredTrainingSession(sessionOptions).then(async (created) => {
            // Every task has its session before any trains on: the chief keeps its model
            // published until each worker took it, however short the run.
            const waitStart = clock.now();
            await cluster.sessionsCreated().catch((e: unknown) => {
              throw clusterFailureOf(e)?.kind === "preemption" ? new PreemptedExit(exitCodeOf(config), false) : e;
            });
            sessionsWaitMs = clock.now() - waitStart;
            return created;
          });
    // Under the agreement, a worker's notice waits for its handler (the others learn of it there).
    const sess = await (cluster === undefined || join === undefined ? creating : join.raceCreation(creating, clusterFailed));
    // The task's events and lines are the session's from now on (printed by its log observers, above the progress display).
    if (cluster !== undefined) sess.forwardEvents(cluster);
    // Goodput: a worker's creation is its wait for the chief's model (joining the cluster); the
    // chief's is a restore when it restored (a fresh start is startup), less its wait for the
    // workers' sessions (joining the cluster).
    const creationMs = clock.now() - creationStart;
    if (cluster !== undefined && !isChief) accounting?.phase("clusterJoin", creationMs);
    else {
      if (manager?.lastRestored != null) accounting?.phase("restore", Math.max(0, creationMs - sessionsWaitMs));
      if (sessionsWaitMs > 0) accounting?.phase("clusterJoin", sessionsWaitMs);
    }
    const handler =
      cluster !== undefined
        ? await createPreemptionHandler(sess, config, manager, logger, clock, { resolver: cluster, agreement: group === undefined ? "chiefSaves" : "agreedRun" })
        : manager === undefined
          ? undefined
          : await createPreemptionHandler(sess, config, manager, logger, clock);
    state.handler = handler;
    // Preemption events join the session's stream, which the display follows.
    // Its events, and its lines as the session's events (printed above the progress display).
    if (handler !== undefined) sess.forwardEvents(handler);
    handler?.events$.subscribe((ev) => {
      // Where this task stopped (a worker of the group: where every rank did).
      if (ev.type === "preemptionCheckpointSaved" && ev.exit && group !== undefined && !isChief && state.stepFailure === undefined) state.groupStopStep = ev.globalStep;
      // Another task's notice, agreed through the cluster, is this task's preemption too.
      if (ev.type === "terminationNoticed") accounting?.notice();
      if (ev.type === "preemptionCheckpointSaved" && ev.globalStep !== undefined) accounting?.saved(ev.globalStep);
    });
    // A notice that came while the session was being created (in a cluster, the task delivers it as the handler takes its notices over).
    if (cluster === undefined && notices.first !== undefined) handler?.noticeTermination(notices.describe(notices.first), { deadlineMs: notices.first.deadline });
    else if (state.clusterPreemption !== undefined) handler?.noticeTermination(state.clusterPreemption.message);
    // What the chief actually restored (after falling back past corrupt checkpoints, say).
    const restoring = manager?.lastRestored ?? null;
    const startStep = await readStep(sess);
    goodput.step = startStep ?? null;
    logger.info(
      `Starting at global step ${startStep ?? "(none)"}${restoring === null ? "" : ` (restored from ${restoring})`}${lastStep === undefined ? "" : `; last step ${lastStep}`}${task === undefined ? "" : `; task ${task.name} (${task.isChief ? "chief" : "worker"})`}.`,
    );
    where();
    if (lastStep !== undefined && startStep !== undefined && startStep >= lastStep) {
      // TensorFlow's StopAtStepHook would still run one step; a finished job has nothing to do.
      logger.info(`Already at global step ${startStep} (last step ${lastStep}): nothing to train. To train further, raise lastStep in the config; to start over, give checkpoint.dir an empty directory.`);
      await sess.close();
      await fileWriterCache.closeAll();
      return ExitCodes.done;
    }
    progress.start(startStep ?? 0, lastStep);
    state.started = true;
    // Training begins: its saves, step rates, summaries and recoveries go to the goodput log (rare events, never per run).
    accounting?.ready(startStep ?? null);
    // Under launch: this task trains (launch --standby makes the next restart's standbys once every task does).
    if (cluster !== undefined) toLaunch({ type: "training" });
    // The display observes the session's events; the loop below only trains.
    const following = followSession(progress, { events$: sess.events$, readStep: () => readStep(sess), lossOf });
    state.following = following;
    let finalStep: number | undefined;
    await withSession(sess, async (s) => {
      while (!s.shouldStop()) {
        // Without a preemption handler (one process, no checkpoint directory or preemption
        // disabled) a notice still ends the run with the preemption exit code, without a save. In
        // a cluster the handler decides (its agreement, the group's stop vote); the cluster's
        // failures reach its steps.
        if (cluster === undefined && handler === undefined && preempting(state, notices, group)) throw new PreemptedExit(exitCodeOf(config), false);
        if (state.clusterFailure !== undefined && !preempting(state, notices, group)) throw state.clusterFailure;
        const feeds = typeof job.feeds === "function" ? job.feeds() : job.feeds;
        const plain = () => s.run(fetches, feeds);
        // In a cluster the handler may turn a failed step into a preemption: remember the step's
        // error (off the other paths' per-step work).
        const step =
          cluster === undefined
            ? plain
            : async (): Promise<unknown> => {
                try {
                  return await plain();
                } catch (e) {
                  state.stepFailure = e;
                  throw e;
                }
              };
        const result = handler === undefined ? await step() : await handler.run(step);
        state.runs += 1;
        if (job.onStep !== undefined) await job.onStep(result, { run: state.runs });
      }
      finalStep = await readStep(s);
      goodput.step = finalStep ?? goodput.step;
    });
    await following.settled();
    progress.update(finalStep ?? state.runs, undefined);
    progress.stop();
    if (cluster !== undefined) {
      // The handler's last coordination calls go out before the task leaves: a task that gets a
      // notice after this one finished learns it will save nothing (it would otherwise wait for
      // a save at the shutdown barrier, which waits for it).
      await closeHandler();
      // The shutdown barrier: the others do not take this exit for a failure.
      state.finished = true;
      const barrier = await cluster.finish(true);
      if (barrier !== undefined) logger.warn(`The cluster's shutdown barrier failed (${barrier.name}: ${barrier.message}); this task's training is done.`);
    }
    await fileWriterCache.closeAll();
    logger.info(finalStep === undefined ? "Done." : `Done at global step ${finalStep}.`);
    where();
    return ExitCodes.done;
  } catch (caught) {
    const code = await exitCodeOfFailure(caught, state, { io, progress, verbose, config, task, isChief, group, cluster, notices, logger, clock, where });
    // Under launch: this task leaves on its own (a peer that finds its service gone need not have it killed).
    if (cluster !== undefined) toLaunch({ type: "exiting", code, reason: "training ended" });
    return code;
  } finally {
    // The handler's last coordination calls go out while the task is still in the cluster.
    if (!state.finished) await closeHandler();
    if (!state.finished) await cluster?.finish(false);
    state.following?.unsubscribe();
    await board?.close();
    subscription.unsubscribe();
    forced.cancel();
    await closeHandler();
    await manager?.close();
  }
};

/**
 * The chief's checkpoint directory, taken (its lock) before anything else is created: a second
 * run on the directory stops here, having written nothing. Resolves with its manager and the
 * session's options that share it, or with the exit code (2: the directory is in use).
 */
const openRunCheckpoints = async (
  checkpointDir: string,
  plan: Pick<RunPlan, "config" | "sessionOptions" | "verbose" | "logger">,
  io: CliIo,
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

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** One line on the task: `chief:0, the chief of 3 training tasks (grpc://127.0.0.1:2222; coordination: embedded)`. */
const describeTask = (task: ClusterTask): string =>
  `${task.name}, ${task.isChief ? "the chief" : "a worker"} of ${task.numWorkers} training task${task.numWorkers === 1 ? "" : "s"} (${task.master}; coordination: ${task.options.backend ?? DEFAULT_COORDINATION_BACKEND})`;

/** Reads `loss` from a step's results: the fetch `"loss"`, or a record key or list entry named so. */
const lossExtractor = (fetches: Fetches): ((result: unknown) => number | undefined) => {
  const asNumber = (v: unknown): number | undefined => (typeof v === "number" ? v : typeof v === "bigint" ? Number(v) : undefined);
  if (fetches === "loss") return asNumber;
  if (Array.isArray(fetches)) {
    const i = fetches.indexOf("loss");
    return i < 0 ? () => undefined : (r) => asNumber((r as unknown[])[i]);
  }
  if (typeof fetches === "object" && fetches !== null && "loss" in fetches) return (r) => asNumber((r as Record<string, unknown>)["loss"]);
  return () => undefined;
};
