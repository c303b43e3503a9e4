/**
 * The board's views beyond scalars in a real browser (Debian's Chromium, playwright-core), on a
 * logdir written with our SummaryWriter: the histogram offset view, the image step slider, text
 * rendered without running any script, checkpoint markers on the scalar charts, the profiler
 * timelines list, and live updates. Without /usr/bin/chromium these tests skip with a message;
 * under CI (`CI` set) they fail instead. Waits are bounded polls on `window.__board`.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { PNG } from "pngjs";
import type { Browser, Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";

import { type Board, startBoard } from "../../src/board/BoardServer.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { haveChromium, launchChromium, requireChromiumUnderCi } from "../util/chromium.js";
import { useTempDirs } from "../util/tempDirs.js";


const HISTOGRAM_STEPS = 12;
const IMAGE_STEPS = [0, 10, 20] as const;
const CHECKPOINT_STEPS = [100, 200] as const;

/** A 4×4 PNG of one color. */
const png = (rgb: readonly [number, number, number]): Uint8Array => {
  const p = new PNG({ width: 4, height: 4 });
  for (let i = 0; i < 16; i++) p.data.set([...rgb, 255], i * 4);
  return Uint8Array.from(PNG.sync.write(p));
};
const COLORS: readonly (readonly [number, number, number])[] = [
  [255, 0, 0],
  [0, 255, 0],
  [0, 0, 255],
];

/** Text a summary might hold that must never run: every line a different way to try. */
const HOSTILE = [
  "# Notes",
  "**bold** and `code`",
  "<script>window.__pwned = 'script'</script>",
  "<img src=x onerror=\"window.__pwned = 'onerror'\">",
  "[click](javascript:window.__pwned='link')",
  "[data](data:text/html;base64,PHNjcmlwdD53aW5kb3cuX19wd25lZD0xPC9zY3JpcHQ+)",
  "<svg onload=\"window.__pwned = 'svg'\"></svg>",
  "[ok](https://example.com/docs)",
].join("\n\n");

interface ViewsState {
  readonly ready: boolean;
  readonly charts: Record<string, { readonly runs: Record<string, unknown>; readonly checkpoints?: Record<string, number[]>; readonly markersDrawn?: { run: string; step: number; px: number }[] }>;
  readonly histograms: Record<string, { run: string; steps: number[]; drawnSteps: number[] }>;
  readonly images: Record<string, { steps: number[]; index: number; step: number | null; src: string; loaded: boolean }>;
  readonly texts: Record<string, { steps: number[]; html: string[] }>;
  readonly timelines: { run: string; file: string; step: number; bytes: number }[];
}

const tempDir = useTempDirs("board-views-page-");
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

requireChromiumUnderCi("the board views tests");

describe.skipIf(!haveChromium)("the board's views beyond scalars in Chromium (playwright-core)", () => {
  let browser: Browser;
  beforeAll(async () => {
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
  });

  /** Runs train (everything) and eval (scalars, a few histograms); train's writer stays open. */
  const logdir = async (): Promise<{ dir: string; train: SummaryWriter }> => {
    const dir = tempDir();
    const train = new SummaryWriter(join(dir, "train"), { clock: new VirtualClock({ startMs: 1_700_000_000_000 }), purgeStep: 0 });
    for (let s = 0; s < 300; s++) train.addScalar("loss", 1 / (s + 1), s);
    for (let s = 0; s < HISTOGRAM_STEPS; s++) train.addHistogram("weights", Array.from({ length: 200 }, (_, i) => Math.sin(i) * (1 + s / 4)), s);
    IMAGE_STEPS.forEach((s, i) => train.addImage("sample", { png: png(COLORS[i] as [number, number, number]) }, s));
    train.addText("notes", HOSTILE, 5);
    // As Supervisor (and CheckpointSaverHook) record a save.
    for (const s of CHECKPOINT_STEPS) train.addSessionLog("CHECKPOINT", s, { checkpointPath: join(dir, "train", `model.ckpt-${s}`) });
    await train.flush();
    cleanups.push(() => train.close());
    const evalWriter = new SummaryWriter(join(dir, "eval"), { clock: new VirtualClock({ startMs: 1_700_000_000_500 }) });
    for (let s = 0; s < 300; s += 10) evalWriter.addScalar("loss", 2 / (s + 1), s);
    for (let s = 0; s < 5; s++) evalWriter.addHistogram("weights", [s, s + 1, s + 2], s * 10);
    await evalWriter.close();
    // What ProfilerHook writes into its outputDir.
    writeFileSync(join(dir, "train", "timeline-7.json"), JSON.stringify({ traceEvents: [], displayTimeUnit: "ms" }));
    return { dir, train };
  };

  const open = async (dir: string): Promise<{ board: Board; page: Page; errors: string[]; foreign: string[] }> => {
    const board = await startBoard(dir, { port: 0, pollSecs: 0.05 });
    cleanups.push(() => board.close());
    await board.store.loaded;
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    cleanups.push(() => page.close());
    const errors: string[] = [];
    const foreign: string[] = [];
    page.on("console", (m) => {
      if (m.type() === "error") errors.push(m.text());
    });
    page.on("pageerror", (e) => errors.push(e.message));
    const origin = new URL(board.url).origin;
    page.on("request", (r) => {
      if (!r.url().startsWith(origin) && !r.url().startsWith("data:")) foreign.push(r.url());
    });
    await page.goto(board.url);
    await waitFor(page, () => {
      const b = (globalThis as any).__board;
      return b?.ready === true && b.histograms.weights !== undefined && Object.keys(b.images).length === 1 && Object.keys(b.texts).length === 1 && b.timelines.length === 1;
    });
    return { board, page, errors, foreign };
  };

  const view = (page: Page): Promise<ViewsState> => page.evaluate(() => (globalThis as unknown as { __board: ViewsState }).__board);

  /** Polls the page until `cond` holds (bounded by `timeout`). */
  const waitFor = async (page: Page, cond: (arg: any) => boolean, arg?: unknown, timeout = 20_000): Promise<void> => {
    await page.waitForFunction(cond, arg, { timeout, polling: 50 });
  };

  it("histograms: the offset view of a tag draws one line per step; the run can be switched", async () => {
    const { dir } = await logdir();
    const { page, errors } = await open(dir);
    await waitFor(page, (n) => (globalThis as any).__board.histograms.weights?.drawnSteps.length === n, HISTOGRAM_STEPS);
    const h = (await view(page)).histograms.weights;
    expect(h?.run).toBe("train");
    expect(h?.drawnSteps).toEqual(Array.from({ length: HISTOGRAM_STEPS }, (_, s) => s));
    expect(await page.locator(".histogram-card canvas").count()).toBe(1);
    // Something is drawn: the canvas is not blank.
    const inked = await page.locator(".histogram-card canvas").evaluate((c: any) => {
      const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
      return n;
    });
    expect(inked).toBeGreaterThan(500);
    await page.locator(".histogram-card select").selectOption("eval");
    await waitFor(page, () => (globalThis as any).__board.histograms.weights.run === "eval");
    expect((await view(page)).histograms.weights?.drawnSteps).toEqual([0, 10, 20, 30, 40]);
    expect(errors).toEqual([]);
  });

  it("images: the slider switches the step and the image shown", async () => {
    const { dir } = await logdir();
    const { page, errors } = await open(dir);
    const key = JSON.stringify(["train", "sample"]);
    await waitFor(page, (k) => (globalThis as any).__board.images[k]?.loaded === true, key);
    expect((await view(page)).images[key]).toMatchObject({ steps: [...IMAGE_STEPS], index: 2, step: 20 });
    const pixel = (): Promise<number[]> =>
      page.locator(".image-card img").evaluate((img: any) => {
        const c = (globalThis as any).document.createElement("canvas");
        c.width = img.naturalWidth;
        c.height = img.naturalHeight;
        const g = c.getContext("2d");
        g.drawImage(img, 0, 0);
        return [...g.getImageData(0, 0, 1, 1).data.slice(0, 3)] as number[];
      });
    expect(await pixel()).toEqual([0, 0, 255]);
    for (const [index, rgb] of [
      [0, [255, 0, 0]],
      [1, [0, 255, 0]],
    ] as const) {
      await page.locator(".image-card input[type=range]").evaluate((el: any, i) => {
        el.value = String(i);
        el.dispatchEvent(new Event("input"));
      }, index);
      await waitFor(page, ([k, i]) => (globalThis as any).__board.images[k].index === i && (globalThis as any).__board.images[k].loaded === true, [key, index] as const);
      expect((await view(page)).images[key]?.step).toBe(IMAGE_STEPS[index]);
      expect(await page.locator(".image-card .step-label").textContent()).toBe(`step ${IMAGE_STEPS[index]}`);
      expect(await pixel()).toEqual(rgb);
    }
    expect(errors).toEqual([]);
  });

  it("text: Markdown is rendered, and nothing in it runs: no script, no handler, no javascript: link", async () => {
    const { dir } = await logdir();
    const { page, errors, foreign } = await open(dir);
    const body = page.locator(".text-card .text-body");
    expect(await body.locator("h1").textContent()).toBe("Notes");
    expect(await body.locator("strong").textContent()).toBe("bold");
    // The hostile lines are shown as text.
    expect(await body.textContent()).toContain("<script>window.__pwned = 'script'</script>");
    expect(await body.locator("script, svg, iframe, object, [onerror], [onload]").count()).toBe(0);
    expect(await body.locator("img").count()).toBe(0);
    const hrefs = await body.locator("a").evaluateAll((as) => as.map((a) => a.getAttribute("href")));
    expect(hrefs).toEqual(["https://example.com/docs"]);
    expect(await page.evaluate(() => (globalThis as any).__pwned)).toBeUndefined();
    expect(errors).toEqual([]);
    // The page fetched nothing from anywhere else (the link is only a link).
    expect(foreign).toEqual([]);
  });

  it("checkpoints: a thin marker at each checkpoint step of each drawn run; a new checkpoint appears live", async () => {
    const { dir, train } = await logdir();
    const { page, errors } = await open(dir);
    await waitFor(page, () => (globalThis as any).__board.charts.loss?.markersDrawn?.length === 2);
    const loss = (await view(page)).charts.loss;
    expect(loss?.checkpoints).toEqual({ train: [...CHECKPOINT_STEPS] });
    expect(loss?.markersDrawn?.map((m) => [m.run, m.step])).toEqual([
      ["train", 100],
      ["train", 200],
    ]);
    const [a, b] = loss?.markersDrawn ?? [];
    expect((b?.px ?? 0) - (a?.px ?? 0)).toBeGreaterThan(10); // apart on the step axis
    train.addSessionLog("CHECKPOINT", 250, { checkpointPath: "model.ckpt-250" });
    await train.flush();
    await waitFor(page, () => (globalThis as any).__board.charts.loss.checkpoints.train?.length === 3);
    expect((await view(page)).charts.loss?.markersDrawn?.map((m) => m.step)).toEqual([100, 200, 250]);
    expect(errors).toEqual([]);
  });

  it("timelines: listed with a download link of the board's own, and a line on how to open them offline", async () => {
    const { dir } = await logdir();
    const { page, foreign } = await open(dir);
    expect((await view(page)).timelines).toEqual([{ run: "train", file: "train/timeline-7.json", step: 7, bytes: expect.any(Number) }]);
    const link = page.locator("#timelines a");
    expect(await link.getAttribute("href")).toBe("board/timelines/train/timeline-7.json");
    expect(await link.getAttribute("download")).toBe("");
    expect(await page.locator("#timelines-view .hint").textContent()).toMatch(/ui\.perfetto\.dev.*Open trace file.*chrome:\/\/tracing/);
    expect(await page.locator("#timelines-view a[href^='http']").count()).toBe(0);
    expect(foreign).toEqual([]);
  });

  it("live: a new histogram step, image step and text appear; a new image tag gets its card", async () => {
    const { dir, train } = await logdir();
    const { page, errors } = await open(dir);
    train.addHistogram("weights", [1, 2, 3], HISTOGRAM_STEPS);
    train.addImage("sample", { png: png([9, 9, 9]) }, 30);
    train.addImage("other", { png: png([1, 1, 1]) }, 30);
    train.addText("notes", "later", 31);
    await train.flush();
    await waitFor(page, (n) => {
      const b = (globalThis as any).__board;
      return (
        b.histograms.weights.drawnSteps.length === n + 1 &&
        b.images[JSON.stringify(["train", "sample"])]?.steps.length === 4 &&
        b.images[JSON.stringify(["train", "other"])]?.loaded === true &&
        b.texts[JSON.stringify(["train", "notes"])]?.steps.length === 2
      );
    }, HISTOGRAM_STEPS);
    // The slider was at the newest step: it follows the new one.
    expect((await view(page)).images[JSON.stringify(["train", "sample"])]?.step).toBe(30);
    expect(errors).toEqual([]);
  });
});
