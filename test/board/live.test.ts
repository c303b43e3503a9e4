import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { get, type IncomingMessage } from "node:http";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

import { type Board, startBoard } from "../../src/board/BoardServer.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { issue33File } from "../util/hostileRecords.js";
import { useTempDirs } from "../util/tempDirs.js";
import { send } from "./http.js";

const tempDir = useTempDirs("board-live-");
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A board on a free loopback port whose polls, throttle and heartbeat run on `clock`. */
const serve = async (logdir: string, clock: VirtualClock, onIssue?: (message: string) => void): Promise<Board> => {
  const board = await startBoard(logdir, { port: 0, clock, pollSecs: 1, ...(onIssue === undefined ? {} : { onIssue }) });
  cleanups.push(() => board.close());
  await board.store.loaded;
  return board;
};

/** The server-sent events of `/board/events`, as parsed messages, growing as they come. */
const subscribe = async (board: Board): Promise<{ event: string; data: unknown }[]> => {
  const messages: { event: string; data: unknown }[] = [];
  const res = await new Promise<IncomingMessage>((resolve, reject) => get(`http://127.0.0.1:${board.port}/board/events`, resolve).on("error", reject));
  expect(res.headers["content-type"]).toBe("text/event-stream; charset=utf-8");
  let buffered = "";
  res.setEncoding("utf8");
  res.on("data", (chunk: string) => {
    buffered += chunk;
    for (let end = buffered.indexOf("\n\n"); end >= 0; end = buffered.indexOf("\n\n")) {
      const block = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      const event = /^event: (.*)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)?.[1];
      if (event !== undefined && data !== undefined) messages.push({ event, data: JSON.parse(data) });
    }
  });
  cleanups.push(() => {
    res.destroy();
  });
  return messages;
};

/** Moves virtual time on, with real event-loop turns for the file reads, until `cond` holds (bounded). */
const until = async (clock: VirtualClock, cond: () => boolean, what: string): Promise<void> => {
  for (let i = 0; i < 200_000; i++) {
    if (cond()) return;
    await clock.advance(50);
    await new Promise<void>((r) => setImmediate(r));
  }
  throw new Error(`never saw ${what}`);
};

/**
 * A board on a logdir whose run `a` has one point and a writer still open, with its event stream
 * connected; `prepare` adds to the logdir before the board starts, `onIssue` takes its reports.
 */
const liveRun = async (
  options: { readonly prepare?: (logdir: string) => void; readonly onIssue?: (message: string) => void } = {},
): Promise<{ clock: VirtualClock; logdir: string; w: SummaryWriter; board: Board; events: { event: string; data: unknown }[] }> => {
  const clock = new VirtualClock();
  const logdir = tempDir();
  const w = new SummaryWriter(join(logdir, "a"), { clock: new VirtualClock({ startMs: 1_700_000_000_000 }) });
  cleanups.push(() => w.close());
  w.addScalar("loss", 1, 0);
  await w.flush();
  options.prepare?.(logdir);
  const board = await serve(logdir, clock, options.onIssue);
  const events = await subscribe(board);
  await until(clock, () => events.length > 0, "hello");
  return { clock, logdir, w, board, events };
};

const rows = async (board: Board, run: string, tag: string): Promise<[number, number, number][]> =>
  JSON.parse((await send(`http://127.0.0.1:${board.port}/data/plugin/scalars/scalars?run=${run}&tag=${tag}`)).text) as [number, number, number][];

describe("live: the board follows the logdir and pushes what changed (virtual clock)", () => {
  it("a point appended while serving is announced on /board/events and served; a new run is announced", async () => {
    const { clock, logdir, w, board, events } = await liveRun();
    expect(events[0]).toEqual({ event: "hello", data: { runs: ["a"], loaded: true } });

    w.addScalar("loss", 0.5, 1);
    await w.flush();
    await until(clock, () => events.some((e) => e.event === "scalars"), "the new point");
    expect(events.find((e) => e.event === "scalars")?.data).toEqual([{ run: "a", tag: "loss", points: 2, lastStep: 1 }]);
    expect((await rows(board, "a", "loss")).map((r) => [r[1], r[2]])).toEqual([
      [0, 1],
      [1, 0.5],
    ]);

    const b = new SummaryWriter(join(logdir, "b"), { clock: new VirtualClock({ startMs: 1_700_000_000_500 }) });
    b.addScalar("loss", 7, 3);
    await b.close();
    await until(clock, () => events.some((e) => e.event === "runs"), "the new run");
    expect(events.find((e) => e.event === "runs")?.data).toEqual(["a", "b"]);
    await until(clock, () => events.some((e) => e.event === "scalars" && JSON.stringify(e.data).includes('"run":"b"')), "b's series");
  });

  it("/data/plugin/scalars/tags is answered from memory while the tags are unchanged, and anew once a tag, a run or a tag's metadata arrives", async () => {
    const { clock, logdir, w, board, events } = await liveRun();
    const tags = async (): Promise<string> => (await send(`http://127.0.0.1:${board.port}/data/plugin/scalars/tags`)).text;
    const first = await tags();
    expect(JSON.parse(first)).toEqual({ a: { loss: { displayName: "", description: "" } } });
    // A new point of a known series: the same answer (and the same version).
    const version = board.store.tagsVersion;
    w.addScalar("loss", 0.5, 1);
    await w.flush();
    await until(clock, () => events.some((e) => e.event === "scalars"), "the new point");
    expect(board.store.tagsVersion).toBe(version);
    expect(await tags()).toBe(first);
    // A new tag with metadata (a display name, a description with a quote and a non-ASCII letter).
    w.addScalar("acc", 0.9, 1, { displayName: "Accuracy", description: 'the "top-1" rate, ≥ 0' });
    await w.flush();
    await until(clock, () => board.store.series("a", "acc") !== undefined, "the new tag");
    const second = await tags();
    expect(JSON.parse(second)).toEqual({ a: { acc: { displayName: "Accuracy", description: 'the "top-1" rate, ≥ 0' }, loss: { displayName: "", description: "" } } });
    // Written as TensorBoard's json.dumps writes it: ", " and ": ", ASCII only.
    expect(second).toContain('"acc": {"displayName": "Accuracy", "description": "the \\"top-1\\" rate, \\u2265 0"}');
    // A new run.
    const b = new SummaryWriter(join(logdir, "b"), { clock: new VirtualClock({ startMs: 1_700_000_000_500 }) });
    b.addScalar("loss", 7, 3);
    await b.close();
    await until(clock, () => board.store.series("b", "loss") !== undefined, "run b");
    expect(Object.keys(JSON.parse(await tags()) as object)).toEqual(["a", "b"]);
  });

  it("many appends in one throttle window make one scalars message", async () => {
    const { clock, w, board, events } = await liveRun();
    for (let s = 1; s <= 500; s++) w.addScalars({ loss: 1 / s, acc: s / 500 }, s);
    await w.flush();
    await until(clock, () => events.some((e) => e.event === "scalars" && JSON.stringify(e.data).includes('"points":501,"lastStep":500}')), "every point");
    const scalarMessages = events.filter((e) => e.event === "scalars");
    expect(scalarMessages.length).toBeLessThanOrEqual(2);
    expect(await rows(board, "a", "acc")).toHaveLength(500);
  });

  it("a restart's SessionLog START purges the stale steps: announced as purge, and gone from the route", async () => {
    const clock = new VirtualClock();
    const logdir = tempDir();
    const first = new SummaryWriter(join(logdir, "r"), { clock: new VirtualClock({ startMs: 1_700_000_000_000 }), purgeStep: 0 });
    for (let s = 0; s < 10; s++) first.addScalar("loss", s, s);
    await first.close();
    const board = await serve(logdir, clock);
    const events = await subscribe(board);
    expect(await rows(board, "r", "loss")).toHaveLength(10);

    // The job restarts from its checkpoint at step 5 and writes a new file.
    const second = new SummaryWriter(join(logdir, "r"), { clock: new VirtualClock({ startMs: 1_700_000_100_000 }), purgeStep: 5 });
    second.addScalar("loss", 100, 5);
    second.addScalar("loss", 101, 6);
    await second.close();
    await until(clock, () => events.some((e) => e.event === "scalars"), "the restart");
    expect(events.filter((e) => e.event === "purge").map((e) => e.data)).toEqual([{ run: "r", step: 5 }]);
    expect((await rows(board, "r", "loss")).map((r) => [r[1], r[2]])).toEqual([
      [0, 0],
      [1, 1],
      [2, 2],
      [3, 3],
      [4, 4],
      [5, 100],
      [6, 101],
    ]);
  });

  it("views: new histograms, text and checkpoints are announced as a views message; a restart purges them (purge message, routes)", async () => {
    const { clock, w, board, events } = await liveRun();
    w.addHistogram("weights", [1, 2, 3], 1);
    w.addText("notes", "hello", 1);
    w.addSessionLog("CHECKPOINT", 1, { checkpointPath: "ckpt-1" });
    await w.flush();
    await until(clock, () => events.some((e) => e.event === "views"), "the views message");
    const changes = events.filter((e) => e.event === "views").flatMap((e) => e.data as { plugin: string }[]);
    expect(changes).toEqual(
      expect.arrayContaining([
        { plugin: "histograms", run: "a", tag: "weights", count: 1, lastStep: 1 },
        { plugin: "text", run: "a", tag: "notes", count: 1, lastStep: 1 },
        { plugin: "checkpoints", run: "a", count: 1, lastStep: 1 },
      ]),
    );
    // The scalars stream is unchanged: no scalar grew.
    expect(events.some((e) => e.event === "scalars")).toBe(false);
    const at = `http://127.0.0.1:${board.port}`;

    // A run with histograms only: a restart from step 2 purges its steps >= 2 and says so.
    const logdir = board.store.logdir;
    const first = new SummaryWriter(join(logdir, "h"), { clock: new VirtualClock({ startMs: 1_700_000_000_000 }), purgeStep: 0 });
    for (let s = 0; s < 5; s++) first.addHistogram("weights", [s], s);
    await first.close();
    await until(clock, () => events.some((e) => e.event === "views" && JSON.stringify(e.data).includes('"run":"h","tag":"weights","count":5')), "h's histograms");
    const second = new SummaryWriter(join(logdir, "h"), { clock: new VirtualClock({ startMs: 1_700_000_100_000 }), purgeStep: 2 });
    second.addHistogram("weights", [20], 2);
    await second.close();
    await until(clock, () => events.some((e) => e.event === "purge"), "the restart");
    expect(events.filter((e) => e.event === "purge").map((e) => e.data)).toEqual([{ run: "h", step: 2 }]);
    await until(clock, () => events.some((e) => e.event === "views" && JSON.stringify(e.data).includes('"run":"h","tag":"weights","count":3,"lastStep":2')), "the purged series");
    const rows = JSON.parse((await send(`${at}/data/plugin/histograms/histograms?run=h&tag=weights`)).text) as [number, number][];
    expect(rows.map((r) => r[1])).toEqual([0, 1, 2]);
  });

  it("a truncated last record waits for its bytes: the point appears once the file is complete", async () => {
    const clock = new VirtualClock();
    const scratch = tempDir();
    const w = new SummaryWriter(scratch, { clock: new VirtualClock() });
    for (let s = 1; s <= 3; s++) w.addScalar("loss", s, s);
    await w.close();
    const bytes = readFileSync(w.path);
    const logdir = tempDir();
    mkdirSync(join(logdir, "t"));
    const file = join(logdir, "t", "events.out.tfevents.1700000000.host");
    writeFileSync(file, bytes.subarray(0, bytes.length - 5));
    const board = await serve(logdir, clock);
    const events = await subscribe(board);
    expect((await rows(board, "t", "loss")).map((r) => r[1])).toEqual([1, 2]);
    appendFileSync(file, bytes.subarray(bytes.length - 5));
    await until(clock, () => events.some((e) => e.event === "scalars"), "the completed record");
    expect((await rows(board, "t", "loss")).map((r) => r[1])).toEqual([1, 2, 3]);
  });

  it("a hostile file in a subfolder (issue 33: a header claiming 3.5e9 bytes): one warning, and the board goes on following the other runs", async () => {
    const hostile = (logdir: string): string => join(logdir, "dropped", "here", "events.out.tfevents.1599759586.hostile");
    const issues: string[] = [];
    const { clock, logdir, w, board, events } = await liveRun({
      prepare: (dir) => {
        mkdirSync(join(dir, "dropped", "here"), { recursive: true });
        writeFileSync(hostile(dir), issue33File());
      },
      onIssue: (m) => issues.push(m),
    });
    // Three more points, each announced: three more polls of the logdir, hostile file included.
    for (let step = 1; step <= 3; step++) {
      const seen = events.length;
      w.addScalar("loss", step, step);
      await w.flush();
      await until(clock, () => events.slice(seen).some((e) => e.event === "scalars"), `the point at step ${step}`);
    }
    expect((await rows(board, "a", "loss")).map((r) => r[1])).toEqual([0, 1, 2, 3]);
    expect(issues).toEqual([`${hostile(logdir)}: corrupted record at offset 0: its header claims 3500000000 bytes, more than the limit of 268435456 (maxRecordBytes); record skipped`]);
  });

  it("the store loads without holding the event loop: it takes turns while loading, and answers requests meanwhile", async () => {
    const logdir = tempDir();
    const w = new SummaryWriter(join(logdir, "big"), { clock: new VirtualClock() });
    for (let s = 0; s < 100_000; s++) w.addScalar("loss", s, s);
    await w.close();
    let turns = 0;
    let loading = true;
    const spin = (): void => {
      turns++;
      if (loading) setImmediate(spin);
    };
    setImmediate(spin);
    const board = await startBoard(logdir, { port: 0, clock: new VirtualClock() });
    cleanups.push(() => board.close());
    expect((await send(`http://127.0.0.1:${board.port}/data/runs`)).status).toBe(200);
    await board.store.loaded;
    loading = false;
    // About 3 MB: one turn per 1 MiB read at least, and one per 10 ms of ingesting.
    expect(turns).toBeGreaterThanOrEqual(3);
    expect(await rows(board, "big", "loss")).toHaveLength(100_000);
  });
});
