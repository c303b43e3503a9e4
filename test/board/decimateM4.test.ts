import { describe, expect, it } from "vitest";

import { decimateM4 } from "../../src/board/decimateM4.js";

const columnOf = (step: number, lo: number, hi: number, pixels: number): number => Math.min(pixels - 1, Math.floor(((step - lo) / (hi - lo)) * pixels));

describe("decimateM4: min/max per pixel column (dashboards.md §5)", () => {
  const n = 100_000;
  const steps = Int32Array.from({ length: n }, (_, i) => i * 3);
  const values = Float32Array.from({ length: n }, (_, i) => Math.sin(i / 1000) + (i === 31_337 ? 50 : 0) - (i === 77_777 ? 40 : 0));

  it("keeps the first and last points, at most 4 per column, and every spike", () => {
    const pixels = 640;
    const kept = decimateM4(steps, values, { pixels });
    expect(kept[0]).toBe(0);
    expect(kept.at(-1)).toBe(n - 1);
    expect(kept).toContain(31_337);
    expect(kept).toContain(77_777);
    const perColumn = new Map<number, number>();
    for (const i of kept) {
      const c = columnOf(steps[i] as number, 0, (n - 1) * 3, pixels);
      perColumn.set(c, (perColumn.get(c) ?? 0) + 1);
    }
    expect(Math.max(...perColumn.values())).toBeLessThanOrEqual(4);
    expect(perColumn.size).toBe(pixels);
    expect([...kept]).toEqual([...kept].sort((a, b) => a - b));
    expect(new Set(kept).size).toBe(kept.length);
  });

  it("each column keeps exactly its first, last, lowest and highest point", () => {
    const pixels = 50;
    const kept = new Set(decimateM4(steps, values, { pixels }));
    const hi = (n - 1) * 3;
    const cols = new Map<number, number[]>();
    for (let i = 0; i < n; i++) {
      const c = columnOf(steps[i] as number, 0, hi, pixels);
      const col = cols.get(c);
      if (col === undefined) cols.set(c, [i]);
      else col.push(i);
    }
    for (const idx of cols.values()) {
      const vs = idx.map((i) => values[i] as number);
      const expected = new Set([idx[0], idx.at(-1), idx[vs.indexOf(Math.min(...vs))], idx[vs.indexOf(Math.max(...vs))]]);
      expect(idx.filter((i) => kept.has(i))).toEqual([...expected].sort((a, b) => (a as number) - (b as number)));
    }
  });

  it("a zoom keeps only the steps in range, cut into the same number of columns", () => {
    const kept = decimateM4(steps, values, { pixels: 10, minStep: 90_000, maxStep: 99_000 });
    expect(kept.length).toBeLessThanOrEqual(40);
    for (const i of kept) expect(steps[i]).toBeGreaterThanOrEqual(90_000);
    for (const i of kept) expect(steps[i]).toBeLessThanOrEqual(99_000);
    expect(kept).toContain(31_337); // step 94,011: the spike is in the zoomed range
    expect(steps[kept[0] as number]).toBe(90_000);
    expect(steps[kept.at(-1) as number]).toBe(99_000);
  });

  it("a series shorter than the columns comes back whole; one step, an empty range and an empty series", () => {
    expect([...decimateM4([1, 2, 3], [5, 6, 7], { pixels: 800 })]).toEqual([0, 1, 2]);
    expect([...decimateM4([7, 7, 7, 7, 7, 7], [1, 9, 2, 8, 3, 4], { pixels: 100 })]).toEqual([0, 1, 5]); // one column: first (and lowest), highest, last
    expect(decimateM4([1, 2, 3], [1, 2, 3], { pixels: 10, minStep: 5, maxStep: 9 })).toHaveLength(0);
    expect(decimateM4([], [], { pixels: 10 })).toHaveLength(0);
  });

  it("NaN takes no part in the min/max but is kept as a column's first or last; ±Infinity are extremes", () => {
    const kept = [...decimateM4([0, 1, 2, 3, 4], [Number.NaN, 1, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 0], { pixels: 1 })];
    expect(kept).toEqual([0, 2, 3, 4]);
  });
});
