/**
 * `keepWhere`: an array filtered in place, for the board's stores (a restart's purge, thinning),
 * without a copy and without spreading a long array into `splice` (which overflows the stack
 * past about 100,000 items).
 *
 * @module
 */

/** Keeps, in place and in order, the items `keep` accepts; returns how many were removed. */
export const keepWhere = <T>(items: T[], keep: (item: T, index: number) => boolean): number => {
  const before = items.length;
  let n = 0;
  for (let i = 0; i < before; i++) if (keep(items[i] as T, i)) items[n++] = items[i] as T;
  items.length = n;
  return before - n;
};
