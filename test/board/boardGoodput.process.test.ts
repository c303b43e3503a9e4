/**
 * The board's goodput view and restart markers in Debian's Chromium (skipped with a message
 * without /usr/bin/chromium; under CI it fails instead). A logdir whose chief restarted once (at
 * step 100) and whose worker ran throughout: the view draws one stacked bar for the run, its
 * segments the figures `computeGoodput` gives from the same logs (widths adding up to the bar),
 * says the goodput and the restart in words, and each chart marks the restart at the step the
 * chief resumed from (and at its process start on the wall-time axis), beside the checkpoint
 * markers, a worker restarted alone (the chief's `ready` that kept its state) at the chief's step
 * when it lost the worker, and the faults of `launch`'s own log at the chief's step then, with a
 * strict CSP and no error. A logdir without goodput logs shows no view.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import type { Page } from "playwright-core";
import { describe, expect, it } from "vitest";

import { computeGoodput } from "../../src/goodput/computeGoodput.js";
import { readGoodputLogs, type GoodputRecord } from "../../src/goodput/goodputLog.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { haveChromium, requireChromiumUnderCi } from "../util/chromium.js";
import { useBoardPages } from "./boardPageInChromium.js";

interface Exposed {
  readonly ready: boolean;
  readonly goodput?: Record<string, { name: string; secs: number; px: number }[]>;
  readonly charts: Record<
    string,
    {
      readonly restartsDrawn?: { run: string; step: number | null; px: number }[];
      readonly rejoinsDrawn?: { run: string; step: number | null; px: number }[];
      readonly faultsDrawn?: { run: string; step: number | null; px: number }[];
      readonly renders: number;
    }
  >;
}

const T0 = 1_700_000_000_000;
const line = (r: GoodputRecord): string => `${JSON.stringify(r)}\n`;

const { tempDir, open } = useBoardPages("board-goodput-");
requireChromiumUnderCi("the board's goodput view tests");

/** The page's `window.__board` once `cond` (self-contained: it runs in the page) holds of it, bounded. */
const exposed = async (page: Page, cond: (arg: number) => boolean, arg = 0): Promise<Exposed> => {
  await page.waitForFunction(cond, arg, { timeout: 20_000, polling: 50 });
  return page.evaluate(() => (globalThis as unknown as { __board: Exposed }).__board);
};

/** `window.__board` in the page, for the conditions. */
type Page$ = { __board?: Exposed };

describe.skipIf(!haveChromium)("the board's goodput view (Chromium)", () => {
  /** A run at the logdir's root: loss over 300 steps, and the goodput logs of a chief that restarted at step 100. */
  const logdir = async (): Promise<string> => {
    const dir = tempDir();
    const clock = new VirtualClock({ startMs: T0 });
    const writer = new SummaryWriter(dir, { clock });
    for (let s = 0; s < 300; s++) {
      writer.addScalar("loss", 1 / Math.sqrt(s + 1), s);
      await clock.advance(100);
    }
    await writer.close();
    mkdirSync(join(dir, "goodput"));
    const chief: GoodputRecord[] = [
      { v: 1, type: "start", t: T0, task: "chief:0", proc: "a", pid: 10, chief: true, processStartMs: T0 - 5_000 },
      { v: 1, type: "phase", t: T0 + 1_000, bucket: "clusterJoin", ms: 1_000 },
      { v: 1, type: "ready", t: T0 + 1_000, step: 0 },
      { v: 1, type: "mark", t: T0 + 10_000, step: 100, checkpoint: true },
      { v: 1, type: "mark", t: T0 + 14_000, step: 140 },
      // SIGKILLed here; the next process restores step 100.
      { v: 1, type: "start", t: T0 + 18_000, task: "chief:0", proc: "b", pid: 11, chief: true, processStartMs: T0 + 16_000 },
      { v: 1, type: "phase", t: T0 + 19_000, bucket: "restore", ms: 500 },
      { v: 1, type: "ready", t: T0 + 19_000, step: 100 },
      { v: 1, type: "mark", t: T0 + 24_000, step: 200 },
      // worker:0 is lost at 25 s and restarted alone; the ring re-forms around it at 26 s.
      { v: 1, type: "aborted", t: T0 + 25_000 },
      { v: 1, type: "ready", t: T0 + 26_000, step: null, kept: true, rejoined: "worker:0" },
      { v: 1, type: "end", t: T0 + 30_000, proc: "b", step: 300, exitCode: 0 },
    ];
    writeFileSync(join(dir, "goodput", "chief-0.jsonl"), chief.map(line).join(""));
    writeFileSync(
      join(dir, "goodput", "worker-0.jsonl"),
      [
        { v: 1, type: "start", t: T0, task: "worker:0", proc: "w", pid: 12, chief: false, processStartMs: T0 - 4_000 },
        { v: 1, type: "start", t: T0 + 25_500, task: "worker:0", proc: "w2", pid: 13, chief: false, processStartMs: T0 + 25_100 },
        { v: 1, type: "end", t: T0 + 30_000, proc: "w2", step: 300, exitCode: 0 },
      ]
        .map((r) => line(r as GoodputRecord))
        .join(""),
    );
    // launch --chaos's own log: two faults, one in each chief process.
    const faults: GoodputRecord[] = [
      { v: 1, type: "fault", t: T0 + 12_000, id: 0, kind: "sigkillChief", target: "chief:0" },
      { v: 1, type: "fault", t: T0 + 20_000, id: 1, kind: "sigterm", target: "worker:0" },
    ];
    writeFileSync(join(dir, "goodput", "launch.jsonl"), faults.map(line).join(""));
    return dir;
  };

  it("one stacked bar per run with the accounting's figures, the restart and the rank restarted alone in words, the restart marked on every chart at the step it resumed from and the lone restart at the chief's step when it lost the rank", async () => {
    const dir = await logdir();
    const { page, errors } = await open(dir);
    const b = await exposed(page, () => {
      const x = (globalThis as Page$).__board;
      return x?.ready === true && x.goodput?.["."] !== undefined && x.charts.loss?.restartsDrawn !== undefined;
    });
    const group = computeGoodput(readGoodputLogs(dir)).group;
    expect(group).not.toBeNull();
    const segments = b.goodput?.["."] ?? [];
    // Productive time first, then each bucket with time in it, in the accounting's seconds.
    expect(segments[0]?.name).toBe("productive");
    expect(segments[0]?.secs).toBeCloseTo(group?.productiveSecs ?? -1, 6);
    for (const s of segments.slice(1)) expect(s.secs, s.name).toBeCloseTo(group?.badput[s.name as keyof NonNullable<typeof group>["badput"]] ?? -1, 6);
    expect(segments.map((s) => s.name)).toContain("wastedProgress");
    expect(segments.map((s) => s.name)).toContain("infrastructureRecovery");
    expect(segments.reduce((n, s) => n + s.px, 0)).toBeCloseTo(520, 6);
    expect(await page.locator("#goodput-view").isVisible()).toBe(true);
    const legend = await page.locator('.goodput-row[data-run="."] .goodput-legend').textContent();
    expect(legend).toMatch(new RegExp(`^goodput ${((group?.goodput ?? 0) * 100).toFixed(1)}% of 35\\.0s, 1 restart, 1 rank restarted alone: productive `));
    expect(await page.locator('.goodput-row[data-run="."] canvas.goodput-bar').getAttribute("aria-label")).toMatch(/^\.: productive /);
    // The restart, at step 100 (where the chief resumed), on the loss chart.
    expect(b.charts.loss?.restartsDrawn?.map((m) => [m.run, m.step])).toEqual([[".", 100]]);
    // The faults, at the chief's step then: between its marks of steps 100 and 140 (at 10 s and
    // 14 s), and between the restarted process's ready at 100 (19 s) and its mark of 200 (24 s).
    expect(b.charts.loss?.faultsDrawn?.map((m) => [m.run, m.step])).toEqual([
      [".", 120],
      [".", 120],
    ]);
    // worker:0 restarted alone: at the chief's step when the group lost it (25 s), between its mark
    // of 200 (24 s) and its end at 300 (30 s).
    expect(b.charts.loss?.rejoinsDrawn?.map((m) => [m.run, m.step])).toEqual([[".", 217]]);
    // On the wall-time axis: at the process's start.
    await page.selectOption("#x-axis", "wall");
    const wall = await exposed(
      page,
      (renders) => {
        const loss = (globalThis as Page$).__board?.charts.loss;
        return loss?.restartsDrawn?.length === 1 && loss.rejoinsDrawn?.length === 1 && loss.faultsDrawn?.length === 2 && loss.renders > renders;
      },
      b.charts.loss?.renders ?? 0,
    );
    expect(wall.charts.loss?.restartsDrawn?.[0]?.run).toBe(".");
    expect(wall.charts.loss?.rejoinsDrawn?.[0]?.run).toBe(".");
    expect(errors).toEqual([]);
  });

  it("a logdir without goodput logs shows no goodput view and marks no restart", async () => {
    const dir = tempDir();
    const writer = new SummaryWriter(dir, { clock: new VirtualClock({ startMs: T0 }) });
    for (let s = 0; s < 10; s++) writer.addScalar("loss", s, s);
    await writer.close();
    const { page, errors } = await open(dir);
    const b = await exposed(page, () => {
      const x = (globalThis as Page$).__board;
      return x?.ready === true && x.goodput !== undefined && x.charts.loss?.restartsDrawn !== undefined;
    });
    expect(b.goodput).toEqual({});
    expect(b.charts.loss?.restartsDrawn).toEqual([]);
    expect(b.charts.loss?.faultsDrawn).toEqual([]);
    expect(b.charts.loss?.rejoinsDrawn).toEqual([]);
    expect(await page.locator("#goodput-view").isVisible()).toBe(false);
    expect(errors).toEqual([]);
  });
});
