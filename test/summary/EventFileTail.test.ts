import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { EventFileTail, type TailIssue } from "../../src/summary/EventFileTail.js";
import { readRecords } from "../../src/summary/recordReader.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { tfFirstRecord } from "../fixtures/summary/tfWritten.js";

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "event-file-tail-"));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** A small real file: file version, scalars, a histogram, text, a session log. */
const smallFile = async (): Promise<Uint8Array> => {
  const w = new SummaryWriter(join(dir, "src"), { clock: new VirtualClock() });
  w.addScalar("loss", 0.5, 1);
  w.addHistogram("h", new Float32Array([1, 2]), 2, { buckets: 2 });
  w.addText("t", "hello", 3);
  w.addSessionLog("STOP", 4);
  await w.close();
  return new Uint8Array(readFileSync(w.path));
};

interface Seen {
  readonly offsets: number[];
  readonly payloads: number[][];
  readonly issues: TailIssue[];
}

const readAll = async (tail: EventFileTail, seen: Seen = { offsets: [], payloads: [], issues: [] }, limitBytes?: number): Promise<Seen> => {
  const r = await tail.read((p, offset) => {
    seen.offsets.push(offset);
    seen.payloads.push([...p]);
  }, limitBytes);
  seen.issues.push(...r.issues);
  return seen;
};

describe("EventFileTail", () => {
  it("truncated at every byte offset: yields exactly the complete records, then the rest once the bytes are appended", async () => {
    const bytes = await smallFile();
    const all = readRecords(bytes).records;
    const ends = all.map((r) => r.offset + 12 + r.payload.length + 4);
    const path = join(dir, "events.out.tfevents.1.cut");
    for (let cut = 0; cut <= bytes.length; cut++) {
      writeFileSync(path, bytes.subarray(0, cut));
      const tail = new EventFileTail(path, { chunkBytes: 16 }); // small chunks: records span reads
      const first = await readAll(tail);
      const complete = ends.filter((e) => e <= cut).length;
      expect(first.offsets, `cut at ${cut}`).toEqual(all.slice(0, complete).map((r) => r.offset));
      expect(tail.offset + tail.pendingBytes).toBe(cut);
      appendFileSync(path, bytes.subarray(cut));
      const second = await readAll(tail, first);
      expect(second.payloads, `cut at ${cut}`).toEqual(all.map((r) => [...r.payload]));
      expect(second.issues).toEqual([]);
      expect(tail.offset).toBe(bytes.length);
    }
  });

  it("a bad data CRC is reported with the record's offset and only that record is skipped", async () => {
    const bytes = await smallFile();
    const all = readRecords(bytes).records;
    const bad = all[2];
    if (bad === undefined) throw new Error("too few records");
    bytes[bad.offset + 12 + 1] = (bytes[bad.offset + 12 + 1] as number) ^ 0x40;
    const path = join(dir, "events.out.tfevents.1.bad");
    writeFileSync(path, bytes);
    const seen = await readAll(new EventFileTail(path));
    expect(seen.offsets).toEqual(all.filter((r) => r !== bad).map((r) => r.offset));
    expect(seen.issues).toEqual([{ problem: "corruptRecord", offset: bad.offset, message: expect.stringMatching(/data CRC mismatch .*; record skipped/) }]);
  });

  it("a bad length CRC is reported, and reading resumes at the next valid record header", async () => {
    const bytes = await smallFile();
    const all = readRecords(bytes).records;
    const bad = all[1];
    if (bad === undefined) throw new Error("too few records");
    bytes[bad.offset + 9] = (bytes[bad.offset + 9] as number) ^ 0xff; // the stored length CRC
    const path = join(dir, "events.out.tfevents.1.badlen");
    // Written in two parts, cut inside the bad record: the scan for the next header spans reads.
    writeFileSync(path, bytes.subarray(0, bad.offset + 5));
    const tail = new EventFileTail(path, { chunkBytes: 16 });
    const seen = await readAll(tail);
    appendFileSync(path, bytes.subarray(bad.offset + 5));
    await readAll(tail, seen);
    await readAll(tail, seen);
    expect(seen.offsets).toEqual(all.filter((r) => r !== bad).map((r) => r.offset));
    expect(seen.issues.map((i) => [i.problem, i.offset])).toEqual([["corruptRecord", bad.offset]]);
  });

  it("a file named like an event file that is not one: reported once, then never read again", async () => {
    const path = join(dir, "events.out.tfevents.notes.txt");
    writeFileSync(path, "these are my notes, not records\n");
    const tail = new EventFileTail(path);
    const seen = await readAll(tail);
    expect(seen.issues).toEqual([{ problem: "notEventFile", offset: 0, message: expect.stringMatching(/is not an event file/) }]);
    expect(tail.dead).toBe(true);
    appendFileSync(path, tfFirstRecord);
    await readAll(tail, seen);
    expect(seen.offsets).toEqual([]);
    expect(seen.issues).toHaveLength(1);
  });

  it("a growing file: each read hands over only what was appended since", async () => {
    const path = join(dir, "events.out.tfevents.grow");
    writeFileSync(path, tfFirstRecord);
    const tail = new EventFileTail(path);
    expect((await readAll(tail)).offsets).toEqual([0]);
    expect((await readAll(tail)).offsets).toEqual([]);
    appendFileSync(path, tfFirstRecord);
    appendFileSync(path, tfFirstRecord.subarray(0, 10));
    expect((await readAll(tail)).offsets).toEqual([tfFirstRecord.length]);
    appendFileSync(path, tfFirstRecord.subarray(10));
    expect((await readAll(tail)).offsets).toEqual([2 * tfFirstRecord.length]);
  });

  it("limitBytes stops a read early; the next read goes on from there", async () => {
    const path = join(dir, "events.out.tfevents.limit");
    writeFileSync(path, Buffer.concat([tfFirstRecord, tfFirstRecord, tfFirstRecord]));
    const tail = new EventFileTail(path, { chunkBytes: 40 });
    const seen = await readAll(tail, undefined, 1);
    expect(seen.offsets).toEqual([0]);
    await readAll(tail, seen);
    expect(seen.offsets).toEqual([0, 40, 80]);
  });

  it("a deleted file rejects with ENOENT and keeps its position", async () => {
    const path = join(dir, "events.out.tfevents.gone");
    writeFileSync(path, tfFirstRecord);
    const tail = new EventFileTail(path);
    await readAll(tail);
    rmSync(path);
    await expect(readAll(tail)).rejects.toMatchObject({ code: "ENOENT" });
    expect(tail.offset).toBe(tfFirstRecord.length);
  });
});
