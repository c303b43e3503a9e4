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
 * import { Coordinator } from "monitored-session";
 *
 * declare function readBatch(): Promise<void>; // your input pipeline
 *
 * const coord = new Coordinator();
 * coord.spawn("reader", async (signal) => { while (!signal.aborted) await readBatch(); });
 * // ... later
 * coord.requestStop();
 * await coord.join(undefined, { stopGracePeriodSecs: 5 });
 * ```
 *
 * @module
 */

import { systemClock, type Clock } from "../time/Clock.js";
import { OutOfRangeError, RuntimeError, ValueError } from "../errors.js";
import { defaultLogger, type Logger } from "../Logger.js";

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
  /** Where reported errors and straggler reports go. */
  readonly logger?: Logger;
}

/**
 * Makes the coordinator of each session a `MonitoredSession` creates (option
 * `coordinatorFactory`): a seam for tests and for a coordinator that spans processes.
 */
export type CoordinatorFactory = (options: CoordinatorOptions) => Coordinator;

/** The default {@link CoordinatorFactory}: an in-process {@link Coordinator}. */
export const defaultCoordinatorFactory: CoordinatorFactory = (options) => new Coordinator(options);

/** Options of {@link Coordinator.join}. */
export interface JoinOptions {
  /**
   * How long tasks get to finish once a stop is requested (default 120). As upstream, the
   * stragglers are checked one last time 1 ms after the period ends; a negative value skips it.
   */
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
  private stopWaiters = new Set<() => void>();

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
    // After join nobody would see a recorded error, so it is raised to the caller instead.
    if (this.isJoined && ex !== undefined) throw ex;
    if (this.stopped) {
      if (ex !== undefined) this.logger.debug(`Error dropped by Coordinator (a stop was already requested): ${describe(ex)}`);
      return;
    }
    if (ex !== undefined && this.exception === undefined) {
      this.logger.info(`Error reported to Coordinator: ${describe(ex)}`);
      this.exception = { error: ex };
    }
    this.stopped = true;
    this.controller.abort(ex);
    const waiters = this.stopWaiters;
    this.stopWaiters = new Set();
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
   * `undefined` after an error. A thrown `undefined` or `null` is recorded as a `ValueError`, so
   * that it still fails {@link join}. After {@link join}, the error is rethrown (see
   * {@link requestStop}).
   */
  async stopOnException<T>(fn: () => T | Promise<T>): Promise<T | undefined> {
    try {
      return await fn();
    } catch (e) {
      this.requestStop(e ?? new ValueError(`a coordinated task threw ${String(e)}`));
      return undefined;
    }
  }

  /**
   * Waits until a stop is requested or `timeoutSecs` pass. Resolves `true` if a stop was
   * requested. A negative or zero timeout checks and returns at once; none (or `Infinity`)
   * waits forever.
   */
  waitForStop(timeoutSecs?: number): Promise<boolean> {
    if (Number.isNaN(timeoutSecs)) return Promise.reject(new ValueError("waitForStop: timeoutSecs is NaN"));
    return this.untilStop(timeoutSecs === undefined || timeoutSecs === Infinity ? undefined : timeoutSecs * 1000);
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
    const run = this.stopOnException(() => body(this.signal)).catch((e: unknown) => {
      // Only possible after join: the error cannot be recorded any more, so it must not vanish.
      this.logger.error(`Task ${name} failed after the Coordinator was joined: ${describe(e)}`);
      throw e;
    });
    const t = task(name, run);
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
    // Tasks registered after this point are not joined (TensorFlow snapshots under its lock).
    const all = new Set<CoordinatedTask>(this.registered);
    for (const t of tasks ?? []) all.add(t);
    const list = [...all];
    const anyAlive = (): boolean => list.some((t) => t.isAlive());
    if (anyAlive()) {
      const allDead = untilAllDead(list);
      const cancel = new AbortController();
      await Promise.race([allDead, this.untilStop(undefined, cancel.signal)]);
      cancel.abort();
      // TensorFlow polls with a sleep that starts at 1 ms and doubles, clamped to
      // [1 ms, remaining grace], while the remaining grace is >= 0. We also wake as soon as every
      // task has finished, but keep its schedule, so live tasks get the same time as upstream.
      let remainingMs = (options.stopGracePeriodSecs ?? 120) * 1000;
      let waitMs = 1;
      while (anyAlive() && remainingMs >= 0) {
        const timer = new AbortController();
        await Promise.race([allDead, this.clock.sleep(waitMs, timer.signal)]);
        timer.abort();
        remainingMs -= waitMs;
        waitMs = Math.max(Math.min(2 * waitMs, remainingMs), 1);
      }
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

  /**
   * Resolves `true` on a stop request, `false` after `timeoutMs` (none: never) or when `cancel`
   * aborts. The waiter and its timer are removed when it resolves, so a loop that waits
   * repeatedly does not accumulate them.
   */
  private untilStop(timeoutMs: number | undefined, cancel?: AbortSignal): Promise<boolean> {
    if (this.stopped) return Promise.resolve(true);
    if (timeoutMs !== undefined && timeoutMs <= 0) return Promise.resolve(false);
    if (cancel?.aborted === true) return Promise.resolve(false);
    return new Promise<boolean>((resolve) => {
      const timer = new AbortController();
      const finish = (stopped: boolean): void => {
        this.stopWaiters.delete(onStop);
        cancel?.removeEventListener("abort", onCancel);
        timer.abort();
        resolve(stopped);
      };
      const onStop = (): void => finish(true);
      const onCancel = (): void => finish(false);
      this.stopWaiters.add(onStop);
      cancel?.addEventListener("abort", onCancel, { once: true });
      if (timeoutMs !== undefined) {
        void this.clock.sleep(timeoutMs, timer.signal).then(() => {
          if (!timer.signal.aborted) finish(false);
        });
      }
    });
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

/**
 * Resolves when every task of `tasks` is dead. A task that is not alive (finished, or a looper
 * never started) is not waited for; one that starts later is. Each task's `done` is awaited at
 * most once, so a task whose `isAlive` lies cannot spin this loop.
 */
const untilAllDead = async (tasks: readonly CoordinatedTask[]): Promise<void> => {
  const awaited = new Set<CoordinatedTask>();
  for (;;) {
    const fresh = tasks.filter((t) => t.isAlive() && !awaited.has(t));
    if (fresh.length === 0) return;
    for (const t of fresh) awaited.add(t);
    await Promise.all(fresh.map((t) => t.done.then(noop, noop)));
  }
};

const describe = (e: unknown): string => (e instanceof Error ? `${e.name}: ${e.message}` : String(e));
