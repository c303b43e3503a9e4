/**
 * `classicSmoothing`: TensorBoard's debiased exponential moving average of a scalar series, the
 * "Smoothing" slider of its scalar charts (`line_chart_v2/data_transformer.ts`, same algorithm,
 * same outputs). The board's page applies it to the **full-resolution** series before any
 * decimation, so the smoothed curve does not change with the zoom or the chart's width
 * (TensorBoard smooths its 1,000 sampled points: its issues 1518 and 6829).
 *
 * @example
 * ```ts
 * import { classicSmoothing } from "./classicSmoothing.js";
 *
 * classicSmoothing([1, 2, 3], 0.6); // Float64Array [1, 1.625, 2.3265…]
 * ```
 *
 * @module
 */

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * The smoothed values of `values`, in array order (not step order), with weight `weight`:
 * clamped to [0, 1], a non-finite weight is 0 (no smoothing). A non-finite value passes through
 * and leaves the average as it was; a series whose values are all equal is returned unchanged.
 */
export const classicSmoothing = (values: ArrayLike<number>, weight: number): Float64Array => {
  const w = Number.isFinite(weight) ? Math.min(1, Math.max(0, weight)) : 0;
  const out = Float64Array.from(values);
  const n = out.length;
  if (n === 0 || out.every((v) => v === out[0])) return out;
  let last = 0;
  let accumulated = 0;
  for (let i = 0; i < n; i++) {
    const y = out[i] as number;
    if (!Number.isFinite(y)) continue;
    last = last * w + (1 - w) * y;
    accumulated++;
    // TensorBoard divides by 1 at w = 1 (every output is then 0), not by 1 - 1^n = 0.
    out[i] = w === 1 ? last : last / (1 - w ** accumulated);
  }
  return out;
};
