"""Keras's side of the round trips in kerasRoundTrip.process.test.ts: the Keras 3 twin of the
bundled TensorFlow.js classifier (examples/tfjs-classifier-data.ts, buildDeepModel: 2 inputs,
Dense(32, relu), Dense(32, relu), Dense(3) logits) with Adam(0.01) and softmax cross-entropy.

    python keras_twin.py restore <prefix> <inputs.json>
        Restores our checkpoint at <prefix> with tf.train.Checkpoint(model=model).restore and
        prints, as JSON: every model and optimizer variable Keras holds (hex of its little-endian
        bytes), its iterations, which Keras variables the restore left unmatched, and the
        model's logits for the inputs ({"xs": [[x, y], ...]}).

    python keras_twin.py train <dir> <steps> <more> <batch.json>
        Trains the twin <steps> steps on the batch ({"xs": [[x, y], ...], "ys": [label, ...]}),
        saves it with tf.train.CheckpointManager into <dir> as model.ckpt-<steps>, trains <more>
        steps more (at least 1), and prints, as JSON: the variables at the save, after the first
        step more and after the last, each step's loss, and the loss of the final weights.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402


def twin():
    keras.utils.set_random_seed(3)
    model = keras.Sequential([
        keras.Input((2,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(3),
    ])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.optimizer.build(model.trainable_variables)
    return model


def hex_of(v):
    return np.ascontiguousarray(np.asarray(v)).astype(np.asarray(v).dtype.newbyteorder("<")).tobytes().hex()


def variables(model):
    opt = model.optimizer
    return {
        "weights": [hex_of(v.numpy()) for v in model.trainable_variables],
        # Keras 3's Adam: iterations, learning rate, then each variable's momentum and velocity.
        "moments": [hex_of(v.numpy()) for v in opt.variables[2:]],
        "iterations": int(opt.iterations.numpy()),
    }


def restore(prefix, inputs_path):
    model = twin()
    before = [v.numpy().copy() for v in model.trainable_variables + model.optimizer.variables]
    status = tf.train.Checkpoint(model=model).restore(prefix)
    status.expect_partial()
    after = [v.numpy() for v in model.trainable_variables + model.optimizer.variables]
    names = [v.path for v in model.trainable_variables + model.optimizer.variables]
    # The learning rate is not ours to restore (TensorFlow.js keeps it as a number).
    unchanged = [n for n, b, a in zip(names, before, after) if np.array_equal(b, a) and "learning_rate" not in n]
    with open(inputs_path) as f:
        xs = np.array(json.load(f)["xs"], np.float32)
    logits = model(xs, training=False).numpy()
    out = variables(model)
    out["unchanged"] = unchanged
    out["logits"] = logits.astype(np.float64).tolist()
    return out


def train(directory, steps, more, batch_path):
    with open(batch_path) as f:
        batch = json.load(f)
    xs = np.array(batch["xs"], np.float32)
    ys = np.array(batch["ys"], np.int32)
    model = twin()
    for _ in range(steps):
        model.train_on_batch(xs, ys)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), directory, max_to_keep=3, checkpoint_name="model.ckpt")
    path = manager.save(checkpoint_number=steps)
    at_save = variables(model)
    losses = [float(model.train_on_batch(xs, ys))]
    after_one = variables(model)
    losses += [float(model.train_on_batch(xs, ys)) for _ in range(more - 1)]
    final_loss = float(model.evaluate(xs, ys, batch_size=len(xs), verbose=0))
    return {"path": path, "atSave": at_save, "afterOne": after_one, "after": variables(model), "losses": losses, "finalLoss": final_loss}


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "restore" and len(sys.argv) == 4:
        result = restore(sys.argv[2], sys.argv[3])
    elif command == "train" and len(sys.argv) == 6:
        result = train(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        sys.exit(__doc__)
    json.dump(result, sys.stdout)
