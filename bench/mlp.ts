/**
 * The cluster benchmark's model and data: an MLP 128 → 256 → 256 → 10 (Adam) on seeded random
 * examples labelled by a fixed random projection. Used by the ranks the benchmark drives itself
 * (bench/collectiveRank.ts) and by the job that `launch` runs (bench/mlpJob.ts), so both train
 * the same model on the same data.
 */

import * as tf from "@tensorflow/tfjs";
import type { InMemoryDataSourceOptions } from "../src/tfjs/index.js";
import { mulberry32 } from "../src/util/mulberry32.js";

const MLP = { inputs: 128, hidden: 256, classes: 10 } as const;

/** Batches in the data set: the same data for every N, each global batch of N = 2 a distinct one. */
const GLOBAL_BATCHES = 16;

/** `GLOBAL_BATCHES` global batches of 2 × `batch` seeded random examples, labelled by a fixed random projection. */
export const mlpDataset = (batch: number): Pick<InMemoryDataSourceOptions, "xs" | "ys"> => {
  const examples = batch * 2 * GLOBAL_BATCHES;
  const random = mulberry32(17);
  const xs = new Float32Array(examples * MLP.inputs).map(() => random() * 2 - 1);
  const projection = new Float32Array(MLP.inputs * MLP.classes).map(() => random() * 2 - 1);
  const ys = new Int32Array(examples).map((_, e) => {
    let best = 0;
    let bestScore = -Infinity;
    for (let c = 0; c < MLP.classes; c++) {
      let score = 0;
      for (let k = 0; k < MLP.inputs; k++) score += (xs[e * MLP.inputs + k] as number) * (projection[k * MLP.classes + c] as number);
      if (score > bestScore) [best, bestScore] = [c, score];
    }
    return best;
  });
  return { xs: { dtype: "float32", shape: [examples, MLP.inputs], data: xs }, ys: { dtype: "int32", shape: [examples], data: ys } };
};

/** The model, with seeded initial weights. */
export const buildMlp = (): tf.Sequential => {
  const dense = (units: number, seed: number, extra: Record<string, unknown> = {}) =>
    tf.layers.dense({ units, kernelInitializer: tf.initializers.glorotUniform({ seed }), ...extra });
  return tf.sequential({
    layers: [dense(MLP.hidden, 1, { inputShape: [MLP.inputs], activation: "relu" }), dense(MLP.hidden, 2, { activation: "relu" }), dense(MLP.classes, 3)],
  });
};

export const mlpLoss = (labels: tf.Tensor, logits: tf.Tensor): tf.Scalar =>
  tf.losses.softmaxCrossEntropy(tf.oneHot(tf.cast(labels, "int32") as tf.Tensor1D, MLP.classes), logits) as tf.Scalar;

export const mlpOptimizer = (): tf.Optimizer => tf.train.adam(1e-3);
