// The histogram view: an "offset" chart per tag, one line per step, stacked with a vertical
// offset by step (oldest at the back, at the top; newest in front, at the bottom), on a canvas.

const WIDTH = 520;
const HEIGHT = 260;
/** The most steps drawn as lines (evenly spread, the newest always among them); the card asks the server for no more. */
export const MAX_LINES = 100;
/** The right margin holds the step labels ("step 1234567"). */
const MARGIN = { left: 8, right: 84, top: 8, bottom: 22 };

/** The indices of at most `max` of `n` rows, evenly spread, first and last included. */
export const spread = (n, max) => {
  if (n <= max) return Array.from({ length: n }, (_, i) => i);
  const picked = new Set(Array.from({ length: max }, (_, k) => Math.round((k * (n - 1)) / (max - 1))));
  return [...picked].sort((a, b) => a - b);
};

/**
 * Draws `rows` (`[[wall_time, step, [[left, right, count], …]], …]`, the histograms route) on
 * `canvas`; returns the steps drawn, oldest first.
 */
export const drawOffset = (canvas, rows, color) => {
  const ratio = window.devicePixelRatio || 1;
  canvas.width = WIDTH * ratio;
  canvas.height = HEIGHT * ratio;
  canvas.style.width = `${WIDTH}px`;
  canvas.style.height = `${HEIGHT}px`;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, WIDTH, HEIGHT);
  const picked = spread(rows.length, MAX_LINES).map((i) => rows[i]);
  if (picked.length === 0) return [];
  let lo = Infinity;
  let hi = -Infinity;
  let peak = 0;
  for (const [, , buckets] of picked) {
    for (const [l, r, c] of buckets) {
      if (Number.isFinite(l)) lo = Math.min(lo, l);
      if (Number.isFinite(r)) hi = Math.max(hi, r);
      if (Number.isFinite(c)) peak = Math.max(peak, c);
    }
  }
  if (!(hi > lo)) {
    lo -= 0.5;
    hi += 0.5;
  }
  const plotW = WIDTH - MARGIN.left - MARGIN.right;
  const plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
  // Each line may rise 45% of the height; the baselines share the rest.
  const rise = plotH * 0.45;
  const band = plotH - rise;
  const n = picked.length;
  const xOf = (v) => MARGIN.left + ((v - lo) / (hi - lo)) * plotW;
  ctx.lineWidth = 1;
  picked.forEach(([, step, buckets], i) => {
    const base = MARGIN.top + rise + (n === 1 ? band : (band * i) / (n - 1));
    const yOf = (c) => base - (peak > 0 ? (c / peak) * rise : 0);
    ctx.beginPath();
    ctx.moveTo(xOf(buckets[0]?.[0] ?? lo), base);
    for (const [l, r, c] of buckets) {
      ctx.lineTo(xOf((l + r) / 2), yOf(c));
    }
    ctx.lineTo(xOf(buckets.at(-1)?.[1] ?? hi), base);
    ctx.closePath();
    // Newer lines are drawn later, over the older ones, which they hide: the front.
    ctx.fillStyle = "rgba(255, 255, 255, 0.9)";
    ctx.fill();
    ctx.globalAlpha = 0.35 + (0.65 * (i + 1)) / n;
    ctx.strokeStyle = color;
    ctx.stroke();
    ctx.globalAlpha = 1;
    if (i === 0 || i === n - 1) {
      ctx.fillStyle = "#555";
      ctx.font = "11px system-ui, sans-serif";
      ctx.fillText(`step ${step}`, WIDTH - MARGIN.right + 4, base);
    }
  });
  ctx.fillStyle = "#555";
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillText(fmt(lo), MARGIN.left, HEIGHT - 6);
  const right = fmt(hi);
  ctx.fillText(right, MARGIN.left + plotW - ctx.measureText(right).width, HEIGHT - 6);
  return picked.map(([, step]) => step);
};

const fmt = (v) => (Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(2) : String(Number(v.toPrecision(4))));
