/**
 * The reader of this library's version 1 checkpoint format (src/checkpoint/BundleFormat.ts),
 * which nothing writes any more: it reads copies of the checkpoints a release that wrote it
 * made (test/checkpoint/fixtures/monitored-session-v1; see its README.md for the values), and
 * every corruption of them is a DataLossError.
 */
import { cp, readFile, rm, truncate, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { beforeEach, describe, expect, it } from "vitest";

import { DataLossError, NotFoundError } from "../../src/errors.js";
import type { TensorValue } from "../../src/session/Tensor.js";
import {
  BUNDLE_FORMAT,
  dataPath,
  indexPath,
  manifestChecksum,
  parseManifest,
  readBundle,
  readManifest,
} from "../../src/checkpoint/BundleFormat.js";
import { bits } from "../util/tensorBits.js";
import { useTempDirs } from "../util/tempDirs.js";
import { v1FixtureValues } from "./helpers.js";

const tempDir = useTempDirs("ms-ckpt-v1-");
const FIXTURES = fileURLToPath(new URL("./fixtures/monitored-session-v1/", import.meta.url));

let dir: string;
beforeEach(async () => {
  dir = tempDir();
  await cp(FIXTURES, dir, { recursive: true });
});

/** The prefix of the copy of `model.ckpt-<n>`. */
const ckpt = (n: 3 | 7): string => join(dir, `model.ckpt-${n}`);

/** The fixture's index, parsed as plain JSON (for edits). */
const indexJson = async (n: 3 | 7): Promise<Record<string, unknown> & { tensors: Record<string, unknown>[] }> =>
  JSON.parse(await readFile(indexPath(ckpt(n)), "utf8")) as Record<string, unknown> & { tensors: Record<string, unknown>[] };

/** What `f` threw (failing the test if it did not throw). */
const thrown = (f: () => unknown): Error => {
  try {
    f();
  } catch (e) {
    return e as Error;
  }
  throw new Error("expected a throw");
};

describe("reading the committed version 1 checkpoints", () => {
  it("reads every value of the README bit-exactly (NaN, -0, -Infinity, int32 extremes, bool, UTF-8), with step and createdAtMs", async () => {
    for (const n of [3, 7] as const) {
      const back = await readBundle(ckpt(n));
      expect(back.step).toBe(n * 100);
      expect(back.createdAtMs).toBe(1_790_000_000_000 + n);
      const want = v1FixtureValues(n);
      expect([...back.values.keys()]).toEqual([...want.keys()]);
      expect(bits(back.values)).toEqual(bits(want));
      for (const [name, v] of want) expect((back.values.get(name) as TensorValue).data.constructor, name).toBe(v.data.constructor);
      // The NaN the fixture holds is the canonical quiet NaN, its zero the negative one.
      const kernel = (back.values.get("dense/kernel") as TensorValue).data as Float32Array;
      expect([...new Uint32Array(kernel.buffer, kernel.byteOffset, 4)].slice(2)).toEqual([0x80000000, 0x7fc00000]);
    }
  });

  it("decodes the numeric tensors in place: they all view one buffer", async () => {
    const back = await readBundle(ckpt(7));
    const buffers = new Set([...back.values.values()].filter((v) => v.dtype !== "string").map((v) => (v.data as Uint8Array).buffer));
    expect(buffers.size).toBe(1);
  });

  it("readManifest reads the index alone: the entries at 8-byte-aligned offsets, without the data file", async () => {
    await rm(dataPath(ckpt(7)));
    const m = await readManifest(ckpt(7));
    expect(m).toMatchObject({ format: BUNDLE_FORMAT, version: 1, step: 700, createdAtMs: 1_790_000_000_007, dataBytes: 80 });
    expect(m.tensors.map((e) => [e.name, e.dtype, e.shape, e.offset, e.length])).toEqual([
      ["dense/kernel", "float32", [2, 2], 0, 16],
      ["dense/bias", "float64", [2], 16, 16],
      ["global_step", "int64", [], 32, 8],
      ["counts", "int32", [2], 40, 8],
      ["mask", "bool", [3], 48, 3],
      ["vocab", "string", [3], 56, 24],
    ]);
  });

  it("a missing checkpoint is NotFoundError; a missing data file is DataLossError", async () => {
    await expect(readBundle(join(dir, "model.ckpt-1"))).rejects.toThrow(NotFoundError);
    await expect(readManifest(join(dir, "model.ckpt-1"))).rejects.toThrow(NotFoundError);
    await rm(dataPath(ckpt(3)));
    await expect(readBundle(ckpt(3))).rejects.toThrow(DataLossError);
    await expect(readBundle(ckpt(3))).rejects.toThrow(/model\.ckpt-3\.data-00000-of-00001 is missing \(its index exists\)/);
    // Both missing: the index is what is reported.
    await rm(indexPath(ckpt(3)));
    await expect(readBundle(ckpt(3))).rejects.toThrow(NotFoundError);
  });
});

describe("corrupt version 1 checkpoints", () => {
  it("detects a flipped bit at every byte of a tensor in the data file; the padding between tensors is no tensor's", async () => {
    const prefix = ckpt(7);
    const original = await readFile(dataPath(prefix));
    const m = await readManifest(prefix);
    const covered = (i: number): boolean => m.tensors.some((e) => i >= e.offset && i < e.offset + e.length);
    const padding: number[] = [];
    for (let i = 0; i < original.length; i++) {
      const bad = Buffer.from(original);
      bad[i] = (bad[i] as number) ^ 0x10;
      await writeFile(dataPath(prefix), bad);
      if (covered(i)) {
        const error = await readBundle(prefix).then(() => undefined, (e: unknown) => e);
        expect(error, `byte ${i}`).toBeInstanceOf(DataLossError);
        expect((error as Error).message, `byte ${i}`).toMatch(/CRC32C mismatch for "/);
      } else {
        padding.push(i);
        // Not part of any tensor: the values still verify, and are the fixture's.
        expect(bits((await readBundle(prefix)).values), `byte ${i}`).toEqual(bits(v1FixtureValues(7)));
      }
    }
    // "mask" (3 bytes at 48) is followed by padding up to "vocab" at 56.
    expect(padding).toEqual([51, 52, 53, 54, 55]);
  });

  it("rejects the data file truncated at every byte offset, and an extended one", async () => {
    const prefix = ckpt(3);
    const original = await readFile(dataPath(prefix));
    expect(original.length).toBe(80);
    for (let n = 0; n < original.length; n++) {
      await writeFile(dataPath(prefix), original.subarray(0, n));
      const error = await readBundle(prefix).then(() => undefined, (e: unknown) => e);
      expect(error, `length ${n}`).toBeInstanceOf(DataLossError);
      expect((error as Error).message, `length ${n}`).toContain(`has ${n} bytes but its index says 80 (truncated)`);
    }
    await writeFile(dataPath(prefix), Buffer.concat([original, Buffer.from([0])]));
    await expect(readBundle(prefix)).rejects.toThrow(/has 81 bytes but its index says 80 \(extended\)/);
  });

  it("a hugely extended (sparse) data file is DataLossError, not an allocation failure", async () => {
    await truncate(dataPath(ckpt(7)), 2 ** 40); // 1 TiB, sparse: no disk space used
    await expect(readBundle(ckpt(7))).rejects.toThrow(/has 1099511627776 bytes but its index says 80 \(extended\)/);
  });

  it("rejects the index truncated at every byte offset", async () => {
    const prefix = ckpt(7);
    const original = await readFile(indexPath(prefix));
    const skipped: number[] = [];
    for (let n = 0; n < original.length; n++) {
      // Trailing whitespace is not content: a cut there leaves the same JSON.
      if (original.subarray(n).toString().trim() === "") {
        skipped.push(n);
        continue;
      }
      await writeFile(indexPath(prefix), original.subarray(0, n));
      await expect(readBundle(prefix), `length ${n}`).rejects.toThrow(DataLossError);
    }
    expect(skipped).toEqual([original.length - 1]);
  });

  it("rejects the index with any byte changed (each bit 0 and each bit 7 flipped)", async () => {
    const prefix = ckpt(3);
    const original = await readFile(indexPath(prefix));
    for (const mask of [0x01, 0x80]) {
      for (let i = 0; i < original.length; i++) {
        const bad = Buffer.from(original);
        bad[i] = (bad[i] as number) ^ mask;
        await writeFile(indexPath(prefix), bad);
        await expect(readBundle(prefix), `byte ${i} ^ ${mask}`).rejects.toThrow(DataLossError);
      }
    }
    // Changing a digit keeps valid JSON: only the manifest's checksum can tell.
    const text = original.toString("utf8");
    const at = text.indexOf('"createdAtMs": 1790000000003') + '"createdAtMs": 179000000000'.length;
    await writeFile(indexPath(prefix), `${text.slice(0, at)}4${text.slice(at + 1)}`);
    await expect(readBundle(prefix)).rejects.toThrow(/manifest checksum is 0x[0-9a-f]{8} but its body hashes to 0x[0-9a-f]{8}/);
  });

  it("ignores key order and whitespace in the index: the checksum covers the values only", async () => {
    const json = await indexJson(7);
    const reordered = Object.fromEntries(Object.entries(json).reverse());
    await writeFile(indexPath(ckpt(7)), JSON.stringify(reordered));
    expect((await readBundle(ckpt(7))).step).toBe(700);
  });
});

describe("parseManifest", () => {
  it("lists every manifest problem with its path", async () => {
    const json = await indexJson(7);
    const tensors = json.tensors.map((e, i) => (i === 0 ? { ...e, dtype: "float16", shape: [-1, 2], extra: true } : e));
    const error = thrown(() => parseManifest(JSON.stringify({ ...json, step: 1.5, dataBytes: -1, tensors }), "x.index"));
    expect(error).toBeInstanceOf(DataLossError);
    const { message } = error;
    expect(message).toContain("checkpoint index x.index is invalid");
    expect(message).toContain("step: expected a safe integer, got 1.5");
    expect(message).toContain("dataBytes: expected an integer >= 0, got -1");
    expect(message).toContain('tensors[0].dtype: expected a dtype, got "float16"');
    expect(message).toContain("tensors[0].shape[0]: expected an integer >= 0, got -1");
    expect(message).toContain("tensors[0].extra: unknown field");
    // The entries that are fine are not listed.
    expect(message).not.toContain("tensors[1]");
  });

  it("rejects manifest keys that are Object.prototype members as unknown fields", async () => {
    const text = (await readFile(indexPath(ckpt(3)), "utf8")).trimEnd();
    expect(parseManifest(text, "x.index").step).toBe(300);
    for (const key of ["constructor", "toString", "__proto__", "hasOwnProperty"]) {
      // JSON.parse makes "__proto__" an own key, as it does every other key.
      const edited = `${text.slice(0, -1)},${JSON.stringify(key)}:1}`;
      expect(() => parseManifest(edited, "x.index"), key).toThrow(`${key}: unknown field`);
    }
  });

  it("reports a newer format version clearly", async () => {
    const json = await indexJson(7);
    for (const version of [2, "1"]) {
      const error = thrown(() => parseManifest(JSON.stringify({ ...json, version }), "x.index"));
      expect(error).toBeInstanceOf(DataLossError);
      expect(error.message).toBe(`checkpoint index x.index has format version ${JSON.stringify(version)}; this library reads version 1`);
    }
  });

  it("a re-checksummed manifest must still be consistent: sizes, bounds, alignment, duplicate names", async () => {
    const json = await indexJson(7);
    const { checksum: _, ...body } = json;
    const reseal = (b: Record<string, unknown>): string => JSON.stringify({ ...b, checksum: manifestChecksum(b as never) });
    expect(parseManifest(reseal(body)).step).toBe(700);
    const entries = json.tensors;
    const edited = [
      { ...entries[0], length: 12 },
      { ...entries[1], offset: 12 },
      { ...entries[2], name: "dense/kernel" },
      ...entries.slice(3),
    ];
    const error = thrown(() => parseManifest(reseal({ ...body, dataBytes: 70, tensors: edited }), "x.index"));
    expect(error).toBeInstanceOf(DataLossError);
    expect(error.message).toContain("checkpoint index x.index is inconsistent");
    expect(error.message).toContain('tensors[0] ("dense/kernel"): float32[2, 2] needs 16 bytes, index says 12');
    expect(error.message).toContain('tensors[1] ("dense/bias"): offset 12 is not aligned to 8 bytes');
    expect(error.message).toContain('tensors[2] ("dense/kernel"): duplicate variable name');
    expect(error.message).toContain('tensors[5] ("vocab"): bytes 56..80 lie beyond the data size 70');
  });
});
