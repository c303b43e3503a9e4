import { describe, expect, it } from "vitest";
import { encodeEvent } from "../../src/summary/EventProto.js";
import { RecordBuffer, frameRecord, framedLength } from "../../src/summary/recordWriter.js";
import { hex, toHex } from "./decoder.js";

// The first record of a real event file (rustboard tf_record.rs tests; reference A.1).
const FILE_VERSION_RECORD = hex(`
  18 00 00 00 00 00 00 00   a3 7f 4b 22
  09 00 00 80 38 99 d6 d7 41 1a 0d ${Buffer.from("brain.Event:2").toString("hex")}
  12 4b 36 ab`);

describe("frameRecord", () => {
  it("frames the 24-byte brain.Event:2 record byte for byte (length CRC 0x224b7fa3, data CRC 0xab364b12)", () => {
    const payload = encodeEvent({ wallTime: 1599759586, fileVersion: "brain.Event:2" });
    expect(payload.length).toBe(24);
    const framed = frameRecord(payload);
    expect(toHex(framed)).toBe(toHex(FILE_VERSION_RECORD));
    const view = new DataView(framed.buffer);
    expect(view.getUint32(8, true)).toBe(0x224b7fa3);
    expect(view.getUint32(12 + 24, true)).toBe(0xab364b12);
  });

  it("frames an empty payload", () => {
    const framed = frameRecord(new Uint8Array(0));
    expect(framed.length).toBe(framedLength(0));
    expect(framed.length).toBe(16);
  });
});

describe("RecordBuffer", () => {
  it("packs records back to back exactly as frameRecord frames them one by one", () => {
    const payloads = [new Uint8Array(0), Uint8Array.of(1, 2, 3), new Uint8Array(300).fill(7), new Uint8Array(70_000).fill(9)];
    const buf = new RecordBuffer(64);
    for (const p of payloads) buf.append(p);
    expect(buf.records).toBe(4);
    const expected = Buffer.concat(payloads.map((p) => frameRecord(p)));
    expect(buf.byteLength).toBe(expected.length);
    expect(Buffer.from(buf.take()).equals(expected)).toBe(true);
    expect(buf.records).toBe(0);
    expect(buf.take().length).toBe(0);
  });

  it("does not reuse memory it handed out, for small and large batches", () => {
    for (const size of [1, 100_000]) {
      const buf = new RecordBuffer();
      buf.append(new Uint8Array(size).fill(1));
      const first = buf.take();
      const copy = Uint8Array.from(first);
      buf.append(new Uint8Array(size).fill(2));
      buf.append(new Uint8Array(size).fill(3));
      buf.take();
      expect(Buffer.from(first).equals(Buffer.from(copy)), `size ${size}`).toBe(true);
    }
  });
});
