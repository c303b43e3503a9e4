/**
 * Answers kept in memory while what they were made from is unchanged: the board's page asks for
 * every chart's series again on each view, and scripts poll the same series. A key names the
 * content exactly (the store's scalar epoch, the series, its length, the parameters), so a
 * remembered answer is never stale. Each is kept as text and, once a client asked for it so, as
 * gzip. Least recently used answers go first past a character budget.
 *
 * @module
 */

import type { BoardStore } from "./BoardStore.js";
import { type Body, gzipBody } from "./respond.js";

/** Characters kept per store, in all (gzipped copies are smaller and not counted). */
const BUDGET_CHARS = 32 * 1024 * 1024;

interface Kept {
  readonly text: string;
  gzipped: Promise<Buffer> | undefined;
}

const caches = new WeakMap<BoardStore, Map<string, Kept>>();

/**
 * The answer for `key` from memory, or made by `make` and remembered (unless it is larger than a
 * quarter of the budget), as a {@link Body} of `contentType`.
 */
export const remembered = (store: BoardStore, key: string, contentType: string, make: () => string): Body => {
  let cache = caches.get(store);
  if (cache === undefined) caches.set(store, (cache = new Map()));
  let kept = cache.get(key);
  if (kept !== undefined) {
    cache.delete(key);
    cache.set(key, kept);
  } else {
    const text = make();
    if (text.length > BUDGET_CHARS / 4) return { contentType, body: text };
    kept = { text, gzipped: undefined };
    cache.set(key, kept);
    let total = 0;
    for (const v of cache.values()) total += v.text.length;
    for (const [k, v] of cache) {
      if (total <= BUDGET_CHARS) break;
      cache.delete(k);
      total -= v.text.length;
    }
  }
  const entry = kept;
  return { contentType, body: entry.text, gzipped: () => (entry.gzipped ??= gzipBody(Buffer.from(entry.text, "utf8"))) };
};
