import { describe, expect, it } from "vitest";

import { pageModule } from "./pageModule.js";

const { PALETTE, colorIndex, runColor } = await pageModule<{
  PALETTE: readonly string[];
  colorIndex: (name: string) => number;
  runColor: (name: string) => string;
}>("colors.js");

describe("run colours (src/board/page/colors.js)", () => {
  it("a run's colour depends on its name only, not on which runs were seen before it or in what order", async () => {
    const names = ["train", "eval", "run07", "ablation-b", "lr=0.01"];
    const before = names.map(runColor);
    // A second copy of the module (a page loaded again) that sees other runs first, then these in
    // the reverse order: an assignment by order of sight would differ.
    const again = await pageModule<{ runColor: (name: string) => string }>("colors.js?again");
    for (const other of ["aaa-earlier", "zz", "run01", "."]) again.runColor(other);
    expect([...names].reverse().map(again.runColor).reverse()).toEqual(before);
  });

  it("the usual names take TensorBoard-like colours: train orange, eval / validation / val blue, test green, the logdir's own run another", () => {
    expect(runColor("train")).toBe(PALETTE[0]);
    for (const name of ["eval", "validation", "val"]) expect(runColor(name)).toBe(PALETTE[1]);
    expect(runColor("test")).toBe(PALETTE[2]);
    expect([0, 1, 2]).not.toContain(colorIndex("."));
  });

  it("numbered runs of one stem take consecutive colours: up to the palette's size, no two share one", () => {
    for (const stem of ["run", "run_", "seed-", "trial", "lr0.1_seed"]) {
      const names = Array.from({ length: PALETTE.length }, (_, i) => `${stem}${i + 1}`);
      expect(new Set(names.map(colorIndex)).size).toBe(PALETTE.length);
      const first = colorIndex(names[0] as string);
      names.forEach((n, i) => expect(colorIndex(n)).toBe((first + i) % PALETTE.length));
    }
    // A long number (a timestamp) is taken digit by digit, without losing precision.
    expect(colorIndex("run20240101123456789")).toBe((colorIndex("run20240101123456788") + 1) % PALETTE.length);
  });

  it("names spread over the whole palette, each colour within 10% ± 2 points of 10,000 names", () => {
    const counts = new Array<number>(PALETTE.length).fill(0);
    for (let i = 0; i < 10_000; i++) {
      const c = colorIndex(`experiment-${i.toString(36)}-x`);
      counts[c] = (counts[c] ?? 0) + 1;
    }
    for (const c of counts) expect(Math.abs(c / 10_000 - 1 / PALETTE.length)).toBeLessThan(0.02);
    expect(runColor("ünïcödé/run")).toMatch(/^#[0-9a-f]{6}$/);
    expect(PALETTE).toContain(runColor(""));
  });
});
