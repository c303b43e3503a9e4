/**
 * `PreemptionCheckpointHandler`: saves a checkpoint when the process is about to be terminated
 * (SIGTERM by default, or a custom watcher), at a step boundary, then exits so that a restart
 * resumes at exactly that step (TensorFlow's
 * `tf.distribute.experimental.PreemptionCheckpointHandler`).
 *
 * Without a `clusterResolver` it is TensorFlow's local mode. With one (the task object of
 * `monitored-session/runtime`, joined to the coordination service) every task of the cluster
 * saves at one agreed run and exits ({@link ClusterPreemptionCoordinator}); an `OpError` of one
 * task's step is raised by every other task's next `run`; only the chief writes to the checkpoint
 * directory, and a non-chief whose manager the handler made writes to
 * `dirname(dir)/workertemp_<id>/basename(dir)`, deleted before it exits.
 *
 * The signal handler only sets a flag: the save happens before the next step, never in the
 * middle of one. The run counter (`totalRunCalls`) is saved in the checkpoint as
 * `checkpointed_runs` and restored on creation, so a restarted loop knows where it is.
 *
 * @example
 * ```ts
 * import { Graph } from "monitored-session";
 * import { PreemptionCheckpointHandler } from "monitored-session/preemption";
 *
 * declare const graph: Graph; // with a global step and a `train` op
 * const numSteps = 10_000;
 * const session = graph.session();
 * const handler = await PreemptionCheckpointHandler.create({
 *   checkpointDir: "/runs/exp1",
 *   store: session.variables,
 *   initFn: () => session.variables.initialize(),
 * });
 * while (handler.totalRunCalls < numSteps) await handler.run(() => session.run("train"));
 * await handler.close();
 * // On SIGTERM: saves at the next step boundary and exits with code 42 ("restart me").
 * ```
 *
 * @module
 */

// Its events are session events, declared beside it by augmentation.
import "./events.js";
import type { Observable, Subscription } from "rxjs";

import { ComponentEvents } from "../events/componentEvents.js";

import { rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";

import { CheckpointManager, openCheckpointDirectory, type CheckpointSaveOptions } from "../checkpoint/index.js";
import { systemClock, type Clock, type TimerHandle } from "../time/Clock.js";
import { clusterFailureErrorOf, clusterFailureOf, InvalidArgumentError, OpError, RuntimeError, UnimplementedError, ValueError } from "../errors.js";
import { EventLoopYield } from "../pipeline/EventLoopYield.js";
import { defaultLogger, type Logger } from "../Logger.js";
import { ResumableState } from "../creation/ResumableState.js";
import type { VariableStore } from "../session/Session.js";
import type { SessionEventOf } from "../events/SessionEvent.js";
import { tensor, type TensorValue } from "../session/Tensor.js";
import { ClusterPreemptionCoordinator, type AgreementEvent, type PreemptionAgreement } from "./ClusterPreemptionCoordinator.js";
import { PREEMPTION_EXIT_CODE } from "./TerminationConfig.js";
import type { PreemptionClusterResolver, TakenNotice } from "./PreemptionCluster.js";
import { LocalPreemptionCoordinator, type PreemptionCoordinator, type PreemptionDecision } from "./PreemptionCoordinator.js";
import { PlatformPoller } from "./platforms/PlatformWatcher.js";
import { TerminationConfig } from "./TerminationConfig.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The name under which the run counter is saved (TensorFlow's `checkpointed_runs`). */
export const CHECKPOINTED_RUNS = "checkpointed_runs";

/** Where the handler listens for signals (default `process`). */
export interface SignalTarget {
  on(signal: NodeJS.Signals, listener: () => void): unknown;
  off(signal: NodeJS.Signals, listener: () => void): unknown;
}

/**
 * Options of {@link PreemptionCheckpointHandler.create}: a `checkpointManager` or a
 * `checkpointDir` (with both, the directory is ignored with a warning, as TensorFlow does). A
 * handler that only agrees on the run and leaves the saving to `terminationConfig.saveFn` (a
 * task that writes no checkpoint of its own) may have neither, with `restoreOnCreate: false`.
 */
export interface PreemptionCheckpointHandlerOptions {
  /**
   * Saves and restores through this manager: the directory's one writer, shared with a
   * `CheckpointSaverHook` (same directory, one retention state). The caller owns it.
   */
  readonly checkpointManager?: CheckpointManager | undefined;
  /**
   * Without a manager: one is made here (`maxToKeep: 1`, name `ckpt`, TensorFlow's choice),
   * taking the directory's lock; {@link PreemptionCheckpointHandler.close} closes it.
   */
  readonly checkpointDir?: string | undefined;
  /**
   * What is saved: the session's variables (wrap it with a `ResumableState` to add data and RNG
   * state). A function is called at each save and restore (e.g. a monitored session's current
   * raw session).
   */
  readonly store: VariableStore | (() => VariableStore);
  /** Called by the restore on creation when there is no checkpoint (e.g. initialize the variables). */
  readonly initFn?: (() => void | Promise<void>) | undefined;
  /**
   * Restore the latest checkpoint into the store on creation (default `true`, TensorFlow's
   * behaviour). Pass `false` when the session was already restored (by a `ChiefSessionCreator`,
   * say): the run counter then starts at 0.
   */
  readonly restoreOnCreate?: boolean | undefined;
  /** How termination is noticed, saved and exited (default `new TerminationConfig()`). */
  readonly terminationConfig?: TerminationConfig | undefined;
  /**
   * The cluster this task is part of (TensorFlow's `strategy.cluster_resolver`): the task object
   * of `monitored-session/runtime` (`await startTask()`), joined to the coordination service.
   * Every task then saves at one agreed run. Without it (or with a cluster of no jobs), the
   * handler is in local mode.
   */
  readonly clusterResolver?: PreemptionClusterResolver | undefined;
  /**
   * With a `clusterResolver`: how the tasks stop (default `"agreedRun"`, TensorFlow's: every task
   * saves at one agreed run). `"chiefSaves"` is for tasks that share no step, each training its
   * own replica at its own pace with only the chief's values kept: each stops at its own next
   * step boundary, the chief saves there, and the others exit once the chief's checkpoint is
   * stored (43 when the chief is lost first). Not for a data-parallel group (its stop vote
   * decides).
   */
  readonly agreement?: PreemptionAgreement | undefined;
  /** The "at which run do we save" decision (default a {@link LocalPreemptionCoordinator}, or with a `clusterResolver` a {@link ClusterPreemptionCoordinator}). */
  readonly coordinator?: PreemptionCoordinator | undefined;
  /** Signals that mean "terminate soon" when there is no watcher (default `["SIGTERM"]`). */
  readonly signals?: readonly NodeJS.Signals[] | undefined;
  /** Where signals are listened for (default `process`; tests pass an `EventEmitter`). */
  readonly signalTarget?: SignalTarget | undefined;
  /**
   * Longest stretch of training, in milliseconds, before {@link PreemptionCheckpointHandler.run}
   * gives the event loop a turn (default 5). A synchronous step never lets a signal or the
   * watcher's timer through otherwise. `Infinity` turns it off (a `MonitoredSession` inside
   * `run` yields by itself).
   */
  readonly yieldIntervalMs?: number | undefined;
  readonly clock?: Clock | undefined;
  readonly logger?: Logger | undefined;
  /**
   * Hears every event of the handler from its first line: what `create()` says (a checkpoint it
   * restored, the replica group's run count, an ignored option) comes before it resolves, so
   * `handler.events$` alone would miss it. Lines are `log` events (`source: "preemption"`).
   */
  readonly observer?: ((event: PreemptionEvent | SessionEventOf<"log">) => void) | undefined;
  /**
   * The current global step, read synchronously, for log messages: with it they say "at global
   * step N" (what a user sees in TensorBoard and checkpoint names) instead of "at run N".
   */
  readonly globalStep?: (() => number | undefined) | undefined;
  /**
   * In a cluster: report an `OpError` of a step to the other tasks, which raise it at their next
   * step (default `true`, TensorFlow's behaviour). `false` when the program reports its failures
   * itself (`monitored-session run` does, with its own rules); the agreement is the same.
   */
  readonly reportErrors?: boolean | undefined;
}

/**
 * An event of {@link PreemptionCheckpointHandler.events$}; `time` is the clock's epoch ms. They
 * are session events too (see `SessionEventMap`): `session.forwardEvents(handler)`
 * puts them on a monitored session's stream.
 */
export type PreemptionEvent = SessionEventOf<
  | "log"
  | "terminationNoticed"
  | "preemptionCheckpointSaved"
  | "gracePeriodExceeded"
  | "preemptionClaimed"
  | "preemptionClaimHeard"
  | "preemptionStepAgreed"
  | "preemptionAcknowledged"
  | "preemptionExiting"
>;

/** TensorFlow's message for a cluster with parameter servers. */
const PS_UNSUPPORTED = "PreemptionCheckpointHandler does not support usage with parameter server strategy.";

/** What the coordinator reads from and tells the handler it serves. */
interface CoordinatorHost {
  /** Where the handler's loop is: runs completed, and whether a step is running. */
  readonly position: () => { readonly runCounter: number; readonly inStep: boolean };
  /** Puts an agreement event on the handler's `events$`. */
  readonly emit: (e: AgreementEvent) => void;
}

/** What a handler is made of ({@link PreemptionCheckpointHandler.create} gathers it). */
interface HandlerParts {
  readonly checkpointManager: CheckpointManager | undefined;
  /** The handler made the manager (and closes it). */
  readonly ownsManager: boolean;
  readonly store: VariableStore | (() => VariableStore);
  readonly config: TerminationConfig;
  /** Makes the coordinator of the handler being made. */
  readonly coordinator: (host: CoordinatorHost) => PreemptionCoordinator;
  readonly clock: Clock;
  readonly logger: Logger;
  /** The handler's stream; its `logger` is `logger`. */
  readonly events: ComponentEvents<PreemptionEvent>;
  readonly globalStep: (() => number | undefined) | undefined;
  readonly eventLoop: EventLoopYield;
  readonly taskName: string | undefined;
  readonly resolver: PreemptionClusterResolver | undefined;
  readonly reportsErrors: boolean;
  readonly workerTemp: { readonly root: string; readonly directory: string } | undefined;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** Checkpoints at a step boundary on preemption, then exits. Create it with {@link create}. */
export class PreemptionCheckpointHandler {
  /**
   * Termination notices, preemption saves, grace-period overruns, the agreement's steps, and
   * the handler's lines (`log` events: of the handler, its coordinator and the manager it
   * opened). Its `logger` option prints the lines until a session adopts them
   * (`session.forwardEvents(handler)`), and again after that session closed.
   */
  readonly events$: Observable<PreemptionEvent>;
  /**
   * The manager checkpoints are restored through, and saved through (the chief; a handler
   * without a cluster). On a non-chief whose manager the handler made, it only reads the chief's
   * directory, without its lock: do not save through it; the handler's saves go to the task's
   * temporary directory. `undefined` for a handler created with neither a manager nor a
   * directory: its `saveFn` saves, and {@link save} is refused.
   */
  readonly checkpointManager: CheckpointManager | undefined;
  private readonly store: VariableStore | (() => VariableStore);
  private readonly config: TerminationConfig;
  private readonly coordinator: PreemptionCoordinator;
  private readonly clock: Clock;
  private readonly logger: Logger;
  private readonly globalStep: (() => number | undefined) | undefined;
  private readonly eventLoop: EventLoopYield;
  private readonly events: ComponentEvents<PreemptionEvent>;
  private runCounter = 0;
  private estimatedRunTimeMs = 0;
  private readonly state: ResumableState;
  private readonly signalListeners: [NodeJS.Signals, () => void][] = [];
  private pollTimer: TimerHandle | undefined;
  private platform: PlatformPoller | undefined;
  /** When this process got its notice (a peer's notice, multi-worker, leaves it unset). */
  private noticeTimeMs: number | undefined;
  private closed = false;
  private readonly ownsManager: boolean;
  /**
   * A non-chief's own directory (`workertemp_<id>/<basename>`), made at its first save and deleted
   * before it exits; its manager then is `checkpointManager` reads the chief's directory only.
   */
  private workerTemp: { readonly root: string; readonly directory: string; manager?: Promise<CheckpointManager> } | undefined;
  /** `chief:0`, `worker:1`; `undefined` in local mode. */
  private readonly taskName: string | undefined;
  /** A step is running (between `run`'s check and the step's end). */
  private inStep = false;
  /** The exit decision was carried out (a returning `exitFn` leaves the handler unusable). */
  private exited = false;
  private readonly resolver: PreemptionClusterResolver | undefined;
  /** See {@link PreemptionCheckpointHandlerOptions.reportErrors}. */
  private readonly reportsErrors: boolean;
  /** The task's notices this handler took over (see `PreemptionClusterResolver.takeOverNotices`). */
  private takenNotices: Subscription | undefined;
  /** The handler stopped acting on notices (it decided to exit, or closed). */
  private watchingStopped = false;

  /** Made whole from its parts ({@link create} gathers them); the coordinator is made from the handler it serves. */
  private constructor(parts: HandlerParts) {
    this.checkpointManager = parts.checkpointManager;
    this.ownsManager = parts.ownsManager;
    this.store = parts.store;
    this.config = parts.config;
    this.clock = parts.clock;
    this.logger = parts.logger;
    this.events = parts.events;
    this.globalStep = parts.globalStep;
    this.eventLoop = parts.eventLoop;
    this.taskName = parts.taskName;
    this.resolver = parts.resolver;
    this.reportsErrors = parts.reportsErrors;
    this.workerTemp = parts.workerTemp;
    this.events$ = parts.events.events$;
    this.coordinator = parts.coordinator({
      position: () => ({ runCounter: this.runCounter, inStep: this.inStep }),
      emit: (e) => this.emit({ ...e, time: this.clock.now() }),
    });
    this.state = new ResumableState().registerTensor(
      CHECKPOINTED_RUNS,
      { save: () => tensor("int64", [], BigInt64Array.of(BigInt(this.runCounter))), restore: (v) => this.restoreRuns(v) },
      // Checkpoints written without the handler (e.g. by a CheckpointSaverHook) restore as 0 runs.
      { optional: true },
    );
  }

  /**
   * Validates the options, restores the latest checkpoint (or calls `initFn`) with the run
   * counter, and starts watching for termination. Throws `ValueError` without a
   * `checkpointManager` or a `checkpointDir`, unless `terminationConfig.saveFn` saves and
   * `restoreOnCreate` is `false` (nothing to restore through).
   */
  static async create(options: PreemptionCheckpointHandlerOptions): Promise<PreemptionCheckpointHandler> {
    const savesItself = options.terminationConfig?.saveFn !== undefined && options.restoreOnCreate === false;
    if (options.checkpointManager === undefined && options.checkpointDir === undefined && !savesItself) {
      throw new ValueError(
        "PreemptionCheckpointHandler needs a checkpointManager or a checkpointDir (or, for a handler that only agrees on the run, a terminationConfig with a saveFn and restoreOnCreate: false)",
      );
    }
    if (options.store === undefined) throw new ValueError("PreemptionCheckpointHandler needs the store to save (e.g. session.variables)");
    if (options.agreement === "chiefSaves" && options.clusterResolver?.replicaStop !== undefined) {
      throw new ValueError('PreemptionCheckpointHandler: agreement "chiefSaves" is for tasks that share no step; a data-parallel group stops through its stop vote (leave agreement out)');
    }
    const clock = options.clock ?? systemClock;
    // Its lines (and its coordinator's and manager's) are `log` events on its own stream, which
    // `options.logger` prints until a session adopts them (`session.forwardEvents(handler)`).
    const events = new ComponentEvents<PreemptionEvent>(options.logger ?? defaultLogger, () => clock.now(), "preemption");
    if (options.observer !== undefined) events.events$.subscribe(options.observer);
    const logger = events.logger;
    if (options.checkpointManager !== undefined && options.checkpointDir !== undefined) {
      logger.warn(
        `PreemptionCheckpointHandler: checkpointDir ${options.checkpointDir} is ignored: checkpoints go through the given checkpointManager (${options.checkpointManager.directory}).`,
      );
    }
    const config = options.terminationConfig ?? new TerminationConfig();
    const cluster = clusterOf(options.clusterResolver);
    // The task watched its notices since it started: they are this handler's from now on (one
    // that came meanwhile included), and it installs no signal handlers of its own.
    const taken = options.signals === undefined && options.signalTarget === undefined ? options.clusterResolver?.takeOverNotices?.() : undefined;
    const directory = options.checkpointDir;
    // A non-chief never takes the chief's lock: it reads the chief's directory and writes its own temporary one.
    const tempRoot =
      cluster !== undefined && !cluster.isChief && options.checkpointManager === undefined && directory !== undefined ? join(dirname(directory), `workertemp_${cluster.id}`) : undefined;
    const manager =
      options.checkpointManager ??
      (directory === undefined
        ? undefined
        : // A non-chief reads the chief's directory: no lock, and no clean-up there (a leftover may be the chief's save under way).
          await openCheckpointDirectory({ directory, ...(tempRoot === undefined ? {} : { lock: false, removeLeftovers: false }), clock, logger }, "preemption"));
    const coordinatorFor = ({ position, emit }: CoordinatorHost): PreemptionCoordinator =>
      options.coordinator ??
      (cluster === undefined
        ? new LocalPreemptionCoordinator({ gracePeriodSecs: config.gracePeriodSecs, clock, logger })
        : new ClusterPreemptionCoordinator({
            store: cluster.store,
            id: cluster.id,
            workers: cluster.workers,
            isChief: cluster.isChief,
            gracePeriodSecs: config.gracePeriodSecs,
            isChiefLoss: cluster.resolver.isChiefLoss?.bind(cluster.resolver),
            chiefTask: cluster.resolver.chiefTaskName,
            livenessTimeoutMs: cluster.resolver.livenessTimeoutMs,
            replicaStop: cluster.resolver.replicaStop,
            chiefRecovery: cluster.resolver.chiefRecovery,
            agreement: options.agreement,
            position,
            clock,
            logger,
            emit,
          }));
    const h = new PreemptionCheckpointHandler({
      checkpointManager: manager,
      ownsManager: options.checkpointManager === undefined && manager !== undefined,
      store: options.store,
      config,
      coordinator: coordinatorFor,
      clock,
      logger,
      events,
      globalStep: options.globalStep,
      eventLoop: new EventLoopYield(clock, options.yieldIntervalMs),
      taskName: cluster?.workers[cluster.id],
      resolver: cluster?.resolver,
      reportsErrors: options.reportErrors !== false,
      workerTemp: tempRoot === undefined || directory === undefined ? undefined : { root: tempRoot, directory: join(tempRoot, basename(directory)) },
    });
    const { coordinator } = h;
    let path: string | null;
    try {
      path = options.restoreOnCreate === false || manager === undefined ? null : await manager.restoreOrInitialize(h.wrappedStore(), options.initFn);
      // Every task of a cluster restored before any trains (and the chief saves again); a
      // data-parallel rank counts the chief's runs (one returning to a group that trained on
      // without it restored an older checkpoint than the runs the others completed).
      // A returning rank of a group that re-forms passes the start barrier, where the group waits for it.
      if (cluster?.resolver.replicaStop?.follow !== undefined) await cluster.resolver.sessionsCreated?.();
      const groupRuns = await (coordinator as PreemptionCoordinator).restored?.();
      if (groupRuns !== undefined) h.countGroupRuns(groupRuns);
    } catch (e) {
      await coordinator.close();
      if (h.ownsManager) await manager?.close();
      throw e;
    }
    if (path !== null) logger.info(`PreemptionCheckpointHandler: restored ${path} ${h.at(h.runCounter)}.`, { path, run: h.runCounter });
    h.watch(taken === undefined ? (options.signals ?? ["SIGTERM"]) : [], options.signalTarget ?? process, taken);
    return h;
  }

  // -------------------------------------------------------------------------------------------
  // properties
  // -------------------------------------------------------------------------------------------

  /** Runs completed, counting those restored from the checkpoint (TensorFlow's `total_run_calls`). */
  get totalRunCalls(): number {
    return this.runCounter;
  }

  /** `true` once a termination notice was received. */
  get terminationReceived(): boolean {
    return this.coordinator.terminationReceived;
  }

  /**
   * In a cluster: the task whose termination notice this task heard of without a notice of its
   * own (the one `preemptionClaimHeard` names), also when it was heard before this handler's
   * events had a subscriber; `undefined` otherwise.
   */
  get claimHeardFrom(): string | undefined {
    return this.coordinator.claimHeardFrom;
  }

  // -------------------------------------------------------------------------------------------
  // operations
  // -------------------------------------------------------------------------------------------

  /**
   * Runs one step: first saves (and maybe exits) if a preemption agreed on this run, then calls
   * `fn(...args)` and counts the run. Errors of `fn` are rethrown (and reported to peers by a
   * multi-worker coordinator).
   */
  async run<A extends unknown[], R>(fn: (...args: A) => R | Promise<R>, ...args: A): Promise<Awaited<R>> {
    this.assertOpen();
    const check = this.checkPreemptionAndMaybeCheckpoint(undefined);
    if (check !== undefined) await check;
    const start = this.clock.now();
    let result: Awaited<R>;
    this.inStep = true;
    try {
      result = await fn(...args);
    } catch (e) {
      this.inStep = false;
      // Another task's reported error, which ended this step too (a collective failed for it): raise that one, as every other task does.
      // In a cluster only: a local handler (`run`'s) sees its step's own error.
      // A data-parallel group that lost a rank while it stopped for a preemption: the last
      // completed run is saved (the chief), or the chief is lost (43); see afterStepFailure.
      const decision = this.coordinator.afterStepFailure?.(e, this.runCounter);
      if (decision !== undefined) {
        await this.act(decision, undefined);
        throw e;
      }
      // A step's own error (a NaN loss, a bug) stands, even when another task reported one meanwhile.
      const reported = this.resolver === undefined ? undefined : (reportedCause(e) ?? (clusterFailureOf(e) === undefined ? undefined : this.coordinator.pendingFailure));
      if (reported !== undefined && reported !== e) return await this.raise(reported);
      await this.report(e);
      throw e;
    }
    this.inStep = false;
    this.runCounter += 1;
    this.estimatedRunTimeMs += (this.clock.now() - start - this.estimatedRunTimeMs) / this.runCounter;
    // A synchronous step gave signals and timers no turn: give them one before the next check.
    if (this.eventLoop.due()) await this.eventLoop.take();
    return result;
  }

  /**
   * For loops that do not wrap steps in {@link run}: call once per step. Saves (and maybe
   * exits) if a preemption agreed on this run, passing `options` to the save, then counts one run.
   */
  async saveCheckpointIfPreempted(options?: CheckpointSaveOptions): Promise<void> {
    this.assertOpen();
    const check = this.checkPreemptionAndMaybeCheckpoint(options);
    if (check !== undefined) await check;
    this.runCounter += 1;
    this.estimatedRunTimeMs = 0;
  }

  /**
   * TensorFlow's `watch_preemption_scope` context manager as a callback wrapper: runs `fn`, and
   * reports an error it throws to the peers (a multi-worker coordinator's `reportError`) before
   * rethrowing it. It watches nothing by itself: locally it only runs `fn`. TensorFlow's TPU
   * form, which turns a preemption error into a save, has no counterpart (no TPU support).
   */
  async watchPreemptionScope<T>(fn: () => T | Promise<T>): Promise<Awaited<T>> {
    try {
      return await fn();
    } catch (e) {
      await this.report(e);
      throw e;
    }
  }

  /**
   * Saves a checkpoint now, with the run counter (`checkpointed_runs`), through the handler's
   * manager: e.g. the final checkpoint after the last step. On a non-chief whose manager the
   * handler made it goes to its temporary directory, as TensorFlow's worker writes do (only the
   * chief's checkpoint is kept). Resolves with the path, or `null` when the manager skipped it.
   */
  async save(options?: CheckpointSaveOptions): Promise<string | null> {
    this.assertOpen();
    return (await this.writeManager()).save(this.wrappedStore(), options);
  }

  /**
   * A termination notice from elsewhere (a `TerminationNotices` stream, a platform's maintenance
   * event): the same as a watched signal. The checkpoint is saved at the next step boundary.
   * `deadlineMs` (the clock's epoch ms) is when the process is killed, if known: it bounds the
   * grace period.
   */
  noticeTermination(source: string, options: { readonly deadlineMs?: number | undefined } = {}): void {
    this.assertOpen();
    this.notice(source, options.deadlineMs);
  }

  /**
   * Stops watching: removes the signal handlers, stops the watcher's polling, closes the
   * coordinator, and closes the manager if the handler made it. Idempotent.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.stopWatching();
    try {
      await this.coordinator.close();
    } finally {
      try {
        if (this.ownsManager) await this.checkpointManager?.close();
      } finally {
        // A worker's temporary directory goes even when its manager's close failed.
        try {
          await this.removeWorkerTemp();
        } finally {
          // Last: what closing had to say (the manager's lock, the temporary directory) is on events$ too.
          this.events.complete();
        }
      }
    }
  }

  /** `close()`, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  // -------------------------------------------------------------------------------------------
  // internals
  // -------------------------------------------------------------------------------------------

  /** `undefined` (no promise, no microtask) when there is nothing to do. */
  private checkPreemptionAndMaybeCheckpoint(options: CheckpointSaveOptions | undefined): Promise<void> | undefined {
    if (this.exited) {
      throw new RuntimeError("PreemptionCheckpointHandler: the process was to exit after the preemption checkpoint, but exitFn returned; create a new handler to train on.");
    }
    const failure = this.coordinator.pendingFailure;
    if (failure !== undefined) return this.raise(failure);
    const d = this.coordinator.beforeStep(this.runCounter, this.estimatedRunTimeMs);
    if (isPromise(d)) return d.then((x) => this.act(x, options));
    return d.save || d.exitWithoutSave !== undefined ? this.act(d, options) : undefined;
  }

  private async act(d: PreemptionDecision, options: CheckpointSaveOptions | undefined): Promise<void> {
    if (!d.save) {
      if (d.exitWithoutSave === undefined) return;
      const { code, reason } = d.exitWithoutSave;
      // The preemption code without a save: a task whose chief saves for it (not a failure).
      const preempted = code === PREEMPTION_EXIT_CODE;
      if (preempted) this.logger.info(`PreemptionCheckpointHandler: ${reason}.`);
      else this.logger.error(`PreemptionCheckpointHandler: ${reason}.`);
      this.emit({ type: "preemptionExiting", time: this.clock.now(), code, saved: false, reason });
      this.stopWatching();
      // Its acknowledgement is stored before the process goes (the chief waits for it).
      if (preempted) await this.coordinator.beforeExit?.().catch(() => undefined);
      await this.removeWorkerTemp();
      this.exited = true;
      await this.config.exitFn(code);
      return;
    }
    const run = this.runCounter;
    const started = this.clock.now();
    const path = await this.saveWithinDeadline(run, d.deadlineMs, options);
    this.coordinator.saved?.(this.clock.now() - started);
    const where = this.workerTemp === undefined ? (path === null ? "" : ` (${path})`) : ` in this worker's temporary directory (only the chief's checkpoint is kept)`;
    const what = this.checkpointManager === undefined ? "saveFn ran" : `checkpoint ${path === null && this.config.saveFn === undefined ? "not written (the manager skipped it)" : "saved"}`;
    this.logger.info(`PreemptionCheckpointHandler: ${what} ${this.at(run)}${where}.${d.exit ? " Exiting." : ""}`, {
      run,
      path,
    });
    this.emit({ type: "preemptionCheckpointSaved", time: this.clock.now(), run, globalStep: this.readGlobalStep(), path, exit: d.exit });
    if (d.exit) {
      this.stopWatching();
      // The save is durable: a platform waiting for it (Azure) may go on now.
      await this.platform?.acknowledge();
      // Every task, the chief or not: its acknowledgement of the agreed run is stored before the
      // process goes (the chief also waits for the others'). Nothing there keeps it from exiting.
      await this.coordinator.beforeExit?.().catch((e: unknown) =>
        this.logger.warn(`PreemptionCheckpointHandler: the wait before the exit failed (${e instanceof Error ? e.message : String(e)}); exiting all the same.`),
      );
      await this.removeWorkerTemp();
      // The directory's lock goes with the process, not after it: the restart takes it cleanly.
      if (this.ownsManager) await this.checkpointManager?.close();
      this.exited = true;
      this.emit({ type: "preemptionExiting", time: this.clock.now(), code: PREEMPTION_EXIT_CODE, saved: true, reason: `preemption checkpoint ${this.at(run)}` });
      await this.config.exitFn(PREEMPTION_EXIT_CODE);
    }
  }

  /** Reports an `OpError` of a step to the other tasks (TensorFlow reports only those); a failed report is logged by the coordinator. */
  private async report(e: unknown): Promise<void> {
    if (!(e instanceof OpError) || !this.reportsErrors) return;
    await this.coordinator.reportError?.(e);
    await this.untilErrorHeard();
  }

  /** Raises the cluster's failure (another task's reported error), once the others heard it too. */
  private async raise(failure: Error): Promise<never> {
    await this.untilErrorHeard();
    throw failure;
  }

  private async untilErrorHeard(): Promise<void> {
    try {
      await this.resolver?.untilErrorHeard?.();
    } catch {
      // Best effort: the error is raised either way.
    }
  }

  /** Where saves go: the manager, or a non-chief's own temporary directory's (made at its first save). */
  private writeManager(): Promise<CheckpointManager> {
    const temp = this.workerTemp;
    if (temp === undefined) {
      const manager = this.checkpointManager;
      if (manager === undefined) {
        return Promise.reject(new ValueError("PreemptionCheckpointHandler: this handler has no checkpoint manager (it was created without one; its terminationConfig's saveFn saves)"));
      }
      return Promise.resolve(manager);
    }
    // Written on this thread: the directory is made at the first save, which is most often the
    // only one before the process exits, and a writer thread started for it would cost its start
    // (25 ms and more) and its join at exit for nothing.
    temp.manager ??= openCheckpointDirectory({ directory: temp.directory, clock: this.clock, logger: this.logger, fileCommitter: null }, "preemption");
    return temp.manager;
  }

  /** Deletes a non-chief's `workertemp_<id>` directory (its manager closed first), as TensorFlow does before the exit. */
  private async removeWorkerTemp(): Promise<void> {
    const temp = this.workerTemp;
    if (temp?.manager === undefined) return;
    this.workerTemp = { root: temp.root, directory: temp.directory };
    await (await temp.manager.catch(() => undefined))?.close().catch(() => undefined);
    await rm(temp.root, { recursive: true, force: true }).catch((e: unknown) =>
      this.logger.warn(`PreemptionCheckpointHandler: could not delete ${temp.root}: ${e instanceof Error ? e.message : String(e)}`),
    );
  }

  private async saveWithinDeadline(run: number, deadlineMs: number | undefined, options: CheckpointSaveOptions | undefined): Promise<string | null> {
    let timer: TimerHandle | undefined;
    if (deadlineMs !== undefined) {
      timer = this.clock.setTimer(deadlineMs - this.clock.now(), () => {
        const message = `PreemptionCheckpointHandler: the preemption checkpoint ${this.at(run)} has not finished within the grace period of ${this.noticeTimeMs === undefined ? this.config.gracePeriodSecs : (deadlineMs - this.noticeTimeMs) / 1000} s; if the process is killed now, a restart resumes from the previous checkpoint.`;
        this.logger.error(message, { run });
        this.emit({ type: "gracePeriodExceeded", time: this.clock.now(), run, message });
      });
    }
    try {
      if (this.config.saveFn !== undefined) {
        await this.config.saveFn(options);
        return null;
      }
      return await (await this.writeManager()).save(this.wrappedStore(), options);
    } catch (e) {
      this.logger.error(`PreemptionCheckpointHandler: saving the preemption checkpoint ${this.at(run)} failed: ${e instanceof Error ? e.message : String(e)}`, { run });
      throw e;
    } finally {
      timer?.cancel();
    }
  }

  private wrappedStore(): VariableStore {
    return this.state.wrap(typeof this.store === "function" ? this.store() : this.store);
  }

  private restoreRuns(v: TensorValue): void {
    if (v.dtype !== "int64" || v.shape.length !== 0) {
      throw new InvalidArgumentError(`${CHECKPOINTED_RUNS}: expected an int64 scalar, got ${v.dtype}[${v.shape.join(", ")}]`);
    }
    const n = Number((v.data as BigInt64Array)[0]);
    if (!Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError(`${CHECKPOINTED_RUNS}: expected a non-negative count, got ${n}`);
    this.runCounter = n;
  }

  /** A data-parallel rank counts the group's runs (the chief's), which may differ from its own restore's. */
  private countGroupRuns(groupRuns: number): void {
    if (groupRuns === this.runCounter) return;
    this.logger.info(
      `PreemptionCheckpointHandler: ${this.taskName ?? "this task"} counts the replica group's runs: ${groupRuns} (the chief's), not ${this.runCounter} (its own restore), since the ranks step together.`,
    );
    this.runCounter = groupRuns;
  }

  /**
   * Starts acting on notices: `signals` on `target`, the platform's poller, the watcher function,
   * and the notices taken over from the task (`taken`), if any.
   */
  private watch(signals: readonly NodeJS.Signals[], target: SignalTarget, taken: Observable<TakenNotice> | undefined): void {
    this.takenNotices = taken?.subscribe((n) => {
      if (!this.closed && !this.watchingStopped) this.notice(n.description ?? n.source, n.deadline);
    });
    const platform = this.config.platform;
    if (platform !== undefined) {
      this.platform = PlatformPoller.start(platform, (n) => this.notice(`${n.platform}: ${n.detail}`, n.deadlineMs), {
        pollSecs: this.config.watcherPollSecs,
        clock: this.clock,
        logger: this.logger,
      });
    }
    const watcher = this.config.terminationWatcherFn;
    if (watcher === undefined) {
      for (const signal of signals) {
        // Only a flag: the save happens at the next step boundary. A pod's grace period is the deadline.
        const graceSecs = signal === "SIGTERM" ? platform?.signalGraceSecs : undefined;
        const listener = (): void => this.notice(signal, graceSecs === undefined ? undefined : this.clock.now() + graceSecs * 1000);
        target.on(signal, listener);
        this.signalListeners.push([signal, listener]);
      }
      this.removeSignals = () => {
        for (const [s, l] of this.signalListeners.splice(0)) target.off(s, l);
      };
      return;
    }
    const pollMs = this.config.watcherPollSecs * 1000;
    const tick = (): void => {
      this.pollTimer = undefined;
      if (this.closed || this.coordinator.terminationReceived) return;
      Promise.resolve()
        .then(watcher)
        .then(
          (terminating) => {
            if (terminating) this.notice("terminationWatcherFn");
          },
          (e: unknown) =>
            this.logger.warn(`PreemptionCheckpointHandler: terminationWatcherFn failed (polling goes on): ${e instanceof Error ? e.message : String(e)}`),
        )
        .finally(() => {
          if (!this.closed && !this.coordinator.terminationReceived) this.pollTimer = this.clock.setTimer(pollMs, tick);
        });
    };
    this.pollTimer = this.clock.setTimer(pollMs, tick);
  }

  private removeSignals: () => void = () => undefined;

  /** "at global step N" when the global step can be read, else "at run N" (for log messages). */
  private at(run: number): string {
    const step = this.readGlobalStep();
    return step === undefined ? `at run ${run}` : `at global step ${step}`;
  }

  /** The global step if it can be read; a message or event must not fail for it. */
  private readGlobalStep(): number | undefined {
    try {
      return this.globalStep?.();
    } catch {
      return undefined;
    }
  }

  private notice(source: string, deadlineMs?: number): void {
    if (this.coordinator.ignoresNotices ?? this.coordinator.terminationReceived) return;
    const time = this.clock.now();
    this.noticeTimeMs = time;
    this.coordinator.notifyTermination(time, deadlineMs, source);
    this.logger.info(
      `PreemptionCheckpointHandler: termination notice (${source}) ${this.at(this.runCounter)}${this.taskName === undefined ? "; a checkpoint is saved at the next step boundary" : ` on ${this.taskName}; ${this.coordinator.onNotice ?? "the tasks agree on the run to save at"}`}.`,
    );
    this.emit({ type: "terminationNoticed", time, source });
  }

  private stopWatching(): void {
    this.watchingStopped = true;
    // The task's notices stay taken until the handler closes: after an exit decision a notice
    // is this handler's still (it ignores it), not one the task tells the others of.
    if (this.closed) this.takenNotices?.unsubscribe();
    this.removeSignals();
    this.pollTimer?.cancel();
    this.pollTimer = undefined;
    this.platform?.close();
  }

  /**
   * The caller prints the handler's lines from now on (a session that forwards its
   * `events$`: `session.forwardEvents(handler)` calls this); the function returned hands them
   * back to the handler's `logger` option.
   */
  adopt(): () => void {
    return this.events.adopt();
  }

  private assertOpen(): void {
    if (this.closed) throw new RuntimeError("PreemptionCheckpointHandler is closed.");
  }

  private emit(e: PreemptionEvent): void {
    this.events.emit(e);
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const isPromise = <T>(x: T | Promise<T>): x is Promise<T> => typeof (x as { then?: unknown })?.then === "function";

/** The error another task reported to the cluster that `e` carries in its chain of causes, if any (its failure says so). */
const reportedCause = (e: unknown): OpError | undefined => {
  const c = clusterFailureErrorOf(e);
  return c?.failure?.kind === "reported" ? c : undefined;
};

/** What the cluster coordinator needs of a resolver; `undefined` for local mode. @throws for a `ps` job or a resolver that has not joined. */
const clusterOf = (
  resolver: PreemptionClusterResolver | undefined,
): { resolver: PreemptionClusterResolver; store: NonNullable<PreemptionClusterResolver["coordination"]>; id: number; workers: string[]; isChief: boolean } | undefined => {
  if (resolver === undefined) return undefined;
  const jobs = resolver.clusterSpec.jobs;
  if (jobs.includes("ps")) throw new UnimplementedError(PS_UNSUPPORTED);
  if (jobs.length === 0) return undefined;
  const store = resolver.coordination;
  if (store === undefined || resolver.idInCluster === undefined) {
    throw new ValueError(
      resolver.idInCluster === undefined
        ? `PreemptionCheckpointHandler: task ${resolver.taskType}:${resolver.taskIndex} does not train (only chief and worker tasks do); create the handler on the training tasks only`
        : "PreemptionCheckpointHandler: the clusterResolver has not joined the coordination service; start the task with `const task = await startTask()` from monitored-session/runtime and pass `clusterResolver: task`",
    );
  }
  const workers = [...(jobs.includes("chief") ? ["chief:0"] : []), ...Array.from({ length: resolver.numWorkers - (jobs.includes("chief") ? 1 : 0) }, (_, i) => `worker:${i}`)];
  return { resolver, store, id: resolver.idInCluster, workers, isChief: resolver.isChief };
};
