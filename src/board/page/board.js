// The board's page: one uPlot chart per scalar tag, runs overlaid. Plain ES module, no build step.
// The server smooths every point and then decimates (/board/series): the page only draws.
// `window.__board` exposes what each chart holds, for the browser tests.
// Each chart marks its runs' checkpoints (SessionLog CHECKPOINT, /board/checkpoints) with a thin
// dashed vertical line, drawn on uPlot's canvas in its draw hook (no DOM, nothing inline).
// The views beyond scalars (histograms, images, text, timelines) are in views.js.
// Every URL is relative to the page, so the board also works behind a reverse proxy that serves
// it under a path (https://host/tb/ → /tb/data/runs, …).
import { drawCheckpoints } from "./checkpoints.js";
import { coalesce, createViews } from "./views.js";

// uPlot's own ES module, served by the board from the installed `uplot` package (pageAssets.ts).
// Imported by URL through a variable: it is a browser URL, not a path for Node's resolution.
const UPLOT_URL = new URL("board/uplot/uPlot.esm.js", document.baseURI).href;
const { default: uPlot } = await import(UPLOT_URL);

const COLORS = ["#f57c00", "#1976d2", "#388e3c", "#d32f2f", "#7b1fa2", "#0097a7", "#5d4037", "#c2185b", "#455a64", "#afb42b"];
const CHART_WIDTH = 520;
const CHART_HEIGHT = 260;
// While the server first reads the logdir, every series grows at each update: a chart is fetched
// again at most this often (ms), so that the page does not keep the server from reading.
const LOADING_REFRESH_MS = 1000;

const state = {
  runs: [],
  hiddenRuns: new Set(),
  tagsByRun: {},
  smoothing: 0.6,
  xAxis: "step",
  logScale: false,
  filter: /(?:)/,
  charts: new Map(),
  /** Per run: [{step, wall_time, path}], by step. */
  checkpoints: {},
  /** The server is still reading the logdir for the first time (from `hello` until `loaded`). */
  loading: true,
};

/** What the tests read: per tag, per run, the arrays drawn. */
const exposed = { charts: {}, fetches: 0, ready: false, events: 0, settings: { smoothing: state.smoothing, xAxis: state.xAxis, logScale: state.logScale } };
const exposeSettings = () => (exposed.settings = { smoothing: state.smoothing, xAxis: state.xAxis, logScale: state.logScale });
window.__board = exposed;

const $ = (id) => document.getElementById(id);
const colorOf = (run) => COLORS[Math.max(0, state.runs.indexOf(run)) % COLORS.length];
const q = (params) => new URLSearchParams(params).toString();

const getJson = async (url) => {
  const res = await fetch(url, { headers: { Accept: "application/json" } });
  if (!res.ok) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  return res.json();
};

const views = createViews(exposed, { getJson, q, colorOf: (run) => colorOf(run), isHidden: (run) => state.hiddenRuns.has(run), runs: () => state.runs });

const loadCheckpoints = async () => {
  state.checkpoints = await getJson("board/checkpoints");
  for (const chart of state.charts.values()) if (chart.uplot !== undefined) draw(chart);
};

// ----- runs and tags -----

/** The runs, shown and not hidden, that have `tag`. */
const runsOf = (tag) => state.runs.filter((run) => !state.hiddenRuns.has(run) && (state.tagsByRun[run] ?? []).includes(tag));

/**
 * Reads the runs and their tags again; creates and removes charts, and fetches the charts whose
 * runs changed (growth is the `scalars` event's). One at a time: a call meanwhile runs after.
 */
const loadRuns = coalesce(async () => {
  const [runs, tags] = await Promise.all([getJson("data/runs"), getJson("data/plugin/scalars/tags")]);
  state.runs = runs;
  state.tagsByRun = Object.fromEntries(Object.entries(tags).map(([run, t]) => [run, Object.keys(t)]));
  renderRuns();
  const allTags = [...new Set(Object.values(state.tagsByRun).flat())].sort();
  for (const tag of allTags) if (!state.charts.has(tag)) createChart(tag);
  for (const tag of [...state.charts.keys()]) if (!allTags.includes(tag)) removeChart(tag);
  $("empty").hidden = allTags.length > 0;
  applyFilter();
  for (const chart of state.charts.values()) if (chart.runKey !== JSON.stringify(runsOf(chart.tag))) refresh(chart);
  await Promise.all([views.load(), loadCheckpoints()]);
});

/** A refresh for new points: while the server first reads the logdir, at most every LOADING_REFRESH_MS per chart. */
const refreshGrown = (chart) => {
  if (!state.loading) return void refresh(chart);
  if (chart.later !== undefined) return;
  const waitMs = chart.fetchedAt + LOADING_REFRESH_MS - performance.now();
  if (waitMs <= 0) return void refresh(chart);
  chart.later = setTimeout(() => {
    chart.later = undefined;
    refresh(chart);
  }, waitMs);
};

/** The first read ended: every chart put off by refreshGrown is fetched now. */
const loadingEnded = () => {
  state.loading = false;
  for (const chart of state.charts.values()) {
    if (chart.later === undefined) continue;
    clearTimeout(chart.later);
    chart.later = undefined;
    refresh(chart);
  }
};

const renderRuns = () => {
  const list = $("runs");
  list.replaceChildren(
    ...state.runs.map((run) => {
      const li = document.createElement("li");
      const box = document.createElement("input");
      box.type = "checkbox";
      box.checked = !state.hiddenRuns.has(run);
      box.id = `run-${run}`;
      box.addEventListener("change", () => {
        if (box.checked) state.hiddenRuns.delete(run);
        else state.hiddenRuns.add(run);
        for (const chart of state.charts.values()) refresh(chart);
        views.load();
      });
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = colorOf(run);
      const label = document.createElement("label");
      label.htmlFor = box.id;
      label.textContent = run;
      li.append(box, swatch, label);
      return li;
    }),
  );
};

// ----- charts -----

const createChart = (tag) => {
  const el = document.createElement("section");
  el.className = "chart";
  el.dataset.tag = tag;
  const title = document.createElement("h3");
  title.textContent = tag;
  const plot = document.createElement("div");
  const downloads = document.createElement("div");
  downloads.className = "downloads";
  el.append(title, plot, downloads);
  $("charts").append(el);
  const chart = { tag, el, plot, downloads, uplot: undefined, runs: {}, zoom: undefined, fetch: undefined, layoutKey: "", runKey: "", fetchedAt: Number.NEGATIVE_INFINITY, later: undefined };
  chart.fetch = coalesce(() => fetchChart(chart));
  plot.addEventListener("mouseleave", () => ($("tooltip").hidden = true));
  plot.addEventListener("dblclick", () => {
    chart.zoom = undefined;
    refresh(chart);
  });
  state.charts.set(tag, chart);
  exposed.charts[tag] = { runs: {}, zoom: undefined, renders: 0 };
  return chart;
};

const removeChart = (tag) => {
  const chart = state.charts.get(tag);
  clearTimeout(chart.later);
  chart.uplot?.destroy();
  chart.el.remove();
  state.charts.delete(tag);
  delete exposed.charts[tag];
};

const applyFilter = () => {
  for (const chart of state.charts.values()) chart.el.hidden = !state.filter.test(chart.tag);
};

/** Fetches the chart's series again (one request at a time per chart; a request asked meanwhile runs after). */
const refresh = (chart) => chart.fetch();

/** Fetches and draws the chart's series once (through `chart.fetch`, see refresh). */
const fetchChart = async (chart) => {
  if (!state.charts.has(chart.tag)) return; // removed while a fetch before was under way
  const runs = runsOf(chart.tag);
  chart.runKey = JSON.stringify(runs);
  chart.fetchedAt = performance.now();
  const params = { tag: chart.tag, smoothing: String(state.smoothing), resolution: String(CHART_WIDTH) };
  if (chart.zoom !== undefined) Object.assign(params, { min_step: String(Math.floor(chart.zoom[0])), max_step: String(Math.ceil(chart.zoom[1])) });
  // One request for every run of the chart (/board/chart); a run deleted meanwhile is left out.
  let fetched = {};
  if (runs.length > 0) {
    const query = new URLSearchParams(params);
    for (const run of runs) query.append("run", run);
    exposed.fetches++;
    try {
      fetched = await getJson(`board/chart?${query}`);
    } catch {
      fetched = {}; // the tag is gone: the next update redraws
    }
  }
  if (!state.charts.has(chart.tag)) return;
  chart.runs = fetched;
  draw(chart);
};

/** The x of each point in the current axis mode. */
const xsOf = (series) => {
  if (state.xAxis === "step") return series.steps;
  if (state.xAxis === "wall") return series.wallTimes;
  const t0 = series.wallTimes[0] ?? 0;
  return series.wallTimes.map((w) => (w - t0) / 3600);
};

const draw = (chart) => {
  const runs = Object.keys(chart.runs);
  const smoothing = state.smoothing > 0;
  // Per run: x, raw values, and (when smoothing) smoothed values; sorted by x for the time axes.
  const tables = runs.map((run) => {
    const s = chart.runs[run];
    const xs = xsOf(s);
    const order = xs.map((_, i) => i);
    if (state.xAxis !== "step") order.sort((a, b) => xs[a] - xs[b]);
    const pick = (col) => order.map((i) => (state.logScale && !(col[i] > 0) ? null : col[i]));
    return smoothing ? [order.map((i) => xs[i]), pick(s.values), pick(s.smoothed)] : [order.map((i) => xs[i]), pick(s.values)];
  });
  const data = tables.length === 0 ? [[]] : uPlot.join(tables);
  const series = [{ label: state.xAxis === "step" ? "step" : state.xAxis === "wall" ? "wall time" : "hours" }];
  for (const run of runs) {
    const color = colorOf(run);
    series.push({ label: smoothing ? `${run} (raw)` : run, stroke: smoothing ? `${color}55` : color, width: 1, spanGaps: true, points: { show: false } });
    if (smoothing) series.push({ label: run, stroke: color, width: 1.5, spanGaps: true, points: { show: false } });
  }
  const layoutKey = JSON.stringify([runs, smoothing, state.xAxis, state.logScale]);
  if (chart.uplot === undefined || chart.layoutKey !== layoutKey) {
    chart.uplot?.destroy();
    chart.layoutKey = layoutKey;
    chart.uplot = new uPlot(options(chart, series), data, chart.plot);
  } else {
    chart.uplot.setData(data);
  }
  renderDownloads(chart, runs);
  const view = exposed.charts[chart.tag];
  view.runs = Object.fromEntries(runs.map((run) => [run, chart.runs[run]]));
  view.zoom = chart.zoom;
  view.drawnSeries = series.slice(1).map((s) => s.label);
  view.xRange = [data[0][0], data[0][data[0].length - 1]];
  view.yDistr = chart.uplot.scales.y.distr;
  view.checkpoints = Object.fromEntries(runs.flatMap((run) => (state.checkpoints[run]?.length > 0 ? [[run, state.checkpoints[run].map((c) => c.step)]] : [])));
  view.renders++;
};

const options = (chart, series) => ({
  width: CHART_WIDTH,
  height: CHART_HEIGHT,
  series,
  legend: { show: false },
  scales: { x: { time: state.xAxis === "wall" }, y: state.logScale ? { distr: 3 } : {} },
  axes: [{}, { size: 60 }],
  cursor: {
    drag: { x: true, y: false, setScale: false },
    bind: { dblclick: () => () => null },
  },
  hooks: {
    setSelect: [
      (u) => {
        if (u.select.width < 3) return;
        if (state.xAxis !== "step") {
          // Time axes: zoom in the page only (the step range of a time range differs per run).
          u.setScale("x", { min: u.posToVal(u.select.left, "x"), max: u.posToVal(u.select.left + u.select.width, "x") });
        } else {
          chart.zoom = [u.posToVal(u.select.left, "x"), u.posToVal(u.select.left + u.select.width, "x")];
          refresh(chart);
        }
        u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
      },
    ],
    setCursor: [(u) => showTooltip(chart, u)],
    draw: [
      (u) => {
        const view = exposed.charts[chart.tag];
        const drawn = drawCheckpoints(u, state.xAxis, Object.fromEntries(Object.entries(chart.runs).map(([run, s]) => [run, { marks: state.checkpoints[run] ?? [], t0: s.wallTimes[0] ?? 0, color: colorOf(run) }])));
        if (view !== undefined) view.markersDrawn = drawn;
      },
    ],
  },
});

const renderDownloads = (chart, runs) => {
  chart.downloads.replaceChildren(
    ...runs.map((run) => {
      const span = document.createElement("span");
      span.append(`${run}: `);
      for (const format of ["csv", "json"]) {
        const a = document.createElement("a");
        const params = { run, tag: chart.tag };
        if (format === "csv") params.format = "csv";
        a.href = `data/plugin/scalars/scalars?${q(params)}`;
        a.download = `${run}-${chart.tag}.${format}`.replace(/[^\w.-]+/g, "_");
        a.textContent = format.toUpperCase();
        span.append(a);
      }
      return span;
    }),
  );
};

// ----- tooltip: each run's value nearest the hovered x -----

const nearest = (xs, x) => {
  let lo = 0;
  let hi = xs.length - 1;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (xs[mid] < x) lo = mid;
    else hi = mid;
  }
  return Math.abs(xs[lo] - x) <= Math.abs(xs[hi] - x) ? lo : hi;
};

const fmt = (v) => (v === null || v === undefined ? "NaN" : Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(4) : v.toPrecision(5));

const showTooltip = (chart, u) => {
  const tip = $("tooltip");
  const { left, top, idx } = u.cursor;
  if (idx === null || idx === undefined || left < 0) {
    tip.hidden = true;
    return;
  }
  const x = u.posToVal(left, "x");
  const rows = Object.entries(chart.runs).flatMap(([run, s]) => {
    const xs = xsOf(s);
    if (xs.length === 0) return [];
    const i = nearest(xs, x);
    return [[run, s.steps[i], s.values[i], s.smoothed[i]]];
  });
  const table = document.createElement("table");
  for (const [run, step, value, smoothed] of rows) {
    const tr = document.createElement("tr");
    const cells = [run, `step ${step}`, state.smoothing > 0 ? fmt(smoothed) : fmt(value), state.smoothing > 0 ? `(raw ${fmt(value)})` : ""];
    for (const c of cells) {
      const td = document.createElement("td");
      td.textContent = c;
      tr.append(td);
    }
    tr.firstChild.style.color = colorOf(run);
    table.append(tr);
  }
  tip.replaceChildren(table);
  const box = u.over.getBoundingClientRect();
  tip.style.left = `${box.left + left + 12}px`;
  tip.style.top = `${box.top + top + 12}px`;
  tip.hidden = false;
  exposed.tooltip = rows.map(([run, step, value, smoothed]) => ({ run, step, value, smoothed }));
};

// ----- live updates -----

const connect = () => {
  const source = new EventSource("board/events");
  const status = $("status");
  source.addEventListener("open", () => (status.textContent = "live"));
  source.addEventListener("error", () => (status.textContent = "reconnecting…"));
  const reloadRuns = () => loadRuns().catch((e) => (status.textContent = String(e)));
  source.addEventListener("hello", (e) => {
    if (JSON.parse(e.data).loaded) loadingEnded();
    reloadRuns();
  });
  source.addEventListener("runs", reloadRuns);
  source.addEventListener("loaded", () => {
    loadingEnded();
    reloadRuns();
  });
  source.addEventListener("scalars", (e) => {
    exposed.events++;
    const changed = JSON.parse(e.data);
    if (changed.some(({ run, tag }) => !(state.tagsByRun[run] ?? []).includes(tag))) return void reloadRuns();
    for (const tag of new Set(changed.map((c) => c.tag))) {
      const chart = state.charts.get(tag);
      if (chart !== undefined) refreshGrown(chart);
    }
  });
  source.addEventListener("purge", (e) => {
    exposed.events++;
    const { run, tag } = JSON.parse(e.data);
    for (const chart of state.charts.values()) if ((tag === undefined || tag === chart.tag) && chart.runs[run] !== undefined) refresh(chart);
    views.purged(run, tag);
  });
  source.addEventListener("views", (e) => {
    exposed.events++;
    const changed = JSON.parse(e.data);
    if (changed.some((c) => c.plugin === "checkpoints")) loadCheckpoints().catch((err) => (status.textContent = String(err)));
    views.changed(changed);
  });
  $("timelines-refresh").addEventListener("click", () => views.timelines().catch((err) => (status.textContent = String(err))));
};

// ----- settings -----

const settings = () => {
  const slider = $("smoothing");
  let timer;
  slider.addEventListener("input", () => {
    state.smoothing = Number(slider.value);
    exposeSettings();
    $("smoothing-value").textContent = slider.value;
    clearTimeout(timer);
    timer = setTimeout(() => {
      for (const chart of state.charts.values()) refresh(chart);
    }, 100);
  });
  $("x-axis").addEventListener("change", (e) => {
    state.xAxis = e.target.value;
    exposeSettings();
    for (const chart of state.charts.values()) draw(chart);
  });
  $("log-scale").addEventListener("change", (e) => {
    state.logScale = e.target.checked;
    exposeSettings();
    for (const chart of state.charts.values()) draw(chart);
  });
  $("filter").addEventListener("input", (e) => {
    try {
      state.filter = new RegExp(e.target.value, "i");
      e.target.classList.remove("invalid");
    } catch {
      e.target.classList.add("invalid");
      return;
    }
    applyFilter();
  });
};

settings();
loadRuns()
  .then(() => {
    exposed.ready = true;
  })
  .catch((e) => ($("status").textContent = String(e)));
connect();
