/**
 * The profiler timelines of a logdir: the `timeline-<step>.json` files (Chrome's trace-event
 * format) that `ProfilerHook` writes into its `outputDir`, listed and served for download.
 *
 * | route | answer |
 * |---|---|
 * | `/board/timelines` | `[{run, file, step, bytes}]`: `run` the directory (relative to the logdir, `"."` for the logdir itself), `file` the path to ask for (relative, `/`-separated), by run then step |
 * | `/board/timelines/<file>` | the file, `Content-Disposition: attachment` |
 *
 * A file is served only through {@link confineToLogdir} (no `..`, no absolute path, no link
 * leading out of the logdir), and only when its name, and the name of the file it really is,
 * is a timeline's: the logdir's other files (checkpoints, event files) are not served. Anything
 * refused is 404, with no reason given to the client.
 *
 * The listing walks the logdir's directories (not links to directories: a link could loop), at
 * most {@link MAX_DEPTH} deep, and is kept ({@link TimelineList}): requests share one walk, and the
 * logdir is walked again only once the list is {@link LIST_MAX_AGE_MS} old on the board's clock,
 * or at once when the board's runs change. A new timeline shows up within that age; a download is
 * always looked up afresh (through the gate), never from the kept list.
 *
 * @module
 */

import * as E from "fp-ts/lib/Either.js";
import type { Dirent } from "node:fs";
import { readdir, readFile, stat } from "node:fs/promises";
import { basename, join } from "node:path";

import type { Clock } from "../time/Clock.js";
import { confineToLogdir } from "./confineToLogdir.js";
import { type Body, notFound } from "./respond.js";
import { pyJson, pyRepr } from "./tensorBoardFormat.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** One timeline file. */
export interface Timeline {
  readonly run: string;
  readonly file: string;
  readonly step: number;
  readonly bytes: number;
}

/** How deep below the logdir the listing looks. */
const MAX_DEPTH = 12;

/** A timeline's name (`ProfilerHook`'s temporary `timeline-5.json.tmp-…` files do not match). */
const TIMELINE_NAME = /^timeline-(\d+)\.json$/;

/** How old the kept list may get before a request walks the logdir again, ms. */
export const LIST_MAX_AGE_MS = 2000;

/** The timelines of a logdir, listed at most once per `maxAgeMs`, or again after {@link invalidate}. */
export class TimelineList {
  private kept: { readonly atMs: number; readonly list: Promise<Timeline[]> } | undefined;

  constructor(
    /** The logdir listed, and the one downloads are confined to. */
    readonly logdir: string,
    private readonly clock: Clock,
    private readonly maxAgeMs: number = LIST_MAX_AGE_MS,
  ) {}

  /** The timelines, by run then step: the kept list while it is fresh, else one new walk shared by every caller meanwhile. */
  list(): Promise<Timeline[]> {
    const now = (this.clock.monotonic ?? this.clock.now).call(this.clock);
    const kept = this.kept;
    if (kept !== undefined && now >= kept.atMs && now - kept.atMs < this.maxAgeMs) return kept.list;
    const list = listTimelines(this.logdir);
    this.kept = { atMs: now, list };
    // A failed walk is not kept: the next request tries again.
    list.catch(() => {
      if (this.kept?.list === list) this.kept = undefined;
    });
    return list;
  }

  /** Forgets the kept list: the next request walks the logdir (a run appeared or went). */
  invalidate(): void {
    this.kept = undefined;
  }
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Answers `/board/timelines` (from the kept list) and `/board/timelines/<file>`, or `undefined` for another path. */
export const answerTimelines = async (timelines: TimelineList, path: string): Promise<Body | undefined> => {
  if (path === "/board/timelines") return { contentType: "application/json", body: pyJson(await timelines.list()) };
  if (!path.startsWith("/board/timelines/")) return undefined;
  return downloadTimeline(timelines.logdir, path.slice("/board/timelines/".length));
};

/** The timeline files under `logdir`, by run, then step. */
export const listTimelines = async (logdir: string): Promise<Timeline[]> => {
  const found: Timeline[] = [];
  const walk = async (dir: string, rel: string[], depth: number): Promise<void> => {
    let entries: Dirent[];
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch {
      return; // not a directory (a logdir may be one event file), or gone meanwhile
    }
    for (const e of entries) {
      if (e.isDirectory()) {
        if (depth < MAX_DEPTH) await walk(join(dir, e.name), [...rel, e.name], depth + 1);
        continue;
      }
      const m = TIMELINE_NAME.exec(e.name);
      if (m === null || !(e.isFile() || e.isSymbolicLink())) continue;
      const file = [...rel, e.name].join("/");
      const real = await confineToLogdir(logdir, file.split("/").map(encodeURIComponent).join("/"));
      if (E.isLeft(real)) continue; // a link out of the logdir: not listed, not served
      const s = await stat(real.right).catch(() => undefined);
      if (s === undefined || !s.isFile()) continue;
      found.push({ run: rel.length === 0 ? "." : rel.join("/"), file, step: Number(m[1]), bytes: s.size });
    }
  };
  await walk(logdir, [], 0);
  return found.sort((a, b) => (a.run < b.run ? -1 : a.run > b.run ? 1 : a.step - b.step));
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** `requested` is percent-encoded, as it stands in the URL's path. */
const downloadTimeline = async (logdir: string, requested: string): Promise<Body> => {
  const refused = notFound(`no profiler timeline at ${pyRepr(requested)} in the logdir (the list is at /board/timelines)`);
  const real = await confineToLogdir(logdir, requested);
  if (E.isLeft(real)) throw refused;
  const name = basename(decodeURIComponent(requested).replace(/\\/g, "/"));
  if (!TIMELINE_NAME.test(name) || !TIMELINE_NAME.test(basename(real.right))) throw refused;
  const s = await stat(real.right).catch(() => undefined);
  if (s === undefined || !s.isFile()) throw refused;
  const bytes = await readFile(real.right);
  const run = decodeURIComponent(requested).split("/").slice(0, -1).join("-");
  const filename = `${run === "" ? "" : `${run}-`}${name}`.replace(/[^\w.-]+/g, "_");
  return { contentType: "application/json", body: bytes, headers: { "Content-Disposition": `attachment; filename="${filename}"` } };
};
