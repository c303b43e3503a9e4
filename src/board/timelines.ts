/**
 * The profiler timelines of a logdir: the `timeline-<step>.json` files (Chrome's trace-event
 * format) that `ProfilerHook` writes into its `outputDir`, listed and served for download.
 *
 * | route | answer |
 * |---|---|
 * | `/board/timelines` | `[{run, file, step, bytes}]`: `run` the directory (relative to the logdir, `"."` for the logdir itself), `file` the path to ask for (relative, `/`-separated), by run then step |
 * | `/board/timelines/<file>` | the file, `Content-Disposition: attachment`, if it is a timeline; else 404 |
 *
 * A file is served only through {@link confineFile} (no `..`, no absolute path, no link leading
 * out of the logdir), only when its name, and the name of the file it really is, is a
 * timeline's (the logdir's other files, checkpoints and event files, are not served), read once
 * from one handle by {@link readConfinedFile} (opened without following a link, and only if it
 * is still the file resolved), only up to {@link MAX_TIMELINE_BYTES}, and only if it is one:
 * JSON that {@link ChromeTraceCodec} (what `ProfilerHook` writes) decodes. Anything refused is
 * 404, with no reason given to the client; a file that changed under the gate, is too large or
 * is not a timeline is also reported once (`onIssue`), with why.
 *
 * The listing walks the logdir's directories (not links to directories: a link could loop), at
 * most {@link MAX_DEPTH} deep, and is kept ({@link TimelineList}): requests share one walk, and the
 * logdir is walked again only once the list is {@link LIST_MAX_AGE_MS} old on the board's clock,
 * or at once when the board's runs change. A new timeline shows up within that age; a download is
 * always looked up afresh (through the gate), never from the kept list. The list goes by names
 * and sizes (it reads no file: a file too large is left out); a download reads and checks.
 *
 * @module
 */

import * as E from "fp-ts/lib/Either.js";
import * as t from "io-ts";
import type { Dirent } from "node:fs";
import { readdir, stat } from "node:fs/promises";
import { basename, join } from "node:path";

import { SafeInt } from "../codec.js";
import type { Clock } from "../time/Clock.js";
import { confineFile, confineToLogdir, readConfinedFile } from "./confineToLogdir.js";
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

/**
 * The largest timeline served (and listed), 16 MiB: `ProfilerHook` writes one step, a few
 * kilobytes; the bound keeps a download from reading (and parsing, on the main thread) a huge
 * file put in the logdir.
 */
export const MAX_TIMELINE_BYTES = 16 << 20;

/** How many refused paths are remembered, so that each is reported once (then forgotten all at once). */
const MAX_REPORTED = 1000;

/** One event of a timeline, as `ProfilerHook` writes it (its `TraceEvent`). */
const TraceEventCodec = t.intersection([
  t.type({ name: t.string, ph: t.keyof({ X: null, M: null, C: null, s: null, f: null }), pid: SafeInt }),
  t.partial({ ts: t.number, dur: t.number, tid: SafeInt, cat: t.string, id: SafeInt, bp: t.literal("e"), args: t.UnknownRecord }),
]);

/**
 * A timeline, as `ProfilerHook` writes it (its `ChromeTrace`: Chrome's trace-event format with
 * the step in `otherData`). A `timeline-<step>.json` that does not decode is not served.
 */
export const ChromeTraceCodec = t.type(
  {
    traceEvents: t.readonlyArray(TraceEventCodec),
    displayTimeUnit: t.literal("ms"),
    otherData: t.type({ globalStep: SafeInt, run: SafeInt, startTimeMs: t.number }),
  },
  "ChromeTrace",
);

/** The timelines of a logdir, listed at most once per `maxAgeMs`, or again after {@link invalidate}. */
export class TimelineList {
  private kept: { readonly atMs: number; readonly list: Promise<Timeline[]> } | undefined;
  private readonly reported = new Set<string>();

  constructor(
    /** The logdir listed, and the one downloads are confined to. */
    readonly logdir: string,
    private readonly clock: Clock,
    private readonly maxAgeMs: number = LIST_MAX_AGE_MS,
    /** Told, once per path, why a download was refused when it is worth saying (changed under the gate, too large, not a timeline). */
    private readonly onIssue: (message: string) => void = () => undefined,
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

  /** Reports why `requested` was refused, the first time only. */
  report(requested: string, reason: string): void {
    if (this.reported.has(requested)) return;
    if (this.reported.size >= MAX_REPORTED) this.reported.clear();
    this.reported.add(requested);
    this.onIssue(`timelines: ${pyRepr(requested)} refused: ${reason}`);
  }
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Answers `/board/timelines` (from the kept list) and `/board/timelines/<file>`, or `undefined` for another path. */
export const answerTimelines = async (timelines: TimelineList, path: string): Promise<Body | undefined> => {
  if (path === "/board/timelines") return { contentType: "application/json", body: pyJson(await timelines.list()) };
  if (!path.startsWith("/board/timelines/")) return undefined;
  return downloadTimeline(timelines, path.slice("/board/timelines/".length));
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
      if (s === undefined || !s.isFile() || s.size > MAX_TIMELINE_BYTES) continue;
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
const downloadTimeline = async (timelines: TimelineList, requested: string): Promise<Body> => {
  const refused = notFound(`no profiler timeline at ${pyRepr(requested)} in the logdir (the list is at /board/timelines)`);
  const file = await confineFile(timelines.logdir, requested);
  if (E.isLeft(file)) throw refused;
  const name = basename(decodeURIComponent(requested).replace(/\\/g, "/"));
  if (!TIMELINE_NAME.test(name) || !TIMELINE_NAME.test(basename(file.right.path))) throw refused;
  const bytes = await readConfinedFile(file.right, MAX_TIMELINE_BYTES);
  if (E.isLeft(bytes)) {
    if (bytes.left.notable) timelines.report(requested, bytes.left.reason);
    throw refused;
  }
  const problem = timelineProblem(bytes.right);
  if (problem !== undefined) {
    timelines.report(requested, problem);
    throw refused;
  }
  const run = decodeURIComponent(requested).split("/").slice(0, -1).join("-");
  const filename = `${run === "" ? "" : `${run}-`}${name}`.replace(/[^\w.-]+/g, "_");
  return { contentType: "application/json", body: bytes.right, headers: { "Content-Disposition": `attachment; filename="${filename}"` } };
};

/**
 * Why `bytes` are not a timeline, or `undefined` when they are. It names where the document is
 * wrong, never what it holds: the log must not show a file the board would not serve.
 */
const timelineProblem = (bytes: Buffer): string | undefined => {
  let document: unknown;
  try {
    document = JSON.parse(bytes.toString("utf8"));
  } catch {
    return "not a timeline: not JSON";
  }
  const decoded = ChromeTraceCodec.decode(document);
  if (E.isRight(decoded)) return undefined;
  const where = [...new Set(decoded.left.map((e) => whereIn(e.context)))];
  return `not a timeline (what ProfilerHook writes): wrong or missing ${where.slice(0, 3).join(", ")}${where.length > 3 ? ", …" : ""}`;
};

/** Where in the document an error is (`traceEvents[0].ph`): the keys of the context, without the members of an intersection. */
const whereIn = (context: t.Context): string =>
  context
    .slice(1)
    .filter((_, i) => !(context[i]?.type instanceof t.IntersectionType))
    .map((e) => (/^\d+$/.test(e.key) ? `[${e.key}]` : `.${e.key}`))
    .join("")
    .replace(/^\./, "");
