/**
 * Hostile bundles: truncated at every byte, lying index entries (with valid checksums), and a
 * seeded fuzz over mutated index and data files. Each must give a one-line DataLossError naming
 * the file and the byte offset (or an UnimplementedError for what this reader refuses by
 * design), never a crash, a huge allocation or a hang.
 */
import { crc32c } from "@node-rs/crc32";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { beforeEach, describe, expect, it } from "vitest";

import { DataLossError, UnimplementedError } from "../../../src/errors.js";
import type { TensorValue } from "../../../src/session/Tensor.js";
import { maskCrc32c, maskedCrc32c } from "../../../src/summary/maskedCrc32c.js";
import { TensorBundleReader, type TensorBundleEntry } from "../../../src/checkpoint/tensorBundle/TensorBundleReader.js";
import { encodeTensorBundle } from "../../../src/checkpoint/tensorBundle/TensorBundleWriter.js";
import { encodeBundleEntry, encodeBundleHeader, type BundleEntry, type BundleHeader } from "../../../src/checkpoint/tensorBundle/bundleProtos.js";
import { buildTable } from "../../../src/checkpoint/tensorBundle/sstable.js";
import { bits } from "../../util/tensorBits.js";
import { seededRandom } from "../../util/seed.js";
import { useTempDirs } from "../../util/tempDirs.js";
import { dataLossIn } from "./dataLoss.js";
import { concat, varint } from "./tableBytes.js";

const tempDir = useTempDirs("ms-hostile-bundle-");
let dir: string;
beforeEach(() => {
  dir = tempDir();
});

const BASE = new Map<string, TensorValue>([
  ["dense/bias", { dtype: "float64", shape: [0], data: new Float64Array(0) }],
  ["dense/kernel", { dtype: "float32", shape: [2, 3], data: Float32Array.of(1, 2, 3, -4, 5.5, Number.NaN) }],
  ["flags", { dtype: "bool", shape: [2], data: Uint8Array.of(1, 0) }],
  ["global_step", { dtype: "int64", shape: [], data: BigInt64Array.of(123456789n) }],
  ["no_words", { dtype: "string", shape: [0], data: [] }],
  ["words", { dtype: "string", shape: [3], data: ["héllo", "", "日本語"] }],
]);
const base = encodeTensorBundle(BASE);
const BASE_DATA = concat(...base.data);

const files = async (index: Uint8Array, data: Uint8Array = BASE_DATA, name = "ckpt"): Promise<string> => {
  const prefix = join(dir, name);
  await writeFile(`${prefix}.index`, index);
  await writeFile(`${prefix}.data-00000-of-00001`, data);
  return prefix;
};

/** Reads one entry the way its dtype allows (strings as bytes: any bytes are valid strings). */
const readEntry = (reader: TensorBundleReader, e: TensorBundleEntry): Promise<unknown> =>
  e.dtype === "string" ? reader.readStringBytes(e.name) : reader.read(e.name);

describe("truncation at every byte offset", () => {
  it("of the index: opening refuses every prefix with a DataLossError", async () => {
    for (let cut = 0; cut < base.index.length; cut++) {
      const prefix = await files(base.index.subarray(0, cut), BASE_DATA, `cut-${cut}`);
      await dataLossIn(`${prefix}.index`, () => TensorBundleReader.open(prefix));
    }
  });

  it("of the data file: a tensor reads if all its bytes are there, else a DataLossError at its offset", async () => {
    const prefix = await files(base.index);
    const reader = await TensorBundleReader.open(prefix);
    const dataPath = `${prefix}.data-00000-of-00001`;
    const whole = bits(BASE);
    for (let cut = 0; cut < BASE_DATA.length; cut++) {
      await writeFile(dataPath, BASE_DATA.subarray(0, cut));
      for (const e of reader.entries) {
        if (e.offset + e.sizeBytes <= cut) {
          expect(bits(new Map([[e.name, await reader.read(e.name)]]))).toEqual({ [e.name]: whole[e.name] });
        } else {
          const { offset, message } = await dataLossIn(dataPath, () => readEntry(reader, e));
          expect(offset).toBe(e.offset);
          expect(message).toContain(`tensor ${JSON.stringify(e.name)}`);
        }
      }
    }
  });
});

describe("a lying index (valid checksums, false entries)", () => {
  const HEADER: BundleHeader = { numShards: 1, endianness: "little", version: { producer: 1, minConsumer: 0, badConsumers: [] } };
  const index = (rows: readonly (readonly [string, Uint8Array])[]): Uint8Array => buildTable(rows.map(([k, v]) => [Buffer.from(k), v] as const));
  const withEntry = (e: Partial<BundleEntry>, header: BundleHeader = HEADER): Uint8Array =>
    index([
      ["", encodeBundleHeader(header)],
      ["t", encodeBundleEntry({ dtypeCode: 1, shape: [2], shardId: 0, offset: 0, size: 8, crc32c: 0, slices: 0, ...e })],
    ]);
  const f32 = Uint8Array.from(Buffer.from(Float32Array.of(1, 2).buffer));
  const crc = maskedCrc32c(f32);

  it("a header claiming 2^31 - 1 shards: load reads only the shards that hold tensors (no allocation per claimed shard)", async () => {
    const many: BundleHeader = { ...HEADER, numShards: 2 ** 31 - 1 };
    const empty = await files(index([["", encodeBundleHeader(many)]]), new Uint8Array(0), "many-shards-empty");
    expect((await TensorBundleReader.load(empty)).entries).toEqual([]);
    // One tensor in shard 0 of the claimed 2^31 - 1: its data file is the one read.
    const one = join(dir, "many-shards-one");
    await writeFile(`${one}.index`, withEntry({ crc32c: crc }, many));
    await writeFile(`${one}.data-00000-of-${String(2 ** 31 - 1).padStart(5, "0")}`, f32);
    expect(bits(new Map([["t", await (await TensorBundleReader.load(one)).read("t")]]))).toEqual(bits(new Map([["t", { dtype: "float32", shape: [2], data: Float32Array.of(1, 2) } as TensorValue]])));
  });

  it("verify checks a tensor of a dtype this library does not read, and refuses its changed bytes", async () => {
    const bf16 = Uint8Array.of(0x80, 0x3f, 0x00, 0x40);
    const prefix = await files(withEntry({ dtypeCode: 14, shape: [2], size: 4, crc32c: maskedCrc32c(bf16) }), bf16, "bfloat16");
    const reader = await TensorBundleReader.load(prefix);
    await expect(reader.read("t")).rejects.toThrow(UnimplementedError);
    await expect(reader.verify("t")).resolves.toBeUndefined();
    const flipped = await files(withEntry({ dtypeCode: 14, shape: [2], size: 4, crc32c: maskedCrc32c(bf16) }), Uint8Array.of(0x80, 0x3f, 0x00, 0x41), "bfloat16-flipped");
    await expect((await TensorBundleReader.open(flipped)).verify("t")).rejects.toThrow(DataLossError);
  });

  it("entries refused when the bundle is opened: sizes that do not fit the dtype, overflowing shapes, bad shards, no dtype", async () => {
    const cases: [Partial<BundleEntry>, string][] = [
      [{ size: 2 ** 53 - 1 }, "Invalid size in bundle entry"],
      [{ size: 9 }, "needs 8 bytes, the entry says 9"],
      [{ dtypeCode: 7, shape: [1e15], size: 8 }, "cannot hold 1000000000000000 strings"],
      [{ shape: [2 ** 40, 2 ** 40], size: 8 }, "too many elements"],
      [{ shardId: 1 }, "shard 1 of a bundle with 1 shards"],
      [{ dtypeCode: 0 }, "no dtype"],
    ];
    for (const [lie, fragment] of cases) {
      const prefix = await files(withEntry({ crc32c: crc, ...lie }));
      expect((await dataLossIn(`${prefix}.index`, () => TensorBundleReader.open(prefix))).message).toContain(fragment);
    }
  });

  it("a header missing, with no shards, or not first; an empty table", async () => {
    const noHeader = index([["t", encodeBundleEntry({ dtypeCode: 1, shape: [2], shardId: 0, offset: 0, size: 8, crc32c: crc, slices: 0 })]]);
    const cases: [Uint8Array, string][] = [
      [noHeader, "first key is not the empty key"],
      [withEntry({ crc32c: crc }, { ...HEADER, numShards: 0 }), "num_shards is 0"],
      [index([]), "no bundle header"],
    ];
    for (const [bytes, fragment] of cases) {
      const prefix = await files(bytes);
      expect((await dataLossIn(`${prefix}.index`, () => TensorBundleReader.open(prefix))).message).toContain(fragment);
    }
  });

  it("entries refused on read, before any allocation of their size: byte ranges past the data file, offsets that overflow", async () => {
    const lies: Partial<BundleEntry>[] = [{ offset: 1 }, { offset: 2 ** 53 - 1 }, { dtypeCode: 7, shape: [1], size: 2 ** 50 }, { dtypeCode: 2, shape: [2 ** 40], size: 2 ** 43 }];
    for (const lie of lies) {
      const prefix = await files(withEntry({ crc32c: crc, ...lie }), f32);
      const reader = await TensorBundleReader.open(prefix);
      const { offset, message } = await dataLossIn(`${prefix}.data-00000-of-00001`, () => readEntry(reader, reader.entries[0] as TensorBundleEntry));
      expect(message).toContain("runs past the end of the file (8 bytes)");
      expect(offset).toBe(lie.offset ?? 0);
    }
  });

  it("a checksum that does not match; a partitioned entry is refused as unsupported", async () => {
    const prefix = await files(withEntry({ crc32c: crc ^ 1 }), f32);
    const reader = await TensorBundleReader.open(prefix);
    expect((await dataLossIn(`${prefix}.data-00000-of-00001`, () => reader.read("t"))).message).toMatch(/Checksum does not match: stored 0x[0-9a-f]{8} vs\. calculated on the restored bytes 0x[0-9a-f]{8}$/);
    const sliced = concat(encodeBundleEntry({ dtypeCode: 1, shape: [2], shardId: 0, offset: 0, size: 8, crc32c: crc, slices: 0 }), [0x3a, 0x00]);
    const slicedPrefix = await files(index([["", encodeBundleHeader(HEADER)], ["t", sliced]]), f32, "sliced");
    const slicedReader = await TensorBundleReader.open(slicedPrefix);
    expect(slicedReader.entries[0]).toMatchObject({ slices: 1, supported: false });
    await expect(slicedReader.read("t")).rejects.toThrow(UnimplementedError);
    await expect(slicedReader.read("t")).rejects.toThrow(/partitioned into 1 slices/);
  });

  it("string tensors whose lengths lie: too long a varint, past the tensor, not adding up, a wrong checksum of the lengths", async () => {
    /** A string tensor of `n` elements stored as `bytes`, its entry's checksum as TensorFlow computes it from `lengths`. */
    const stringCase = async (name: string, n: number, bytes: Uint8Array, lengths: readonly number[]): Promise<string> => {
      const asU32 = Buffer.alloc(4 * lengths.length);
      lengths.forEach((l, i) => asU32.writeUInt32LE(l >>> 0, 4 * i));
      const lengthsCrc = crc32c(asU32) >>> 0;
      const at = bytes.length - 4 - lengths.reduce((a, b) => a + b, 0);
      const entryCrc = maskCrc32c(crc32c(bytes.subarray(Math.max(at, 0)), lengthsCrc) >>> 0);
      const prefix = await files(withEntry({ dtypeCode: 7, shape: [n], size: bytes.length, crc32c: entryCrc }), bytes, name);
      const reader = await TensorBundleReader.open(prefix);
      return (await dataLossIn(`${prefix}.data-00000-of-00001`, () => reader.readStringBytes("t"))).message;
    };
    const lenCrc = (lengths: number[]): number[] => {
      const b = Buffer.alloc(4 * lengths.length);
      lengths.forEach((l, i) => b.writeUInt32LE(l, 4 * i));
      const m = Buffer.alloc(4);
      m.writeUInt32LE(maskCrc32c(crc32c(b) >>> 0));
      return [...m];
    };
    expect(await stringCase("long", 1, concat(new Array<number>(11).fill(0x80), [1], lenCrc([0]), []), [0])).toContain("varint longer than 10 bytes");
    expect(await stringCase("past", 1, concat(varint(1000), lenCrc([1000]), [0x61]), [1000])).toContain("more than the tensor's");
    expect(await stringCase("sum", 2, concat(varint(1), varint(1), lenCrc([1, 1]), [0x61, 0x62, 0x63]), [1, 1])).toContain("add up to 2 bytes, but 3 follow");
    expect(await stringCase("crc", 1, concat(varint(1), lenCrc([2]), [0x61]), [1])).toContain("checksum of the lengths does not match");
    expect(await stringCase("into", 2, concat(varint(1), [0x80, 0x80, 0x80, 0x80, 0x80]), [1])).toContain("runs into the checksum");
  });
});

describe("fuzz: mutated bundles (seeded; replay with TEST_SEED)", () => {
  /** The blocks of the base index: [start, end) of each block's contents (the trailer follows). */
  const blocks = (): [number, number][] => {
    const f = base.index.subarray(base.index.length - 48);
    const read = (at: number): [number, number] => {
      let v = 0;
      let p = at;
      for (let k = 0; ; k++) {
        const b = f[p++] as number;
        v += (b & 0x7f) * 2 ** (7 * k);
        if ((b & 0x80) === 0) return [v, p];
      }
    };
    const [metaOffset, p1] = read(0);
    const [metaSize, p2] = read(p1);
    const [indexOffset, p3] = read(p2);
    const [indexSize] = read(p3);
    return [
      [0, metaOffset - 5],
      [metaOffset, metaOffset + metaSize],
      [indexOffset, indexOffset + indexSize],
    ];
  };

  const mutate = (bytes: Uint8Array, random: () => number, range: [number, number] = [0, bytes.length]): Uint8Array => {
    const pick = (): number => range[0] + Math.floor(random() * (range[1] - range[0]));
    const out = Uint8Array.from(bytes);
    const kind = Math.floor(random() * 6);
    if (kind === 0) {
      const at = pick();
      out[at] = (out[at] as number) ^ (1 << Math.floor(random() * 8));
    } else if (kind === 1) {
      out[pick()] = Math.floor(random() * 256);
    } else if (kind === 2) {
      out[pick()] = [0x00, 0x7f, 0x80, 0xff][Math.floor(random() * 4)] as number;
    } else if (kind === 3) {
      for (let i = 0; i < 4; i++) out[pick()] = Math.floor(random() * 256);
    } else if (kind === 4 && range[0] === 0 && range[1] === bytes.length) {
      const at = pick();
      return concat(out.subarray(0, at), out.subarray(at + 1 + Math.floor(random() * 8)));
    } else {
      const from = pick();
      const to = pick();
      out.copyWithin(to, from, Math.min(from + 1 + Math.floor(random() * 6), range[1]));
    }
    return out;
  };

  const FILE = "/fuzz/ckpt";
  /** Opens and reads everything; returns the outcome, or fails if the error is not of the expected kinds. */
  const attempt = async (index: Uint8Array, data: Uint8Array): Promise<string> => {
    try {
      const reader = TensorBundleReader.fromBytes(index, [data], FILE);
      for (const e of reader.entries) {
        try {
          await readEntry(reader, e);
        } catch (error) {
          if (error instanceof UnimplementedError) continue;
          throw error;
        }
      }
      return "ok";
    } catch (error) {
      if (error instanceof UnimplementedError) return "unimplemented";
      const message = (error as Error).message;
      // Checked without `expect` in the loop (thousands of calls); collected and asserted at the end.
      if (!(error instanceof DataLossError) || message.includes("\n") || !ONE_LINE.test(message)) unexpected.push(String(error));
      return /checksum mismatch|Checksum does not match/.test(message) ? "checksum" : "structure";
    }
  };
  // A mutated header may claim another number of shards: the data file is then named after it.
  const ONE_LINE = /^\/fuzz\/ckpt\.(index|data-00000-of-\d{5}): at byte \d+: /;
  const unexpected: string[] = [];

  it("3,000 mutations of the index (half inside a block, its checksum recomputed) and 1,000 of the data file", async () => {
    const random = seededRandom("tensor bundle fuzz").next;
    const outcomes = { raw: new Map<string, number>(), resealed: new Map<string, number>(), data: new Map<string, number>() };
    const count = (m: Map<string, number>, k: string): void => {
      m.set(k, (m.get(k) ?? 0) + 1);
    };
    const regions = blocks();
    for (let i = 0; i < 3000; i++) {
      let mutated: Uint8Array;
      const resealed = i % 2 === 1;
      if (resealed) {
        const [start, end] = regions[Math.floor(random() * regions.length)] as [number, number];
        mutated = mutate(base.index, random, [start, end]);
        const trailer = new DataView(mutated.buffer, mutated.byteOffset);
        trailer.setUint32(end + 1, maskedCrc32c(mutated.subarray(start, end + 1)), true);
      } else {
        mutated = mutate(base.index, random);
      }
      count(resealed ? outcomes.resealed : outcomes.raw, await attempt(mutated, BASE_DATA));
    }
    for (let i = 0; i < 1000; i++) {
      const mutated = mutate(BASE_DATA, random);
      const outcome = await attempt(base.index, mutated);
      // Every byte of the data file belongs to a tensor's checksum: a change is always caught.
      count(outcomes.data, Buffer.compare(mutated, BASE_DATA) === 0 ? `unchanged ${outcome}` : outcome);
    }
    console.info("[fuzz outcomes]", JSON.stringify(Object.fromEntries(Object.entries(outcomes).map(([k, v]) => [k, Object.fromEntries(v)]))));
    expect(unexpected).toEqual([]);
    expect(outcomes.data.get("ok")).toBeUndefined();
    // The resealed mutations get past the checksums: the structure checks are what refuse them.
    expect(outcomes.resealed.get("structure") ?? 0).toBeGreaterThan(900);
    expect((outcomes.raw.get("checksum") ?? 0) + (outcomes.raw.get("structure") ?? 0)).toBeGreaterThan(1200);
  });
});
