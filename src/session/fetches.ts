/**
 * Walking nested fetch structures. Internal: used by sessions and the hooked run path.
 *
 * @module
 */

import type { Fetches } from "./Session.js";

/** Appends every name in `fetches` to `out`, depth first, in order. */
export const collectNames = (fetches: Fetches, out: string[]): string[] => {
  if (typeof fetches === "string") out.push(fetches);
  else if (fetches === null) return out;
  else if (Array.isArray(fetches)) for (const f of fetches as readonly Fetches[]) collectNames(f, out);
  else for (const k in fetches) collectNames((fetches as Record<string, Fetches>)[k] as Fetches, out);
  return out;
};

/** Rebuilds the structure of `fetches` with each name replaced by `value(name)` (untyped: avoids deep type instantiation in generic callers). */
export const mapFetchesAny = (fetches: Fetches, value: (name: string) => unknown): unknown => mapAny(fetches, value);

const mapAny = (f: Fetches, value: (name: string) => unknown): unknown => {
  if (typeof f === "string") return value(f);
  if (f === null) return null;
  if (Array.isArray(f)) {
    const arr = f as readonly Fetches[];
    const out = new Array<unknown>(arr.length);
    // A list of names is what a hooked run sends (the caller's fetches and each hook's): map
    // its names here rather than through one more call each.
    for (let i = 0; i < arr.length; i++) {
      const x = arr[i] as Fetches;
      out[i] = typeof x === "string" ? value(x) : mapAny(x, value);
    }
    return out;
  }
  const out: Record<string, unknown> = {};
  for (const k in f) out[k] = mapAny((f as Record<string, Fetches>)[k] as Fetches, value);
  return out;
};
