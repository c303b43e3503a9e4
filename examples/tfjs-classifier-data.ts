/**
 * The data and model of the TensorFlow.js classifier example: three Gaussian blobs in the plane,
 * generated from a seed (no downloads), and a small dense network trained with Adam. The same
 * seed gives the same data set and the same initial weights in every process.
 */
import * as tf from "@tensorflow/tfjs";

import type { TensorValue } from "../src/index.js";

/** A labelled data set: `xs` float32[n, 2] points, `ys` int32[n] class ids. */
export interface Dataset {
  readonly xs: TensorValue<"float32">;
  readonly ys: TensorValue<"int32">;
  readonly numClasses: number;
}

/** The number of classes. */
export const NUM_CLASSES = 3;

const CENTERS: readonly (readonly [number, number])[] = [
  [-2, -1],
  [2, -1],
  [0, 2],
];

/** Standard normal samples (Box–Muller) from a mulberry32 generator seeded with `seed`. */
const seededGaussian = (seed: number): (() => number) => {
  let state = seed >>> 0;
  const uniform = (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = Math.imul(state ^ (state >>> 15), state | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return () => Math.sqrt(-2 * Math.log(1 - uniform())) * Math.cos(2 * Math.PI * uniform());
};

/**
 * Three Gaussian blobs (standard deviation `spread`) of `perClass` points each, in class order,
 * from a mulberry32 generator seeded with `seed` and Box–Muller.
 */
export const makeDataset = (seed: number, perClass = 200, spread = 0.8): Dataset => {
  const gaussian = seededGaussian(seed);
  const n = perClass * NUM_CLASSES;
  const xs = new Float32Array(n * 2);
  const ys = new Int32Array(n);
  for (let c = 0; c < NUM_CLASSES; c++) {
    const [cx, cy] = CENTERS[c] as readonly [number, number];
    for (let i = 0; i < perClass; i++) {
      const k = c * perClass + i;
      xs[2 * k] = cx + spread * gaussian();
      xs[2 * k + 1] = cy + spread * gaussian();
      ys[k] = c;
    }
  }
  return { xs: { dtype: "float32", shape: [n, 2], data: xs }, ys: { dtype: "int32", shape: [n], data: ys }, numClasses: NUM_CLASSES };
};

/**
 * A 2 → 16 (relu) → 3 dense network that outputs logits, with seeded Glorot initializers so
 * that every process starts from the same weights.
 */
export const buildModel = (seed = 1): tf.Sequential =>
  tf.sequential({
    layers: [
      tf.layers.dense({ inputShape: [2], units: 16, activation: "relu", kernelInitializer: tf.initializers.glorotUniform({ seed }) }),
      tf.layers.dense({ units: NUM_CLASSES, kernelInitializer: tf.initializers.glorotUniform({ seed: seed + 1 }) }),
    ],
  });

/**
 * Three interleaved spiral arms (`perClass` points each, with Gaussian `noise`), from the same
 * seeded generator: a problem a small network needs thousands of steps to learn.
 */
export const makeSpirals = (seed: number, perClass = 1000, noise = 0.15): Dataset => {
  const gaussian = seededGaussian(seed);
  const n = perClass * NUM_CLASSES;
  const xs = new Float32Array(n * 2);
  const ys = new Int32Array(n);
  for (let c = 0; c < NUM_CLASSES; c++) {
    for (let i = 0; i < perClass; i++) {
      const k = c * perClass + i;
      const r = (i / perClass) * 4;
      const angle = (2 * Math.PI * c) / NUM_CLASSES + (i / perClass) * 1.75 * Math.PI;
      xs[2 * k] = r * Math.cos(angle) + noise * gaussian();
      xs[2 * k + 1] = r * Math.sin(angle) + noise * gaussian();
      ys[k] = c;
    }
  }
  return { xs: { dtype: "float32", shape: [n, 2], data: xs }, ys: { dtype: "int32", shape: [n], data: ys }, numClasses: NUM_CLASSES };
};

/** A 2 → hidden → hidden → 3 network (relu), seeded, for the spirals. */
export const buildDeepModel = (seed = 1, hidden = 32): tf.Sequential =>
  tf.sequential({
    layers: [
      tf.layers.dense({ inputShape: [2], units: hidden, activation: "relu", kernelInitializer: tf.initializers.glorotUniform({ seed }) }),
      tf.layers.dense({ units: hidden, activation: "relu", kernelInitializer: tf.initializers.glorotUniform({ seed: seed + 1 }) }),
      tf.layers.dense({ units: NUM_CLASSES, kernelInitializer: tf.initializers.glorotUniform({ seed: seed + 2 }) }),
    ],
  });

/** The optimizer the example uses. */
export const buildOptimizer = (learningRate = 0.02): tf.Optimizer => tf.train.adam(learningRate);

/** Softmax cross-entropy of logits against int class ids. */
export const classifierLoss = (labels: tf.Tensor, logits: tf.Tensor): tf.Tensor =>
  tf.losses.softmaxCrossEntropy(tf.oneHot(tf.cast(labels, "int32") as tf.Tensor1D, NUM_CLASSES), logits);

/** The fraction of examples whose highest logit is the label. */
export const accuracy = (labels: tf.Tensor, logits: tf.Tensor): tf.Tensor =>
  tf.mean(tf.cast(tf.equal(tf.argMax(logits, -1), tf.cast(labels, "int32")), "float32"));
