/**
 * The same TensorFlow.js model trained on the same data for the same number of steps, three
 * ways, in one run, saving every `SAVE_EVERY` steps:
 * - `bareMs`: a plain loop calling `optimizer.minimize` on the same shuffled batches (the same
 *   `InMemoryDataSource`), saving the weights with plain Node fs (no fsync);
 * - `fitMs`: `model.fit` with a callback that saves through `model.save` every N batches;
 * - `monitoredMs`: `monitoredTrainingSession` with its default hooks (step counter, summaries)
 *   and asynchronous checkpoints every N steps.
 * Rounds are interleaved; each way's median is reported, and the ratios are the medians of the
 * per-round ratios (each round runs the three ways back to back, so machine-load drift cancels).
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as tf from "@tensorflow/tfjs";
import { StopAtStepHook } from "../hooks/index.js";
import { buildModel, buildOptimizer, makeDataset, NUM_CLASSES } from "../examples/tfjs-classifier-data.js";
import { silentLogger } from "../src/Logger.js";
import { monitoredTrainingSession } from "../src/monitoredTrainingSession.js";
import { InMemoryDataSource, tfjsSession } from "../src/tfjs/index.js";
import { median, round } from "./stats.js";

const BATCH = 32;
const STEPS = 600;
const SAVE_EVERY = 50; // 12 saves per way
const ROUNDS = 9;

const { xs, ys } = makeDataset(42);
const n = ys.data.length;
const oneHot = new Float32Array(n * NUM_CLASSES);
for (let i = 0; i < n; i++) oneHot[i * NUM_CLASSES + (ys.data[i] as number)] = 1;
const labels = { dtype: "float32" as const, shape: [n, NUM_CLASSES], data: oneHot };
const loss = (yTrue: tf.Tensor, yPred: tf.Tensor): tf.Tensor => tf.losses.softmaxCrossEntropy(yTrue, yPred);

const timed = async (fn: () => Promise<void>): Promise<number> => {
  const t0 = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t0) / 1e6;
};

const bare = async (dir: string): Promise<number> => {
  const model = buildModel();
  const optimizer = buildOptimizer();
  const data = new InMemoryDataSource({ xs, ys: labels, batchSize: BATCH, seed: 7 });
  const ms = await timed(async () => {
    for (let step = 1; step <= STEPS; step++) {
      const batch = data.next();
      const bx = batch.xs as tf.Tensor;
      const by = batch.ys as tf.Tensor;
      tf.tidy(() => {
        optimizer.minimize(() => loss(by, model.apply(bx) as tf.Tensor) as tf.Scalar);
      });
      tf.dispose([bx, by]);
      if (step % SAVE_EVERY === 0) {
        const buffers = model.getWeights().map((w) => Buffer.from((w.dataSync() as Float32Array).buffer));
        writeFileSync(join(dir, `weights-${step}.bin`), Buffer.concat(buffers));
      }
    }
  });
  model.dispose();
  return ms;
};

const fit = async (dir: string): Promise<number> => {
  const model = buildModel();
  model.compile({ optimizer: buildOptimizer(), loss });
  const x = tf.tensor2d(xs.data, [n, 2]);
  const y = tf.tensor2d(oneHot, [n, NUM_CLASSES]);
  let step = 0;
  const batchesPerEpoch = Math.ceil(n / BATCH);
  const ms = await timed(async () => {
    await model.fit(x, y, {
      batchSize: BATCH,
      epochs: Math.ceil(STEPS / batchesPerEpoch),
      shuffle: true,
      verbose: 0,
      callbacks: {
        onBatchEnd: async () => {
          step++;
          if (step % SAVE_EVERY === 0) {
            await model.save(
              tf.io.withSaveHandler(async (artifacts) => {
                writeFileSync(join(dir, `model-${step}.json`), JSON.stringify(artifacts.modelTopology));
                writeFileSync(join(dir, `weights-${step}.bin`), Buffer.from(artifacts.weightData as ArrayBuffer));
                return { modelArtifactsInfo: { dateSaved: new Date(), modelTopologyType: "JSON" } };
              }),
            );
          }
        },
      },
    });
  });
  tf.dispose([x, y]);
  model.dispose();
  // fit runs whole epochs: report the time per STEPS steps.
  return (ms * STEPS) / step;
};

const monitored = async (dir: string): Promise<number> => {
  const model = buildModel();
  const optimizer = buildOptimizer();
  const sess = await monitoredTrainingSession({
    sessionFactory: () =>
      tfjsSession({ model, optimizer, data: new InMemoryDataSource({ xs, ys: labels, batchSize: BATCH, seed: 7 }), lossFn: loss }),
    checkpointDir: dir,
    saveCheckpointSteps: SAVE_EVERY,
    asyncCheckpoints: true,
    hooks: [new StopAtStepHook({ lastStep: STEPS })],
    logger: silentLogger,
  });
  const ms = await timed(async () => {
    while (!sess.shouldStop()) await sess.run("train");
    await sess.close();
  });
  model.dispose();
  return ms;
};

export default async (): Promise<Record<string, unknown>> => {
  tf.enableProdMode();
  const ways = { bare, fit, monitored } as const;
  const samples: Record<keyof typeof ways, number[]> = { bare: [], fit: [], monitored: [] };
  // One warm-up round lets the JIT and tfjs kernels settle.
  for (let r = -1; r < ROUNDS; r++) {
    for (const [name, way] of Object.entries(ways) as [keyof typeof ways, (d: string) => Promise<number>][]) {
      const dir = mkdtempSync(join(tmpdir(), `bench-tfjs-${name}-`));
      try {
        const ms = await way(dir);
        if (r >= 0) samples[name].push(ms);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
  }
  const bareMs = median(samples.bare);
  const fitMs = median(samples.fit);
  const monitoredMs = median(samples.monitored);
  return {
    steps: STEPS,
    batchSize: BATCH,
    saveEverySteps: SAVE_EVERY,
    rounds: ROUNDS,
    bareMs: round(bareMs, 1),
    fitMs: round(fitMs, 1),
    monitoredMs: round(monitoredMs, 1),
    monitoredOverBare: round(median(samples.monitored.map((m, i) => m / (samples.bare[i] as number))), 3),
    monitoredOverFit: round(median(samples.monitored.map((m, i) => m / (samples.fit[i] as number))), 3),
    targets: { monitoredOverBare: "<= 1.03", monitoredOverFit: "<= 1.0" },
  };
};
