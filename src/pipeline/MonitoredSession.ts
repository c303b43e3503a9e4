/**
 * `MonitoredSession` and `SingularMonitoredSession`: a session wrapped in hooks, a coordinator
 * and (for `MonitoredSession`) recovery from preemption, with TensorFlow's semantics.
 *
 * The layers, outermost first, are TensorFlow's; each lives in its own internal module:
 * - **recoverable** (`MonitoredSession` only, src/pipeline/RecoverableSession.ts): on
 *   `AbortedError`/`UnavailableError`, close the session, create a new one (hooks'
 *   `afterCreateSession` runs again) and retry the same call;
 * - **coordinated** (src/pipeline/CoordinatedSession.ts): a {@link Coordinator} per session; a
 *   preemption error reported by a task wins over the main error, so that recovery happens;
 *   `close()` stops and joins tasks;
 * - **hooked** (src/pipeline/HookedSession.ts): hooks' `beforeRun` fetches and feeds are merged
 *   into the caller's, the results split back out, `afterRun` called, and stop requests
 *   honoured.
 *
 * src/pipeline/CoordinatedSessionCreator.ts creates each session with its layers;
 * src/pipeline/WrappedSession.ts is their base.
 *
 * Every run emits `beforeRun`/`afterRun` events on {@link MonitoredSession.events$}, the
 * session's one event stream (src/pipeline/SessionEventStream.ts). Hook dispatch itself is a
 * plain loop: hooks that return plain values cost no microtask per step.
 *
 * @example
 * ```ts
 * // @prelude docs/preludes/session.ts
 * import { withSession } from "monitored-session";
 * import { StopAtStepHook } from "monitored-session/hooks";
 *
 * await withSession({ sessionCreator, hooks: [new StopAtStepHook({ lastStep: 1000 })] }, async (sess) => {
 *   while (!sess.shouldStop()) await sess.run("train");
 * });
 * ```
 *
 * @module
 */

import { Observable, type PartialObserver, type Subscription } from "rxjs";
import type { CheckpointManager } from "../checkpoint/CheckpointManager.js";
import { processTempFiles, type TempFileRegistry } from "../checkpoint/TempFileRegistry.js";
import { systemClock, type Clock } from "../time/Clock.js";
import { DEFAULT_YIELD_INTERVAL_MS, EventLoopYield } from "./EventLoopYield.js";
import { defaultCoordinatorFactory, type Coordinator, type CoordinatorFactory } from "../coordinator/Coordinator.js";
import { isCleanExit, RuntimeError, ValueError } from "../errors.js";
import type { Graph } from "../session/Graph.js";
import { isPromiseLike } from "../util/promise.js";
import { defaultLogger, type Logger } from "../Logger.js";
import type { Scaffold } from "../creation/Scaffold.js";
import { ChiefSessionCreator, type SessionCreator } from "../creation/SessionCreators.js";
import type { SessionFactory } from "../creation/SessionManager.js";
import type { Feeds, FetchResult, Fetches, RunMetadata, RunOptions, Session } from "../session/Session.js";
import type { SessionEvent } from "../events/SessionEvent.js";
import { eventLogger, logObserver, type SessionEventListener } from "../events/logObserver.js";
import type { ComponentEvents, EventSource } from "../events/componentEvents.js";
import { disposeWithin } from "./disposeWithin.js";
import { HookTimingSwitch } from "./HookTimingSwitch.js";
import { fileWriterCache, type FileWriterCache } from "../summary/FileWriterCache.js";
import { SessionEventStream } from "./SessionEventStream.js";
import { orderHooks, type HookEnv, type SessionRunHook } from "../hook/SessionRunHook.js";
import { CoordinatedSessionCreator } from "./CoordinatedSessionCreator.js";
import { RecoverableSession } from "./RecoverableSession.js";
import type { StepContext } from "../session/StepContext.js";
import type { WrappedSession } from "./WrappedSession.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/**
 * How a session tells time and speaks, in every API that makes one (`MonitoredSession.create`,
 * `monitoredTrainingSession`): its clock, its lines and their printers, an observer of its
 * events, and how often training gives the event loop a turn. Not TensorFlow's: its sessions
 * log through Python's `logging` and have no event stream.
 */
export interface SessionRuntimeOptions {
  /** The clock given to hooks and the coordinator (default: the system clock). */
  readonly clock?: Clock;
  /**
   * Where the session's log lines go (default: console, level `info`): the default log
   * observer, {@link logObserver}, writes the lines of the hooks, the session's layers and the
   * services hooks open to it. They do not write to it themselves: they emit on `events$`, and
   * hooks get an {@link eventLogger} as `HookEnv.logger`.
   */
  readonly logger?: Logger;
  /**
   * Replaces the default log observer (`logObserver(logger)`): one listener or several, or
   * `null` for none (the lines are then only events). Listeners hear every event but the
   * per-run ones (`beforeRun`, `afterRun`, `hookTimings`), from before creation to after
   * `close()`, and do not make runs build events as a subscriber does (see `observer`).
   */
  readonly logObserver?: SessionEventListener | readonly SessionEventListener[] | null;
  /**
   * Longest stretch of training, in milliseconds on `clock`, before a run gives Node's event
   * loop a turn (default {@link DEFAULT_YIELD_INTERVAL_MS}, 5). A synchronous step (a
   * TensorFlow.js kernel) never lets signals, timers or background saves run otherwise.
   * `0` yields after every run; `Infinity` only while a hook's background work (an
   * asynchronous checkpoint) is pending, which always gets a turn after every run (work that
   * progresses off this thread only when there is no time budget: `HookEnv.trackBackground`).
   */
  readonly yieldIntervalMs?: number;
  /**
   * Subscribed to `events$` before anything happens, so it also sees the events of creation
   * (the first `sessionCreated`), which a subscription after `create()` resolves would miss.
   */
  readonly observer?: PartialObserver<SessionEvent> | SessionEventListener;
}

/**
 * Without a `sessionCreator`: what the default {@link ChiefSessionCreator} is made of (its
 * TensorFlow names, flat, as TensorFlow's `SingularMonitoredSession` takes them).
 */
export interface DefaultCreatorOptions {
  /** The scaffold of the default chief creator. */
  readonly scaffold?: Scaffold | undefined;
  /** Makes the raw sessions (default `graph.session()`). */
  readonly sessionFactory?: SessionFactory | undefined;
  /** Restore the latest checkpoint in this directory, if any. */
  readonly checkpointDir?: string | undefined;
  /** Restore this checkpoint prefix. */
  readonly checkpointFilenameWithPath?: string | undefined;
}

/**
 * What a session hands its hooks and owns, beyond TensorFlow's options: the services hooks
 * reach through `HookEnv`, the coordinator's factory, the resources and streams that live as
 * long as the session, and per-hook timing. Every one has a working default.
 */
export interface SessionServicesOptions {
  /**
   * Streams of services made before the session (a checkpoint manager that took its
   * directory's lock): forwarded before anything else ({@link MonitoredSession.forwardEvents}),
   * so that their lines and events are this session's until it closes.
   * `monitoredTrainingSession` forwards the stream of the manager it makes.
   */
  readonly eventSources?: readonly EventSource[];
  /**
   * Measure every hook's `beforeRun`/`afterRun` and the raw run, and emit a `hookTimings`
   * event per run (default `false`; a hook can also turn it on with
   * `HookEnv.requestHookTiming()`). While off, no clock is read for it.
   */
  readonly hookTiming?: boolean;
  /**
   * Makes the coordinator of each session (default: an in-process `Coordinator`). It is given
   * the session's clock and logger, and `cleanStopExceptionTypes: []` (every error a task
   * reports, OutOfRange included, reaches the session).
   */
  readonly coordinatorFactory?: CoordinatorFactory;
  /**
   * Where hooks get summary writers (`HookEnv.writerCache`). Default: the process-wide
   * `fileWriterCache`, so sessions of one process share one writer per log directory; give a
   * `new FileWriterCache()` for a session that shares nothing (the caller closes it).
   */
  readonly writerCache?: FileWriterCache;
  /**
   * The checkpoint directory's manager, given to hooks (`HookEnv.checkpointManager`): a
   * `CheckpointSaverHook` of that directory saves through it. The caller owns it (or lists it
   * in `ownedResources`).
   */
  readonly checkpointManager?: CheckpointManager;
  /**
   * The registry of files being written, for the checkpoint managers hooks create
   * (`HookEnv.tempFiles`). Default: the process-wide `processTempFiles`, which sessions saving
   * into one directory must share.
   */
  readonly tempFiles?: TempFileRegistry;
  /**
   * Resources the session owns: each is disposed (`[Symbol.asyncDispose]()`, in order) when the
   * session closes, whether it closes cleanly or after an error (hooks' `end` runs only in the
   * first case). `monitoredTrainingSession` passes the checkpoint manager it made, so the
   * directory's lock is released however the session ends.
   */
  readonly ownedResources?: readonly AsyncDisposable[];
}

/**
 * Options of {@link MonitoredSession.create}. Either a `sessionCreator`, or (TensorFlow's
 * `SingularMonitoredSession` signature) what a {@link ChiefSessionCreator} needs: a `graph`,
 * `scaffold` or `sessionFactory`, and optionally a checkpoint location. The names are flat, as
 * TensorFlow's; the types are grouped by concern: {@link SessionRuntimeOptions},
 * {@link DefaultCreatorOptions}, {@link SessionServicesOptions} (docs/architecture.md, "Option
 * bags").
 */
export interface MonitoredSessionOptions extends SessionRuntimeOptions, DefaultCreatorOptions, SessionServicesOptions {
  /**
   * Creates (and re-creates, after a preemption) the raw session. Default: a
   * {@link ChiefSessionCreator} built from `scaffold`, `graph`, `sessionFactory`,
   * `checkpointDir` and `checkpointFilenameWithPath`.
   */
  readonly sessionCreator?: SessionCreator | undefined;
  /** Hooks, in order (ordering constraints may reorder them). */
  readonly hooks?: readonly SessionRunHook[];
  /** How long tasks get to finish when the session closes (default 120). */
  readonly stopGracePeriodSecs?: number;
  /**
   * The graph the session runs, if any. It is finalized once every hook's `begin` ran and,
   * if it was not finalized before, un-finalized when the session closes (TensorFlow's rule).
   */
  readonly graph?: Graph;
}

export type { StepContext } from "../session/StepContext.js";

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** What a monitored session is made of (`MonitoredSession.create` gathers it). */
interface SessionParts {
  readonly creator: CoordinatedSessionCreator;
  readonly options: MonitoredSessionOptions;
  readonly hooks: readonly SessionRunHook[];
  /** The session's event stream, which the creator emits on too. */
  readonly stream: SessionEventStream;
  /** The session's logger: its lines are `log` events on `stream`. */
  readonly log: Logger;
}

/**
 * A session that runs hooks, coordinates tasks and recovers from preemption errors.
 * Create it with {@link MonitoredSession.create} (the session is created eagerly, as in
 * TensorFlow); use it with {@link withSession} or `await using`.
 */
export class MonitoredSession {
  private readonly stream: SessionEventStream;
  /** The session's logger: its lines become `log` events. */
  private readonly log: Logger;
  /**
   * The session's one event stream (see `SessionEvent` for every type): life cycle, runs,
   * checkpoints, summaries, recoveries, forwarded preemption events and hook timings. A late
   * subscriber first gets the latest `sessionCreated`. It completes when the session closes.
   */
  readonly events$: Observable<SessionEvent>;
  /** @internal */
  protected sess: WrappedSession | undefined;
  /** @internal */
  protected readonly creator: CoordinatedSessionCreator;
  private readonly options: MonitoredSessionOptions;
  private readonly hooks: readonly SessionRunHook[];
  private readonly graphWasFinalized: boolean;
  /** When runs give the event loop a turn; hooks' background work is tracked here. */
  private readonly eventLoop: EventLoopYield;

  /** Use {@link MonitoredSession.create}. */
  protected constructor(parts: SessionParts) {
    this.creator = parts.creator;
    this.options = parts.options;
    this.hooks = parts.hooks;
    this.stream = parts.stream;
    this.log = parts.log;
    this.events$ = this.stream.events$;
    const { options } = parts;
    this.graphWasFinalized = options.graph?.finalized ?? true;
    this.eventLoop = new EventLoopYield(options.clock ?? systemClock, options.yieldIntervalMs);
    closers.set(this, (error) => this.closeWith(error));
  }

  /**
   * Runs every hook's `begin`, then creates the session (retrying preemption errors) and calls
   * every hook's `afterCreateSession`.
   */
  static async create(options: MonitoredSessionOptions): Promise<MonitoredSession> {
    return MonitoredSession.build(options, true, (parts) => new MonitoredSession(parts));
  }

  /** @internal */
  protected static async build<T extends MonitoredSession>(
    options: MonitoredSessionOptions,
    shouldRecover: boolean,
    make: (parts: SessionParts) => T,
  ): Promise<T> {
    const sessionCreator = resolveSessionCreator(options);
    // A scaffold's graph is the session's graph (TensorFlow's default graph) unless one is given.
    const scaffoldGraph = options.scaffold?.graph;
    if (options.graph === undefined && scaffoldGraph !== undefined) options = { ...options, graph: scaffoldGraph };
    const grace = options.stopGracePeriodSecs ?? 120;
    if (!(grace >= 0)) throw new ValueError(`stopGracePeriodSecs must be >= 0, got ${String(grace)}`);
    const hooks = orderHooks(options.hooks ?? []);
    const clock = options.clock ?? systemClock;
    const timing = new HookTimingSwitch(options.hookTiming === true);
    const coordinatorFactory = options.coordinatorFactory ?? defaultCoordinatorFactory;
    // The session's own lines are events (eventLogger) that its log observers print.
    const stream = new SessionEventStream();
    const logger = eventLogger((e) => stream.next(e), () => clock.now());
    const creator = new CoordinatedSessionCreator(sessionCreator, hooks, grace, clock, logger, timing, coordinatorFactory, stream);
    const self = make({ creator, options, hooks, stream, log: logger });
    const logObservers = options.logObserver === undefined ? [logObserver(options.logger ?? defaultLogger)] : options.logObserver === null ? [] : [options.logObserver].flat();
    for (const l of logObservers) self.stream.listen(l);
    // The observer first: it hears what the sources said before the session existed, too.
    if (options.observer !== undefined) self.stream.subscribe(options.observer);
    for (const source of options.eventSources ?? []) self.forwardEvents(source);
    const env: HookEnv = {
      clock,
      logger,
      stopGracePeriodSecs: grace,
      emit: (e) => self.stream.next(e),
      trackBackground: (work, options) => void self.eventLoop.track(work, options),
      requestHookTiming: () => timing.request(),
      events$: self.events$,
      writerCache: options.writerCache ?? fileWriterCache,
      tempFiles: options.tempFiles ?? processTempFiles,
      ...(options.checkpointManager === undefined ? {} : { checkpointManager: options.checkpointManager }),
    };
    try {
      for (const h of hooks) {
        const r = h.begin?.(env);
        if (isPromiseLike(r)) await r;
      }
      options.graph?.finalize();
      self.sess = shouldRecover ? await RecoverableSession.create(creator, logger) : await creator.createSession();
    } catch (e) {
      // There is no session to observe: tell the observers why, then fail.
      self.stream.error(e);
      throw e;
    }
    return self;
  }

  /**
   * Runs `fetches` through the hooks. Results mirror the fetch structure.
   * Throws `RuntimeError` if called after a hook requested a stop.
   */
  run<const F extends Fetches>(
    fetches: F,
    feeds?: Feeds,
    options?: RunOptions,
    runMetadata?: RunMetadata,
  ): Promise<FetchResult<F>> {
    const s = this.sess;
    if (s === undefined) return Promise.reject(new RuntimeError("Session is already closed."));
    return this.eventLoop.after(s.run(fetches, feeds, options, runMetadata) as Promise<FetchResult<F>>);
  }

  /**
   * Runs `stepFn(stepContext)` and returns its result. Inside, `runWithHooks` runs through the
   * hooks and `session` runs raw; on a preemption error the whole step function is re-run.
   * `stepFn` must take exactly one parameter (TensorFlow checks the same).
   */
  async runStepFn<T>(stepFn: (stepContext: StepContext) => T | Promise<T>): Promise<T> {
    if (typeof stepFn !== "function" || stepFn.length !== 1) {
      throw new ValueError(
        `\`step_fn\` may either have one \`step_context\` argument, or \`self\` and \`step_context\` arguments if it's an instance method. Got a function with ${typeof stepFn === "function" ? stepFn.length : 0} parameters.`,
      );
    }
    const s = this.sess;
    if (s === undefined) throw new RuntimeError("Session is already closed.");
    return this.eventLoop.after(s.runStepFn(stepFn, () => this.creator.tfSess, undefined));
  }

  /**
   * `true` if the session is closed, a hook requested a stop, or the coordinator stopped.
   * In `MonitoredSession` it never throws: a preemption error reported to the coordinator
   * closes the session (it is re-created at the next `run`) and returns `false`.
   */
  shouldStop(): boolean {
    return this.sess === undefined ? true : this.sess.shouldStop();
  }

  /**
   * Calls every hook's `end`, then closes the session (stopping and joining the coordinator's
   * tasks). A second call throws `RuntimeError('Session is already closed.')`.
   */
  close(): Promise<void> {
    return this.closeWith(undefined);
  }

  /** `close()`, for `await using sess = await MonitoredSession.create(...)`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /**
   * An Observable that runs `fetches` until the session should stop, emitting each result.
   * It completes on a stop or an OutOfRange/StopIteration and errors on anything else. It
   * does not close the session.
   */
  loop$<const F extends Fetches>(fetches: F, feeds?: Feeds): Observable<FetchResult<F>> {
    return new Observable<FetchResult<F>>((subscriber) => {
      let cancelled = false;
      void (async () => {
        try {
          while (!cancelled && !this.shouldStop()) subscriber.next(await this.run(fetches, feeds));
          subscriber.complete();
        } catch (e) {
          if (isCleanExit(e)) subscriber.complete();
          else subscriber.error(e);
        }
      })();
      return () => {
        cancelled = true;
      };
    });
  }

  /**
   * Forwards another stream's events into {@link events$} until it completes or this session
   * closes. An error of the stream becomes a line at `warn` and a `warning` event. Given an object with `events$`
   * (a `PreemptionCheckpointHandler`, a {@link ComponentEvents}), this session's log observers
   * print its `log` lines while it forwards them ({@link EventSource.adopt}); the source's own
   * logger prints them before and after. Returns the subscription, to stop forwarding earlier.
   */
  forwardEvents(source: Observable<SessionEvent> | EventSource): Subscription {
    if (!("events$" in source)) return this.stream.forward(source, () => this.now());
    const release = source.adopt?.();
    const forwarding = this.stream.forward(source.events$, () => this.now());
    // Ended by close(), by the caller, or by the source's completion: the source prints again.
    if (release !== undefined) forwarding.add(release);
    return forwarding;
  }

  /** `true` once closed. */
  get closed(): boolean {
    return this.creator.tfSess === undefined;
  }

  /** The current raw session, or `undefined` when closed. */
  get rawSession(): Session | undefined {
    return this.creator.tfSess;
  }

  /** The coordinator of the current session, or `undefined` when closed. */
  get coord(): Coordinator | undefined {
    return this.creator.coord;
  }

  /** The graph given in the options, or `undefined` once closed. */
  get graph(): Graph | undefined {
    return this.sess === undefined ? undefined : this.options.graph;
  }

  /**
   * Closes with `with`-statement semantics: hooks' `end` runs only when `error` is
   * `undefined`. {@link withSession} reaches it through {@link closeWith}.
   */
  private async closeWith(error: unknown): Promise<void> {
    try {
      if (error === undefined) {
        const settling = this.sess?.settle();
        if (settling !== undefined) await settling;
        const tf = this.creator.tfSess;
        if (tf !== undefined) {
          for (const h of this.hooks) {
            const r = h.end?.(tf);
            if (isPromiseLike(r)) await r;
          }
          this.emit({ type: "end", time: this.now() });
        }
      }
    } finally {
      try {
        if (this.sess === undefined) throw new RuntimeError("Session is already closed.");
        // Its lines (a preemption error while closing) are the session's, not the console's.
        await this.sess.close(this.log);
      } finally {
        const wasOpen = this.sess !== undefined;
        this.sess = undefined;
        this.creator.release();
        if (!this.graphWasFinalized) this.options.graph?.unfinalize();
        if (wasOpen) {
          const o = this.options;
          await disposeWithin(o.ownedResources ?? [], (o.stopGracePeriodSecs ?? 120) * 1000, o.clock ?? systemClock, this.log);
          this.emit(error === undefined ? { type: "closed", time: this.now() } : { type: "closed", time: this.now(), error });
          this.stream.complete();
        }
      }
    }
  }

  private emit(e: SessionEvent): void {
    this.stream.next(e);
  }

  private now(): number {
    return (this.options.clock ?? systemClock).now();
  }
}

/**
 * A monitored session without recovery: a preemption error propagates, and `shouldStop()`
 * raises an error a task reported to the coordinator. Always chief.
 */
export class SingularMonitoredSession extends MonitoredSession {
  /** Creates the session (no recovery). */
  static override async create(options: MonitoredSessionOptions): Promise<SingularMonitoredSession> {
    return MonitoredSession.build(options, false, (parts) => new SingularMonitoredSession(parts));
  }

  /** The current raw session, or `undefined` after close (TensorFlow's `raw_session()`). */
  rawSessionOrUndefined(): Session | undefined {
    return this.rawSession;
  }
}

/**
 * Runs `body` with a monitored session and closes it with Python's `with` semantics:
 * OutOfRange and StopIteration are a clean exit (hooks' `end` runs, the error is suppressed and
 * `undefined` is returned); any other error closes the session without `end` and is rethrown.
 */
export const withSession = async <T, S extends MonitoredSession = MonitoredSession>(
  session: S | Promise<S> | MonitoredSessionOptions,
  body: (sess: S) => T | Promise<T>,
): Promise<T | undefined> => {
  const sess = (isMonitoredOptions(session) ? await MonitoredSession.create(session) : await session) as S;
  let result: T;
  try {
    result = await body(sess);
  } catch (e) {
    if (isCleanExit(e)) {
      await closeWith(sess, undefined);
      return undefined;
    }
    await closeWith(sess, e);
    throw e;
  }
  await closeWith(sess, undefined);
  return result;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/**
 * Each session's close with `with` semantics, for {@link withSession}: kept off the public
 * class (a WeakMap keyed by the session, like a private field the module can read).
 */
const closers = new WeakMap<MonitoredSession, (error: unknown) => Promise<void>>();

const closeWith = (sess: MonitoredSession, error: unknown): Promise<void> => {
  const close = closers.get(sess);
  if (close === undefined) throw new ValueError("withSession needs a MonitoredSession made by MonitoredSession.create");
  return close(error);
};

const isMonitoredOptions = (x: unknown): x is MonitoredSessionOptions =>
  typeof x === "object" && x !== null && !(x instanceof MonitoredSession) && !isPromiseLike(x);

/**
 * The given `sessionCreator`, or a {@link ChiefSessionCreator} from the options (TensorFlow's
 * default). `ValueError` if the creator is malformed, if it is given together with the chief
 * creator's options (they would be ignored), or if nothing can make sessions.
 */
const resolveSessionCreator = (options: MonitoredSessionOptions): SessionCreator => {
  const { sessionCreator, scaffold, sessionFactory, checkpointDir, checkpointFilenameWithPath } = options;
  if (sessionCreator !== undefined) {
    if (typeof sessionCreator?.createSession !== "function") {
      throw new ValueError("sessionCreator must be an object with a createSession() method");
    }
    const ignored = Object.entries({ scaffold, sessionFactory, checkpointDir, checkpointFilenameWithPath })
      .filter(([, v]) => v !== undefined)
      .map(([k]) => k);
    if (ignored.length > 0) {
      throw new ValueError(
        `${ignored.join(", ")} cannot be given with sessionCreator: they configure the default ChiefSessionCreator, which sessionCreator replaces`,
      );
    }
    return sessionCreator;
  }
  if (options.graph === undefined && scaffold?.graph === undefined && sessionFactory === undefined) {
    throw new ValueError(
      "MonitoredSession needs a sessionCreator, or a graph, a scaffold with a graph or a sessionFactory to create sessions",
    );
  }
  return new ChiefSessionCreator({
    scaffold,
    sessionFactory,
    graph: options.graph,
    checkpointDir,
    checkpointFilenameWithPath,
    clock: options.clock,
    logger: options.logger,
  });
};
