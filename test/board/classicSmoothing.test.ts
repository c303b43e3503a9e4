import { describe, expect, it } from "vitest";

import { classicSmoothing } from "../../src/board/classicSmoothing.js";

describe("classicSmoothing: TensorBoard's debiased EMA (dashboards.md §3)", () => {
  it("TensorBoard's examples at w = 0.6: [1,2,3] and [1,NaN,3]", () => {
    const a = classicSmoothing([1, 2, 3], 0.6);
    expect(a[0]).toBeCloseTo(1, 12);
    expect(a[1]).toBeCloseTo(1.625, 12);
    expect(a[2]).toBeCloseTo(2.326530612244898, 12);
    const b = classicSmoothing([1, Number.NaN, 3], 0.6);
    expect(b[0]).toBeCloseTo(1, 12);
    expect(b[1]).toBeNaN();
    expect(b[2]).toBeCloseTo(2.25, 12);
  });

  it("non-finite values pass through without moving the average", () => {
    const s = classicSmoothing([2, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 2], 0.9);
    expect([...s]).toEqual([2, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, expect.closeTo(2, 12)]);
  });

  it("w = 0 (or non-finite) is the identity; w is clamped to [0, 1]; at w = 1 every finite output is 0, as in TensorBoard", () => {
    expect([...classicSmoothing([3, 1, 2], 0)]).toEqual([3, 1, 2]);
    expect([...classicSmoothing([3, 1, 2], Number.NaN)]).toEqual([3, 1, 2]);
    expect([...classicSmoothing([3, 1, 2], -5)]).toEqual([3, 1, 2]);
    expect([...classicSmoothing([3, 1, 2], 7)]).toEqual([0, 0, 0]);
    expect([...classicSmoothing([3, 1, 2], 1)]).toEqual([0, 0, 0]);
  });

  it("a constant series is returned unchanged (TensorBoard #786); an empty one is empty", () => {
    expect([...classicSmoothing([0.1, 0.1, 0.1], 0.99)]).toEqual([0.1, 0.1, 0.1]);
    expect(classicSmoothing([], 0.6)).toHaveLength(0);
  });

  it("walks in array order and matches the recurrence on a long float32 series", () => {
    const values = Float32Array.from({ length: 1000 }, (_, i) => Math.sin(i / 7) + (i % 13 === 0 ? 5 : 0));
    const w = 0.95;
    const out = classicSmoothing(values, w);
    let last = 0;
    for (let i = 0; i < values.length; i++) {
      last = last * w + (1 - w) * (values[i] as number);
      expect(out[i]).toBeCloseTo(last / (1 - w ** (i + 1)), 10);
    }
  });
});
