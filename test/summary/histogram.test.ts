import { describe, expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/errors.js";
import { tensor } from "../../src/session/Tensor.js";
import { DataClass, DataType, encodeSummary } from "../../src/summary/EventProto.js";
import { computeHistogram, histogramValue } from "../../src/summary/histogram.js";
import { decodeSummary, float32s } from "./decoder.js";

describe("computeHistogram", () => {
  it("buckets values into equal-width buckets over [min, max], the max in the last bucket", () => {
    const h = computeHistogram([0, 1, 1, 2, 3, 4], 4);
    expect([...h.left]).toEqual([0, 1, 2, 3]);
    expect([...h.right]).toEqual([1, 2, 3, 4]);
    expect([...h.count]).toEqual([1, 2, 1, 2]);
    expect(h).toMatchObject({ min: 0, max: 4, num: 6, sum: 11, sumSquares: 31 });
  });

  it("puts all equal values in the first bucket, every bucket [v, v]", () => {
    const h = computeHistogram([2, 2, 2], 3);
    expect([...h.left]).toEqual([2, 2, 2]);
    expect([...h.right]).toEqual([2, 2, 2]);
    expect([...h.count]).toEqual([3, 0, 0]);
  });

  it("gives empty buckets for no values", () => {
    const h = computeHistogram([], 5);
    expect([...h.count]).toEqual([0, 0, 0, 0, 0]);
    expect(h.num).toBe(0);
  });

  it("counts every value exactly once", () => {
    const values = Float64Array.from({ length: 1000 }, (_, i) => Math.sin(i) * 10);
    const h = computeHistogram(values, 30);
    expect(h.count.reduce((a, b) => a + b, 0)).toBe(1000);
    for (let i = 0; i < 30; i++) {
      const inBucket = values.filter((v) => v >= (h.left[i] as number) && (i === 29 ? v <= (h.right[i] as number) : v < (h.right[i] as number)));
      expect(h.count[i]).toBe(inBucket.length);
    }
  });

  it("rejects NaN, infinities and bad bucket counts with clear errors", () => {
    expect(() => computeHistogram([1, Number.NaN], 3, "w")).toThrow(/histogram "w": value at index 1 is NaN/);
    expect(() => computeHistogram([Number.POSITIVE_INFINITY])).toThrow(InvalidArgumentError);
    expect(() => computeHistogram([1], 0, "w")).toThrow(/buckets must be a positive integer/);
  });
});

describe("histogramValue", () => {
  it("is TF2's form: a [k,3] float tensor of (left, right, count), plugin histograms, data class TENSOR", () => {
    const [v] = decodeSummary(encodeSummary({ value: [histogramValue("w", [0, 1, 1, 2, 3, 4], { buckets: 4 })] })).value ?? [];
    expect(v?.tensor?.dtype).toBe(DataType.DT_FLOAT);
    expect(v?.tensor?.tensorShape?.dim).toEqual([{ size: "4" }, { size: "3" }]);
    expect(float32s(v?.tensor?.tensorContent)).toEqual([0, 1, 1, 1, 2, 2, 2, 3, 1, 3, 4, 2]);
    expect(v?.metadata?.pluginData?.pluginName).toBe("histograms");
    expect(v?.metadata?.dataClass).toBe(DataClass.DATA_CLASS_TENSOR);
  });

  it("writes the legacy HistogramProto on request", () => {
    const [v] =
      decodeSummary(encodeSummary({ value: [histogramValue("w", Float32Array.of(0, 1, 1, 2, 3, 4), { buckets: 4, legacy: true })] }))
        .value ?? [];
    expect({ ...v?.histo, min: v?.histo?.min ?? 0 }).toEqual({ min: 0, max: 4, num: 6, sum: 11, sumSquares: 31, bucketLimit: [1, 2, 3, 4], bucket: [1, 2, 1, 2] });
    expect(v?.tensor).toBeUndefined(); // min 0 is a proto3 default, hence omitted on the wire
  });

  it("accepts numeric tensors and rejects string tensors", () => {
    const [v] = decodeSummary(encodeSummary({ value: [histogramValue("w", tensor("int64", [3], BigInt64Array.of(1n, 2n, 3n)), { buckets: 2 })] })).value ?? [];
    expect(float32s(v?.tensor?.tensorContent)).toEqual([1, 2, 1, 2, 3, 2]);
    expect(() => histogramValue("s", tensor("string", [1], ["a"]))).toThrow(/cannot histogram a string tensor/);
  });
});
