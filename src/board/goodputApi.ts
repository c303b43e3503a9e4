/**
 * The board's goodput route: where each run's time went, from its goodput logs
 * (`<run>/goodput/*.jsonl`, docs/goodput.md), recomputed on each request.
 *
 * | route | answer |
 * |---|---|
 * | `/board/goodput` | `{run: {tasks, group, faults, rejoins, skippedLines}}` for every run of the logdir whose directory has goodput logs (`computeGoodput`'s figures: seconds, `goodput` a fraction) |
 * | `/board/goodput?run=<run>` | that run's `{tasks, group, faults, rejoins, skippedLines}`; 404 for a run that is none or has no goodput logs |
 *
 * A run's directory is found through {@link confineToLogdir}; its `goodput/` folder must be its
 * own (a link, even one inside the logdir, is not followed); each log is opened without following
 * a link, checked to really be in that folder once open (a folder swapped for a link meanwhile is
 * caught), and read as hostile input (`GoodputLogFollower`: a directory or FIFO in a log's place,
 * a log over the size bound, more logs than a run can have, are refused). A run whose logs cannot
 * be read is left out (with `?run=`, 404), and said once (`onIssue`) until it can be read again;
 * the client learns nothing of the file system. Each run keeps its follower, so a request reads
 * only what the logs gained since the last one; the followers of runs that went are dropped.
 *
 * @module
 */

import { realpath } from "node:fs/promises";
import { join } from "node:path";

import * as E from "fp-ts/lib/Either.js";

import { computeGoodput, type RunGoodput } from "../goodput/computeGoodput.js";
import { GOODPUT_DIR, GoodputLogFollower } from "../goodput/goodputLog.js";
import type { BoardStore } from "./BoardStore.js";
import { confineToLogdir } from "./confineToLogdir.js";
import { type Body, notFound } from "./respond.js";
import { pyJson, pyRepr } from "./tensorBoardFormat.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The goodput logs of a board's runs: one follower per run directory, kept across requests. */
export class GoodputView {
  private readonly followers = new Map<string, GoodputLogFollower>();
  /** The runs whose logs could not be read, each said once until they can be again. */
  private readonly reported = new Set<string>();
  /** The run directories asked about since the last {@link prune}. */
  private readonly touched = new Set<string>();

  constructor(
    private readonly store: Pick<BoardStore, "logdir" | "runs">,
    private readonly onIssue: (message: string) => void,
  ) {}

  /** `run`'s figures, or `undefined` when it has no goodput logs (or they cannot be read: said once). */
  async of(run: string): Promise<RunGoodput | undefined> {
    const runDir = await confineToLogdir(this.store.logdir, run === "." ? "." : encodeSegments(run));
    if (E.isLeft(runDir)) return undefined;
    // The goodput folder must be the run's own, never a link (to the logdir itself, or out of it).
    const folder = join(runDir.right, GOODPUT_DIR);
    let real: string;
    try {
      real = await realpath(folder);
    } catch {
      return undefined;
    }
    if (real !== folder) return this.refuse(run, `${folder} is a link (to ${real}); not followed`);
    this.touched.add(runDir.right);
    let follower = this.followers.get(runDir.right);
    if (follower === undefined) {
      // Every log must really be in that folder when it is read (a folder swapped for a link meanwhile is caught).
      follower = new GoodputLogFollower(runDir.right, { within: real });
      this.followers.set(runDir.right, follower);
    }
    try {
      const logs = follower.read();
      this.reported.delete(run);
      return logs.length === 0 ? undefined : computeGoodput(logs);
    } catch (e) {
      this.followers.delete(runDir.right);
      return this.refuse(run, e instanceof Error ? e.message : String(e));
    }
  }

  /** The runs of the logdir. */
  runs(): readonly string[] {
    return this.store.runs();
  }

  /** After a pass over every run: forgets the followers (and the records they hold) of directories that are no run any more. */
  prune(): void {
    for (const dir of this.followers.keys()) if (!this.touched.has(dir)) this.followers.delete(dir);
    this.touched.clear();
  }

  /** Says once why `run`'s logs are not read; `undefined`. */
  private refuse(run: string, why: string): undefined {
    if (this.reported.has(run)) return undefined;
    this.reported.add(run);
    this.onIssue(`board: the goodput logs of run ${JSON.stringify(run)} cannot be read: ${why}`);
    return undefined;
  }

}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Answers `/board/goodput`, or `undefined` for another path. Throws `HttpError` 404 for an unknown run. */
export const answerGoodput = async (view: GoodputView, path: string, query: URLSearchParams): Promise<Body | undefined> => {
  if (path !== "/board/goodput") return undefined;
  const run = query.get("run");
  if (run !== null) {
    if (!view.runs().includes(run)) throw notFound(`no run ${pyRepr(run)} (the runs are at /data/runs)`);
    const figures = await view.of(run);
    if (figures === undefined) throw notFound(`run ${pyRepr(run)} has no goodput logs`);
    return { contentType: "application/json", body: pyJson(figures) };
  }
  const all: Record<string, RunGoodput> = {};
  for (const r of view.runs()) {
    const figures = await view.of(r);
    if (figures !== undefined) all[r] = figures;
  }
  // Runs that went: their followers go too.
  view.prune();
  return { contentType: "application/json", body: pyJson(all) };
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** A run name (`/`-separated) as the percent-encoded relative path `confineToLogdir` decodes. */
const encodeSegments = (run: string): string => join(...run.split("/").map(encodeURIComponent)).split("\\").join("/");
