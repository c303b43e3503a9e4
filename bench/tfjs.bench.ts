/**
 * TensorFlow.js benchmarks, all on the `cpu` backend unless named otherwise.
 *
 * The same TensorFlow.js model trained on the same data for the same number of steps, three
 * ways, in one run, each making the same durable saves: one before the first step and one every
 * `SAVE_EVERY` steps (13). A durable save is written to a temporary file, fsynced, renamed into
 * place, and its directory fsynced; `durableSaves` counts, after each way returns, the saves on
 * disk that verify (a CRC32C trailer for the first two, the bundle's checksums for the third).
 * The benchmark fails if the counts differ: a comparison must do equal work.
 * - `bareMs`: a plain loop calling `optimizer.minimize` on the same shuffled batches (the same
 *   `InMemoryDataSource`), saving the weights itself;
 * - `fitMs`: `model.fit` for exactly `STEPS` batches, saving through `model.save` from callbacks;
 * - `monitoredMs`: `monitoredTrainingSession` with its default hooks (step counter, summaries)
 *   and asynchronous checkpoints every N steps (the final step is always saved at the end).
 * Rounds are interleaved; each way's median is reported, and the ratios are the medians of the
 * per-round ratios (each round runs the three ways back to back, so machine-load drift cancels;
 * the order rotates from round to round, so no way always runs first).
 *
 * Backends (separate functions, {@link wasmSpeedup} and {@link bundledModelBackends}): the same
 * training steps on `cpu` and on `wasm` (one thread, as `useBackend` pins it), rounds
 * interleaved, ms/step medians and the median of the per-round cpu/wasm ratios.
 */
import { closeSync, fsyncSync, mkdtempSync, openSync, readdirSync, readFileSync, renameSync, rmSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { crc32c } from "@node-rs/crc32";
import * as tf from "@tensorflow/tfjs";
import { StopAtStepHook } from "../hooks/index.js";
import { accuracy, buildDeepModel, buildModel, buildOptimizer, classifierLoss, makeDataset, makeSpirals, NUM_CLASSES } from "../examples/tfjs-classifier-data.js";
import { readBundle } from "../src/checkpoint/index.js";
import { silentLogger } from "../src/Logger.js";
import { monitoredTrainingSession } from "../src/training/monitoredTrainingSession.js";
import { InMemoryDataSource, tfjsSession, useBackend, type TfjsBackendName } from "../src/tfjs/index.js";
import { median, round } from "./stats.js";

const BATCH = 32;
const STEPS = 600;
const SAVE_EVERY = 50; // with the save before the first step: 13 saves per way
const SAVES = STEPS / SAVE_EVERY + 1;
// 21 rounds: with 9, the median ratio moved by ±8 % between back-to-back runs on this VM.
const ROUNDS = 21;

const { xs, ys } = makeDataset(42);
const n = ys.data.length;
const oneHot = new Float32Array(n * NUM_CLASSES);
for (let i = 0; i < n; i++) oneHot[i * NUM_CLASSES + (ys.data[i] as number)] = 1;
const labels = { dtype: "float32" as const, shape: [n, NUM_CLASSES], data: oneHot };
const loss = (yTrue: tf.Tensor, yPred: tf.Tensor): tf.Tensor => tf.losses.softmaxCrossEntropy(yTrue, yPred);

/**
 * Writes `payload` + its CRC32C as `dir/name` durably: a temporary file, fsync, rename, then
 * an fsync of the directory (what a checkpoint save does).
 */
const durableWrite = (dir: string, name: string, payload: Buffer): void => {
  const tmp = join(dir, `.${name}.tmp`);
  const trailer = Buffer.alloc(4);
  trailer.writeUInt32LE(crc32c(payload) >>> 0);
  const fd = openSync(tmp, "w");
  try {
    writeSync(fd, payload);
    writeSync(fd, trailer);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, join(dir, name));
  const d = openSync(dir, "r");
  try {
    fsyncSync(d);
  } finally {
    closeSync(d);
  }
};

/** The files of `dir` written by {@link durableWrite} whose CRC32C verifies. */
const verifiedWrites = (dir: string): number =>
  readdirSync(dir).filter((f) => {
    if (!f.endsWith(".bin")) return false;
    const b = readFileSync(join(dir, f));
    return b.length >= 4 && (crc32c(b.subarray(0, b.length - 4)) >>> 0) === b.readUInt32LE(b.length - 4);
  }).length;

/** The checkpoint bundles of `dir` whose checksums verify. */
const verifiedBundles = async (dir: string): Promise<number> => {
  let n = 0;
  for (const f of readdirSync(dir)) {
    if (!f.endsWith(".index")) continue;
    try {
      await readBundle(join(dir, f.slice(0, -".index".length)));
      n += 1;
    } catch {
      // not durable
    }
  }
  return n;
};

const weightsOf = (model: tf.LayersModel): Buffer => Buffer.concat(model.getWeights().map((w) => Buffer.from((w.dataSync() as Float32Array).buffer)));

/** A way's time for `STEPS` steps and the saves it made durable. */
interface WayResult {
  readonly ms: number;
  readonly durableSaves: number;
}

const timed = async (fn: () => Promise<void>): Promise<number> => {
  const t0 = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t0) / 1e6;
};

const bare = async (dir: string): Promise<WayResult> => {
  const model = buildModel();
  const optimizer = buildOptimizer();
  const data = new InMemoryDataSource({ xs, ys: labels, batchSize: BATCH, seed: 7 });
  const ms = await timed(async () => {
    durableWrite(dir, "weights-0.bin", weightsOf(model));
    for (let step = 1; step <= STEPS; step++) {
      const batch = data.next();
      const bx = batch.xs as tf.Tensor;
      const by = batch.ys as tf.Tensor;
      tf.tidy(() => {
        optimizer.minimize(() => loss(by, model.apply(bx) as tf.Tensor) as tf.Scalar);
      });
      tf.dispose([bx, by]);
      if (step % SAVE_EVERY === 0) durableWrite(dir, `weights-${step}.bin`, weightsOf(model));
    }
  });
  model.dispose();
  return { ms, durableSaves: verifiedWrites(dir) };
};

const fit = async (dir: string): Promise<WayResult> => {
  const model = buildModel();
  model.compile({ optimizer: buildOptimizer(), loss });
  const x = tf.tensor2d(xs.data, [n, 2]);
  const y = tf.tensor2d(oneHot, [n, NUM_CLASSES]);
  let step = 0;
  const batchesPerEpoch = Math.ceil(n / BATCH);
  const save = async (): Promise<void> => {
    await model.save(
      tf.io.withSaveHandler(async (artifacts) => {
        durableWrite(dir, `model-${step}.bin`, Buffer.concat([Buffer.from(JSON.stringify(artifacts.modelTopology)), Buffer.from(artifacts.weightData as ArrayBuffer)]));
        return { modelArtifactsInfo: { dateSaved: new Date(), modelTopologyType: "JSON" } };
      }),
    );
  };
  const ms = await timed(async () => {
    await model.fit(x, y, {
      batchSize: BATCH,
      epochs: Math.ceil(STEPS / batchesPerEpoch),
      shuffle: true,
      verbose: 0,
      callbacks: {
        onTrainBegin: save,
        onBatchEnd: async () => {
          step++;
          if (step % SAVE_EVERY === 0) await save();
          // Exactly STEPS steps, as the other ways.
          if (step === STEPS) model.stopTraining = true;
        },
      },
    });
  });
  tf.dispose([x, y]);
  model.dispose();
  if (step !== STEPS) throw new Error(`fit ran ${step} steps, not ${STEPS}`);
  return { ms, durableSaves: verifiedWrites(dir) };
};

const monitored = async (dir: string): Promise<WayResult> => {
  const model = buildModel();
  const optimizer = buildOptimizer();
  const sess = await monitoredTrainingSession({
    sessionFactory: () =>
      tfjsSession({ model, optimizer, data: new InMemoryDataSource({ xs, ys: labels, batchSize: BATCH, seed: 7 }), lossFn: loss }),
    checkpointDir: dir,
    saveCheckpointSteps: SAVE_EVERY,
    asyncCheckpoints: true,
    maxToKeep: null, // keep every save, as the other ways do: durableSaves counts them
    hooks: [new StopAtStepHook({ lastStep: STEPS })],
    logger: silentLogger,
  });
  const ms = await timed(async () => {
    while (!sess.shouldStop()) await sess.run("train");
    await sess.close();
  });
  model.dispose();
  return { ms, durableSaves: await verifiedBundles(dir) };
};

// ---------------------------------------------------------------------------------------------
// backends: cpu against wasm
// ---------------------------------------------------------------------------------------------

const BACKENDS: readonly TfjsBackendName[] = ["cpu", "wasm"];

/**
 * ms/step of `step` on each backend: `rounds` rounds, each running `warmup` then `steps` steps
 * on cpu and then on wasm (a fresh `setup()` per backend and round, built after the switch).
 * Returns each backend's per-round samples.
 */
const perBackend = async (
  setup: () => Promise<{ step: () => Promise<void>; dispose: () => void }>,
  opts: { readonly rounds: number; readonly warmup: number; readonly steps: number },
): Promise<Record<TfjsBackendName, number[]>> => {
  const samples: Record<TfjsBackendName, number[]> = { cpu: [], wasm: [] };
  for (let r = 0; r < opts.rounds; r++) {
    for (const backend of BACKENDS) {
      await useBackend(backend);
      const { step, dispose } = await setup();
      for (let i = 0; i < opts.warmup; i++) await step();
      const ms = await timed(async () => {
        for (let i = 0; i < opts.steps; i++) await step();
      });
      dispose();
      samples[backend].push(ms / opts.steps);
    }
  }
  await useBackend("cpu");
  return samples;
};

const summarize = (samples: Record<TfjsBackendName, number[]>) => ({
  cpuMsPerStep: round(median(samples.cpu), 3),
  wasmMsPerStep: round(median(samples.wasm), 3),
  speedup: round(median(samples.cpu.map((c, i) => c / (samples.wasm[i] as number))), 2),
});

const MLP = { inputs: 128, hidden: 256, outputs: 10, batch: 128, steps: 25, warmup: 3, rounds: 5 } as const;

/**
 * `wasmSpeedup`: an MLP 128 → 256 → 256 → 10 (relu, seeded Glorot) trained with Adam on one
 * fixed batch of 128 random examples; each step is `optimizer.minimize` plus reading the loss
 * (so the work is finished before the clock stops). The same steps on both backends.
 */
export const wasmSpeedup = async (): Promise<Record<string, unknown>> => {
  const samples = await perBackend(
    async () => {
      const model = tf.sequential({
        layers: [
          tf.layers.dense({ inputShape: [MLP.inputs], units: MLP.hidden, activation: "relu", kernelInitializer: tf.initializers.glorotUniform({ seed: 1 }) }),
          tf.layers.dense({ units: MLP.hidden, activation: "relu", kernelInitializer: tf.initializers.glorotUniform({ seed: 2 }) }),
          tf.layers.dense({ units: MLP.outputs, kernelInitializer: tf.initializers.glorotUniform({ seed: 3 }) }),
        ],
      });
      const optimizer = tf.train.adam(0.001);
      const x = tf.randomNormal([MLP.batch, MLP.inputs], 0, 1, "float32", 5);
      const y = tf.tidy(() => tf.oneHot(tf.randomUniform([MLP.batch], 0, MLP.outputs, "int32", 6) as tf.Tensor1D, MLP.outputs));
      return {
        step: async () => {
          const l = optimizer.minimize(() => tf.losses.softmaxCrossEntropy(y, model.apply(x) as tf.Tensor) as tf.Scalar, true) as tf.Scalar;
          await l.data();
          l.dispose();
        },
        dispose: () => {
          tf.dispose([x, y]);
          optimizer.dispose();
          model.dispose();
        },
      };
    },
    MLP,
  );
  const s = summarize(samples);
  return {
    model: `MLP ${MLP.inputs}-${MLP.hidden}-${MLP.hidden}-${MLP.outputs}, Adam, batch ${MLP.batch}`,
    stepsPerRound: MLP.steps,
    rounds: MLP.rounds,
    cpuMsPerStep: s.cpuMsPerStep,
    wasmMsPerStep: s.wasmMsPerStep,
    wasmSpeedup: s.speedup,
  };
};

const BUNDLED = { batch: 64, steps: 400, warmup: 50, rounds: 5 } as const;

/**
 * The model `npm start` trains (examples/tfjs-classifier.job.ts: 2 → 32 → 32 → 3 on the spirals,
 * Adam 0.01, batches of 64) through `TfjsSession`, fetching what the job fetches
 * (`train`, `loss`, `accuracy`), on both backends: which one the bundled YAML should pick.
 */
export const bundledModelBackends = async (): Promise<Record<string, unknown>> => {
  const data = makeSpirals(42);
  const samples = await perBackend(
    async () => {
      const sess = await tfjsSession({
        model: buildDeepModel(1),
        optimizer: buildOptimizer(0.01),
        data: new InMemoryDataSource({ xs: data.xs, ys: data.ys, batchSize: BUNDLED.batch, seed: 7 }),
        lossFn: classifierLoss,
        metrics: { accuracy },
      });
      await sess.variables.initialize();
      return {
        step: async () => {
          await sess.run({ train: "train", loss: "loss", accuracy: "accuracy" });
        },
        dispose: () => sess.close(),
      };
    },
    BUNDLED,
  );
  const s = summarize(samples);
  return {
    model: `examples/tfjs-classifier.job.ts: 2-32-32-3, Adam, batch ${BUNDLED.batch}, through TfjsSession`,
    stepsPerRound: BUNDLED.steps,
    rounds: BUNDLED.rounds,
    cpuMsPerStep: s.cpuMsPerStep,
    wasmMsPerStep: s.wasmMsPerStep,
    wasmSpeedup: s.speedup,
    faster: s.speedup > 1 ? "wasm" : "cpu",
  };
};

export default async (): Promise<Record<string, unknown>> => {
  tf.enableProdMode();
  await useBackend("cpu");
  const ways = { bare, fit, monitored } as const;
  const samples: Record<keyof typeof ways, number[]> = { bare: [], fit: [], monitored: [] };
  const saves: Record<keyof typeof ways, number[]> = { bare: [], fit: [], monitored: [] };
  const order = Object.entries(ways) as [keyof typeof ways, (d: string) => Promise<WayResult>][];
  // One warm-up round lets the JIT and tfjs kernels settle. Each round starts with another way
  // (round r runs them from way r mod 3), so no way always runs first or always right after the
  // same other way (whose garbage it would collect). No collection is forced between ways: a
  // forced full collection made every way slower (about a quarter here) and was not what a
  // training process does.
  for (let r = -1; r < ROUNDS; r++) {
    const start = (r + order.length) % order.length;
    for (const [name, way] of [...order.slice(start), ...order.slice(0, start)]) {
      const dir = mkdtempSync(join(tmpdir(), `bench-tfjs-${name}-`));
      try {
        const { ms, durableSaves } = await way(dir);
        if (durableSaves !== SAVES) throw new Error(`${name}: ${durableSaves} durable saves, expected ${SAVES}: the ways would not do equal work`);
        saves[name].push(durableSaves);
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
    durableSaves: { bare: median(saves.bare), fit: median(saves.fit), monitored: median(saves.monitored) },
    bareMs: round(bareMs, 1),
    fitMs: round(fitMs, 1),
    monitoredMs: round(monitoredMs, 1),
    monitoredOverBare: round(median(samples.monitored.map((m, i) => m / (samples.bare[i] as number))), 3),
    monitoredOverFit: round(median(samples.monitored.map((m, i) => m / (samples.fit[i] as number))), 3),
    targets: { monitoredOverBare: "<= 1.03", monitoredOverFit: "<= 1.0", wasmSpeedup: ">= 4" },
    ...(await backendResults()),
  };
};

/** The backend comparisons, as the result's `wasmSpeedup` and `backends` entries. */
const backendResults = async (): Promise<Record<string, unknown>> => {
  const mlp = await wasmSpeedup();
  const bundled = await bundledModelBackends();
  return { wasmSpeedup: mlp["wasmSpeedup"], backends: { mlp, bundledModel: bundled } };
};
