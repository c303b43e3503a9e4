/**
 * The race of issue 33: the gate resolved a timeline's real path, then `stat` and `readFile`
 * followed a link swapped in between, and a loop that swapped it read a file outside the logdir.
 * Here the swap runs in a tight bounded loop beside a bounded loop of downloads over loopback,
 * on real files: the file outside the logdir is itself a valid timeline (so only the opening,
 * not the content check, stands between it and the client), and its content is never served.
 * Nothing is timed: however the two loops interleave, no answer may hold the secret.
 */
import { mkdirSync, realpathSync, writeFileSync } from "node:fs";
import { link, rename, symlink, unlink } from "node:fs/promises";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

import { type Board, startBoard } from "../../src/board/BoardServer.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { useTempDirs } from "../util/tempDirs.js";
import { send } from "./http.js";

const tempDir = useTempDirs("board-timeline-race-");
const boards: Board[] = [];
afterEach(async () => {
  for (const b of boards.splice(0)) await b.close();
});

/** A timeline as ProfilerHook writes it, with `name` as its one event. */
const timeline = (name: string): string =>
  JSON.stringify({ traceEvents: [{ name, ph: "X", ts: 0, dur: 5, pid: 1, tid: 1 }], displayTimeUnit: "ms", otherData: { globalStep: 1, run: 1, startTimeMs: 0 } });

const TRACE = timeline("step 1");
const SECRET = "SECRET-outside-the-logdir";

/** How many times the swapper swaps, and the most downloads asked meanwhile. */
const SWAPS = 2000;
const MAX_REQUESTS = 2000;

let root: string;
let logdir: string;
let outside: string;
let at: string;
let issues: string[];
beforeEach(async () => {
  root = realpathSync(tempDir());
  logdir = join(root, "logs");
  outside = join(root, "outside");
  mkdirSync(join(logdir, "run"), { recursive: true });
  mkdirSync(outside);
  writeFileSync(join(logdir, "run", "timeline-1.json"), TRACE);
  writeFileSync(join(outside, "timeline-1.json"), timeline(SECRET));
  issues = [];
  const board = await startBoard(logdir, { port: 0, clock: new VirtualClock(), onIssue: (m) => issues.push(m) });
  boards.push(board);
  await board.store.loaded;
  at = `http://127.0.0.1:${board.port}`;
});

/**
 * Runs `swapOnce(0 … times-1)` beside a bounded loop of downloads of run/timeline-1.json (at most
 * MAX_REQUESTS, until the swapper is done): every answer must be the real timeline (200) or a
 * refusal (404), never the secret. The swaps leave the real timeline in place: it is served then.
 */
const race = async (times: number, swapOnce: (i: number) => Promise<void>): Promise<void> => {
  let swapped = false;
  const swap = async (): Promise<void> => {
    try {
      for (let i = 0; i < times; i++) await swapOnce(i);
    } finally {
      swapped = true;
    }
  };
  const download = async (): Promise<void> => {
    for (let i = 0; i < MAX_REQUESTS && !swapped; i++) {
      const r = await send(`${at}/board/timelines/run/timeline-1.json`);
      expect(r.text).not.toContain(SECRET);
      if (r.status === 200) expect(r.text).toBe(TRACE);
      else expect(r.status).toBe(404);
    }
  };
  await Promise.all([swap(), download()]);
  expect((await send(`${at}/board/timelines/run/timeline-1.json`)).text).toBe(TRACE);
};

describe("/board/timelines/<file> against a link swapped in while it is served", () => {
  it(`the file alternates between the real timeline and a link to a timeline outside the logdir, ${SWAPS} times: the outside one is never served`, async () => {
    const target = join(logdir, "run", "timeline-1.json");
    const keep = join(logdir, "run", "kept"); // the real timeline, kept under another name
    await link(target, keep);
    await race(SWAPS, async (i) => {
      const next = join(logdir, "run", `next-${i}`);
      if (i % 2 === 0) await symlink(join(outside, "timeline-1.json"), next);
      else await link(keep, next);
      await rename(next, target); // atomic: the name is always one or the other
    });
    // A refusal caught at the open is reported, once.
    expect(issues.filter((m) => m.startsWith("timelines: 'run/timeline-1.json'")).length).toBeLessThanOrEqual(1);
  });

  it(`the run's directory alternates between the real one and a link to a directory outside, ${SWAPS / 4} times: the outside timeline is never served`, async () => {
    const run = join(logdir, "run");
    const aside = join(logdir, "run-aside");
    await race(SWAPS / 4, async (i) => {
      const next = join(logdir, `next-${i}`);
      await rename(run, aside);
      await symlink(outside, next);
      await rename(next, run);
      await unlink(run);
      await rename(aside, run);
    });
  });
});
