/**
 * Why the board draws with uPlot: the two libraries the issue names, measured drawing the same
 * line series in the same headless Chromium, on this machine (part of `npm run bench -- board`).
 *
 * - **uPlot** (the board's): `new uPlot(options, data, element)`, timed until its `draw` hook.
 * - **ECharts** with `sampling: "lttb"` (its downsampling for line series), `animation: false`
 *   and the canvas renderer: `setOption`, timed until its `finished` event.
 *
 * Each case is one chart 520 × 260 px (the board's chart size) of `series` line series of
 * `points` points each, the data made in the page before the clock starts (the same arrays for
 * both libraries). The cases: the board's real load (10 series of 4,160 points, what M4 leaves of
 * any series at 520 px: 8 points a column), and raw data (1 series of 1,000,000 points; 10 of
 * 100,000), what a page without server-side decimation would hand the library. Equal work is
 * checked: each draw must report the series and point counts it was given.
 */
import { createServer, type Server } from "node:http";
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";

import type { Browser } from "playwright-core";

import { median, round } from "./stats.js";

const require = createRequire(import.meta.url);

interface Case {
  readonly name: string;
  readonly series: number;
  readonly points: number;
}

const CHART_CASES: readonly Case[] = [
  { name: "board (10 × 4,160, M4 at 520 px)", series: 10, points: 4160 },
  { name: "raw 10 × 100,000", series: 10, points: 100_000 },
  { name: "raw 1 × 1,000,000", series: 1, points: 1_000_000 },
];

const PAGE = `<!doctype html><meta charset="utf-8"><link rel="stylesheet" href="/uPlot.min.css">
<div id="host"></div>
<script src="/echarts.min.js"></script>
<script type="module">
import uPlot from "/uPlot.esm.js";
const W = 520, H = 260;
const data = (series, points) => {
  const xs = new Float64Array(points);
  for (let i = 0; i < points; i++) xs[i] = i;
  const ys = [];
  for (let s = 0; s < series; s++) {
    const y = new Float64Array(points);
    for (let i = 0; i < points; i++) y[i] = Math.sin(i / (200 + 37 * s)) + s * 0.1 + (i % 997 === 0 ? 1 : 0);
    ys.push(y);
  }
  return { xs, ys };
};
const fresh = () => {
  const host = document.getElementById("host");
  host.replaceChildren();
  const el = document.createElement("div");
  el.style.width = W + "px";
  el.style.height = H + "px";
  host.append(el);
  return el;
};
window.drawUplot = (series, points) => new Promise((resolve) => {
  const { xs, ys } = data(series, points);
  const el = fresh();
  const start = performance.now();
  let u;
  u = new uPlot({ width: W, height: H, legend: { show: false }, series: [{}, ...ys.map(() => ({ stroke: "#1976d2", width: 1, points: { show: false } }))],
    hooks: { draw: [() => setTimeout(() => { const ms = performance.now() - start; const n = u.data.length - 1; const p = u.data[0].length; u.destroy(); resolve({ ms, series: n, points: p }); })] } },
    [xs, ...ys], el);
});
window.drawEcharts = (series, points) => new Promise((resolve) => {
  const { xs, ys } = data(series, points);
  // ECharts takes [x, y] pairs: made before the clock starts, as uPlot's columns are.
  const pairs = ys.map((y) => Array.from(xs, (x, i) => [x, y[i]]));
  const el = fresh();
  const start = performance.now();
  const chart = echarts.init(el, null, { renderer: "canvas", width: W, height: H });
  chart.on("finished", () => {
    const ms = performance.now() - start;
    const opt = chart.getOption();
    const n = opt.series.length;
    const p = opt.series[0].data.length;
    chart.dispose();
    resolve({ ms, series: n, points: p });
  });
  chart.setOption({
    animation: false,
    xAxis: { type: "value", min: 0, max: points - 1 },
    yAxis: { type: "value" },
    series: pairs.map((d) => ({ type: "line", showSymbol: false, sampling: "lttb", lineStyle: { width: 1 }, data: d })),
  });
});
window.ready = true;
</script>`;

const serve = (): Promise<{ server: Server; url: string }> => {
  const files: Record<string, { type: string; body: Buffer | string }> = {
    "/": { type: "text/html", body: PAGE },
    "/uPlot.esm.js": { type: "text/javascript", body: readFileSync(require.resolve("uplot/dist/uPlot.esm.js")) },
    "/uPlot.min.css": { type: "text/css", body: readFileSync(require.resolve("uplot/dist/uPlot.min.css")) },
    "/echarts.min.js": { type: "text/javascript", body: readFileSync(require.resolve("echarts/dist/echarts.min.js")) },
  };
  const server = createServer((req, res) => {
    const f = files[req.url ?? ""];
    if (f === undefined) return void res.writeHead(404).end();
    res.writeHead(200, { "content-type": f.type }).end(f.body);
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve({ server, url: `http://127.0.0.1:${(server.address() as { port: number }).port}/` })));
};

/** Medians of `rounds` draws per library and case (after one warm-up draw each), with their ratio. */
export const measureChartLibraries = async (browser: Browser, rounds: number, cases: readonly Case[] = CHART_CASES): Promise<Record<string, unknown>[]> => {
  const { server, url } = await serve();
  const page = await browser.newPage({ viewport: { width: 800, height: 600 } });
  try {
    await page.goto(url);
    await page.waitForFunction(() => (globalThis as unknown as { ready?: boolean }).ready === true, undefined, { timeout: 60_000 });
    const out: Record<string, unknown>[] = [];
    for (const c of cases) {
      const times: Record<"uPlot" | "ECharts", number[]> = { uPlot: [], ECharts: [] };
      for (let i = 0; i <= rounds; i++) {
        // Interleaved, the order alternating; round 0 is the warm-up.
        const order = i % 2 === 0 ? (["uPlot", "ECharts"] as const) : (["ECharts", "uPlot"] as const);
        for (const lib of order) {
          const fn = lib === "uPlot" ? "drawUplot" : "drawEcharts";
          const r = await page.evaluate(([fn, s, p]) => (globalThis as unknown as Record<string, (s: number, p: number) => Promise<{ ms: number; series: number; points: number }>>)[fn]!(s, p), [fn, c.series, c.points] as const);
          if (r.series !== c.series || r.points !== c.points) throw new Error(`${lib} drew ${r.series} series of ${r.points} points, expected ${c.series} of ${c.points}`);
          if (i > 0) times[lib].push(r.ms);
        }
      }
      const u = median(times.uPlot);
      const e = median(times.ECharts);
      out.push({ case: c.name, series: c.series, pointsPerSeries: c.points, uPlotMs: round(u, 1), echartsLttbMs: round(e, 1), echartsOverUplot: round(e / u, 1), samples: { uPlot: times.uPlot.map((x) => round(x, 1)), ECharts: times.ECharts.map((x) => round(x, 1)) } });
      console.log(`  charts ${c.name}: uPlot ${round(u, 1)} ms, ECharts (lttb) ${round(e, 1)} ms`);
    }
    return out;
  } finally {
    await page.close();
    await new Promise((r) => server.close(r));
  }
};
