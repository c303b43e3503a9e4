/**
 * `ImageSeries`: the images of one (run, tag) under a byte budget (the board's thinning policy,
 * thinning.ts): every step until the budget, then evenly spread steps, the first and the newest
 * always kept; samples of one step stay together; ids stay findable.
 */
import { describe, expect, it } from "vitest";

import { ImageSeries } from "../../src/board/ImageSeries.js";

const bytes = (n: number, v = 1): Uint8Array => new Uint8Array(n).fill(v);

describe("ImageSeries: the byte budget", () => {
  it("keeps every step up to the budget, then every other one, the first and the newest; a step's samples count together", () => {
    let next = 1;
    const id = (): number => next++;
    const s = new ImageSeries(1000);
    for (let step = 0; step < 5; step++) {
      expect(s.add(step, step, 0, bytes(100), id)).toBeUndefined();
      expect(s.add(step, step, 1, bytes(100), id)).toBeUndefined(); // sample 1 joins the step
    }
    expect(s.shots.map((x) => x.step)).toEqual([0, 1, 2, 3, 4]);
    expect(s.byteLength).toBe(1000);
    expect(s.samples).toBe(2);
    expect(s.add(5, 5, 0, bytes(100), id)).toEqual({ dropped: 2, kept: 4 });
    expect(s.shots.map((x) => x.step)).toEqual([0, 2, 4, 5]);
    // Kept ids are still found; dropped ones are not.
    expect(s.find(s.shots[1]?.id as number)?.step).toBe(2);
    expect(s.find(2)).toBeUndefined();
  });

  it("over a long run stays within the budget, evenly spread, the newest always there", () => {
    let next = 1;
    const s = new ImageSeries(64 * 100);
    let thinnings = 0;
    for (let step = 0; step < 3_000; step++) {
      if (s.add(step, step, 0, bytes(100), () => next++) !== undefined) thinnings++;
      expect(s.byteLength).toBeLessThanOrEqual(64 * 100);
      expect(s.shots.at(-1)?.step).toBe(step);
    }
    const kept = s.shots.map((x) => x.step);
    expect(kept[0]).toBe(0);
    expect(s.droppedSteps).toBe(3_000 - kept.length);
    const gaps = kept.slice(1).map((x, i) => x - (kept[i] as number));
    expect(new Set(gaps.slice(0, -1))).toEqual(new Set([2 ** thinnings]));
  });
});
