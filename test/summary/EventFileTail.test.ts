import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/errors.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { EventFileTail, type TailIssue } from "../../src/summary/EventFileTail.js";
import { DEFAULT_MAX_RECORD_BYTES, readRecords } from "../../src/summary/recordReader.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { tfFirstRecord } from "../fixtures/summary/tfWritten.js";
import { recordHeader } from "../util/hostileRecords.js";

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

/** `bytes` with the length of the record at `offset` rewritten to `n`, its length CRC made valid again. */
const withLength = (bytes: Uint8Array, offset: number, n: number): Uint8Array => {
  const out = Uint8Array.from(bytes);
  out.set(recordHeader(n), offset);
  return out;
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

  describe("a length no file may claim (issue 33: hostile files)", () => {
    // 2^32 - 1 and above: past what one read can take (Node aborts on a length >= 2^31); 2^62: past any typed array.
    it.each([3_500_000_000n, 2n ** 32n - 1n, 2n ** 62n, BigInt(DEFAULT_MAX_RECORD_BYTES + 1)])(
      "a header claiming %s bytes with a valid length CRC is reported once, at its offset; the records after it are read, now and as the file grows",
      async (claimed) => {
        const path = join(dir, "events.out.tfevents.1.hostile");
        const garbage = new Uint8Array(30).fill(0xa5);
        writeFileSync(path, Buffer.concat([tfFirstRecord, recordHeader(claimed), garbage, tfFirstRecord]));
        const tail = new EventFileTail(path);
        const seen = await readAll(tail);
        const after = tfFirstRecord.length + 12 + garbage.length;
        expect(seen.offsets).toEqual([0, after]);
        expect(seen.issues).toEqual([
          { problem: "corruptRecord", offset: tfFirstRecord.length, message: `${path}: corrupted record at offset ${tfFirstRecord.length}: its header claims ${claimed} bytes, more than the limit of ${DEFAULT_MAX_RECORD_BYTES} (maxRecordBytes); record skipped` },
        ]);
        // The next polls neither report it again nor hold anything of its size.
        await readAll(tail, seen);
        expect(seen.issues).toHaveLength(1);
        expect(tail.pendingBytes).toBe(0);
        appendFileSync(path, tfFirstRecord);
        await readAll(tail, seen);
        expect(seen.offsets).toEqual([0, after, after + tfFirstRecord.length]);
        expect(seen.issues).toHaveLength(1);
      },
    );

    it("the hostile header last in a growing file: reported once, and the record appended after it is found", async () => {
      const path = join(dir, "events.out.tfevents.1.last");
      writeFileSync(path, Buffer.concat([tfFirstRecord, recordHeader(3.5e9)]));
      const tail = new EventFileTail(path, { chunkBytes: 16 });
      const seen = await readAll(tail);
      await readAll(tail, seen);
      expect(seen.issues.map((i) => i.offset)).toEqual([tfFirstRecord.length]);
      expect(tail.pendingBytes).toBeLessThan(12);
      appendFileSync(path, tfFirstRecord);
      await readAll(tail, seen);
      expect(seen.offsets).toEqual([0, tfFirstRecord.length + 12]);
      expect(seen.issues).toHaveLength(1);
    });

    it("a growing file: a length under the limit but past the end waits for its bytes, holding only those written; maxRecordBytes lower makes it corrupt", async () => {
      const path = join(dir, "events.out.tfevents.1.big");
      writeFileSync(path, Buffer.concat([tfFirstRecord, recordHeader(100 << 20), new Uint8Array(20)]));
      const tail = new EventFileTail(path);
      const seen = await readAll(tail);
      await readAll(tail, seen);
      expect(seen.offsets).toEqual([0]);
      expect(seen.issues).toEqual([]);
      expect(tail.offset).toBe(tfFirstRecord.length);
      expect(tail.pendingBytes).toBe(32); // what the file holds of it, not the 100 MiB it claims
      const limited = await readAll(new EventFileTail(path, { maxRecordBytes: 1 << 20 }));
      expect(limited.issues.map((i) => [i.problem, i.offset])).toEqual([["corruptRecord", tfFirstRecord.length]]);
      expect(limited.issues[0]?.message).toMatch(/claims 104857600 bytes, more than the limit of 1048576 \(maxRecordBytes\)/);
    });

    it("a complete file (growing: false): a record that runs past its end is reported once, naming the bytes left", async () => {
      const bytes = await smallFile();
      const all = readRecords(bytes).records;
      const last = all.at(-1);
      if (last === undefined) throw new Error("no records");
      const path = join(dir, "events.out.tfevents.1.complete");
      writeFileSync(path, bytes.subarray(0, bytes.length - 3));
      const tail = new EventFileTail(path, { growing: false, chunkBytes: 16 });
      const seen = await readAll(tail);
      await readAll(tail, seen);
      expect(seen.offsets).toEqual(all.slice(0, -1).map((r) => r.offset));
      expect(seen.issues).toEqual([
        {
          problem: "corruptRecord",
          offset: last.offset,
          message: `${path}: corrupted record at offset ${last.offset}: its header claims ${last.payload.length} bytes, but the file ends ${bytes.length - 3 - last.offset} bytes after its start (truncated, or a damaged length); record skipped`,
        },
      ]);
    });

    it.each([true, false])("growing: %s: a length rewritten a little too long is reported once, and the next record is found where it is", async (growing) => {
      const bytes = await smallFile();
      const all = readRecords(bytes).records;
      const bad = all[1];
      if (bad === undefined) throw new Error("too few records");
      const path = join(dir, "events.out.tfevents.1.longer");
      writeFileSync(path, withLength(bytes, bad.offset, bad.payload.length + 5));
      const seen = await readAll(new EventFileTail(path, { growing }));
      expect(seen.offsets).toEqual(all.filter((r) => r !== bad).map((r) => r.offset));
      expect(seen.issues.map((i) => [i.problem, i.offset])).toEqual([["corruptRecord", bad.offset]]);
      expect(seen.issues[0]?.message).toMatch(/data CRC mismatch/);
    });

    it.each([0, -1, 1.5, 2 ** 30 + 1, Number.NaN])("maxRecordBytes %d is refused (an integer from 1 to 1 GiB)", (maxRecordBytes) => {
      expect(() => new EventFileTail(join(dir, "x"), { maxRecordBytes })).toThrow(InvalidArgumentError);
    });
  });
});
