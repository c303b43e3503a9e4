/** Small statistics helpers shared by the benchmarks. */

/** The median of `xs` (the mean of the middle two for an even count). */
export const median = (xs: readonly number[]): number => {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
};

/** Milliseconds from a `process.hrtime.bigint()` start. */
export const elapsedMs = (start: bigint): number => Number(process.hrtime.bigint() - start) / 1e6;

/** Rounds to `digits` significant decimals for readable JSON. */
export const round = (x: number, digits = 4): number => Number(x.toFixed(digits));
