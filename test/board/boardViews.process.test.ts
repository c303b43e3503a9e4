/**
 * The board's views beyond scalars in a real browser (Debian's Chromium, playwright-core), on a
 * logdir written with our SummaryWriter: the histogram offset view, the image step slider, text
 * rendered without running any script, checkpoint markers on the scalar charts, the profiler
 * timelines list, live updates, and each tag's note when its steps were thinned to its memory
 * budget. It also takes the screenshots of the views in docs/tensorboard.md (into docs/images with
 * UPDATE_DOCS_SCREENSHOTS=1). Without /usr/bin/chromium these tests skip with a message; under CI
 * (`CI` set) they fail instead. Waits are bounded polls on `window.__board`.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { PNG } from "pngjs";
import type { Browser, Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";

import { type Board, type BoardOptions, startBoard } from "../../src/board/BoardServer.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { haveChromium, launchChromium, requireChromiumUnderCi } from "../util/chromium.js";
import { seededRandom } from "../util/seed.js";
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
  readonly histograms: Record<string, { run: string; steps: number[]; drawnSteps: number[]; note: string }>;
  readonly images: Record<string, { steps: number[]; index: number; step: number | null; src: string; loaded: boolean }>;
  readonly texts: Record<string, { steps: number[]; html: string[]; note: string }>;
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

  /** Every view of `logdir()` has its data in the page. */
  const allViews = (): boolean => {
    const b = (globalThis as any).__board;
    return b?.ready === true && b.histograms.weights !== undefined && Object.keys(b.images).length === 1 && Object.keys(b.texts).length === 1 && b.timelines.length === 1;
  };

  /** The page on a board of `dir` (with `options`), once `ready` holds in it. */
  const open = async (dir: string, ready: () => boolean = allViews, options: BoardOptions = {}): Promise<{ board: Board; page: Page; errors: string[]; foreign: string[] }> => {
    const board = await startBoard(dir, { port: 0, pollSecs: 0.05, ...options });
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
    await waitFor(page, ready);
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

  it("a tag thinned to its memory budget says so in its card; the histogram card fetches only the lines it draws (limit=)", async () => {
    const dir = tempDir();
    const w = new SummaryWriter(join(dir, "train"), { clock: new VirtualClock({ startMs: 1_700_000_000_000 }) });
    w.addScalar("loss", 1, 0);
    for (let s = 0; s < 250; s++) w.addHistogram("weights", [s, s + 1, s + 2], s, { buckets: 3 }); // 3 × 24 + 28 = 100 bytes each
    for (let s = 0; s < 40; s++) w.addText("log", "x".repeat(920), s); // 1,000 bytes each
    await w.close();
    const thinnedAll = (): boolean => {
      const b = (globalThis as any).__board;
      return b?.ready === true && b.histograms.weights?.note !== "" && b.histograms.weights?.note !== undefined && Object.values(b.texts).some((t: any) => t.note !== "");
    };
    const requested: string[] = [];
    const { page, errors } = await open(dir, thinnedAll, { histogramBytesPerTag: 100 * 200, textBytesPerTag: 10_000 });
    page.on("request", (r) => requested.push(r.url()));
    const v = await view(page);
    const h = v.histograms.weights;
    // Room for 200: the 250 written were thinned to every 2nd (126 kept), of which the card fetched the 100 it draws.
    expect(h?.note).toBe("124 older steps were dropped to keep this tag's histograms within 0.0191 MiB (the steps kept are evenly spread; the first and the newest are kept).");
    expect(h?.steps).toHaveLength(100);
    expect(h?.drawnSteps).toEqual(h?.steps);
    expect(h?.steps[0]).toBe(0);
    expect(h?.steps.at(-1)).toBe(249);
    expect(v.texts[JSON.stringify(["train", "log"])]?.note).toMatch(/^\d+ older steps were dropped to keep this tag's text within 0\.00954 MiB/);
    expect(await page.locator(".text-card .hint").textContent()).toContain("older steps were dropped");
    // A refresh of the card asks for what it draws only.
    await page.locator(".histogram-card select").dispatchEvent("change");
    await waitFor(page, () => (globalThis as any).__board.histograms.weights.renders >= 2);
    expect(requested.some((u) => u.includes("histograms/histograms?") && u.includes("limit=100"))).toBe(true);
    expect(errors).toEqual([]);
  });

  it("takes the screenshots of the histogram, image, text and timeline views for docs/tensorboard.md (into docs/images with UPDATE_DOCS_SCREENSHOTS=1, else a temporary directory)", async () => {
    const dir = tempDir();
    const random = seededRandom("docs screenshots", 20_261_127); // fixed: the same pictures each time
    const gauss = (): number => Math.sqrt(-2 * Math.log(1 - random.next())) * Math.cos(2 * Math.PI * random.next());
    const train = new SummaryWriter(join(dir, "train"), { clock: new VirtualClock({ startMs: 1_700_000_000_000 }) });
    for (let s = 0; s <= 3000; s += 10) train.addScalar("loss", 2 * Math.exp(-s / 800) + 0.1, s);
    // Weights that drift and spread as training goes on.
    for (let s = 0; s <= 3000; s += 100) {
      const t = s / 3000;
      train.addHistogram("layer1/weights", Float32Array.from({ length: 4000 }, () => 0.4 * t + (0.15 + 0.35 * t) * gauss()), s, { buckets: 40 });
    }
    // Samples: rings that change step by step.
    for (let k = 0; k <= 6; k++) {
      const size = 128;
      const pixels = new Uint8Array(size * size * 3);
      for (let y = 0; y < size; y++) {
        for (let x = 0; x < size; x++) {
          const r = Math.hypot(x - size / 2, y - size / 2);
          const ring = 0.5 + 0.5 * Math.cos(r / (2 + k));
          const i = (y * size + x) * 3;
          pixels.set([Math.round(255 * ring), Math.round(90 + 120 * (x / size)), Math.round(255 * (1 - ring) * (1 - k / 8))], i);
        }
      }
      train.addImage("samples/generated", { pixels, height: size, width: size, channels: 3 }, k * 500);
    }
    train.addText("config", ["## Hyperparameters", "", "| name | value |", "|---|---|", "| learning rate | 0.001 |", "| batch size | 64 |", "| optimizer | `adam` |"].join("\n"), 0);
    train.addText("notes", "Loss **plateaus** after step 2,000: try a lower learning rate next.", 2000);
    await train.close();
    const evalRun = new SummaryWriter(join(dir, "eval"), { clock: new VirtualClock({ startMs: 1_700_000_000_500 }) });
    for (let s = 0; s <= 3000; s += 100) evalRun.addScalar("loss", 2.2 * Math.exp(-s / 900) + 0.15, s);
    await evalRun.close();
    writeFileSync(join(dir, "train", "timeline-1000.json"), JSON.stringify({ traceEvents: [], displayTimeUnit: "ms" }));
    writeFileSync(join(dir, "train", "timeline-2000.json"), JSON.stringify({ traceEvents: Array.from({ length: 40 }, (_, i) => ({ name: "step", ph: "X", ts: i * 10, dur: 5, pid: 1, tid: 1 })), displayTimeUnit: "ms" }));
    const everything = (): boolean => {
      const b = (globalThis as any).__board;
      const image = b?.images[JSON.stringify(["train", "samples/generated"])];
      return b?.ready === true && b.histograms["layer1/weights"]?.drawnSteps.length === 31 && image?.loaded === true && image.step === 3000 && Object.keys(b.texts).length === 2 && b.timelines.length === 2;
    };
    const { page, errors } = await open(dir, everything);
    const folder = process.env["UPDATE_DOCS_SCREENSHOTS"] === "1" ? "docs/images" : join(dir, "screenshots");
    mkdirSync(folder, { recursive: true });
    for (const [section, file] of [
      ["histograms-view", "board-histograms.png"],
      ["images-view", "board-images.png"],
      ["text-view", "board-text.png"],
      ["timelines-view", "board-timelines.png"],
    ] as const) {
      const target = join(folder, file);
      mkdirSync(dirname(target), { recursive: true });
      // The section, cut to what is drawn in it (its blocks span the page's width).
      const clip = await page.locator(`#${section}`).evaluate((root: any) => {
        const doc = (globalThis as any).document;
        const box = { left: Infinity, top: Infinity, right: -Infinity, bottom: -Infinity };
        const add = (r: any): void => {
          if (r.width === 0 || r.height === 0) return;
          box.left = Math.min(box.left, r.left);
          box.top = Math.min(box.top, r.top);
          box.right = Math.max(box.right, r.right);
          box.bottom = Math.max(box.bottom, r.bottom);
        };
        const walker = doc.createTreeWalker(root, 4 /* NodeFilter.SHOW_TEXT */);
        for (let n = walker.nextNode(); n !== null; n = walker.nextNode()) {
          const range = doc.createRange();
          range.selectNodeContents(n);
          add(range.getBoundingClientRect());
        }
        for (const e of root.querySelectorAll(".view-card, canvas, img, input, select, button")) add(e.getBoundingClientRect());
        const pad = 8;
        return { x: Math.max(0, box.left - pad + (globalThis as any).scrollX), y: Math.max(0, box.top - pad + (globalThis as any).scrollY), width: box.right - box.left + 2 * pad, height: box.bottom - box.top + 2 * pad };
      });
      await page.locator(`#${section}`).scrollIntoViewIfNeeded();
      await page.screenshot({ path: target, clip, fullPage: true });
      // A PNG of the section, with something drawn in it (not one flat color).
      const shot = PNG.sync.read(readFileSync(target));
      expect([file, shot.width > 150, shot.height > 40]).toEqual([file, true, true]);
      const colors = new Set<number>();
      for (let i = 0; i < shot.data.length; i += 4) colors.add(shot.data.readUInt32BE(i));
      expect(colors.size, file).toBeGreaterThan(20);
    }
    expect(errors).toEqual([]);
  });
});
