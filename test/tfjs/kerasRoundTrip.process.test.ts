/**
 * Weights between Keras 3 and the bundled TensorFlow.js classifier, both ways, through
 * TensorFlow itself (keras_twin.py, the classifier's Keras twin):
 * - Node → Python: a checkpoint the CheckpointManager wrote of the trained classifier restores
 *   with `tf.train.Checkpoint(model=keras_model).restore`: every weight and Adam moment bit for
 *   bit, Keras's iterations = our global step, and Keras predicts what our model predicts.
 * - Python → Node: a model Keras trained and saved with `tf.train.CheckpointManager` restores
 *   into the classifier bit for bit at the step of Keras's iterations. Training on from there is
 *   not bit-exact (the kernels differ, and TensorFlow.js adds Adam's epsilon to the
 *   bias-corrected second moment where Keras adds it to the raw one), so the test pins down why:
 *   one step on, the moments agree with Keras's to float rounding and each side's update rule,
 *   applied to our moments, gives its own weights within 1e-6; ten steps on, the weights stay
 *   within 1e-2 of Keras's (2.9e-3 seen) and the loss within 1% (0.01% seen).
 *
 * TensorFlow runs from the cached virtual environment that scripts/tensorflow-venv.sh makes
 * (.ci/run installs it); without it these tests skip with the script's reason (test/util/
 * tensorflowPython.ts).
 */
import * as tf from "@tensorflow/tfjs";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

import { buildDeepModel, buildOptimizer, classifierLoss, makeSpirals } from "../../examples/tfjs-classifier-data.js";
import { CheckpointManager } from "../../src/checkpoint/index.js";
import { silentLogger } from "../../src/Logger.js";
import type { TensorValue } from "../../src/session/Tensor.js";
import { InMemoryDataSource, tfjsSession, type TfjsSession } from "../../src/tfjs/index.js";
import { python, runTensorflowScript, why } from "../util/tensorflowPython.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-keras-round-trip-");
if (python === undefined) console.warn(`Keras round trips SKIPPED: ${why}`);

const twin = async <T>(...args: string[]): Promise<T> => JSON.parse(await runTensorflowScript("test/tfjs/keras_twin.py", ...args)) as T;

interface KerasVariables {
  readonly weights: string[];
  readonly moments: string[];
  readonly iterations: number;
}

const hexOf = (t: TensorValue): string => {
  const d = t.data as Float32Array;
  return Buffer.from(d.buffer, d.byteOffset, d.byteLength).toString("hex");
};
const floats = (hex: string): Float32Array => {
  const b = Buffer.from(hex, "hex");
  return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
};

/** The bundled classifier (examples/tfjs-classifier.job.ts), on `data`. */
const classifier = async (data: InMemoryDataSource): Promise<{ session: TfjsSession; model: tf.Sequential }> => {
  const model = buildDeepModel(1);
  return { session: await tfjsSession({ model, optimizer: buildOptimizer(0.01), data, lossFn: classifierLoss }), model };
};

/** The classifier's weights in order (kernel, bias per layer) and Adam's moments in Keras's order (m, v per weight). */
const oursInKerasOrder = (session: TfjsSession): { weights: string[]; moments: string[] } => {
  const snap = session.variables.snapshot();
  const names = ["0_dense/kernel", "0_dense/bias", "1_dense/kernel", "1_dense/bias", "2_dense/kernel", "2_dense/bias"];
  return {
    weights: names.map((n) => hexOf(snap.get(`model/${n}`) as TensorValue)),
    moments: names.flatMap((n, j) => [hexOf(snap.get(`optimizer/slot_${j}/${n}/m`) as TensorValue), hexOf(snap.get(`optimizer/slot_${names.length + j}/${n}/v`) as TensorValue)]),
  };
};

const spirals = makeSpirals(42);

describe.skipIf(python === undefined)("Keras 3 and the TensorFlow.js classifier, through TensorFlow 2.21", () => {
  it("Keras restores our classifier's checkpoint and predicts what our model predicts", async () => {
    const dir = tempDir();
    const { session, model } = await classifier(new InMemoryDataSource({ xs: spirals.xs, ys: spirals.ys, batchSize: 64, seed: 7 }));
    await session.variables.initialize();
    for (let i = 0; i < 40; i++) await session.run("train");
    const manager = await CheckpointManager.create({ directory: dir, checkpointName: "model.ckpt", logger: silentLogger });
    const prefix = await manager.save(session.variables, { checkpointNumber: 40 });
    await manager.close();
    if (prefix === null) throw new Error("the manager saved nothing");

    const inputs = Array.from({ length: 16 }, (_, k) => [spirals.xs.data[2 * k * 97] as number, spirals.xs.data[2 * k * 97 + 1] as number]);
    await writeFile(join(dir, "inputs.json"), JSON.stringify({ xs: inputs }));
    const keras = await twin<KerasVariables & { unchanged: string[]; logits: number[][] }>("restore", prefix, join(dir, "inputs.json"));

    expect(keras.unchanged, "Keras variables the restore did not set").toEqual([]);
    const ours = oursInKerasOrder(session);
    expect(keras.weights).toEqual(ours.weights);
    expect(keras.moments).toEqual(ours.moments);
    expect(keras.iterations).toBe(40);
    expect(await session.run("global_step")).toBe(40);

    const logits = tf.tidy(() => (model.predict(tf.tensor2d(inputs)) as tf.Tensor).arraySync() as number[][]);
    for (let i = 0; i < inputs.length; i++) {
      for (let c = 0; c < 3; c++) expect(Math.abs((keras.logits[i]?.[c] as number) - (logits[i]?.[c] as number)), `input ${i} class ${c}`).toBeLessThan(1e-5 * Math.max(1, Math.abs(logits[i]?.[c] as number)));
    }
    session.close();
  });

  it("weights Keras trained restore into our classifier bit for bit at Keras's iterations; training on differs from Keras's only by where Adam adds epsilon", async () => {
    const dir = tempDir();
    const n = 192;
    // Every 15th point of the spirals: a batch of all three classes, too many to learn in 35 steps.
    const picked = Array.from({ length: n }, (_, k) => 15 * k);
    const xs = picked.flatMap((i) => [spirals.xs.data[2 * i] as number, spirals.xs.data[2 * i + 1] as number]);
    const ys = picked.map((i) => spirals.ys.data[i] as number);
    await writeFile(join(dir, "batch.json"), JSON.stringify({ xs: picked.map((_, k) => [xs[2 * k], xs[2 * k + 1]]), ys }));
    const STEPS = 25;
    const MORE = 10;
    type Trained = { path: string; atSave: KerasVariables; afterOne: KerasVariables; after: KerasVariables; finalLoss: number };
    const keras = await twin<Trained>("train", join(dir, "ckpt"), String(STEPS), String(MORE), join(dir, "batch.json"));

    // The whole batch every step, as Keras's train_on_batch takes it.
    const data = new InMemoryDataSource({
      xs: { dtype: "float32", shape: [n, 2], data: Float32Array.from(xs) },
      ys: { dtype: "int32", shape: [n], data: Int32Array.from(ys) },
      batchSize: n,
      seed: 1,
    });
    const { session, model } = await classifier(data);
    // Found through TensorFlow's own `checkpoint` state file, restored through the object graph.
    const manager = await CheckpointManager.create({ directory: join(dir, "ckpt"), checkpointName: "model.ckpt", logger: silentLogger });
    expect(await manager.restoreOrInitialize(session.variables)).toBe(keras.path);
    await manager.close();
    const restored = oursInKerasOrder(session);
    expect(restored.weights).toEqual(keras.atSave.weights);
    expect(restored.moments).toEqual(keras.atSave.moments);
    expect(await session.run("global_step")).toBe(STEPS);

    // One step on. The gradients are Keras's (the moments agree to float rounding), and each side's
    // Adam update, computed from our moments, gives that side's weights: the two differ only in
    // epsilon, which TensorFlow.js adds to sqrt(v / (1 - beta2^t)) and Keras to sqrt(v).
    await session.run("train");
    const one = oursInKerasOrder(session);
    const t = STEPS + 1;
    const [lr, beta1, beta2, epsilon] = [0.01, 0.9, 0.999, 1e-7];
    let moments = 0;
    let kerasRule = 0;
    let tfjsRule = 0;
    one.moments.forEach((hex, j) => {
      const a = floats(hex);
      const b = floats(keras.afterOne.moments[j] as string);
      for (let k = 0; k < a.length; k++) moments = Math.max(moments, Math.abs((a[k] as number) - (b[k] as number)) / Math.max(1e-3, Math.abs(b[k] as number)));
    });
    restored.weights.forEach((hex, j) => {
      const [w0, ours, theirs] = [floats(hex), floats(one.weights[j] as string), floats(keras.afterOne.weights[j] as string)];
      const [m, v] = [floats(one.moments[2 * j] as string), floats(one.moments[2 * j + 1] as string)];
      for (let k = 0; k < w0.length; k++) {
        const [w, mk, vk] = [w0[k] as number, m[k] as number, v[k] as number];
        kerasRule = Math.max(kerasRule, Math.abs(w - ((lr * Math.sqrt(1 - beta2 ** t)) / (1 - beta1 ** t)) * (mk / (Math.sqrt(vk) + epsilon)) - (theirs[k] as number)));
        tfjsRule = Math.max(tfjsRule, Math.abs(w - lr * (mk / (1 - beta1 ** t) / (Math.sqrt(vk / (1 - beta2 ** t)) + epsilon)) - (ours[k] as number)));
      }
    });
    expect(moments, "largest relative difference of Adam's moments").toBeLessThan(1e-4);
    expect(kerasRule, "Keras's rule on our moments against Keras's weights").toBeLessThan(1e-6);
    expect(tfjsRule, "TensorFlow.js's rule on our moments against our weights").toBeLessThan(1e-6);

    // Ten steps on: the weights stay close, and so does the loss.
    for (let i = 1; i < MORE; i++) await session.run("train");
    expect(await session.run("global_step")).toBe(STEPS + MORE);
    const trained = oursInKerasOrder(session);
    let largest = 0;
    trained.weights.forEach((hex, j) => {
      const [a, b] = [floats(hex), floats(keras.after.weights[j] as string)];
      for (let k = 0; k < a.length; k++) largest = Math.max(largest, Math.abs((a[k] as number) - (b[k] as number)));
    });
    const loss = tf.tidy(() => classifierLoss(tf.tensor1d(ys, "int32"), model.predict(tf.tensor2d(xs, [n, 2])) as tf.Tensor).dataSync()[0] as number);
    console.log(`[keras round trip] after ${MORE} steps on: largest weight difference ${largest.toExponential(2)}, loss ${loss.toFixed(6)} (Keras ${keras.finalLoss.toFixed(6)})`);
    expect(largest).toBeLessThan(1e-2);
    expect(Math.abs(loss - keras.finalLoss) / keras.finalLoss).toBeLessThan(1e-2);
    expect(trained.weights).not.toEqual(restored.weights);
    session.close();
  });
});
