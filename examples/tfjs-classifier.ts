/**
 * A TensorFlow.js classifier (three Gaussian blobs, a small dense network, Adam) trained by a
 * MonitoredSession through the `TfjsSession` adapter: stop at a step, step rate, loss and
 * accuracy logging, a NaN guard, and checkpoints of the weights, optimizer slots, step and data
 * position that a re-run resumes from bit-exactly.
 *
 * Run it with `npx tsx examples/tfjs-classifier.ts [checkpointDir]`; run it again with the same
 * directory to train 300 more steps from the saved checkpoint.
 */
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import * as tf from "@tensorflow/tfjs";

import { LoggingTensorHook, NanTensorHook, StepCounterHook, StopAtStepHook } from "../hooks/index.js";
import { BundleSaver } from "../src/checkpoint/index.js";
import { withSession } from "../src/index.js";
import { InMemoryDataSource, tfjsSession } from "../src/tfjs/index.js";
import { accuracy, buildModel, buildOptimizer, classifierLoss, makeDataset } from "./tfjs-classifier-data.js";

// A program, not a library: it may silence tfjs's "use tfjs-node" hint.
tf.enableProdMode();

const dir = process.argv[2] ?? (await mkdtemp(join(tmpdir(), "tfjs-classifier-")));
const prefix = join(dir, "model.ckpt");
const saver = new BundleSaver();
// Each run trains this many steps past where the checkpoint left off.
const numSteps = 300;
const { xs, ys } = makeDataset(42);

await withSession(
  {
    sessionCreator: {
      createSession: async () => {
        const sess = await tfjsSession({
          model: buildModel(),
          optimizer: buildOptimizer(),
          data: new InMemoryDataSource({ xs, ys, batchSize: 32, seed: 7 }),
          lossFn: classifierLoss,
          metrics: { accuracy },
        });
        if (await saver.exists(prefix)) {
          await sess.variables.restore((await saver.restore(prefix)).values);
          console.log(`Resumed from ${prefix} at step ${String(await sess.run("global_step"))}.`);
        } else {
          await sess.variables.initialize();
        }
        return sess;
      },
    },
    hooks: [
      new StopAtStepHook({ numSteps }),
      new StepCounterHook({ everyNSteps: 100 }),
      new LoggingTensorHook({ tensors: { step: "global_step", loss: "loss", accuracy: "accuracy" }, everyNIter: 50 }),
      new NanTensorHook({ lossTensor: "loss" }),
    ],
  },
  async (sess) => {
    while (!sess.shouldStop()) await sess.run("train");
    const raw = sess.rawSession;
    if (raw?.variables !== undefined) {
      const step = Number(await raw.run("global_step"));
      await saver.save(raw.variables, prefix, { step });
      console.log(`Saved ${prefix} at step ${step}.`);
    }
  },
);
