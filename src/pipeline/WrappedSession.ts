/**
 * The base of a monitored session's layers (TensorFlow's `_WrappedSession`): each layer wraps an
 * inner layer or the raw session, adds its own stop condition, and passes runs down. Also how a
 * layer is closed.
 *
 * @module
 */

import { RuntimeError, StopIteration, isPreemptionError } from "../errors.js";
import { defaultLogger, type Logger } from "../Logger.js";
import type { Feeds, Fetches, RunMetadata, RunOptions, Session } from "../session/Session.js";
import type { StepContext } from "../session/StepContext.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

export type RawGetter = () => Session | undefined;
export type StepFn<T> = (ctx: StepContext) => T | Promise<T>;
export type RunFn = (fetches: Fetches, feeds?: Feeds, options?: RunOptions, runMetadata?: RunMetadata) => Promise<unknown>;

/** Base of the layers (TensorFlow's `_WrappedSession`). */
export abstract class WrappedSession {
  constructor(protected inner: WrappedSession | Session | undefined) {}

  /** This layer's own stop condition (the recoverable layer asks its inner layer's). */
  checkStop(): boolean {
    return false;
  }

  shouldStop(): boolean {
    if (this.checkStop()) return true;
    const inner = this.inner;
    if (inner === undefined) return true;
    return inner instanceof WrappedSession ? inner.shouldStop() : false;
  }

  run(fetches: Fetches, feeds?: Feeds, options?: RunOptions, runMetadata?: RunMetadata, onError?: ErrorHandler): Promise<unknown> {
    const inner = this.inner;
    if (inner === undefined) return Promise.reject(new RuntimeError("Session is already closed."));
    if (inner instanceof WrappedSession) return inner.run(fetches, feeds, options, runMetadata, onError);
    const p = inner.run(fetches, feeds, options, runMetadata) as Promise<unknown>;
    return onError === undefined ? p : p.then(undefined, (e: unknown) => onError(e, { fetches, feeds, options, runMetadata }));
  }

  runStepFn<T>(stepFn: StepFn<T>, raw: RawGetter, runWithHooks: RunFn | undefined): Promise<T> {
    const session = raw();
    if (session === undefined) return Promise.reject(new RuntimeError("Session is already closed."));
    const runFn = runWithHooks ?? ((f: Fetches, d?: Feeds, o?: RunOptions, m?: RunMetadata) => this.run(f, d, o, m));
    const ctx = makeStepContext(session, runFn);
    return new Promise<T>((resolve) => resolve(stepFn(ctx)));
  }

  /**
   * Completes what an earlier call left in progress before hooks' `end` runs (see
   * {@link RecoverableSession.settle}); `undefined` when there is nothing to complete.
   */
  settle(): Promise<void> | undefined {
    return undefined;
  }

  /** Idempotent; preemption errors from the inner close are logged and swallowed. */
  close(logger: Logger = defaultLogger): Promise<void> {
    const inner = this.inner;
    this.inner = undefined;
    return closeLayer(inner, logger);
  }
}

/** Closes a layer or raw session; preemption errors are logged and swallowed, others propagate. */
export const closeLayer = async (inner: WrappedSession | Session | undefined, logger: Logger): Promise<void> => {
  if (inner === undefined) return;
  try {
    if (inner instanceof WrappedSession) await inner.close(logger);
    else await inner.close?.();
  } catch (e) {
    if (!isPreemptionError(e)) throw e;
    logger.error(`An error occurred when attempting to close the session: ${String(e)}`);
  }
};

const makeStepContext = (session: Session, run: RunFn): StepContext => ({
  session,
  runWithHooks: run as StepContext["runWithHooks"],
  requestStop(): never {
    throw new StopIteration("step_fn has requested the iterations to stop.");
  },
});

/** A run's arguments as its caller gave them: what a recovery retries. */
export interface RunRequest {
  readonly fetches: Fetches;
  readonly feeds: Feeds | undefined;
  readonly options: RunOptions | undefined;
  readonly runMetadata: RunMetadata | undefined;
}

/**
 * Handles a run's error: rethrows it (transformed) or recovers and returns the retried result.
 * It gets the failed run's request, so that one handler per layer serves every run (no closure
 * over each run's arguments on the hot path).
 */
export type ErrorHandler = (error: unknown, request: RunRequest) => unknown;

/** A run's synchronous error as a rejection, through the outer layers' handler if any. */
export const failRun = (e: unknown, onError: ErrorHandler | undefined, request: RunRequest): Promise<unknown> =>
  onError === undefined ? Promise.reject(e) : Promise.resolve().then(() => onError(e, request));

