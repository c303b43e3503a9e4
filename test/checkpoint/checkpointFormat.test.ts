/**
 * The checkpoint format (src/checkpoint/checkpointFormat.ts): checkpoints written as
 * TensorFlow's V2 bundle with the two reserved scalars, read back bit-exactly and verified;
 * corruption at every byte; reading by name; the bundles TensorFlow 2.21 wrote
 * (test/checkpoint/fixtures/tensorflow) and this library's version 1
 * (test/checkpoint/fixtures/monitored-session-v1).
 */
import { cp, readFile, rm, truncate, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { beforeEach, describe, expect, it } from "vitest";

import { DataLossError, InvalidArgumentError, NotFoundError, UnimplementedError } from "../../src/errors.js";
import type { TensorValue } from "../../src/session/Tensor.js";
import { readTensors, verifyCheckpoint } from "../../src/checkpoint/checkpointFormat.js";
import {
  CREATED_AT_TENSOR,
  OBJECT_GRAPH_TENSOR,
  STEP_TENSOR,
  TensorBundleReader,
  dataPath,
  type TensorBundleEntry,
  indexPath,
  readBundle,
  readCheckpointInfo,
  writeBundle,
  type BundleMetadata,
} from "../../src/checkpoint/index.js";
import { ls } from "./helpers.js";
import { bits } from "../util/tensorBits.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-ckpt-format-");
const TF_FIXTURES = fileURLToPath(new URL("./fixtures/tensorflow/", import.meta.url));
const V1_FIXTURES = fileURLToPath(new URL("./fixtures/monitored-session-v1/", import.meta.url));

let dir: string;
beforeEach(() => {
  dir = tempDir();
});

const META: BundleMetadata = { step: 7, createdAtMs: 1_700_000_000_123 };
/** The modification time tests give an index, distinct from {@link META}'s save time. */
const INDEX_MTIME_MS = 1_600_000_000_000;

/** Bit patterns a float round trip must keep: NaN payloads (quiet, negative, signalling). */
const nanWithPayload32 = (): Float32Array => new Float32Array(Uint32Array.of(0x7fc00001, 0xffa0beef, 0x7f800001).buffer);

/** Every dtype, nested names, names that sort before the reserved ones (uppercase) and after. */
const everyDtype = (): Map<string, TensorValue> =>
  new Map<string, TensorValue>([
    ["dense/kernel", { dtype: "float32", shape: [2, 3], data: Float32Array.of(1.5, -0, Infinity, -Infinity, 3.4028234663852886e38, 1e-45) }],
    ["Dense/nan", { dtype: "float32", shape: [3], data: nanWithPayload32() }],
    ["a/b/c/f64", { dtype: "float64", shape: [5], data: Float64Array.of(Math.PI, -0, Number.NaN, Number.MIN_VALUE, -Number.MAX_VALUE) }],
    ["i32", { dtype: "int32", shape: [2, 2], data: Int32Array.of(0, -1, 2147483647, -2147483648) }],
    ["global_step", { dtype: "int64", shape: [], data: BigInt64Array.of(9007199254740993n) }],
    ["i64", { dtype: "int64", shape: [3], data: BigInt64Array.of(-9223372036854775808n, 9223372036854775807n, 0n) }],
    ["flags", { dtype: "bool", shape: [3], data: Uint8Array.of(1, 0, 1) }],
    ["words", { dtype: "string", shape: [2, 2], data: ["", "héllo", "日本語 🎉", "with\0nul\nand newline"] }],
    ["word", { dtype: "string", shape: [], data: [""] }],
    ["empty", { dtype: "float64", shape: [0, 4], data: new Float64Array(0) }],
  ]);

/** Names in the order of their UTF-8 bytes (a bundle's key order). */
const byUtf8 = (names: Iterable<string>): string[] => [...names].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));

const hexOf = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("hex");

/** What the promise rejected with (`undefined` if it resolved). */
const rejection = (p: Promise<unknown>): Promise<unknown> => p.then(() => undefined, (e: unknown) => e);

describe("writing and reading a checkpoint", () => {
  it("round-trips every dtype bit-exactly, with nested names, step and createdAtMs", async () => {
    const prefix = join(dir, "sub", "ckpt-7");
    const values = everyDtype();
    await writeBundle(prefix, values, META);
    const back = await readBundle(prefix);
    expect(back.step).toBe(7);
    expect(back.createdAtMs).toBe(1_700_000_000_123);
    expect([...back.values.keys()].sort()).toEqual([...values.keys()].sort());
    expect(bits(back.values)).toEqual(bits(values));
    for (const [name, v] of values) expect((back.values.get(name) as TensorValue).data.constructor, name).toBe(v.data.constructor);
    expect(await ls(join(dir, "sub"))).toEqual(["ckpt-7.data-00000-of-00001", "ckpt-7.index"]);
  });

  it("writes a TensorFlow V2 bundle: every variable and the two reserved int64 scalars, each at a multiple of 8 bytes", async () => {
    const prefix = join(dir, "ckpt-7");
    const values = everyDtype();
    await writeBundle(prefix, values, META);
    const reader = await TensorBundleReader.open(prefix);
    expect(reader.header).toEqual({ numShards: 1, endianness: "little", version: { producer: 1, minConsumer: 0, badConsumers: [] } });
    const want = new Map<string, readonly [string, readonly number[]]>([...values].map(([n, v]) => [n, [v.dtype, v.shape]]));
    want.set(STEP_TENSOR, ["int64", []]);
    want.set(CREATED_AT_TENSOR, ["int64", []]);
    expect(reader.entries.map((e) => [e.name, e.dtype, e.shape])).toEqual(byUtf8(want.keys()).map((n) => [n, ...(want.get(n) as [string, number[]])]));
    // The reserved tensors sit between the uppercase and the lowercase names: padding on both sides.
    expect(reader.entries.map((e) => e.name).indexOf(STEP_TENSOR)).toBeGreaterThan(0);
    expect(reader.entries.every((e) => e.offset % 8 === 0 && e.supported && e.slices === 0)).toBe(true);
    expect((await reader.read(STEP_TENSOR)).data).toEqual(BigInt64Array.of(7n));
    expect((await reader.read(CREATED_AT_TENSOR)).data).toEqual(BigInt64Array.of(1_700_000_000_123n));
    const last = reader.entries.reduce((a, e) => Math.max(a, e.offset + e.sizeBytes), 0);
    expect((await readFile(dataPath(prefix))).length).toBe(last);
  });

  it("readCheckpointInfo: format tensorflow-v2, step, createdAtMs, the variables only, sorted by name", async () => {
    const prefix = join(dir, "ckpt-7");
    const values = everyDtype();
    const written = await writeBundle(prefix, values, META);
    const info = await readCheckpointInfo(prefix);
    expect(info).toEqual(written);
    expect(info).toMatchObject({ prefix, format: "tensorflow-v2", step: 7, createdAtMs: 1_700_000_000_123 });
    expect(info.dataBytes).toBe((await readFile(dataPath(prefix))).length);
    expect(info.tensors.map((t) => t.name)).toEqual([...values.keys()].sort());
    const reader = await TensorBundleReader.open(prefix);
    for (const t of info.tensors) {
      const v = values.get(t.name) as TensorValue;
      const e = reader.entry(t.name);
      expect(t, t.name).toEqual({ name: t.name, dtype: v.dtype, shape: v.shape, sizeBytes: e?.sizeBytes, crc32c: e?.crc32c, supported: true });
    }
  });

  it("restore decodes in place: every numeric tensor of a checkpoint views one buffer, the data file's", async () => {
    const prefix = join(dir, "ckpt-7");
    await writeBundle(prefix, everyDtype(), META);
    const back = await readBundle(prefix);
    const numeric = [...back.values.values()].filter((v) => v.dtype !== "string").map((v) => v.data as Uint8Array);
    expect(numeric).toHaveLength(8);
    const buffers = new Set(numeric.map((d) => d.buffer));
    expect(buffers.size).toBe(1);
    expect(([...buffers][0] as ArrayBuffer).byteLength).toBe((await readFile(dataPath(prefix))).length);
  });

  it("an empty checkpoint (no variables) writes and reads", async () => {
    const prefix = join(dir, "empty-0");
    await writeBundle(prefix, new Map(), { step: 0, createdAtMs: 5 });
    const back = await readBundle(prefix);
    expect(back).toEqual({ step: 0, createdAtMs: 5, values: new Map() });
    expect((await TensorBundleReader.open(prefix)).entries.map((e) => e.name)).toEqual([CREATED_AT_TENSOR, STEP_TENSOR]);
    expect((await readCheckpointInfo(prefix)).tensors).toEqual([]);
  });

  it("rejects malformed tensors and reserved names with InvalidArgumentError naming the variable, before writing anything", async () => {
    const prefix = join(dir, "run", "ckpt-1");
    const ok: [string, TensorValue] = ["ok", { dtype: "float32", shape: [1], data: Float32Array.of(1) }];
    const cases: [string, TensorValue, RegExp][] = [
      ["w", { dtype: "float32", shape: [3], data: new Float32Array(2) }, /tensor "w"/],
      ["w64", { dtype: "float32", shape: [2], data: new Float64Array(2) } as unknown as TensorValue, /tensor "w64"/],
      ["c", { dtype: "complex64", shape: [], data: [] } as unknown as TensorValue, /tensor "c" has unknown dtype complex64/],
      ["s", { dtype: "string", shape: [1], data: ["\uD800x"] }, /tensor "s" element 0 is not well-formed Unicode/],
      ["", { dtype: "float32", shape: [1], data: Float32Array.of(1) }, /must not be empty/],
      ["_MONITORED_SESSION/anything", ok[1], /variable name "_MONITORED_SESSION\/anything" is reserved/],
      [STEP_TENSOR, ok[1], /variable name "_MONITORED_SESSION\/step" is reserved/],
      [OBJECT_GRAPH_TENSOR, ok[1], /variable name "_CHECKPOINTABLE_OBJECT_GRAPH" is reserved/],
    ];
    for (const [name, value, message] of cases) {
      const error = await rejection(writeBundle(prefix, new Map([ok, [name, value]]), META));
      expect(error, name).toBeInstanceOf(InvalidArgumentError);
      expect((error as Error).message, name).toMatch(message);
      expect((error as Error).message, name).not.toContain("\n");
    }
    await expect(writeBundle(prefix, new Map([ok]), { step: 2 ** 53, createdAtMs: 0 })).rejects.toThrow(/checkpoint step 9007199254740992 is not a safe integer/);
    await expect(writeBundle(prefix, new Map([ok]), { step: 1, createdAtMs: Number.NaN })).rejects.toThrow(InvalidArgumentError);
    // Not even the checkpoint's directory was created.
    expect(await ls(dir)).toEqual([]);
  });

  it("a missing checkpoint is NotFoundError; a missing data file is DataLossError", async () => {
    const none = join(dir, "ckpt-1");
    await expect(readBundle(none)).rejects.toThrow(NotFoundError);
    await expect(readCheckpointInfo(none)).rejects.toThrow(NotFoundError);
    await expect(readTensors(none, ["a"])).rejects.toThrow(NotFoundError);
    const prefix = join(dir, "ckpt-2");
    await writeBundle(prefix, everyDtype(), META);
    await rm(dataPath(prefix));
    await expect(readBundle(prefix)).rejects.toThrow(DataLossError);
    await expect(readBundle(prefix)).rejects.toThrow(/ckpt-2\.data-00000-of-00001: missing/);
    await expect(readTensors(prefix, ["i32"])).rejects.toThrow(DataLossError);
  });
});

describe("corrupt checkpoints", () => {
  /** A checkpoint whose data has padding, the reserved tensors in the middle, and ends with a tensor. */
  const small = (): Map<string, TensorValue> =>
    new Map<string, TensorValue>([
      ["Dense/kernel", { dtype: "float32", shape: [3], data: Float32Array.of(1, 2, 3) }],
      ["flags", { dtype: "bool", shape: [3], data: Uint8Array.of(1, 0, 1) }],
      ["names", { dtype: "string", shape: [2], data: ["a", "bc"] }],
      ["step_count", { dtype: "int64", shape: [], data: BigInt64Array.of(5n) }],
    ]);

  const written = async (): Promise<{ prefix: string; original: Buffer; reader: TensorBundleReader }> => {
    const prefix = join(dir, "ckpt-7");
    await writeBundle(prefix, small(), META);
    await utimes(indexPath(prefix), new Date(INDEX_MTIME_MS), new Date(INDEX_MTIME_MS));
    return { prefix, original: await readFile(dataPath(prefix)), reader: await TensorBundleReader.open(prefix) };
  };

  it("a changed byte inside a variable or the step is DataLossError; in padding or the save time the variables still restore", async () => {
    const { prefix, original, reader } = await written();
    const owner = (i: number): string | undefined => reader.entries.find((e) => i >= e.offset && i < e.offset + e.sizeBytes)?.name;
    const seen = { variable: 0, step: 0, createdAt: 0, padding: 0 };
    for (let i = 0; i < original.length; i++) {
      const bad = Buffer.from(original);
      bad[i] = (bad[i] as number) ^ 0xff;
      await writeFile(dataPath(prefix), bad);
      const name = owner(i);
      if (name === CREATED_AT_TENSOR || name === undefined) {
        const back = await readBundle(prefix);
        expect(bits(back.values), `byte ${i}`).toEqual(bits(small()));
        expect(back.step, `byte ${i}`).toBe(7);
        // The save time is advisory: a corrupt one gives way to the index's modification time.
        expect(back.createdAtMs, `byte ${i}`).toBe(name === undefined ? META.createdAtMs : INDEX_MTIME_MS);
        seen[name === undefined ? "padding" : "createdAt"]++;
      } else {
        const error = await rejection(readBundle(prefix));
        expect(error, `byte ${i} (${name})`).toBeInstanceOf(DataLossError);
        expect((error as Error).message, `byte ${i}`).toContain(`tensor ${JSON.stringify(name)}`);
        seen[name === STEP_TENSOR ? "step" : "variable"]++;
      }
    }
    expect(seen.createdAt).toBe(8);
    expect(seen.step).toBe(8);
    expect(seen.variable).toBe(12 + 3 + 9 + 8);
    expect(seen.padding).toBe(original.length - 8 - 8 - 32);
    expect(seen.padding).toBeGreaterThan(0);
  });

  it("rejects the data file truncated at every offset below its end", async () => {
    const { prefix, original } = await written();
    for (let n = 0; n < original.length; n++) {
      await writeFile(dataPath(prefix), original.subarray(0, n));
      expect(await rejection(readBundle(prefix)), `length ${n}`).toBeInstanceOf(DataLossError);
    }
    await writeFile(dataPath(prefix), original);
    expect(bits((await readBundle(prefix)).values)).toEqual(bits(small()));
  });

  it("rejects the index truncated at every offset with DataLossError, never another error", async () => {
    const { prefix } = await written();
    const original = await readFile(indexPath(prefix));
    for (let n = 0; n < original.length; n++) {
      await writeFile(indexPath(prefix), original.subarray(0, n));
      for (const read of [readBundle, readCheckpointInfo, (p: string) => readTensors(p, ["flags"])]) {
        const error = await rejection(read(prefix));
        expect(error, `length ${n}`).toBeInstanceOf(DataLossError);
        expect((error as Error).message, `length ${n}`).not.toContain("\n");
      }
    }
  });
});

describe("readTensors", () => {
  it("TensorFlow V2: reads only the named variables, verified; unknown and reserved names are left out", async () => {
    const prefix = join(dir, "ckpt-3");
    const values = everyDtype();
    await writeBundle(prefix, values, META);
    const got = await readTensors(prefix, ["i32", "words", "nope", STEP_TENSOR, OBJECT_GRAPH_TENSOR]);
    expect([...got.keys()]).toEqual(["i32", "words"]);
    expect(bits(got)).toEqual(bits(new Map([...values].filter(([n]) => n === "i32" || n === "words"))));
    expect((await readTensors(prefix, [])).size).toBe(0);
    // Corrupt "i32": reading it fails, reading another still works (the rest is not read).
    const reader = await TensorBundleReader.open(prefix);
    const at = (reader.entry("i32") as { offset: number }).offset;
    const data = await readFile(dataPath(prefix));
    data[at] = (data[at] as number) ^ 1;
    await writeFile(dataPath(prefix), data);
    await expect(readTensors(prefix, ["i32"])).rejects.toThrow(DataLossError);
    expect(bits(await readTensors(prefix, ["flags"]))).toEqual(bits(new Map([["flags", values.get("flags") as TensorValue]])));
    await expect(readBundle(prefix)).rejects.toThrow(DataLossError);
  });

  it("version 1: reads only the named variables, verified; unknown names are left out", async () => {
    await cp(V1_FIXTURES, dir, { recursive: true });
    const prefix = join(dir, "model.ckpt-7");
    const got = await readTensors(prefix, ["counts", "vocab", "nope"]);
    expect([...got.keys()]).toEqual(["counts", "vocab"]);
    expect(bits(got)).toEqual(
      bits(
        new Map<string, TensorValue>([
          ["counts", { dtype: "int32", shape: [2], data: Int32Array.of(-2147483648, 2147483647) }],
          ["vocab", { dtype: "string", shape: [3], data: ["a", "", "Grüße ✓"] }],
        ]),
      ),
    );
    expect((await readTensors(prefix, ["nope"])).size).toBe(0);
    const original = await readFile(dataPath(prefix));
    // "counts" is bytes 40..48 (see the fixture's index).
    const bad = Buffer.from(original);
    bad[41] = (bad[41] as number) ^ 1;
    await writeFile(dataPath(prefix), bad);
    await expect(readTensors(prefix, ["counts"])).rejects.toThrow(/CRC32C mismatch for "counts"/);
    expect([...(await readTensors(prefix, ["vocab"])).keys()]).toEqual(["vocab"]);
    // Cut after "mask": what lies before the cut still reads, "vocab" is truncated.
    await writeFile(dataPath(prefix), original.subarray(0, 51));
    expect((await readTensors(prefix, ["global_step"])).get("global_step")?.data).toEqual(BigInt64Array.of(700n));
    await expect(readTensors(prefix, ["vocab"])).rejects.toThrow(/is truncated: "vocab" ends at byte 80, the file has 51/);
    await rm(dataPath(prefix));
    await expect(readTensors(prefix, ["counts"])).rejects.toThrow(DataLossError);
  });
});

interface Expected {
  readonly prefix: string;
  readonly tensors: Record<string, { dtype: string; shape: number[]; hex?: string; strings?: string[] }>;
}
const expectedOf = async (fixture: string): Promise<Expected> => JSON.parse(await readFile(join(TF_FIXTURES, fixture, "expected.json"), "utf8")) as Expected;

/** A value as expected.json describes it: the hex of its bytes, or of each string's UTF-8. */
const asExpected = (v: TensorValue): { dtype: string; shape: readonly number[]; hex?: string; strings?: string[] } =>
  v.dtype === "string"
    ? { dtype: v.dtype, shape: v.shape, strings: (v.data as readonly string[]).map((s) => Buffer.from(s, "utf8").toString("hex")) }
    : { dtype: v.dtype, shape: v.shape, hex: hexOf(v.data as Uint8Array) };

/** Copies the files of a fixture's bundle into `dir` under the prefix `name`; returns the new prefix. */
const copyBundle = async (fixture: string, from: string, name: string): Promise<string> => {
  for (const suffix of [".index", ".data-00000-of-00001"]) await cp(join(TF_FIXTURES, fixture, `${from}${suffix}`), join(dir, `${name}${suffix}`));
  return join(dir, name);
};

describe("bundles TensorFlow 2.21 wrote", () => {
  it("saver_v1 (model.ckpt-5): every tensor bit-exactly, the step from global_step", async () => {
    const expected = await expectedOf("saver_v1");
    const back = await readBundle(join(TF_FIXTURES, "saver_v1", expected.prefix));
    expect(Object.fromEntries([...back.values].map(([n, v]) => [n, asExpected(v)]))).toEqual(expected.tensors);
    expect(back.step).toBe(5);
    // Under another number the step is still global_step's, and the time the index's.
    const prefix = await copyBundle("saver_v1", expected.prefix, "model.ckpt-9");
    await utimes(indexPath(prefix), new Date(INDEX_MTIME_MS), new Date(INDEX_MTIME_MS));
    const copy = await readBundle(prefix);
    expect({ step: copy.step, createdAtMs: copy.createdAtMs }).toEqual({ step: 5, createdAtMs: INDEX_MTIME_MS });
    expect(await readCheckpointInfo(prefix)).toMatchObject({ format: "tensorflow-v2", step: 5, createdAtMs: INDEX_MTIME_MS });
  });

  it("checkpoint_v2 (tf.train.Checkpoint): the object graph is left out, the rest bit-exactly; the step from the prefix number, else 0", async () => {
    const expected = await expectedOf("checkpoint_v2");
    expect(Object.keys(expected.tensors)).toContain(OBJECT_GRAPH_TENSOR);
    const back = await readBundle(join(TF_FIXTURES, "checkpoint_v2", expected.prefix));
    const { [OBJECT_GRAPH_TENSOR]: _graph, ...variables } = expected.tensors;
    expect(Object.fromEntries([...back.values].map(([n, v]) => [n, asExpected(v)]))).toEqual(variables);
    expect(back.step).toBe(0);
    const info = await readCheckpointInfo(join(TF_FIXTURES, "checkpoint_v2", expected.prefix));
    expect(info.tensors.map((t) => t.name)).toEqual(Object.keys(variables).sort());
    const prefix = await copyBundle("checkpoint_v2", expected.prefix, "ckpt-12");
    expect((await readBundle(prefix)).step).toBe(12);
    expect((await readCheckpointInfo(prefix)).step).toBe(12);
  });

  it("keras3 bundles restore bit-exactly", async () => {
    for (const fixture of ["keras3_sequential", "keras3_uncompiled"]) {
      const expected = await expectedOf(fixture);
      const back = await readBundle(join(TF_FIXTURES, fixture, expected.prefix));
      const { [OBJECT_GRAPH_TENSOR]: _graph, ...variables } = expected.tensors;
      expect(Object.fromEntries([...back.values].map(([n, v]) => [n, asExpected(v)])), fixture).toEqual(variables);
    }
  });

  it("savev2_all_dtypes: readCheckpointInfo lists unsupported dtypes; readBundle refuses them in one line naming the tensor and its dtype", async () => {
    const expected = await expectedOf("savev2_all_dtypes");
    const prefix = join(TF_FIXTURES, "savev2_all_dtypes", expected.prefix);
    const info = await readCheckpointInfo(prefix);
    expect(info.format).toBe("tensorflow-v2");
    expect(info.tensors.map((t) => [t.name, t.dtype, t.shape])).toEqual(Object.keys(expected.tensors).sort().map((n) => [n, expected.tensors[n]?.dtype, expected.tensors[n]?.shape]));
    expect(info.tensors.filter((t) => !t.supported).map((t) => t.name)).toEqual(["bfloat16", "complex64", "float16", "int16", "int8", "uint8"]);
    const error = await rejection(readBundle(prefix));
    expect(error).toBeInstanceOf(UnimplementedError);
    expect((error as Error).message).toBe('tensor "bfloat16" has dtype bfloat16, which this reader does not read (it reads float32, float64, int32, int64, bool and string)');
    // Not corruption: every checksum verifies, those of the dtypes this library cannot read too.
    await expect(verifyCheckpoint(prefix)).resolves.toBeUndefined();
  });

  it("verifyCheckpoint: every tensor of either format, the reserved ones and TensorFlow's object graph included", async () => {
    const prefix = join(dir, "model.ckpt-4");
    await writeBundle(prefix, new Map<string, TensorValue>([["w", { dtype: "float32", shape: [2], data: Float32Array.of(1, 2) }]]), { step: 4, createdAtMs: 9 });
    await expect(verifyCheckpoint(prefix)).resolves.toBeUndefined();
    // The save time is advisory for a restore, not for a verification.
    const at = (await TensorBundleReader.open(prefix)).entry(CREATED_AT_TENSOR)?.offset as number;
    const bytes = await readFile(dataPath(prefix));
    bytes[at] = (bytes[at] as number) ^ 1;
    await writeFile(dataPath(prefix), bytes);
    expect((await readBundle(prefix)).values.get("w")?.data).toEqual(Float32Array.of(1, 2));
    await expect(verifyCheckpoint(prefix)).rejects.toThrow(/tensor "_MONITORED_SESSION\/created_at_ms": Checksum does not match/);
    // TensorFlow's object graph (a string tensor, not a variable) is verified too.
    const tf = await copyBundle("checkpoint_v2", "ckpt", "tf-copy");
    await expect(verifyCheckpoint(tf)).resolves.toBeUndefined();
    const graph = (await TensorBundleReader.open(tf)).entry(OBJECT_GRAPH_TENSOR) as TensorBundleEntry;
    const data = await readFile(dataPath(tf));
    data[graph.offset + graph.sizeBytes - 1] = (data[graph.offset + graph.sizeBytes - 1] as number) ^ 1;
    await writeFile(dataPath(tf), data);
    await expect(verifyCheckpoint(tf)).rejects.toThrow(DataLossError);
    // Version 1: as its reader verifies.
    const v1 = join(dir, "v1");
    await cp(V1_FIXTURES, v1, { recursive: true });
    // (a fresh copy: the committed fixture itself is never written)
    await expect(verifyCheckpoint(join(v1, "model.ckpt-7"))).resolves.toBeUndefined();
    await truncate(dataPath(join(v1, "model.ckpt-7")), 10);
    await expect(verifyCheckpoint(join(v1, "model.ckpt-7"))).rejects.toThrow(DataLossError);
  });
});
