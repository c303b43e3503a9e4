/**
 * `Supervisor` (TensorFlow's deprecated `tf.compat.v1.train.Supervisor`): prepares or waits
 * for a session, runs the standard services (summaries, step rate, timed checkpoints) as
 * coordinated loops, and stops them together. Kept for programs ported from TF1; new code
 * should prefer `monitoredTrainingSession` or a declarative configuration.
 *
 * "Use the default" and "disable" are distinct, as in TensorFlow: leave an option out (or pass
 * {@link USE_DEFAULT}) for the default, pass `null` to disable that piece.
 *
 * The services are daemons, as TensorFlow's `LooperThread`s: their timers do not keep Node alive
 * once the program's own work is done. Differences from TensorFlow are listed in
 * docs/migrating-from-tensorflow.md (no default graph, no graph.pbtxt or meta graph written).
 *
 * @example
 * ```ts
 * // @prelude docs/preludes/session.ts
 * import { Supervisor } from "monitored-session/compat/v1";
 *
 * const sv = new Supervisor({ graph, logdir: "/tmp/train" });
 * await sv.managedSession(async (sess) => {
 *   while (!sv.shouldStop()) await sess.run("train");
 * });
 * ```
 *
 * @module
 */

import { join } from "node:path";
import type { Observable } from "rxjs";
import { systemClock, type Clock } from "../../time/Clock.js";
import type { CheckpointManager } from "../../checkpoint/CheckpointManager.js";
import { CheckpointDefaults, openCheckpointDirectory } from "../../checkpoint/checkpointDirectory.js";
import { BundleSaver, type Saver } from "../../checkpoint/Saver.js";
import { Coordinator, type CoordinatedTask } from "../../coordinator/Coordinator.js";
import { EventLoopYield, fairSession } from "../../pipeline/EventLoopYield.js";
import { isPromiseLike } from "../../util/promise.js";
import { RuntimeError, ValueError } from "../../errors.js";
import { USE_DEFAULT, type Defaultable } from "../../util/useDefault.js";
import type { Graph } from "../../session/Graph.js";
import { defaultLogger, type Logger } from "../../Logger.js";
import { Looper } from "../../coordinator/Looper.js";
import { defaultInitOp, defaultLocalInitOp, defaultReadyOp, runScaffoldOp, type ScaffoldOp } from "../../creation/Scaffold.js";
import type { Fetches, Feeds, RunMetadata, RunOptions, Session } from "../../session/Session.js";
import { SessionManager, type SessionFactory } from "../../creation/SessionManager.js";
import { SessionRunArgs, SessionRunContext, type SessionRunHook } from "../../hook/SessionRunHook.js";
import { ComponentEvents, type EventSource } from "../../events/componentEvents.js";
import type { SessionEventOf } from "../../events/SessionEvent.js";
import { defaultSessionTargets, fromTask, type SessionTargetRegistry, type SessionTask } from "../../pipeline/SessionTarget.js";
import { fileWriterCache } from "../../summary/FileWriterCache.js";
import type { Summary, SummaryValue } from "../../summary/EventProto.js";
import { toSummaryValues } from "../../summary/summaryOps.js";
import { decodeSummary } from "../../summary/decodeSummary.js";
import type { SummaryWriter } from "../../summary/SummaryWriter.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------


/**
 * Summary values ready for the writer (what {@link Supervisor.summaryComputed} takes), or a
 * serialized `Summary` protocol buffer (what TensorFlow's summary ops return).
 */
export type SummaryResult = Summary | readonly SummaryValue[] | Uint8Array;

/**
 * An input-pipeline task (TensorFlow's `QueueRunner`): {@link Supervisor.startQueueRunners}
 * starts `run` with the session and the coordinator's stop signal, as a coordinated task.
 */
export interface QueueRunner {
  readonly name: string;
  run(session: Session, signal: AbortSignal): unknown;
}

/** Options of {@link Supervisor}. */
export interface SupervisorOptions {
  /** The graph sessions are made from (or give `sessionFactory`). */
  readonly graph?: Graph;
  /** Makes a new raw session (default: `graph.session()`). */
  readonly sessionFactory?: SessionFactory;
  /**
   * This process's task of a cluster, as `startTask()` from `monitored-session/runtime` returns
   * it: the preferred way to supervise a task of a cluster. It sets `isChief` here and `master`
   * and `sessionTargets` of {@link Supervisor.prepareOrWaitForSession} and
   * {@link Supervisor.managedSession} (giving one of them too, with another value, is a
   * `ValueError`). Once a session is prepared (or waited for), the task's hooks get
   * `afterCreateSession`, then the cluster's start barrier is passed (`task.sessionsCreated()`,
   * once: do not call it yourself), then the chief's services start; each run of the session
   * first calls the hooks' `beforeRun` (their fetches are not run: the Supervisor runs no hooks,
   * as TensorFlow's). So a worker whose chief is lost gets `UnavailableError` from its next run;
   * its next `managedSession` waits for the restarted chief and starts from its values.
   *
   * @example
   * ```ts
   * // @prelude docs/preludes/session.ts
   * import { UnavailableError } from "monitored-session";
   * import { Supervisor } from "monitored-session/compat/v1";
   * import { startTask } from "monitored-session/runtime";
   *
   * const task = await startTask(); // TF_CONFIG from the environment
   * const sv = new Supervisor({ task, graph, logdir: "/runs/exp1" });
   * for (;;) {
   *   try {
   *     await sv.managedSession(async (s) => {
   *       while (!sv.shouldStop() && Number(await s.run("global_step")) < 10_000) await s.run("train");
   *     });
   *     break;
   *   } catch (e) {
   *     if (!(e instanceof UnavailableError)) throw e; // the chief was lost: wait for it again
   *   }
   * }
   * await task.close();
   * ```
   */
  readonly task?: SessionTask;
  /** Whether this process is the chief (default `true`; with a `task`, the task's). Only the chief initializes and saves. */
  readonly isChief?: boolean;
  /** Where checkpoints and summaries go (chief only). */
  readonly logdir?: string | null;
  readonly readyOp?: Defaultable<ScaffoldOp>;
  readonly readyForLocalInitOp?: Defaultable<ScaffoldOp>;
  readonly initOp?: Defaultable<ScaffoldOp>;
  readonly initFeedDict?: Feeds | null;
  readonly localInitOp?: Defaultable<ScaffoldOp>;
  /** Run options for `localInitOp` (TensorFlow's `local_init_run_options`; named ops only). */
  readonly localInitRunOptions?: RunOptions | null;
  /** Called with the session after `initOp` when nothing was restored. */
  readonly initFn?: ((session: Session) => unknown) | null;
  /**
   * An op whose result is written by the summary service, as `SummarySaverHook` writes it
   * (numbers as scalars under the op's name, records by key, `summaries.*` markers, summary
   * values). Default: all the graph's summary ops (`graph.op(name, fn, { summary: true })`),
   * TensorFlow's `merge_all()`; `null` disables the summary service.
   */
  readonly summaryOp?: Defaultable<ScaffoldOp>;
  readonly saver?: Defaultable<Saver>;
  /** The global step variable's name (default: the graph's global step). */
  readonly globalStep?: Defaultable<string>;
  readonly summaryWriter?: Defaultable<SummaryWriter>;
  /** Interval of the summary and step-rate services (default 120; `null` or 0 disables). */
  readonly saveSummariesSecs?: number | null;
  /** Interval of the checkpoint service (default 600; `null` or 0 disables). */
  readonly saveModelSecs?: number | null;
  /** How often a worker polls for the chief's session (default 30). */
  readonly recoveryWaitSecs?: number;
  /** Grace period for services to stop (default 120). */
  readonly stopGraceSecs?: number;
  /** Checkpoint file name prefix (default `model.ckpt`). */
  readonly checkpointBasename?: string;
  readonly sessionManager?: SessionManager | null;
  /**
   * The checkpoint directory's manager (`logdir`'s), shared with other writers of this process;
   * the caller owns it. Without it, a chief that saves checkpoints makes one in
   * {@link Supervisor.prepareOrWaitForSession}, before restoring (taking the directory's lock),
   * and {@link Supervisor.stop} closes it.
   */
  readonly checkpointManager?: CheckpointManager;
  readonly clock?: Clock;
  readonly logger?: Logger;
  /**
   * Longest stretch of training, in milliseconds, before a run of a managed session gives the
   * event loop a turn, so that the services' timers fire during a synchronous training loop
   * (default 5; see `MonitoredSessionOptions.yieldIntervalMs`).
   */
  readonly yieldIntervalMs?: number;
}

/**
 * What the Supervisor says: a checkpoint saved or summaries written by its standard services, and
 * every line it and its parts (its Coordinator, SessionManager, services) write, as a `log` event
 * (`source: "supervisor"`).
 */
export type SupervisorEvent = SessionEventOf<"checkpointSaved" | "summaryWritten" | "log">;

/** Options of {@link Supervisor.prepareOrWaitForSession}. */
export interface PrepareOrWaitOptions {
  /**
   * The session target (TensorFlow's `master`), resolved through `sessionTargets`. A worker
   * whose target is another process's (`grpc://`) waits for the chief's model and starts from
   * its values. Default `""`, in-process; with the Supervisor's `task` (preferred), the task's.
   */
  readonly master?: string;
  /** Resolves `master` (default `defaultSessionTargets`, in-process only; with the Supervisor's `task`, the task's). */
  readonly sessionTargets?: SessionTargetRegistry;
  readonly waitForCheckpoint?: boolean;
  readonly maxWaitSecs?: number;
  readonly startStandardServices?: boolean;
}

/** Options of {@link Supervisor.managedSession}. */
export interface ManagedSessionOptions extends PrepareOrWaitOptions {
  readonly closeSummaryWriter?: boolean;
}

/** Options of {@link Supervisor.stop}. */
export interface StopOptions {
  readonly threads?: Iterable<CoordinatedTask>;
  readonly closeSummaryWriter?: boolean;
  readonly ignoreLiveThreads?: boolean;
}

/** A managed session for `await using`: disposing it stops the services and closes the session. */
export interface ManagedSession extends AsyncDisposable {
  readonly session: Session;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** Prepares sessions and runs the standard training services. */
export class Supervisor implements EventSource {
  /** The coordinator; its clean-stop types are the default (`OutOfRangeError`). */
  readonly coord: Coordinator;
  readonly isChief: boolean;
  readonly sessionManager: SessionManager;
  readonly initOp: ScaffoldOp | undefined;
  readonly initFeedDict: Feeds | undefined;
  readonly initFn: ((session: Session) => unknown) | undefined;
  readonly readyOp: ScaffoldOp | undefined;
  readonly readyForLocalInitOp: ScaffoldOp | undefined;
  readonly localInitOp: ScaffoldOp | undefined;
  readonly summaryOp: ScaffoldOp | undefined;
  /** How the summary op's result is tagged: its name, the default's op names, or `null` for a function. */
  private readonly summaryFetches: Fetches | null;
  readonly saver: Saver | undefined;
  readonly globalStep: string | undefined;
  readonly saveSummariesSecs: number | undefined;
  readonly saveModelSecs: number | undefined;
  readonly logdir: string | undefined;
  /** `<logdir>/<checkpointBasename>` on the chief. */
  readonly savePath: string | undefined;
  readonly stopGraceSecs: number;
  private writer: SummaryWriter | undefined;
  /** `true` when the writer is the default one from the cache (reopened after `stop`). */
  private readonly defaultWriter: boolean;
  private readonly checkpointBasename: string;
  private readonly clock: Clock;
  /** Gives the event loop turns between the runs of managed sessions. */
  private readonly eventLoop: EventLoopYield;
  private readonly logger: Logger;
  private manager: CheckpointManager | undefined;
  private readonly sharedManager: CheckpointManager | undefined;
  /** The task of a cluster this Supervisor supervises, if given. */
  private readonly task: SessionTask | undefined;
  /** Whether the task's start barrier was passed (once per Supervisor). */
  private startBarrierPassed = false;
  private readonly events: ComponentEvents<SupervisorEvent>;
  /**
   * Checkpoints saved and summaries written by the standard services, and the Supervisor's lines
   * (`log` events): printed by its `logger` until a session adopts them
   * (`session.forwardEvents(sv)`).
   */
  readonly events$: Observable<SupervisorEvent>;

  constructor(options: SupervisorOptions = {}) {
    const graph = options.graph;
    const factory = options.sessionFactory ?? (graph === undefined ? undefined : () => graph.session());
    if (factory === undefined && options.sessionManager == null) {
      throw new ValueError("Supervisor needs a graph, a sessionFactory or a sessionManager to make sessions");
    }
    this.clock = options.clock ?? systemClock;
    this.eventLoop = new EventLoopYield(this.clock, options.yieldIntervalMs);
    // Every line of the Supervisor and its parts is one of its events.
    this.events = new ComponentEvents<SupervisorEvent>(options.logger ?? defaultLogger, () => this.clock.now(), "supervisor");
    this.events$ = this.events.events$;
    this.logger = this.events.logger;
    this.task = options.task;
    this.isChief = fromTask(options.task, "isChief", options.isChief) ?? true;
    this.coord = new Coordinator({ clock: this.clock, logger: this.logger });
    this.readyOp = resolve(options.readyOp, defaultReadyOp);
    this.readyForLocalInitOp = resolve(options.readyForLocalInitOp, undefined);
    this.initOp = resolve(options.initOp, defaultInitOp);
    this.initFeedDict = options.initFeedDict ?? undefined;
    this.initFn = options.initFn ?? undefined;
    this.localInitOp = resolve(options.localInitOp, defaultLocalInitOp);
    const summaryNames = graph?.summaryOpNames() ?? [];
    const useDefaultSummaries = options.summaryOp === undefined || options.summaryOp === USE_DEFAULT;
    this.summaryOp = resolve(options.summaryOp, summaryNames.length === 0 ? undefined : (sess: Session) => sess.run([...summaryNames]));
    this.summaryFetches = useDefaultSummaries ? [...summaryNames] : typeof this.summaryOp === "string" ? this.summaryOp : null;
    const hasGlobals = graph === undefined || graph.variables().some((v) => v.collection === "global");
    this.saver = resolve(options.saver, hasGlobals ? new BundleSaver({ clock: this.clock }) : undefined);
    this.globalStep = resolve(options.globalStep, graph?.globalStepVariable?.name);
    this.checkpointBasename = options.checkpointBasename ?? CheckpointDefaults.saver.checkpointName;
    this.sharedManager = options.checkpointManager;
    this.manager = options.checkpointManager;
    this.stopGraceSecs = nonNegative("stopGraceSecs", options.stopGraceSecs ?? 120);
    if (this.isChief) {
      this.logdir = options.logdir ?? undefined;
      // Absent means the default; `null` (TensorFlow's `None`) disables, as 0 does.
      this.saveSummariesSecs = enabled(nonNegative("saveSummariesSecs", orDefault(options.saveSummariesSecs, 120)));
      this.saveModelSecs = enabled(nonNegative("saveModelSecs", orDefault(options.saveModelSecs, 600)));
      this.savePath = this.logdir === undefined ? undefined : join(this.logdir, this.checkpointBasename);
      const w = options.summaryWriter;
      this.defaultWriter = w === undefined || w === USE_DEFAULT;
      this.writer =
        w === undefined || w === USE_DEFAULT
          ? this.logdir === undefined
            ? undefined
            : fileWriterCache.getWriter(this.logdir, { clock: this.clock, logger: this.logger })
          : (w ?? undefined);
    } else {
      this.logdir = undefined;
      this.saveSummariesSecs = undefined;
      this.saveModelSecs = undefined;
      this.savePath = undefined;
      this.defaultWriter = false;
    }
    this.sessionManager =
      options.sessionManager ??
      new SessionManager({
        localInitOp: this.localInitOp,
        readyOp: this.readyOp,
        readyForLocalInitOp: this.readyForLocalInitOp,
        localInitRunOptions: options.localInitRunOptions ?? undefined,
        sessionFactory: factory,
        graph,
        recoveryWaitSecs: options.recoveryWaitSecs ?? 30,
        clock: this.clock,
        logger: this.logger,
      });
    graph?.finalize();
  }

  /** A session prints the Supervisor's lines from now on (`session.forwardEvents(sv)` calls it); call the result to hand them back. */
  adopt(): () => void {
    return this.events.adopt();
  }

  /** The summary writer (chief only), if any. */
  get summaryWriter(): SummaryWriter | undefined {
    return this.writer;
  }

  /**
   * The chief prepares a session (restoring the latest checkpoint in `logdir`, else running
   * the init op) and starts the standard services; a worker waits for the chief's session.
   * With a `task`, the session passes the cluster's start barrier first (see
   * {@link SupervisorOptions.task}).
   */
  async prepareOrWaitForSession(options: PrepareOrWaitOptions = {}): Promise<Session> {
    const task = this.task;
    const sessionTargets = fromTask(task, "sessionTargets", options.sessionTargets) ?? defaultSessionTargets;
    const target = sessionTargets.resolve(fromTask(task, "master", options.master) ?? "");
    this.coord.clearStop();
    if (this.defaultWriter && this.writer?.closed === true && this.logdir !== undefined) {
      this.writer = fileWriterCache.getWriter(this.logdir, { clock: this.clock, logger: this.logger });
    }
    if (this.isChief) {
      // A chief that saves takes the directory (its lock) before it restores anything.
      const manager = this.saveModelSecs === undefined ? this.sharedManager : await this.checkpointManager();
      let sess: Session;
      try {
        sess = await this.sessionManager.prepareSession({
          saver: this.saver,
          checkpointManager: manager,
          checkpointDir: this.logdir,
          waitForCheckpoint: options.waitForCheckpoint ?? false,
          maxWaitSecs: options.maxWaitSecs ?? 7200,
          initOp: this.initOp,
          initFeedDict: this.initFeedDict,
          initFn: this.initFn,
        });
      } catch (e) {
        await this.closeOwnManager();
        throw e;
      }
      try {
        // A grpc:// chief publishes its model (no hooks run here: snapshots are taken when asked).
        for (const h of target.chiefHooks ?? []) await h.afterCreateSession?.(sess, this.coord);
        await this.joinTask(sess);
      } catch (e) {
        await closeQuietly(sess);
        await this.closeOwnManager();
        throw e;
      }
      if (options.startStandardServices ?? true) await this.startStandardServices(sess);
      return withBeforeRun(sess, task?.hooks ?? []);
    }
    const sess = await this.sessionManager.waitForSession({ maxWaitSecs: options.maxWaitSecs ?? 7200, chiefModel: target.chiefModel });
    try {
      await this.joinTask(sess);
    } catch (e) {
      await closeQuietly(sess);
      throw e;
    }
    return withBeforeRun(sess, task?.hooks ?? []);
  }

  /** The task's hooks see the new session, then the task passes the cluster's start barrier (once). */
  private async joinTask(sess: Session): Promise<void> {
    const task = this.task;
    if (task === undefined) return;
    for (const h of task.hooks ?? []) await h.afterCreateSession?.(sess, this.coord);
    if (this.startBarrierPassed) return;
    await task.sessionsCreated?.();
    this.startBarrierPassed = true;
  }

  /**
   * Starts the chief's services as coordinated loops: summaries, step rate (both every
   * `saveSummariesSecs`) and timed checkpoints (every `saveModelSecs`). The first iteration of
   * each runs at once. Returns the started tasks.
   */
  async startStandardServices(sess: Session): Promise<Looper[]> {
    if (!this.isChief) throw new RuntimeError("Only chief supervisor can start standard services.");
    if (this.logdir === undefined) {
      this.logger.warn("Standard services need a 'logdir' passed to the SessionManager");
      return [];
    }
    const writer = this.writer;
    if (this.globalStep !== undefined && writer !== undefined) {
      writer.addSessionLog("START", await this.currentStep(sess));
    }
    const loops: Looper[] = [];
    const secs = this.saveSummariesSecs;
    if (secs !== undefined && writer !== undefined && this.summaryOp !== undefined) {
      const op = this.summaryOp;
      const fetches = this.summaryFetches;
      loops.push(
        Looper.loop(this.coord, secs, async () => this.summaryComputed(sess, toSummaryValues(fetches, await runScaffoldOp(sess, op))), undefined, {
          name: "SVSummaryThread",
          clock: this.clock,
          logger: this.logger,
        }),
      );
    }
    if (secs !== undefined && writer !== undefined && this.globalStep !== undefined) {
      loops.push(await this.stepCounterLoop(sess, writer, this.globalStep, secs));
    }
    if (this.saver !== undefined && this.saveModelSecs !== undefined) {
      loops.push(
        Looper.loop(this.coord, this.saveModelSecs, () => this.saveCheckpoint(sess), undefined, {
          name: "SVTimerCheckpointThread",
          clock: this.clock,
          logger: this.logger,
        }),
      );
    }
    return loops;
  }

  /**
   * Starts input-pipeline tasks (TensorFlow's queue runners) with `sess`, each as a task of the
   * coordinator: a task's error requests a stop, {@link stop} joins them. Returns the tasks.
   */
  startQueueRunners(sess: Session, queueRunners: Iterable<QueueRunner>): CoordinatedTask[] {
    return [...queueRunners].map((qr) => this.coord.spawn(qr.name, (signal) => qr.run(sess, signal)));
  }

  /**
   * Runs `target(...args)` every `intervalSecs` on a coordinated {@link Looper} (TensorFlow's
   * `loop(timer_interval_secs, target, args, kwargs)`: keyword arguments are an object in `args`).
   */
  loop<A extends unknown[]>(intervalSecs: number | null, target: (...args: A) => unknown, args?: A, options: { readonly name?: string } = {}): Looper<A> {
    return Looper.loop(this.coord, intervalSecs, target, args, { ...options, clock: this.clock, logger: this.logger });
  }

  /** Requests a stop of the services (and records `error`, unless it is an OutOfRange). */
  requestStop(error?: unknown): void {
    this.coord.requestStop(error);
  }

  /** `true` once a stop was requested. */
  shouldStop(): boolean {
    return this.coord.shouldStop();
  }

  /** Runs `fn`, reporting any error to the coordinator (see `Coordinator.stopOnException`). */
  stopOnException<T>(fn: () => T | Promise<T>): Promise<T | undefined> {
    return this.coord.stopOnException(fn);
  }

  /** Waits until a stop is requested (or `timeoutSecs` pass). */
  waitForStop(timeoutSecs?: number): Promise<boolean> {
    return this.coord.waitForStop(timeoutSecs);
  }

  /**
   * Stops the services: requests a stop, joins the tasks within `stopGraceSecs` (rethrowing a
   * task's error), then writes `SessionLog STOP` and closes the summary writer if
   * `closeSummaryWriter` (default: only a writer the Supervisor made; one passed in stays open
   * for its owner). Does not close the session.
   */
  async stop(options: StopOptions = {}): Promise<void> {
    this.coord.requestStop();
    try {
      await this.coord.join(options.threads, {
        stopGracePeriodSecs: this.stopGraceSecs,
        ignoreLiveThreads: options.ignoreLiveThreads ?? false,
      });
    } finally {
      if ((options.closeSummaryWriter ?? this.defaultWriter) && this.writer !== undefined) {
        this.writer.addSessionLog("STOP", 0);
        await this.writer.close();
      }
      await this.closeOwnManager();
    }
  }

  /** Closes a manager made here, releasing the directory; the next prepare takes it again. */
  private async closeOwnManager(): Promise<void> {
    const own = this.manager;
    if (own === undefined || own === this.sharedManager) return;
    this.manager = undefined;
    await own.close();
  }

  /**
   * Writes `summary` at `globalStep` (read from the session if not given). Serialized bytes are
   * decoded first; bytes that are not a `Summary` throw `InvalidArgumentError`.
   */
  async summaryComputed(sess: Session, summary: SummaryResult, globalStep?: number): Promise<void> {
    const writer = this.writer;
    if (writer === undefined) throw new RuntimeError("Writing a summary requires a summary writer.");
    const started = this.clock.now();
    const values = summary instanceof Uint8Array ? decodeSummary(summary) : summary;
    const step = globalStep ?? (this.globalStep === undefined ? 0 : await this.currentStep(sess));
    writer.addSummary(values, step);
    const time = this.clock.now();
    this.events.emit({ type: "summaryWritten", time, globalStep: step, durationMs: time - started, hook: "Supervisor" });
  }

  /**
   * Runs `fn` with a prepared session and the standard services, then stops them and closes the
   * session. An OutOfRange error ends it cleanly; any other error is rethrown after the stop.
   *
   * Without `fn`, returns a {@link ManagedSession} for `await using`. JavaScript does not give
   * `Symbol.asyncDispose` the error that left the block, so that form cannot report it to the
   * coordinator as TensorFlow's `with sv.managed_session()` does: the error still propagates,
   * but the services are stopped as on a clean exit. Use the callback form when the block's
   * error must stop the services as an error (or call `sv.requestStop(e)` in a `catch`).
   */
  managedSession<T>(fn: (sess: Session) => T | Promise<T>, options?: ManagedSessionOptions): Promise<T | undefined>;
  managedSession(options?: ManagedSessionOptions): Promise<ManagedSession>;
  async managedSession<T>(
    fnOrOptions?: ((sess: Session) => T | Promise<T>) | ManagedSessionOptions,
    maybeOptions?: ManagedSessionOptions,
  ): Promise<T | undefined | ManagedSession> {
    const fn = typeof fnOrOptions === "function" ? fnOrOptions : undefined;
    const options = (typeof fnOrOptions === "function" ? maybeOptions : fnOrOptions) ?? {};
    const sess = await this.prepareOrWaitForSession(options);
    const finish = async (): Promise<void> => {
      try {
        await this.stop(options.closeSummaryWriter === undefined ? {} : { closeSummaryWriter: options.closeSummaryWriter });
      } finally {
        try {
          await sess.close?.();
        } catch {
          // TensorFlow ignores every error from closing the session here.
        }
      }
    };
    // Runs of the managed session give the event loop turns, so the services' timers fire.
    const fair = fairSession(sess, this.eventLoop);
    if (fn === undefined) return { session: fair, [Symbol.asyncDispose]: finish };
    let result: T | undefined;
    try {
      result = await fn(fair);
    } catch (e) {
      this.requestStop(e);
    }
    await finish();
    return result;
  }

  /**
   * TensorFlow's `SVStepCounterThread`: writes `<global step>/sec` every interval. The first
   * interval is anchored at the start (TensorFlow's `start_loop` records the time and step);
   * an iteration with no time elapsed since the anchor (the immediate first one) writes nothing
   * rather than an infinite rate.
   */
  private async stepCounterLoop(sess: Session, writer: SummaryWriter, globalStep: string, secs: number): Promise<Looper> {
    const tag = `${globalStep}/sec`;
    let last = { time: this.clock.now(), step: await this.currentStep(sess) };
    let logged = 0;
    return Looper.loop(
      this.coord,
      secs,
      async () => {
        const now = this.clock.now();
        const step = await this.currentStep(sess);
        const elapsed = (now - last.time) / 1000;
        if (!(elapsed > 0)) return;
        const rate = (step - last.step) / elapsed;
        last = { time: now, step };
        writer.addScalar(tag, rate, step, { simpleValue: true });
        if (logged++ < 10) this.logger.info(`${tag}: ${rate}`);
      },
      undefined,
      { name: "SVStepCounterThread", clock: this.clock, logger: this.logger },
    );
  }

  /** The manager of `logdir` (the shared one, else one made now), or `undefined` without a logdir or saver. */
  private async checkpointManager(): Promise<CheckpointManager | undefined> {
    if (this.logdir === undefined || this.saver === undefined) return this.sharedManager;
    this.manager ??= await openCheckpointDirectory({
      directory: this.logdir,
      checkpointName: this.checkpointBasename,
      saver: this.saver,
      clock: this.clock,
      logger: this.logger,
    }, "saver");
    return this.manager;
  }

  private async saveCheckpoint(sess: Session): Promise<void> {
    const store = sess.variables;
    if (store === undefined || this.logdir === undefined || this.saver === undefined) return;
    const manager = (await this.checkpointManager()) as CheckpointManager;
    const started = this.clock.now();
    const step = this.globalStep === undefined ? undefined : await this.currentStep(sess);
    const path = await manager.save(store, step === undefined ? {} : { checkpointNumber: step, step });
    if (path === null) return;
    this.writer?.addSessionLog("CHECKPOINT", step ?? 0, { checkpointPath: path });
    const time = this.clock.now();
    this.events.emit({ type: "checkpointSaved", time, globalStep: step ?? 0, path, durationMs: time - started });
  }

  private async currentStep(sess: Session): Promise<number> {
    if (this.globalStep === undefined) return 0;
    return Number(await sess.run(this.globalStep));
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/**
 * `sess`, each run preceded by the `beforeRun` of `hooks` (a worker's chief recovery raises
 * there once the chief is lost); `sess` itself without such hooks. What `beforeRun` returns is
 * not run.
 */
const withBeforeRun = (sess: Session, hooks: readonly SessionRunHook[]): Session => {
  const checks = hooks.filter((h) => h.beforeRun !== undefined);
  if (checks.length === 0) return sess;
  // A synchronous beforeRun (the recovery's check) costs no microtask.
  const before = (ctx: SessionRunContext, from: number): Promise<unknown> | undefined => {
    for (let i = from; i < checks.length; i++) {
      const r = checks[i]?.beforeRun?.(ctx);
      if (isPromiseLike(r)) return Promise.resolve(r).then(() => before(ctx, i + 1));
    }
    return undefined;
  };
  const run = ((fetches: Fetches, feeds?: Feeds, options?: RunOptions, runMetadata?: RunMetadata) => {
    try {
      const pending = before(new SessionRunContext(SessionRunArgs(fetches, feeds, options), sess), 0);
      return pending === undefined ? sess.run(fetches, feeds, options, runMetadata) : pending.then(() => sess.run(fetches, feeds, options, runMetadata));
    } catch (e) {
      return Promise.reject(e instanceof Error ? e : new Error(String(e)));
    }
  }) as Session["run"];
  return new Proxy(sess, {
    get(target, prop) {
      if (prop === "run") return run;
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
};

/** Closes `sess` after a failed preparation, whose error is the one to report. */
const closeQuietly = async (sess: Session): Promise<void> => {
  try {
    await sess.close?.();
  } catch {
    // The preparation's error is what the caller sees.
  }
};

const resolve = <T>(value: Defaultable<T>, fallback: T | undefined): T | undefined =>
  value === undefined || value === USE_DEFAULT ? fallback : (value ?? undefined);

const nonNegative = (name: string, v: number): number => {
  if (!(v >= 0)) throw new ValueError(`${name} must be a number >= 0, got ${String(v)}`);
  return v;
};

const enabled = (v: number): number | undefined => (v > 0 ? v : undefined);

/** `undefined` → `fallback`; `null` → 0 (disabled); a number as is. */
const orDefault = (v: number | null | undefined, fallback: number): number => (v === undefined ? fallback : (v ?? 0));
