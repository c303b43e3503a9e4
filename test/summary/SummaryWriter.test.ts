import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { basename, join } from "node:path";
import { firstValueFrom } from "rxjs";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { InvalidArgumentError, RuntimeError } from "../../src/errors.js";
import { tensor } from "../../src/session/Tensor.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { DataType } from "../../src/summary/EventProto.js";
import { eventFileName } from "../../src/summary/EventFileWriter.js";
import { scalarValue } from "../../src/summary/summaryValues.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { type DecodedEvent, eventFiles, float32At, hex, readEvents } from "./decoder.js";

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "summary-writer-"));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

const START_MS = 1_599_759_586_000;

/** Lets background I/O (libuv thread pool) progress without real sleeps: bounded event-loop turns. */
const until = async (cond: () => boolean, turns = 500_000): Promise<void> => {
  for (let i = 0; i < turns && !cond(); i++) await new Promise<void>((r) => setImmediate(r));
  if (!cond()) throw new Error("condition not reached");
};

const summaries = (events: DecodedEvent[]) => events.filter((e) => e.summary !== undefined);

describe("SummaryWriter: the event file", () => {
  it("is named events.out.tfevents.<10-digit secs>.<host>.<pid>.<counter> and starts with the flushed brain.Event:2 record", async () => {
    const clock = new VirtualClock({ startMs: START_MS });
    const w = new SummaryWriter(join(dir, "run"), { clock });
    const first = await firstValueFrom(w.flushed$); // flushed at once, no flush() call
    expect(first.records).toBe(1);
    const name = basename(w.path);
    expect(name).toMatch(new RegExp(`^events\\.out\\.tfevents\\.1599759586\\.${hostname().replace(/\./g, "\\.")}\\.${process.pid}\\.\\d+$`));
    // The whole file is the 24-byte record of the published vector (wall_time 1599759586).
    const bytes = readFileSync(w.path);
    const golden = hex(`18 00 00 00 00 00 00 00 a3 7f 4b 22 09 00 00 80 38 99 d6 d7 41 1a 0d
      ${Buffer.from("brain.Event:2").toString("hex")} 12 4b 36 ab`);
    expect(bytes.equals(Buffer.from(golden))).toBe(true);
    await w.close();
  });

  it("zero-pads the seconds to 10 digits and appends the suffix", () => {
    expect(eventFileName(123, "h", 7, 2, ".v2")).toBe("events.out.tfevents.0000000123.h.7.2.v2");
  });

  it("creates a new file for each writer, even in the same second and directory, and never appends", async () => {
    const clock = new VirtualClock({ startMs: START_MS });
    const a = new SummaryWriter(dir, { clock });
    a.addScalar("x", 1, 1);
    await a.close();
    const before = readFileSync(a.path);
    const b = new SummaryWriter(dir, { clock });
    b.addScalar("x", 2, 2);
    await b.close();
    expect(b.path).not.toBe(a.path);
    expect(readFileSync(a.path).equals(before)).toBe(true);
    expect(eventFiles(dir)).toHaveLength(2);
  });

  it("appends filenameSuffix (e.g. TF2's .v2)", async () => {
    const w = new SummaryWriter(dir, { clock: new VirtualClock({ startMs: START_MS }), filenameSuffix: ".v2" });
    await w.close();
    expect(basename(w.path)).toMatch(/^events\.out\.tfevents\.1599759586\..*\.v2$/);
  });

  it("creates a missing log directory", async () => {
    const w = new SummaryWriter(join(dir, "a", "b", "c"));
    await w.close();
    expect(existsSync(w.path)).toBe(true);
  });
});

describe("SummaryWriter: every summary kind, decoded independently", () => {
  it("writes scalars, histograms, text, images, tensors, session logs, raw summaries and events", async () => {
    const clock = new VirtualClock({ startMs: START_MS });
    const w = new SummaryWriter(dir, { clock });
    w.addScalar("loss", 0.5, 1);
    clock.set(START_MS + 1500);
    w.addScalar("legacy", 2.5, 2, { simpleValue: true });
    w.addScalars({ a: 1, b: 2 }, 3);
    w.addHistogram("w", [1, 2, 3, 4], 4, { buckets: 2 });
    w.addText("notes", "hi", 5);
    w.addImage("img", { pixels: new Uint8Array(12), height: 2, width: 2, channels: 3 }, 6);
    w.addTensor("t", tensor("int32", [2], Int32Array.of(7, 8)), 7, { pluginName: "custom" });
    w.addSessionLog("CHECKPOINT", 8, { checkpointPath: "/c/model.ckpt-8" });
    w.addSummary([scalarValue("pre", 9)], 9);
    w.addSummary({ value: [scalarValue("pre2", 10)] }, 10);
    w.addEvent({ step: 11, taggedRunMetadata: { tag: "rm", runMetadata: Uint8Array.of(1) } });
    w.addSessionLog("STOP", 12);
    await w.close();

    const events = readEvents(w.path);
    expect(events[0]).toMatchObject({ fileVersion: "brain.Event:2", wallTime: 1599759586 });
    const rest = events.slice(1);
    expect(rest.map((e) => e.step)).toEqual(["1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12"]);
    expect(rest[0]?.wallTime).toBe(1599759586);
    expect(rest[1]?.wallTime).toBe(1599759587.5);
    const v = (i: number, j = 0) => rest[i]?.summary?.value?.[j];
    expect(float32At(v(0)?.tensor?.tensorContent)).toBe(0.5);
    expect(v(1)?.simpleValue).toBe(2.5);
    expect([v(2, 0)?.tag, v(2, 1)?.tag]).toEqual(["a", "b"]);
    expect(v(3)?.metadata?.pluginData?.pluginName).toBe("histograms");
    expect(v(3)?.tensor?.tensorShape?.dim).toEqual([{ size: "2" }, { size: "3" }]);
    expect(v(4)?.metadata?.pluginData?.pluginName).toBe("text");
    expect(v(5)?.image).toMatchObject({ height: 2, width: 2, colorspace: 3 });
    expect(v(6)?.tensor?.dtype).toBe(DataType.DT_INT32);
    expect(v(6)?.metadata?.pluginData?.pluginName).toBe("custom");
    expect(rest[7]?.sessionLog).toEqual({ status: "CHECKPOINT", checkpointPath: "/c/model.ckpt-8" });
    expect(v(8)?.tag).toBe("pre");
    expect(v(9)?.tag).toBe("pre2");
    expect(rest[10]?.what).toBe("taggedRunMetadata");
    expect(rest[11]?.sessionLog).toEqual({ status: "STOP" });
  });
});

describe("SummaryWriter: buffering and flushing", () => {
  it("keeps up to maxQueue records in memory, then writes them in the background without flush()", async () => {
    const clock = new VirtualClock({ startMs: START_MS });
    const w = new SummaryWriter(dir, { clock, maxQueue: 3 });
    await firstValueFrom(w.flushed$);
    const size0 = statSync(w.path).size;
    w.addScalar("x", 1, 1);
    w.addScalar("x", 2, 2);
    expect(w.pendingRecords).toBe(2);
    await until(() => false, 200).catch(() => undefined); // nothing is due: give I/O a chance anyway
    expect(statSync(w.path).size).toBe(size0);
    w.addScalar("x", 3, 3);
    await until(() => w.pendingRecords === 0 && statSync(w.path).size > size0);
    expect(summaries(readEvents(w.path))).toHaveLength(3);
    await w.close();
  });

  it("flushes every flushSecs on the injected clock (TF's flush_secs)", async () => {
    const clock = new VirtualClock({ startMs: START_MS });
    const w = new SummaryWriter(dir, { clock, maxQueue: 1000, flushSecs: 120 });
    await firstValueFrom(w.flushed$);
    for (let i = 0; i < 5; i++) w.addScalar("x", i, i);
    await clock.advanceSecs(119);
    expect(w.pendingRecords).toBe(5);
    expect(summaries(readEvents(w.path))).toHaveLength(0);
    const flushed = firstValueFrom(w.flushed$);
    await clock.advanceSecs(1);
    expect(await flushed).toEqual({ records: 5, bytes: expect.any(Number) as number });
    expect(summaries(readEvents(w.path))).toHaveLength(5);
    // And again 120 s later.
    w.addScalar("x", 9, 9);
    const again = firstValueFrom(w.flushed$);
    await clock.advanceSecs(120);
    expect((await again).records).toBe(1);
    await w.close();
    expect(clock.pendingTimers).toBe(0);
  });

  it("flush() resolves once everything added before it is on disk", async () => {
    const w = new SummaryWriter(dir, { clock: new VirtualClock({ startMs: START_MS }), maxQueue: 1000 });
    for (let i = 0; i < 100; i++) w.addScalar("x", i, i);
    await w.flush();
    expect(summaries(readEvents(w.path)).map((e) => e.step ?? "0")).toEqual(Array.from({ length: 100 }, (_, i) => String(i)));
    await w.close();
  });

  it("close() is idempotent, adding afterwards throws, flush afterwards resolves", async () => {
    const w = new SummaryWriter(dir, { clock: new VirtualClock({ startMs: START_MS }) });
    w.addScalar("x", 1, 1);
    const c1 = w.close();
    expect(w.close()).toBe(c1);
    await c1;
    expect(() => w.addScalar("x", 2, 2)).toThrow(RuntimeError);
    expect(() => w.addScalar("x", 2, 2)).toThrow(/is closed/);
    await expect(w.flush()).resolves.toBeUndefined();
    expect(summaries(readEvents(w.path))).toHaveLength(1);
  });

  it("many writers, one per directory, written concurrently, never interleave records", async () => {
    const clock = new VirtualClock({ startMs: START_MS });
    const writers = Array.from({ length: 8 }, (_, k) => new SummaryWriter(join(dir, `run${k}`), { clock, maxQueue: 7 }));
    for (let step = 0; step < 300; step++) {
      for (const [k, w] of writers.entries()) {
        w.addScalar(`run${k}`, step * 10 + k, step);
        if (step % 50 === 0) void w.flush();
      }
      if (step % 25 === 0) await new Promise<void>((r) => setImmediate(r)); // let background writes overlap
    }
    await Promise.all(writers.map((w) => w.close()));
    for (const [k, w] of writers.entries()) {
      const files = eventFiles(join(dir, `run${k}`));
      expect(files).toEqual([w.path]);
      const ev = summaries(readEvents(w.path));
      expect(ev).toHaveLength(300);
      ev.forEach((e, step) => {
        expect(e.step ?? "0").toBe(String(step));
        expect(e.summary?.value?.[0]?.tag).toBe(`run${k}`);
        expect(float32At(e.summary?.value?.[0]?.tensor?.tensorContent)).toBe(Math.fround(step * 10 + k));
      });
    }
  });
});

describe("SummaryWriter: bad input gives clear errors and writes nothing", () => {
  it("rejects a NaN, fractional or out-of-range step", async () => {
    const w = new SummaryWriter(dir, { clock: new VirtualClock({ startMs: START_MS }) });
    const pending = w.pendingRecords;
    expect(() => w.addScalar("loss", 1, Number.NaN)).toThrow(InvalidArgumentError);
    expect(() => w.addScalar("loss", 1, Number.NaN)).toThrow("loss: step must be an integer (a safe integer number or an int64 bigint), got NaN");
    expect(() => w.addHistogram("h", [1], 1.5)).toThrow(/h: step must be an integer/);
    expect(() => w.addText("t", "x", 2n ** 64n)).toThrow(/step must be an integer/);
    expect(() => w.addSessionLog("START", Number.POSITIVE_INFINITY)).toThrow(/step must be an integer/);
    expect(w.pendingRecords).toBe(pending);
    await w.close();
    expect(summaries(readEvents(w.path))).toHaveLength(0);
  });

  it("rejects an empty tag, a wrong image buffer size, an unknown session status, empty addScalars", async () => {
    const w = new SummaryWriter(dir, { clock: new VirtualClock({ startMs: START_MS }) });
    expect(() => w.addScalar("", 1, 1)).toThrow(/summary tag must be a non-empty string, got ""/);
    expect(() => w.addScalars({ "": 1 }, 1)).toThrow(/summary tag must be a non-empty string/);
    expect(() => w.addScalars({}, 1)).toThrow(/no values given/);
    expect(() => w.addSummary([{ tag: "" }], 1)).toThrow(/summary tag must be a non-empty string/);
    expect(() => w.addImage("img", { pixels: new Uint8Array(5), height: 2, width: 2, channels: 1 }, 1)).toThrow(
      'image "img": expected 2x2x1 = 4 bytes of pixels, got 5',
    );
    expect(() => w.addSessionLog("RESUME" as "START", 1)).toThrow(/SessionLog status must be START, STOP or CHECKPOINT/);
    await w.close();
    expect(readEvents(w.path)).toHaveLength(1);
  });

  it("an event that fails half-way through encoding leaves no trace in the file", async () => {
    const w = new SummaryWriter(dir, { clock: new VirtualClock({ startMs: START_MS }) });
    const bad = { value: [{ tag: "t", tensor: { dtype: DataType.DT_INT64, int64Val: [1, 0.5] } }] };
    expect(() => w.addSummary(bad, 3)).toThrow(/TensorProto.int64_val must be an integer/);
    expect(() => w.addEvent({ wallTime: Number.NaN, step: 1 })).toThrow(/wall_time must be a finite number/);
    w.addScalar("ok", 1, 4);
    await w.close();
    const events = readEvents(w.path);
    expect(events).toHaveLength(2);
    expect(events[1]).toMatchObject({ step: "4", summary: { value: [{ tag: "ok" }] } });
  });

  it("rejects invalid options, listing every problem with its path, before creating any file", () => {
    expect(() => new SummaryWriter(dir, { maxQueue: 0, flushSecs: -1 })).toThrow(
      'invalid summary writer options: maxQueue: expected a positive integer, got 0; flushSecs: expected a positive number, got -1',
    );
    expect(() => new SummaryWriter(dir, { purgeStep: Number.NaN })).toThrow(/purgeStep: step must be an integer/);
    expect(() => new SummaryWriter("")).toThrow(/logdir must be a non-empty string/);
    expect(() => new SummaryWriter(dir, { filenameSuffix: "/../x" })).toThrow(/filenameSuffix must not contain a path separator/);
    expect(eventFiles(dir)).toHaveLength(0);
  });

  it("throws the file system's error when the log directory cannot be created", () => {
    const file = join(dir, "not-a-dir");
    writeFileSync(file, "x");
    expect(() => new SummaryWriter(join(file, "run"))).toThrow(/ENOTDIR|EEXIST/);
  });
});

describe("SummaryWriter: after a restore (SessionLog START purge)", () => {
  /**
   * TensorBoard's legacy accumulator, reduced to what the purge needs: events in file order; a
   * SessionLog START at step k drops every value seen so far at steps >= k.
   */
  const scalarSeries = (files: readonly string[], tag: string): [number, number][] => {
    let series: [number, number][] = [];
    for (const f of files) {
      for (const e of readEvents(f)) {
        const step = Number(e.step ?? "0");
        if (e.sessionLog?.status === "START") series = series.filter(([s]) => s < step);
        for (const v of e.summary?.value ?? []) {
          if (v.tag === tag) series.push([step, float32At(v.tensor?.tensorContent)]);
        }
      }
    }
    return series;
  };

  it("a restart from step k writes START at k, so TensorBoard shows the new run's values from k on", async () => {
    const clock = new VirtualClock({ startMs: START_MS });
    const run1 = new SummaryWriter(dir, { clock });
    run1.addSessionLog("START", 0);
    for (let step = 0; step < 10; step++) run1.addScalar("loss", 1, step);
    await run1.close(); // the run "crashes" after step 9; its last checkpoint was at step 5

    clock.set(START_MS + 60_000);
    const run2 = new SummaryWriter(dir, { clock, purgeStep: 5 });
    const durable = await firstValueFrom(run2.flushed$);
    expect(durable.records).toBeGreaterThanOrEqual(1);
    const early = readEvents(run2.path);
    expect(early.map((e) => e.fileVersion ?? e.sessionLog?.status)).toEqual(["brain.Event:2", "START"]);
    expect(early[1]?.step).toBe("5");
    for (let step = 5; step < 10; step++) run2.addScalar("loss", 2, step);
    await run2.close();

    expect(scalarSeries(eventFiles(dir), "loss")).toEqual([
      [0, 1], [1, 1], [2, 1], [3, 1], [4, 1],
      [5, 2], [6, 2], [7, 2], [8, 2], [9, 2],
    ]);
  });

  it("markRestart(k) writes START at k and makes it durable without a flush() call", async () => {
    const w = new SummaryWriter(dir, { clock: new VirtualClock({ startMs: START_MS }), maxQueue: 1000 });
    await firstValueFrom(w.flushed$);
    const durable = firstValueFrom(w.flushed$);
    w.markRestart(42n);
    expect((await durable).records).toBe(1);
    const events = readEvents(w.path);
    expect(events[1]).toMatchObject({ step: "42", sessionLog: { status: "START" } });
    await w.close();
  });
});
