/**
 * `SummarySaverHook`: fetches summary ops every N steps or N seconds, in the same run as the
 * training step, and writes what they return to TensorBoard (TensorFlow's
 * `tf.estimator.SummarySaverHook`). How a summary op's result becomes TensorBoard values is
 * `toSummaryValues`, in the summary module.
 *
 * @module
 */

import { systemClock, type Clock } from "../src/time/Clock.js";
import { decodeOptions, exactlyOneOf, NonEmptyString, NonNegativeNumber, optional, PositiveInt, struct } from "../src/codec.js";
import { ValueError } from "../src/errors.js";
import type { Fetches, Session } from "../src/session/Session.js";
import {
  SessionRunArgs,
  SessionRunHook,
  type HookEnv,
  type SessionRunContext,
  type SessionRunValues,
} from "../src/hook/SessionRunHook.js";
import { fileWriterCache, toSummaryValues, type Int64, type SessionLogStatus, type Summary, type SummaryValue } from "../src/summary/index.js";
import { globalStepNameOf, readGlobalStep, stepValue } from "./internal/globalStep.js";
import { hookServices } from "./internal/services.js";
import { SecondOrStepTimer } from "./SecondOrStepTimer.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/**
 * What produces the summaries: session op names fetched in the training run (a name, an array
 * or a record of names, as for `session.run`), or a function of the raw session, called after
 * the run on the steps that write. See {@link toSummaryValues} for how results become values.
 */
export type SummaryOp = Fetches | ((session: Session) => unknown);

/** Where the hook writes: a `SummaryWriter`, or anything with these methods. */
export interface SummarySink {
  addSummary(summary: Summary | readonly SummaryValue[], step: Int64): void;
  addSessionLog(status: SessionLogStatus, step: Int64): void;
  flush(): Promise<void>;
}

/** Options of {@link SummarySaverHook}. */
export interface SummarySaverHookOptions {
  /** Write every this many global steps. Exactly one of `saveSteps` and `saveSecs`. */
  readonly saveSteps?: number | null | undefined;
  /** Write every this many seconds of the session's clock (0: every step). */
  readonly saveSecs?: number | null | undefined;
  /** The log directory; its writer comes from `fileWriterCache`. Ignored if `summaryWriter` is given. */
  readonly outputDir?: string | null | undefined;
  /** The writer to use instead of the cached one for `outputDir`. */
  readonly summaryWriter?: SummarySink | null | undefined;
  /** Takes the summary op from `scaffold.summaryOp` (read when the session is created). */
  readonly scaffold?: { readonly summaryOp?: SummaryOp | undefined } | null | undefined;
  /** The summary op. Exactly one of `scaffold` and `summaryOp`. */
  readonly summaryOp?: SummaryOp | null | undefined;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Writes summaries every `saveSteps` steps or `saveSecs` seconds, with TensorFlow's semantics:
 *
 * - It predicts the step each run will reach (`nextStep`), so that the summary op is fetched in
 *   the same run as the training step. With `saveSteps: 8` over 30 runs, summaries land at
 *   steps 1, 9, 17 and 25.
 * - The first run of each session writes `SessionLog(START)` and the summaries at the true
 *   global step. After a restore from step k that step is k + 1, so TensorBoard drops what a
 *   previous run wrote at steps > k (see docs/tensorboard.md, "After a restore").
 * - `end` flushes the writer.
 *
 * Runs that do not write fetch only the global step, reuse the same run arguments, and return
 * no promise.
 *
 * Unlike TensorFlow, which does it once per `begin`, the hook also writes START after an
 * in-process recovery (each `afterCreateSession`): the new session restored a checkpoint, which
 * may have rolled the step back.
 *
 * @example
 * ```ts
 * import { SummarySaverHook } from "monitored-session/hooks";
 *
 * // Write `loss` and `accuracy` as scalars every 100 steps.
 * new SummarySaverHook({ saveSteps: 100, outputDir: "runs/exp1", summaryOp: ["loss", "accuracy"] });
 * ```
 */
export class SummarySaverHook extends SessionRunHook {
  /**
   * The codec of the data options (`null` counts as absent, as Python's None), shared with the
   * configuration registry, which adds `summaryOp` as fetches.
   */
  static readonly optionsCodec = struct(
    "SummarySaverHook",
    "Writes summaries every N steps or seconds (in addition to the one `summaries` configures).",
    {
      outputDir: optional(NonEmptyString, "The log directory (relative to the file)."),
      saveSteps: optional(PositiveInt, "Write every this many steps."),
      saveSecs: optional(NonNegativeNumber, "Write every this many seconds (`0`: every step)."),
    },
    exactlyOneOf("saveSteps", "saveSecs"),
  );

  private readonly saveSteps: number | undefined;
  private readonly saveSecs: number | undefined;
  private readonly outputDir: string | undefined;
  private readonly ownWriter: SummarySink | undefined;
  private readonly scaffold: { readonly summaryOp?: SummaryOp | undefined } | undefined;
  private readonly ownSummaryOp: SummaryOp | undefined;
  private timer: SecondOrStepTimer;
  private writer: SummarySink | undefined;
  private globalStepName: string | undefined;
  private summaryOp: SummaryOp | undefined;
  /** Arguments of a run that does not write: the global step only. */
  private idleArgs: SessionRunArgs | undefined;
  /** Arguments of a run that writes: the global step and the fetchable summary op. */
  private writeArgs: SessionRunArgs | undefined;
  /** The global step the next run is expected to reach; `undefined` before a session's first run. */
  private nextStep: number | undefined;
  private requested = false;
  private clock: Clock = systemClock;
  private env: HookEnv | undefined;

  /**
   * Throws `ValueError`, checking in TensorFlow's order: exactly one of `scaffold` and
   * `summaryOp`; exactly one of `saveSteps` and `saveSecs` (and a valid value); one of
   * `outputDir` and `summaryWriter`.
   */
  constructor(options: SummarySaverHookOptions) {
    super();
    const scaffold = options.scaffold ?? undefined;
    const summaryOp = options.summaryOp ?? undefined;
    if ((scaffold === undefined) === (summaryOp === undefined)) {
      throw new ValueError("Exactly one of scaffold or summaryOp must be provided.");
    }
    const { saveSteps, saveSecs, outputDir } = decodeOptions(
      SummarySaverHook.optionsCodec,
      { saveSteps: options.saveSteps ?? undefined, saveSecs: options.saveSecs ?? undefined, outputDir: options.outputDir ?? undefined },
      "SummarySaverHook",
    );
    const summaryWriter = options.summaryWriter ?? undefined;
    if (outputDir === undefined && summaryWriter === undefined) {
      throw new ValueError("One of outputDir or summaryWriter must be provided.");
    }
    this.saveSteps = saveSteps;
    this.saveSecs = saveSecs;
    this.outputDir = outputDir;
    this.ownWriter = summaryWriter;
    this.scaffold = scaffold;
    this.ownSummaryOp = summaryOp;
    this.timer = new SecondOrStepTimer({ everySteps: saveSteps, everySecs: saveSecs });
  }

  override begin(env?: HookEnv): void {
    this.env = env;
    this.clock = hookServices({}, env).clock;
    this.timer = new SecondOrStepTimer({
      everySteps: this.saveSteps,
      everySecs: this.saveSecs,
      clock: this.clock,
    });
    this.writer =
      this.ownWriter ??
      (env?.writerCache ?? fileWriterCache).getWriter(this.outputDir as string, env === undefined ? {} : { clock: env.clock, logger: env.logger });
    this.nextStep = undefined;
    this.idleArgs = undefined;
  }

  override afterCreateSession(session: Session): void {
    this.resolve(session);
    // A new session may have restored an older checkpoint: write START at its first step.
    this.nextStep = undefined;
  }

  override beforeRun(ctx: SessionRunContext): SessionRunArgs {
    if (this.idleArgs === undefined) this.resolve(ctx.session);
    const next = this.nextStep;
    this.requested = next === undefined || this.timer.shouldTriggerForStep(next);
    return (this.requested ? this.writeArgs : this.idleArgs) as SessionRunArgs;
  }

  override afterRun(ctx: SessionRunContext, values: SessionRunValues): void | Promise<void> {
    if (!this.requested) {
      // The fetched step predates this run's increment: this run reached stale + 1.
      this.nextStep = stepValue(values.results) + 2;
      return;
    }
    return this.write(ctx.session, values.results);
  }

  override end(): Promise<void> | void {
    return this.writer?.flush();
  }

  private async write(session: Session, results: unknown): Promise<void> {
    const op = this.summaryOp;
    const fetched = this.writeArgs !== this.idleArgs;
    const startMs = this.env === undefined ? 0 : this.clock.now();
    const [step, produced] = await Promise.all([
      readGlobalStep(session, this.globalStepName as string),
      typeof op === "function" ? op(session) : undefined,
    ]);
    // Build every value before writing anything, so a bad result writes nothing.
    const summaryValues =
      typeof op === "function"
        ? toSummaryValues(null, produced)
        : fetched
          ? toSummaryValues(op as Fetches, (results as { summary: unknown }).summary)
          : [];
    const writer = this.writer as SummarySink;
    if (this.nextStep === undefined) writer.addSessionLog("START", step);
    this.timer.updateLastTriggeredStep(step);
    if (summaryValues.length > 0) writer.addSummary(summaryValues, step);
    this.nextStep = step + 1;
    if (this.env !== undefined && summaryValues.length > 0) {
      const time = this.clock.now();
      this.env.emit({ type: "summaryWritten", time, globalStep: step, durationMs: time - startMs, hook: "SummarySaverHook" });
    }
  }

  private resolve(session: Session): void {
    const name = globalStepNameOf(session, "SummarySaverHook");
    const op = this.ownSummaryOp ?? this.scaffold?.summaryOp ?? undefined;
    if (name === this.globalStepName && op === this.summaryOp && this.idleArgs !== undefined) return;
    this.globalStepName = name;
    this.summaryOp = op;
    this.idleArgs = SessionRunArgs(name);
    this.writeArgs =
      op === undefined || op === null || typeof op === "function"
        ? this.idleArgs
        : SessionRunArgs({ globalStep: name, summary: op });
  }
}
