/**
 * The board's goodput route: where each run's time went, from its goodput logs
 * (`<run>/goodput/*.jsonl`, docs/goodput.md), recomputed on each request.
 *
 * | route | answer |
 * |---|---|
 * | `/board/goodput` | `{run: {tasks, group, skippedLines}}` for every run of the logdir whose directory has goodput logs (`computeGoodput`'s figures: seconds, `goodput` a fraction) |
 * | `/board/goodput?run=<run>` | that run's `{tasks, group, skippedLines}`; 404 for a run that is none or has no goodput logs |
 *
 * A run's `goodput/` folder is read only through {@link confineToLogdir} (a link leading out of
 * the logdir is not followed), each log opened without following a link and read as hostile
 * input (`GoodputLogFollower`: a directory or FIFO in a log's place, or a log over the size
 * bound, is refused). A run whose logs cannot be read is left out (with `?run=`, 404), and said
 * once (`onIssue`), with why; the client learns nothing of the file system. Each run keeps its
 * follower, so a request reads only what the logs gained since the last one.
 *
 * @module
 */

import { dirname, join } from "node:path";

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
  private readonly reported = new Set<string>();

  constructor(
    private readonly store: Pick<BoardStore, "logdir" | "runs">,
    private readonly onIssue: (message: string) => void,
  ) {}

  /** `run`'s figures, or `undefined` when it has no goodput logs (or they cannot be read: said once). */
  async of(run: string): Promise<RunGoodput | undefined> {
    const confined = await confineToLogdir(this.store.logdir, run === "." ? GOODPUT_DIR : `${encodeSegments(run)}/${GOODPUT_DIR}`);
    if (E.isLeft(confined)) return undefined;
    const runDir = dirname(confined.right);
    let follower = this.followers.get(runDir);
    if (follower === undefined) {
      follower = new GoodputLogFollower(runDir);
      this.followers.set(runDir, follower);
    }
    try {
      const logs = follower.read();
      return logs.length === 0 ? undefined : computeGoodput(logs);
    } catch (e) {
      const message = `board: the goodput logs of run ${JSON.stringify(run)} cannot be read: ${e instanceof Error ? e.message : String(e)}`;
      if (!this.reported.has(message)) {
        this.reported.add(message);
        this.onIssue(message);
      }
      return undefined;
    }
  }

  /** The runs of the logdir. */
  runs(): readonly string[] {
    return this.store.runs();
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
  return { contentType: "application/json", body: pyJson(all) };
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** A run name (`/`-separated) as the percent-encoded relative path `confineToLogdir` decodes. */
const encodeSegments = (run: string): string => join(...run.split("/").map(encodeURIComponent)).split("\\").join("/");
