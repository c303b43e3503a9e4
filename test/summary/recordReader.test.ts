import { describe, expect, it } from "vitest";
import { DataLossError } from "../../src/errors.js";
import { iterateRecords, readRecords } from "../../src/summary/recordReader.js";
import { RecordBuffer } from "../../src/summary/recordWriter.js";

const payloads = [Uint8Array.of(1), new Uint8Array(0), Uint8Array.from({ length: 40 }, (_, i) => i), Uint8Array.of(9, 9)];

const fileOf = (ps: readonly Uint8Array[]): Uint8Array => {
  const buf = new RecordBuffer();
  for (const p of ps) buf.append(p);
  return Uint8Array.from(buf.take());
};

describe("readRecords", () => {
  it("reads back every record with its offset", () => {
    const bytes = fileOf(payloads);
    const r = readRecords(bytes);
    expect(r.records.map((x) => [...x.payload])).toEqual(payloads.map((p) => [...p]));
    expect(r.records.map((x) => x.offset)).toEqual([0, 17, 33, 89]);
    expect(r.endOffset).toBe(bytes.length);
    expect(r.truncatedBytes).toBe(0);
  });

  it("cut at every byte offset of the last record: returns every complete record before it and no error", () => {
    const bytes = fileOf(payloads);
    const lastStart = 89;
    for (let cut = lastStart; cut < bytes.length; cut++) {
      const r = readRecords(bytes.subarray(0, cut));
      expect(r.records.length, `cut at ${cut}`).toBe(payloads.length - 1);
      expect(r.endOffset).toBe(lastStart);
      expect(r.truncatedBytes).toBe(cut - lastStart);
    }
  });

  it("cut at every byte offset of the whole file: never throws, never returns a partial record", () => {
    const bytes = fileOf(payloads);
    const ends = [17, 33, 89, bytes.length];
    for (let cut = 0; cut <= bytes.length; cut++) {
      const r = readRecords(bytes.subarray(0, cut));
      expect(r.records.length).toBe(ends.filter((e) => e <= cut).length);
    }
  });

  it("resumes from endOffset once a truncated record is completed", () => {
    const bytes = fileOf(payloads);
    const first = readRecords(bytes.subarray(0, 95));
    expect(first.records.length).toBe(3);
    const rest = readRecords(bytes, { startOffset: first.endOffset });
    expect(rest.records.map((x) => [...x.payload])).toEqual([[9, 9]]);
  });

  it("reports a bad length CRC as DataLossError naming the offset", () => {
    const bytes = fileOf(payloads);
    bytes[33 + 8] = (bytes[33 + 8] as number) ^ 0xff;
    expect(() => readRecords(bytes)).toThrow(DataLossError);
    expect(() => readRecords(bytes)).toThrow(/corrupted record at offset 33: length CRC mismatch/);
  });

  it("reports a bad data CRC as DataLossError naming the offset, after yielding the records before it", () => {
    const bytes = fileOf(payloads);
    bytes[33 + 12 + 5] = (bytes[33 + 12 + 5] as number) ^ 0x01; // flip one payload bit of record 3
    const seen: number[] = [];
    expect(() => {
      for (const r of iterateRecords(bytes)) seen.push(r.offset);
    }).toThrow(/corrupted record at offset 33: data CRC mismatch/);
    expect(seen).toEqual([0, 17]);
    // With data CRC checks off (rustboard's default), the record is returned as is.
    expect(readRecords(bytes, { checkDataCrc: false }).records.length).toBe(4);
  });

  it("rejects a startOffset outside the data", () => {
    expect(() => readRecords(new Uint8Array(4), { startOffset: 5 })).toThrow(/startOffset 5 is outside the data/);
  });
});
