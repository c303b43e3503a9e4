/**
 * `SummarySaverHook`: fetches summary ops every N steps or N seconds, in the same run as the
 * training step, and writes what they return to TensorBoard (TensorFlow's
 * `tf.estimator.SummarySaverHook`). Also how a summary op's result becomes TensorBoard values
 * ({@link toSummaryValues}) and the helpers that mark a value's kind ({@link summaries}).
 *
 * @module
 */

import { systemClock } from "../src/Clock.js";
import { InvalidArgumentError, ValueError } from "../src/errors.js";
import type { Fetches, Session } from "../src/Session.js";
import {
  SessionRunArgs,
  SessionRunHook,
  type HookEnv,
  type SessionRunContext,
  type SessionRunValues,
} from "../src/SessionRunHook.js";
import {
  fileWriterCache,
  histogramValue,
  imageValue,
  scalarValue,
  tensorSummaryValue,
  textValue,
  type HistogramInput,
  type HistogramOptions,
  type ImageInput,
  type Int64,
  type ScalarOptions,
  type DisplayOptions,
  type SessionLogStatus,
  type Summary,
  type SummaryValue,
  type TensorSummaryMetadata,
} from "../src/summary/index.js";
import type { TensorValue } from "../src/Tensor.js";
import { globalStepNameOf, readGlobalStep, stepValue } from "./internal/globalStep.js";
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

/** The kinds of {@link MarkedSummary}. */
export type MarkedSummaryKind = "scalar" | "histogram" | "text" | "image" | "tensor";

/** The key that marks a {@link MarkedSummary} and holds its kind. */
export const markedSummaryKind: unique symbol = Symbol.for("monitored-session/MarkedSummary");

/**
 * A value whose summary kind is marked, built by the {@link summaries} helpers. A summary op
 * returns one (alone or inside a record) to write a histogram, text, an image or a tensor.
 */
export interface MarkedSummary {
  readonly [markedSummaryKind]: MarkedSummaryKind;
  /** The tag, if given; otherwise the op's name or record key names it. */
  readonly tag: string | undefined;
  /** Builds the summary value under `tag`. */
  toSummaryValue(tag: string): SummaryValue;
}

/** An explicit tag for a {@link summaries} helper; it replaces the name the position gives. */
export interface TagOption {
  readonly tag?: string | undefined;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

const marked = (kind: MarkedSummaryKind, tag: string | undefined, build: (tag: string) => SummaryValue): MarkedSummary => ({
  [markedSummaryKind]: kind,
  tag,
  toSummaryValue: build,
});

/**
 * Helpers a summary op returns to say what kind of summary a value is. Plain numbers need no
 * helper: they are scalars.
 *
 * @example
 * ```ts
 * graph.op("summaries", (ctx) => ({
 *   loss: ctx.run("loss"),                                       // a scalar
 *   "layer1/weights": summaries.histogram(ctx.read(weights)),    // a histogram
 *   samples: summaries.image({ pixels, height: 28, width: 28, channels: 1 }),
 * }));
 * ```
 */
export const summaries = {
  /** A scalar with options (e.g. `{ simpleValue: true }` for the TF1 form, or a display name). */
  scalar: (value: number, options: ScalarOptions & TagOption = {}): MarkedSummary =>
    marked("scalar", options.tag, (tag) => scalarValue(tag, value, withoutTag(options))),
  /** A histogram of numbers, a typed array or a numeric tensor. */
  histogram: (values: HistogramInput, options: HistogramOptions & TagOption = {}): MarkedSummary =>
    marked("histogram", options.tag, (tag) => histogramValue(tag, values, withoutTag(options))),
  /** Markdown text (an array of strings is shown as a table). */
  text: (text: string | readonly string[], options: DisplayOptions & TagOption = {}): MarkedSummary =>
    marked("text", options.tag, (tag) => textValue(tag, text, withoutTag(options))),
  /** An image: PNG bytes or 8-bit pixels. */
  image: (image: ImageInput, options: DisplayOptions & TagOption = {}): MarkedSummary =>
    marked("image", options.tag, (tag) => imageValue(tag, image, withoutTag(options))),
  /** Any tensor for the plugin named in `metadata`. */
  tensor: (value: TensorValue, metadata: TensorSummaryMetadata & TagOption): MarkedSummary =>
    marked("tensor", metadata.tag, (tag) => tensorSummaryValue(tag, value, withoutTag(metadata))),
} as const;

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
 * // Write `loss` and `accuracy` as scalars every 100 steps.
 * new SummarySaverHook({ saveSteps: 100, outputDir: "runs/exp1", summaryOp: ["loss", "accuracy"] });
 * ```
 */
export class SummarySaverHook extends SessionRunHook {
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
    const saveSteps = options.saveSteps ?? undefined;
    const saveSecs = options.saveSecs ?? undefined;
    if (saveSteps === undefined && saveSecs === undefined) {
      throw new ValueError("Either saveSecs or saveSteps should be provided.");
    }
    if (saveSteps !== undefined && saveSecs !== undefined) {
      throw new ValueError("Can not provide both saveSecs and saveSteps.");
    }
    if (saveSteps !== undefined && !(Number.isSafeInteger(saveSteps) && saveSteps > 0)) {
      throw new ValueError(`saveSteps must be a positive integer, got ${String(saveSteps)}`);
    }
    if (saveSecs !== undefined && !(typeof saveSecs === "number" && Number.isFinite(saveSecs) && saveSecs >= 0)) {
      throw new ValueError(`saveSecs must be a finite number >= 0, got ${String(saveSecs)}`);
    }
    const outputDir = options.outputDir ?? undefined;
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
    this.timer = new SecondOrStepTimer({
      everySteps: this.saveSteps,
      everySecs: this.saveSecs,
      clock: env?.clock ?? systemClock,
    });
    this.writer =
      this.ownWriter ??
      fileWriterCache.getWriter(this.outputDir as string, env === undefined ? {} : { clock: env.clock, logger: env.logger });
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

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * The TensorBoard values for what a summary op returned. `fetches` is the summary op as
 * fetched (`null` for a function's result) and `result` the value the run gave for it.
 *
 * Tags: a value returned by a named op is tagged with the op's name; a record key (in the
 * fetches or in the returned value) names what is under it, and nested keys join with `/`.
 * So `"loss"` → `loss`; `["loss", "accuracy"]` → `loss`, `accuracy`; an op `metrics` returning
 * `{ loss, accuracy }` → `loss`, `accuracy`; `{ train: "metrics" }` → `train/loss`,
 * `train/accuracy`; `{ train_loss: "loss" }` → `train_loss`.
 *
 * Values:
 * - a number, a bigint, or a one-element typed array or numeric tensor → a scalar;
 * - a {@link summaries} helper's value → that kind (its `tag` option, if any, replaces the tag);
 * - a `SummaryValue` or a `Summary` (from the summary module) → as is, with its own tags;
 * - a plain record → its entries, each under its key; an array → its elements;
 * - `null` / `undefined` → nothing.
 *
 * Anything else (a string, an array of numbers, a larger tensor...) throws
 * `InvalidArgumentError` naming the tag and saying which helper to use, as does a tag given
 * twice or a number with no name (a function op must return a record).
 */
export const toSummaryValues = (fetches: Fetches, result: unknown): SummaryValue[] => {
  const out: SummaryValue[] = [];
  walkFetches(fetches, result, "", false, out);
  const seen = new Set<string>();
  for (const v of out) {
    if (seen.has(v.tag)) throw new InvalidArgumentError(`summary tag "${v.tag}" is written twice in one step`);
    seen.add(v.tag);
  }
  return out;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const join = (prefix: string, key: string): string => (prefix === "" ? key : `${prefix}/${key}`);

const withoutTag = <O extends TagOption>(options: O): Omit<O, "tag"> => {
  const { tag: _tag, ...rest } = options;
  return rest;
};

/** `named`: the position is a record key, which then names a single value instead of the op. */
const walkFetches = (fetches: Fetches, result: unknown, prefix: string, named: boolean, out: SummaryValue[]): void => {
  if (fetches === null) {
    walkValue(result, prefix, prefix, out);
  } else if (typeof fetches === "string") {
    walkValue(result, prefix, named ? prefix : join(prefix, fetches), out);
  } else if (Array.isArray(fetches)) {
    const results = result as readonly unknown[];
    fetches.forEach((f: Fetches, i) => walkFetches(f, results[i], prefix, false, out));
  } else {
    const results = result as Readonly<Record<string, unknown>>;
    for (const [key, f] of Object.entries(fetches as Readonly<Record<string, Fetches>>)) {
      walkFetches(f, results[key], join(prefix, key), true, out);
    }
  }
};

/** `prefix` names a record's entries; `tag` names a single value at this position. */
const walkValue = (value: unknown, prefix: string, tag: string, out: SummaryValue[]): void => {
  if (value === null || value === undefined) return;
  if (typeof value === "number" || typeof value === "bigint") {
    out.push(scalarValue(needTag(tag, value), Number(value)));
    return;
  }
  if (typeof value !== "object") {
    const hint = typeof value === "string" ? "; return summaries.text(value) to write text" : "";
    throw new InvalidArgumentError(`summary ${describeTag(tag)}: cannot write a ${typeof value}${hint}`);
  }
  if (isMarked(value)) {
    out.push(value.toSummaryValue(value.tag ?? needTag(tag, value)));
    return;
  }
  if (isSummaryValue(value)) {
    out.push(value);
    return;
  }
  if (isSummary(value)) {
    out.push(...value.value);
    return;
  }
  const numbers = numericElements(value);
  if (numbers !== undefined) {
    if (numbers.length === 1) {
      out.push(scalarValue(needTag(tag, value), Number(numbers[0])));
      return;
    }
    throw new InvalidArgumentError(
      `summary ${describeTag(tag)}: ${numbers.length} numbers are not a scalar; ` +
        "return summaries.histogram(values) to write a histogram",
    );
  }
  if (Array.isArray(value)) {
    for (const v of value) walkValue(v, prefix, tag, out);
    return;
  }
  const proto = Object.getPrototypeOf(value) as unknown;
  if (proto === Object.prototype || proto === null) {
    for (const [key, v] of Object.entries(value)) {
      const t = join(prefix, key);
      walkValue(v, t, t, out);
    }
    return;
  }
  const name = (value as { constructor?: { name?: string } }).constructor?.name ?? "object";
  throw new InvalidArgumentError(`summary ${describeTag(tag)}: cannot write a ${name}; use a summaries helper`);
};

const needTag = (tag: string, value: unknown): string => {
  if (tag !== "") return tag;
  const what = typeof value === "number" || typeof value === "bigint" ? String(value) : "a value";
  throw new InvalidArgumentError(
    `summary: ${what} has no tag; a function summary op must return a record such as { loss: 0.3 }, or give a tag`,
  );
};

const describeTag = (tag: string): string => (tag === "" ? "(no tag)" : `"${tag}"`);

const isMarked = (v: object): v is MarkedSummary => markedSummaryKind in v;

const SUMMARY_VALUE_KINDS = ["simpleValue", "tensor", "histo", "image", "audio", "obsoleteOldStyleHistogram"] as const;

const isSummaryValue = (v: object): v is SummaryValue =>
  typeof (v as { tag?: unknown }).tag === "string" && SUMMARY_VALUE_KINDS.some((k) => k in v);

const isSummary = (v: object): v is Summary => {
  const list = (v as { value?: unknown }).value;
  return Array.isArray(list) && list.length > 0 && list.every((e) => typeof e === "object" && e !== null && isSummaryValue(e));
};

const NUMERIC_DTYPES = new Set(["float32", "float64", "int32", "int64"]);

/** The elements of a numeric typed array, a numeric tensor or an array of numbers; else `undefined`. */
const numericElements = (v: object): ArrayLike<number | bigint> | undefined => {
  if (ArrayBuffer.isView(v) && !(v instanceof DataView)) return v as unknown as ArrayLike<number | bigint>;
  if (Array.isArray(v)) {
    return v.length > 0 && v.every((e) => typeof e === "number" || typeof e === "bigint") ? v : undefined;
  }
  const t = v as Partial<TensorValue>;
  if (typeof t.dtype === "string" && Array.isArray(t.shape) && t.data !== undefined && NUMERIC_DTYPES.has(t.dtype)) {
    return t.data as ArrayLike<number | bigint>;
  }
  return undefined;
};
