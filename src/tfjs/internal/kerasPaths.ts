/**
 * Where a TensorFlow.js model's variables sit in the object graph of a Keras 3 model of the same
 * architecture, checkpointed as `tf.train.Checkpoint(model=keras_model)`: the paths that let
 * TensorFlow restore this adapter's checkpoints into Keras, and this adapter restore Keras's.
 * Derived from checkpoints TensorFlow 2.21 with Keras 3.15 wrote (test/checkpoint/fixtures/
 * tensorflow, and the layers listed below).
 *
 * | TensorFlow.js | Keras 3 object path |
 * |---|---|
 * | weight of layer `i` of a `tf.sequential` | `model/_functional/_operations/<i + 1>/<attribute>` (operation 0 is the input) |
 * | weight of layer `i` of a `tf.model` (its `layers` start with the inputs) | `model/_operations/<i>/<attribute>` |
 * | `kernel` (Dense, Conv) | `_kernel` |
 * | `embeddings` (Embedding) | `_embeddings` |
 * | a weight of an RNN layer (LSTM, GRU, SimpleRNN) | `cell/<name>` (`kernel` stays `kernel` there) |
 * | any other weight (`bias`, `gamma`, `moving_mean`...) | its name |
 * | `optimizer/iterations` (Adam) | `model/optimizer/_iterations` |
 * | Adam's first moment of the `j`-th trainable weight | `model/optimizer/_variables/<2 + 2j>` |
 * | Adam's second moment of the `j`-th trainable weight | `model/optimizer/_variables/<3 + 2j>` |
 *
 * Keras 3's Adam holds its iterations and learning rate as `_variables/0` and `/1`, then each
 * trainable variable's momentum and velocity; TensorFlow.js's Adam holds the same moments. The
 * beta powers (`accBeta1`/`accBeta2`), the global step and the data position have no Keras
 * counterpart: they sit at their own names, as does every other optimizer's state (restored from
 * a Keras checkpoint, it starts afresh, and so does the step). Layer positions match Keras's operations for a chain
 * of layers; a branching functional model may order them differently.
 *
 * @module
 */

import type { ObjectPaths } from "../../session/Session.js";
import type { ModelWeight } from "./naming.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What the paths depend on. */
export interface KerasPathsInput {
  readonly weights: readonly ModelWeight[];
  /** Whether `model.layers` leaves the input out (`tf.sequential`) rather than starting with it (`tf.model`). */
  readonly sequential: boolean;
  /** The names of the trainable weights, in the order the optimizer takes them. */
  readonly trainable: readonly string[];
  /** The optimizer's class (`Adam`), if the model has one. */
  readonly optimizerClass: string | undefined;
}

/** Keras 3 attributes that differ from the weight's name in TensorFlow.js. */
const KERAS_ATTRIBUTE: Readonly<Record<string, string>> = { kernel: "_kernel", embeddings: "_embeddings" };

/** Layers whose weights Keras 3 keeps in their cell. */
const RNN_LAYERS = new Set(["LSTM", "GRU", "SimpleRNN"]);

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** The Keras 3 object paths of the model's weights and, for Adam, of the optimizer's state. */
export const kerasObjectPaths = (input: KerasPathsInput): ObjectPaths => {
  const out = new Map<string, readonly string[]>();
  const root = input.sequential ? "model/_functional/_operations" : "model/_operations";
  for (const w of input.weights) {
    const operation = input.sequential ? w.layerIndex + 1 : w.layerIndex;
    const attribute = KERAS_ATTRIBUTE[w.local] ?? w.local;
    out.set(w.name, [`${root}/${operation}/${RNN_LAYERS.has(w.layerClass) ? `cell/${w.local}` : attribute}`]);
  }
  // Only Adam's state has a Keras counterpart here: another optimizer's iterations without its
  // slots would restore half a state, so its state (and the step) start afresh from Keras's.
  if (input.optimizerClass === "Adam") {
    out.set("optimizer/iterations", ["model/optimizer/_iterations"]);
    const keyOf = new Map(input.weights.map((w) => [w.name, w.key]));
    const n = input.trainable.length;
    input.trainable.forEach((name, j) => {
      const key = keyOf.get(name) as string;
      out.set(`optimizer/slot_${j}/${key}/m`, [`model/optimizer/_variables/${2 + 2 * j}`]);
      out.set(`optimizer/slot_${n + j}/${key}/v`, [`model/optimizer/_variables/${3 + 2 * j}`]);
    });
  }
  return out;
};
