/**
 * `Coordinator`: stops a set of concurrent tasks together (TensorFlow's `tf.train.Coordinator`).
 *
 * A "thread" here is any concurrent task: an async loop, a worker thread, a child process. It
 * is represented by a {@link CoordinatedTask}: a name, a liveness check and a `done` promise.
 * Any task can call {@link Coordinator.requestStop}; every task polls
 * {@link Coordinator.shouldStop} or listens to {@link Coordinator.signal}; the owner calls
 * {@link Coordinator.join} to wait for them, with a grace period.
 *
 * @example
 * ```ts
 * const coord = new Coordinator();
 * coord.spawn("reader", async (signal) => { while (!signal.aborted) await readBatch(); });
 * // ... later
 * coord.requestStop();
 * await coord.join(undefined, { stopGracePeriodSecs: 5 });
 * ```
 *
 * @module
 */

import { systemClock, type Clock } from "./Clock.js";
import { OutOfRangeError, RuntimeError } from "./errors.js";
import { defaultLogger, type Logger } from "./Logger.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A concurrent task a coordinator can join: the counterpart of a Python thread. */
export interface CoordinatedTask {
  readonly name: string;
  /** `true` until the task has finished. */
  isAlive(): boolean;
  /** Settles when the task finishes (a rejection counts as finished). */
  readonly done: Promise<unknown>;
}

/** A class of errors, used to name "clean stop" error types. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type ErrorClass = abstract new (...args: any[]) => unknown;

/** Options of {@link Coordinator}. */
export interface CoordinatorOptions {
  /**
   * Error types that request a stop without being an error (default `[OutOfRangeError]`).
   * `MonitoredSession` passes `[]`, so even OutOfRange from a task is reported.
   */
  readonly cleanStopExceptionTypes?: readonly ErrorClass[];
  /** The clock for `waitForStop` and the join grace period. */
  readonly clock?: Clock;
  /** Where straggler reports go. */
  readonly logger?: Logger;
}

/** Options of {@link Coordinator.join}. */
export interface JoinOptions {
  /** How long tasks get to finish once a stop is requested (default 120). */
  readonly stopGracePeriodSecs?: number;
  /** Log stragglers instead of raising (default `false`). */
  readonly ignoreLiveThreads?: boolean;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** Coordinates the stop of concurrent tasks. */
export class Coordinator {
  private readonly cleanTypes: readonly ErrorClass[];
  private readonly clock: Clock;
  private readonly logger: Logger;
  private stopped = false;
  private exception: { readonly error: unknown } | undefined;
  private isJoined = false;
  private readonly registered = new Set<CoordinatedTask>();
  private controller = new AbortController();
  private stopWaiters: (() => void)[] = [];

  constructor(options: CoordinatorOptions = {}) {
    this.cleanTypes = options.cleanStopExceptionTypes ?? [OutOfRangeError];
    this.clock = options.clock ?? systemClock;
    this.logger = options.logger ?? defaultLogger;
  }

  /**
   * Requests that tasks stop. If `error` is given, is not a clean-stop type and no error was
   * recorded yet, it is recorded and later raised by {@link join}. Only the **first** error is
   * kept, and an error that arrives after a plain stop request is dropped (TensorFlow's rule).
   * After {@link join}, a request with an error throws that error at once.
   */
  requestStop(error?: unknown): void {
    const ex = this.filter(error);
    if (this.isJoined && ex !== undefined) throw ex;
    if (this.stopped) return;
    if (ex !== undefined && this.exception === undefined) this.exception = { error: ex };
    this.stopped = true;
    this.controller.abort(ex);
    const waiters = this.stopWaiters;
    this.stopWaiters = [];
    for (const w of waiters) w();
  }

  /** Clears the stop request, the recorded error and `joined`, so the coordinator can be reused. */
  clearStop(): void {
    this.isJoined = false;
    this.exception = undefined;
    this.stopped = false;
    if (this.controller.signal.aborted) this.controller = new AbortController();
  }

  /** `true` once a stop was requested. */
  shouldStop(): boolean {
    return this.stopped;
  }

  /** An `AbortSignal` that aborts when a stop is requested (a fresh one after `clearStop`). */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** `true` after {@link join} finished (until {@link clearStop}). */
  get joined(): boolean {
    return this.isJoined;
  }

  /** The recorded error, if any. */
  get requestedException(): unknown {
    return this.exception?.error;
  }

  /**
   * Runs `fn`; if it throws (anything), reports the error with {@link requestStop} and swallows
   * it (TensorFlow's `stop_on_exception` context manager). Resolves to `fn`'s result or
   * `undefined` after an error.
   */
  async stopOnException<T>(fn: () => T | Promise<T>): Promise<T | undefined> {
    try {
      return await fn();
    } catch (e) {
      this.requestStop(e);
      return undefined;
    }
  }

  /**
   * Waits until a stop is requested or `timeoutSecs` pass. Resolves `true` if a stop was
   * requested. A negative or zero timeout checks and returns at once; none waits forever.
   */
  waitForStop(timeoutSecs?: number): Promise<boolean> {
    if (this.stopped) return Promise.resolve(true);
    if (timeoutSecs !== undefined && timeoutSecs <= 0) return Promise.resolve(false);
    const stop = new Promise<boolean>((resolve) => this.stopWaiters.push(() => resolve(true)));
    if (timeoutSecs === undefined) return stop;
    return Promise.race([
      stop,
      this.clock.sleep(timeoutSecs * 1000, this.signal).then(() => this.stopped),
    ]);
  }

  /** Registers a task, so that {@link join} waits for it without being told. */
  registerThread(task: CoordinatedTask): void {
    this.registered.add(task);
  }

  /**
   * Starts `body` as a registered task. An error thrown by `body` is reported with
   * {@link requestStop}. `body` receives {@link signal} to notice a stop.
   */
  spawn(name: string, body: (signal: AbortSignal) => unknown): CoordinatedTask {
    const t = task(name, this.stopOnException(() => body(this.signal)));
    this.registerThread(t);
    return t;
  }

  /** Throws the recorded error, if any (without clearing it). */
  raiseRequestedException(): void {
    if (this.exception !== undefined) throw this.exception.error;
  }

  /**
   * Waits for the registered tasks and `tasks` to finish. It waits, without limit, until every
   * task finished or a stop was requested; then gives live tasks `stopGracePeriodSecs` to
   * finish. A recorded error is then thrown; else, if tasks are still running, a
   * `RuntimeError` names them (or, with `ignoreLiveThreads`, they are logged).
   */
  async join(tasks?: Iterable<CoordinatedTask>, options: JoinOptions = {}): Promise<void> {
    const grace = options.stopGracePeriodSecs ?? 120;
    const all = new Set<CoordinatedTask>(this.registered);
    for (const t of tasks ?? []) all.add(t);
    const list = [...all];
    const allDone = Promise.all(list.map((t) => t.done.then(noop, noop)));
    if (list.some((t) => t.isAlive())) {
      await Promise.race([allDone, this.waitForStop()]);
    }
    if (list.some((t) => t.isAlive())) {
      const timer = new AbortController();
      await Promise.race([allDone, this.clock.sleep(grace * 1000, timer.signal)]);
      timer.abort();
    }
    const stragglers = list.filter((t) => t.isAlive()).map((t) => t.name);
    this.isJoined = true;
    this.registered.clear();
    if (this.exception !== undefined) throw this.exception.error;
    if (stragglers.length > 0) {
      if (options.ignoreLiveThreads === true) {
        this.logger.info(`Coordinator stopped with threads still running: ${stragglers.join(" ")}`);
      } else {
        throw new RuntimeError(`Coordinator stopped with threads still running: ${stragglers.join(" ")}`);
      }
    }
  }

  private filter(error: unknown): unknown {
    if (error === undefined || error === null) return undefined;
    return this.cleanTypes.some((c) => error instanceof (c as abstract new () => unknown)) ? undefined : error;
  }
}

/** Wraps a promise as a {@link CoordinatedTask}. */
export const task = (name: string, promise: Promise<unknown>): CoordinatedTask => {
  let alive = true;
  const done = promise.then(
    (v) => {
      alive = false;
      return v;
    },
    (e: unknown) => {
      alive = false;
      throw e;
    },
  );
  done.catch(noop);
  return { name, isAlive: () => alive, done };
};

const noop = (): void => undefined;
