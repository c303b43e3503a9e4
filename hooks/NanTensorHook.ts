/**
 * `NanTensorHook`: stops training when the loss becomes NaN (TensorFlow's
 * `tf.estimator.NanTensorHook`).
 *
 * @module
 */

import { Bool, decodeOptions, defaulted, NonEmptyString, required, struct } from "../src/codec.js";
import { NanLossDuringTrainingError } from "../src/errors.js";
import type { Logger } from "../src/Logger.js";
import {
  SessionRunArgs,
  SessionRunHook,
  type HookEnv,
  type SessionRunContext,
  type SessionRunValues,
} from "../src/hook/SessionRunHook.js";
import { hookServices, warn, type OwnServices } from "./internal/services.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link NanTensorHook}. */
export interface NanTensorHookOptions {
  /** The name of the loss to watch. */
  readonly lossTensor: string;
  /**
   * `true` (the default): throw `NanLossDuringTrainingError`. `false`: log a warning and
   * request a stop.
   */
  readonly failOnNanLoss?: boolean | undefined;
  /** Where the divergence message goes (default: the session's logger). */
  readonly logger?: Logger | undefined;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Fetches the loss with every run and, if it is NaN, logs "Model diverged with loss = NaN." and
 * either throws {@link NanLossDuringTrainingError} or requests a stop (then the message is also
 * emitted as a `warning` event). A tensor loss counts as NaN if any element is.
 *
 * @example
 * ```ts
 * import { NanTensorHook } from "monitored-session/hooks";
 *
 * const hooks = [new NanTensorHook({ lossTensor: "loss" })];
 * // a diverging model: sess.run("train") rejects with NanLossDuringTrainingError
 * // a diverging model: sess.run("train") rejects with NanLossDuringTrainingError
 * ```
 */
export class NanTensorHook extends SessionRunHook {
  /** The codec of the options, shared with the configuration registry. */
  static readonly optionsCodec = struct("NanTensorHook", "Stops (or fails) when the loss is NaN.", {
    lossTensor: required(NonEmptyString, "The name of the loss to watch."),
    failOnNanLoss: defaulted(Bool, "Throw `NanLossDuringTrainingError` (`true`) or log and stop (`false`).", true),
  });

  private readonly args: SessionRunArgs;
  private readonly failOnNanLoss: boolean;
  private readonly own: OwnServices;
  private logger: Logger;
  private env: HookEnv | undefined;

  constructor(options: NanTensorHookOptions) {
    super();
    const o = decodeOptions(NanTensorHook.optionsCodec, options, "NanTensorHook");
    this.args = SessionRunArgs(o.lossTensor);
    this.failOnNanLoss = o.failOnNanLoss;
    this.own = { logger: options?.logger };
    this.logger = hookServices(this.own).logger;
  }

  override begin(env?: HookEnv): void {
    this.logger = hookServices(this.own, env).logger;
    this.env = env;
  }

  override beforeRun(_ctx: SessionRunContext): SessionRunArgs {
    return this.args;
  }

  override afterRun(ctx: SessionRunContext, values: SessionRunValues): void {
    if (!isNan(values.results)) return;
    const failureMessage = "Model diverged with loss = NaN.";
    if (this.failOnNanLoss) {
      this.logger.error(failureMessage);
      throw new NanLossDuringTrainingError();
    }
    warn(this.own, this.env, failureMessage);
    // No error: a stop without an exception.
    ctx.requestStop();
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const isNan = (v: unknown): boolean => {
  if (typeof v === "number") return Number.isNaN(v);
  if (v instanceof Float32Array || v instanceof Float64Array) return v.some(Number.isNaN);
  if (Array.isArray(v)) return v.some(isNan);
  if (typeof v === "object" && v !== null && "data" in v) return isNan((v as { data: unknown }).data);
  return false;
};
