/**
 * Hostile event files (issue 33): 10,000 files mutated from real event files — written first by
 * the project's own `SummaryWriter` (on `EventFileWriter`): scalars, histograms, images, text, a
 * session log — go through each event-file reader: `EventFileTail` (growing and complete),
 * `readEvents`, and the board's `BoardStore` (on `readEventsInto`). The mutations: truncation at
 * every byte offset of one small file, bit flips, length fields rewritten (huge, 2^32 - 1, 2^62,
 * a little too long or too short, with a valid length CRC or not), random garbage (overwritten,
 * inserted, appended, or a whole file), splices of two files, and records whose framing holds but
 * whose payload is hostile (deeply nested or unterminated protobuf, lengths that overrun, huge
 * tensor shapes in a summary).
 *
 * For every file: nothing throws out of a reader (problems are reported as issues, of the kinds
 * documented), a second read of an unchanged file reports nothing again and hands over nothing
 * (no loop on an error), every problem is reported once, and every intact record before the
 * first damaged byte is kept, as the same events (compared with the original file's). No timing
 * is asserted: every reader's loop is bounded, and a hang would fail on the test's timeout.
 *
 * The files are kept in memory, 100 at a time as the runs of one logdir (as a hostile file sits
 * among good runs): the readers' `open`, `stat`, `readdir` and `realpath` (node:fs/promises)
 * serve them as Node does, with the checks Node's native read makes (a length past int32 aborts
 * the process, past any catch: here it fails the test), and record the largest buffer a read was
 * given, which must stay within the file's size (nothing allocated for what a header only
 * claims). One file in 100 is also written to a real temporary file and read there.
 *
 * Seeded: a failure names its seed; `TEST_SEED=<seed> npx vitest run <this file>` replays it.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";

import { BoardStore } from "../../src/board/BoardStore.js";
import { EventDecoder, type SummaryEvent } from "../../src/summary/EventDecoder.js";
import { EventFileTail, type TailIssue } from "../../src/summary/EventFileTail.js";
import { DataType, encodeEvent, type EventProto } from "../../src/summary/EventProto.js";
import { type ReadEvent, readEvents } from "../../src/summary/readEvents.js";
import { readRecords } from "../../src/summary/recordReader.js";
import { frameRecord } from "../../src/summary/recordWriter.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { recordHeader } from "../util/hostileRecords.js";
import { seededRandom } from "../util/seed.js";

const FILES = 10_000;
/** Bytes per read of a tail, drawn per file: small chunks make records span reads (and cost more reads). */
const CHUNK_SIZES = [16, 100, 100, 4096, 4096, 4096, 1 << 20, 1 << 20, 1 << 20, 1 << 20];
/** Bytes per read of `readEvents` over a logdir of 100 files, drawn per logdir (one read per chunk and file). */
const LOGDIR_CHUNK_SIZES = [100, 4096, 4096, 1 << 20, 1 << 20, 1 << 20, 1 << 20, 1 << 20, 1 << 20, 1 << 20];
/** One file in this many is also read by a tail of its own as a complete file (`growing: false`). */
const COMPLETE_TAIL_EVERY = 4;
/** One file in this many is also read from a real file. */
const REAL_FILE_EVERY = 100;

// ---------------------------------------------------------------------------------------------
// files in memory
// ---------------------------------------------------------------------------------------------

/** The in-memory files by path, and what the readers' reads were given. */
const memory = vi.hoisted(() => ({
  files: new Map<string, Uint8Array>(),
  /** The directories the files' paths make: each one's entries (name → is a directory). */
  dirs: new Map<string, Map<string, boolean>>(),
  /** Puts `bytes` at `path` (its directories appear). */
  set(path: string, bytes: Uint8Array): void {
    this.files.set(path, bytes);
    for (let child = path, at = path.lastIndexOf("/"); at > 0; child = child.slice(0, at), at = child.lastIndexOf("/")) {
      const dir = child.slice(0, at);
      let names = this.dirs.get(dir);
      if (names === undefined) this.dirs.set(dir, (names = new Map()));
      names.set(child.slice(at + 1), child !== path);
    }
  },
  /** The largest buffer a read of an in-memory file was given, in bytes. */
  largestReadBuffer: 0,
  /** Reads that Node would have refused, or aborted the process on. */
  refused: [] as string[],
}));

vi.mock("node:fs/promises", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:fs/promises")>();
  const statOf = (bytes: Uint8Array | undefined) => ({ size: bytes?.length ?? 0, isFile: () => bytes !== undefined, isDirectory: () => bytes === undefined });
  /** The entries of `dir` made by the in-memory files' paths (name → is a directory), or `undefined` if none is under it. */
  const entries = (dir: string): Map<string, boolean> | undefined => memory.dirs.get(dir.replace(/\/+$/, ""));
  /** What Node's `FileHandle.read(buffer, offset, length, position)` accepts; the binding aborts on a length past int32. */
  const read = async (bytes: Uint8Array, buffer: Uint8Array, offset: number, length: number, position: number) => {
    const problem =
      !Number.isInteger(offset) || offset < 0 || offset > buffer.byteLength
        ? `offset ${offset} outside the buffer (${buffer.byteLength} bytes)`
        : !Number.isInteger(length) || length < 0 || offset + length > buffer.byteLength
          ? `length ${length} past the buffer (${buffer.byteLength} bytes, from ${offset})`
          : length > 2 ** 31 - 1
            ? `length ${length} is not an int32: Node aborts the process (Assertion failed: args[3]->IsInt32())`
            : !Number.isSafeInteger(position) || position < 0
              ? `position ${position} is not a file offset`
              : undefined;
    if (problem !== undefined) {
      memory.refused.push(problem);
      throw new RangeError(problem);
    }
    memory.largestReadBuffer = Math.max(memory.largestReadBuffer, buffer.byteLength);
    const chunk = bytes.subarray(position, position + length);
    buffer.set(chunk, offset);
    return { bytesRead: chunk.length, buffer };
  };
  const open = (async (path: Parameters<typeof actual.open>[0], ...rest: unknown[]) => {
    const bytes = memory.files.get(String(path));
    if (bytes === undefined) return (actual.open as (...args: unknown[]) => Promise<unknown>)(path, ...rest);
    return {
      read: (buffer: Uint8Array, offset: number, length: number, position: number) => read(bytes, buffer, offset, length, position),
      stat: async () => statOf(bytes),
      close: async () => undefined,
    };
  }) as typeof actual.open;
  const stat = (async (path: Parameters<typeof actual.stat>[0], ...rest: unknown[]) => {
    const bytes = memory.files.get(String(path));
    if (bytes === undefined && entries(String(path)) === undefined) return (actual.stat as (...args: unknown[]) => Promise<unknown>)(path, ...rest);
    return statOf(bytes);
  }) as typeof actual.stat;
  // A logdir of in-memory runs is walked as `findRuns` walks a real one.
  const readdir = (async (path: Parameters<typeof actual.readdir>[0], ...rest: unknown[]) => {
    const names = entries(String(path));
    if (names === undefined) return (actual.readdir as (...args: unknown[]) => Promise<unknown>)(path, ...rest);
    return [...names].map(([name, isDirectory]) => ({ name, isFile: () => !isDirectory, isDirectory: () => isDirectory, isSymbolicLink: () => false }));
  }) as typeof actual.readdir;
  const realpath = (async (path: Parameters<typeof actual.realpath>[0], ...rest: unknown[]) =>
    entries(String(path)) === undefined ? (actual.realpath as (...args: unknown[]) => Promise<unknown>)(path, ...rest) : String(path)) as typeof actual.realpath;
  const fakes = { open, stat, readdir, realpath };
  return { ...actual, default: { ...actual, ...fakes }, ...fakes };
});

// ---------------------------------------------------------------------------------------------
// the real files the mutations start from
// ---------------------------------------------------------------------------------------------

interface SourceRecord {
  readonly offset: number;
  /** Offset just past the record's footer. */
  readonly end: number;
  readonly payload: Uint8Array;
  /** What `readEvents` makes of it, in the file's order ({@link fingerprint}s). */
  readonly events: readonly string[];
  /** Its scalars, as `tag@step`. */
  readonly scalars: readonly string[];
}

interface Source {
  readonly name: string;
  readonly bytes: Uint8Array;
  readonly records: readonly SourceRecord[];
}

/** An event, in a form cheap to compare (the fields a user reads, typed arrays by content). */
const fingerprint = (e: SummaryEvent): string => {
  switch (e.kind) {
    case "scalar":
      return `scalar ${e.tag}@${e.step} ${e.value}`;
    case "histogram":
      return `histogram ${e.tag}@${e.step} ${e.left.join()}|${e.right.join()}|${e.count.join()}`;
    case "image":
      return `image ${e.tag}@${e.step} ${e.sample} ${e.width}x${e.height} ${Buffer.from(e.encoded).toString("base64")}`;
    case "text":
      return `text ${e.tag}@${e.step} ${JSON.stringify(e.text)} ${e.shape.join()}`;
    case "sessionLog":
      return `sessionLog ${e.status}@${e.step} ${e.msg}`;
    default:
      return `${e.kind}@${e.step}`;
  }
};

const writeSource = async (dir: string, name: string, fill: (w: SummaryWriter) => void): Promise<Source> => {
  const w = new SummaryWriter(join(dir, name), { clock: new VirtualClock({ startMs: 1_700_000_000_000 }) });
  fill(w);
  await w.close();
  const bytes = new Uint8Array(readFileSync(w.path));
  const decoder = new EventDecoder(".");
  const records = readRecords(bytes).records.map((r): SourceRecord => {
    const events: SummaryEvent[] = [];
    decoder.decode(r.payload, (e) => events.push(e));
    return {
      offset: r.offset,
      end: r.offset + 12 + r.payload.length + 4,
      payload: r.payload,
      events: events.map(fingerprint),
      scalars: events.flatMap((e) => (e.kind === "scalar" ? [`${e.tag}@${e.step}`] : [])),
    };
  });
  return { name, bytes, records };
};

const pixels = (n: number): Uint8Array => Uint8Array.from({ length: n * n * 3 }, (_, i) => (i * 37) & 0xff);

const writeSources = async (dir: string): Promise<{ small: Source; all: readonly Source[] }> => {
  // Small on purpose: it is truncated at every byte offset.
  const small = await writeSource(dir, "small", (w) => {
    w.addScalar("loss", 0.5, 1);
    w.addHistogram("weights", new Float32Array([1, 2, 2, 3]), 2, { buckets: 2 });
    w.addText("note", "hello", 3);
    w.addImage("digit", { pixels: pixels(2), height: 2, width: 2, channels: 3 }, 4);
    w.addSessionLog("STOP", 5);
  });
  const mixed = await writeSource(dir, "mixed", (w) => {
    for (let step = 1; step <= 5; step++) {
      w.addScalar("loss", 1 / step, step);
      w.addScalars({ accuracy: step / 5, "learning_rate": 0.01 }, step);
      if (step % 2 === 0) w.addHistogram("weights", Float64Array.from({ length: 50 }, (_, i) => Math.sin(i * step)), step);
      if (step % 3 === 0) w.addImage("sample", { pixels: pixels(4), height: 4, width: 4, channels: 3 }, step);
      if (step % 4 === 0) w.addText("notes", ["| a | b |", `step ${step}`], step);
    }
    w.addSessionLog("CHECKPOINT", 5, { checkpointPath: "ckpt/model-5" });
  });
  const scalars = await writeSource(dir, "scalars", (w) => {
    for (let step = 0; step < 20; step++) w.addScalar(step % 2 === 0 ? "loss" : "global_step/sec", step * 1.5, step);
  });
  return { small, all: [small, mixed, scalars] };
};

// ---------------------------------------------------------------------------------------------
// mutations
// ---------------------------------------------------------------------------------------------

interface Rng {
  /** In [0, 1). */
  next(): number;
}

const int = (rng: Rng, below: number): number => Math.floor(rng.next() * below);
const pick = <T>(rng: Rng, xs: readonly T[]): T => xs[int(rng, xs.length)] as T;
const randomBytes = (rng: Rng, n: number): Uint8Array => {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = int(rng, 256);
  return out;
};

interface Mutated {
  /** The kind of mutation (the draw must cover each). */
  readonly family: string;
  /** What was done, where: enough to redo it by hand. */
  readonly label: string;
  readonly source: Source;
  readonly bytes: Uint8Array;
}

/** Writes a record header claiming `n` bytes at `at` of `bytes`, its length CRC valid unless `badCrc`. */
const writeLength = (bytes: Uint8Array, at: number, n: bigint, badCrc: boolean): void => {
  const header = recordHeader(n);
  if (badCrc) header.writeUInt32LE((header.readUInt32LE(8) ^ 1) >>> 0, 8);
  bytes.set(header, at);
};

/** A LEN field: its tag byte, its length as a varint, its bytes. */
const len = (tag: number, inner: Uint8Array): Uint8Array => concat(Uint8Array.from([tag, ...varint(inner.length)]), inner);
const varint = (n: number): number[] => {
  const out: number[] = [];
  let v = n;
  while (v >= 0x80) {
    out.push((v & 0x7f) | 0x80);
    v = Math.floor(v / 128);
  }
  out.push(v);
  return out;
};
const concat = (...parts: readonly Uint8Array[]): Uint8Array => Uint8Array.from(Buffer.concat(parts));

const hugeShapeEvent = (rng: Rng): EventProto => {
  const huge = pick(rng, [2n ** 62n, 2n ** 53n + 1n, 2n ** 31n, -1n, 10n ** 15n]);
  const dim = Array.from({ length: 1 + int(rng, 6) }, () => ({ size: huge }));
  const plugin = pick(rng, ["text", "histograms", "images", "scalars", "audio", "custom"]);
  const tensor =
    plugin === "histograms"
      ? { dtype: DataType.DT_DOUBLE, tensorShape: { dim: [{ size: huge }, { size: 3n }] }, doubleVal: [0, 1, 2] }
      : plugin === "scalars"
        ? { dtype: DataType.DT_FLOAT, tensorShape: { dim }, floatVal: [1] }
        : { dtype: DataType.DT_STRING, tensorShape: { dim }, stringVal: plugin === "images" ? ["99999999999", "-1", "not a png"] : ["a", "b"] };
  return { wallTime: 1, step: 7, summary: { value: [{ tag: `huge/${plugin}`, metadata: { pluginData: { pluginName: plugin } }, tensor }] } };
};

const HOSTILE_KINDS = ["nested", "groups", "unterminatedGroups", "overrun", "varint", "hugeShape", "tf1Values", "garbage"] as const;

/** A payload whose framing will hold but whose content is hostile. */
interface HostilePayload {
  readonly kind: (typeof HOSTILE_KINDS)[number];
  readonly payload: Uint8Array;
}

/** One hostile payload, drawn from `rng` (costly to build: a test draws a pool of them once). */
const hostilePayload = (rng: Rng): HostilePayload => {
  const kind = pick(rng, HOSTILE_KINDS);
  switch (kind) {
    case "nested": {
      // Messages in messages, thousands deep, through the fields the decoder descends into.
      // Built from the inside out, each level's header written in front of the levels inside it.
      const depth = 500 + int(rng, 3000);
      const headers: number[][] = [];
      let size = 0;
      for (let i = 0; i < depth; i++) {
        const header = [pick(rng, [0x0a, 0x2a, 0x42, 0x12, 0x4a, 0x3a]), ...varint(size)];
        headers.push(header);
        size += header.length;
      }
      return { kind, payload: len(0x2a, Uint8Array.from(headers.reverse().flat())) };
    }
    case "groups":
    case "unterminatedGroups": {
      const depth = 1000 + int(rng, 50_000);
      const open = new Uint8Array(depth).fill(0x0b); // field 1, start group
      const close = kind === "groups" ? new Uint8Array(depth).fill(0x0c) : new Uint8Array(0);
      return { kind, payload: concat(Uint8Array.from([0x2a, ...varint(depth * (kind === "groups" ? 2 : 1) + 2), 0x0a, 0x00]), open, close) };
    }
    case "overrun": {
      // A length that claims far more than the payload holds, at the top or inside a value.
      const claim = pick(rng, [2 ** 31, 2 ** 32 - 1, 2 ** 35, 2 ** 53]);
      return { kind, payload: pick(rng, [Uint8Array.from([0x2a, ...varint(claim), 0x0a]), concat(len(0x2a, Uint8Array.from([0x0a, ...varint(claim), 0x42])), randomBytes(rng, 8))]) };
    }
    case "varint":
      return { kind, payload: Uint8Array.from([0x10, ...new Array<number>(11 + int(rng, 20)).fill(0xff)]) };
    case "hugeShape":
      return { kind, payload: encodeEvent(hugeShapeEvent(rng)) };
    case "tf1Values":
      return {
        kind,
        payload: encodeEvent({
          wallTime: 1,
          step: 3,
          summary: {
            value: [
              { tag: "tf1/image", image: { height: 2 ** 31 - 1, width: 2 ** 31 - 1, colorspace: 3, encodedImageString: randomBytes(rng, 16) } },
              { tag: "tf1/histogram", histo: { min: 0, max: 1, num: 1, sum: 1, sumSquares: 1, bucketLimit: [1, 2, 3], bucket: [1, 0, 0, 0, 0, 2] } },
            ],
          },
        }),
      };
    default:
      return { kind, payload: randomBytes(rng, int(rng, 300)) };
  }
};

const LENGTHS: readonly [string, (n: number) => bigint][] = [
  ["3.5e9", () => 3_500_000_000n],
  ["2^32-1", () => 2n ** 32n - 1n],
  ["2^62", () => 2n ** 62n],
  ["2^64-1", () => 2n ** 64n - 1n],
  ["limit+1", () => 256n * 1024n * 1024n + 1n],
  ["just under the limit", () => 256n * 1024n * 1024n],
  ["a little too long", (n) => BigInt(n + 1 + Math.floor(n / 7))],
  ["one too long", (n) => BigInt(n + 1)],
  ["a little too short", (n) => BigInt(Math.max(0, n - 3))],
  ["zero", () => 0n],
];

const GARBAGE_WAYS = ["overwritten", "inserted", "appended", "whole file"] as const;

/** One mutation of one of `sources`, drawn from `rng`; hostile payloads come from `pool`. */
const mutate = (rng: Rng, sources: readonly Source[], pool: readonly HostilePayload[]): Mutated => {
  const source = pick(rng, sources);
  const bytes = Uint8Array.from(source.bytes);
  const record = pick(rng, source.records);
  const family = int(rng, 100);
  if (family < 25) {
    const flips = 1 + int(rng, 4);
    for (let i = 0; i < flips; i++) {
      const at = int(rng, bytes.length);
      bytes[at] = (bytes[at] as number) ^ (1 << int(rng, 8));
    }
    return { family: "bit flips", label: `${flips} bit flip(s)`, source, bytes };
  }
  if (family < 50) {
    const [name, length] = pick(rng, LENGTHS);
    const badCrc = rng.next() < 0.1;
    writeLength(bytes, record.offset, length(record.payload.length), badCrc);
    return { family: `length: ${name}`, label: `length of the record at ${record.offset} rewritten: ${name}${badCrc ? ", length CRC wrong" : ""}`, source, bytes };
  }
  if (family < 65) {
    const { kind, payload } = pick(rng, pool);
    const framed = frameRecord(payload);
    const replace = rng.next() < 0.5;
    const out = concat(bytes.subarray(0, record.offset), framed, bytes.subarray(replace ? record.end : record.offset));
    return { family: `payload: ${kind}`, label: `${kind} payload ${replace ? "replacing" : "inserted before"} the record at ${record.offset}`, source, bytes: out };
  }
  if (family < 90) {
    const way = pick(rng, GARBAGE_WAYS);
    const junk = randomBytes(rng, 1 + int(rng, way === "whole file" ? 2000 : 200));
    const at = int(rng, bytes.length);
    const out =
      way === "overwritten"
        ? (bytes.set(junk.subarray(0, bytes.length - at), at), bytes)
        : way === "inserted"
          ? concat(bytes.subarray(0, at), junk, bytes.subarray(at))
          : way === "appended"
            ? concat(bytes, junk)
            : junk;
    return { family: `garbage: ${way}`, label: `${junk.length} random bytes ${way}${way === "overwritten" || way === "inserted" ? ` at ${at}` : ""}`, source, bytes: out };
  }
  const other = pick(rng, sources);
  const cut = int(rng, bytes.length);
  const from = int(rng, other.bytes.length);
  return { family: "splice", label: `spliced: ${source.name}[0, ${cut}) + ${other.name}[${from}, end)`, source, bytes: concat(bytes.subarray(0, cut), other.bytes.subarray(from)) };
};

/** The first offset where `a` and `b` differ (the shorter's length if one is a prefix of the other). */
const firstDifference = (a: Uint8Array, b: Uint8Array): number => {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? Number.POSITIVE_INFINITY : n;
};

// ---------------------------------------------------------------------------------------------
// the checks
// ---------------------------------------------------------------------------------------------

const ALLOWED_PROBLEMS = new Set(["corruptRecord", "notEventFile", "badEvent"]);

/** A file under test: its bytes, and the records of its source that come before its first damaged byte. */
interface Case {
  readonly m: Mutated;
  readonly intact: readonly SourceRecord[];
}

const caseOf = (m: Mutated): Case => {
  const damage = firstDifference(m.bytes, m.source.bytes);
  return { m, intact: m.source.records.filter((r) => r.end <= damage) };
};

/** Throws `what` unless `ok`. */
const check = (ok: boolean, what: () => string): void => {
  if (!ok) throw new Error(what());
};

const isPrefix = (prefix: readonly string[], of: readonly string[]): boolean => prefix.length <= of.length && prefix.every((x, i) => of[i] === x);

/** Every problem is reported once: no (problem, offset) twice. */
const reportedOnce = (issues: readonly { readonly problem: string; readonly offset: number | undefined }[]): boolean =>
  new Set(issues.map((i) => `${i.problem}@${i.offset}`)).size === issues.length;

/** No read Node would refuse (or abort on), and no read buffer larger than the file read (`bytes`, the largest of them). */
const checkReads = (bytes: number): void => {
  check(memory.refused.length === 0, () => `a read Node refuses: ${memory.refused.join("; ")}`);
  check(memory.largestReadBuffer <= bytes, () => `a read buffer of ${memory.largestReadBuffer} bytes, for a file of ${bytes}`);
  memory.largestReadBuffer = 0;
};

/** A tail, twice over the same bytes: the intact records first, then nothing new at all. */
const checkTail = async (path: string, c: Case, growing: boolean, chunkBytes: number): Promise<void> => {
  const tail = new EventFileTail(path, { growing, chunkBytes });
  const offsets: number[] = [];
  const payloads: Uint8Array[] = [];
  const onRecord = (payload: Uint8Array, offset: number): void => {
    offsets.push(offset);
    payloads.push(payload.slice());
  };
  const first = await tail.read(onRecord);
  const issues: TailIssue[] = [...first.issues];
  for (const [i, r] of c.intact.entries()) {
    check(offsets[i] === r.offset && Buffer.compare(payloads[i] as Uint8Array, r.payload) === 0, () => `tail (growing: ${growing}): intact record ${i} at ${r.offset} not handed over as written (got offsets ${offsets.join()})`);
  }
  const again = await tail.read(onRecord);
  check(again.records === 0 && again.issues.length === 0, () => `tail (growing: ${growing}): a second read of unchanged bytes gave ${again.records} records and issues ${JSON.stringify(again.issues)}`);
  check(reportedOnce(issues), () => `tail (growing: ${growing}): a problem reported twice: ${JSON.stringify(issues)}`);
  check(issues.every((i) => i.message.startsWith(path)), () => `tail: an issue does not name the file: ${JSON.stringify(issues)}`);
  checkReads(c.m.bytes.length);
};

/** `readEvents` over a logdir whose run `runs[i]` holds the file of `cases[i]`: each run's intact events, and documented issues only. */
const checkReadEvents = async (logdir: string, runs: readonly string[], cases: readonly Case[], chunkBytes: number): Promise<void> => {
  const byRun = new Map<string, ReadEvent[]>();
  for await (const e of readEvents(logdir, { chunkBytes })) {
    let events = byRun.get(e.run);
    if (events === undefined) byRun.set(e.run, (events = []));
    events.push(e);
  }
  for (const [i, c] of cases.entries()) {
    const run = runs[i] as string;
    const events = byRun.get(run) ?? [];
    const issues = events.flatMap((e) => (e.kind === "issue" ? [e] : []));
    const got = events.flatMap((e) => (e.kind === "issue" ? [] : [fingerprint(e)]));
    const expected = c.intact.flatMap((r) => r.events);
    check(isPrefix(expected, got), () => `file ${i}: readEvents: the events of the intact records are not kept:\nexpected ${JSON.stringify(expected)}\ngot ${JSON.stringify(got)}`);
    check(issues.every((e) => ALLOWED_PROBLEMS.has(e.problem) && e.message.includes(e.path)), () => `file ${i}: readEvents: an issue that is not a documented report: ${JSON.stringify(issues)}`);
    check(reportedOnce(issues), () => `file ${i}: readEvents: a problem reported twice: ${JSON.stringify(issues)}`);
  }
  checkReads(Math.max(0, ...cases.map((c) => c.m.bytes.length)));
};

/** The board's store over the same logdir: it keeps reading (nothing it ingests throws), and keeps each run's intact scalars. */
const checkBoardStore = async (logdir: string, runs: readonly string[], cases: readonly Case[]): Promise<void> => {
  const store = new BoardStore(logdir, { follow: false, watch: false, clock: new VirtualClock() });
  const issues: string[] = [];
  const sub = store.issues$.subscribe((i) => issues.push(`${i.problem}: ${i.message}`));
  try {
    await store.loaded;
    check(!issues.some((i) => i.startsWith("unreadable")), () => `board store: reading stopped: ${issues.join("\n")}`);
    for (const [i, c] of cases.entries()) {
      const byTag = new Map<string, number[]>();
      for (const s of c.intact.flatMap((r) => r.scalars)) {
        const [tag, step] = s.split("@") as [string, string];
        byTag.set(tag, [...(byTag.get(tag) ?? []), Number(step)]);
      }
      for (const [tag, steps] of byTag) {
        const kept = [...(store.series(runs[i] as string, tag)?.steps ?? [])].slice(0, steps.length);
        check(kept.join() === steps.join(), () => `file ${i}: board store: ${tag}: the intact steps ${steps.join()} are not kept (got ${kept.join()})`);
      }
    }
  } finally {
    sub.unsubscribe();
    await store.close();
  }
  checkReads(Math.max(0, ...cases.map((c) => c.m.bytes.length)));
};

// ---------------------------------------------------------------------------------------------
// the test
// ---------------------------------------------------------------------------------------------

/** Files read together as the runs of one logdir (as a hostile file sits among good runs). */
const BATCH = 100;

let dir: string;
let sources: { small: Source; all: readonly Source[] };
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "event-readers-fuzz-"));
  sources = await writeSources(dir);
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** A logdir of `n` runs, each one event file, all in memory (their bytes set per batch). */
const logdirOfRuns = (root: string, n: number): { readonly runs: readonly string[]; readonly files: readonly string[] } => {
  const runs = Array.from({ length: n }, (_, i) => `r${String(i).padStart(3, "0")}`);
  return { runs, files: runs.map((run) => join(root, run, "events.out.tfevents.1.fuzz")) };
};

describe("event-file readers on hostile files (issue 33)", () => {
  it(`${FILES} mutated event files: no reader throws, loops or re-reports, and every intact record before the damage is kept`, async () => {
    const { seed, next } = seededRandom("eventReaders.fuzz");
    const rng: Rng = { next };
    const small = sources.small;
    const files: Mutated[] = [];
    // Truncation at every byte offset of the small file; then mutations drawn at random.
    for (let cut = 0; cut <= small.bytes.length; cut++) files.push({ family: "truncation", label: `truncated at ${cut}`, source: small, bytes: small.bytes.slice(0, cut) });
    const pool = Array.from({ length: 200 }, () => hostilePayload(rng));
    while (files.length < FILES) files.push(mutate(rng, sources.all, pool));
    const logdir = join(dir, "memory-logdir");
    const { runs, files: paths } = logdirOfRuns(logdir, BATCH);
    const onDisk = join(dir, "real", "events.out.tfevents.1.fuzz");
    mkdirSync(dirname(onDisk));
    const failure = (what: string, e: unknown): never => expect.fail(`TEST_SEED=${seed} ${what}: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
    for (let first = 0; first < files.length; first += BATCH) {
      const cases = files.slice(first, first + BATCH).map(caseOf);
      const named = (i: number): string => `file ${first + i} (${cases[i]?.m.source.name}, ${cases[i]?.m.label})`;
      for (const [i, path] of paths.entries()) memory.set(path, cases[i]?.m.bytes ?? new Uint8Array(0));
      for (const [i, c] of cases.entries()) {
        const chunkBytes = pick(rng, CHUNK_SIZES);
        try {
          await checkTail(paths[i] as string, c, true, chunkBytes);
          // A complete file's tail is what readEvents and the board read every file with, below.
          if ((first + i) % COMPLETE_TAIL_EVERY === 0) await checkTail(paths[i] as string, c, false, chunkBytes);
          if ((first + i) % REAL_FILE_EVERY === 0) {
            // The same on a real file, through Node's own reads.
            writeFileSync(onDisk, c.m.bytes);
            await checkTail(onDisk, c, true, chunkBytes);
            await checkReadEvents(onDisk, ["."], [c], chunkBytes);
            await checkBoardStore(onDisk, ["."], [c]);
          }
        } catch (e) {
          failure(`${named(i)}, chunkBytes ${chunkBytes}`, e);
        }
      }
      const chunkBytes = pick(rng, LOGDIR_CHUNK_SIZES);
      try {
        await checkReadEvents(logdir, runs, cases, chunkBytes);
        await checkBoardStore(logdir, runs, cases);
      } catch (e) {
        const i = Number(/^file (\d+):/.exec(e instanceof Error ? e.message : "")?.[1] ?? Number.NaN);
        failure(Number.isNaN(i) ? `files ${first} to ${first + cases.length - 1} as runs of one logdir, chunkBytes ${chunkBytes}` : `${named(i)} as run ${runs[i]} of a logdir, chunkBytes ${chunkBytes}`, e);
      }
    }
    // The draw covered every family (a mutation that never happens cannot fail the test).
    const drawn = new Set(files.map((m) => m.family));
    const families = ["truncation", "bit flips", "splice", ...LENGTHS.map(([name]) => `length: ${name}`), ...HOSTILE_KINDS.map((k) => `payload: ${k}`), ...GARBAGE_WAYS.map((w) => `garbage: ${w}`)];
    expect(families.filter((f) => !drawn.has(f)), `TEST_SEED=${seed}: families never drawn`).toEqual([]);
  }, 300_000);

  it("a truncated file completed later (growing tail): every record, and no issue", async () => {
    const { small } = sources;
    const path = join(dir, "memory", "events.out.tfevents.2.grow");
    for (let cut = 0; cut <= small.bytes.length; cut++) {
      memory.set(path, small.bytes.subarray(0, cut));
      const tail = new EventFileTail(path, { chunkBytes: 16 });
      const offsets: number[] = [];
      const issues: TailIssue[] = [];
      issues.push(...(await tail.read((_, offset) => offsets.push(offset))).issues);
      memory.set(path, small.bytes);
      issues.push(...(await tail.read((_, offset) => offsets.push(offset))).issues);
      expect(offsets, `cut at ${cut}`).toEqual(small.records.map((r) => r.offset));
      expect(issues, `cut at ${cut}`).toEqual([]);
    }
  });
});
