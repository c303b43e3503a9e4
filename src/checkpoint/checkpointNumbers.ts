/**
 * The numbering of checkpoints: the `<n>` of a `<name>-<n>` prefix, and the numbers of the
 * complete checkpoints of one name in a directory (those with an index file).
 *
 * @module
 */

import { readdirIfExists } from "./internal/files.js";

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** The `<n>` of `<...>/<name>-<n>`, or `null`. */
export const checkpointNumberOf = (path: string, name: string): number | null => {
  const base = path.slice(path.lastIndexOf("/") + 1);
  if (!base.startsWith(`${name}-`)) return null;
  const rest = base.slice(name.length + 1);
  if (!/^-?\d+$/.test(rest)) return null;
  const n = Number(rest);
  return Number.isSafeInteger(n) ? n : null;
};

/** The numbers of complete checkpoints named `<name>-<n>` in `directory` (none if it does not exist). */
export const scanCheckpointNumbers = async (directory: string, checkpointName: string): Promise<number[]> => {
  const names = await readdirIfExists(directory);
  const out: number[] = [];
  for (const n of names) {
    if (!n.endsWith(".index")) continue;
    const num = checkpointNumberOf(n.slice(0, -".index".length), checkpointName);
    if (num !== null) out.push(num);
  }
  return out;
};
