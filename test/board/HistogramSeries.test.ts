import { describe, expect, it } from "vitest";

import { HistogramSeries } from "../../src/board/HistogramSeries.js";
import { ViewStore } from "../../src/board/ViewStore.js";

/** The rows of a series as plain arrays. */
const rows = (s: HistogramSeries): [number, number, number[]][] => {
  const out: [number, number, number[]][] = [];
  s.forEach((w, step, b) => out.push([w, step, [...b]]));
  return out;
};

describe("HistogramSeries: every histogram in typed-array columns", () => {
  it("keeps every point as appended, its buckets (left, right, count) intact, across growth", () => {
    const s = new HistogramSeries();
    for (let step = 0; step < 100; step++) {
      const k = (step % 40) + 1; // bucket counts vary, past the initial capacity
      s.append(step, 1000 + step, Array.from({ length: k }, (_, i) => i), Array.from({ length: k }, (_, i) => i + 1), Array.from({ length: k }, () => step));
    }
    expect(s.length).toBe(100);
    expect(s.lastStep).toBe(99);
    const r = rows(s);
    expect(r[57]?.[0]).toBe(1057);
    expect(r[57]?.[2]).toHaveLength(3 * 18);
    expect(r[57]?.[2].slice(0, 6)).toEqual([0, 1, 57, 1, 2, 57]);
    expect(s.byteLength).toBeGreaterThan(0);
  });

  it("purgeFrom(step) removes the points at step >= step wherever they are, and the rest keep their buckets", () => {
    const s = new HistogramSeries();
    for (const step of [0, 5, 1, 6, 2]) s.append(step, step, [step], [step + 1], [step * 10]);
    expect(s.purgeFrom(5)).toBe(2);
    expect(rows(s)).toEqual([
      [0, 0, [0, 1, 0]],
      [1, 1, [1, 2, 10]],
      [2, 2, [2, 3, 20]],
    ]);
    s.append(3, 3, [3], [4], [30]);
    expect(rows(s).map((r) => r[1])).toEqual([0, 1, 2, 3]);
    expect(s.purgeFrom(0)).toBe(4);
    expect(s.lastStep).toBeNull();
  });
});

describe("ViewStore options", () => {
  it("an image budget that is not a positive number is refused with a one-line error", () => {
    for (const bad of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => new ViewStore(bad)).toThrow(/^imageBytesPerTag must be a positive number of bytes/);
    }
  });
});
