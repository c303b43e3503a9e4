/** Small statistics helpers shared by the benchmarks. */

/** The `q`-quantile of `xs` (0 ≤ q ≤ 1), interpolated between the nearest ranks. */
export const quantile = (xs: readonly number[], q: number): number => {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const at = q * (s.length - 1);
  const lo = Math.floor(at);
  const hi = Math.ceil(at);
  return (s[lo] as number) + ((s[hi] as number) - (s[lo] as number)) * (at - lo);
};

/** The median of `xs` (the mean of the middle two for an even count). */
export const median = (xs: readonly number[]): number => quantile(xs, 0.5);

/** Milliseconds from a `process.hrtime.bigint()` start. */
export const elapsedMs = (start: bigint): number => Number(process.hrtime.bigint() - start) / 1e6;

/** Rounds to `digits` significant decimals for readable JSON. */
export const round = (x: number, digits = 4): number => Number(x.toFixed(digits));
