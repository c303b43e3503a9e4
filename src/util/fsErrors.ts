/**
 * File-system errors that name their file. Writes through a descriptor (ENOSPC, EIO...) carry
 * no `path`; the layers that know which file it was add it, so that reports say where.
 *
 * @module
 */

/** Sets `path` on a Node file-system error that has a `code` and no `path`; returns `e`. */
export const withPath = (e: unknown, path: string): unknown => {
  const x = e as NodeJS.ErrnoException | null;
  if (x !== null && typeof x === "object" && typeof x.code === "string" && x.path === undefined) x.path = path;
  return e;
};
