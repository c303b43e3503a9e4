/**
 * `BudgetedSamples`: the generic list under a byte budget that `TextSeries` and `ImageSeries`
 * keep their steps in (the board's thinning policy, thinning.ts): within the budget after every
 * write unless only the first and the newest are left; the first and the newest always kept; the
 * others every 2^k-th arrival; every drop counted; a purge frees its bytes without counting.
 */
import { describe, expect, it } from "vitest";

import { BudgetedSamples } from "../../src/board/budgetedSamples.js";

interface Sample {
  readonly step: number;
}

const steps = (s: BudgetedSamples<Sample>): number[] => s.items.map((x) => x.step);
const gapsOf = (kept: number[]): number[] => kept.slice(1).map((x, i) => x - (kept[i] as number));

describe("BudgetedSamples", () => {
  it("keeps every sample up to the budget; over it, doubles the spacing until it fits, and reports the thinning", () => {
    const s = new BudgetedSamples<Sample>(1000);
    for (let step = 0; step < 10; step++) expect(s.add({ step }, 100)).toBeUndefined();
    expect(s.heldBytes).toBe(1000);
    expect(s.add({ step: 10 }, 100)).toEqual({ dropped: 5, kept: 6 });
    expect(steps(s)).toEqual([0, 2, 4, 6, 8, 10]);
    expect(s.heldBytes).toBe(600);
    expect(s.droppedSteps).toBe(5);
  });

  it("after a thinning, a newest sample off the spacing is replaced by the next one (and counted)", () => {
    const s = new BudgetedSamples<Sample>(1000);
    for (let step = 0; step <= 10; step++) s.add({ step }, 100);
    s.add({ step: 11 }, 100);
    expect(steps(s)).toEqual([0, 2, 4, 6, 8, 10, 11]);
    s.add({ step: 12 }, 100);
    expect(steps(s)).toEqual([0, 2, 4, 6, 8, 10, 12]);
    expect(s.droppedSteps).toBe(6);
    expect(s.heldBytes).toBe(700);
  });

  it("over a long run: within the budget after every write, the first and the newest kept, the rest evenly spread by arrival", () => {
    const budget = 64 * 10;
    const s = new BudgetedSamples<Sample>(budget);
    let thinnings = 0;
    for (let i = 0; i < 5_000; i++) {
      // Steps 100 apart: the spacing counts arrivals, not step numbers.
      if (s.add({ step: i * 100 }, 10) !== undefined) thinnings++;
      expect(s.heldBytes).toBeLessThanOrEqual(budget);
      expect(s.items.at(-1)?.step).toBe(i * 100);
    }
    const kept = steps(s);
    expect(kept[0]).toBe(0);
    expect(kept.length).toBeGreaterThanOrEqual(32);
    expect(kept.length).toBeLessThanOrEqual(64);
    expect(s.droppedSteps).toBe(5_000 - kept.length);
    const gaps = gapsOf(kept);
    expect(new Set(gaps.slice(0, -1))).toEqual(new Set([100 * 2 ** thinnings]));
    expect(gaps.at(-1)).toBeLessThanOrEqual(100 * 2 ** thinnings);
  });

  it("samples larger than the budget: only the first and the newest are left, over the budget", () => {
    const s = new BudgetedSamples<Sample>(150);
    for (let step = 0; step < 5; step++) s.add({ step }, 100);
    expect(steps(s)).toEqual([0, 4]);
    expect(s.heldBytes).toBe(200);
    expect(s.droppedSteps).toBe(3);
  });

  it("grow counts more bytes for the newest sample and thins as add does", () => {
    const s = new BudgetedSamples<Sample>(500);
    for (let step = 0; step < 5; step++) s.add({ step }, 50);
    expect(s.grow(50)).toBeUndefined();
    expect(s.heldBytes).toBe(300);
    expect(s.grow(250)).toEqual({ dropped: 2, kept: 3 });
    expect(steps(s)).toEqual([0, 2, 4]);
    // The newest kept its grown size.
    expect(s.heldBytes).toBe(50 + 50 + 350);
  });

  it("without a budget keeps everything", () => {
    const s = new BudgetedSamples<Sample>();
    for (let step = 0; step < 1_000; step++) expect(s.add({ step }, 1 << 20)).toBeUndefined();
    expect(s.items).toHaveLength(1_000);
    expect(s.droppedSteps).toBe(0);
  });

  it("a restart's purge removes the samples at step >= s and their bytes, without counting them as dropped", () => {
    const s = new BudgetedSamples<Sample>(1000);
    for (let step = 0; step < 9; step++) s.add({ step }, 100);
    expect(s.purgeFrom(4)).toBe(5);
    expect(steps(s)).toEqual([0, 1, 2, 3]);
    expect(s.heldBytes).toBe(400);
    expect(s.droppedSteps).toBe(0);
    expect(s.purgeFrom(100)).toBe(0);
  });
});
