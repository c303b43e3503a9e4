/**
 * The TensorFlow.js adapter and Keras 3 checkpoints, on the committed fixtures TensorFlow 2.21
 * wrote with `tf.train.Checkpoint(model=keras_model).write` (test/checkpoint/fixtures/tensorflow):
 * a Keras model's weights and Adam state restore into the same architecture bit for bit, at the
 * step of Keras's iterations; a checkpoint of another architecture is refused in one line; and
 * our checkpoints carry the Keras paths. The round trips through TensorFlow itself are in
 * kerasRoundTrip.process.test.ts.
 */
import * as tf from "@tensorflow/tfjs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

import { BundleSaver } from "../../src/checkpoint/Saver.js";
import { OBJECT_GRAPH_TENSOR, readBundle } from "../../src/checkpoint/checkpointFormat.js";
import { ObjectGraph, restoreInto, VARIABLE_VALUE_SUFFIX } from "../../src/checkpoint/objectGraph.js";
import { TensorBundleReader } from "../../src/checkpoint/tensorBundle/TensorBundleReader.js";
import { InvalidArgumentError } from "../../src/errors.js";
import type { TensorValue } from "../../src/session/Tensor.js";
import { InMemoryDataSource, tfjsSession, type TfjsSession } from "../../src/tfjs/index.js";
import { useTempDirs } from "../util/tempDirs.js";

const FIXTURES = fileURLToPath(new URL("../checkpoint/fixtures/tensorflow/", import.meta.url));
const tempDir = useTempDirs("ms-keras-ckpt-");

type Expected = { tensors: Record<string, { dtype: string; shape: number[]; hex?: string }> };
const expected = async (name: string): Promise<Expected> => JSON.parse(await readFile(join(FIXTURES, name, "expected.json"), "utf8")) as Expected;
const hexOf = (t: TensorValue): string => {
  const d = t.data as Float32Array;
  return Buffer.from(d.buffer, d.byteOffset, d.byteLength).toString("hex");
};
const K = (path: string): string => `${path}${VARIABLE_VALUE_SUFFIX}`;

/** The fixtures' architecture: Input(3) → Dense(4, relu) → Dense(2), with Adam(0.01). */
const session = (hidden = 4, layers = 2): Promise<TfjsSession> => {
  const stack: tf.layers.Layer[] = [tf.layers.dense({ inputShape: [3], units: hidden, activation: "relu" })];
  for (let i = 2; i < layers; i++) stack.push(tf.layers.dense({ units: hidden, activation: "relu" }));
  stack.push(tf.layers.dense({ units: 2 }));
  return tfjsSession({
    model: tf.sequential({ layers: stack }),
    optimizer: tf.train.adam(0.01),
    data: new InMemoryDataSource({ xs: [[1, 0.5, -1], [0, 2, 1], [-1, 1, 0], [3, 0, 1]], ys: [[0, 1], [1, 0], [0.5, 0.5], [1, 1]], batchSize: 2, seed: 1 }),
    lossFn: (y, p) => tf.losses.meanSquaredError(y, p),
  });
};

describe("a Keras 3 checkpoint restores into the TensorFlow.js model of the same architecture", () => {
  it("compiled: weights, Adam's moments and iterations bit for bit; the global step is Keras's iterations; the beta powers follow", async () => {
    const s = await session();
    await restoreInto(s.variables, await readBundle(join(FIXTURES, "keras3_sequential/ckpt")));
    const keras = (await expected("keras3_sequential")).tensors;
    const ours = s.variables.snapshot();
    const weights = ["model/0_dense/kernel", "model/0_dense/bias", "model/1_dense/kernel", "model/1_dense/bias"];
    weights.forEach((name, j) => {
      expect(hexOf(ours.get(name) as TensorValue), name).toBe(keras[K(`model/optimizer/_trainable_variables/${j}`)]?.hex);
      const key = name.slice("model/".length);
      expect(hexOf(ours.get(`optimizer/slot_${j}/${key}/m`) as TensorValue), `${name} m`).toBe(keras[K(`model/optimizer/_variables/${2 + 2 * j}`)]?.hex);
      expect(hexOf(ours.get(`optimizer/slot_${4 + j}/${key}/v`) as TensorValue), `${name} v`).toBe(keras[K(`model/optimizer/_variables/${3 + 2 * j}`)]?.hex);
    });
    expect(await s.run("global_step")).toBe(1);
    expect((ours.get("optimizer/iterations")?.data as BigInt64Array)[0]).toBe(1n);
    // What tfjs's Adam would hold after one step: beta^(iterations + 1).
    expect((ours.get("optimizer/accBeta1")?.data as Float32Array)[0]).toBeCloseTo(0.9 ** 2, 6);
    expect((ours.get("optimizer/accBeta2")?.data as Float32Array)[0]).toBeCloseTo(0.999 ** 2, 6);
    // And it trains on from there.
    await s.run("train");
    expect(await s.run("global_step")).toBe(2);
    s.close();
  });

  it("uncompiled: the weights bit for bit; the optimizer, the step and the data position start afresh", async () => {
    const s = await session();
    await restoreInto(s.variables, await readBundle(join(FIXTURES, "keras3_uncompiled/ckpt")));
    const keras = (await expected("keras3_uncompiled")).tensors;
    const ours = s.variables.snapshot();
    expect(hexOf(ours.get("model/0_dense/kernel") as TensorValue)).toBe(keras[K("model/_functional/_operations/1/_kernel")]?.hex);
    expect(hexOf(ours.get("model/1_dense/bias") as TensorValue)).toBe(keras[K("model/_functional/_operations/2/bias")]?.hex);
    expect(s.variables.reportUninitialized()).toEqual([]);
    expect(await s.run("global_step")).toBe(0);
    await s.run("train");
    expect(await s.run("global_step")).toBe(1);
    s.close();
  });

  it("another architecture is refused in one line, before anything changes", async () => {
    const contents = await readBundle(join(FIXTURES, "keras3_sequential/ckpt"));
    const unchanged = async (s: TfjsSession, attempt: () => Promise<unknown>): Promise<unknown> => {
      await s.variables.initialize();
      await s.run("train");
      const before = s.variables.snapshot();
      const error = await attempt().catch((e: unknown) => e);
      const after = s.variables.snapshot();
      expect([...after.keys()]).toEqual([...before.keys()]);
      for (const [name, v] of before) expect(after.get(name)?.data, name).toEqual(v.data);
      return error;
    };
    const deeper = await session(4, 3);
    const error = await unchanged(deeper, () => restoreInto(deeper.variables, contents));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as Error).message).toMatch(/no value for model\/2_dense\/kernel \(at model\/_functional\/_operations\/3\/_kernel\)/);
    expect((error as Error).message).not.toContain("\n");
    deeper.close();

    const wider = await session(5);
    expect(await unchanged(wider, () => restoreInto(wider.variables, contents))).toBeInstanceOf(InvalidArgumentError);
    wider.close();
  });

  it("an optimizer other than Adam: the weights restore, its state and the step start afresh", async () => {
    const s = await tfjsSession({
      model: tf.sequential({ layers: [tf.layers.dense({ inputShape: [3], units: 4, activation: "relu" }), tf.layers.dense({ units: 2 })] }),
      optimizer: tf.train.momentum(0.01, 0.9),
      data: new InMemoryDataSource({ xs: [[1, 0.5, -1], [0, 2, 1]], ys: [[0, 1], [1, 0]], batchSize: 2, seed: 1 }),
      lossFn: (y, p) => tf.losses.meanSquaredError(y, p),
    });
    await restoreInto(s.variables, await readBundle(join(FIXTURES, "keras3_sequential/ckpt")));
    const keras = (await expected("keras3_sequential")).tensors;
    const ours = s.variables.snapshot();
    expect(hexOf(ours.get("model/0_dense/kernel") as TensorValue)).toBe(keras[K("model/optimizer/_trainable_variables/0")]?.hex);
    expect((ours.get("optimizer/iterations")?.data as BigInt64Array)[0]).toBe(0n);
    expect(await s.run("global_step")).toBe(0);
    expect(s.variables.reportUninitialized()).toEqual([]);
    s.close();
  });
});

describe("our checkpoints of a TensorFlow.js model", () => {
  it("carry the Keras 3 paths in their object graph, and restore by name", async () => {
    const s = await session();
    await s.variables.initialize();
    await s.run("train");
    const prefix = join(tempDir(), "model.ckpt-1");
    await new BundleSaver().save(s.variables, prefix, { step: 1 });
    const reader = await TensorBundleReader.open(prefix);
    const graph = ObjectGraph.decode((await reader.readStringBytes(OBJECT_GRAPH_TENSOR))[0] as Uint8Array, { file: prefix, offset: 0 });
    expect(graph.keyAt("model/_functional/_operations/1/_kernel")).toBe(K("model/0_dense/kernel"));
    expect(graph.keyAt("model/_functional/_operations/2/bias")).toBe(K("model/1_dense/bias"));
    expect(graph.keyAt("model/optimizer/_iterations")).toBe(K("optimizer/iterations"));
    expect(graph.keyAt("model/optimizer/_variables/2")).toBe(K("optimizer/slot_0/0_dense/kernel/m"));
    expect(graph.keyAt("model/optimizer/_variables/9")).toBe(K("optimizer/slot_7/1_dense/bias/v"));
    expect(graph.keyAt("global_step")).toBe(K("global_step"));
    expect(graph.keyAt("optimizer/accBeta1")).toBe(K("optimizer/accBeta1"));

    const before = s.variables.snapshot();
    const fresh = await session();
    await restoreInto(fresh.variables, await readBundle(prefix));
    const after = fresh.variables.snapshot();
    expect([...after.keys()].sort()).toEqual([...before.keys()].sort());
    for (const [name, v] of before) expect(after.get(name)?.data, name).toEqual(v.data);
    s.close();
    fresh.close();
  });
});
