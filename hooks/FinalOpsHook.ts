/**
 * `FinalOpsHook`: evaluates fetches once when the session ends, typically final metric values
 * (TensorFlow's `tf.estimator.FinalOpsHook`).
 *
 * @module
 */

import { OutOfRangeError, StopIteration } from "../src/errors.js";
import type { Logger } from "../src/Logger.js";
import type { Feeds, FetchResult, Fetches, Session } from "../src/session/Session.js";
import { SessionRunHook, type HookEnv } from "../src/hook/SessionRunHook.js";
import { type OwnServices, warn } from "./internal/services.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link FinalOpsHook}. */
export interface FinalOpsHookOptions<F extends Fetches> {
  /** What to evaluate in `end` (a name, array or record; `null` evaluates nothing). */
  readonly finalOps: F;
  /** Feeds for that final run. */
  readonly finalOpsFeedDict?: Feeds | undefined;
  /** Where the OutOfRange explanation goes (default: the session's logger). */
  readonly logger?: Logger | undefined;
}

const OUT_OF_RANGE_WARNING =
  "An OutOfRangeError or StopIteration exception is raised by the code in FinalOpsHook. " +
  "This typically means the Ops running by the FinalOpsHook have a dependency back to some " +
  "input source, which should not happen. For example, for metrics in an evaluation loop, " +
  "each metric has two ops: `value_op` and `update_op`. The loop calls the `update_op` for " +
  "each batch of the input and, once it is exhausted, the `value_op` to get the metric " +
  "values. The `value_op` here should depend on reading variables only, rather than reading " +
  "another batch from input. Otherwise, the `value_op`, executed by FinalOpsHook, triggers " +
  "another data reading, which ends OutOfRangeError/StopIteration. Please fix that.";

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Runs `finalOps` (with `finalOpsFeedDict`) in `end` and keeps the result in
 * {@link FinalOpsHook.finalOpsValues}. If that run hits the end of the input
 * (`OutOfRangeError` / `StopIteration`), it logs why that is a bug in the final ops and
 * rethrows.
 *
 * @example
 * ```ts
 * // @prelude docs/preludes/session.ts
 * import { withSession } from "monitored-session";
 * import { FinalOpsHook } from "monitored-session/hooks";
 *
 * const final = new FinalOpsHook({ finalOps: { accuracy: "accuracy_value" } });
 * await withSession({ sessionCreator, hooks: [final] }, async (sess) => {
 *   for (;;) await sess.run("update_metrics"); // until the input ends (OutOfRangeError)
 * });
 * final.finalOpsValues?.accuracy;
 * ```
 */
export class FinalOpsHook<F extends Fetches = Fetches> extends SessionRunHook {
  private readonly finalOps: F;
  private readonly finalOpsFeedDict: Feeds | undefined;
  private readonly own: OwnServices;
  private env: HookEnv | undefined;
  private values: FetchResult<F> | undefined;

  constructor(options: FinalOpsHookOptions<F>) {
    super();
    this.finalOps = options.finalOps;
    this.finalOpsFeedDict = options.finalOpsFeedDict;
    this.own = { logger: options.logger };
  }

  /** The values of `finalOps` from the last `end`, or `undefined` before it ran. */
  get finalOpsValues(): FetchResult<F> | undefined {
    return this.values;
  }

  override begin(env?: HookEnv): void {
    this.env = env;
  }

  override async end(session: Session): Promise<void> {
    if (this.finalOps === null) return;
    try {
      this.values = (await session.run(this.finalOps as Fetches, this.finalOpsFeedDict)) as FetchResult<F>;
    } catch (e) {
      // A line and a `warning` event, as every hook's warnings (a display counting them sees it).
      if (e instanceof OutOfRangeError || e instanceof StopIteration) warn(this.own, this.env, OUT_OF_RANGE_WARNING, e);
      throw e;
    }
  }
}
