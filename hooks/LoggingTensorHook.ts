/**
 * `LoggingTensorHook`: logs the values of named tensors every N local iterations, every N
 * seconds and/or at the end (TensorFlow's `tf.estimator.LoggingTensorHook`).
 *
 * @module
 */

import type { Clock } from "../src/time/Clock.js";
import * as t from "io-ts";

import { Bool, decodeOptions, defaulted, NonEmptyString, oneOf, optional, PositiveNumber, required, SafeInt, struct } from "../src/codec.js";
import type { Logger } from "../src/Logger.js";
import type { Session } from "../src/session/Session.js";
import {
  SessionRunArgs,
  SessionRunHook,
  type HookEnv,
  type SessionRunContext,
  type SessionRunValues,
} from "../src/hook/SessionRunHook.js";
import { formatFixed3, formatValue } from "./internal/format.js";
import { hookServices, type OwnServices } from "./internal/services.js";
import { NeverTriggerTimer, SecondOrStepTimer, type HookTimer } from "./SecondOrStepTimer.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Fetched values by tag, as given to a {@link LoggingTensorHookOptions.formatter}. */
export type LoggedValues = Readonly<Record<string, unknown>>;

/** Options of {@link LoggingTensorHook}: `atEnd` and/or exactly one of `everyNIter` and `everyNSecs`. */
export interface LoggingTensorHookOptions {
  /**
   * What to log. An array of names logs each under its own name, in the given order; a record
   * maps tags to names and logs them in sorted tag order.
   */
  readonly tensors: readonly string[] | Readonly<Record<string, string>>;
  /** Log every this many local iterations (runs of this session, not global steps). */
  readonly everyNIter?: number | undefined;
  /** Log every this many seconds. */
  readonly everyNSecs?: number | undefined;
  /** Also fetch and log the tensors once more in `end`. */
  readonly atEnd?: boolean | undefined;
  /** Builds the whole log line from the values by tag (replaces the default format). */
  readonly formatter?: ((values: LoggedValues) => string) | undefined;
  /** Time source (default: the session's clock). */
  readonly clock?: Clock | undefined;
  /** Where lines go, at `info` (default: the session's logger). */
  readonly logger?: Logger | undefined;
}

/** Tensor names: a list, or a record of tags to names. */
export const TensorNames = oneOf("a list of names or a record of tags to names", [t.array(NonEmptyString), t.record(t.string, NonEmptyString)] as const);

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Logs `"tag = value, tag = value (1.234 sec)"` on the first run, then every `everyNIter`
 * iterations or `everyNSecs` seconds; the time is the one since the previous line and is left
 * out of the first. The count is local: the first run of every session that `begin`s this hook
 * logs, whatever the global step. Runs that do not log fetch nothing extra.
 *
 * @example
 * ```ts
 * import { LoggingTensorHook } from "monitored-session/hooks";
 *
 * new LoggingTensorHook({ tensors: { loss: "loss", step: "global_step" }, everyNIter: 100 });
 * // INFO loss = 0.25, step = 1200 (3.517 sec)
 * new LoggingTensorHook({ tensors: ["accuracy"], atEnd: true, formatter: (v) => `acc=${v["accuracy"]}` });
 * // INFO loss = 0.25, step = 1200 (3.517 sec)
 * new LoggingTensorHook({ tensors: ["accuracy"], atEnd: true, formatter: (v) => `acc=${v["accuracy"]}` });
 * ```
 */
export class LoggingTensorHook extends SessionRunHook {
  /** The codec of the options (all but `formatter`, `clock`, `logger`), shared with the configuration registry. */
  static readonly optionsCodec = struct(
    "LoggingTensorHook",
    "Logs tensors every N steps or seconds, and/or at the end.",
    {
      tensors: required(TensorNames, "The tensors to log: names, or tags to names."),
      everyNIter: optional(SafeInt, "Log every this many runs (a positive integer)."),
      everyNSecs: optional(PositiveNumber, "Log every this many seconds."),
      atEnd: defaulted(Bool, "Also log at the end.", false),
    },
    // TensorFlow's words, which ported tests match on: "invalid every_n_iter", "exactly one of".
    (v) => (v.everyNIter !== undefined && v.everyNIter <= 0 ? [{ message: `invalid every_n_iter=${v.everyNIter}: everyNIter must be a positive integer` }] : []),
    (v) =>
      (v.everyNIter === undefined) === (v.everyNSecs === undefined) && !(v.atEnd === true && v.everyNIter === undefined)
        ? [
            {
              message: `either atEnd and/or exactly one of everyNIter and everyNSecs must be given (got ${v.everyNIter === undefined ? "neither" : `everyNIter: ${v.everyNIter}, everyNSecs: ${String(v.everyNSecs)}`})`,
            },
          ]
        : [],
  );

  private readonly tagOrder: readonly string[];
  private readonly args: SessionRunArgs;
  private readonly everyNIter: number | undefined;
  private readonly everyNSecs: number | undefined;
  private readonly onlyLogAtEnd: boolean;
  private readonly atEnd: boolean;
  private readonly formatter: ((values: LoggedValues) => string) | undefined;
  private readonly own: OwnServices;
  private timer: HookTimer;
  private logger: Logger;
  private iterCount = 0;
  private shouldTrigger = false;

  constructor(options: LoggingTensorHookOptions) {
    super();
    const o = decodeOptions(LoggingTensorHook.optionsCodec, options, "LoggingTensorHook");
    const { everyNIter, everyNSecs } = o;
    const atEnd = o.atEnd;
    const onlyLogAtEnd = atEnd && everyNIter === undefined && everyNSecs === undefined;
    let fetches: Record<string, string>;
    if (Array.isArray(o.tensors)) {
      this.tagOrder = [...(o.tensors as readonly string[])];
      fetches = Object.fromEntries(this.tagOrder.map((name) => [name, name]));
    } else {
      fetches = { ...(o.tensors as Readonly<Record<string, string>>) };
      this.tagOrder = Object.keys(fetches).sort();
    }
    this.args = SessionRunArgs(fetches);
    this.everyNIter = everyNIter;
    this.everyNSecs = everyNSecs;
    this.onlyLogAtEnd = onlyLogAtEnd;
    this.atEnd = atEnd;
    this.formatter = options.formatter;
    this.own = { clock: options.clock, logger: options.logger };
    const { clock, logger } = hookServices(this.own);
    this.logger = logger;
    this.timer = this.makeTimer(clock);
  }

  override begin(env?: HookEnv): void {
    const { clock, logger } = hookServices(this.own, env);
    this.timer = this.makeTimer(clock);
    this.logger = logger;
    this.iterCount = 0;
  }

  override beforeRun(_ctx: SessionRunContext): SessionRunArgs | undefined {
    this.shouldTrigger = this.timer.shouldTriggerForStep(this.iterCount);
    return this.shouldTrigger ? this.args : undefined;
  }

  override afterRun(_ctx: SessionRunContext, values: SessionRunValues): void {
    if (this.shouldTrigger) this.logTensors(values.results as LoggedValues);
    this.iterCount++;
  }

  override end(session: Session): void | Promise<void> {
    if (!this.atEnd) return;
    return session.run(this.args.fetches).then((values) => this.logTensors(values as LoggedValues));
  }

  private logTensors(values: LoggedValues): void {
    const [elapsedSecs] = this.timer.updateLastTriggeredStep(this.iterCount);
    if (this.formatter !== undefined) {
      this.logger.info(this.formatter(values));
      return;
    }
    let line = "";
    for (const tag of this.tagOrder) {
      line += `${line.length === 0 ? "" : ", "}${tag} = ${formatValue(values[tag])}`;
    }
    this.logger.info(elapsedSecs === undefined ? line : `${line} (${formatFixed3(elapsedSecs)} sec)`);
  }

  private makeTimer(clock: Clock): HookTimer {
    return this.onlyLogAtEnd
      ? new NeverTriggerTimer()
      : new SecondOrStepTimer({ everySteps: this.everyNIter, everySecs: this.everyNSecs, clock });
  }
}
