/**
 * `decimateM4`: a shape-preserving decimation of a scalar series for a chart `pixels` columns
 * wide (M4, Jugel et al., PVLDB 2014). The step range is cut into `pixels` columns of equal width,
 * and each column keeps at most four points: its first, its last, its lowest and its highest.
 * A line drawn through them covers the same pixels as the line through every point, so a spike
 * survives however many points a column holds (TensorBoard's 1,000 random points lose it).
 *
 * The columns are by step, over `[minStep, maxStep]` (the series' own range by default, or a
 * zoomed one). Points keep their array order; "first" and "last" are first and last in that
 * order, which is step order for a series that only grows. `NaN` values take no part in the
 * minimum and maximum (they are kept only as a column's first or last point); `±Infinity` do.
 *
 * @example
 * ```ts
 * import { decimateM4 } from "./decimateM4.js";
 *
 * const steps = Int32Array.from({ length: 1e6 }, (_, i) => i);
 * const values = Float32Array.from(steps, (s) => Math.sin(s / 1e4));
 * const kept = decimateM4(steps, values, { pixels: 800 }); // indices into steps/values, at most 3,200
 * ```
 *
 * @module
 */

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The chart's width and the step range it shows. */
export interface M4Options {
  /** Pixel columns (a positive integer). */
  readonly pixels: number;
  /** First step shown (default: the series' lowest). Points below it are left out. */
  readonly minStep?: number | undefined;
  /** Last step shown (default: the series' highest). Points above it are left out. */
  readonly maxStep?: number | undefined;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** The indices of the points to draw, ascending: at most 4 per column. O(n) time, O(pixels) space. */
export const decimateM4 = (steps: ArrayLike<number>, values: ArrayLike<number>, options: M4Options): Uint32Array => {
  const n = steps.length;
  const pixels = Math.max(1, Math.floor(options.pixels));
  let lo = options.minStep ?? Number.POSITIVE_INFINITY;
  let hi = options.maxStep ?? Number.NEGATIVE_INFINITY;
  if (options.minStep === undefined || options.maxStep === undefined) {
    for (let i = 0; i < n; i++) {
      const s = steps[i] as number;
      if (options.minStep === undefined && s < lo) lo = s;
      if (options.maxStep === undefined && s > hi) hi = s;
    }
  }
  if (!(lo <= hi)) return new Uint32Array(0);
  const first = new Int32Array(pixels).fill(-1);
  const last = new Int32Array(pixels);
  const low = new Int32Array(pixels).fill(-1);
  const high = new Int32Array(pixels).fill(-1);
  const scale = hi > lo ? pixels / (hi - lo) : 0;
  for (let i = 0; i < n; i++) {
    const s = steps[i] as number;
    if (s < lo || s > hi) continue;
    const c = Math.min(pixels - 1, Math.floor((s - lo) * scale));
    if (first[c] === -1) first[c] = i;
    last[c] = i;
    const v = values[i] as number;
    if (Number.isNaN(v)) continue;
    const l = low[c] as number;
    if (l === -1 || v < (values[l] as number)) low[c] = i;
    const h = high[c] as number;
    if (h === -1 || v > (values[h] as number)) high[c] = i;
  }
  const kept: number[] = [];
  for (let c = 0; c < pixels; c++) {
    const f = first[c] as number;
    if (f === -1) continue;
    const picks = [f, last[c] as number, low[c] as number, high[c] as number].filter((i, k, all) => i !== -1 && all.indexOf(i) === k);
    for (const i of picks) kept.push(i);
  }
  return Uint32Array.from(kept).sort();
};
