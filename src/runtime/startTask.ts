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

import { defer, finalize, map, type Observable } from "rxjs";

import { systemClock, type Clock } from "../time/Clock.js";
import { PREEMPTION_EXIT_CODE } from "../preemption/TerminationConfig.js";
import { CHIEF_LOST_EXIT_CODE, type ChiefLostError, type TakenNotice } from "../preemption/PreemptionCluster.js";
import { TerminationNotices, type NoticeProcess, type TerminationNotice } from "../preemption/TerminationNotices.js";
import type { ClusterConfig } from "../cluster/ClusterConfig.js";
import { resolveTfConfig, type ResolvedCluster } from "../cluster/ClusterResolver.js";
import { waitForPodTfConfig } from "../cluster/PodClusterResolver.js";
import { TF_CONFIG } from "../cluster/TfConfig.js";
import { clusterFailureOf, ValueError } from "../errors.js";
import { ComponentEvents } from "../events/componentEvents.js";
import { defaultLogger, type Logger } from "../Logger.js";
import { startClusterTask, type ClusterRuntime } from "./clusterRuntime.js";
import { checkedClusterSettings, clusterSettingsFromEnv, withAbsolutePaths } from "./clusterSettings.js";
import { clusterTaskFrom, type ClusterTask } from "./clusterTask.js";
import { LAUNCH_READY_ENV, LAUNCH_READY_LINE } from "./launchReady.js";
import { launchStatusWriter, launchTaskName, type LaunchStatusWriter } from "./launchStatus.js";
import { ReplicaGroup } from "./replicaGroup.js";
import { abandonStart } from "./startLeave.js";
import { runtimeEmitter, type RuntimeEvent } from "./events.js";

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
  takeOverNotices(): Observable<TakenNotice>;
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
  /**
   * The `cluster:` settings (default: `MONITORED_SESSION_CLUSTER`, else the defaults: embedded
   * backend, no token, plaintext). Checked as a configuration file's section is: an unknown or
   * misspelled key is a `ValueError` naming it.
   */
  readonly settings?: ClusterConfig | undefined;
  /**
   * Join the replica group of synchronous data-parallel training (every training task, the
   * chief rank 0): {@link ClusterRuntime.collective} is then its collective (default: the
   * settings' `dataParallel`, else `false`).
   */
  readonly dataParallel?: boolean | undefined;
  /** How long a worker without a replica group waits for a lost chief (default 7200 s). */
  readonly maxWaitSecs?: number | undefined;
  /**
   * Prints the task's lines (default: the console at `info`) until a session adopts them: a
   * `monitoredTrainingSession({ task })` does while it lives, or `session.forwardEvents(task)`;
   * that session's log observers print them meanwhile (give it the same logger to keep one
   * destination), and this logger again after it closed.
   */
  readonly logger?: Logger | undefined;
  /**
   * Hears every event of the task from its first line (its start's events come before
   * `startTask()` resolves, so `task.events$` alone would miss them).
   */
  readonly observer?: ((event: RuntimeEvent) => void) | undefined;
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
 *   TF_CONFIG, the pod's variables, `MONITORED_SESSION_CLUSTER` or the `settings` option is
 *   invalid (one line, every problem with its path); `PeerNotResolvedError` when a peer pod's DNS name does not resolve
 *   by the deadline; `ClusterStartError` for what the user fixes
 *   (a port in use, an unreadable token or TLS file, a token the chief rejects).
 */
export const startTask = async (options: StartTaskOptions = {}): Promise<TaskRuntime> => {
  const env = options.env ?? process.env;
  const clock = options.clock ?? systemClock;
  // The task's lines are its events from the first one (its notices' included): `logger` prints
  // them until a session adopts them (`session.forwardEvents(task)`).
  const events = new ComponentEvents<RuntimeEvent>(options.logger ?? defaultLogger, () => clock.now(), "runtime");
  if (options.observer !== undefined) events.events$.subscribe(options.observer);
  const { logger } = events;
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
    // TF_CONFIG wins; without it, a pod of a generated manifest finds its cluster in its own
    // environment once its peers' DNS names resolve (docs/kubernetes.md).
    const tfConfig = options.resolver === undefined ? await waitForPodTfConfig({ env, clock, log: (line) => logger.info(line) }) : undefined;
    if (options.resolver === undefined && tfConfig === undefined) {
      throw new ValueError(
        `startTask: ${TF_CONFIG} is not set, so this process is not a task of a cluster; run it under \`monitored-session launch --workers N -- <command>\`, set ${TF_CONFIG} on each task (docs/distributed.md), or start it from \`monitored-session manifest kubernetes\` (docs/kubernetes.md)`,
      );
    }
    // Settings given in code are checked as a file's are (a misspelled backend setting is not ignored).
    const settings = options.settings === undefined ? (clusterSettingsFromEnv(env) ?? {}) : withAbsolutePaths(checkedClusterSettings(options.settings, "startTask settings"), process.cwd());
    const resolved = options.resolver ?? resolveTfConfig(tfConfig as NonNullable<typeof tfConfig>);
    const dataParallel = options.dataParallel ?? settings.dataParallel ?? false;
    const joined = await joinAsTask({
      task: clusterTaskFrom(resolved, settings),
      group: dataParallel ? ReplicaGroup.of(resolved) : undefined,
      notices,
      env,
      maxWaitSecs: options.maxWaitSecs,
      events,
      clock,
      // Under launch: no orphan trains on if launch is killed.
      watchParent: launched,
      toLaunch,
      exitCode: PREEMPTION_EXIT_CODE,
      held: { holder: "the PreemptionCheckpointHandler created with clusterResolver: task", exit },
      onFinish: () => {
        reported.unsubscribe();
        notices.close();
      },
    });
    if ("runtime" in joined) return joined.runtime;
    notices.close();
    events.complete();
    exit(joined.exitCode);
    return new Promise<never>(() => undefined);
  } catch (e) {
    reported.unsubscribe();
    notices.close();
    events.complete();
    throw e;
  }
};

/** What {@link joinAsTask} needs: the task, its notices and how it exits. */
export interface JoinAsTaskOptions {
  readonly task: ClusterTask;
  readonly group: ReplicaGroup | undefined;
  /** The process's notices, watched since it started (the caller closes them). */
  readonly notices: TerminationNotices;
  readonly env: NodeJS.ProcessEnv;
  readonly maxWaitSecs: number | undefined;
  /**
   * The task's event stream (its lines are `log` events there, printed by its fallback logger
   * until a session adopts them): the started task's `events$`, completed once it finished.
   */
  readonly events: ComponentEvents<RuntimeEvent>;
  readonly clock: Clock;
  /** End the task when its parent exits (under `launch`, where the parent is no notice source). */
  readonly watchParent: boolean;
  readonly toLaunch: LaunchStatusWriter;
  /** The preemption exit code (`run`: the configuration's `preemption.exitCode`). */
  readonly exitCode: number;
  /**
   * A notice held for the handler: who will take it over, and (for a program of its own) how it
   * exits at once on a second notice or with 43 when the chief is lost meanwhile. Without `exit`
   * (`run`), a second notice is the caller's, and a lost chief ends the session's wait for it.
   */
  readonly held: { readonly holder: string; readonly exit?: ((code: number) => void) | undefined };
  /** Called as the task finishes (`startTask()` closes its notices there). */
  readonly onFinish?: (() => void) | undefined;
}

/** How {@link joinAsTask} ended: the started task, or the preemption exit before training (said, and told to `launch`). */
export type JoinedTask = { readonly runtime: TaskRuntime } | { readonly exitCode: number };

/**
 * Joins the cluster as `task`, owning `notices` (the task object of {@link startTask}, and of
 * `run`): a notice while the task starts leaves the cluster (telling the others once every task
 * registered) and ends with the preemption code, nothing saved; once started, a notice is held for
 * the preemption handler that takes the notices over ({@link TaskRuntime.takeOverNotices}); once
 * that handler closed, the first notice is told to the tasks still training (a chief that serves
 * them after its own training ended).
 *
 * @throws what `startClusterTask` throws.
 */
export const joinAsTask = async (o: JoinAsTaskOptions): Promise<JoinedTask> => {
  const { task, notices, events, clock, toLaunch, exitCode } = o;
  const { logger } = events;
  const emit = runtimeEmitter(events, clock);
  /** The preemption exit before training: nothing was trained, nothing is saved. */
  const leave = async (n: TerminationNotice, runtime: ClusterRuntime | undefined, when: string): Promise<JoinedTask> => {
    logger.info(`${task.name}: termination notice (${notices.describe(n)}) ${when}: leaving the cluster and exiting with ${exitCode} without saving (start the same command again to resume).`);
    const reason = `termination notice ${when}`;
    emit({ type: "taskExiting", task: task.name, code: exitCode, reason });
    if (runtime !== undefined) {
      await runtime.reportPreemption(notices.describe(n));
      await runtime.finish(false);
    }
    toLaunch({ type: "exiting", code: exitCode, reason });
    return { exitCode };
  };
  const firstNotice = new Promise<TerminationNotice>((resolve) => {
    const s = notices.notices$.subscribe((n) => {
      resolve(n);
      queueMicrotask(() => s.unsubscribe());
    });
  });
  // A notice while the task starts stops the start; once every task registered, the others hear of it and leave too.
  const starting = startClusterTask(task, { env: o.env, group: o.group, maxWaitSecs: o.maxWaitSecs, logger, events, clock, watchParent: o.watchParent, leave: firstNotice.then((n) => notices.describe(n)) });
  let raced: { runtime: ClusterRuntime } | { notice: TerminationNotice };
  try {
    raced = await Promise.race([starting.then((runtime) => ({ runtime })), firstNotice.then((notice) => ({ notice }))]);
  } catch (e) {
    // Another task left for its termination notice while this one started: nothing was trained.
    const f = clusterFailureOf(e);
    if (f?.kind !== "preemption") throw e;
    const who = `${launchTaskName(f.reporter)}'s termination notice (${f.notice})`;
    logger.info(`${task.name}: ${who} while it joined the cluster: exiting with ${exitCode} without saving (start the same command again to resume).`);
    emit({ type: "taskExiting", task: task.name, code: exitCode, reason: `${who} while it joined the cluster` });
    toLaunch({ type: "exiting", code: exitCode, reason: `${who} while it joined the cluster` });
    return { exitCode };
  }
  if ("notice" in raced) {
    // The start stops (telling the others once every task registered), within a bound; a start
    // that finished meanwhile leaves the cluster.
    await abandonStart(starting, clock);
    return leave(raced.notice, undefined, "while it joined the cluster");
  }
  const { runtime } = raced;
  // A notice that came as the start finished: the same exit.
  if (notices.first !== undefined) return leave(notices.first, runtime, "while it joined the cluster");
  return { runtime: ownedTask(runtime, o) };
};

/** `runtime` with the notices of {@link joinAsTask}: held until a handler takes them over, told to the others after it closed. */
const ownedTask = (runtime: ClusterRuntime, o: JoinAsTaskOptions): TaskRuntime => {
  const { task, notices, events, toLaunch } = o;
  const { logger } = events;
  const emit = runtimeEmitter(events, o.clock);
  /** Exits once, however many of the task's ways to exit see a reason to. */
  let exited = false;
  const exit =
    o.held.exit === undefined
      ? undefined
      : (code: number): void => {
          if (exited) return;
          exited = true;
          (o.held.exit as (code: number) => void)(code);
        };
  /** Says why, tells `launch`, and exits with `code` (once; the notices end first). */
  const exitWith = (code: number, reason: string): void => {
    if (exit === undefined) return;
    notices.close();
    emit({ type: "taskExiting", task: task.name, code, reason });
    events.complete();
    toLaunch({ type: "exiting", code, reason });
    exit(code);
  };
  /** Notices seen so far (the replay included): a notice after the handler closed is one beyond them. */
  let seen = 0;
  const counted = notices.notices$.subscribe((n) => {
    seen = Math.max(seen, n.count);
  });
  let takenOver = false;
  /**
   * A held notice met a loss of the chief (a worker's session waits for it, or the loss came
   * later): nobody can write the checkpoint. Told synchronously, before the program's wait raises
   * the error, so the task exits 43 rather than with the program's failure; the chief is lost, so
   * there is no cluster to leave.
   */
  const chiefLost =
    exit === undefined
      ? undefined
      : (lost: ChiefLostError): void => {
          if (takenOver) return;
          held.unsubscribe();
          // As the handler says it (an error: nothing is saved). No leave: with the embedded backend
          // the service went with the chief; with etcd the others learn of the exit from the missing
          // heartbeats, as after any exit without a leave.
          logger.error(`${task.name}: ${lost.message}: exiting with ${CHIEF_LOST_EXIT_CODE} without saving (start the same command again to resume from the last checkpoint).`);
          exitWith(CHIEF_LOST_EXIT_CODE, "the chief was lost while a termination notice was held");
        };
  const held = notices.notices$.subscribe((n) => {
    if (takenOver) return;
    if (n.count === 1) {
      logger.info(
        `${task.name}: termination notice (${notices.describe(n)}) held for ${o.held.holder}, which saves at the agreed run${exit === undefined ? "" : "; a second notice exits at once"}.`,
      );
      // A worker that outlives its chief stops waiting for it: a loss now or later is 43.
      if (!runtime.isChief) runtime.chiefRecovery?.noticed("its termination notice", chiefLost);
      return;
    }
    if (exit === undefined) return;
    void (async () => {
      logger.info(`${task.name}: termination notice (${notices.describe(n)}) again, before a preemption handler took the notices over: leaving the cluster and exiting with ${o.exitCode} without saving (start the same command again to resume).`);
      await runtime.reportPreemption(notices.describe(n));
      await runtime.finish(false);
      exitWith(o.exitCode, "termination notice again, before a preemption handler took the notices over");
    })();
  });
  /** After the handler closed: the first notice, if none came before, tells the tasks still training. */
  let afterHandler: { unsubscribe(): void } | undefined;
  /** A handler holds the notices now (took them over, not yet let go). */
  let holding = false;
  const released = (): void => {
    holding = false;
    afterHandler?.unsubscribe();
    afterHandler = undefined;
    const before = seen;
    if (before > 0) return;
    afterHandler = notices.notices$.subscribe((n) => {
      if (n.count !== 1) return;
      // This task's training is over (a chief that serves the others until they leave): its
      // handler is closed. The report, which the chief's host sends through the service itself,
      // tells the tasks still training.
      logger.info(`${task.name}: termination notice (${notices.describe(n)}) after its training ended: telling the tasks still training.`);
      void runtime.reportPreemption(notices.describe(n));
    });
  };
  let finishing: Promise<Error | undefined> | undefined;
  /** Once: the first call decides how the task leaves. */
  const finish = (clean: boolean): Promise<Error | undefined> => (finishing ??= finishOnce(clean));
  const finishOnce = async (clean: boolean): Promise<Error | undefined> => {
    held.unsubscribe();
    // No handler ever took the notices: the first one now is told to the others, as after a handler closed.
    if (!takenOver && seen === 0) released();
    const seenAtFinish = seen;
    // A program of its own: a notice the task does not tell the others of (a second one, or one
    // after the handler had its own) ends the wait at the shutdown barrier or the drain at once.
    const leaving =
      exit === undefined
        ? undefined
        : notices.notices$.subscribe((n) => {
            // Replayed, the handler's (it still holds them), or the one the report tells.
            if (n.count <= seenAtFinish || holding || (n.count === 1 && afterHandler !== undefined)) return;
            logger.info(`${task.name}: termination notice (${notices.describe(n)}) while it leaves the cluster: exiting with ${o.exitCode} at once.`);
            exitWith(o.exitCode, "termination notice while the task left the cluster");
          });
    try {
      // A chief serves the others at the shutdown barrier: a notice meanwhile still tells them.
      return await runtime.finish(clean);
    } finally {
      leaving?.unsubscribe();
      counted.unsubscribe();
      afterHandler?.unsubscribe();
      o.onFinish?.();
      events.complete();
    }
  };
  return {
    ...runtime,
    // Taken over when the handler subscribes (after its restore), not when it asks: until then a
    // held notice still ends a wait for a lost chief here (43), and a second one exits 42. The
    // handler lets go when it closes.
    takeOverNotices: () =>
      defer(() => {
        takenOver = true;
        holding = true;
        held.unsubscribe();
        // A later handler takes them over from one that closed: no longer the task's to tell.
        afterHandler?.unsubscribe();
        afterHandler = undefined;
        return notices.notices$.pipe(
          map((n): TakenNotice => ({ ...n, description: notices.describe(n) })),
          finalize(released),
        );
      }),
    finish,
    close: () => finish(true),
    [Symbol.asyncDispose]: async () => {
      await finish(true);
    },
  };
};
