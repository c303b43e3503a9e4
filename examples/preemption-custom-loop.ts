/**
 * A custom training loop in TensorFlow's style, across processes: each task of the cluster is
 * one replica of a synchronous data-parallel group (TensorFlow's MultiWorkerMirroredStrategy),
 * and a `PreemptionCheckpointHandler` with the task as its cluster resolver makes every task save
 * at one agreed run when any of them gets SIGTERM, then exit 42. Run it as a local cluster:
 *
 *     npx monitored-session launch --workers 3 -- node --import tsx examples/preemption-custom-loop.ts
 *
 * (from this repository: `npm run cli -- launch --workers 3 -- node --import tsx examples/preemption-custom-loop.ts`).
 * It trains `STEPS` runs (default 2000), then saves a final checkpoint and exits 0. SIGTERM to
 * `launch` or to any one task stops every task at the same run, the chief writes the checkpoint,
 * and every task exits 42; the same command then resumes every task at that run. On separate
 * machines, start it on each with its TF_CONFIG (docs/distributed.md).
 *
 * Environment: `STEPS` (runs to train), `CHECKPOINT_DIR` (default `runs/preemption-custom-loop`),
 * `GRACE_PERIOD_SECS` (a grace period: save, train on, save again before it ends). Without
 * TF_CONFIG, or with a bad one, it prints one line and exits 2.
 */
import * as tf from "@tensorflow/tfjs";

import { ValueError } from "../src/index.js";
import { PreemptionCheckpointHandler, TerminationConfig } from "../src/preemption/index.js";
import { ClusterStartError, startTask } from "../src/runtime/index.js";
import { InMemoryDataSource, tfjsSession, useBackend } from "../src/tfjs/index.js";
import { accuracy, buildDeepModel, buildOptimizer, classifierLoss, makeSpirals } from "./tfjs-classifier-data.js";

// A program, not a library: it may silence tfjs's "install tfjs-node" hint.
tf.enableProdMode();
await useBackend("wasm");

const steps = Number(process.env["STEPS"] ?? 2000);
const checkpointDir = process.env["CHECKPOINT_DIR"] ?? "runs/preemption-custom-loop";
const gracePeriodSecs = Number(process.env["GRACE_PERIOD_SECS"] ?? 0);

// This process's task, from TF_CONFIG (and the cluster settings `launch` passes): its server, the
// coordination service, and the replica group whose collective averages the gradients. A bad
// TF_CONFIG or cluster setting, or a start problem you fix (a port in use, a rejected token), is
// a usage error: one line and exit 2, as `monitored-session run` does.
const task = await startTask({ dataParallel: true }).catch((e: unknown) => {
  if (!(e instanceof ValueError || e instanceof ClusterStartError)) throw e;
  console.error(`${e.name}: ${e.message}`);
  return process.exit(2);
});
const rank = task.idInCluster ?? 0;

const data = makeSpirals(42);
const session = await tfjsSession({
  model: buildDeepModel(1),
  optimizer: buildOptimizer(0.01),
  // Each replica reads its shard; the global batch is 64 × the replicas.
  data: new InMemoryDataSource({ xs: data.xs, ys: data.ys, batchSize: 64, seed: 7, shard: { index: rank, count: task.numWorkers } }),
  lossFn: classifierLoss,
  metrics: { accuracy },
  ...(task.collective === undefined ? {} : { collective: task.collective }),
});

// Restores the chief's latest checkpoint (or initializes) on every task, with the run counter.
const handler = await PreemptionCheckpointHandler.create({
  clusterResolver: task,
  checkpointDir,
  store: session.variables,
  initFn: () => session.variables.initialize(),
  terminationConfig: new TerminationConfig({ gracePeriodSecs }),
});
console.log(`${task.name}: starting at run ${handler.totalRunCalls} of ${steps}`);

while (handler.totalRunCalls < steps) {
  const [, loss] = await handler.run(() => session.run(["train", "loss"]));
  if (handler.totalRunCalls % 500 === 0) console.log(`${task.name}: run ${handler.totalRunCalls}, loss ${Number(loss).toFixed(4)}`);
}

// The final checkpoint (only the chief's is kept), then leave the cluster together.
const path = await handler.save();
if (task.isChief) console.log(`${task.name}: done at run ${handler.totalRunCalls}; final checkpoint ${path ?? "(skipped)"}`);
else console.log(`${task.name}: done at run ${handler.totalRunCalls}`);
await handler.close();
await task.close();
