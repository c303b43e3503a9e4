/**
 * `StepCounterHook`: measures training speed in global steps per second, logs it and writes it
 * as a scalar summary (TensorFlow's `tf.estimator.StepCounterHook`).
 *
 * @module
 */

import * as t from "io-ts";

import type { Clock } from "../src/time/Clock.js";
import { atMostOneOf, decodeOptions, NonEmptyString, oneOf, optional, PositiveInt, PositiveNumber, struct } from "../src/codec.js";
import { ValueError } from "../src/errors.js";
import type { Logger } from "../src/Logger.js";
import type { Session } from "../src/session/Session.js";
import { fileWriterCache } from "../src/summary/FileWriterCache.js";
import {
  SessionRunArgs,
  SessionRunHook,
  type HookEnv,
  type SessionRunContext,
  type SessionRunValues,
} from "../src/hook/SessionRunHook.js";
import { formatG } from "./internal/format.js";
import { globalStepNameOf, readGlobalStep, stepValue } from "./internal/globalStep.js";
import { hookServices, warn, type OwnServices } from "./internal/services.js";
import { SecondOrStepTimer } from "./SecondOrStepTimer.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Where the hook writes its `<global step>/sec` scalar (a summary writer, a metrics sink...). */
export interface ScalarSummaryWriter {
  addScalar(tag: string, value: number, step: number): void;
}

/** Options of {@link StepCounterHook}: exactly one of `everyNSteps` and `everyNSecs`. */
export interface StepCounterHookOptions {
  /**
   * Measure every this many global steps. Defaults to 100 as in TensorFlow, so counting by
   * seconds needs `everyNSteps: null`.
   */
  readonly everyNSteps?: number | null | undefined;
  /** Measure every this many seconds. */
  readonly everyNSecs?: number | null | undefined;
  /** Receives `<global step name>/sec` at the true global step of each measurement. */
  readonly summaryWriter?: ScalarSummaryWriter | undefined;
  /**
   * Writes the rate to this log directory, through the writer `fileWriterCache` holds for it
   * (TensorFlow's `output_dir`). Ignored if `summaryWriter` is given.
   */
  readonly outputDir?: string | undefined;
  /** Time source (default: the session's clock). */
  readonly clock?: Clock | undefined;
  /** Where the rate and warnings go (default: the session's logger). */
  readonly logger?: Logger | undefined;
  /**
   * The examples one global step consumes (in data-parallel training, the global batch: the
   * per-replica batch × the replicas). With it the hook also writes and logs `examples/sec`.
   * Default: none (TensorFlow's behaviour, steps only).
   */
  readonly examplesPerStep?: number | undefined;
  /**
   * @internal How many global steps one run advances (TensorFlow's `_set_steps_per_run`,
   * used by multi-step loops). Default 1.
   */
  readonly stepsPerRun?: number | undefined;
}

const MAX_NOT_INCREASED_WARNINGS = 5;
/** The tag of the examples rate (with `examplesPerStep`). */
const EXAMPLES_TAG = "examples/sec";

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Logs `"<global step name>/sec: <rate>"` every `everyNSteps` steps or `everyNSecs` seconds and
 * writes the rate to `summaryWriter` at the true global step. The first measurement only
 * anchors the timer: with `everyNSteps: 10` over 30 runs, rates appear at steps 11 and 21.
 *
 * If the global step does not move between runs, it warns (at most 5 times, each also emitted
 * as a `warning` event) that the train op probably does not increment it.
 *
 * @example
 * ```ts
 * // @prelude docs/preludes/session.ts
 * import { StepCounterHook } from "monitored-session/hooks";
 *
 * const hooks = [new StepCounterHook({ everyNSteps: 500, summaryWriter: writer })];
 * // INFO global_step/sec: 1234.5
 * // INFO global_step/sec: 1234.5
 * ```
 */
export class StepCounterHook extends SessionRunHook {
  /** The codec of the data options, shared with the configuration registry. */
  static readonly optionsCodec = struct(
    "StepCounterHook",
    "Logs and records the global steps per second.",
    {
      everyNSteps: optional(oneOf("a positive integer or null", [PositiveInt, t.null] as const), "Measure every this many steps.", "100 (in a file: unless everyNSecs is given)"),
      everyNSecs: optional(oneOf("a positive number or null", [PositiveNumber, t.null] as const), "Measure every this many seconds."),
      outputDir: optional(NonEmptyString, "Write `global_step/sec` summaries to this log directory (relative to the file)."),
    },
    atMostOneOf("everyNSteps", "everyNSecs"),
  );

  private timer: SecondOrStepTimer;
  private readonly everyNSteps: number | undefined;
  private readonly everyNSecs: number | undefined;
  private readonly stepsPerRun: number;
  private readonly examplesPerStep: number | undefined;
  private readonly ownSummaryWriter: ScalarSummaryWriter | undefined;
  private readonly outputDir: string | undefined;
  private summaryWriter: ScalarSummaryWriter | undefined;
  private readonly own: OwnServices;
  private clock: Clock;
  private logger: Logger;
  private env: HookEnv | undefined;
  private globalStepName: string | undefined;
  private args: SessionRunArgs | undefined;
  private summaryTag = "";
  private lastGlobalStep: number | undefined;
  private notIncreasedWarnings = 0;

  constructor(options: StepCounterHookOptions = {}) {
    super();
    const o = decodeOptions(StepCounterHook.optionsCodec, options, "StepCounterHook");
    // `null` is Python's None: `undefined` takes TensorFlow's default of 100.
    const everyNSteps = o.everyNSteps === undefined ? 100 : (o.everyNSteps ?? undefined);
    const everyNSecs = o.everyNSecs ?? undefined;
    if ((everyNSteps === undefined) === (everyNSecs === undefined)) {
      throw new ValueError(
        "exactly one of everyNSteps and everyNSecs should be provided (everyNSteps defaults to 100: pass everyNSteps: null to count by seconds).",
      );
    }
    this.everyNSteps = everyNSteps;
    this.everyNSecs = everyNSecs;
    this.stepsPerRun = options.stepsPerRun ?? 1;
    if (options.examplesPerStep !== undefined && !(options.examplesPerStep > 0)) throw new ValueError(`StepCounterHook: examplesPerStep must be a positive number, got ${options.examplesPerStep}`);
    this.examplesPerStep = options.examplesPerStep;
    this.ownSummaryWriter = options.summaryWriter;
    this.summaryWriter = options.summaryWriter;
    this.outputDir = o.outputDir;
    this.own = { clock: options.clock, logger: options.logger };
    ({ clock: this.clock, logger: this.logger } = hookServices(this.own));
    this.timer = this.makeTimer(this.clock);
  }

  override begin(env?: HookEnv): void {
    ({ clock: this.clock, logger: this.logger } = hookServices(this.own, env));
    this.timer = this.makeTimer(this.clock);
    this.summaryWriter =
      this.ownSummaryWriter ??
      (this.outputDir === undefined
        ? undefined
        : (env?.writerCache ?? fileWriterCache).getWriter(this.outputDir, env === undefined ? {} : { clock: env.clock, logger: env.logger }));
    this.env = env;
    this.lastGlobalStep = undefined;
    this.notIncreasedWarnings = 0;
  }

  override afterCreateSession(session: Session): void {
    this.resolve(session);
  }

  override beforeRun(ctx: SessionRunContext): SessionRunArgs {
    return this.args ?? this.resolve(ctx.session);
  }

  override afterRun(ctx: SessionRunContext, values: SessionRunValues): void | Promise<void> {
    const stale = stepValue(values.results);
    if (this.timer.shouldTriggerForStep(stale + this.stepsPerRun)) {
      // The fetched step predates this run's increment: measure at the true one.
      return readGlobalStep(ctx.session, this.globalStepName as string).then((step) => {
        this.measure(step);
        this.checkIncreased(stale);
      });
    }
    this.checkIncreased(stale);
  }

  private measure(step: number): void {
    if (!this.timer.shouldTriggerForStep(step)) return;
    const [elapsedSecs, elapsedSteps] = this.timer.updateLastTriggeredStep(step);
    // TensorFlow divides by zero here (its float clock makes that a freak event). A
    // millisecond clock can see two triggers in one tick, which has no rate: skip it.
    if (elapsedSecs === undefined || elapsedSecs <= 0) return;
    const stepsPerSec = elapsedSteps / elapsedSecs;
    const env = this.env;
    const writer = this.summaryWriter;
    if (writer !== undefined) {
      const startMs = env === undefined ? 0 : this.clock.now();
      writer.addScalar(this.summaryTag, stepsPerSec, step);
      if (env !== undefined) {
        const time = this.clock.now();
        env.emit({ type: "summaryWritten", time, globalStep: step, durationMs: time - startMs, hook: "StepCounterHook" });
      }
    }
    const examplesPerSec = this.examplesPerStep === undefined ? undefined : stepsPerSec * this.examplesPerStep;
    if (examplesPerSec !== undefined) writer?.addScalar(EXAMPLES_TAG, examplesPerSec, step);
    // TensorFlow's lines (on the session's event logger, they are `log` events), then the rate as data.
    this.logger.info(`${this.summaryTag}: ${formatG(stepsPerSec)}`, { step, stepsPerSec });
    if (examplesPerSec !== undefined) this.logger.info(`${EXAMPLES_TAG}: ${formatG(examplesPerSec)}`, { step, examplesPerSec });
    env?.emit({
      type: "stepRate",
      time: this.clock.now(),
      globalStep: step,
      stepsPerSec,
      tag: this.summaryTag,
      ...(examplesPerSec === undefined ? {} : { examplesPerSec }),
    });
  }

  private checkIncreased(stale: number): void {
    // Compared with the previous stale read, not the timer's step, which may come from a
    // different read.
    if (stale === this.lastGlobalStep && this.notIncreasedWarnings < MAX_NOT_INCREASED_WARNINGS) {
      this.notIncreasedWarnings++;
      const message =
        `It seems that global step (${this.globalStepName as string}) has not been increased. ` +
        `Current value (could be stable): ${stale} vs previous value: ${this.lastGlobalStep}. ` +
        "You could increase the global step by incrementing it in your train op.";
      warn(this.own, this.env, message);
    }
    this.lastGlobalStep = stale;
  }

  private resolve(session: Session): SessionRunArgs {
    const name = globalStepNameOf(session, "StepCounterHook");
    if (name !== this.globalStepName || this.args === undefined) {
      this.globalStepName = name;
      this.summaryTag = `${name}/sec`;
      this.args = SessionRunArgs(name);
    }
    return this.args;
  }

  private makeTimer(clock: Clock): SecondOrStepTimer {
    return new SecondOrStepTimer({ everySteps: this.everyNSteps, everySecs: this.everyNSecs, clock });
  }
}
