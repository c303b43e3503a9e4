/**
 * Answers kept in memory while what they were made from is unchanged: the board's page asks for
 * every chart's series again on each view, and scripts poll the same series. A key names the
 * content exactly (the store's scalar epoch, the series, its length, the parameters), so a
 * remembered answer is never stale. Least recently used answers go first past a character budget.
 *
 * @module
 */

import type { BoardStore } from "./BoardStore.js";

/** Characters kept per store, in all. */
const BUDGET_CHARS = 32 * 1024 * 1024;

const caches = new WeakMap<BoardStore, Map<string, string>>();

/** The answer for `key` from memory, or made by `make` and remembered (unless it is larger than a quarter of the budget). */
export const remembered = (store: BoardStore, key: string, make: () => string): string => {
  let cache = caches.get(store);
  if (cache === undefined) caches.set(store, (cache = new Map()));
  const hit = cache.get(key);
  if (hit !== undefined) {
    cache.delete(key);
    cache.set(key, hit);
    return hit;
  }
  const body = make();
  if (body.length > BUDGET_CHARS / 4) return body;
  cache.set(key, body);
  let total = 0;
  for (const v of cache.values()) total += v.length;
  for (const [k, v] of cache) {
    if (total <= BUDGET_CHARS) break;
    cache.delete(k);
    total -= v.length;
  }
  return body;
};
