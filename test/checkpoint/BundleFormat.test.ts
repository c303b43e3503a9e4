import { crc32c } from "@node-rs/crc32";
import { readFile, stat, truncate, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { beforeEach, describe, expect, it } from "vitest";

import { DataLossError, InvalidArgumentError, NotFoundError } from "../../src/errors.js";
import type { TensorValue } from "../../src/session/Tensor.js";
import {
  BUNDLE_FORMAT,
  dataPath,
  indexPath,
  manifestChecksum,
  parseManifest,
  readBundle,
  writeBundle,
} from "../../src/checkpoint/BundleFormat.js";
import { ls } from "./helpers.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-ckpt-");

let dir: string;
beforeEach(async () => {
  dir = tempDir();
});
/** Bits of a float32 array, so NaN payloads and -0 compare exactly. */
const bits32 = (a: Float32Array): number[] => [...new Uint32Array(a.buffer, a.byteOffset, a.length)];
const bits64 = (a: Float64Array): bigint[] => [...new BigUint64Array(a.buffer, a.byteOffset, a.length)];

const nanWithPayload32 = (): Float32Array => {
  const a = new Float32Array(3);
  const u = new Uint32Array(a.buffer);
  u[0] = 0x7fc00001; // quiet NaN, payload 1
  u[1] = 0xffa0beef; // negative NaN, other payload
  u[2] = 0x7f800001; // signalling NaN
  return a;
};

const everyDtype = (): Map<string, TensorValue> =>
  new Map<string, TensorValue>([
    ["dense/kernel", { dtype: "float32", shape: [2, 3], data: Float32Array.of(1.5, -0, Infinity, -Infinity, 3.4028234663852886e38, 1e-45) }],
    ["a/b/c", { dtype: "float32", shape: [3], data: nanWithPayload32() }],
    ["f64", { dtype: "float64", shape: [5], data: Float64Array.of(Math.PI, -0, Number.NaN, Number.MIN_VALUE, -Number.MAX_VALUE) }],
    ["i32", { dtype: "int32", shape: [2, 2], data: Int32Array.of(0, -1, 2147483647, -2147483648) }],
    ["global_step", { dtype: "int64", shape: [], data: BigInt64Array.of(9007199254740993n) }],
    ["i64", { dtype: "int64", shape: [3], data: BigInt64Array.of(-9223372036854775808n, 9223372036854775807n, 0n) }],
    ["flags", { dtype: "bool", shape: [3], data: Uint8Array.of(1, 0, 1) }],
    ["words", { dtype: "string", shape: [2, 2], data: ["", "héllo", "日本語 🎉", "with\0nul\nand newline"] }],
    ["empty", { dtype: "float64", shape: [0, 4], data: new Float64Array(0) }],
    ["s", { dtype: "string", shape: [], data: ["scalar"] }],
  ]);

describe("BundleFormat round trip", () => {
  it("round-trips every dtype bit-exactly, with nested names, NaN payloads, -0 and infinities", async () => {
    const prefix = join(dir, "ckpt-7");
    const values = everyDtype();
    await writeBundle(prefix, values, { step: 7, createdAtMs: 1_700_000_000_123 });
    const back = await readBundle(prefix);
    expect(back.step).toBe(7);
    expect(back.createdAtMs).toBe(1_700_000_000_123);
    expect([...back.values.keys()]).toEqual([...values.keys()]);
    for (const [name, v] of values) {
      const r = back.values.get(name) as TensorValue;
      expect(r.dtype, name).toBe(v.dtype);
      expect(r.shape, name).toEqual(v.shape);
      if (v.data instanceof Float32Array) expect(bits32(r.data as Float32Array), name).toEqual(bits32(v.data));
      else if (v.data instanceof Float64Array) expect(bits64(r.data as Float64Array), name).toEqual(bits64(v.data));
      else expect(r.data, name).toEqual(v.data);
      expect(r.data.constructor).toBe(v.data.constructor);
    }
    expect(await ls(dir)).toEqual(["ckpt-7.data-00000-of-00001", "ckpt-7.index"]);
  });

  it("lays tensors out little-endian at 8-byte-aligned offsets, as the manifest says (independent decoder)", async () => {
    const prefix = join(dir, "ckpt-1");
    await writeBundle(
      prefix,
      new Map<string, TensorValue>([
        ["x", { dtype: "int32", shape: [1], data: Int32Array.of(0x01020304) }],
        ["y", { dtype: "float64", shape: [1], data: Float64Array.of(1) }],
        ["s", { dtype: "string", shape: [1], data: ["ab"] }],
      ]),
      { step: 1, createdAtMs: 0 },
    );
    const manifest = JSON.parse(await readFile(indexPath(prefix), "utf8")) as {
      format: string;
      version: number;
      dataBytes: number;
      tensors: { name: string; offset: number; length: number; crc32c: number }[];
      checksum: number;
    };
    expect(manifest.format).toBe(BUNDLE_FORMAT);
    expect(manifest.version).toBe(1);
    const data = await readFile(dataPath(prefix));
    // x at 0: 04 03 02 01, 4 bytes of padding; y at 8: 1.0 LE; s at 16: u32 2, "ab"
    expect([...data]).toEqual([4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 2, 0, 0, 0, 0x61, 0x62]);
    expect(manifest.tensors.map((t) => [t.name, t.offset, t.length])).toEqual([
      ["x", 0, 4],
      ["y", 8, 8],
      ["s", 16, 6],
    ]);
    expect(manifest.dataBytes).toBe(22);
    for (const t of manifest.tensors) expect(t.crc32c).toBe(crc32c(data.subarray(t.offset, t.offset + t.length)));
  });

  it("writes an empty checkpoint", async () => {
    const prefix = join(dir, "empty-0");
    await writeBundle(prefix, new Map(), { step: 0, createdAtMs: 0 });
    const back = await readBundle(prefix);
    expect(back.values.size).toBe(0);
    expect((await stat(dataPath(prefix))).size).toBe(0);
  });

  it("rejects malformed tensors before writing anything, naming the variable", async () => {
    const prefix = join(dir, "bad-1");
    await expect(
      writeBundle(prefix, new Map([["w", { dtype: "float32", shape: [3], data: new Float32Array(2) } as TensorValue]]), { step: 1, createdAtMs: 0 }),
    ).rejects.toThrow(/variable "w" has shape \[3\]/);
    await expect(
      writeBundle(prefix, new Map([["w", { dtype: "float32", shape: [2], data: new Float64Array(2) } as unknown as TensorValue]]), { step: 1, createdAtMs: 0 }),
    ).rejects.toThrow(InvalidArgumentError);
    await expect(
      writeBundle(prefix, new Map([["s", { dtype: "string", shape: [1], data: ["\uD800x"] } as TensorValue]]), { step: 1, createdAtMs: 0 }),
    ).rejects.toThrow(/variable "s" element 0 is not well-formed Unicode/);
    await expect(writeBundle(`${dir}/a\0b`, new Map(), { step: 1, createdAtMs: 0 })).rejects.toThrow(/NUL byte/);
    expect(await ls(dir)).toEqual([]);
  });

  it("a missing checkpoint is NotFoundError; a missing data file is DataLossError", async () => {
    await expect(readBundle(join(dir, "nope-1"))).rejects.toThrow(NotFoundError);
    const prefix = join(dir, "ckpt-1");
    await writeBundle(prefix, everyDtype(), { step: 1, createdAtMs: 0 });
    await writeFile(dataPath(prefix), "");
    await expect(readBundle(prefix)).rejects.toThrow(/has 0 bytes but its index says \d+ \(truncated\)/);
  });
});

describe("BundleFormat corruption", () => {
  const small = (): Map<string, TensorValue> =>
    new Map<string, TensorValue>([
      ["w", { dtype: "float32", shape: [3], data: Float32Array.of(1, 2, 3) }],
      ["step", { dtype: "int64", shape: [], data: BigInt64Array.of(5n) }],
      ["names", { dtype: "string", shape: [2], data: ["a", "bc"] }],
    ]);

  it("detects a flipped bit at every byte of the data file", async () => {
    const prefix = join(dir, "ckpt-1");
    await writeBundle(prefix, small(), { step: 1, createdAtMs: 0 });
    const original = await readFile(dataPath(prefix));
    const m = parseManifest(await readFile(indexPath(prefix), "utf8"));
    const covered = (i: number): boolean => m.tensors.some((t) => i >= t.offset && i < t.offset + t.length);
    let detected = 0;
    for (let i = 0; i < original.length; i++) {
      const bad = Buffer.from(original);
      bad[i] = (bad[i] as number) ^ 0x10;
      await writeFile(dataPath(prefix), bad);
      if (covered(i)) {
        await expect(readBundle(prefix), `byte ${i}`).rejects.toThrow(/CRC32C mismatch for "/);
        detected++;
      } else {
        // alignment padding: not part of any tensor; the values still verify
        await expect(readBundle(prefix)).resolves.toBeDefined();
      }
    }
    expect(detected).toBeGreaterThan(20);
  });

  it("rejects the data file truncated at every byte offset, and an extended one", async () => {
    const prefix = join(dir, "ckpt-1");
    await writeBundle(prefix, small(), { step: 1, createdAtMs: 0 });
    const original = await readFile(dataPath(prefix));
    for (let n = 0; n < original.length; n++) {
      await writeFile(dataPath(prefix), original.subarray(0, n));
      await expect(readBundle(prefix), `length ${n}`).rejects.toThrow(DataLossError);
    }
    await writeFile(dataPath(prefix), Buffer.concat([original, Buffer.from([0])]));
    await expect(readBundle(prefix)).rejects.toThrow(/extended/);
  });

  it("a hugely extended (sparse) data file is DataLossError, not an allocation failure", async () => {
    const prefix = join(dir, "ckpt-1");
    await writeBundle(prefix, small(), { step: 1, createdAtMs: 0 });
    await truncate(dataPath(prefix), 2 ** 40); // 1 TiB, sparse: no disk space used
    await expect(readBundle(prefix)).rejects.toThrow(/has 1099511627776 bytes but its index says \d+ \(extended\)/);
  });

  it("rejects the index truncated at every byte offset or with any byte changed", async () => {
    const prefix = join(dir, "ckpt-1");
    await writeBundle(prefix, small(), { step: 1, createdAtMs: 0 });
    const original = await readFile(indexPath(prefix));
    for (let n = 0; n < original.length; n++) {
      // Trailing whitespace is not content: a cut there leaves the same JSON.
      if (original.subarray(n).toString().trim() === "") continue;
      await writeFile(indexPath(prefix), original.subarray(0, n));
      await expect(readBundle(prefix), `length ${n}`).rejects.toThrow(DataLossError);
    }
    let detected = 0;
    for (let i = 0; i < original.length; i++) {
      const c = String.fromCharCode(original[i] as number);
      if (!/[0-9]/.test(c)) continue; // digits: changing one keeps valid JSON, so only the checksum can tell
      const bad = Buffer.from(original);
      bad[i] = c === "9" ? 0x38 : (bad[i] as number) + 1;
      await writeFile(indexPath(prefix), bad);
      await expect(readBundle(prefix), `byte ${i}`).rejects.toThrow(DataLossError);
      detected++;
    }
    expect(detected).toBeGreaterThan(20);
  });

  it("lists every manifest problem with its path", () => {
    const body = {
      format: BUNDLE_FORMAT,
      version: 1,
      step: 1.5,
      createdAtMs: 0,
      dataBytes: -1,
      tensors: [{ name: "w", dtype: "float16", shape: [-1], offset: 0, length: 4, crc32c: 0, extra: true }],
      checksum: 0,
    };
    let message = "";
    try {
      parseManifest(JSON.stringify(body), "x.index");
    } catch (e) {
      expect(e).toBeInstanceOf(DataLossError);
      message = (e as Error).message;
    }
    expect(message).toContain("checkpoint index x.index is invalid");
    expect(message).toContain("step: expected a safe integer, got 1.5");
    expect(message).toContain("dataBytes: expected an integer >= 0, got -1");
    expect(message).toContain('tensors[0].dtype: expected a dtype, got "float16"');
    expect(message).toContain("tensors[0].shape[0]: expected an integer >= 0, got -1");
    expect(message).toContain("tensors[0].extra: unknown field");
  });

  it("rejects manifest keys that are Object.prototype members as unknown fields", () => {
    const body = { format: BUNDLE_FORMAT as typeof BUNDLE_FORMAT, version: 1 as const, step: 1, createdAtMs: 0, dataBytes: 0, tensors: [] };
    const good = { ...body, checksum: manifestChecksum(body) };
    expect(() => parseManifest(JSON.stringify(good), "x.index")).not.toThrow();
    for (const key of ["constructor", "toString", "__proto__"]) {
      // JSON.parse makes "__proto__" an own key, as it does every other key.
      const text = `${JSON.stringify(good).slice(0, -1)},${JSON.stringify(key)}:1}`;
      expect(() => parseManifest(text, "x.index"), key).toThrow(`${key}: unknown field`);
    }
  });

  it("reports a newer format version clearly, and a valid-looking manifest with a bad checksum", () => {
    expect(() => parseManifest(JSON.stringify({ format: BUNDLE_FORMAT, version: 2 }), "x.index")).toThrow(
      "checkpoint index x.index has format version 2; this library reads version 1",
    );
    const body = { format: BUNDLE_FORMAT as typeof BUNDLE_FORMAT, version: 1 as const, step: 1, createdAtMs: 0, dataBytes: 0, tensors: [] };
    const good = { ...body, checksum: manifestChecksum(body) };
    expect(parseManifest(JSON.stringify(good)).step).toBe(1);
    expect(() => parseManifest(JSON.stringify({ ...good, step: 2 }))).toThrow(/manifest checksum is 0x[0-9a-f]{8} but its body hashes to/);
    const inconsistent = { ...body, dataBytes: 2, tensors: [{ name: "w", dtype: "float32", shape: [1], offset: 0, length: 4, crc32c: 0 }] };
    expect(() => parseManifest(JSON.stringify({ ...inconsistent, checksum: manifestChecksum(inconsistent as never) }))).toThrow(
      /lie beyond the data size 2/,
    );
  });

  it("a checkpoint whose data file was cut after a crash loads nothing", async () => {
    const prefix = join(dir, "ckpt-1");
    await writeBundle(prefix, small(), { step: 1, createdAtMs: 0 });
    await truncate(dataPath(prefix), 3);
    await expect(readBundle(prefix)).rejects.toThrow(/truncated/);
  });
});
