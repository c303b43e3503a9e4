/**
 * `run`'s training, once its plan is checked (runPlan.ts `planRun`): named steps, each short enough
 * to read at once.
 *
 * 1. {@link openRunResources}: the chief's checkpoint directory (its lock first), the goodput
 *    log, the task's server and its registration with the cluster, the board beside training.
 * 2. {@link watchForStop}: the termination notices and the cluster's first failure, which end
 *    training, and a repeated notice, which ends the process.
 * 3. {@link createRunSession}: the session (a worker waits for the chief's model) and the
 *    preemption handler.
 * 4. {@link trainSteps}: the job's fetches until `shouldStop()`.
 * 5. {@link train} itself: the order of the steps, the clean finish (the shutdown barrier), the
 *    failure path (runOutcome.ts `exitCodeOfFailure`) and the clean-up, which share one
 *    `RunState`.
 *
 * @module
 */


import { lastStepOf } from "../config/index.js";
import { clusterFailureOf } from "../errors.js";
import { withSession, type MonitoredSession } from "../pipeline/MonitoredSession.js";
import type { PreemptionCheckpointHandler } from "../preemption/PreemptionCheckpointHandler.js";
import type { TerminationNotice, TerminationNotices } from "../preemption/TerminationNotices.js";
import { ExitCodes } from "../runtime/exitCodes.js";
import { launchStatusWriter } from "../runtime/launchStatus.js";
import type { Fetches } from "../session/Session.js";
import { fileWriterCache } from "../summary/index.js";
import type { Clock } from "../time/Clock.js";
import { monitoredTrainingSession, readStep } from "../training/monitoredTrainingSession.js";
import type { CliIo } from "./cliIo.js";
import { exitOnRepeatedNotice } from "./forcedExit.js";
import { followSession } from "./progress.js";
import type { RunPlan } from "./runPlan.js";
import { openRunResources, type Accounting, type RunResources } from "./runResources.js";
import { exitCodeOfFailure, initialRunState, preempting, type RunState } from "./runOutcome.js";
import { createPreemptionHandler, exitCodeOf, PreemptedExit } from "./runPreemption.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What {@link watchForStop} watches, until its `cancel`. */
interface StopWatch {
  /** Rejects with the cluster's first failure (another task's preemption: {@link PreemptedExit}). */
  readonly clusterFailed: Promise<never> | undefined;
  cancel(): void;
}

/** What {@link createRunSession} made. */
interface RunSession {
  readonly sess: MonitoredSession;
  readonly handler: PreemptionCheckpointHandler | undefined;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Trains the plan: takes the checkpoint directory (the chief), starts the task's server and joins
 * the cluster, creates the session, the preemption handler, and runs the job's fetches until
 * `shouldStop()`; resolves with the exit code.
 */
export const train = async (plan: RunPlan, io: CliIo, clock: Clock, notices: TerminationNotices, goodput: Accounting): Promise<number> => {
  const resources = await openRunResources(plan, io, clock, notices, goodput);
  if (typeof resources === "number") return resources;
  const { verbose, config, job, task, isChief, group, progress, logger } = plan;
  const { manager, cluster, board, where } = resources;
  const accounting = goodput.recorder;
  const lastStep = lastStepOf(config, job);
  const state = initialRunState();
  const closeHandler = async (): Promise<void> => {
    state.handlerClosing = true;
    await state.handler?.close();
  };
  const watch = watchForStop(plan, resources, state, notices, io, clock, goodput);
  const toLaunch = launchStatusWriter(io.env);
  try {
    const { sess, handler } = await createRunSession(plan, resources, state, watch, notices, clock, goodput);
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
    // Under launch: this task trains (launch makes the next restart's standbys once every task does, unless --no-standby).
    if (cluster !== undefined) toLaunch({ type: "training" });
    // The display observes the session's events; the loop only trains.
    const following = followSession(progress, { events$: sess.events$, readStep: () => readStep(sess), lossOf: lossExtractor(job.fetches ?? "train") });
    state.following = following;
    const finalStep = await trainSteps(sess, handler, plan, state, cluster !== undefined, notices, goodput);
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
    watch.cancel();
    await closeHandler();
    await manager?.close();
  }
};

/**
 * Watches what ends training from outside. The first termination notice goes to the handler (a
 * save at the next step boundary); a later Ctrl-C or SIGTERM gives the save at most the grace
 * period, then exits without it. In a cluster the task owns the notices, as a program's own task
 * does (src/runtime/startTask.ts): it holds one that comes before the handler exists (a worker
 * whose session waits for its lost chief stops waiting: 43), the handler takes them over for its
 * agreement (a data-parallel rank's claim is its stop vote too), and once the handler closed the
 * task tells the tasks still training. The cluster's first failure: another task's preemption is
 * this task's termination notice; anything else (a task declared failed, a reported error, the
 * service gone) stops training.
 */
const watchForStop = (
  plan: RunPlan,
  resources: Pick<RunResources, "cluster">,
  state: RunState,
  notices: TerminationNotices,
  io: Pick<CliIo, "exit">,
  clock: Clock,
  goodput: Accounting,
): StopWatch => {
  const { config, task, group, progress, logger } = plan;
  const { cluster } = resources;
  const accounting = goodput.recorder;
  const noticeToHandler = (n: TerminationNotice): void => {
    if (!state.handlerClosing) state.handler?.noticeTermination(notices.describe(n), { deadlineMs: n.deadline });
  };
  const subscription = notices.notices$.subscribe((n) => {
    if (n.count !== 1) return;
    accounting?.notice();
    if (cluster === undefined) noticeToHandler(n);
  });
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
  return {
    clusterFailed,
    cancel: () => {
      subscription.unsubscribe();
      forced.cancel();
    },
  };
};

/**
 * Creates the session (a worker waits for the chief's model: a termination notice or a cluster
 * failure ends the wait) and the task's preemption handler, and hands the handler a notice that
 * came meanwhile.
 *
 * Every task of a cluster preempts through its multi-worker `PreemptionCheckpointHandler`
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
const createRunSession = async (
  plan: RunPlan,
  resources: RunResources,
  state: RunState,
  watch: StopWatch,
  notices: TerminationNotices,
  clock: Clock,
  goodput: Accounting,
): Promise<RunSession> => {
  const { config, isChief, group, logger } = plan;
  const { manager, cluster, sessionOptions } = resources;
  const accounting = goodput.recorder;
  const creationStart = clock.now();
  /** The part of the creation spent waiting for the other tasks' sessions (joining the cluster, for goodput). */
  let sessionsWaitMs = 0;
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
  const sess = await (cluster === undefined || resources.raceCreation === undefined ? creating : resources.raceCreation(creating, watch.clusterFailed));
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
  // Its events, and its lines as the session's events (printed above the progress display, followed by the display).
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
  return { sess, handler };
};

/**
 * Runs the job's fetches until `shouldStop()`, then closes the session; resolves with the global
 * step it ended at. Without a preemption handler (one process, no checkpoint directory or
 * preemption disabled) a notice still ends the run with the preemption exit code, without a save.
 * In a cluster the handler decides (its agreement, the group's stop vote); the cluster's failures
 * reach its steps.
 */
const trainSteps = async (
  sess: MonitoredSession,
  handler: PreemptionCheckpointHandler | undefined,
  plan: Pick<RunPlan, "config" | "job" | "group">,
  state: RunState,
  clustered: boolean,
  notices: TerminationNotices,
  goodput: Accounting,
): Promise<number | undefined> => {
  const { config, job, group } = plan;
  const fetches: Fetches = job.fetches ?? "train";
  let finalStep: number | undefined;
  await withSession(sess, async (s) => {
    while (!s.shouldStop()) {
      if (!clustered && handler === undefined && preempting(state, notices, group)) throw new PreemptedExit(exitCodeOf(config), false);
      if (state.clusterFailure !== undefined && !preempting(state, notices, group)) throw state.clusterFailure;
      const feeds = typeof job.feeds === "function" ? job.feeds() : job.feeds;
      const plain = () => s.run(fetches, feeds);
      // In a cluster the handler may turn a failed step into a preemption: remember the step's
      // error (off the other paths' per-step work).
      const step = !clustered
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
  return finalStep;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

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
