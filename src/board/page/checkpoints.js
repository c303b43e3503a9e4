// Markers on the scalar charts: a thin dashed vertical line at each checkpoint of each drawn run
// (its SessionLog CHECKPOINT events, /board/checkpoints), and a solid one at each restart
// (goodput.js), in the run's color, drawn on uPlot's canvas from its draw hook: no DOM, nothing
// inline, so the page's CSP stays strict.

/** The x of a checkpoint in axis mode `xAxis` (`relative`: hours from the run's first point `t0`). */
const xOf = (mark, xAxis, t0) => (xAxis === "step" ? mark.step : xAxis === "wall" ? mark.wall_time : (mark.wall_time - t0) / 3600);

/**
 * Draws the markers of `runs` (`{run: {marks: [{step, wall_time}], t0, color}}`) on uPlot `u`, as
 * `style` says (default: checkpoints' thin dashed lines; restarts are solid and wider); returns
 * those inside the plot, `[{run, step, px}]`, for the tests. A mark without a step is drawn on the
 * time axes only.
 */
export const drawCheckpoints = (u, xAxis, runs, style = { dash: [4, 3], width: 1 }) => {
  const drawn = [];
  const ratio = window.devicePixelRatio || 1;
  const { left, top, width, height } = u.bbox;
  const ctx = u.ctx;
  ctx.save();
  ctx.lineWidth = Math.max(1, style.width * ratio);
  ctx.setLineDash(style.dash.map((d) => d * ratio));
  for (const [run, { marks, t0, color }] of Object.entries(runs)) {
    ctx.strokeStyle = color;
    for (const mark of marks) {
      if (xAxis === "step" && (mark.step === null || mark.step === undefined)) continue;
      const px = Math.round(u.valToPos(xOf(mark, xAxis, t0), "x", true)) + 0.5;
      if (!(px >= left && px <= left + width)) continue;
      ctx.beginPath();
      ctx.moveTo(px, top);
      ctx.lineTo(px, top + height);
      ctx.stroke();
      drawn.push({ run, step: mark.step, px });
    }
  }
  ctx.restore();
  return drawn;
};
