/**
 * `StopAtStepHook`: requests a stop once the global step reaches a target (TensorFlow's
 * `tf.estimator.StopAtStepHook`).
 *
 * @module
 */

import { decodeOptions, exactlyOneOf, NonNegativeInt, optional, PositiveInt, struct } from "../src/codec.js";
import type { Session } from "../src/session/Session.js";
import {
  SessionRunArgs,
  SessionRunHook,
  type SessionRunContext,
  type SessionRunValues,
} from "../src/hook/SessionRunHook.js";
import { globalStepNameOf, readGlobalStep, stepValue } from "./internal/globalStep.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link StopAtStepHook}: exactly one of `numSteps` and `lastStep`. */
export interface StopAtStepHookOptions {
  /** Stop after this many steps, counted from the global step when the session is first created. */
  readonly numSteps?: number | undefined;
  /** Stop once the global step is at least this. */
  readonly lastStep?: number | undefined;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Requests a stop when the global step reaches `lastStep`, or `numSteps` past the global step
 * at the first session creation. The target is fixed once, so a recovered session does not
 * move it.
 *
 * Each run fetches the global step, which is read before the run's increment; only when that
 * stale value + 1 reaches the target does the hook read the true value (one extra run), so a
 * run far from the target costs nothing beyond the fetch.
 *
 * @example
 * ```ts
 * // @prelude docs/preludes/session.ts
 * import { withSession } from "monitored-session";
 * import { StopAtStepHook } from "monitored-session/hooks";
 *
 * const hooks = [new StopAtStepHook({ lastStep: 10_000 })];
 * await withSession({ sessionCreator, hooks }, async (sess) => {
 *   while (!sess.shouldStop()) await sess.run("train");
 * });
 * ```
 */
export class StopAtStepHook extends SessionRunHook {
  /** The codec of the options, shared with the configuration registry. */
  static readonly optionsCodec = struct(
    "StopAtStepHook",
    "Requests a stop at a global step.",
    {
      numSteps: optional(PositiveInt, "Stop after this many steps past the global step at the first session creation."),
      lastStep: optional(NonNegativeInt, "Stop once the global step reaches this."),
    },
    exactlyOneOf("numSteps", "lastStep"),
  );

  private readonly numSteps: number | undefined;
  private lastStep: number | undefined;
  private globalStepName: string | undefined;
  private args: SessionRunArgs | undefined;

  /** Throws `ValueError` listing every problem of `options` (e.g. not exactly one of `numSteps` and `lastStep`). */
  constructor(options: StopAtStepHookOptions) {
    super();
    const { numSteps, lastStep } = decodeOptions(StopAtStepHook.optionsCodec, options, "StopAtStepHook");
    this.numSteps = numSteps;
    this.lastStep = lastStep;
  }

  /** The step at which the hook stops training, once known (after the first session creation). */
  get targetStep(): number | undefined {
    return this.lastStep;
  }

  override afterCreateSession(session: Session): void | Promise<void> {
    const name = this.resolve(session);
    if (this.lastStep !== undefined) return;
    const numSteps = this.numSteps as number;
    return readGlobalStep(session, name).then((step) => {
      // Resolved only once: a recovered session keeps the first target.
      this.lastStep ??= step + numSteps;
    });
  }

  override beforeRun(ctx: SessionRunContext): SessionRunArgs {
    return this.args ?? this.resolveArgs(ctx.session);
  }

  override afterRun(ctx: SessionRunContext, values: SessionRunValues): void | Promise<void> {
    const stale = stepValue(values.results);
    // Without afterCreateSession (a bare hooked session), the first run's pre-increment read
    // is the step the session started at.
    const lastStep = (this.lastStep ??= stale + (this.numSteps as number));
    if (stale + 1 < lastStep) return;
    // The fetched value predates this run's increment: read the true one before deciding.
    return readGlobalStep(ctx.session, this.globalStepName as string).then((step) => {
      if (step >= lastStep) ctx.requestStop();
    });
  }

  private resolve(session: Session): string {
    const name = globalStepNameOf(session, "StopAtStepHook");
    if (name !== this.globalStepName) {
      this.globalStepName = name;
      this.args = SessionRunArgs(name);
    }
    return name;
  }

  private resolveArgs(session: Session): SessionRunArgs {
    this.resolve(session);
    return this.args as SessionRunArgs;
  }
}
