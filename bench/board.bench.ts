/**
 * `npm run bench -- board`: how fast `monitored-session board` shows a large logdir, in Debian's
 * headless Chromium (`/usr/bin/chromium`, driven by playwright-core), on this machine.
 *
 * - `boardLoadMs`: a logdir of 10 runs × 10 tags × 10,000 points (1 million scalars), the
 *   server already holding it; from `page.goto` to every chart drawn with every run's full series
 *   (`__board.charts[tag].runs[run].points === 10,000` for the 10 tags and 10 runs: the 10 charts
 *   lie within the two screens below the view that the page fetches ahead, so none is left for a
 *   scroll). Baseline in the same run: the same page on an empty logdir (the page, its scripts
 *   and the runs list; no chart), `ratioToEmptyPage`.
 * - `manyTagsFirstChartMs`: a logdir of one run with 20,000 scalar tags (200 groups of 100, 10
 *   points each), the server holding it; from `page.goto` to the first chart drawn (the first
 *   tag's, with its 10 points). Beside it, counted once the page is quiet and before any scroll:
 *   the chart cards in the page and the requests made (chart requests and all), and the tags
 *   route's own time on the server (`/data/plugin/scalars/tags`, 20,000 tags), which the page
 *   must wait for before it can draw anything.
 * - `boardColdLoadMs`: from `startBoard()` on that logdir (nothing read yet) to the same state.
 * - `liveLatencyMs`: a page open on a run whose writer stays open; the benchmark writes one
 *   scalar at the next step and flushes it (`SummaryWriter.flush()` resolves once the bytes are
 *   written), then measures until the page's chart holds that step (host wall clock on both
 *   sides: the page's `Date.now()` where its check first holds, polled every animation frame).
 * - `scalarsRouteMs`: `/data/plugin/scalars/scalars?run=&tag=` for one tag of 100,000 points
 *   (TensorBoard's JSON, every point), over HTTP on loopback; baseline in the same run:
 *   `/data/runs` on the same server (the HTTP round trip alone), `ratioToRunsRoute`. The first
 *   request builds the JSON (`firstRequestMs`); the counted ones after it are answered from the
 *   board's memory of unchanged series, as a script polling a series is.
 *
 * Equal work is counted: every load must end with 10 × 10 series of 10,000 points drawn; every
 * scalars response must hold 100,000 points (its bytes are reported); every live sample must see
 * exactly the step written. Otherwise the benchmark throws. Medians over rounds, with samples.
 *
 * - `chartLibraries`: uPlot against ECharts with LTTB sampling, drawing the same series
 *   (bench/chartLibraries.ts).
 * - `tensorBoardLoadMs` (where `TENSORBOARD` names an installed `tensorboard`): the same logdir in
 *   TensorBoard with `--load_fast=false` (its Python reader), from its start until its data API
 *   lists every tag of every run and every series' last step; beside it `serverLoadMs`, the same
 *   for the board's server (`startBoard` to `store.loaded`, every point in memory).
 *
 * The reader's throughput (`readerMBps`) is `npm run bench -- reader` (bench/reader.bench.ts).
 */
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";

import { type Browser, chromium, type Page } from "playwright-core";

import { type Board, startBoard } from "../src/board/BoardServer.js";
import { loopbackPorts } from "../src/cluster/loopbackPorts.js";
import { SummaryWriter } from "../src/summary/SummaryWriter.js";
import { measureChartLibraries } from "./chartLibraries.js";
import { median, round } from "./stats.js";

const CHROMIUM = "/usr/bin/chromium";
const RUNS = Number(process.env["BENCH_BOARD_RUNS"] ?? 10);
const TAGS = Number(process.env["BENCH_BOARD_TAGS"] ?? 10);
const POINTS = Number(process.env["BENCH_BOARD_POINTS"] ?? 10_000);
const ROUNDS = Number(process.env["BENCH_BOARD_ROUNDS"] ?? 7);
const ROUTE_POINTS = Number(process.env["BENCH_BOARD_ROUTE_POINTS"] ?? 100_000);
const LIVE_SAMPLES = Number(process.env["BENCH_BOARD_LIVE_SAMPLES"] ?? 15);
const MANY_TAGS = Number(process.env["BENCH_BOARD_MANY_TAGS"] ?? 20_000);
const MANY_TAGS_PER_GROUP = 100;
const MANY_TAGS_POINTS = 10;
/** The one run of the many-tags logdir. */
const MANY_TAGS_RUN = "train";
const LOAD_TIMEOUT_MS = 120_000;

const summarize = (xs: readonly number[], digits = 1) => ({ median: round(median([...xs]), digits), samples: xs.map((x) => round(x, digits)) });

/** A logdir of `runs` runs × `tags` tags × `points` steps. */
export const writeLogdir = async (dir: string, runs: number, tags: number, points: number): Promise<void> => {
  for (let r = 0; r < runs; r++) {
    const w = new SummaryWriter(join(dir, `run${String(r).padStart(2, "0")}`), { maxQueue: 10_000 });
    for (let s = 0; s < points; s++) {
      const values: Record<string, number> = {};
      for (let t = 0; t < tags; t++) values[`tag${String(t).padStart(2, "0")}`] = Math.sin(s / (200 + 37 * t)) + r * 0.1 + (s % 97 === 0 ? 1 : 0);
      w.addScalars(values, s);
    }
    await w.close();
  }
};

/** Resolves, in the page's clock, when every chart holds every run's full series; the page's `Date.now()` then. */
export const untilAllDrawn = (page: Page, runs: number, tags: number, points: number): Promise<number> =>
  page
    .waitForFunction(
      ([runs, tags, points]) => {
        const charts = Object.values((globalThis as unknown as { __board?: { charts: Record<string, { runs?: Record<string, { points: number }>; renders: number }> } }).__board?.charts ?? {});
        const done = charts.length === tags && charts.every((c) => c.renders > 0 && Object.keys(c.runs ?? {}).length === runs && Object.values(c.runs ?? {}).every((s) => s.points === points));
        return done ? Date.now() : false;
      },
      [runs, tags, points] as const,
      { polling: "raf", timeout: LOAD_TIMEOUT_MS },
    )
    .then((h) => h.jsonValue() as Promise<number>);

/** A logdir of one run, `train`, with `tags` tags (`group000/tag000`, … 100 to a group) of MANY_TAGS_POINTS steps. */
const writeManyTags = async (dir: string, tags: number): Promise<void> => {
  const w = new SummaryWriter(join(dir, MANY_TAGS_RUN), {});
  for (let s = 0; s < MANY_TAGS_POINTS; s++) {
    const values: Record<string, number> = {};
    for (let t = 0; t < tags; t++) values[manyTag(t)] = Math.sin(s / 3 + t) + t / tags;
    w.addScalars(values, s);
  }
  await w.close();
};

const manyTag = (t: number): string => `group${String(Math.floor(t / MANY_TAGS_PER_GROUP)).padStart(3, "0")}/tag${String(t % MANY_TAGS_PER_GROUP).padStart(3, "0")}`;

/** Resolves when the first tag's chart is drawn with its full series; the page's `Date.now()` then. */
const untilFirstChart = (page: Page): Promise<number> =>
  page
    .waitForFunction(
      ([tag, points]) => {
        const c = (globalThis as unknown as { __board?: { charts: Record<string, { runs?: Record<string, { points: number }>; renders: number }> } }).__board?.charts[tag];
        return c !== undefined && c.renders > 0 && c.runs?.["train"]?.points === points ? Date.now() : false;
      },
      [manyTag(0), MANY_TAGS_POINTS] as const,
      { polling: "raf", timeout: LOAD_TIMEOUT_MS },
    )
    .then((h) => h.jsonValue() as Promise<number>);

/**
 * What the page holds and asked for on the many-tags logdir once its request queue is empty, before
 * any scroll: chart cards, charts drawn, chart requests and all requests (as Chromium sent them).
 */
const manyTagsRequests = async (browser: Browser, url: string): Promise<{ chartCards: number; chartsDrawn: number; chartRequests: number; requests: number; maxInFlight: number }> => {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  try {
    const page = await context.newPage();
    const requests: string[] = [];
    page.on("request", (r) => requests.push(new URL(r.url()).pathname));
    await Promise.all([untilFirstChart(page), page.goto(url)]);
    await page.waitForFunction(() => {
      const q = (globalThis as any).__board.queue;
      return q.running === 0 && q.waiting === 0;
    }, undefined, { timeout: LOAD_TIMEOUT_MS });
    const seen = {
      chartCards: await page.locator(".chart").count(),
      ...(await page.evaluate(() => {
        const b = (globalThis as any).__board;
        return { chartsDrawn: Object.values(b.charts).filter((c: any) => c.renders > 0).length, maxInFlight: b.queue.maxRunning as number };
      })),
    };
    const chartRequests = requests.filter((p) => p.endsWith("/board/chart")).length;
    if (chartRequests !== seen.chartsDrawn) throw new Error(`many tags: ${chartRequests} chart requests for ${seen.chartsDrawn} charts drawn`);
    return { ...seen, chartRequests, requests: requests.length };
  } finally {
    await context.close();
  }
};

/** The page's `__board.ready` on an empty logdir (the page's own fixed cost), its `Date.now()` then. */
const untilReady = (page: Page): Promise<number> =>
  page
    .waitForFunction(() => ((globalThis as unknown as { __board?: { ready: boolean } }).__board?.ready === true ? Date.now() : false), undefined, { polling: "raf", timeout: LOAD_TIMEOUT_MS })
    .then((h) => h.jsonValue() as Promise<number>);

const newPage = async (browser: Browser): Promise<Page> => {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.on("pageerror", (e) => console.error(`page error: ${e.message}`));
  return page;
};

/** Navigation to all drawn, ms, on a fresh page each time (no cache shared between rounds). */
const timeLoad = async (browser: Browser, url: string, until: (page: Page) => Promise<number>): Promise<number> => {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  try {
    const page = await context.newPage();
    page.on("pageerror", (e) => console.error(`page error: ${e.message}`));
    const start = Date.now();
    const [done] = await Promise.all([until(page), page.goto(url)]);
    return done - start;
  } finally {
    await context.close();
  }
};

const routeMs = async (url: string): Promise<{ ms: number; bytes: number; body: string }> => {
  const start = performance.now();
  const res = await fetch(url);
  const body = await res.text();
  const ms = performance.now() - start;
  if (!res.ok) throw new Error(`${url}: ${res.status} ${body}`);
  return { ms, bytes: Buffer.byteLength(body), body };
};

/**
 * TensorBoard's load of `logdir` (`--load_fast=false`), from its spawn until its data API lists
 * every run's tags and every scalar series ends at step POINTS − 1: ms, or why it was not measured.
 */
const measureTensorBoard = async (logdir: string): Promise<{ ms: number; version: string } | { skipped: string }> => {
  const exe = process.env["TENSORBOARD"];
  if (exe === undefined || !existsSync(exe)) return { skipped: "TENSORBOARD is not set to an installed tensorboard (pip install tensorboard)" };
  const [port] = await loopbackPorts(1);
  const base = `http://127.0.0.1:${port as number}`;
  const start = performance.now();
  const tb = spawn(exe, ["--logdir", logdir, "--load_fast=false", "--port", String(port), "--host", "127.0.0.1"], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  tb.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  try {
    const get = async (path: string): Promise<unknown> => {
      const r = await fetch(`${base}${path}`);
      return r.ok ? r.json() : undefined;
    };
    for (;;) {
      if (performance.now() - start > 900_000) throw new Error(`TensorBoard did not load ${logdir} within 15 minutes; stderr: ${stderr.slice(-500)}`);
      await new Promise((r) => setTimeout(r, 200));
      const tags = (await get("/data/plugin/scalars/tags").catch(() => undefined)) as Record<string, Record<string, unknown>> | undefined;
      if (tags === undefined || Object.keys(tags).length !== RUNS || Object.values(tags).some((t) => Object.keys(t).length !== TAGS)) continue;
      let complete = true;
      for (const [run, t] of Object.entries(tags)) {
        for (const tag of Object.keys(t)) {
          const rows = (await get(`/data/plugin/scalars/scalars?${new URLSearchParams({ run, tag })}`)) as [number, number, number][] | undefined;
          if (rows?.at(-1)?.[1] !== POINTS - 1) complete = false;
          if (!complete) break;
        }
        if (!complete) break;
      }
      if (complete) break;
    }
    const ms = performance.now() - start;
    const version = String(((await get("/data/environment")) as { version?: string } | undefined)?.version ?? "?");
    console.log(`  TensorBoard ${version} (--load_fast=false) loaded the logdir in ${Math.round(ms)} ms`);
    return { ms: round(ms, 0), version };
  } finally {
    tb.kill("SIGTERM");
  }
};

export default async (): Promise<Record<string, unknown>> => {
  if (!existsSync(CHROMIUM)) throw new Error(`the board benchmark needs ${CHROMIUM} (apt-get install chromium)`);
  const loadBefore = loadavg().map((x) => round(x, 2));
  const root = mkdtempSync(join(tmpdir(), "bench-board-"));
  const boards: Board[] = [];
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
  });
  try {
    const big = join(root, "big");
    const t0 = performance.now();
    await writeLogdir(big, RUNS, TAGS, POINTS);
    console.log(`board: wrote ${RUNS} runs × ${TAGS} tags × ${POINTS} points in ${Math.round(performance.now() - t0)} ms`);
    const empty = join(root, "empty");
    mkdirSync(empty);

    // Warm (server holding the data) against the empty page, interleaved.
    const warm = await startBoard(big, { port: 0 });
    boards.push(warm);
    await warm.store.loaded;
    const emptyBoard = await startBoard(empty, { port: 0 });
    boards.push(emptyBoard);
    const load: number[] = [];
    const emptyLoad: number[] = [];
    for (let i = 0; i < ROUNDS + 1; i++) {
      const a = await timeLoad(browser, warm.url, (p) => untilAllDrawn(p, RUNS, TAGS, POINTS));
      const b = await timeLoad(browser, emptyBoard.url, untilReady);
      // The first round warms Chromium's process and compile caches: not counted.
      if (i > 0) {
        load.push(a);
        emptyLoad.push(b);
      }
      console.log(`  load round ${i + 1}/${ROUNDS + 1}: ${a} ms (empty page ${b} ms)${i === 0 ? " (warm-up)" : ""}`);
    }

    // Many tags: the time to the first chart on a logdir of MANY_TAGS tags, against the empty page.
    const manyDir = join(root, "many-tags");
    const tm = performance.now();
    await writeManyTags(manyDir, MANY_TAGS);
    console.log(`board: wrote ${MANY_TAGS} tags × ${MANY_TAGS_POINTS} points in ${Math.round(performance.now() - tm)} ms`);
    const manyBoard = await startBoard(manyDir, { port: 0 });
    boards.push(manyBoard);
    await manyBoard.store.loaded;
    // The tags route's first answer, before anything asked for it (later ones come from memory).
    const tagsCold = await routeMs(`http://127.0.0.1:${manyBoard.port}/data/plugin/scalars/tags`);
    const tagsServed = Object.keys((JSON.parse(tagsCold.body) as Record<string, object>)[MANY_TAGS_RUN] ?? {}).length;
    if (tagsServed !== MANY_TAGS) throw new Error(`the tags route served ${tagsServed} tags, not ${MANY_TAGS}`);
    const manyFirst: number[] = [];
    for (let i = 0; i < ROUNDS + 1; i++) {
      const ms = await timeLoad(browser, manyBoard.url, untilFirstChart);
      if (i > 0) manyFirst.push(ms);
      console.log(`  many tags round ${i + 1}/${ROUNDS + 1}: first chart after ${ms} ms${i === 0 ? " (warm-up)" : ""}`);
    }
    const manyCounts = await manyTagsRequests(browser, manyBoard.url);
    const tagsRoute: number[] = [];
    for (let i = 0; i < 5; i++) tagsRoute.push((await routeMs(`http://127.0.0.1:${manyBoard.port}/data/plugin/scalars/tags`)).ms);
    await manyBoard.close();

    // Cold: the server starts on the logdir as the page is opened.
    const cold: number[] = [];
    for (let i = 0; i < Math.max(3, Math.floor(ROUNDS / 2)); i++) {
      const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
      try {
        const page = await context.newPage();
        const start = Date.now();
        const board = await startBoard(big, { port: 0 });
        boards.push(board);
        const [done] = await Promise.all([untilAllDrawn(page, RUNS, TAGS, POINTS), page.goto(board.url)]);
        cold.push(done - start);
        console.log(`  cold load ${i + 1}: ${done - start} ms`);
        await board.close();
      } finally {
        await context.close();
      }
    }

    // Live: one open writer, one page; each sample writes the next step and waits for it to be drawn.
    const liveDir = join(root, "live");
    const writer = new SummaryWriter(join(liveDir, "train"), {});
    for (let s = 0; s < 100; s++) writer.addScalar("loss", 1 / (s + 1), s);
    await writer.flush();
    const liveBoard = await startBoard(liveDir, { port: 0 });
    boards.push(liveBoard);
    const page = await newPage(browser);
    await page.goto(liveBoard.url);
    await page.waitForFunction(() => (globalThis as any).__board?.charts?.loss?.runs?.train?.points === 100, undefined, { timeout: LOAD_TIMEOUT_MS });
    const live: number[] = [];
    for (let i = 0; i < LIVE_SAMPLES + 1; i++) {
      const step = 100 + i;
      const seen = page.waitForFunction(
        (step) => {
          const s = (globalThis as any).__board?.charts?.loss?.runs?.train;
          return s !== undefined && s.points === step + 1 && s.steps.at(-1) === step ? Date.now() : false;
        },
        step,
        { polling: "raf", timeout: 30_000 },
      );
      // A random moment against the server's poll, so the samples spread over its period.
      await new Promise((r) => setTimeout(r, 150 + Math.random() * 500));
      writer.addScalar("loss", 1 / (step + 1), step);
      await writer.flush();
      const flushedAt = Date.now();
      const at = (await (await seen).jsonValue()) as number;
      if (i > 0) live.push(at - flushedAt);
    }
    await page.close();
    await writer.close();

    // The scalars route on one tag of ROUTE_POINTS points, against /data/runs on the same server.
    const routeDir = join(root, "route");
    await writeLogdir(routeDir, 1, 1, ROUTE_POINTS);
    const routeBoard = await startBoard(routeDir, { port: 0 });
    boards.push(routeBoard);
    await routeBoard.store.loaded;
    const scalarsUrl = `http://127.0.0.1:${routeBoard.port}/data/plugin/scalars/scalars?run=run00&tag=tag00`;
    const runsUrl = `http://127.0.0.1:${routeBoard.port}/data/runs`;
    const scalars: number[] = [];
    const runsRoute: number[] = [];
    let bytes = 0;
    let firstMs = 0;
    for (let i = 0; i < ROUNDS * 3 + 2; i++) {
      const s = await routeMs(scalarsUrl);
      // The first request makes the JSON; later ones of the unchanged series are answered from memory.
      if (i === 0) firstMs = s.ms;
      const r = await routeMs(runsUrl);
      const n = (JSON.parse(s.body) as unknown[]).length;
      if (n !== ROUTE_POINTS) throw new Error(`the scalars route returned ${n} points, expected ${ROUTE_POINTS}`);
      bytes = s.bytes;
      if (i >= 2) {
        scalars.push(s.ms);
        runsRoute.push(r.ms);
      }
    }

    // The chart library: uPlot (the board's) against ECharts with LTTB sampling, same series.
    const chartLibraries = await measureChartLibraries(browser, Math.max(3, ROUNDS));

    const tensorBoard = await measureTensorBoard(big);
    const serverLoad: number[] = [];
    for (let i = 0; i < 3; i++) {
      const start = performance.now();
      const b = await startBoard(big, { port: 0 });
      await b.store.loaded;
      serverLoad.push(performance.now() - start);
      await b.close();
    }

    const loadS = summarize(load);
    const emptyS = summarize(emptyLoad);
    const coldS = summarize(cold);
    const liveS = summarize(live);
    const scalarsS = summarize(scalars, 2);
    const manyS = summarize(manyFirst);
    const runsS = summarize(runsRoute, 2);
    return {
      logdir: { runs: RUNS, tags: TAGS, pointsPerSeries: POINTS, scalars: RUNS * TAGS * POINTS },
      loadAverage: { before: loadBefore, after: loadavg().map((x) => round(x, 2)) },
      rounds: ROUNDS,
      boardLoadMs: loadS.median,
      boardColdLoadMs: coldS.median,
      liveLatencyMs: liveS.median,
      liveLatencyMaxMs: Math.max(...live),
      scalarsRouteMs: scalarsS.median,
      manyTagsFirstChartMs: manyS.median,
      load: { warm: loadS, emptyPage: emptyS, ratioToEmptyPage: round(loadS.median / emptyS.median, 2), seriesDrawnPerLoad: RUNS * TAGS, goalMs: 1000, goalMet: loadS.median <= 1000 },
      coldLoad: { ...coldS, goalMs: 3000, goalMet: coldS.median <= 3000 },
      manyTags: {
        tags: MANY_TAGS,
        groups: Math.ceil(MANY_TAGS / MANY_TAGS_PER_GROUP),
        pointsPerSeries: MANY_TAGS_POINTS,
        firstChart: manyS,
        ratioToEmptyPage: round(manyS.median / emptyS.median, 2),
        beforeScroll: manyCounts,
        tagsRouteFirstMs: round(tagsCold.ms, 1),
        tagsRouteBytes: tagsCold.bytes,
        tagsRouteMs: summarize(tagsRoute),
        goalMs: 2000,
        goalMet: manyS.median <= 2000,
      },
      live: { ...liveS, max: Math.max(...live), goalMs: 500, goalMet: liveS.median <= 500 },
      chartLibraries,
      serverLoadMs: summarize(serverLoad),
      tensorBoardLoadMs: tensorBoard,
      scalarsRoute: { points: ROUTE_POINTS, bytes, firstRequestMs: round(firstMs, 2), ...scalarsS, runsRoute: runsS, ratioToRunsRoute: round(scalarsS.median / runsS.median, 1), goalMs: 50, goalMet: scalarsS.median <= 50 },
    };
  } finally {
    await browser.close();
    for (const b of boards) await b.close().catch(() => undefined);
    rmSync(root, { recursive: true, force: true });
  }
};
