/**
 * `TextSeries`: text summaries of one (run, tag) under a byte budget, thinned as images and
 * histograms are (the board's policy, thinning.ts): the first and the newest always kept, the rest
 * evenly spread, every drop counted.
 */
import { describe, expect, it } from "vitest";

import { TextSeries } from "../../src/board/TextSeries.js";

const point = (step: number, text: string | string[]) => {
  const t = typeof text === "string" ? [text] : text;
  return { step, wallTime: 1000 + step, text: t, shape: typeof text === "string" ? [] : [t.length] };
};
const steps = (s: TextSeries): number[] => s.points.map((p) => p.step);

/** A step of one 920-byte ASCII string counts 920 + 16 + 64 = 1000 bytes. */
const KB_TEXT = "x".repeat(920);

describe("TextSeries: the byte budget", () => {
  it("counts UTF-8 bytes, 16 a string and 64 a step", () => {
    const s = new TextSeries();
    s.add(point(0, KB_TEXT));
    expect(s.heldBytes).toBe(1000);
    s.add(point(1, ["é", "€", "😀"])); // 2 + 3 + 4 bytes in UTF-8
    expect(s.heldBytes).toBe(1000 + 9 + 3 * 16 + 64);
  });

  it("keeps every step up to the budget, then every other one, the first and the newest always; each drop counted", () => {
    const s = new TextSeries(10_000);
    for (let step = 0; step < 10; step++) expect(s.add(point(step, KB_TEXT))).toBeUndefined();
    expect(s.add(point(10, KB_TEXT))).toEqual({ dropped: 5, kept: 6 });
    expect(steps(s)).toEqual([0, 2, 4, 6, 8, 10]);
    s.add(point(11, KB_TEXT));
    s.add(point(12, KB_TEXT));
    expect(steps(s)).toEqual([0, 2, 4, 6, 8, 10, 12]);
    expect(s.droppedSteps).toBe(6);
    expect(s.heldBytes).toBe(7000);
  });

  it("over a long run stays within the budget, evenly spread; empty strings are bounded too (each step counts its record)", () => {
    const s = new TextSeries(64 * 80); // 64 steps of one empty string (16 + 64 bytes)
    let thinnings = 0;
    for (let step = 0; step < 5_000; step++) {
      if (s.add(point(step, "")) !== undefined) thinnings++;
      expect(s.heldBytes).toBeLessThanOrEqual(64 * 80);
    }
    const kept = steps(s);
    expect(kept[0]).toBe(0);
    expect(kept.at(-1)).toBe(4_999);
    expect(kept.length).toBeLessThanOrEqual(64);
    expect(kept.length).toBeGreaterThanOrEqual(32);
    expect(s.droppedSteps).toBe(5_000 - kept.length);
    const gaps = kept.slice(1).map((x, i) => x - (kept[i] as number));
    expect(new Set(gaps.slice(0, -1))).toEqual(new Set([2 ** thinnings]));
  });

  it("a text larger than the budget: the first and the newest are kept", () => {
    const s = new TextSeries(1_500);
    for (let step = 0; step < 4; step++) s.add(point(step, KB_TEXT));
    expect(steps(s)).toEqual([0, 3]);
    expect(s.droppedSteps).toBe(2);
  });

  it("a restart's purge removes the steps >= s and their bytes", () => {
    const s = new TextSeries();
    for (let step = 0; step < 5; step++) s.add(point(step, KB_TEXT));
    expect(s.purgeFrom(3)).toBe(2);
    expect(steps(s)).toEqual([0, 1, 2]);
    expect(s.heldBytes).toBe(3000);
    expect(s.droppedSteps).toBe(0);
  });
});
