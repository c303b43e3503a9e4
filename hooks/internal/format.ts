/**
 * Text formatting shared by the logging hooks: Python's `%g` (src/util/formatG.ts, which the
 * session's log observer uses too) and a NumPy-like rendering of fetched values, so log lines
 * read like TensorFlow's.
 *
 * @module
 */

export { formatG } from "../../src/util/formatG.js";

/** Formats `x` like Python's `"%.3f" % x`. */
export const formatFixed3 = (x: number): string => x.toFixed(3);

/**
 * Renders a fetched value for a log line: numbers as JavaScript prints them, typed and plain
 * arrays and tensors NumPy-style (`[1 2 3]`, nested by shape), anything else as JSON.
 */
export const formatValue = (v: unknown): string => {
  if (typeof v === "string") return v;
  if (typeof v === "number" || typeof v === "bigint" || typeof v === "boolean") return String(v);
  if (v === null || v === undefined) return String(v);
  if (ArrayBuffer.isView(v)) return bracket(Array.from(v as unknown as ArrayLike<unknown>, formatValue));
  if (Array.isArray(v)) return bracket(v.map(formatValue));
  if (isTensorLike(v)) return formatTensor(v);
  try {
    return JSON.stringify(v, (_k, x: unknown) => (typeof x === "bigint" ? String(x) : x));
  } catch {
    return String(v);
  }
};


const bracket = (items: readonly string[]): string => `[${items.join(" ")}]`;

interface TensorLike {
  readonly shape: readonly number[];
  readonly data: ArrayLike<unknown>;
}

const isTensorLike = (v: object): v is TensorLike =>
  "shape" in v && "data" in v && Array.isArray((v as TensorLike).shape);

const formatTensor = (t: TensorLike): string => {
  const flat = Array.from(t.data, formatValue);
  if (t.shape.length === 0) return flat[0] ?? "";
  const nest = (dim: number, offset: number): [string, number] => {
    const n = t.shape[dim] ?? 0;
    if (dim === t.shape.length - 1) return [bracket(flat.slice(offset, offset + n)), offset + n];
    const parts: string[] = [];
    let at = offset;
    for (let i = 0; i < n; i++) {
      const [s, next] = nest(dim + 1, at);
      parts.push(s);
      at = next;
    }
    return [bracket(parts), at];
  };
  return nest(0, 0)[0];
};
