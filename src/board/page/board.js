// The board's page: one uPlot chart per scalar tag, runs overlaid. Plain ES module, no build step.
// The server smooths every point and then decimates (/board/series): the page only draws.
// Tags are shown in groups by prefix, a page of charts at a time (tagGroups.js): only the charts
// of an open group's current page exist. A chart is fetched when it comes near the view
// (IntersectionObserver), through one queue of a few requests at a time (requestQueue.js); a
// chart out of view that changes is marked stale and fetched when it comes back.
// `window.__board` exposes what each chart holds, for the browser tests.
// Each chart marks its runs' checkpoints (SessionLog CHECKPOINT, /board/checkpoints) with a thin
// dashed vertical line, their restarts (/board/goodput) with a solid one, a rank restarted alone
// while the chief trained on with a long-dashed one, and the faults `launch --chaos` injected into
// them with a dotted one, drawn on uPlot's canvas in its draw hook
// (no DOM, nothing inline). The goodput view (goodput.js) draws each run's
// time as a stacked bar of its buckets.
// The views beyond scalars (histograms, images, text, timelines) are in views.js.
// Every URL is relative to the page, so the board also works behind a reverse proxy that serves
// it under a path (https://host/tb/ → /tb/data/runs, …).
import { drawCheckpoints } from "./checkpoints.js";
import { faultMarks, rejoinMarks, renderGoodput, restartMarks } from "./goodput.js";
import { runColor } from "./colors.js";
import { createRequestQueue } from "./requestQueue.js";
import { layoutGroups, PAGE_SIZE } from "./tagGroups.js";
import { coalesce, createViews, el } from "./views.js";

// uPlot's own ES module, served by the board from the installed `uplot` package (pageAssets.ts).
// Imported by URL through a variable: it is a browser URL, not a path for Node's resolution.
// Not awaited here: the page asks for its runs and tags meanwhile; a chart waits for it before
// its first draw (every draw is of a chart fetched, so after that).
const UPLOT_URL = new URL("board/uplot/uPlot.esm.js", document.baseURI).href;
let uPlot;
const uPlotLoaded = import(UPLOT_URL).then((m) => (uPlot = m.default));
uPlotLoaded.catch((e) => ($("status").textContent = `uPlot did not load: ${e}`));

const CHART_WIDTH = 520;
const CHART_HEIGHT = 260;
// While the server first reads the logdir, every series grows at each update: a chart is fetched
// again at most this often (ms), so that the page does not keep the server from reading.
const LOADING_REFRESH_MS = 1000;
/** Without the live stream's `hello` within this time (a proxy holding the stream back), the page loads without it. */
const HELLO_WAIT_MS = 2000;
/** The goodput figures are asked for again, as scalars grow, at most this often (ms): the server recomputes them from the logs. */
const GOODPUT_REFRESH_MS = 10_000;
/** Chart requests in flight at most: enough to keep the server busy, few enough for any browser. */
const CONCURRENT_FETCHES = 4;
/** A chart within a screen's height above the view or two below counts as in view: what a scroll shows next is fetched ahead. */
const VIEW_MARGIN = "100% 0px 200% 0px";

const state = {
  runs: [],
  hiddenRuns: new Set(),
  /** Per run, the Set of its scalar tags. */
  tagsByRun: {},
  /** Every run's tags, sorted. */
  tags: [],
  smoothing: 0.6,
  xAxis: "step",
  logScale: false,
  filter: /(?:)/,
  /** The chart cards that exist (those of the open groups' pages shown), by tag. */
  charts: new Map(),
  /** The tag groups' elements, by group name. */
  groups: new Map(),
  /** What the user chose per group: open (boolean) and page (index). */
  choices: { open: new Map(), page: new Map() },
  /** Per run: [{step, wall_time, path}], by step. */
  checkpoints: {},
  /** Per run: its goodput figures (/board/goodput), its restarts as markers [{step, wall_time}], its ranks restarted alone [{step, wall_time, task}], and its injected faults [{step, wall_time, kind, target}]. */
  goodput: {},
  restarts: {},
  rejoins: {},
  faults: {},
  /** When the goodput figures were last asked for (performance.now()), to ask at most every GOODPUT_REFRESH_MS. */
  goodputAt: -Infinity,
  /** The server is still reading the logdir for the first time (from `hello` until `loaded`). */
  loading: true,
};

/** What the tests read: per tag, per run, the arrays drawn. */
const exposed = { charts: {}, groups: {}, fetches: 0, ready: false, events: 0, settings: { smoothing: state.smoothing, xAxis: state.xAxis, logScale: state.logScale } };
const exposeSettings = () => (exposed.settings = { smoothing: state.smoothing, xAxis: state.xAxis, logScale: state.logScale });
window.__board = exposed;

const $ = (id) => document.getElementById(id);
const colorOf = runColor;
const q = (params) => new URLSearchParams(params).toString();

const getJson = async (url) => {
  const res = await fetch(url, { headers: { Accept: "application/json" } });
  if (!res.ok) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  return res.json();
};

const views = createViews(exposed, { getJson, q, colorOf, isHidden: (run) => state.hiddenRuns.has(run), runs: () => state.runs });

const loadCheckpoints = async () => {
  state.checkpoints = await getJson("board/checkpoints");
  for (const chart of state.charts.values()) if (chart.uplot !== undefined) draw(chart);
};

/** The goodput view and the restart markers, from /board/goodput (hidden without goodput logs). One at a time. */
const loadGoodput = coalesce(async () => {
  state.goodputAt = performance.now();
  state.goodput = await getJson("board/goodput");
  const marks = { restarts: restartMarks(state.goodput), rejoins: rejoinMarks(state.goodput), faults: faultMarks(state.goodput) };
  const moved = Object.entries(marks).some(([kind, m]) => JSON.stringify(m) !== JSON.stringify(state[kind]));
  Object.assign(state, marks);
  showGoodput();
  if (moved) for (const chart of state.charts.values()) if (chart.uplot !== undefined) draw(chart);
});

/** Draws the goodput view of the runs shown (hidden when none has figures). */
const showGoodput = () => {
  exposed.goodput = renderGoodput($("goodput"), state.goodput, state.runs.filter((run) => !state.hiddenRuns.has(run)));
  $("goodput-view").hidden = Object.keys(exposed.goodput).length === 0;
};

/** Asks for the goodput figures again once GOODPUT_REFRESH_MS passed since the last time (scalars grew). */
const refreshGoodput = () => {
  if (performance.now() - state.goodputAt < GOODPUT_REFRESH_MS) return;
  loadGoodput().catch((e) => ($("status").textContent = String(e)));
};

/** Every chart request; a failed one (the tag went away) is redrawn empty by fetchChart itself. */
const queue = createRequestQueue({ concurrency: CONCURRENT_FETCHES, onError: (e) => ($("status").textContent = String(e)) });
exposed.queue = queue.stats;

/** Marks each chart in or out of view; one that comes into view stale is fetched, one that leaves before its turn is not. */
const observer = new IntersectionObserver(
  (entries) => {
    for (const entry of entries) {
      const chart = chartOfElement.get(entry.target);
      if (chart === undefined) continue;
      chart.visible = entry.isIntersecting;
      if (chart.visible && chart.stale) refresh(chart);
      if (!chart.visible) queue.cancel(chart);
    }
  },
  { rootMargin: VIEW_MARGIN },
);
const chartOfElement = new WeakMap();

// ----- runs and tags -----

/** The runs, shown and not hidden, that have `tag`. */
const runsOf = (tag) => state.runs.filter((run) => !state.hiddenRuns.has(run) && state.tagsByRun[run]?.has(tag) === true);

/**
 * Reads the runs and their tags again; lays out the groups (creating and removing charts), and
 * refreshes the charts whose runs changed (growth is the `scalars` event's). One at a time: a
 * call meanwhile runs after.
 */
const loadRuns = coalesce(async () => {
  const [runs, tags] = await Promise.all([getJson("data/runs"), getJson("data/plugin/scalars/tags")]);
  state.runs = runs;
  state.tagsByRun = Object.fromEntries(Object.entries(tags).map(([run, t]) => [run, new Set(Object.keys(t))]));
  renderRuns();
  const all = new Set();
  for (const set of Object.values(state.tagsByRun)) for (const tag of set) all.add(tag);
  state.tags = [...all].sort();
  $("empty").hidden = state.tags.length > 0;
  renderGroups();
  for (const chart of state.charts.values()) if (chart.runKey !== JSON.stringify(runsOf(chart.tag))) refresh(chart);
  // The goodput view is extra: a failure there is said, and the charts go on.
  await Promise.all([views.load(), loadCheckpoints(), loadGoodput().catch((e) => ($("status").textContent = String(e)))]);
  exposed.ready = true;
});

/** A refresh for new points: while the server first reads the logdir, at most every LOADING_REFRESH_MS per chart. */
const refreshGrown = (chart) => {
  if (!chart.visible) return void (chart.stale = true);
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
        refreshAll();
        views.load();
        showGoodput();
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

// ----- groups: the tags by prefix, a page of charts at a time -----

/** Makes `nodes` the children of `parent`, touching the DOM only if they differ. */
const setChildren = (parent, nodes) => {
  const now = parent.children;
  if (now.length === nodes.length && nodes.every((n, i) => now[i] === n)) return;
  parent.replaceChildren(...nodes);
};

const createGroup = (name) => {
  const toggle = el("button", { type: "button", className: "group-toggle", textContent: name === "" ? "(no prefix)" : name });
  const count = el("span", { className: "group-count" });
  const pager = (where) => {
    const prev = el("button", { type: "button", className: "prev", textContent: "‹ Previous" });
    const label = el("span", { className: "page-label" });
    const next = el("button", { type: "button", className: "next", textContent: "Next ›" });
    const nav = el("nav", { className: `pager pager-${where}`, ariaLabel: `pages of ${name || "tags without a prefix"}` }, prev, label, next);
    const turn = (by) => {
      state.choices.page.set(name, group.page + by);
      renderGroups();
      // From the pager under the charts, back to the group's first charts.
      if (where === "bottom") group.section.scrollIntoView({ block: "start" });
    };
    prev.addEventListener("click", () => turn(-1));
    next.addEventListener("click", () => turn(1));
    return { nav, prev, label, next };
  };
  const top = pager("top");
  const bottom = pager("bottom");
  const body = el("div", { className: "group-charts" });
  const section = el("section", { className: "tag-group" }, el("h2", { className: "group-head" }, toggle, count), top.nav, body, bottom.nav);
  section.dataset.group = name;
  toggle.addEventListener("click", () => {
    state.choices.open.set(name, !group.open);
    renderGroups();
  });
  /** `open` and `page`: as last laid out. */
  const group = { section, toggle, count, pagers: [top, bottom], body, open: false, page: 0 };
  state.groups.set(name, group);
  return group;
};

/** Shows `g` (from layoutGroups) in its group's element. */
const updateGroup = (group, g) => {
  group.open = g.open;
  group.page = g.page;
  group.toggle.setAttribute("aria-expanded", String(g.open));
  group.count.textContent = `${g.tags.length} ${g.tags.length === 1 ? "tag" : "tags"}`;
  const first = g.page * PAGE_SIZE + 1;
  for (const p of group.pagers) {
    p.nav.hidden = !g.open || g.pages === 1;
    p.label.textContent = `page ${g.page + 1} of ${g.pages} (tags ${first}–${first + g.shown.length - 1})`;
    p.prev.disabled = g.page === 0;
    p.next.disabled = g.page === g.pages - 1;
  }
};

/**
 * Lays out the groups of the tags that pass the filter: each open group's page of charts is
 * created (or kept), every other chart is removed. Charts fetch themselves as they come into view.
 */
const renderGroups = () => {
  const layout = layoutGroups(
    state.tags.filter((t) => state.filter.test(t)),
    state.choices,
  );
  const kept = new Set();
  const sections = layout.map((g) => {
    const group = state.groups.get(g.name) ?? createGroup(g.name);
    updateGroup(group, g);
    setChildren(
      group.body,
      g.shown.map((tag) => {
        kept.add(tag);
        return (state.charts.get(tag) ?? createChart(tag)).el;
      }),
    );
    return group.section;
  });
  for (const chart of [...state.charts.values()]) if (!kept.has(chart.tag)) removeChart(chart);
  const names = new Set(layout.map((g) => g.name));
  for (const [name, group] of state.groups) {
    if (names.has(name)) continue;
    group.section.remove();
    state.groups.delete(name);
  }
  setChildren($("charts"), sections);
  exposed.groups = Object.fromEntries(layout.map((g) => [g.name, { tags: g.tags.length, open: g.open, page: g.page, pages: g.pages, shown: g.shown.length }]));
};

// ----- charts -----

const createChart = (tag) => {
  const title = el("h3", { textContent: tag });
  // Sized before it is drawn, so that charts not yet fetched take their place (and their view).
  const plot = el("div", { className: "plot" });
  const downloads = el("div", { className: "downloads" });
  const section = el("section", { className: "chart" }, title, plot, downloads);
  section.dataset.tag = tag;
  const chart = { tag, el: section, plot, downloads, uplot: undefined, runs: {}, zoom: undefined, layoutKey: "", runKey: "", fetchedAt: Number.NEGATIVE_INFINITY, later: undefined, visible: false, stale: true, fetched: false };
  plot.addEventListener("mouseleave", () => ($("tooltip").hidden = true));
  plot.addEventListener("dblclick", () => {
    chart.zoom = undefined;
    refresh(chart);
  });
  state.charts.set(tag, chart);
  chartOfElement.set(section, chart);
  observer.observe(section);
  exposed.charts[tag] = { runs: {}, zoom: undefined, renders: 0 };
  return chart;
};

const removeChart = (chart) => {
  clearTimeout(chart.later);
  queue.cancel(chart);
  observer.unobserve(chart.el);
  chart.uplot?.destroy();
  chart.el.remove();
  state.charts.delete(chart.tag);
  delete exposed.charts[chart.tag];
};

/**
 * Fetches the chart's series again when it is in view (through the queue: a few requests at a
 * time, one per chart, a request asked meanwhile runs after); out of view it is marked stale and
 * fetched when it comes back.
 */
const refresh = (chart) => {
  chart.stale = true;
  if (chart.visible) queue.add(chart, () => fetchChart(chart));
};

/** Every chart: those in view fetched again, the others marked stale. */
const refreshAll = () => {
  for (const chart of state.charts.values()) refresh(chart);
};

/** Fetches and draws the chart's series once (through the queue, see refresh). */
const fetchChart = async (chart) => {
  if (state.charts.get(chart.tag) !== chart) return; // removed while a fetch before was under way
  chart.stale = false;
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
  await uPlotLoaded;
  if (state.charts.get(chart.tag) !== chart) return;
  chart.runs = fetched;
  chart.fetched = true;
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
        // Each kind of marker for the chart's runs, in the run's color, in `style`.
        const marksOf = (byRun, style) =>
          drawCheckpoints(u, state.xAxis, Object.fromEntries(Object.entries(chart.runs).map(([run, s]) => [run, { marks: byRun[run] ?? [], t0: s.wallTimes[0] ?? 0, color: colorOf(run) }])), style);
        const drawn = marksOf(state.checkpoints);
        const restarts = marksOf(state.restarts, { dash: [], width: 2 });
        const rejoins = marksOf(state.rejoins, { dash: [8, 3], width: 2 });
        const faults = marksOf(state.faults, { dash: [1, 3], width: 2 });
        if (view !== undefined) {
          view.markersDrawn = drawn;
          view.restartsDrawn = restarts;
          view.rejoinsDrawn = rejoins;
          view.faultsDrawn = faults;
        }
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

/**
 * Follows `/board/events`. The first load of the runs and tags waits for the stream's `hello`: a
 * load asked after it misses no update, so the tags (a large answer with many tags) are fetched
 * once, not once before and once after. Without a `hello` (the stream failed, or a proxy holds it
 * back for HELLO_WAIT_MS) the page loads anyway.
 */
const connect = () => {
  const source = new EventSource("board/events");
  const status = $("status");
  const reloadRuns = () => loadRuns().catch((e) => (status.textContent = String(e)));
  let fallback = setTimeout(reloadRuns, HELLO_WAIT_MS);
  const noFallback = () => {
    clearTimeout(fallback);
    fallback = undefined;
  };
  source.addEventListener("open", () => (status.textContent = "live"));
  source.addEventListener("error", () => {
    status.textContent = "reconnecting…";
    if (fallback === undefined) return;
    noFallback();
    reloadRuns();
  });
  source.addEventListener("hello", (e) => {
    noFallback();
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
    if (changed.some(({ run, tag }) => state.tagsByRun[run]?.has(tag) !== true)) return void reloadRuns();
    for (const tag of new Set(changed.map((c) => c.tag))) {
      const chart = state.charts.get(tag);
      if (chart !== undefined) refreshGrown(chart);
    }
    // The run trains on: its goodput changed too (asked for at most every GOODPUT_REFRESH_MS).
    refreshGoodput();
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
    timer = setTimeout(refreshAll, 100);
  });
  $("x-axis").addEventListener("change", (e) => {
    state.xAxis = e.target.value;
    exposeSettings();
    redrawAll();
  });
  $("log-scale").addEventListener("change", (e) => {
    state.logScale = e.target.checked;
    exposeSettings();
    redrawAll();
  });
  $("filter").addEventListener("input", (e) => {
    try {
      state.filter = new RegExp(e.target.value, "i");
      e.target.classList.remove("invalid");
    } catch {
      e.target.classList.add("invalid");
      return;
    }
    renderGroups();
  });
};

/** Every chart drawn again from what it holds (an axis or scale changed); none is fetched. */
const redrawAll = () => {
  for (const chart of state.charts.values()) if (chart.fetched) draw(chart);
};

settings();
connect();
