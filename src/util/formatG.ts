/**
 * Python's `%g`, so the log lines of hooks and of the session's log observer read like
 * TensorFlow's.
 *
 * @module
 */

/**
 * Formats `x` like Python's `"%g" % x`: `precision` significant digits, trailing zeros dropped,
 * exponent notation below 1e-4 or from 10^precision.
 *
 * @example
 * ```ts
 * import { formatG } from "./formatG.js";
 *
 * formatG(100.0);      // "100"
 * formatG(1234567);    // "1.23457e+06"
 * formatG(0.00001);    // "1e-05"
 * ```
 */
export const formatG = (x: number, precision = 6): string => {
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0" : "0";
  const p = Math.max(1, precision);
  // The exponent after rounding to p significant digits decides the notation, as in C.
  const sci = x.toExponential(p - 1);
  const at = sci.indexOf("e");
  const exp = Number(sci.slice(at + 1));
  if (exp < -4 || exp >= p) {
    const mantissa = stripZeros(sci.slice(0, at));
    const sign = exp < 0 ? "-" : "+";
    const digits = String(Math.abs(exp)).padStart(2, "0");
    return `${mantissa}e${sign}${digits}`;
  }
  return stripZeros(x.toFixed(p - 1 - exp));
};

const stripZeros = (s: string): string => (s.includes(".") ? s.replace(/\.?0+$/, "") : s);
