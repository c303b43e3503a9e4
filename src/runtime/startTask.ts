/**
 * `startTask()`: a program of your own joins its cluster as `monitored-session run` does. It reads
 * this task's place from TF_CONFIG (or, without it, from the environment of a pod that
 * `monitored-session manifest kubernetes` describes) and the cluster settings from
 * `MONITORED_SESSION_CLUSTER` (set by `monitored-session launch -- <command>` and by the
 * manifest, or by hand on each machine), starts the
 * task's server, on the chief the embedded coordination service, registers with heartbeats, and
 * watches the cluster for failures; with `dataParallel` it joins the replica group, whose
 * collective (with its stop vote) goes to `tfjsSession({ collective: task.collective })`.
 *
 * @example
 * ```ts
 * import { PreemptionCheckpointHandler } from "monitored-session/preemption";
 * import { startTask } from "monitored-session/runtime";
 * import type { VariableStore } from "monitored-session";
 *
 * declare const store: VariableStore;
 * declare function trainStep(): Promise<void>;
 * const task = await startTask(); // TF_CONFIG from the environment
 * const handler = await PreemptionCheckpointHandler.create({ clusterResolver: task, checkpointDir: "/runs/exp1", store });
 * while (handler.totalRunCalls < 1000) await handler.run(trainStep);
 * await handler.close();
 * await task.close();
 * ```
 *
 * @module
 */

import { defer, type Observable } from "rxjs";

import { systemClock, type Clock } from "../time/Clock.js";
import { PREEMPTION_EXIT_CODE } from "../preemption/TerminationConfig.js";
import { CHIEF_LOST_EXIT_CODE, type ChiefLostError } from "../preemption/PreemptionCluster.js";
import { TerminationNotices, type NoticeProcess, type TerminationNotice } from "../preemption/TerminationNotices.js";
import type { ClusterConfig } from "../cluster/ClusterConfig.js";
import { resolveTfConfig, type ResolvedCluster } from "../cluster/ClusterResolver.js";
import { waitForPodTfConfig } from "../cluster/PodClusterResolver.js";
import { TF_CONFIG } from "../cluster/TfConfig.js";
import { ValueError } from "../errors.js";
import { defaultLogger, type Logger } from "../Logger.js";
import { startClusterTask, type ClusterRuntime } from "./clusterRuntime.js";
import { clusterSettingsFromEnv, withAbsolutePaths } from "./clusterSettings.js";
import { clusterTaskFrom } from "./clusterTask.js";
import { LAUNCH_READY_ENV, LAUNCH_READY_LINE } from "./launchReady.js";
import { launchStatusWriter, launchTaskName, type LaunchStatusWriter } from "./launchStatus.js";
import { isPreemptionReport } from "./preemptionReport.js";
import { ReplicaGroup } from "./replicaGroup.js";
import { abandonStart } from "./startLeave.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/**
 * A started task of a cluster: see {@link ClusterRuntime}. Its termination notices (SIGTERM,
 * SIGINT, SIGHUP) are watched from `startTask()`'s first line; a `PreemptionCheckpointHandler`
 * created with `clusterResolver: task` takes them over ({@link TaskRuntime.takeOverNotices}).
 */
export interface TaskRuntime extends ClusterRuntime {
  /**
   * The task's termination notices, from its start, for the one handler that acts on them (a
   * notice that came before is delivered first). Until it is called, the first notice is held
   * with a line saying so, and a second one (Ctrl-C again) leaves the cluster and exits with the
   * preemption code at once. The handler's own signal handlers are then not installed.
   */
  takeOverNotices(): Observable<TerminationNotice>;
}

/** Options of {@link startTask}. */
export interface StartTaskOptions {
  /** Where TF_CONFIG (or a pod's variables, `POD_ENV` of `monitored-session/cluster`) and `MONITORED_SESSION_CLUSTER` are read (default `process.env`). */
  readonly env?: NodeJS.ProcessEnv | undefined;
  /**
   * This task's place in the cluster, from a cluster resolver (`resolveCluster()` of
   * `monitored-session/cluster`, or your own); default: resolved from TF_CONFIG in `env`.
   */
  readonly resolver?: ResolvedCluster | undefined;
  /** The `cluster:` settings (default: `MONITORED_SESSION_CLUSTER`, else the defaults: embedded backend, no token, plaintext). */
  readonly settings?: ClusterConfig | undefined;
  /**
   * Join the replica group of synchronous data-parallel training (every training task, the
   * chief rank 0): {@link ClusterRuntime.collective} is then its collective (default: the
   * settings' `dataParallel`, else `false`).
   */
  readonly dataParallel?: boolean | undefined;
  /** How long a worker without a replica group waits for a lost chief (default 7200 s). */
  readonly maxWaitSecs?: number | undefined;
  readonly logger?: Logger | undefined;
  readonly clock?: Clock | undefined;
  /**
   * How the task exits on a termination notice that came while it started (it leaves the
   * cluster first), or on a second notice that no handler took over (default `process.exit`).
   */
  readonly exit?: ((code: number) => void) | undefined;
  /** Where notices come from (default `process`; tests pass a fake). */
  readonly noticeProcess?: NoticeProcess | undefined;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Starts this process's task of the cluster TF_CONFIG describes and resolves once every task
 * registered (and, with `dataParallel`, the replica group is joined). Under `launch`, it prints
 * the line that tells `launch` the task started.
 *
 * @throws ValueError when TF_CONFIG is unset (and this is no pod of a generated manifest), or
 *   TF_CONFIG, the pod's variables or `MONITORED_SESSION_CLUSTER` is invalid (one line, every
 *   problem with its path); `PeerNotResolvedError` when a peer pod's DNS name does not resolve
 *   by the deadline; `ClusterStartError` for what the user fixes
 *   (a port in use, an unreadable token or TLS file, a token the chief rejects).
 */
export const startTask = async (options: StartTaskOptions = {}): Promise<TaskRuntime> => {
  const env = options.env ?? process.env;
  const logger = options.logger ?? defaultLogger;
  const clock = options.clock ?? systemClock;
  const exit = options.exit ?? ((code: number) => process.exit(code));
  const launched = env[LAUNCH_READY_ENV] === "1";
  // The notices are this task's from here on: a SIGTERM while it registers, waits at the start
  // barrier or joins its group leaves the cluster and exits with the preemption code, never 143.
  const notices = TerminationNotices.start({ clock, logger, watchParent: false, ...(options.noticeProcess === undefined ? {} : { process: options.noticeProcess }) });
  if (launched) process.stderr.write(`${LAUNCH_READY_LINE}\n`);
  const toLaunch = launchStatusWriter(env);
  const reported = notices.notices$.subscribe((n) => {
    if (n.count === 1) toLaunch({ type: "notice", source: notices.describe(n) });
  });
  try {
    return await startOwningNotices(options, env, notices, { logger, clock, exit, launched, toLaunch });
  } catch (e) {
    reported.unsubscribe();
    notices.close();
    throw e;
  }
};

/** What {@link startTask} decided before it started anything. */
interface Owner {
  readonly logger: Logger;
  readonly clock: Clock;
  readonly exit: (code: number) => void;
  readonly launched: boolean;
  readonly toLaunch: LaunchStatusWriter;
}

const startOwningNotices = async (options: StartTaskOptions, env: NodeJS.ProcessEnv, notices: TerminationNotices, owner: Owner): Promise<TaskRuntime> => {
  const { logger, clock, exit, launched, toLaunch } = owner;
  /** The preemption exit before training: nothing was trained, nothing is saved. */
  const leaveOn = async (n: TerminationNotice, name: string, runtime: ClusterRuntime | undefined, when: string): Promise<void> => {
    logger.info(`${name}: termination notice (${notices.describe(n)}) ${when}: leaving the cluster and exiting with ${PREEMPTION_EXIT_CODE} without saving (start the same command again to resume).`);
    if (runtime !== undefined) {
      await runtime.reportPreemption(notices.describe(n));
      await runtime.finish(false);
    }
    notices.close();
    toLaunch({ type: "exiting", code: PREEMPTION_EXIT_CODE, reason: `termination notice ${when}` });
    exit(PREEMPTION_EXIT_CODE);
  };
  const firstNotice = new Promise<TerminationNotice>((resolve) => {
    const s = notices.notices$.subscribe((n) => {
      resolve(n);
      queueMicrotask(() => s.unsubscribe());
    });
  });
  // TF_CONFIG wins; without it, a pod of a generated manifest finds its cluster in its own
  // environment once its peers' DNS names resolve (docs/kubernetes.md).
  const tfConfig = options.resolver === undefined ? await waitForPodTfConfig({ env, clock, log: (line) => logger.info(line) }) : undefined;
  if (options.resolver === undefined && tfConfig === undefined) {
    throw new ValueError(
      `startTask: ${TF_CONFIG} is not set, so this process is not a task of a cluster; run it under \`monitored-session launch --workers N -- <command>\`, set ${TF_CONFIG} on each task (docs/distributed.md), or start it from \`monitored-session manifest kubernetes\` (docs/kubernetes.md)`,
    );
  }
  const settings = options.settings === undefined ? (clusterSettingsFromEnv(env) ?? {}) : withAbsolutePaths(options.settings, process.cwd());
  const resolved = options.resolver ?? resolveTfConfig(tfConfig as NonNullable<typeof tfConfig>);
  const task = clusterTaskFrom(resolved, settings);
  const dataParallel = options.dataParallel ?? settings.dataParallel ?? false;
  const group = dataParallel ? ReplicaGroup.of(resolved) : undefined;
  // Under launch: no orphan trains on if launch is killed. A notice while the task starts stops
  // the start; once every task registered, the others hear of it and leave too.
  const starting = startClusterTask(task, { env, group, maxWaitSecs: options.maxWaitSecs, logger, clock, watchParent: launched, leave: firstNotice.then((n) => notices.describe(n)) });
  let raced: { runtime: ClusterRuntime } | { notice: TerminationNotice };
  try {
    raced = await Promise.race([starting.then((runtime) => ({ runtime })), firstNotice.then((notice) => ({ notice }))]);
  } catch (e) {
    // Another task left for its termination notice while this one started: nothing was trained.
    if (!isPreemptionReport(e)) throw e;
    const who = e.failure?.kind === "preemption" ? `${launchTaskName(e.failure.reporter)}'s termination notice (${e.failure.notice})` : "another task's termination notice";
    logger.info(`${task.name}: ${who} while it joined the cluster: exiting with ${PREEMPTION_EXIT_CODE} without saving (start the same command again to resume).`);
    notices.close();
    toLaunch({ type: "exiting", code: PREEMPTION_EXIT_CODE, reason: `${who} while it joined the cluster` });
    exit(PREEMPTION_EXIT_CODE);
    return new Promise<never>(() => undefined);
  }
  if ("notice" in raced) {
    // The start stops (telling the others once every task registered), within a bound; a start
    // that finished meanwhile leaves the cluster.
    await abandonStart(starting, clock);
    await leaveOn(raced.notice, task.name, undefined, "while it joined the cluster");
    return new Promise<never>(() => undefined);
  }
  const { runtime } = raced;
  // A notice that came as the start finished: the same exit.
  if (notices.first !== undefined) {
    await leaveOn(notices.first, task.name, runtime, "while it joined the cluster");
    return new Promise<never>(() => undefined);
  }
  let takenOver = false;
  /**
   * A held notice met a loss of the chief (a worker's session waits for it, or the loss came
   * later): nobody can write the checkpoint. Told synchronously, before the program's wait raises
   * the error, so the task exits 43 rather than with the program's failure; the chief is lost, so
   * there is no cluster to leave.
   */
  const chiefLost = (lost: ChiefLostError): void => {
    if (takenOver) return;
    held.unsubscribe();
    // As the handler says it (an error: nothing is saved). No leave: with the embedded backend
    // the service went with the chief; with etcd the others learn of the exit from the missing
    // heartbeats, as after any exit without a leave.
    logger.error(`${task.name}: ${lost.message}: exiting with ${CHIEF_LOST_EXIT_CODE} without saving (start the same command again to resume from the last checkpoint).`);
    notices.close();
    toLaunch({ type: "exiting", code: CHIEF_LOST_EXIT_CODE, reason: "the chief was lost while a termination notice was held" });
    exit(CHIEF_LOST_EXIT_CODE);
  };
  const held = notices.notices$.subscribe((n) => {
    if (takenOver) return;
    if (n.count === 1) {
      logger.info(`${task.name}: termination notice (${notices.describe(n)}) held for the PreemptionCheckpointHandler created with clusterResolver: task, which saves at the agreed run; a second notice exits at once.`);
      // A worker that outlives its chief stops waiting for it: a loss now or later is 43.
      if (!runtime.isChief) runtime.chiefRecovery?.noticed("its termination notice", chiefLost);
      return;
    }
    void leaveOn(n, task.name, runtime, "again, before a preemption handler took the notices over");
  });
  const finish = (clean: boolean): Promise<Error | undefined> => {
    held.unsubscribe();
    notices.close();
    return runtime.finish(clean);
  };
  return {
    ...runtime,
    // Taken over when the handler subscribes (after its restore), not when it asks: until then a
    // held notice still ends a wait for a lost chief here (43), and a second one exits 42.
    takeOverNotices: () =>
      defer(() => {
        takenOver = true;
        held.unsubscribe();
        return notices.notices$;
      }),
    finish,
    close: () => finish(true),
    [Symbol.asyncDispose]: async () => {
      await finish(true);
    },
  };
};
