/**
 * The profiler timelines routes: `/board/timelines` lists the `timeline-<step>.json` files that
 * ProfilerHook writes, `/board/timelines/<file>` serves one as an attachment, and nothing else
 * of the machine or of the logdir is served, however the path is written; a file named like a
 * timeline is served only if it is one, and not past MAX_TIMELINE_BYTES. The list is kept, not
 * walked at each request: walked again once it is old (virtual clock) or when the runs change.
 * (The race against a link swapped in is test/board/timelineRace.test.ts.)
 */
import { mkdirSync, readdirSync, readFileSync, realpathSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type * as t from "io-ts";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

import { type ChromeTrace, ProfilerHook } from "../../hooks/ProfilerHook.js";
import { type Board, startBoard } from "../../src/board/BoardServer.js";
import { ChromeTraceCodec, LIST_MAX_AGE_MS, listTimelines, MAX_TIMELINE_BYTES, TimelineList } from "../../src/board/timelines.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { driveHooks } from "../util/driveHooks.js";
import { useTempDirs } from "../util/tempDirs.js";
import { send } from "./http.js";

const tempDir = useTempDirs("board-timelines-");
const boards: Board[] = [];
afterEach(async () => {
  for (const b of boards.splice(0)) await b.close();
});

const TRACE = JSON.stringify({ traceEvents: [{ name: "step", ph: "X", ts: 0, dur: 5, pid: 1, tid: 1 }], displayTimeUnit: "ms", otherData: { globalStep: 20, run: 20, startTimeMs: 0 } });
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
  writeFileSync(join(logdir, "timeline-1.json"), TRACE);
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
      { run: ".", file: "timeline-1.json", step: 1, bytes: TRACE.length },
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

describe("/board/timelines/<file> serves a timeline only: what ProfilerHook writes, within MAX_TIMELINE_BYTES", () => {
  /** A board on `logdir` whose issues are kept. */
  const reporting = async (): Promise<{ at: string; issues: string[] }> => {
    const issues: string[] = [];
    const board = await startBoard(logdir, { port: 0, clock: new VirtualClock(), onIssue: (m) => issues.push(m) });
    boards.push(board);
    await board.store.loaded;
    return { at: `http://127.0.0.1:${board.port}`, issues };
  };
  const missing = (file: string): string => `Not found: no profiler timeline at '${file}' in the logdir (the list is at /board/timelines)`;

  it("a timeline that ProfilerHook wrote is served byte for byte; the codec's type is the one ProfilerHook writes", async () => {
    const dir = join(logdir, "exp", "profile");
    const { sess } = await driveHooks({ hooks: [new ProfilerHook({ saveSteps: 1, outputDir: dir, runMetadataWriter: { addEvent: () => undefined } })] });
    await sess.run("train");
    await sess.run("train");
    await sess.close();
    const written = readFileSync(join(dir, "timeline-2.json"), "utf8");
    const r = await send(`${base}/board/timelines/exp/profile/timeline-2.json`);
    expect([r.status, r.headers["content-disposition"]]).toEqual([200, 'attachment; filename="exp-profile-timeline-2.json"']);
    expect(r.text).toBe(written);
    // The writer's type must stay one the codec accepts (this line stops compiling otherwise).
    const asServed = (trace: ChromeTrace): t.TypeOf<typeof ChromeTraceCodec> => trace;
    expect(ChromeTraceCodec.is(asServed(JSON.parse(written) as ChromeTrace))).toBe(true);
  });

  it("a timeline-<step>.json that is not a timeline is listed by name but refused like a missing one, and reported once, without its content", async () => {
    const { at, issues } = await reporting();
    const notTimelines: Record<string, string> = {
      "timeline-61.json": "{}",
      "timeline-62.json": "a private key, not JSON",
      "timeline-63.json": JSON.stringify({ traceEvents: [{ name: "step", ph: "X", pid: 1 }], displayTimeUnit: "ms" }), // a Chrome trace, but no otherData
      "timeline-64.json": JSON.stringify({ traceEvents: [{ name: "step", ph: "Q", pid: 1 }], displayTimeUnit: "ms", otherData: { globalStep: 1, run: 1, startTimeMs: 0 } }),
      "timeline-65.json": JSON.stringify({ secret: "hunter2", traceEvents: "hunter2" }),
    };
    for (const [name, content] of Object.entries(notTimelines)) writeFileSync(join(logdir, "exp", "train", name), content);
    expect((await listTimelines(logdir)).map((x) => x.file)).toEqual(expect.arrayContaining(Object.keys(notTimelines).map((n) => `exp/train/${n}`)));
    for (const name of Object.keys(notTimelines)) {
      const file = `exp/train/${name}`;
      for (let i = 0; i < 2; i++) {
        const r = await send(`${at}/board/timelines/${file}`);
        expect([file, r.status, r.text]).toEqual([file, 404, missing(file)]);
      }
    }
    const said = issues.filter((m) => m.startsWith("timelines:"));
    expect(said).toHaveLength(Object.keys(notTimelines).length); // once each, though asked twice
    expect(said[0]).toBe("timelines: 'exp/train/timeline-61.json' refused: not a timeline (what ProfilerHook writes): wrong or missing traceEvents, displayTimeUnit, otherData");
    expect(said[1]).toBe("timelines: 'exp/train/timeline-62.json' refused: not a timeline: not JSON");
    expect(said[2]).toMatch(/timeline-63\.json' refused: .*otherData$/);
    expect(said[3]).toMatch(/timeline-64\.json' refused: .*traceEvents\[0\]\.ph/);
    expect(said.join("\n")).not.toMatch(/hunter2|private key/);
    // Still served: a real one beside them.
    expect((await send(`${at}/board/timelines/exp/train/timeline-3.json`)).text).toBe(TRACE);
  });

  it("a file over MAX_TIMELINE_BYTES is neither listed nor served, and its refusal is reported; one of exactly that size is served", async () => {
    const { at, issues } = await reporting();
    const fits = TRACE.slice(0, -1) + " ".repeat(MAX_TIMELINE_BYTES - TRACE.length) + "}";
    expect(fits.length).toBe(MAX_TIMELINE_BYTES);
    writeFileSync(join(logdir, "timeline-70.json"), fits);
    writeFileSync(join(logdir, "timeline-71.json"), fits + " ");
    const listed = (await listTimelines(logdir)).map((x) => x.file);
    expect(listed).toContain("timeline-70.json");
    expect(listed).not.toContain("timeline-71.json");
    const ok = await send(`${at}/board/timelines/timeline-70.json`);
    expect([ok.status, ok.text.length]).toEqual([200, MAX_TIMELINE_BYTES]);
    expect((await send(`${at}/board/timelines/timeline-71.json`)).status).toBe(404);
    expect(issues.filter((m) => m.startsWith("timelines:"))).toEqual([expect.stringMatching(/^timelines: 'timeline-71\.json' refused: .*timeline-71\.json holds more than the 16777216 bytes served; refused$/)]);
  });

  it("a link inside the logdir to a timeline inside is served; a link with a timeline's name to anything else is not", async () => {
    symlinkSync(join(logdir, "exp", "train", "timeline-3.json"), join(logdir, "timeline-6.json"));
    symlinkSync(join(logdir, "exp", "train", readdirSync(join(logdir, "exp", "train")).find((f) => f.includes("tfevents")) as string), join(logdir, "timeline-7.json"));
    expect((await send(`${base}/board/timelines/timeline-6.json`)).text).toBe(TRACE);
    expect((await send(`${base}/board/timelines/timeline-7.json`)).status).toBe(404);
    expect((await send(`${base}/board/timelines/timeline-5.json`)).status).toBe(404); // the link out of beforeEach
  });
});

describe("the list is kept, not walked at each request", () => {
  const files = (list: { file: string }[]): string[] => list.map((t) => t.file);

  it("TimelineList: callers share one walk; a new file shows up once the list is LIST_MAX_AGE_MS old, or at once after invalidate()", async () => {
    const clock = new VirtualClock();
    const timelines = new TimelineList(logdir, clock);
    const first = timelines.list();
    expect(timelines.list()).toBe(first); // one walk for both
    expect(files(await first)).toEqual(["timeline-1.json", "exp/train/timeline-3.json", "exp/train/timeline-20.json"]);
    writeFileSync(join(logdir, "exp", "train", "timeline-30.json"), TRACE);
    await clock.advance(LIST_MAX_AGE_MS - 1);
    expect(await timelines.list()).toBe(await first); // the kept list, no walk
    await clock.advance(1);
    expect(files(await timelines.list())).toContain("exp/train/timeline-30.json");
    writeFileSync(join(logdir, "timeline-2.json"), "{}");
    expect(files(await timelines.list())).not.toContain("timeline-2.json");
    timelines.invalidate();
    expect(files(await timelines.list())).toContain("timeline-2.json");
  });

  it("the board keeps the list, and lists again at once when a run appears (a new outputDir); downloads never use the kept list", async () => {
    const clock = new VirtualClock();
    const board = await startBoard(logdir, { port: 0, clock, pollSecs: 0.5, timelinesMaxAgeSecs: 3600 });
    boards.push(board);
    await board.store.loaded;
    const at = `http://127.0.0.1:${board.port}`;
    const listed = async (): Promise<string[]> => files(JSON.parse((await send(`${at}/board/timelines`)).text) as { file: string }[]);
    const before = await listed();
    writeFileSync(join(logdir, "exp", "train", "timeline-40.json"), TRACE);
    // Served at once (looked up through the gate), though the kept list does not have it yet.
    expect((await send(`${at}/board/timelines/exp/train/timeline-40.json`)).status).toBe(200);
    expect(await listed()).toEqual(before);
    await clock.advance(2_000); // polls: no run changed
    expect(await listed()).toEqual(before);
    // A new run with its profiler output: the runs change, the list is walked again.
    let runsChanged = false;
    const sub = board.store.updates$.subscribe((u) => {
      if (u.runs?.includes("exp/eval") === true) runsChanged = true;
    });
    const w = new SummaryWriter(join(logdir, "exp", "eval"), { clock: new VirtualClock() });
    w.addScalar("loss", 1, 0);
    await w.close();
    writeFileSync(join(logdir, "exp", "eval", "timeline-5.json"), TRACE);
    for (let i = 0; i < 10_000 && !runsChanged; i++) {
      await clock.advance(50);
      await new Promise<void>((r) => setImmediate(r));
    }
    sub.unsubscribe();
    expect(runsChanged).toBe(true);
    expect(await listed()).toEqual([...before.slice(0, 1), "exp/eval/timeline-5.json", ...before.slice(1), "exp/train/timeline-40.json"]);
  });
});
