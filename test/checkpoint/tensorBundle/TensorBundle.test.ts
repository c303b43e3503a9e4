/**
 * TensorFlow's V2 tensor bundle, written by TensorBundleWriter and read by TensorBundleReader:
 * golden bytes that TensorFlow 2.21 wrote, checked field by field against the format's
 * description; round trips of every dtype; and the bundles TensorFlow itself wrote
 * (test/checkpoint/fixtures/tensorflow, made by tf_bundles.py there, with what TensorFlow read
 * back from them in expected.json), which run without TensorFlow installed.
 */
import { crc32c } from "@node-rs/crc32";
import { readFileSync } from "node:fs";
import { readFile, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

import { DataLossError, InvalidArgumentError, NotFoundError, UnimplementedError } from "../../../src/errors.js";
import type { TensorValue } from "../../../src/session/Tensor.js";
import { maskCrc32c } from "../../../src/summary/maskedCrc32c.js";
import { decodeBundleIndex, TensorBundleReader } from "../../../src/checkpoint/tensorBundle/TensorBundleReader.js";
import { encodeTensorBundle, TensorBundleWriter, type BundleTensor } from "../../../src/checkpoint/tensorBundle/TensorBundleWriter.js";
import { encodeBundleEntry, encodeBundleHeader, type BundleEntry } from "../../../src/checkpoint/tensorBundle/bundleProtos.js";
import { buildTable } from "../../../src/checkpoint/tensorBundle/sstable.js";
import { bits } from "../../util/tensorBits.js";
import { useTempDirs } from "../../util/tempDirs.js";
import { concat, hex } from "./tableBytes.js";

const tempDir = useTempDirs("ms-tensor-bundle-");
const FIXTURES = fileURLToPath(new URL("../fixtures/tensorflow/", import.meta.url));
const hexOf = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("hex");
const dataOf = (b: { data: readonly Uint8Array[] }): Uint8Array => concat(...b.data);
const u32le = (...xs: number[]): Uint8Array => concat(...xs.map((x) => [x & 0xff, (x >>> 8) & 0xff, (x >>> 16) & 0xff, x >>> 24]));

/** The bundle `tf.raw_ops.SaveV2` wrote (TensorFlow 2.21) for the tensors of {@link SMALL}. */
const TF_INDEX = hex(`
  00000608011a02080100050f615f66333208011204120208022808353d33c8f4000511625f73747208071204120208032008280f3503717f3e000b0f635f656d
  7074795f7374720807120212002017280435f6c10c64000911645f656d7074795f6608011206120012020803201b35d8ea82a2000c0d655f7363616c61725f69
  363408091200201b280835bbd79f11000000000100000000425b299c000000000100000000c0f2a1b000010366009701000000000100000000dd8f5a0d9c0108
  a9010f0000000000000000000000000000000000000000000000000000000000000000000057fb808b247547db`);
const TF_DATA = hex("0000c03f000000c0 020006 640622c1 6162 68c3a96c6c6f d8ea82a2 0700000000000000");

const SMALL = new Map<string, BundleTensor>([
  ["a_f32", { dtype: "float32", shape: [2], data: Float32Array.of(1.5, -2) }],
  ["b_str", { dtype: "string", shape: [3], data: ["ab", "", "héllo"] }],
  ["c_empty_str", { dtype: "string", shape: [0], data: [] }],
  ["d_empty_f", { dtype: "float32", shape: [0, 3], data: new Float32Array(0) }],
  ["e_scalar_i64", { dtype: "int64", shape: [], data: BigInt64Array.of(7n) }],
]);

describe("golden bytes: a small bundle as TensorFlow 2.21 wrote it", () => {
  it("our writer produces TensorFlow's index and data bytes exactly", () => {
    const ours = encodeTensorBundle(SMALL);
    expect(hexOf(ours.index)).toBe(hexOf(TF_INDEX));
    expect(hexOf(dataOf(ours))).toBe(hexOf(TF_DATA));
  });

  it("the bytes hold the structure the format describes: header, entries, packed data, the string layout and its checksums", () => {
    // The first data block's first entry: empty key, the header (num_shards 1, version { producer 1 }).
    expect(hexOf(TF_INDEX.subarray(0, 9))).toBe("000006" + "08011a020801");
    // b_str at offset 8: varint lengths 2, 0, 6; the masked CRC-32C of the lengths as little-endian
    // uint32s; then the bytes of "ab" and "héllo".
    const lengthsCrc = crc32c(u32le(2, 0, 6)) >>> 0;
    expect(hexOf(TF_DATA.subarray(8, 11))).toBe("020006");
    expect(Buffer.from(TF_DATA.subarray(11, 15)).readUInt32LE(0)).toBe(maskCrc32c(lengthsCrc));
    expect(Buffer.from(TF_DATA.subarray(15, 23)).toString("utf8")).toBe("abhéllo");
    // The entry's checksum extends the lengths' CRC over the checksum bytes and the strings (not the varints).
    const entryCrc = maskCrc32c(crc32c(TF_DATA.subarray(11, 23), lengthsCrc) >>> 0);
    const index = decodeBundleIndex(TF_INDEX, "tf.index");
    const byName = new Map(index.entries.map((e) => [e.name, e]));
    expect(byName.get("b_str")).toMatchObject({ dtype: "string", shape: [3], offset: 8, sizeBytes: 15, crc32c: entryCrc });
    // An empty string tensor is the 4 checksum bytes of no lengths: the mask of CRC 0.
    expect(byName.get("c_empty_str")).toMatchObject({ offset: 23, sizeBytes: 4 });
    expect(hexOf(TF_DATA.subarray(23, 27))).toBe("d8ea82a2");
    // Numeric tensors: raw little-endian bytes packed back to back, the masked CRC-32C of exactly them.
    expect(byName.get("a_f32")).toMatchObject({ offset: 0, sizeBytes: 8, crc32c: maskCrc32c(crc32c(TF_DATA.subarray(0, 8)) >>> 0) });
    expect(byName.get("d_empty_f")).toMatchObject({ shape: [0, 3], offset: 27, sizeBytes: 0, crc32c: maskCrc32c(0) });
    expect(byName.get("e_scalar_i64")).toMatchObject({ dtype: "int64", shape: [], offset: 27, sizeBytes: 8 });
    expect(index.header).toEqual({ numShards: 1, endianness: "little", version: { producer: 1, minConsumer: 0, badConsumers: [] } });
    expect(index.entries.map((e) => e.name)).toEqual([...SMALL.keys()]);
  });
});

/** Bit patterns that a float round trip must keep. */
const nanWithPayload32 = (): Float32Array => new Float32Array(Uint32Array.of(0x7fc00001, 0xffa0beef, 0x7f800001).buffer);

const everyDtype = (): Map<string, TensorValue> =>
  new Map<string, TensorValue>([
    ["dense/kernel", { dtype: "float32", shape: [2, 3], data: Float32Array.of(1.5, -0, Infinity, -Infinity, 3.4028234663852886e38, 1e-45) }],
    ["nan", { dtype: "float32", shape: [3], data: nanWithPayload32() }],
    ["f64", { dtype: "float64", shape: [5], data: Float64Array.of(Math.PI, -0, Number.NaN, Number.MIN_VALUE, -Number.MAX_VALUE) }],
    ["f64_scalar", { dtype: "float64", shape: [], data: Float64Array.of(0.1) }],
    ["i32", { dtype: "int32", shape: [2, 2], data: Int32Array.of(0, -1, 2147483647, -2147483648) }],
    ["global_step", { dtype: "int64", shape: [], data: BigInt64Array.of(9007199254740993n) }],
    ["i64", { dtype: "int64", shape: [3], data: BigInt64Array.of(-9223372036854775808n, 9223372036854775807n, 0n) }],
    ["flags", { dtype: "bool", shape: [3], data: Uint8Array.of(1, 0, 1) }],
    ["flag_scalar", { dtype: "bool", shape: [], data: Uint8Array.of(1) }],
    ["words", { dtype: "string", shape: [2, 3], data: ["", "héllo", "日本語 🎉", "with\0nul\nand newline", "\uFEFFbom", "x".repeat(300)] }],
    ["word", { dtype: "string", shape: [], data: ["scalar"] }],
    ["no_words", { dtype: "string", shape: [0, 2], data: [] }],
    ["empty_f64", { dtype: "float64", shape: [0, 4], data: new Float64Array(0) }],
    ["empty_i32", { dtype: "int32", shape: [3, 0], data: new Int32Array(0) }],
    ["empty_bool", { dtype: "bool", shape: [0], data: new Uint8Array(0) }],
    ["empty_i64", { dtype: "int64", shape: [0], data: new BigInt64Array(0) }],
  ]);

const write = async (prefix: string, tensors: ReadonlyMap<string, BundleTensor>, options = {}): Promise<void> => {
  const w = new TensorBundleWriter(prefix, options);
  for (const [name, t] of tensors) w.add(name, t);
  await w.finish();
};

describe("TensorBundleWriter → TensorBundleReader round trips", () => {
  it("every supported dtype bit-exactly: NaN payloads, -0, infinities, empty tensors, scalars, non-ASCII strings", async () => {
    for (const fsync of [true, false]) {
      const prefix = join(tempDir(), "sub", "model.ckpt-7");
      const values = everyDtype();
      await write(prefix, values, { fsync });
      const reader = await TensorBundleReader.open(prefix);
      expect(bits(await reader.readAll())).toEqual(bits(values));
      expect(reader.entries.every((e) => e.supported && e.shardId === 0 && e.slices === 0)).toBe(true);
      expect(await readFile(`${prefix}.index`).then((b) => b.length)).toBeGreaterThan(48);
    }
  });

  it("strings given as raw bytes, invalid UTF-8 included, read back with readStringBytes", async () => {
    const prefix = join(tempDir(), "raw");
    const raw = [Uint8Array.of(0xff, 0xfe, 0), new Uint8Array(0), Uint8Array.of(0x61)];
    await write(prefix, new Map<string, BundleTensor>([["blob", { dtype: "string", shape: [3], data: raw }], ["mixed", { dtype: "string", shape: [2], data: ["é", Uint8Array.of(0xc3, 0xa9)] }]]));
    const reader = await TensorBundleReader.open(prefix);
    expect((await reader.readStringBytes("blob")).map(hexOf)).toEqual(["fffe00", "", "61"]);
    await expect(reader.read("blob")).rejects.toThrow(UnimplementedError);
    await expect(reader.read("blob")).rejects.toThrow(/element 0 is not UTF-8 text, which a string tensor of this library holds: read it with readStringBytes/);
    expect((await reader.read("mixed")).data).toEqual(["é", "é"]);
    await expect(reader.readStringBytes("nope")).rejects.toThrow(NotFoundError);
  });

  it("orders keys by their UTF-8 bytes, as TensorFlow does (not by JavaScript's UTF-16 order)", async () => {
    const prefix = join(tempDir(), "order");
    // UTF-16: "😀" (d83d) < "\uffff"; UTF-8: "\uffff" (ef bf bf) < "😀" (f0 9f 98 80).
    const names = ["😀", "\uffff", "b", "a/b", "a", "A"];
    await write(prefix, new Map(names.map((n, i) => [n, { dtype: "int32", shape: [], data: Int32Array.of(i) }])));
    const reader = await TensorBundleReader.open(prefix);
    expect(reader.entries.map((e) => e.name)).toEqual(["A", "a", "a/b", "b", "\uffff", "😀"]);
    expect((await reader.read("😀")).data).toEqual(Int32Array.of(0));
    // The data file follows the order the tensors were added, as TensorFlow's BundleWriter
    // appends them: "😀" first (0), "A" last (20).
    expect(reader.entries.map((e) => e.offset)).toEqual([20, 16, 12, 8, 4, 0]);
  });

  it("an index of several blocks (more than 256 KiB of entries) reads back whole", async () => {
    const prefix = join(tempDir(), "many");
    const n = 5000;
    const values = new Map(Array.from({ length: n }, (_, i) => [`layer_${String(i).padStart(5, "0")}/some/long/variable/name/.ATTRIBUTES/VARIABLE_VALUE`, { dtype: "float32", shape: [], data: Float32Array.of(i) } as TensorValue]));
    await write(prefix, values, { fsync: false });
    expect((await stat(`${prefix}.index`)).size).toBeGreaterThan(256 * 1024);
    const reader = await TensorBundleReader.open(prefix);
    expect(reader.entries).toHaveLength(n);
    expect((await reader.read("layer_04999/some/long/variable/name/.ATTRIBUTES/VARIABLE_VALUE")).data).toEqual(Float32Array.of(4999));
  });

  it("alignment: with alignmentBytes 8 each tensor starts at a multiple of 8, the padding is zeros, the checksums leave it out", async () => {
    const prefix = join(tempDir(), "aligned");
    const values = new Map<string, TensorValue>([
      ["a", { dtype: "bool", shape: [3], data: Uint8Array.of(1, 1, 1) }],
      ["b", { dtype: "float64", shape: [1], data: Float64Array.of(2) }],
      ["c", { dtype: "string", shape: [1], data: ["xy"] }],
      ["d", { dtype: "int32", shape: [1], data: Int32Array.of(-1) }],
    ]);
    await write(prefix, values, { alignmentBytes: 8 });
    const reader = await TensorBundleReader.open(prefix);
    expect(reader.entries.map((e) => [e.offset, e.sizeBytes])).toEqual([[0, 3], [8, 8], [16, 7], [24, 4]]);
    const data = await readFile(`${prefix}.data-00000-of-00001`);
    expect(hexOf(data.subarray(3, 8))).toBe("0000000000");
    expect(hexOf(data.subarray(23, 24))).toBe("00");
    expect(bits(await reader.readAll())).toEqual(bits(values));
    expect(reader.entry("b")?.crc32c).toBe(maskCrc32c(crc32c(data.subarray(8, 16)) >>> 0));
    expect(() => new TensorBundleWriter(prefix, { alignmentBytes: 3 })).toThrow(InvalidArgumentError);
  });

  it("refuses before touching the disk: empty, repeated or ill-formed names, malformed tensors", async () => {
    const dir = tempDir();
    const w = new TensorBundleWriter(join(dir, "x"));
    const f = { dtype: "float32", shape: [1], data: Float32Array.of(1) } as const;
    expect(() => w.add("", f)).toThrow(/must not be empty/);
    w.add("a", f);
    expect(() => w.add("a", f)).toThrow(/Adding duplicate key "a"/);
    expect(() => w.add("\ud800", f)).toThrow(/lone surrogate/);
    expect(() => w.add("b", { dtype: "float32", shape: [2], data: Float32Array.of(1) })).toThrow(/tensor "b": tensor of shape \[2\] needs 2 elements, got 1/);
    expect(() => w.add("b", { dtype: "float32", shape: [-1], data: Float32Array.of(1) })).toThrow(/invalid shape/);
    expect(() => w.add("b", { dtype: "float32", shape: [1], data: Float64Array.of(1) } as unknown as TensorValue)).toThrow(/tensor "b": tensor data does not match dtype float32/);
    expect(() => w.add("b", { dtype: "complex64", shape: [], data: [] } as unknown as TensorValue)).toThrow(/unknown dtype/);
    expect(() => w.add("b", { dtype: "string", shape: [1], data: ["\udc00"] })).toThrow(/lone surrogate/);
    expect(() => w.add("b", { dtype: "string", shape: [1], data: [1] } as unknown as TensorValue)).toThrow(/neither a string nor a Uint8Array/);
    expect(() => w.add("b", { dtype: "int32", shape: [2 ** 30, 2 ** 30, 2 ** 30], data: new Int32Array(0) })).toThrow(/too many elements/);
    await w.finish();
    await expect(w.finish()).rejects.toThrow(/already finished/);
    expect(() => w.add("c", f)).toThrow(/finished/);
    expect(() => encodeTensorBundle([["a", f], ["a", f]])).toThrow(/Adding duplicate key/);
  });

  it("a missing bundle is NotFoundError, a missing data file DataLossError, an unknown tensor NotFoundError", async () => {
    const dir = tempDir();
    await expect(TensorBundleReader.open(join(dir, "none"))).rejects.toThrow(NotFoundError);
    const prefix = join(dir, "x");
    await write(prefix, new Map([["a", { dtype: "int32", shape: [], data: Int32Array.of(1) } as TensorValue]]));
    const reader = await TensorBundleReader.open(prefix);
    await expect(reader.read("b")).rejects.toThrow(NotFoundError);
    await rm(`${prefix}.data-00000-of-00001`);
    await expect(reader.read("a")).rejects.toThrow(DataLossError);
  });
});

describe("bundles laid out otherwise than our writer does", () => {
  /** An index with this header and entries (with valid checksums). */
  const indexOf = (header: Parameters<typeof encodeBundleHeader>[0], entries: readonly (readonly [string, BundleEntry])[]): Uint8Array =>
    buildTable([[new Uint8Array(0), encodeBundleHeader(header)], ...entries.map(([k, e]) => [Buffer.from(k), encodeBundleEntry(e)] as const)]);
  const v1 = { producer: 1, minConsumer: 0, badConsumers: [] };
  const entry = (e: Partial<BundleEntry>): BundleEntry => ({ dtypeCode: 1, shape: [], shardId: 0, offset: 0, size: 0, crc32c: 0, slices: 0, ...e });
  const crc = (b: Uint8Array): number => maskCrc32c(crc32c(b) >>> 0);

  it("big-endian data: the checksum is of the stored bytes, the values come out in the host's order", async () => {
    const prefix = join(tempDir(), "be");
    const f32 = hex("3fc00000 c0000000"); // 1.5, -2 big-endian
    const i64 = hex("8000000000000000"); // -2^63
    // One string "hi": varint length 2, the masked CRC of its length as a big-endian uint32, "hi".
    const lengthsCrc = crc32c(hex("00000002")) >>> 0;
    const lengthsCrcBytes = Buffer.alloc(4);
    lengthsCrcBytes.writeUInt32BE(maskCrc32c(lengthsCrc));
    const s = concat([2], lengthsCrcBytes, hex("6869"));
    const data = concat(f32, i64, s);
    const index = indexOf({ numShards: 1, endianness: "big", version: v1 }, [
      ["f", entry({ dtypeCode: 1, shape: [2], size: 8, crc32c: crc(f32) })],
      ["i", entry({ dtypeCode: 9, shape: [], offset: 8, size: 8, crc32c: crc(i64) })],
      ["s", entry({ dtypeCode: 7, shape: [1], offset: 16, size: s.length, crc32c: maskCrc32c(crc32c(s.subarray(1), lengthsCrc) >>> 0) })],
    ]);
    await writeFile(`${prefix}.index`, index);
    await writeFile(`${prefix}.data-00000-of-00001`, data);
    const reader = await TensorBundleReader.open(prefix);
    expect(reader.header.endianness).toBe("big");
    expect((await reader.read("f")).data).toEqual(Float32Array.of(1.5, -2));
    expect((await reader.read("i")).data).toEqual(BigInt64Array.of(-9223372036854775808n));
    expect((await reader.read("s")).data).toEqual(["hi"]);
  });

  it("several shards: each entry is read from its shard's data file", async () => {
    const prefix = join(tempDir(), "sharded");
    const a = hex("0000803f");
    const b = hex("00000040");
    const index = indexOf({ numShards: 2, endianness: "little", version: v1 }, [
      ["a", entry({ shape: [1], shardId: 0, size: 4, crc32c: crc(a) })],
      ["b", entry({ shape: [1], shardId: 1, offset: 2, size: 4, crc32c: crc(b) })],
    ]);
    await writeFile(`${prefix}.index`, index);
    await writeFile(`${prefix}.data-00000-of-00002`, a);
    await writeFile(`${prefix}.data-00001-of-00002`, concat([9, 9], b));
    const reader = await TensorBundleReader.open(prefix);
    expect(bits(await reader.readAll())).toEqual(bits(new Map([["a", { dtype: "float32", shape: [1], data: Float32Array.of(1) } as TensorValue], ["b", { dtype: "float32", shape: [1], data: Float32Array.of(2) } as TensorValue]])));
  });

  it("a bundle from a newer TensorFlow (min_consumer above 1, or this consumer listed as bad) is refused by version", () => {
    for (const version of [{ producer: 2, minConsumer: 2, badConsumers: [] }, { producer: 1, minConsumer: 0, badConsumers: [1] }]) {
      const index = indexOf({ numShards: 1, endianness: "little", version }, []);
      expect(() => decodeBundleIndex(index, "x.index")).toThrow(UnimplementedError);
      expect(() => decodeBundleIndex(index, "x.index")).toThrow(/newer version of TensorFlow/);
    }
  });
});

interface Expected {
  readonly prefix: string;
  readonly tensorflow: string;
  readonly tensors: Record<string, { dtype: string; shape: number[]; hex?: string; strings?: string[] }>;
}
const expectedOf = (dir: string): Expected => JSON.parse(readFileSync(join(FIXTURES, dir, "expected.json"), "utf8")) as Expected;
const FIXTURE_DIRS = ["savev2_all_dtypes", "checkpoint_v2", "saver_v1", "keras3_sequential", "keras3_uncompiled"];

describe("bundles TensorFlow 2.21 wrote (committed fixtures; no TensorFlow needed)", () => {
  for (const dir of FIXTURE_DIRS) {
    it(`${dir}: every entry as TensorFlow listed it, every supported tensor bit for bit as TensorFlow read it`, async () => {
      const expected = expectedOf(dir);
      expect(expected.tensorflow).toBe("2.21.0");
      const reader = await TensorBundleReader.open(join(FIXTURES, dir, expected.prefix));
      expect(reader.entries.map((e) => e.name)).toEqual(Object.keys(expected.tensors).sort());
      for (const e of reader.entries) {
        const want = expected.tensors[e.name];
        expect({ name: e.name, dtype: e.dtype, shape: e.shape }).toEqual({ name: e.name, dtype: want?.dtype, shape: want?.shape });
        if (!e.supported) continue;
        if (e.dtype === "string") {
          expect((await reader.readStringBytes(e.name)).map(hexOf)).toEqual(want?.strings);
        } else {
          const t = await reader.read(e.name);
          const data = t.data as Exclude<TensorValue["data"], readonly string[]>;
          expect(hexOf(new Uint8Array(data.buffer, data.byteOffset, data.byteLength))).toBe(want?.hex);
        }
      }
    });
  }

  it("dtypes this library does not hold are listed, and refused on read with one line naming the tensor and its dtype", async () => {
    const reader = await TensorBundleReader.open(join(FIXTURES, "savev2_all_dtypes", "ckpt"));
    const unsupported = reader.entries.filter((e) => !e.supported).map((e) => [e.name, e.dtype, e.dtypeCode]);
    expect(unsupported).toEqual([
      ["bfloat16", "bfloat16", 14],
      ["complex64", "complex64", 8],
      ["float16", "float16", 19],
      ["int16", "int16", 5],
      ["int8", "int8", 6],
      ["uint8", "uint8", 4],
    ]);
    for (const [name, dtype] of unsupported) {
      const error = await reader.read(name as string).then(() => undefined, (e: unknown) => e);
      expect(error).toBeInstanceOf(UnimplementedError);
      expect((error as Error).message).toBe(`tensor "${String(name)}" has dtype ${String(dtype)}, which this reader does not read (it reads float32, float64, int32, int64, bool and string)`);
    }
    await expect(reader.readAll()).rejects.toThrow(UnimplementedError);
    await expect(reader.read("string_binary")).rejects.toThrow(UnimplementedError);
    expect((await reader.read("string")).data).toEqual(["", "héllo", "日本語 🎉", "with\0nul\nand newline"]);
  });

  it("our writer reproduces what TensorFlow's v1 Saver wrote byte for byte, and tf.train.Checkpoint's index entries", async () => {
    for (const dir of ["saver_v1", "checkpoint_v2", "keras3_sequential"]) {
      const prefix = join(FIXTURES, dir, expectedOf(dir).prefix);
      const reader = await TensorBundleReader.open(prefix);
      const tensors = new Map<string, BundleTensor>();
      for (const e of reader.entries) {
        tensors.set(e.name, e.dtype === "string" ? { dtype: "string", shape: e.shape, data: await reader.readStringBytes(e.name) } : await reader.read(e.name));
      }
      const ours = encodeTensorBundle(tensors);
      const theirs = await readFile(`${prefix}.index`);
      if (dir === "saver_v1") {
        expect(hexOf(ours.index)).toBe(hexOf(theirs));
        expect(hexOf(dataOf(ours))).toBe(hexOf(await readFile(`${prefix}.data-00000-of-00001`)));
      } else {
        // tf.train.Checkpoint writes its data in its own order: the entries match but for offsets.
        const strip = (entries: readonly { name: string; dtype: string; shape: readonly number[]; sizeBytes: number; crc32c: number }[]) =>
          entries.map((e) => [e.name, e.dtype, e.shape, e.sizeBytes, e.crc32c]);
        expect(strip(decodeBundleIndex(ours.index, "ours").entries)).toEqual(strip(decodeBundleIndex(theirs, "theirs").entries));
      }
    }
  });
});
