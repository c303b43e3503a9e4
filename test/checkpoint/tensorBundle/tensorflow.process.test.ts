/**
 * Round trips through TensorFlow itself: TensorFlow's `tf.train.load_checkpoint` reads what
 * TensorBundleWriter wrote, bit for bit, and TensorBundleReader reads what TensorFlow writes
 * (`tf.train.Checkpoint.write`, `tf.compat.v1.train.Saver`, `tf.raw_ops.SaveV2`), as TensorFlow
 * reads it back. TensorFlow runs from the cached virtual environment that
 * scripts/tensorflow-venv.sh makes (.ci/run installs it); without it these tests skip with the
 * script's reason. The committed fixtures (TensorBundle.test.ts) cover the reading side
 * everywhere.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

import { CheckpointManager, readBundle } from "../../../src/checkpoint/index.js";
import { TensorBundleReader } from "../../../src/checkpoint/tensorBundle/TensorBundleReader.js";
import { silentLogger } from "../../../src/Logger.js";
import { VirtualClock } from "../../../src/testing/VirtualClock.js";
import { BundleSaver } from "../../../src/checkpoint/Saver.js";
import { encodeTensorBundle, TensorBundleWriter, type BundleTensor } from "../../../src/checkpoint/tensorBundle/TensorBundleWriter.js";
import type { TensorValue } from "../../../src/session/Tensor.js";
import { useTempDirs } from "../../util/tempDirs.js";
import { python, runTensorflowScript, why } from "../../util/tensorflowPython.js";
import { concat } from "./tableBytes.js";

const SCRIPT = "test/checkpoint/fixtures/tensorflow/tf_bundles.py";
const tempDir = useTempDirs("ms-tf-bundle-");

const skipReason = `skipped: ${why}`;
if (python === undefined) console.warn(`round trips through TensorFlow SKIPPED: ${why}`);

type Dump = Record<string, { dtype: string; shape: number[]; hex?: string; strings?: string[] }>;

const runPython = (...args: string[]): Promise<string> => runTensorflowScript(SCRIPT, ...args);
const dump = async (prefix: string): Promise<Dump> => JSON.parse(await runPython("dump", prefix)) as Dump;

const hexOf = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("hex");

/** What TensorFlow should read back from a tensor we wrote, in tf_bundles.py's dump format. */
const expectedDump = (tensors: ReadonlyMap<string, BundleTensor>): Dump =>
  Object.fromEntries(
    [...tensors].map(([name, t]) => {
      const base = { dtype: t.dtype === "string" ? "string" : t.dtype, shape: [...t.shape] };
      if (t.dtype === "string") {
        const strings = (t.data as readonly (string | Uint8Array)[]).map((s) => (typeof s === "string" ? Buffer.from(s, "utf8").toString("hex") : hexOf(s)));
        return [name, { ...base, strings }];
      }
      const data = t.data as Exclude<TensorValue["data"], readonly string[]>;
      return [name, { ...base, hex: hexOf(new Uint8Array(data.buffer, data.byteOffset, data.byteLength)) }];
    }),
  );

const everyDtype = (): Map<string, BundleTensor> =>
  new Map<string, BundleTensor>([
    ["dense/kernel", { dtype: "float32", shape: [2, 3], data: Float32Array.of(1.5, -0, Infinity, -Infinity, 3.4028234663852886e38, 1e-45) }],
    ["nan", { dtype: "float32", shape: [2], data: new Float32Array(Uint32Array.of(0x7fc00001, 0xffa0beef).buffer) }],
    ["f64", { dtype: "float64", shape: [5], data: Float64Array.of(Math.PI, -0, Number.NaN, Number.MIN_VALUE, -Number.MAX_VALUE) }],
    ["i32", { dtype: "int32", shape: [2, 2], data: Int32Array.of(0, -1, 2147483647, -2147483648) }],
    ["global_step", { dtype: "int64", shape: [], data: BigInt64Array.of(9007199254740993n) }],
    ["i64", { dtype: "int64", shape: [3], data: BigInt64Array.of(-9223372036854775808n, 9223372036854775807n, 0n) }],
    ["flags", { dtype: "bool", shape: [3], data: Uint8Array.of(1, 0, 1) }],
    ["words", { dtype: "string", shape: [2, 3], data: ["", "héllo", "日本語 🎉", "with\0nul\nand newline", "\uFEFFbom", "x".repeat(300)] }],
    ["blob", { dtype: "string", shape: [2], data: [Uint8Array.of(0xff, 0xfe, 0), "ok"] }],
    ["word", { dtype: "string", shape: [], data: ["scalar"] }],
    ["no_words", { dtype: "string", shape: [0], data: [] }],
    ["empty_f64", { dtype: "float64", shape: [0, 4], data: new Float64Array(0) }],
    ["empty_i32", { dtype: "int32", shape: [3, 0], data: new Int32Array(0) }],
    ["empty_bool", { dtype: "bool", shape: [0], data: new Uint8Array(0) }],
    ["😀/unicode name", { dtype: "int64", shape: [1], data: BigInt64Array.of(-1n) }],
  ]);

if (python === undefined) {
  describe("round trips through TensorFlow itself", () => {
    it.skip(skipReason, () => undefined);
  });
}

describe.runIf(python !== undefined)("round trips through TensorFlow itself (tensorflow-cpu from the cached venv)", () => {
  it("tf.train.load_checkpoint reads every tensor we wrote bit for bit, every supported dtype, packed and 8-byte aligned", async () => {
    const dir = tempDir();
    const tensors = everyDtype();
    for (const alignmentBytes of [1, 8]) {
      const prefix = join(dir, `ours-${alignmentBytes}`, "model.ckpt-3");
      const w = new TensorBundleWriter(prefix, { alignmentBytes });
      for (const [name, t] of tensors) w.add(name, t);
      await w.finish();
      expect(await dump(prefix)).toEqual(expectedDump(tensors));
    }
  }, 300_000);

  it("a CheckpointManager's checkpoint (the default format) is what tf.train.load_checkpoint reads: every variable bit for bit, with the step and save time as two int64 scalars", async () => {
    const dir = tempDir();
    // Variables are TensorValues: strings as text (the raw-bytes element is the writer's alone).
    const values = new Map([...everyDtype()].filter(([name]) => name !== "blob")) as Map<string, TensorValue>;
    const clock = new VirtualClock({ startMs: 1_790_000_000_123 });
    const manager = await CheckpointManager.create({ directory: dir, checkpointName: "model.ckpt", saver: new BundleSaver({ clock }), clock, logger: silentLogger });
    const prefix = (await manager.save(values, { checkpointNumber: 7, step: 1200 })) as string;
    await manager.close();
    const int64 = (n: bigint): Dump[string] => ({ dtype: "int64", shape: [], hex: hexOf(new Uint8Array(BigInt64Array.of(n).buffer)) });
    expect(await dump(prefix)).toEqual({
      ...expectedDump(values),
      "_MONITORED_SESSION/step": int64(1200n),
      "_MONITORED_SESSION/created_at_ms": int64(1_790_000_000_123n),
    });
    // And back: what TensorFlow reads is what a restore gives.
    const restored = await readBundle(prefix);
    expect([restored.step, restored.createdAtMs]).toEqual([1200, 1_790_000_000_123]);
    expect(expectedDump(restored.values)).toEqual(expectedDump(values));
  }, 300_000);

  it("we read the bundles TensorFlow writes now (tf.train.Checkpoint.write, tf.compat.v1.train.Saver, SaveV2 of every dtype, Keras 3) as TensorFlow reads them", async () => {
    const dir = tempDir();
    await runPython("generate", dir);
    for (const name of ["savev2_all_dtypes", "checkpoint_v2", "saver_v1", "keras3_sequential", "keras3_uncompiled"]) {
      const expected = JSON.parse(await readFile(join(dir, name, "expected.json"), "utf8")) as { prefix: string; tensors: Dump };
      const reader = await TensorBundleReader.open(join(dir, name, expected.prefix));
      const ours: Dump = {};
      for (const e of reader.entries) {
        if (!e.supported) {
          ours[e.name] = expected.tensors[e.name] as Dump[string];
          await expect(reader.read(e.name)).rejects.toThrow(`has dtype ${e.dtype}`);
          continue;
        }
        if (e.dtype === "string") {
          ours[e.name] = { dtype: e.dtype, shape: [...e.shape], strings: (await reader.readStringBytes(e.name)).map(hexOf) };
        } else {
          const data = (await reader.read(e.name)).data as Exclude<TensorValue["data"], readonly string[]>;
          ours[e.name] = { dtype: e.dtype, shape: [...e.shape], hex: hexOf(new Uint8Array(data.buffer, data.byteOffset, data.byteLength)) };
        }
      }
      expect(ours, name).toEqual(expected.tensors);
    }
  }, 300_000);

  it("an index of several blocks: SaveV2 of 6,000 scalars and our writer give the same bytes", async () => {
    const prefix = join(tempDir(), "many");
    const n = 6000;
    await runPython("many", prefix, String(n));
    const tensors = new Map<string, BundleTensor>(
      Array.from({ length: n }, (_, i) => [`layer_${String(i).padStart(5, "0")}/some/long/variable/name/.ATTRIBUTES/VARIABLE_VALUE`, { dtype: "float32", shape: [], data: Float32Array.of(i) }]),
    );
    const ours = encodeTensorBundle(tensors);
    const theirs = await readFile(`${prefix}.index`);
    expect(theirs.length).toBeGreaterThan(256 * 1024);
    expect(hexOf(ours.index) === hexOf(theirs)).toBe(true);
    expect(hexOf(concat(...ours.data)) === hexOf(await readFile(`${prefix}.data-00000-of-00001`))).toBe(true);
  }, 300_000);
});
