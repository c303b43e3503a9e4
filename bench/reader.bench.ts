/**
 * Event-file reader throughput and the scalar store's memory.
 *
 * - `readerMBps`: `readEvents(file)` over a ~100 MB file of scalar events written by our
 *   `SummaryWriter`, every event taken from the async iterator (read, framed, CRC-checked,
 *   decoded into typed events).
 * - baseline `framingMBps`: the framing + CRC pass alone over the same file, through the same
 *   chunked reads (`EventFileTail` with a callback that only counts), in the same run;
 *   `ratioToFraming` = reader MB/s / framing MB/s (goal >= 0.5).
 * - `readerBatchesMBps`: the same through `readEventBatches` (one await per batch, not per event).
 * - `readerIntoMBps`: the same through `readEventsInto`, every event pushed into a sink in order,
 *   scalars as arguments with no event object (the fastest way to read; what the board uses).
 * - `readerIntoStoreMBps`: `readEventsInto` feeding `LogdirScalars.add` (what the board does);
 *   `readerEventsIntoStoreMBps`: `readEvents` feeding `LogdirScalars.ingest`, for comparison.
 * - Equal work: both passes must count the same records (one event per record), else it throws.
 * - Store memory: 1M points in one `ScalarSeries` through `LogdirScalars`: bytes per point of
 *   the columns, and the heap + ArrayBuffer growth measured around it after a GC; the same 1M
 *   points as `{ step, wallTime, value }` objects, for comparison.
 *
 * Medians over rounds after a warm-up, interleaved, because the machine is shared and noisy.
 */
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { EventFileTail } from "../src/summary/EventFileTail.js";
import { LogdirScalars } from "../src/summary/LogdirScalars.js";
import { readEventBatches, readEvents, readEventsInto } from "../src/summary/readEvents.js";
import { SummaryWriter } from "../src/summary/SummaryWriter.js";
import { elapsedMs, median, round } from "./stats.js";

const TARGET_BYTES = Number(process.env.BENCH_READER_MB ?? 100) * 1e6;
const ROUNDS = Number(process.env.BENCH_READER_ROUNDS ?? 5);
const STORE_POINTS = 1_000_000;
const TAGS = ["loss", "accuracy", "learning_rate", "global_step/sec"];

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

const writeFile = async (dir: string): Promise<{ path: string; events: number }> => {
  const w = new SummaryWriter(dir, { maxQueue: 1000 });
  let events = 1; // the file_version record
  let step = 0;
  while (statSync(w.path).size < TARGET_BYTES) {
    for (let i = 0; i < 100_000; i++, step++) {
      w.addScalar(TAGS[step % TAGS.length] as string, Math.sin(step / 1000), step);
      events++;
    }
    await w.flush();
  }
  await w.close();
  return { path: w.path, events };
};

const timeFraming = async (path: string): Promise<{ ms: number; records: number }> => {
  const start = process.hrtime.bigint();
  let records = 0;
  await new EventFileTail(path).read(() => {
    records++;
  });
  return { ms: elapsedMs(start), records };
};

const timeReader = async (path: string): Promise<{ ms: number; events: number }> => {
  const start = process.hrtime.bigint();
  let events = 0;
  let sum = 0;
  for await (const e of readEvents(path)) {
    events++;
    if (e.kind === "scalar") sum += e.value;
  }
  if (Number.isNaN(sum)) throw new Error("unexpected NaN"); // keeps the loop's work observable
  return { ms: elapsedMs(start), events };
};

const timeBatches = async (path: string): Promise<{ ms: number; events: number }> => {
  const start = process.hrtime.bigint();
  let events = 0;
  let sum = 0;
  for await (const batch of readEventBatches(path)) {
    for (const e of batch) {
      events++;
      if (e.kind === "scalar") sum += e.value;
    }
  }
  if (Number.isNaN(sum)) throw new Error("unexpected NaN");
  return { ms: elapsedMs(start), events };
};

const timeInto = async (path: string): Promise<{ ms: number; events: number }> => {
  const start = process.hrtime.bigint();
  let events = 0;
  let sum = 0;
  await readEventsInto(path, {
    event: () => {
      events++;
    },
    scalar: (_run, _tag, _step, _wallTime, value) => {
      events++;
      sum += value;
    },
  });
  if (Number.isNaN(sum)) throw new Error("unexpected NaN");
  return { ms: elapsedMs(start), events };
};

const timeIntoStore = async (path: string): Promise<{ ms: number; points: number }> => {
  const start = process.hrtime.bigint();
  const store = new LogdirScalars();
  await readEventsInto(path, { event: (e) => store.ingest(e), scalar: (run, tag, step, wallTime, value) => store.add(run, tag, step, wallTime, value) });
  return { ms: elapsedMs(start), points: store.points };
};

const timeEventsIntoStore = async (path: string): Promise<{ ms: number; points: number }> => {
  const start = process.hrtime.bigint();
  const store = new LogdirScalars();
  for await (const e of readEvents(path)) store.ingest(e);
  return { ms: elapsedMs(start), points: store.points };
};

const memory = (): { heap: number; arrayBuffers: number } => {
  gc();
  gc();
  const m = process.memoryUsage();
  return { heap: m.heapUsed, arrayBuffers: m.arrayBuffers };
};

const storeMemory = (): Record<string, number> => {
  const before = memory();
  const store = new LogdirScalars();
  for (let i = 0; i < STORE_POINTS; i++) {
    store.ingest({ kind: "scalar", run: "run", wallTime: 1_700_000_000 + i / 10, step: i, tag: "loss", value: Math.fround(Math.sin(i)) });
  }
  const after = memory();
  const series = store.series("run", "loss");
  const objectsBefore = memory();
  const objects: { step: number; wallTime: number; value: number }[] = [];
  for (let i = 0; i < STORE_POINTS; i++) objects.push({ step: i, wallTime: 1_700_000_000 + i / 10, value: Math.sin(i) });
  const objectsAfter = memory();
  if (objects.length !== series?.length) throw new Error("unequal point counts");
  const storeBytes = after.heap - before.heap + (after.arrayBuffers - before.arrayBuffers);
  return {
    points: STORE_POINTS,
    bytesPerPoint: series.bytesPerPoint,
    columnsBytes: store.byteLength,
    measuredBytes: storeBytes,
    measuredBytesPerPoint: round(storeBytes / STORE_POINTS, 2),
    objectsMeasuredBytesPerPoint: round((objectsAfter.heap - objectsBefore.heap) / STORE_POINTS, 2),
  };
};

export default async (): Promise<Record<string, unknown>> => {
  const root = mkdtempSync(join(tmpdir(), "reader-bench-"));
  try {
    const { path, events } = await writeFile(join(root, "run"));
    const bytes = statSync(path).size;
    const framingMs: number[] = [];
    const readerMs: number[] = [];
    const storeMs: number[] = [];
    const eventsStoreMs: number[] = [];
    const batchesMs: number[] = [];
    const intoMs: number[] = [];
    for (let round_ = 0; round_ <= ROUNDS; round_++) {
      const f = await timeFraming(path);
      const r = await timeReader(path);
      const s = await timeIntoStore(path);
      const b = await timeBatches(path);
      const i = await timeInto(path);
      const es = await timeEventsIntoStore(path);
      if (f.records !== events || r.events !== events || s.points !== events - 1 || es.points !== events - 1 || b.events !== events || i.events !== events) {
        throw new Error(`unequal work: ${events} written, ${f.records} framed, ${r.events} read, ${b.events} read in batches, ${i.events} pushed, ${s.points} and ${es.points} stored`);
      }
      if (round_ === 0) continue; // warm-up (JIT, page cache)
      framingMs.push(f.ms);
      readerMs.push(r.ms);
      storeMs.push(s.ms);
      eventsStoreMs.push(es.ms);
      batchesMs.push(b.ms);
      intoMs.push(i.ms);
    }
    const mbps = (ms: number): number => round(bytes / 1e6 / (ms / 1000), 1);
    const framing = median(framingMs);
    const reader = median(readerMs);
    return {
      fileBytes: bytes,
      events,
      bytesPerEvent: round(bytes / events, 1),
      rounds: ROUNDS,
      readerMBps: mbps(reader),
      readerEventsPerSec: Math.round(events / (reader / 1000)),
      baseline: "framing + CRC pass alone (EventFileTail, counting callback), same file, same run",
      framingMBps: mbps(framing),
      framingRecordsPerSec: Math.round(events / (framing / 1000)),
      ratioToFraming: round(framing / reader, 3),
      ratioToFramingTarget: 0.5,
      readerBatchesMBps: mbps(median(batchesMs)),
      readerBatchesRatioToFraming: round(framing / median(batchesMs), 3),
      readerIntoMBps: mbps(median(intoMs)),
      readerIntoEventsPerSec: Math.round(events / (median(intoMs) / 1000)),
      readerIntoRatioToFraming: round(framing / median(intoMs), 3),
      readerIntoStoreMBps: mbps(median(storeMs)),
      readerIntoStoreEventsPerSec: Math.round(events / (median(storeMs) / 1000)),
      readerIntoStoreRatioToFraming: round(framing / median(storeMs), 3),
      readerEventsIntoStoreMBps: mbps(median(eventsStoreMs)),
      medianMs: {
        framing: round(framing, 1),
        reader: round(reader, 1),
        readerBatches: round(median(batchesMs), 1),
        readerInto: round(median(intoMs), 1),
        readerIntoStore: round(median(storeMs), 1),
        readerEventsIntoStore: round(median(eventsStoreMs), 1),
      },
      store1M: storeMemory(),
      loadAverage1m: round((await import("node:os")).loadavg()[0] ?? 0, 2),
    };
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
};
