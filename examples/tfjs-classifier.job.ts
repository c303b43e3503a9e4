/**
 * The training job behind `npm start`: a small TensorFlow.js classifier learns three spiral
 * arms generated in the repository (no downloads). `examples/tfjs-classifier.yaml` says how it
 * is checkpointed, summarized and stopped; the `monitored-session run` command runs it.
 */
import * as tf from "@tensorflow/tfjs";

import { defineJob, type JobContext } from "../src/config/index.js";
import { Scaffold } from "../src/creation/Scaffold.js";
import { InMemoryDataSource, tfjsSession } from "../src/tfjs/index.js";
import { accuracy, buildDeepModel, buildOptimizer, classifierLoss, makeSpirals } from "./tfjs-classifier-data.js";

// A program, not a library: it may silence tfjs's "install tfjs-node" hint.
tf.enableProdMode();

const data = makeSpirals(42);
/** Examples per step on each replica: the global batch is this × the replicas. */
const BATCH_SIZE = 64;

// In one process (`npm start`) the context is empty. Under `monitored-session launch --workers N`
// (or `run` with TF_CONFIG) every task is one replica: it reads its shard of the data and averages
// its gradients with the others' each step, so the replicas stay identical (docs/distributed.md).
export default ({ replica }: JobContext) =>
  defineJob({
    // Each new session gets a fresh model; the chief then initializes it or restores the latest
    // checkpoint, so a second `npm start` resumes where the first stopped.
    sessionFactory: () =>
      tfjsSession({
        model: buildDeepModel(1),
        optimizer: buildOptimizer(0.01),
        data: new InMemoryDataSource({ xs: data.xs, ys: data.ys, batchSize: BATCH_SIZE, seed: 7, ...(replica === undefined ? {} : { shard: replica.shard }) }),
        lossFn: classifierLoss,
        metrics: { accuracy },
        ...(replica === undefined ? {} : { collective: replica.collective }),
      }),
    // The summary op that `summaries:` in the YAML writes every `saveSteps` steps: the loss and
    // accuracy of the model just trained, on that step's batch (tags `loss` and `accuracy`).
    scaffold: new Scaffold({ summaryOp: (session) => session.run({ loss: "loss", accuracy: "accuracy" }) }),
    fetches: { train: "train", loss: "loss", accuracy: "accuracy" },
    batchSize: BATCH_SIZE,
    lastStep: 15_000,
  });
