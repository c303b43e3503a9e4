// The goodput view: per run, where its time went across every restart (/board/goodput, the
// group's figures), as one stacked bar drawn on a canvas (nothing inline: the page's CSP stays
// strict), with its figures in words beside it. And the runs' restarts, ranks restarted alone and injected faults as
// markers on the scalar charts: a solid vertical line at each restart of the run's chief, at the
// step its training resumed from (or, on the time axes, when its process started); a dotted one
// at each fault `launch --chaos` injected, at the chief's step then (or its time).

/** The buckets, in the order the bar draws them after the productive time (docs/goodput.md). */
export const BUCKETS = ["startup", "clusterJoin", "restore", "checkpointSave", "preemption", "collectiveWait", "wastedProgress", "infrastructureRecovery", "other"];

/** A colour per segment: productive time first, then each bucket. */
const SEGMENT_COLORS = {
  productive: "#2e7d32",
  startup: "#90a4ae",
  clusterJoin: "#7e57c2",
  restore: "#29b6f6",
  checkpointSave: "#26a69a",
  preemption: "#ffa726",
  collectiveWait: "#8d6e63",
  wastedProgress: "#e53935",
  infrastructureRecovery: "#6d4c41",
  other: "#bdbdbd",
};

const BAR_WIDTH = 520;
const BAR_HEIGHT = 18;

/** `93.1s`, `4m12s`, `2h03m` (as the command line says it). */
const formatSecs = (secs) => {
  if (secs < 60) return `${secs.toFixed(1)}s`;
  const whole = Math.round(secs);
  if (whole < 3600) return `${Math.floor(whole / 60)}m${String(whole % 60).padStart(2, "0")}s`;
  return `${Math.floor(whole / 3600)}h${String(Math.floor((whole % 3600) / 60)).padStart(2, "0")}m`;
};

/** The segments of a run's bar: productive time, then each bucket with time in it, with their widths in pixels (which add up to the bar). */
export const segmentsOf = (group, width = BAR_WIDTH) => {
  const parts = [["productive", group.productiveSecs], ...BUCKETS.map((b) => [b, group.badput[b] ?? 0])].filter(([, secs]) => secs > 0);
  const total = parts.reduce((n, [, secs]) => n + secs, 0);
  let x = 0;
  return parts.map(([name, secs], i) => {
    // The last segment ends at the bar's end: the widths add up to it whatever the rounding.
    const end = i === parts.length - 1 ? width : x + (secs / total) * width;
    const seg = { name, secs, x, px: Math.max(0, end - x), color: SEGMENT_COLORS[name] };
    x = end;
    return seg;
  });
};

/**
 * Fills `container` with one row per run of `goodput` (`{run: {tasks, group}}`) that has group
 * figures; returns what each bar drew, `{run: [{name, secs, px}]}`, for the tests.
 */
export const renderGoodput = (container, goodput, runs) => {
  const drawn = {};
  const rows = [];
  for (const run of runs) {
    const group = goodput[run]?.group;
    if (group === null || group === undefined || !(group.totalSecs > 0)) continue;
    const row = document.createElement("div");
    row.className = "goodput-row";
    row.dataset.run = run;
    const title = document.createElement("h3");
    title.textContent = run;
    const canvas = document.createElement("canvas");
    const ratio = window.devicePixelRatio || 1;
    canvas.width = BAR_WIDTH * ratio;
    canvas.height = BAR_HEIGHT * ratio;
    canvas.className = "goodput-bar";
    canvas.setAttribute("role", "img");
    const segments = segmentsOf(group);
    const ctx = canvas.getContext("2d");
    for (const s of segments) {
      ctx.fillStyle = s.color;
      ctx.fillRect(s.x * ratio, 0, s.px * ratio, BAR_HEIGHT * ratio);
    }
    // In words, what is worth a tenth of a second (as the command line says it); the bar has every segment.
    const words = segments.filter((s) => s.secs >= 0.05).map((s) => `${s.name} ${formatSecs(s.secs)}`).join(", ");
    canvas.setAttribute("aria-label", `${run}: ${words}`);
    const legend = document.createElement("p");
    legend.className = "goodput-legend";
    const restarts = (goodput[run].tasks ?? []).find((t) => t.chief)?.restarts?.length ?? 0;
    const rejoins = goodput[run].rejoins?.length ?? 0;
    legend.textContent = `goodput ${(group.goodput * 100).toFixed(1)}% of ${formatSecs(group.totalSecs)}${restarts > 0 ? `, ${restarts} restart${restarts === 1 ? "" : "s"}` : ""}${rejoins > 0 ? `, ${rejoins} rank${rejoins === 1 ? "" : "s"} restarted alone` : ""}: ${words}`;
    const key = document.createElement("ul");
    key.className = "goodput-key";
    for (const s of segments) {
      const item = document.createElement("li");
      const swatch = document.createElement("canvas");
      swatch.width = 10;
      swatch.height = 10;
      const sctx = swatch.getContext("2d");
      sctx.fillStyle = s.color;
      sctx.fillRect(0, 0, 10, 10);
      item.append(swatch, ` ${s.name}`);
      key.append(item);
    }
    row.append(title, canvas, legend, key);
    rows.push(row);
    drawn[run] = segments.map(({ name, secs, px }) => ({ name, secs, px }));
  }
  container.replaceChildren(...rows);
  return drawn;
};

/** Each run's restarts as chart markers, `{run: [{step, wall_time}]}`, from its chief's figures (`step` null: not known). */
export const restartMarks = (goodput) =>
  Object.fromEntries(
    Object.entries(goodput).flatMap(([run, figures]) => {
      const chief = (figures.tasks ?? []).find((t) => t.chief);
      const marks = (chief?.restarts ?? []).map((r) => ({ step: r.step, wall_time: r.t / 1000 }));
      return marks.length === 0 ? [] : [[run, marks]];
    }),
  );

/** Each run's ranks restarted alone (they rejoined while the chief trained on) as chart markers, `{run: [{step, wall_time, task}]}` (`step` null: not known). */
export const rejoinMarks = (goodput) =>
  Object.fromEntries(
    Object.entries(goodput).flatMap(([run, figures]) => {
      const marks = (figures.rejoins ?? []).map((r) => ({ step: r.step, wall_time: r.t / 1000, task: r.task }));
      return marks.length === 0 ? [] : [[run, marks]];
    }),
  );

/** Each run's injected faults (`launch --chaos`) as chart markers, `{run: [{step, wall_time, kind, target}]}` (`step` null: not known). */
export const faultMarks = (goodput) =>
  Object.fromEntries(
    Object.entries(goodput).flatMap(([run, figures]) => {
      const marks = (figures.faults ?? []).map((f) => ({ step: f.step, wall_time: f.t / 1000, kind: f.kind, target: f.target }));
      return marks.length === 0 ? [] : [[run, marks]];
    }),
  );
