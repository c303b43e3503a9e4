/**
 * The Keras 3 object paths of TensorFlow.js models (src/tfjs/internal/kerasPaths.ts), against the
 * paths TensorFlow 2.21 with Keras 3.15 gave the same layers (`tf.train.list_variables` of
 * `tf.train.Checkpoint(model=...)`): a functional Conv2D → BatchNormalization → Flatten → Dense
 * model, an Embedding → LSTM Sequential model, and Adam's state; other optimizers get none.
 */
import * as tf from "@tensorflow/tfjs";
import { describe, expect, it } from "vitest";

import { kerasObjectPaths } from "../../../src/tfjs/internal/kerasPaths.js";
import { modelWeights } from "../../../src/tfjs/internal/naming.js";

const pathsOf = (model: tf.LayersModel, optimizerClass: string | undefined): Map<string, readonly string[]> => {
  const weights = modelWeights(model);
  const trainable = new Set(model.trainableWeights);
  return new Map(
    kerasObjectPaths({
      weights,
      sequential: model.getClassName() === "Sequential",
      trainable: weights.filter((w) => trainable.has(w.variable)).map((w) => w.name),
      optimizerClass,
    }),
  );
};

describe("kerasObjectPaths", () => {
  it("a functional Conv2D → BatchNormalization → Flatten → Dense model: operations counted from the input", () => {
    const input = tf.input({ shape: [8, 8, 3] });
    const conv = tf.layers.conv2d({ filters: 2, kernelSize: 3 }).apply(input) as tf.SymbolicTensor;
    const bn = tf.layers.batchNormalization().apply(conv) as tf.SymbolicTensor;
    const flat = tf.layers.flatten().apply(bn) as tf.SymbolicTensor;
    const out = tf.layers.dense({ units: 2 }).apply(flat) as tf.SymbolicTensor;
    const paths = pathsOf(tf.model({ inputs: input, outputs: out }), "Adam");
    const byPath = new Map([...paths].flatMap(([name, ps]) => ps.map((p) => [p, name] as const)));
    // Keras 3.15: model/_operations/1/_kernel, 1/bias, 2/gamma, 2/beta, 2/moving_mean, 2/moving_variance, 4/_kernel, 4/bias
    expect([...byPath.keys()].filter((p) => p.startsWith("model/_operations/")).sort()).toEqual(
      [
        "model/_operations/1/_kernel",
        "model/_operations/1/bias",
        "model/_operations/2/beta",
        "model/_operations/2/gamma",
        "model/_operations/2/moving_mean",
        "model/_operations/2/moving_variance",
        "model/_operations/4/_kernel",
        "model/_operations/4/bias",
      ].sort(),
    );
    // Adam's moments: trainable weights only (the moving statistics are not trained).
    expect(byPath.get("model/optimizer/_variables/2")).toMatch(/^optimizer\/slot_0\/1_conv2_d\/kernel\/m$/);
    expect(byPath.get("model/optimizer/_variables/3")).toMatch(/^optimizer\/slot_6\/1_conv2_d\/kernel\/v$/);
    expect(byPath.get("model/optimizer/_variables/13")).toMatch(/^optimizer\/slot_11\/4_dense\/bias\/v$/);
    expect(byPath.has("model/optimizer/_variables/14")).toBe(false);
    expect(byPath.get("model/optimizer/_iterations")).toBe("optimizer/iterations");
  });

  it("an Embedding → LSTM Sequential model: `_embeddings`, and the LSTM's weights in its cell", () => {
    const model = tf.sequential({ layers: [tf.layers.embedding({ inputDim: 10, outputDim: 3, inputLength: 4 }), tf.layers.lstm({ units: 2 })] });
    const paths = [...pathsOf(model, undefined).values()].flat().sort();
    // Keras 3.15: model/_functional/_operations/1/_embeddings, 2/cell/kernel, 2/cell/recurrent_kernel, 2/cell/bias
    expect(paths).toEqual(
      [
        "model/_functional/_operations/1/_embeddings",
        "model/_functional/_operations/2/cell/bias",
        "model/_functional/_operations/2/cell/kernel",
        "model/_functional/_operations/2/cell/recurrent_kernel",
      ].sort(),
    );
  });

  it("an optimizer other than Adam gets no Keras paths (its state would restore by halves)", () => {
    const model = tf.sequential({ layers: [tf.layers.dense({ inputShape: [2], units: 3 })] });
    const paths = pathsOf(model, "Momentum");
    expect([...paths.keys()].sort()).toEqual(["model/0_dense/bias", "model/0_dense/kernel"]);
  });
});
