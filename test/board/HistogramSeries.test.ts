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

/** A histogram of `k` buckets for `step`: bucket i is (i, i + 1] holding `step`. */
const appendK = (s: HistogramSeries, step: number, k: number): ReturnType<HistogramSeries["append"]> =>
  s.append(step, 1000 + step, Array.from({ length: k }, (_, i) => i), Array.from({ length: k }, (_, i) => i + 1), Array.from({ length: k }, () => step));

describe("HistogramSeries: the byte budget (the board's thinning policy, as images and text)", () => {
  /** 30 buckets: 30 × 24 + 28 = 748 bytes a histogram. */
  const ONE = 748;

  it("keeps every histogram up to the budget, then drops every other step, keeping the first and the newest", () => {
    const s = new HistogramSeries(ONE * 10);
    for (let step = 0; step < 10; step++) expect(appendK(s, step, 30)).toBeUndefined();
    expect(s.length).toBe(10);
    expect(s.heldBytes).toBe(ONE * 10);
    expect(s.droppedSteps).toBe(0);
    // The 11th is one too many: steps 1, 3, 5, 7, 9 go.
    expect(appendK(s, 10, 30)).toEqual({ dropped: 5, kept: 6 });
    expect(rows(s).map((r) => r[1])).toEqual([0, 2, 4, 6, 8, 10]);
    expect(s.droppedSteps).toBe(5);
    // The buckets moved with their steps.
    expect(rows(s)[3]?.[2].slice(0, 3)).toEqual([0, 1, 6]);
    expect(rows(s)[3]?.[0]).toBe(1006);
    // From now on a new step is kept at the spacing (every 2nd); the newest is there meanwhile.
    appendK(s, 11, 30);
    expect(rows(s).map((r) => r[1])).toEqual([0, 2, 4, 6, 8, 10, 11]);
    appendK(s, 12, 30);
    expect(rows(s).map((r) => r[1])).toEqual([0, 2, 4, 6, 8, 10, 12]);
    expect(s.droppedSteps).toBe(6);
  });

  it("over a long run: within the budget, evenly spread over the whole run, the first and the newest there, a handful of thinnings", () => {
    const budget = ONE * 64;
    const s = new HistogramSeries(budget);
    let thinnings = 0;
    for (let step = 0; step < 10_000; step++) {
      if (appendK(s, step, 30) !== undefined) thinnings++;
      expect(s.heldBytes).toBeLessThanOrEqual(budget);
      expect(s.lastStep).toBe(step);
    }
    const steps = rows(s).map((r) => r[1]);
    expect(steps[0]).toBe(0);
    expect(steps.at(-1)).toBe(9_999);
    expect(steps.length).toBeGreaterThanOrEqual(32);
    expect(steps.length).toBeLessThanOrEqual(64);
    expect(s.droppedSteps).toBe(10_000 - steps.length);
    // Each thinning doubled the spacing: the kept steps are 2^thinnings apart, the newest after them.
    expect(thinnings).toBeGreaterThanOrEqual(7);
    expect(thinnings).toBeLessThanOrEqual(9);
    const gaps = steps.slice(1).map((x, i) => x - (steps[i] as number));
    expect(new Set(gaps.slice(0, -1))).toEqual(new Set([2 ** thinnings]));
    expect(gaps.at(-1)).toBeLessThanOrEqual(2 ** thinnings);
    // The columns, spare capacity included, stay near the budget (the bucket column: budget + one histogram).
    expect(s.byteLength).toBeLessThanOrEqual(budget + ONE + 0.1 * budget);
  });

  it("many buckets: a histogram larger than the budget keeps only the first and the newest", () => {
    const s = new HistogramSeries(100_000);
    for (let step = 0; step < 5; step++) appendK(s, step, 10_000); // 240 KB each
    expect(rows(s).map((r) => r[1])).toEqual([0, 4]);
    expect(s.droppedSteps).toBe(3);
    expect(rows(s)[1]?.[2]).toHaveLength(30_000);
  });

  it("a restart's purge after thinning frees its bytes; the steps written again are kept at the spacing", () => {
    const s = new HistogramSeries(ONE * 8);
    for (let step = 0; step < 9; step++) appendK(s, step, 30); // thinned to 0, 2, 4, 6, 8
    expect(rows(s).map((r) => r[1])).toEqual([0, 2, 4, 6, 8]);
    expect(s.purgeFrom(4)).toBe(3);
    expect(s.heldBytes).toBe(ONE * 2);
    for (let step = 4; step < 10; step++) expect(appendK(s, step, 30)).toBeUndefined();
    expect(rows(s).map((r) => r[1])).toEqual([0, 2, 5, 7, 9]);
    expect(s.heldBytes).toBe(ONE * 5);
  });

  it("forEach(row, only) visits just the indices asked, in order, ignoring those out of range", () => {
    const s = new HistogramSeries();
    for (let step = 0; step < 6; step++) appendK(s, step * 10, 2);
    const seen: number[] = [];
    s.forEach((_, step) => seen.push(step), [0, 3, 5, 9]);
    expect(seen).toEqual([0, 30, 50]);
  });
});

describe("ViewStore options", () => {
  it("a budget that is not a positive number is refused with a one-line error naming it", () => {
    for (const name of ["imageBytesPerTag", "histogramBytesPerTag", "textBytesPerTag"] as const) {
      for (const bad of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
        expect(() => new ViewStore({ [name]: bad })).toThrow(new RegExp(`^${name} must be a positive number of bytes`));
      }
    }
    const v = new ViewStore();
    expect([v.imageBudgetBytes, v.histogramBudgetBytes, v.textBudgetBytes]).toEqual([32 << 20, 16 << 20, 4 << 20]);
  });
});
