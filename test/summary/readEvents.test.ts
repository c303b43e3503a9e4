import { appendFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { NotFoundError } from "../../src/errors.js";
import type { Clock } from "../../src/time/Clock.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { LogdirScalars } from "../../src/summary/LogdirScalars.js";
import { type ReadEvent, readEventBatches, readEvents, readEventsInto } from "../../src/summary/readEvents.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { readRecords } from "../../src/summary/recordReader.js";
import { recordHeader } from "../util/hostileRecords.js";

let root: string;
let logdir: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), "read-events-"));
  logdir = join(root, "logs");
  mkdirSync(logdir);
});
afterEach(() => {
  rmSync(root, { recursive: true, force: true });
});

const clock = (): VirtualClock => new VirtualClock({ startMs: 1_700_000_000_000 });

/** Writes `steps` scalars `tag` = step / 10 to a new file in `dir` and closes it. */
const writeRun = async (dir: string, steps: readonly number[], tag = "loss", purgeStep?: number): Promise<string> => {
  const w = new SummaryWriter(dir, { clock: clock(), ...(purgeStep === undefined ? {} : { purgeStep }) });
  for (const s of steps) w.addScalar(tag, s / 10, s);
  await w.close();
  return w.path;
};

const collect = async (it: AsyncIterable<ReadEvent>): Promise<ReadEvent[]> => {
  const out: ReadEvent[] = [];
  for await (const e of it) out.push(e);
  return out;
};

const scalars = (events: readonly ReadEvent[]): string[] =>
  events.flatMap((e) => (e.kind === "scalar" ? [`${e.run}:${e.tag}@${e.step}`] : []));

const issues = (events: readonly ReadEvent[]): string[] => events.flatMap((e) => (e.kind === "issue" ? [`${e.problem}:${e.run}`] : []));

/** The next `n` events of a following iterator, advancing the virtual clock while it waits (no real time). */
const take = async (it: AsyncIterator<ReadEvent>, n: number, c: VirtualClock): Promise<ReadEvent[]> => {
  const out: ReadEvent[] = [];
  while (out.length < n) {
    let settled = false;
    const p = it.next().then((r) => {
      settled = true;
      return r;
    });
    for (let i = 0; i < 100_000 && !settled; i++) {
      await c.advance(100);
      await new Promise<void>((r) => setImmediate(r));
    }
    const r = await p;
    if (r.done === true) break;
    out.push(r.value);
  }
  return out;
};

describe("readEvents over a logdir", () => {
  it("finds every directory with event files as a run, named relative to the logdir, in order", async () => {
    await writeRun(join(logdir, "b", "c"), [1]);
    await writeRun(join(logdir, "a"), [1, 2]);
    await writeRun(logdir, [5]);
    writeFileSync(join(logdir, "a", "README.md"), "not an event file, not named like one");
    const events = await collect(readEvents(logdir));
    expect(scalars(events)).toEqual([".:loss@5", "a:loss@1", "a:loss@2", "b/c:loss@1"]);
    expect(events.filter((e) => e.kind === "fileVersion").map((e) => e.run)).toEqual([".", "a", "b/c"]);
    expect(issues(events)).toEqual([]);
  });

  it("reads one event file as the run '.'", async () => {
    const path = await writeRun(join(logdir, "x"), [3]);
    expect(scalars(await collect(readEvents(path)))).toEqual([".:loss@3"]);
  });

  it("an empty logdir yields nothing and ends; a missing path rejects with NotFoundError", async () => {
    expect(await collect(readEvents(logdir))).toEqual([]);
    await expect(collect(readEvents(join(root, "nope")))).rejects.toThrow(NotFoundError);
  });

  it("a non-event file named like one is reported and skipped; the run's other files are read", async () => {
    await writeRun(join(logdir, "a"), [1]);
    writeFileSync(join(logdir, "a", "events.out.tfevents.0000000000.notes"), "hello, I am text\n");
    const events = await collect(readEvents(logdir));
    expect(scalars(events)).toEqual(["a:loss@1"]);
    expect(issues(events)).toEqual(["notEventFile:a"]);
  });

  it("a symlink to a run inside the logdir is a run; one pointing outside is reported and not followed; a loop ends", async () => {
    await writeRun(join(logdir, "real"), [1]);
    await writeRun(join(root, "outside"), [9]);
    symlinkSync(join(logdir, "real"), join(logdir, "linked"));
    symlinkSync(join(root, "outside"), join(logdir, "escape"));
    symlinkSync(logdir, join(logdir, "real", "loop"));
    const events = await collect(readEvents(logdir));
    expect(scalars(events)).toEqual(["linked:loss@1", "real:loss@1"]);
    expect(events.filter((e) => e.kind === "issue").map((e) => e.kind === "issue" && [e.problem, e.path])).toEqual([
      ["symlinkOutsideLogdir", join(logdir, "escape")],
    ]);
  });
});

describe("readEvents with follow (virtual clock)", () => {
  it("reads appended records, a truncated tail once completed, new files and new runs; ends on abort", async () => {
    const c = clock();
    const a = await writeRun(join(logdir, "a"), [1]);
    const bytes = readFileSync(a);
    const controller = new AbortController();
    const it = readEvents(logdir, { follow: true, clock: c, signal: controller.signal, pollSecs: 1 });
    expect(scalars(await take(it, 2, c))).toEqual(["a:loss@1"]);

    // A second file in run a, first half only, and a new run b.
    const second = join(logdir, "a", "events.out.tfevents.9999999999.later");
    writeFileSync(second, bytes.subarray(0, bytes.length - 5));
    await writeRun(join(logdir, "b"), [7]);
    const next = await take(it, 3, c); // a's file version and first scalar of the copy... up to the cut, b's two
    expect(scalars(next)).toEqual(["b:loss@7"]);
    expect(next.map((e) => e.run)).toEqual(["a", "b", "b"]);

    appendFileSync(second, bytes.subarray(bytes.length - 5));
    expect(scalars(await take(it, 1, c))).toEqual(["a:loss@1"]);

    controller.abort();
    expect(await take(it, 1, c)).toEqual([]);
  });

  it("a run deleted while read is reported, and the scalar store drops it", async () => {
    const c = clock();
    await writeRun(join(logdir, "a"), [1]);
    await writeRun(join(logdir, "b"), [2]);
    const store = new LogdirScalars();
    const controller = new AbortController();
    const it = readEvents(logdir, { follow: true, clock: c, signal: controller.signal });
    for (const e of await take(it, 4, c)) store.ingest(e);
    expect(store.runs()).toEqual(["a", "b"]);
    rmSync(join(logdir, "b"), { recursive: true });
    const [gone] = await take(it, 1, c);
    expect(gone).toMatchObject({ kind: "issue", problem: "runDeleted", run: "b" });
    if (gone !== undefined) store.ingest(gone);
    expect(store.runs()).toEqual(["a"]);
    controller.abort();
    await it.return?.();
  });

  it("a logdir that does not exist yet is waited for", async () => {
    const c = clock();
    const controller = new AbortController();
    const it = readEvents(join(root, "later"), { follow: true, clock: c, signal: controller.signal });
    const pending = take(it, 2, c);
    await writeRun(join(root, "later"), [4]);
    expect(scalars(await pending)).toEqual([".:loss@4"]);
    controller.abort();
  });
});

/**
 * Two sessions in `run`: the first writes START at its first step (not a restart) and steps
 * 1..20 of loss and acc; the second restores step 10, writes START at 11, then loss at 11..15
 * with new values (100 + step).
 */
const writeRestartedRun = async (run: string): Promise<void> => {
  const w1 = new SummaryWriter(run, { clock: clock(), purgeStep: 1 });
  for (let s = 1; s <= 20; s++) w1.addScalars({ loss: s, acc: -s }, s);
  await w1.close();
  const w2 = new SummaryWriter(run, { clock: new VirtualClock({ startMs: 1_700_000_100_000 }), purgeStep: 11 });
  for (let s = 11; s <= 15; s++) w2.addScalars({ loss: 100 + s }, s);
  await w2.close();
};

describe("LogdirScalars over readEvents", () => {
  it("a restart's SessionLog START purges the steps >= its step in every series of the run (the first START does not)", async () => {
    await writeRestartedRun(join(logdir, "exp"));
    const store = new LogdirScalars();
    for await (const e of readEvents(logdir)) store.ingest(e);
    const loss = store.series("exp", "loss");
    expect([...(loss?.steps ?? [])]).toEqual([...Array.from({ length: 10 }, (_, i) => i + 1), 11, 12, 13, 14, 15]);
    expect([...(loss?.values ?? [])].slice(10)).toEqual([111, 112, 113, 114, 115]);
    expect([...(store.series("exp", "acc")?.steps ?? [])]).toEqual(Array.from({ length: 10 }, (_, i) => i + 1));
    expect(store.tags("exp")).toEqual(["acc", "loss"]);
    expect(store.points).toBe(25);
  });
});

describe("readEvents with follow and watch (change notices)", () => {
  it("reads an appended record on the file system's notice, with the poll's clock never moving; stops watching on abort", async () => {
    const c = new VirtualClock();
    const a = await writeRun(join(logdir, "a"), [1]);
    const bytes = readFileSync(a);
    const controller = new AbortController();
    const it = readEvents(logdir, { follow: true, watch: true, clock: c, signal: controller.signal, pollSecs: 3600 });
    const first: ReadEvent[] = [];
    for (let i = 0; i < 2; i++) first.push((await it.next()).value as ReadEvent);
    expect(scalars(first)).toEqual(["a:loss@1"]);
    // The virtual clock never reaches the hour's poll: only the notice can wake the reader.
    const next = it.next();
    // The file again minus its file-version record: its scalar record once more.
    appendFileSync(a, bytes.subarray(firstRecordEnd(bytes)));
    const bounded = await Promise.race([next, new Promise<"none">((r) => setTimeout(() => r("none"), 20_000))]);
    expect(bounded, "no change notice woke the reader within 20 s").not.toBe("none");
    expect((bounded as IteratorResult<ReadEvent>).value).toMatchObject({ kind: "scalar", run: "a", step: 1 });
    controller.abort();
    expect((await it.next()).done).toBe(true);
  });
});

/** The end of the first record (the file version) of an event file: record = 8-byte length, 4-byte CRC, payload, 4-byte CRC. */
const firstRecordEnd = (bytes: Buffer): number => 8 + 4 + Number(bytes.readBigUInt64LE(0)) + 4;

describe("readEventBatches", () => {
  it("yields the same events as readEvents, in the same order, in non-empty batches", async () => {
    await writeRun(join(logdir, "a"), [1, 2, 3]);
    await writeRun(join(logdir, "b"), [4]);
    const one: ReadEvent[] = [];
    for await (const e of readEvents(logdir)) one.push(e);
    const batches: (readonly ReadEvent[])[] = [];
    for await (const b of readEventBatches(logdir, { chunkBytes: 64 })) batches.push(b);
    expect(batches.every((b) => b.length > 0)).toBe(true);
    expect(batches.length).toBeGreaterThan(1);
    expect(batches.flat()).toEqual(one);
  });
});

describe("readEventsInto", () => {
  /** What a sink receives, scalars made back into events: it must equal what `readEvents` yields. */
  const pushed = async (path: string, options: Parameters<typeof readEventsInto>[2] = {}): Promise<ReadEvent[]> => {
    const out: ReadEvent[] = [];
    await readEventsInto(path, { event: (e) => out.push(e), scalar: (run, tag, step, wallTime, value) => out.push({ kind: "scalar", run, tag, step, wallTime, value }) }, options);
    return out;
  };

  it("pushes the same events as readEvents, in the same order, scalars without an event object", async () => {
    const run = join(logdir, "exp");
    // Two sessions: the second's START comes between scalars, so the order of the two kinds matters.
    const w1 = new SummaryWriter(run, { clock: clock(), purgeStep: 1 });
    for (let s = 1; s <= 6; s++) w1.addScalars({ loss: s, acc: -s }, s);
    w1.addHistogram("w", [1, 2, 3], 6);
    w1.addText("note", "hello", 6);
    await w1.close();
    const w2 = new SummaryWriter(run, { clock: new VirtualClock({ startMs: 1_700_000_100_000 }), purgeStep: 4 });
    for (let s = 4; s <= 5; s++) w2.addScalars({ loss: 100 + s }, s);
    await w2.close();
    writeFileSync(join(logdir, "events.out.tfevents.1.notanevent"), "not an event file");
    const expected = await collect(readEvents(logdir, { tagMetadata: true }));
    expect(expected.map((e) => e.kind)).toEqual(expect.arrayContaining(["scalar", "sessionLog", "histogram", "text", "tagMetadata", "issue"]));
    expect(await pushed(logdir, { tagMetadata: true, chunkBytes: 64 })).toEqual(expected);
  });

  it("feeds LogdirScalars.add as ingest would: the restart's purge applies between the right points", async () => {
    await writeRestartedRun(join(logdir, "exp"));
    const byEvents = new LogdirScalars();
    for await (const e of readEvents(logdir)) byEvents.ingest(e);
    const bySink = new LogdirScalars();
    await readEventsInto(logdir, { event: (e) => bySink.ingest(e), scalar: (r, tag, step, wallTime, value) => bySink.add(r, tag, step, wallTime, value) });
    for (const tag of ["loss", "acc"]) {
      expect([...(bySink.series("exp", tag)?.steps ?? [])]).toEqual([...(byEvents.series("exp", tag)?.steps ?? [])]);
      expect([...(bySink.series("exp", tag)?.values ?? [])]).toEqual([...(byEvents.series("exp", tag)?.values ?? [])]);
    }
    expect(bySink.points).toBe(25);
  });

  it("LogdirScalars.add returns the points a step going backwards purged (files before brain.Event:2)", () => {
    const store = new LogdirScalars();
    for (let s = 1; s <= 5; s++) expect(store.add("r", "loss", s, s, s)).toBe(0);
    expect(store.add("r", "loss", 3, 6, 30)).toBe(3); // steps 3, 4, 5 go
    expect([...(store.series("r", "loss")?.steps ?? [])]).toEqual([1, 2, 3]);
    store.ingest({ kind: "fileVersion", run: "v2", wallTime: 0, step: 0, version: "brain.Event:2" });
    for (let s = 1; s <= 3; s++) store.add("v2", "loss", s, s, s);
    expect(store.add("v2", "loss", 1, 9, 9)).toBe(0); // version 2 files purge only on START
  });

  it("rejects with NotFoundError for a missing path, and with what the sink throws", async () => {
    await expect(readEventsInto(join(root, "nope"), { event: () => undefined, scalar: () => undefined })).rejects.toBeInstanceOf(NotFoundError);
    await writeRun(join(logdir, "a"), [1]);
    const boom = new Error("sink failed");
    await expect(
      readEventsInto(logdir, {
        event: () => undefined,
        scalar: () => {
          throw boom;
        },
      }),
    ).rejects.toThrow(/sink failed/);
  });
});

describe("readEvents with tagMetadata", () => {
  it("yields each tag's plugin, display name and description once, before its first value; off by default", async () => {
    await writeRun(join(logdir, "a"), [1, 2], "loss");
    const kinds = (await collect(readEvents(logdir))).map((e) => e.kind);
    expect(kinds).not.toContain("tagMetadata");
    const events = await collect(readEvents(logdir, { tagMetadata: true }));
    const meta = events.filter((e) => e.kind === "tagMetadata");
    // Our writer writes TF2-style scalars (a tensor with the scalars plugin's metadata, no display
    // name). A TF1 simple_value would show its tag: test/board/tensorBoardConformance.test.ts.
    expect(meta).toEqual([expect.objectContaining({ kind: "tagMetadata", run: "a", tag: "loss", plugin: "scalars", displayName: "", description: "" })]);
    const at = events.findIndex((e) => e.kind === "tagMetadata");
    expect(events[at + 1]).toMatchObject({ kind: "scalar", tag: "loss", step: 1 });
  });
});

describe("readEvents on hostile files (issue 33)", () => {
  /** `good` with the length of its record at `offset` claiming `n` bytes, the length CRC made valid. */
  const hostile = (good: Uint8Array, offset: number, n: number): Buffer => {
    const out = Buffer.from(good);
    out.set(recordHeader(n), offset);
    return out;
  };

  it("a record claiming 3.5e9 bytes is one corruptRecord naming the file and offset; the records around it are read", async () => {
    const path = await writeRun(join(logdir, "a"), [1, 2, 3]);
    const good = readFileSync(path);
    const [, second] = readRecords(good).records;
    if (second === undefined) throw new Error("too few records");
    writeFileSync(path, hostile(good, second.offset, 3.5e9));
    for (const events of [await collect(readEvents(logdir)), await collect(readEvents(logdir, { chunkBytes: 16 }))]) {
      expect(scalars(events)).toEqual(["a:loss@2", "a:loss@3"]);
      expect(events.filter((e) => e.kind === "issue")).toEqual([
        {
          kind: "issue",
          problem: "corruptRecord",
          run: "a",
          path,
          offset: second.offset,
          message: `${path}: corrupted record at offset ${second.offset}: its header claims 3500000000 bytes, more than the limit of 268435456 (maxRecordBytes); record skipped`,
        },
      ]);
    }
  });

  it("following, a hostile length is reported once across polls, and records appended after it are read", async () => {
    const c = clock();
    // Counts the reader's waits between polls: each one ends a full pass over the logdir.
    let polls = 0;
    const counted: Clock = { now: () => c.now(), setTimer: (ms, fn) => c.setTimer(ms, fn), sleep: (ms, signal) => (polls++, c.sleep(ms, signal)) };
    const path = await writeRun(join(logdir, "a"), [1]);
    const good = readFileSync(path);
    const [, scalar] = readRecords(good).records;
    if (scalar === undefined) throw new Error("too few records");
    const scalarRecord = good.subarray(scalar.offset);
    writeFileSync(path, Buffer.concat([good, hostile(scalarRecord, 0, 2 ** 62).subarray(0, 12)]));
    const controller = new AbortController();
    const it = readEvents(logdir, { follow: true, clock: counted, signal: controller.signal, pollSecs: 1 });
    const first = await take(it, 3, c);
    expect(first.map((e) => e.kind)).toEqual(["fileVersion", "scalar", "issue"]);
    // Ten more passes over the file: nothing new, in particular not the same issue again.
    const next = it.next();
    let settled = false;
    void next.then(() => (settled = true));
    const passes = polls + 10;
    for (let i = 0; i < 100_000 && polls < passes && !settled; i++) {
      await c.advance(1000);
      await new Promise<void>((r) => setImmediate(r));
    }
    expect(polls).toBeGreaterThanOrEqual(passes);
    expect(settled).toBe(false);
    appendFileSync(path, scalarRecord);
    expect(scalars(await take({ next: () => next }, 1, c))).toEqual(["a:loss@1"]);
    controller.abort();
    await it.return?.();
  });

  it("a record that runs past the end of the file: without follow a corruptRecord, with follow a writer still writing", async () => {
    const path = await writeRun(join(logdir, "a"), [1, 2]);
    const good = readFileSync(path);
    writeFileSync(path, good.subarray(0, good.length - 3));
    const once = await collect(readEvents(logdir));
    expect(scalars(once)).toEqual(["a:loss@1"]);
    expect(once.filter((e) => e.kind === "issue").map((e) => e.kind === "issue" && e.message)).toEqual([expect.stringMatching(/but the file ends \d+ bytes after its start \(truncated, or a damaged length\); record skipped$/)]);
    const c = clock();
    const controller = new AbortController();
    const it = readEvents(logdir, { follow: true, clock: c, signal: controller.signal });
    const followed = await take(it, 2, c);
    expect(followed.map((e) => e.kind)).toEqual(["fileVersion", "scalar"]);
    appendFileSync(path, good.subarray(good.length - 3));
    expect(scalars(await take(it, 1, c))).toEqual(["a:loss@2"]);
    controller.abort();
    await it.return?.();
  });

  it("maxRecordBytes out of range is refused at once", () => {
    expect(() => readEvents(logdir, { maxRecordBytes: 0 })).toThrow(/maxRecordBytes must be an integer from 1 to 1073741824/);
  });
});
