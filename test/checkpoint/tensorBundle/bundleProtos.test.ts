/**
 * The index's protobuf messages: golden bytes derived by hand from the field numbers
 * (BundleHeaderProto, BundleEntryProto, TensorShapeProto, VersionDef) and proto3's encoding,
 * decoding of what other writers may add (unknown fields, unpacked repeated fields), and
 * malformed messages refused with a one-line DataLossError at the field's offset.
 */
import { describe, expect, it } from "vitest";

import { DataLossError } from "../../../src/errors.js";
import {
  decodeBundleEntry,
  decodeBundleHeader,
  encodeBundleEntry,
  encodeBundleHeader,
  type BundleEntry,
} from "../../../src/checkpoint/tensorBundle/bundleProtos.js";
import { dataLossOf } from "./dataLoss.js";
import { concat, hex } from "./tableBytes.js";

const AT = { file: "/ckpt/x.index", offset: 1000, what: 'entry "w"' };
const hexOf = (b: Uint8Array): string => Buffer.from(b).toString("hex");
const entry = (e: Partial<BundleEntry>): BundleEntry => ({ dtypeCode: 1, shape: [], shardId: 0, offset: 0, size: 0, crc32c: 0, slices: 0, ...e });

const decodeError = (f: () => unknown): string => dataLossOf(AT.file, f).message;

describe("BundleHeaderProto and BundleEntryProto golden bytes", () => {
  it("the header TensorFlow writes: num_shards 1 (field 1), version { producer 1 } (field 3); little-endian is the default, left out", () => {
    const h = { numShards: 1, endianness: "little", version: { producer: 1, minConsumer: 0, badConsumers: [] } } as const;
    expect(hexOf(encodeBundleHeader(h))).toBe("0801" + "1a02" + "0801");
    expect(decodeBundleHeader(hex("08 01 1a 02 08 01"), AT)).toEqual(h);
  });

  it("a big-endian header with min_consumer and bad_consumers (packed, or one by one)", () => {
    const h = { numShards: 3, endianness: "big", version: { producer: 1, minConsumer: 2, badConsumers: [4, 5] } } as const;
    // endianness BIG = 1 (field 2); version: producer, min_consumer (field 2), bad_consumers packed (field 3)
    expect(hexOf(encodeBundleHeader(h))).toBe("0803" + "1001" + "1a08" + "0801" + "1002" + "1a020405");
    expect(decodeBundleHeader(hex("0803 1001 1a08 0801 1002 1a020405"), AT)).toEqual(h);
    expect(decodeBundleHeader(hex("0803 1001 1a08 0801 1002 1804 1805"), AT)).toEqual(h);
  });

  it("an entry: dtype (1), shape (2) with dims (2) of size (1), offset (4), size (5), crc32c (6, fixed32); zeros left out", () => {
    const f32 = entry({ dtypeCode: 1, shape: [2], size: 8, crc32c: 0xf4c8333d });
    expect(hexOf(encodeBundleEntry(f32))).toBe("0801" + "1204" + "12020802" + "2808" + "353d33c8f4");
    // A scalar carries an empty shape; a zero dimension is an empty dim message.
    const scalar = entry({ dtypeCode: 9, shape: [], offset: 27, size: 8, crc32c: 0x119fd7bb });
    expect(hexOf(encodeBundleEntry(scalar))).toBe("0809" + "1200" + "201b" + "2808" + "35bbd79f11");
    const empty = entry({ dtypeCode: 1, shape: [0, 3], offset: 27, crc32c: 0xa282ead8 });
    expect(hexOf(encodeBundleEntry(empty))).toBe("0801" + "1206" + "1200" + "12020803" + "201b" + "35d8ea82a2");
    // shard_id (3); offsets and sizes past 2^32 are varints of more than 5 bytes.
    const big = entry({ dtypeCode: 2, shape: [2 ** 33], shardId: 2, offset: 2 ** 40, size: 2 ** 36, crc32c: 1 });
    expect(hexOf(encodeBundleEntry(big))).toBe("0802" + "1208" + "1206" + "0880808080" + "20" + "1802" + "2080808080" + "8020" + "288080808080" + "02" + "3501000000");
    for (const e of [f32, scalar, empty, big]) expect(decodeBundleEntry(encodeBundleEntry(e), AT)).toEqual(e);
  });

  it("decodes what other writers may add: unknown fields, dim names, slices", () => {
    const withExtras = concat(
      hex("0801"),
      hex("1209 1207 0802 1203 6d6f64"), // shape { dim { size 2, name "mod" } }
      hex("7805"), // field 15, varint
      hex("8201 03 616263"), // field 16, length-delimited
      hex("2808"),
      hex("3a00 3a00"), // slices (field 7): two empty TensorSliceProtos
    );
    expect(decodeBundleEntry(withExtras, AT)).toEqual(entry({ dtypeCode: 1, shape: [2], size: 8, slices: 2 }));
  });
});

describe("malformed messages: a one-line DataLossError at the field's offset", () => {
  it("every truncation of an entry either decodes to fewer fields or is refused", () => {
    const full = encodeBundleEntry(entry({ dtypeCode: 2, shape: [3, 4], offset: 300, size: 96, crc32c: 0x12345678 }));
    for (let cut = 0; cut < full.length; cut++) {
      try {
        decodeBundleEntry(full.subarray(0, cut), AT);
      } catch (e) {
        expect(e).toBeInstanceOf(DataLossError);
        expect((e as Error).message).not.toContain("\n");
      }
    }
  });

  it("names the byte offset of the bad field, nested ones included", () => {
    // shape { dim { size -1 } } at 1000 + 2: the dim's size lies at 1000 + 2 + 2 + 2.
    const negativeDim = concat(hex("0801"), hex("120d 120b 08ffffffffffffffffff01"));
    expect(decodeError(() => decodeBundleEntry(negativeDim, AT))).toMatch(/^\/ckpt\/x\.index: at byte 1006: entry "w" shape dim: dim size -1 is out of range$/);
  });

  it("refuses wrong wire types, negative or oversized numbers, unknown rank, too many dimensions", () => {
    expect(decodeError(() => decodeBundleEntry(hex("0a0100"), AT))).toContain("dtype has wire type 2");
    expect(decodeError(() => decodeBundleEntry(hex("2501000000"), AT))).toContain("offset has wire type 5");
    expect(decodeError(() => decodeBundleEntry(hex("3001"), AT))).toContain("crc32c has wire type 0");
    expect(decodeError(() => decodeBundleEntry(hex("1001"), AT))).toContain("shape has wire type 0");
    expect(decodeError(() => decodeBundleEntry(hex("28ffffffffffffffffff01"), AT))).toContain("size -1 is out of range");
    expect(decodeError(() => decodeBundleEntry(hex("28ffffffffffffffff7f"), AT))).toContain("out of range");
    expect(decodeError(() => decodeBundleEntry(hex("18ffffffff0f"), AT))).toContain("shard_id is -1");
    expect(decodeError(() => decodeBundleEntry(hex("12021801"), AT))).toContain("unknown rank");
    const rank255 = concat(hex("12 fe03"), ...Array.from({ length: 255 }, () => hex("1200")));
    expect(decodeError(() => decodeBundleEntry(rank255, AT))).toContain("more than 254 dimensions");
    expect(decodeError(() => decodeBundleEntry(hex("28 8080808080808080808001"), AT))).toContain("varint");
    expect(decodeError(() => decodeBundleEntry(hex("1205 1203"), AT))).toMatch(/premature EOF|truncated/);
    expect(decodeError(() => decodeBundleEntry(hex("00"), AT))).toContain("illegal tag");
    expect(decodeError(() => decodeBundleEntry(hex("0b"), AT))).toMatch(/end group|wire type|EOF/);
    expect(decodeError(() => decodeBundleHeader(hex("1005"), AT))).toContain("endianness 5");
    expect(decodeError(() => decodeBundleHeader(hex("08ffffffff0f"), AT))).toContain("num_shards is -1");
    expect(decodeError(() => decodeBundleHeader(hex("1a03 0801"), AT))).toMatch(/premature EOF|truncated/);
  });
});
