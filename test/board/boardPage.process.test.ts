/**
 * The board's page in a real browser: Debian's Chromium (/usr/bin/chromium) driven by
 * playwright-core, against a board on a logdir written with our SummaryWriter. Without
 * /usr/bin/chromium these tests skip with a message; under CI (`CI` set) they fail instead
 * (.ci/run installs the `chromium` package). Waits are bounded polls on `window.__board`, the
 * state the page exposes, never fixed sleeps.
 */
import { mkdirSync, readFileSync } from "node:fs";
import { createServer as createHttpServer, request as httpRequest } from "node:http";
import { dirname, join } from "node:path";
import type { Page } from "playwright-core";
import { describe, expect, it } from "vitest";

import { type Board, startBoard } from "../../src/board/BoardServer.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { haveChromium, requireChromiumUnderCi } from "../util/chromium.js";
import { useBoardPages } from "./boardPageInChromium.js";
import { pageModule } from "./page/pageModule.js";


/** The chart width the page asks for (board.js CHART_WIDTH). */
const CHART_WIDTH = 520;
const SPIKE_STEP = 12_345;
const TRAIN_LOSS_POINTS = 20_000;

interface DrawnSeries {
  readonly points: number;
  readonly steps: number[];
  readonly values: (number | null)[];
  readonly smoothed: (number | null)[];
}
interface BoardView {
  readonly ready: boolean;
  readonly charts: Record<string, { readonly runs: Record<string, DrawnSeries>; readonly drawnSeries: string[]; readonly renders: number; readonly xRange: [number, number] }>;
  readonly tooltip?: { run: string; step: number }[];
}

/** TensorBoard's debiased EMA (data_transformer.ts), written here as the test's own reference. */
const ema = (values: readonly number[], w: number): number[] => {
  let last = 0;
  let n = 0;
  return values.map((y) => {
    last = last * w + (1 - w) * y;
    n++;
    return last / (1 - w ** n);
  });
};

// Event files hold scalars as float32: the functions give what the board reads back.
const trainLoss = (s: number): number => Math.fround(s === SPIKE_STEP ? 50 : 1 / Math.sqrt(s + 1));
const accuracy = (s: number, run: string): number => Math.fround(run === "train" ? 1 - Math.exp(-s / 80) : 0.9 - Math.exp(-s / 60));


const { tempDir, open: openBoard, browser, afterTest } = useBoardPages("board-page-");

requireChromiumUnderCi("the board page tests");

describe.skipIf(!haveChromium)("the board's page in Chromium (playwright-core)", () => {
  /** A logdir with runs train and eval, tags loss and accuracy; eval's writer stays open for appends. */
  const logdir = async (): Promise<{ dir: string; evalWriter: SummaryWriter }> => {
    const dir = tempDir();
    const train = new SummaryWriter(join(dir, "train"), { clock: new VirtualClock({ startMs: 1_700_000_000_000 }) });
    for (let s = 0; s < TRAIN_LOSS_POINTS; s++) train.addScalar("loss", trainLoss(s), s);
    for (let s = 0; s < 300; s++) train.addScalar("accuracy", accuracy(s, "train"), s);
    await train.close();
    mkdirSync(join(dir, "eval"));
    // purgeStep 0 marks the first start (SessionLog START), as a job that may restart does: only a later START purges.
    const evalWriter = new SummaryWriter(join(dir, "eval"), { clock: new VirtualClock({ startMs: 1_700_000_000_500 }), purgeStep: 0 });
    for (let s = 0; s < 300; s++) evalWriter.addScalars({ loss: 2 / Math.sqrt(s + 1), accuracy: accuracy(s, "eval") }, s);
    await evalWriter.flush();
    afterTest(() => evalWriter.close());
    return { dir, evalWriter };
  };

  /** The page open on a board of `dir`, with every console error and page error collected, once every chart holds both runs. */
  const open = async (dir: string, token?: string): Promise<{ board: Board; page: Page; errors: string[] }> => {
    const { board, page, errors } = await openBoard(dir, token === undefined ? {} : { token });
    await page.waitForFunction(() => {
      const b = (globalThis as { __board?: BoardView }).__board;
      return b?.ready === true && Object.values(b.charts).every((c) => Object.keys(c.runs).length === 2);
    }, undefined, { timeout: 20_000 });
    return { board, page, errors };
  };

  const view = (page: Page): Promise<BoardView> => page.evaluate(() => (globalThis as unknown as { __board: BoardView }).__board);

  /** Polls the page until `cond` holds of its `window.__board` (bounded by `timeout`). */
  const waitFor = async (page: Page, cond: (arg: number | null | undefined) => boolean, arg: number | null | undefined, timeout = 20_000): Promise<void> => {
    await page.waitForFunction(cond, arg, { timeout, polling: 50 });
  };


  it("works behind a reverse proxy that serves it under a path (/tb/): every URL the page uses is relative", async () => {
    const { dir } = await logdir();
    const board = await startBoard(dir, { port: 0, pollSecs: 0.05 });
    afterTest(() => board.close());
    const outside: string[] = [];
    const proxy = createHttpServer((req, res) => {
      const url = req.url ?? "/";
      if (!url.startsWith("/tb/")) {
        outside.push(url);
        res.writeHead(404).end("not under /tb/");
        return;
      }
      const upstream = httpRequest({ host: "127.0.0.1", port: board.port, path: url.slice(3), method: req.method, headers: { ...req.headers, host: `127.0.0.1:${board.port}` } }, (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
      });
      upstream.on("error", () => res.destroy());
      req.pipe(upstream);
    });
    await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
    afterTest(() => new Promise<void>((r) => {
      proxy.closeAllConnections();
      proxy.close(() => r());
    }));
    const page = await browser().newPage({ viewport: { width: 1400, height: 900 } });
    afterTest(() => page.close());
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(e.message));
    await page.goto(`http://127.0.0.1:${(proxy.address() as { port: number }).port}/tb/`);
    await page.waitForFunction(() => {
      const b = (globalThis as { __board?: BoardView }).__board;
      return b?.ready === true && Object.keys(b.charts).length === 2 && Object.values(b.charts).every((c) => Object.keys(c.runs).length === 2);
    }, undefined, { timeout: 20_000 });
    expect(outside).toEqual([]);
    expect(errors).toEqual([]);
  });

  it("draws one chart per tag with both runs overlaid, the expected point counts, a strict CSP and no errors", async () => {
    const { dir } = await logdir();
    const { page, errors } = await open(dir);
    const b = await view(page);
    expect(Object.keys(b.charts).sort()).toEqual(["accuracy", "loss"]);
    expect(await page.locator(".chart h3").allTextContents()).toEqual(["accuracy", "loss"]);
    expect(await page.locator("#runs label").allTextContents()).toEqual(["train", "eval"]);
    const acc = b.charts.accuracy as BoardView["charts"][string];
    // Smoothing is on by default (0.6): each run is drawn raw (faded) and smoothed.
    expect(acc.drawnSeries).toEqual(["train (raw)", "train", "eval (raw)", "eval"]);
    for (const run of ["train", "eval"]) {
      const s = acc.runs[run] as DrawnSeries;
      expect(s.points).toBe(300);
      expect(s.steps).toEqual(Array.from({ length: 300 }, (_, i) => i)); // fewer points than pixels: all drawn
    }
    const loss = (b.charts.loss as BoardView["charts"][string]).runs;
    expect((loss.eval as DrawnSeries).points).toBe(300);
    const train = loss.train as DrawnSeries;
    expect(train.points).toBe(TRAIN_LOSS_POINTS);
    // M4 of the raw and of the smoothed line: at most 4 + 4 points per pixel column.
    expect(train.steps.length).toBeLessThanOrEqual(8 * CHART_WIDTH);
    expect(train.steps.length).toBeLessThan(TRAIN_LOSS_POINTS / 2);
    expect(await page.locator(".chart canvas").count()).toBe(2);
    expect(await page.locator('.chart[data-tag="loss"] .downloads a').evaluateAll((as) => as.map((a) => a.getAttribute("href")))).toContain(
      "data/plugin/scalars/scalars?run=train&tag=loss&format=csv",
    );
    expect(errors).toEqual([]);
  });

  it("smooths every point before decimating: the drawn smoothed values equal the full-series EMA at the drawn steps, and the spike survives", async () => {
    const { dir } = await logdir();
    const { page } = await open(dir);
    const b = await view(page);
    const fullTrainLoss = ema(Array.from({ length: TRAIN_LOSS_POINTS }, (_, s) => trainLoss(s)), 0.6);
    const train = (b.charts.loss as BoardView["charts"][string]).runs.train as DrawnSeries;
    train.steps.forEach((step, i) => {
      expect(train.smoothed[i]).toBeCloseTo(fullTrainLoss[step] as number, 12);
      expect(train.values[i]).toBe(trainLoss(step));
    });
    expect(train.values[train.steps.indexOf(SPIKE_STEP)]).toBe(50);
    const evalAcc = ((b.charts.accuracy as BoardView["charts"][string]).runs.eval as DrawnSeries).smoothed;
    const reference = ema(Array.from({ length: 300 }, (_, s) => accuracy(s, "eval")), 0.6);
    evalAcc.forEach((v, i) => expect(v).toBeCloseTo(reference[i] as number, 12));

    // The slider at 0.95: the page refetches; the smoothed values follow the new weight.
    await page.locator("#smoothing").evaluate((el) => {
      (el as unknown as { value: string }).value = "0.95";
      el.dispatchEvent(new Event("input"));
    });
    await waitFor(page, (before) => {
      const b = (globalThis as any).__board;
      return b.settings.smoothing === 0.95 && b.charts.accuracy.runs.eval.smoothed[299] !== before;
    }, evalAcc[299]);
    const smoothed95 = ((await view(page)).charts.accuracy?.runs.eval as DrawnSeries).smoothed;
    const reference95 = ema(Array.from({ length: 300 }, (_, s) => accuracy(s, "eval")), 0.95);
    smoothed95.forEach((v, i) => expect(v).toBeCloseTo(reference95[i] as number, 12));

    // Slider at 0: raw lines only; M4 alone keeps at most 4 points a column, and the spike.
    await page.locator("#smoothing").evaluate((el) => {
      (el as unknown as { value: string }).value = "0";
      el.dispatchEvent(new Event("input"));
    });
    await waitFor(page, () => (globalThis as any).__board.charts.loss.drawnSeries.length === 2, undefined);
    const raw = ((await view(page)).charts.loss?.runs.train as DrawnSeries);
    expect(raw.steps.length).toBeLessThanOrEqual(4 * CHART_WIDTH);
    expect(raw.values[raw.steps.indexOf(SPIKE_STEP)]).toBe(50);
  });

  it("the tooltip shows each run's value at the hovered step; a drag zooms: the step range is fetched again at the chart's resolution", async () => {
    const { dir } = await logdir();
    const { page } = await open(dir);
    const over = page.locator('.chart[data-tag="loss"] .u-over');
    const box = (await over.boundingBox()) as { x: number; y: number; width: number; height: number };
    // The tooltip lists each run's value at the hovered step (eval's nearest: its last, 299).
    await page.mouse.move(box.x + box.width * 0.3, box.y + box.height / 2);
    await waitFor(page, () => (globalThis as any).__board.tooltip?.length === 2, undefined);
    expect((await view(page)).tooltip?.map((r) => [r.run, r.step])).toEqual([
      ["train", expect.any(Number)],
      ["eval", 299],
    ]);
    await page.mouse.move(box.x + box.width * 0.6, box.y + box.height / 2);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width * 0.65, box.y + box.height / 2, { steps: 5 });
    await page.mouse.up();
    await waitFor(page, () => (globalThis as any).__board.charts.loss.zoom !== undefined && (globalThis as any).__board.charts.loss.runs.train.steps[0] > 10_000, undefined);
    const zoomed = (await view(page)).charts.loss?.runs.train as DrawnSeries;
    const first = zoomed.steps[0] as number;
    const last = zoomed.steps.at(-1) as number;
    // About 1,000 steps in 520 columns: far more of them drawn than before the zoom.
    expect(last - first).toBeLessThan(2_000);
    expect(zoomed.steps.length).toBeGreaterThan((last - first) / 2);
  });

  it("the tag filter (a regular expression) hides the charts whose tag does not match", async () => {
    const { dir } = await logdir();
    const { page } = await open(dir);
    await page.locator("#filter").fill("^acc");
    expect(await page.locator(".chart:not([hidden]) h3").allTextContents()).toEqual(["accuracy"]);
    await page.locator("#filter").fill("(");
    expect(await page.locator("#filter.invalid").count()).toBe(1);
    await page.locator("#filter").fill("");
    expect(await page.locator(".chart:not([hidden])").count()).toBe(2);
  });

  it("live: points appended to an event file appear; a restart's SessionLog START purges the stale steps", async () => {
    const { dir, evalWriter } = await logdir();
    const { page } = await open(dir);
    for (let s = 300; s < 310; s++) evalWriter.addScalar("accuracy", 0.95, s);
    await evalWriter.flush();
    await waitFor(page, () => (globalThis as any).__board.charts.accuracy.runs.eval.points === 310 && (globalThis as any).__board.charts.accuracy.runs.eval.steps.at(-1) === 309, undefined);

    // The job restarts from its checkpoint at step 200: a new writer marks the restart (START).
    await evalWriter.close();
    const restarted = new SummaryWriter(join(dir, "eval"), { clock: new VirtualClock({ startMs: 1_700_000_100_000 }), purgeStep: 200 });
    afterTest(() => restarted.close());
    restarted.addScalars({ accuracy: 0.5, loss: 3 }, 200);
    await restarted.flush();
    await waitFor(page, () => (globalThis as any).__board.charts.accuracy.runs.eval.points === 201 && (globalThis as any).__board.charts.loss.runs.eval.points === 201, undefined);
    const b = await view(page);
    const acc = b.charts.accuracy?.runs.eval as DrawnSeries;
    expect(acc.steps.at(-1)).toBe(200);
    expect(acc.values.at(-1)).toBe(0.5);
    expect((b.charts.loss?.runs.eval as DrawnSeries).steps.at(-1)).toBe(200);
    // train is untouched
    expect((b.charts.accuracy?.runs.train as DrawnSeries).points).toBe(300);
  });

  it("run colours come from the runs' names: a run that appears later and sorts before the others shifts no colour", async () => {
    const { runColor } = await pageModule<{ runColor: (name: string) => string }>("colors.js");
    const rgb = (hex: string): string => `rgb(${[1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)).join(", ")})`;
    const { dir } = await logdir();
    const { page } = await open(dir);
    const swatches = () => page.locator("#runs li").evaluateAll((lis) => lis.map((li) => [li.textContent, (li.querySelector(".swatch") as unknown as { style: { background: string } }).style.background]));
    expect(await swatches()).toEqual([
      ["train", rgb(runColor("train"))],
      ["eval", rgb(runColor("eval"))],
    ]);
    // A run whose first event is older than train's: /data/runs lists it first.
    const early = new SummaryWriter(join(dir, "aaa"), { clock: new VirtualClock({ startMs: 1_600_000_000_000 }) });
    early.addScalar("loss", 1, 0);
    await early.close();
    await waitFor(page, () => (globalThis as any).document.querySelectorAll("#runs li").length === 3, undefined);
    expect(await swatches()).toEqual([
      ["aaa", rgb(runColor("aaa"))],
      ["train", rgb(runColor("train"))],
      ["eval", rgb(runColor("eval"))],
    ]);
  });

  it("the x axis by wall time, and a log scale for y, redraw every chart without errors", async () => {
    const { dir } = await logdir();
    const { page, errors } = await open(dir);
    await page.locator("#x-axis").selectOption("wall");
    await waitFor(page, () => (globalThis as any).__board.charts.loss.xRange[0] > 1_600_000_000, undefined);
    // Wall times are seconds since the epoch (the writers' clocks start at 1,700,000,000 s).
    expect((await view(page)).charts.accuracy?.xRange).toEqual([1_700_000_000, 1_700_000_000.5]);
    await page.locator("#log-scale").check();
    await waitFor(page, () => Object.values((globalThis as any).__board.charts).every((c: any) => c.yDistr === 3), undefined);
    await page.locator("#x-axis").selectOption("step");
    await waitFor(page, () => (globalThis as any).__board.charts.loss.xRange[1] === 19_999, undefined);
    expect(errors).toEqual([]);
  });

  it("with a token, the URL the board prints is enough: the page's assets, data and event stream pass with the cookie it sets", async () => {
    const { dir, evalWriter } = await logdir();
    const { board, page, errors } = await open(dir, "s3cret");
    expect(board.url).toContain("?token=s3cret");
    evalWriter.addScalar("accuracy", 0.97, 300);
    await evalWriter.flush();
    await waitFor(page, () => (globalThis as any).__board.charts.accuracy.runs.eval.points === 301, undefined);
    expect(errors).toEqual([]);
  });

  it("takes the screenshot of docs/tensorboard.md (into docs/images/board.png with UPDATE_DOCS_SCREENSHOTS=1, else a temporary file)", async () => {
    const { dir } = await logdir();
    const { page } = await open(dir);
    await page.setViewportSize({ width: 1400, height: 420 });
    const target = process.env["UPDATE_DOCS_SCREENSHOTS"] === "1" ? "docs/images/board.png" : join(dir, "board.png");
    mkdirSync(dirname(target), { recursive: true });
    await page.screenshot({ path: target });
    // A PNG: its signature.
    expect(readFileSync(target).subarray(0, 8)).toEqual(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
  });
});
