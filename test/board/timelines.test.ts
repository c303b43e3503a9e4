/**
 * The profiler timelines routes: `/board/timelines` lists the `timeline-<step>.json` files that
 * ProfilerHook writes, `/board/timelines/<file>` serves one as an attachment, and nothing else
 * of the machine or of the logdir is served, however the path is written.
 */
import { mkdirSync, readdirSync, realpathSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

import { type Board, startBoard } from "../../src/board/BoardServer.js";
import { listTimelines } from "../../src/board/timelines.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { useTempDirs } from "../util/tempDirs.js";
import { send } from "./http.js";

const tempDir = useTempDirs("board-timelines-");
const boards: Board[] = [];
afterEach(async () => {
  for (const b of boards.splice(0)) await b.close();
});

const TRACE = JSON.stringify({ traceEvents: [{ name: "step", ph: "X", ts: 0, dur: 5, pid: 1, tid: 1 }], displayTimeUnit: "ms" });
const SECRET = "outside the logdir: never served";

let root: string;
let logdir: string;
let base: string;
beforeEach(async () => {
  root = realpathSync(tempDir());
  logdir = join(root, "logs");
  // As ProfilerHook writes them: timeline-<step>.json in its outputDir (here runs "." and exp/train),
  // beside the run's event file; its temporary files do not count.
  const w = new SummaryWriter(join(logdir, "exp", "train"), { clock: new VirtualClock() });
  w.addScalar("loss", 1, 0);
  await w.close();
  writeFileSync(join(logdir, "exp", "train", "timeline-20.json"), TRACE);
  writeFileSync(join(logdir, "exp", "train", "timeline-3.json"), TRACE);
  writeFileSync(join(logdir, "exp", "train", "timeline-4.json.tmp-123-abcd"), "partial");
  writeFileSync(join(logdir, "timeline-1.json"), "{}");
  writeFileSync(join(root, "secret.txt"), SECRET);
  writeFileSync(join(root, "timeline-9.json"), SECRET);
  mkdirSync(join(root, "elsewhere"));
  writeFileSync(join(root, "elsewhere", "timeline-8.json"), SECRET);
  symlinkSync(join(root, "elsewhere"), join(logdir, "escape")); // a directory link out
  symlinkSync(join(root, "timeline-9.json"), join(logdir, "exp", "timeline-9.json")); // a file link out
  symlinkSync(join(root, "secret.txt"), join(logdir, "timeline-5.json")); // a link out, with a timeline's name
  const board = await startBoard(logdir, { port: 0, clock: new VirtualClock() });
  boards.push(board);
  await board.store.loaded;
  base = `http://127.0.0.1:${board.port}`;
});

describe("/board/timelines", () => {
  it("lists the timelines under the logdir, by run then step, with sizes; temporary files and links out are left out", async () => {
    const r = await send(`${base}/board/timelines`);
    expect([r.status, r.headers["content-type"]]).toEqual([200, "application/json"]);
    expect(JSON.parse(r.text)).toEqual([
      { run: ".", file: "timeline-1.json", step: 1, bytes: 2 },
      { run: "exp/train", file: "exp/train/timeline-3.json", step: 3, bytes: TRACE.length },
      { run: "exp/train", file: "exp/train/timeline-20.json", step: 20, bytes: TRACE.length },
    ]);
    expect(await listTimelines(join(logdir, "nowhere"))).toEqual([]);
  });

  it("serves a timeline as an attachment, its bytes unchanged", async () => {
    const r = await send(`${base}/board/timelines/exp/train/timeline-20.json`);
    expect(r.status).toBe(200);
    expect(r.headers["content-type"]).toBe("application/json");
    expect(r.headers["content-disposition"]).toBe('attachment; filename="exp-train-timeline-20.json"');
    expect(r.headers["x-content-type-options"]).toBe("nosniff");
    expect(r.text).toBe(TRACE);
    expect((await send(`${base}/board/timelines/exp%2Ftrain%2Ftimeline-3.json`)).text).toBe(TRACE);
    expect((await send(`${base}/board/timelines/timeline-1.json`)).headers["content-disposition"]).toBe('attachment; filename="timeline-1.json"');
  });

  it("refuses traversal however written (.., %2e%2e, encoded slashes, absolute paths, links out), and files that are not timelines", async () => {
    const attempts = [
      "/board/timelines/../../secret.txt",
      "/board/timelines/%2e%2e/secret.txt",
      "/board/timelines/%2e%2e/timeline-9.json",
      "/board/timelines/..%2Ftimeline-9.json",
      "/board/timelines/..%2F..%2Fsecret.txt",
      "/board/timelines/exp/..%2F..%2Ftimeline-9.json",
      "/board/timelines/%2E%2E%5Ctimeline-9.json",
      `/board/timelines/${encodeURIComponent(join(root, "timeline-9.json"))}`,
      `/board/timelines/${join(root, "timeline-9.json")}`,
      "/board/timelines/%2Fetc%2Fpasswd",
      "/board/timelines/escape/timeline-8.json",
      "/board/timelines/exp/timeline-9.json",
      "/board/timelines/timeline-5.json",
      "/board/timelines/exp/train/timeline-4.json.tmp-123-abcd",
      "/board/timelines/exp/train/timeline-404.json",
      "/board/timelines/timeline-1.json%00",
      "/board/timelines/%E0%A4%A",
    ];
    for (const path of attempts) {
      const r = await send(`${base}${path}`);
      expect([path, r.status]).toEqual([path, 404]);
      expect(r.text).not.toContain(SECRET);
      expect(r.text.split("\n")).toHaveLength(1);
    }
    // The event file of a run is in the logdir, but is no timeline: not served either.
    const events = (await send(`${base}/board/timelines`)).text;
    expect(events).not.toContain("tfevents");
    const [eventFile] = readdirSync(join(logdir, "exp", "train")).filter((f) => f.includes("tfevents"));
    expect((await send(`${base}/board/timelines/exp/train/${eventFile}`)).status).toBe(404);
    expect((await send(`${base}/board/timelines/..%2F..%2Fsecret.txt`)).text).toBe(
      "Not found: no profiler timeline at '..%2F..%2Fsecret.txt' in the logdir (the list is at /board/timelines)",
    );
  });
});
