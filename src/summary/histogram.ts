/**
 * Histogram summaries: bucketing values into equal-width buckets and writing them as TF2 does
 * (a `[k, 3]` float tensor of `(left, right, count)` rows, plugin `"histograms"`), or as the
 * legacy TF1 `HistogramProto` on request.
 *
 * @module
 */

import { InvalidArgumentError } from "../errors.js";
import type { TensorValue } from "../session/Tensor.js";
import { DataClass, DataType, type HistogramProto, type SummaryValue } from "./EventProto.js";
import { checkTag, displayMetadata, type DisplayOptions, PluginName, pluginMetadata } from "./summaryValues.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Buckets and moments of a set of values. Bucket `i` spans `[left[i], right[i]]`. */
export interface Histogram {
  readonly left: Float64Array;
  readonly right: Float64Array;
  readonly count: Float64Array;
  readonly min: number;
  readonly max: number;
  readonly num: number;
  readonly sum: number;
  readonly sumSquares: number;
}

/** Options of {@link histogramValue}. */
export interface HistogramOptions extends DisplayOptions {
  /** The number of buckets (default 30, TF2's and tfjs-node's default). */
  readonly buckets?: number;
  /** Write a legacy `HistogramProto` (`histo`) instead of the TF2 tensor. Default `false`. */
  readonly legacy?: boolean;
}

/** What a histogram can be computed from: numbers, a typed array, or a numeric tensor. */
export type HistogramInput = ArrayLike<number> | TensorValue;

/** TF2's default bucket count. */
const DEFAULT_HISTOGRAM_BUCKETS = 30;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * A histogram of `values` as a summary value.
 *
 * @example
 * ```ts
 * import { histogramValue } from "monitored-session/summary";
 *
 * histogramValue("weights", new Float32Array([0.1, 0.5, 0.5, 2]), { buckets: 10 });
 * ```
 */
export const histogramValue = (
  tag: string,
  values: HistogramInput,
  options: HistogramOptions = {},
): SummaryValue => {
  checkTag(tag);
  const h = computeHistogram(toNumbers(tag, values), options.buckets ?? DEFAULT_HISTOGRAM_BUCKETS, tag);
  if (options.legacy === true) {
    const metadata = displayMetadata(options);
    return metadata === undefined ? { tag, histo: histogramProto(h) } : { tag, histo: histogramProto(h), metadata };
  }
  const k = h.count.length;
  const rows = new Float32Array(k * 3);
  for (let i = 0; i < k; i++) {
    rows[3 * i] = h.left[i] as number;
    rows[3 * i + 1] = h.right[i] as number;
    rows[3 * i + 2] = h.count[i] as number;
  }
  return {
    tag,
    tensor: {
      dtype: DataType.DT_FLOAT,
      tensorShape: { dim: [{ size: k }, { size: 3 }] },
      tensorContent: littleEndianFloat32(rows),
    },
    metadata: pluginMetadata(PluginName.histograms, DataClass.DATA_CLASS_TENSOR, options),
  };
};

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Buckets `values` into `bucketCount` equal-width buckets over `[min, max]` (the maximum falls
 * in the last bucket), as TF2's `tf.summary.histogram` does. With no values every bucket is
 * empty `[0, 0]`; when all values are equal every bucket is `[v, v]` and the first holds them all.
 * Throws `InvalidArgumentError` on NaN or infinite values.
 */
export const computeHistogram = (
  values: ArrayLike<number>,
  bucketCount: number = DEFAULT_HISTOGRAM_BUCKETS,
  tag = "histogram",
): Histogram => {
  if (!Number.isInteger(bucketCount) || bucketCount < 1) {
    throw new InvalidArgumentError(`histogram "${tag}": buckets must be a positive integer, got ${bucketCount}`);
  }
  const n = values.length;
  let min = Number.POSITIVE_INFINITY;
  let max = Number.NEGATIVE_INFINITY;
  let sum = 0;
  let sumSquares = 0;
  for (let i = 0; i < n; i++) {
    const v = values[i] as number;
    if (!Number.isFinite(v)) {
      throw new InvalidArgumentError(`histogram "${tag}": value at index ${i} is ${v}; values must be finite`);
    }
    if (v < min) min = v;
    if (v > max) max = v;
    sum += v;
    sumSquares += v * v;
  }
  const left = new Float64Array(bucketCount);
  const right = new Float64Array(bucketCount);
  const count = new Float64Array(bucketCount);
  if (n === 0) return { left, right, count, min: 0, max: 0, num: 0, sum: 0, sumSquares: 0 };
  if (min === max) {
    left.fill(min);
    right.fill(min);
    count[0] = n;
    return { left, right, count, min, max, num: n, sum, sumSquares };
  }
  const width = (max - min) / bucketCount;
  for (let i = 0; i < bucketCount; i++) {
    left[i] = min + i * width;
    right[i] = i === bucketCount - 1 ? max : min + (i + 1) * width;
  }
  for (let i = 0; i < n; i++) {
    const b = Math.min(bucketCount - 1, Math.floor(((values[i] as number) - min) / width));
    count[b] = (count[b] as number) + 1;
  }
  return { left, right, count, min, max, num: n, sum, sumSquares };
};

/** A {@link Histogram} as a legacy `HistogramProto` (bucket limits are the right edges). */
const histogramProto = (h: Histogram): HistogramProto => ({
  min: h.min,
  max: h.max,
  num: h.num,
  sum: h.sum,
  sumSquares: h.sumSquares,
  bucketLimit: h.right,
  bucket: h.count,
});

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const toNumbers = (tag: string, values: HistogramInput): ArrayLike<number> => {
  if (!("dtype" in values)) return values;
  switch (values.dtype) {
    case "float32":
    case "float64":
    case "int32":
    case "bool":
      return values.data as ArrayLike<number>;
    case "int64":
      return Array.from(values.data as BigInt64Array, Number);
    case "string":
      throw new InvalidArgumentError(`histogram "${tag}": cannot histogram a string tensor`);
  }
};

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

const littleEndianFloat32 = (rows: Float32Array): Uint8Array => {
  if (LITTLE_ENDIAN) return new Uint8Array(rows.buffer);
  const out = new Uint8Array(rows.length * 4);
  const view = new DataView(out.buffer);
  for (let i = 0; i < rows.length; i++) view.setFloat32(i * 4, rows[i] as number, true);
  return out;
};
