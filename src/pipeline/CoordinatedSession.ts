/**
 * The coordinated layer (TensorFlow's `_CoordinatedSession`): one `Coordinator` per session. A
 * preemption error a task reported wins over the run's own error, so that the recoverable
 * layer recovers; closing stops the coordinator and joins its tasks within the grace period.
 *
 * @module
 */

import type { Coordinator } from "../coordinator/Coordinator.js";
import { isPreemptionError } from "../errors.js";
import type { Logger } from "../Logger.js";
import type { Feeds, Fetches, RunMetadata, RunOptions } from "../session/Session.js";
import type { HookedSession } from "./HookedSession.js";
import { WrappedSession, type ErrorHandler, type RawGetter, type RunFn, type StepFn } from "./WrappedSession.js";

/** TensorFlow's `_CoordinatedSession`. */
export class CoordinatedSession extends WrappedSession {
  constructor(
    inner: HookedSession,
    readonly coord: Coordinator,
    private readonly stopGracePeriodSecs: number,
  ) {
    super(inner);
  }

  override checkStop(): boolean {
    // Raises an error a task reported; so SingularMonitoredSession.shouldStop() may throw.
    this.coord.raiseRequestedException();
    return this.coord.shouldStop();
  }

  override run(fetches: Fetches, feeds?: Feeds, options?: RunOptions, runMetadata?: RunMetadata, onError?: ErrorHandler): Promise<unknown> {
    // An outer layer's handler (recovery) receives the root cause; without one, it is thrown.
    // The inner layer is always the hooked one: call it directly rather than through the base
    // class's `instanceof` dispatch, once per step.
    const handler = onError === undefined ? this.throwRootCause : this.withRootCause(onError);
    const inner = this.inner as HookedSession | undefined;
    if (inner === undefined) return super.run(fetches, feeds, options, runMetadata, handler);
    return inner.run(fetches, feeds, options, runMetadata, handler);
  }

  private readonly throwRootCause = (e: unknown): never => {
    throw this.rootCause(e);
  };

  private outerHandler: ErrorHandler | undefined;
  private rootedHandler: ErrorHandler | undefined;

  /** `onError` given this layer's root cause; made once per outer handler, not per run. */
  private withRootCause(onError: ErrorHandler): ErrorHandler {
    if (onError !== this.outerHandler || this.rootedHandler === undefined) {
      this.outerHandler = onError;
      this.rootedHandler = (e, request) => onError(this.rootCause(e), request);
    }
    return this.rootedHandler;
  }

  override runStepFn<T>(stepFn: StepFn<T>, raw: RawGetter, runWithHooks: RunFn | undefined): Promise<T> {
    return super.runStepFn(stepFn, raw, runWithHooks);
  }

  /** A preemption error in the coordinator wins over the main error, enabling recovery. */
  rootCause(e: unknown): unknown {
    if (isPreemptionError(e)) return e;
    const stored = this.coord.requestedException;
    return isPreemptionError(stored) ? stored : e;
  }

  override async close(logger?: Logger): Promise<void> {
    this.coord.requestStop();
    try {
      await this.coord.join(undefined, { stopGracePeriodSecs: this.stopGracePeriodSecs, ignoreLiveThreads: true });
    } finally {
      try {
        await super.close(logger);
      } catch {
        // TensorFlow suppresses every error from closing the inner session here.
      }
    }
  }
}

