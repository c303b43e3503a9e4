/**
 * The board's page on a logdir of 20,000 scalar tags (issue 33: the page fired 20,016 requests at
 * once and froze) in Debian's Chromium, driven by playwright-core. The page must draw charts,
 * answer input (a page turned, a group opened, a scroll draw new charts), and keep what it asks
 * for bounded: the chart cards of one page of one group, the chart requests of the charts near
 * the view, a few of them in flight at a time. Requests are counted as Chromium sends them
 * (playwright's `request` event, from the DevTools protocol). Nothing here measures a duration:
 * the time to the first chart is `npm run bench -- board` (`manyTags`). Without /usr/bin/chromium
 * these tests skip with a message; under CI they fail instead. Waits are bounded polls on
 * `window.__board`.
 */
import { join } from "node:path";
import type { Page } from "playwright-core";
import { describe, expect, it } from "vitest";

import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { haveChromium, requireChromiumUnderCi } from "../util/chromium.js";
import { useBoardPages } from "./boardPageInChromium.js";

const GROUPS = 200;
const TAGS_PER_GROUP = 100;
const STEPS = 3;
/** tagGroups.js PAGE_SIZE and requestQueue's concurrency in board.js (CONCURRENT_FETCHES). */
const PAGE_SIZE = 50;
const CONCURRENT_FETCHES = 4;

const tagOf = (g: number, t: number): string => `layer${String(g).padStart(3, "0")}/metric${String(t).padStart(3, "0")}`;

interface ManyTagsView {
  readonly ready: boolean;
  readonly charts: Record<string, { readonly runs: Record<string, { points: number }>; readonly renders: number }>;
  readonly groups: Record<string, { tags: number; open: boolean; page: number; pages: number; shown: number }>;
  readonly queue: { running: number; waiting: number; maxRunning: number; started: number; cancelled: number };
}

const { tempDir, open } = useBoardPages("board-many-tags-");

requireChromiumUnderCi("the board's many-tags tests");

describe.skipIf(!haveChromium)("the board's page with 20,000 scalar tags in Chromium (playwright-core)", () => {
  /** One run, GROUPS × TAGS_PER_GROUP tags of STEPS points: one event per step holds every tag. */
  const logdir = async (): Promise<string> => {
    const dir = tempDir();
    const w = new SummaryWriter(join(dir, "train"), {});
    for (let s = 0; s < STEPS; s++) {
      const values: Record<string, number> = {};
      for (let g = 0; g < GROUPS; g++) for (let t = 0; t < TAGS_PER_GROUP; t++) values[tagOf(g, t)] = g + t / 100 + s;
      w.addScalars(values, s);
    }
    await w.close();
    return dir;
  };

  const view = (page: Page): Promise<ManyTagsView> => page.evaluate(() => (globalThis as unknown as { __board: ManyTagsView }).__board);

  /** Polls the page until `cond` holds of its `window.__board` (bounded). */
  const waitFor = async (page: Page, cond: (arg: any) => boolean, arg?: unknown): Promise<void> => {
    await page.waitForFunction(cond, arg, { timeout: 30_000, polling: 50 });
  };

  /** The chart of `tag` drawn with the run's points. */
  const drawn = (tag: string): boolean => (globalThis as any).__board.charts[tag]?.runs?.train?.points === 3 && (globalThis as any).__board.charts[tag].renders > 0;

  /** Nothing waiting or running in the page's request queue. */
  const settled = (): boolean => (globalThis as any).__board.queue.running === 0 && (globalThis as any).__board.queue.waiting === 0;

  it("draws the first group's charts near the view, with a bounded number of requests; scrolling, turning a page and opening a group draw more", async () => {
    const { page, errors, requests } = await open(await logdir());
    const chartRequests = (): number => requests.filter((p) => p === "/board/chart").length;
    await waitFor(page, (t) => (globalThis as any).__board?.ready === true && (globalThis as any).__board.charts[t]?.renders > 0, tagOf(0, 0));
    await waitFor(page, settled);
    const before = await view(page);
    const drawnBefore = Object.values(before.charts).filter((c) => c.renders > 0).length;
    const chartRequestsBefore = chartRequests();

    // Every group listed, only the first open; only its first page of charts exists in the page.
    expect(Object.keys(before.groups)).toHaveLength(GROUPS);
    expect(before.groups["layer000"]).toEqual({ tags: TAGS_PER_GROUP, open: true, page: 0, pages: TAGS_PER_GROUP / PAGE_SIZE, shown: PAGE_SIZE });
    expect(Object.values(before.groups).filter((g) => g.open)).toHaveLength(1);
    expect(await page.locator(".chart").count()).toBe(PAGE_SIZE);
    expect(await page.locator(".tag-group").count()).toBe(GROUPS);
    // Requests before any scroll: the charts near the view, not the page's 50, let alone 20,000.
    expect(drawnBefore).toBeGreaterThan(0);
    expect(chartRequestsBefore).toBe(drawnBefore);
    expect(chartRequestsBefore).toBeLessThan(PAGE_SIZE / 2);
    expect(requests.length).toBeLessThan(60);
    expect(before.queue.maxRunning).toBeLessThanOrEqual(CONCURRENT_FETCHES);
    expect(before.charts[tagOf(0, PAGE_SIZE - 1)]?.renders).toBe(0);

    // Scrolling to the last chart of the page draws it.
    await page.locator(`.chart[data-tag="${tagOf(0, PAGE_SIZE - 1)}"]`).scrollIntoViewIfNeeded();
    await waitFor(page, drawn, tagOf(0, PAGE_SIZE - 1));
    expect(chartRequests()).toBeGreaterThan(chartRequestsBefore);

    // The next page: its charts replace the first page's.
    await page.locator('.tag-group[data-group="layer000"] .pager-bottom .next').click();
    await waitFor(page, drawn, tagOf(0, PAGE_SIZE));
    expect((await view(page)).groups["layer000"]?.page).toBe(1);
    expect(await page.locator(".chart").count()).toBe(PAGE_SIZE);
    expect(await page.locator(`.chart[data-tag="${tagOf(0, 0)}"]`).count()).toBe(0);

    // Opening a closed group far down: its charts are created and drawn once in view.
    const toggle = page.locator('.tag-group[data-group="layer150"] .group-toggle');
    await toggle.scrollIntoViewIfNeeded();
    await toggle.click();
    expect(await toggle.getAttribute("aria-expanded")).toBe("true");
    await waitFor(page, drawn, tagOf(150, 0));
    await waitFor(page, settled);
    const after = await view(page);
    expect(await page.locator(".chart").count()).toBe(2 * PAGE_SIZE);
    expect(after.queue.maxRunning).toBeLessThanOrEqual(CONCURRENT_FETCHES);
    // Fewer chart requests than charts created: those never near the view were not fetched.
    expect(chartRequests()).toBeLessThan(2 * PAGE_SIZE);
    expect(errors).toEqual([]);
  });

  it("a filter that leaves few tags opens every group that has one", async () => {
    const { page } = await open(await logdir());
    await waitFor(page, () => (globalThis as any).__board?.ready === true);
    await page.locator("#filter").fill("^layer01[0-4]/metric00[0-1]$");
    const b = await view(page);
    expect(Object.keys(b.groups)).toEqual(["layer010", "layer011", "layer012", "layer013", "layer014"]);
    expect(Object.values(b.groups).every((g) => g.open && g.shown === 2)).toBe(true);
    expect((await page.locator(".chart h3").allTextContents()).slice(0, 3)).toEqual([tagOf(10, 0), tagOf(10, 1), tagOf(11, 0)]);
    await waitFor(page, drawn, tagOf(10, 0));
  });
});
