/**
 * Summary ops: how what a session op returns becomes TensorBoard values
 * ({@link toSummaryValues}), and the helpers that mark a value's kind ({@link summaries}).
 * Used by `SummarySaverHook` and by `Supervisor`'s summary service, so that a summary op means
 * the same thing everywhere.
 *
 * @module
 */

import { InvalidArgumentError } from "../errors.js";
import type { Fetches } from "../session/Session.js";
import type { TensorValue } from "../session/Tensor.js";
import type { Summary, SummaryValue } from "./EventProto.js";
import { histogramValue, type HistogramInput, type HistogramOptions } from "./histogram.js";
import { imageValue, type ImageInput } from "./image.js";
import {
  scalarValue,
  tensorSummaryValue,
  textValue,
  type DisplayOptions,
  type ScalarOptions,
  type TensorSummaryMetadata,
} from "./summaryValues.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The kinds of {@link MarkedSummary}. */
export type MarkedSummaryKind = "scalar" | "histogram" | "text" | "image" | "tensor";

/** The key that marks a {@link MarkedSummary} and holds its kind. */
const markedSummaryKind: unique symbol = Symbol.for("monitored-session/MarkedSummary");

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
 * import { Graph } from "monitored-session";
 * import { summaries } from "monitored-session/summary";
 *
 * const graph = new Graph();
 * const weights = graph.variable("layer1/weights", new Float32Array(64));
 * graph.op("loss", () => 0.25);
 * const pixels = new Uint8Array(28 * 28); // one grey sample
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
