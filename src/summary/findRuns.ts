/**
 * `findRuns`: the runs of a logdir as TensorBoard finds them. An event file is a file whose name
 * contains `tfevents` (`*.profile-empty` files excepted: they hold no summaries); a run is a
 * directory that directly holds at least one, named by its path relative to the logdir (`"."`
 * for the logdir itself); a run's files are read in lexicographic order, which the zero-padded
 * timestamps in their names make chronological.
 *
 * Symbolic links are followed, as TensorBoard's data server follows them, but only while they
 * resolve inside the logdir: a link whose target is outside is reported and not followed, so
 * nothing read (or served later) from a logdir comes from elsewhere. A link back to one of its
 * own ancestors is not followed either (no cycles).
 *
 * @module
 */

import type { Dirent } from "node:fs";
import { readdir, realpath, stat } from "node:fs/promises";
import { join, relative, sep } from "node:path";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** One run and its event files (absolute or logdir-joined paths, sorted). */
export interface FoundRun {
  readonly run: string;
  readonly files: readonly string[];
}

/** Something `findRuns` did not follow or could not read. */
export interface FindIssue {
  readonly problem: "symlinkOutsideLogdir" | "unreadable";
  readonly path: string;
  readonly message: string;
}

/** The runs of a logdir, sorted by name, and what was skipped. */
export interface FoundRuns {
  readonly runs: readonly FoundRun[];
  readonly issues: readonly FindIssue[];
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** `true` for a file name TensorBoard reads as an event file. */
export const isEventFileName = (name: string): boolean => name.includes("tfevents") && !name.endsWith(".profile-empty");

/**
 * Walks `logdir` and returns its runs. Rejects if `logdir` itself cannot be read (`ENOENT` if it
 * does not exist); a subdirectory deleted during the walk is left out, one that cannot be read is
 * an issue.
 */
export const findRuns = async (logdir: string): Promise<FoundRuns> => {
  const root = await realpath(logdir);
  const runs: FoundRun[] = [];
  const issues: FindIssue[] = [];
  const walk = async (dir: string, real: string, ancestors: ReadonlySet<string>, top: boolean): Promise<void> => {
    let entries: Dirent[];
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch (e) {
      if (top) throw e;
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== "ENOENT" && code !== "ENOTDIR") issues.push({ problem: "unreadable", path: dir, message: `${dir}: ${String(e)}` });
      return;
    }
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const files: string[] = [];
    const subdirs: { path: string; real: string }[] = [];
    for (const entry of entries) {
      const path = join(dir, entry.name);
      if (entry.isFile()) {
        if (isEventFileName(entry.name)) files.push(path);
      } else if (entry.isDirectory()) {
        subdirs.push({ path, real: join(real, entry.name) });
      } else if (entry.isSymbolicLink()) {
        const target = await realpath(path).catch(() => undefined);
        if (target === undefined) continue; // dangling
        if (target !== root && !target.startsWith(root + sep)) {
          issues.push({ problem: "symlinkOutsideLogdir", path, message: `${path} links to ${target}, outside the logdir ${root}; not followed` });
          continue;
        }
        const s = await stat(target).catch(() => undefined);
        if (s?.isFile() === true && isEventFileName(entry.name)) files.push(path);
        else if (s?.isDirectory() === true && !ancestors.has(target)) subdirs.push({ path, real: target });
      }
    }
    if (files.length > 0) runs.push({ run: runName(relative(logdir, dir)), files });
    for (const d of subdirs) await walk(d.path, d.real, new Set([...ancestors, d.real]), false);
  };
  await walk(logdir, root, new Set([root]), true);
  runs.sort((a, b) => (a.run < b.run ? -1 : a.run > b.run ? 1 : 0));
  return { runs, issues };
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** A relative path as a run name: `/`-separated on every platform, `"."` for the logdir. */
const runName = (rel: string): string => (rel === "" ? "." : rel.split(sep).join("/"));
