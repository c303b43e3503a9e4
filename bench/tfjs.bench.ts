/**
 * TensorFlow.js benchmarks, all on the `cpu` backend unless named otherwise.
 *
 * The same TensorFlow.js model trained on the same data for the same number of steps, three
 * ways, in one run, each making the same durable saves: one before the first step and one every
 * `SAVE_EVERY` steps (13). A durable save is written to a temporary file, fsynced, renamed into
 * place, and its directory fsynced; `durableSaves` counts, after each way returns, the saves on
 * disk that verify (a CRC32C trailer for the first two, the bundle's checksums for the third),
 * and `durableArrayBytes` the bytes of the arrays in them (weights, Adam's slots, the data
 * position; scalars are bookkeeping, encoded differently by each way). Each save holds what
 * resuming needs. The benchmark fails if a count differs from {@link expectedDurable}'s: a
 * comparison must do equal work. (Until 2026-12-01 the bare loop saved the model's weights
 * alone, 396 bytes of the monitored way's 3,588 per save: not equal work.)
 * - `bareMs`: a plain loop calling `optimizer.minimize` on the same shuffled batches (the same
 *   `InMemoryDataSource`), saving the weights, the optimizer's state, the data position and the
 *   step itself, in a state file;
 * - `fitMs`: `model.fit` for exactly `STEPS` batches, saving through `model.save` (with
 *   `includeOptimizer`) from callbacks; it has no data position to save;
 * - `monitoredMs`: `monitoredTrainingSession` with its default hooks (step counter, summaries)
 *   and asynchronous checkpoints every N steps, policy `block` (every save made; the final step
 *   is always saved at the end).
 * Rounds are interleaved; each way's median is reported, and the ratios are the medians of the
 * per-round ratios (each round runs the three ways back to back, so machine-load drift cancels;
 * the order rotates from round to round, so no way always runs first). Every way disposes its
 * model and optimizer. Each way's CPU time (`process.cpuUsage`, every thread) is reported too.
 *
 * Attribution (`attribution`): the monitored way with one default piece switched off or changed
 * ({@link VARIANTS}, each saying what it does not do), each run right beside a monitored run of
 * its own in every round; `monitoredOverThis` is the median of those pairs' ratios (the piece's
 * cost: > 1 means the monitored way is slower with it). `profile`: V8's sampling profile of
 * {@link PROFILE_RUNS} monitored runs (self time by frame and by area, and the inclusive time of
 * this library's functions). `BENCH_TFJS_ROUNDS` and `BENCH_TFJS_VARIANTS` narrow a run for
 * exploring; committed results use neither.
 *
 * Backends (separate functions, {@link wasmSpeedup} and {@link bundledModelBackends}): the same
 * training steps on `cpu` and on `wasm` (one thread, as `useBackend` pins it), rounds
 * interleaved, ms/step medians and the median of the per-round cpu/wasm ratios.
 */
import { closeSync, fsyncSync, mkdtempSync, openSync, readdirSync, readFileSync, renameSync, rmSync, writeSync } from "node:fs";
import { Session } from "node:inspector/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { crc32c } from "@node-rs/crc32";
import * as tf from "@tensorflow/tfjs";
import { StopAtStepHook } from "../hooks/index.js";
import { accuracy, buildDeepModel, buildModel, buildOptimizer, classifierLoss, makeDataset, makeSpirals, NUM_CLASSES } from "../examples/tfjs-classifier-data.js";
import { readBundle } from "../src/checkpoint/index.js";
import { silentLogger } from "../src/Logger.js";
import { monitoredTrainingSession, type MonitoredTrainingSessionOptions } from "../src/training/monitoredTrainingSession.js";
import { InMemoryDataSource, tfjsSession, useBackend, type TfjsBackendName } from "../src/tfjs/index.js";
import { median, quantile, round } from "./stats.js";

const BATCH = 32;
const STEPS = 600;
const SAVE_EVERY = 50; // with the save before the first step: 13 saves per way
const SAVES = STEPS / SAVE_EVERY + 1;
// 21 rounds: with 9, the median ratio moved by ±8 % between back-to-back runs on this VM.
// (BENCH_TFJS_ROUNDS overrides it for exploring; committed results use 21.)
const ROUNDS = Number(process.env["BENCH_TFJS_ROUNDS"] ?? 21);

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

/** One tensor of a saved state: its name, dtype, shape and bytes. */
interface StateEntry {
  readonly name: string;
  readonly dtype: string;
  readonly shape: readonly number[];
  readonly bytes: Buffer;
}

/** What a way made durable: its saves, and the bytes of the arrays (non-scalar tensors) in them. */
interface Durable {
  readonly saves: number;
  readonly arrayBytes: number;
}

/** A state file's payload: a little-endian u32 header length, the header (JSON: each entry's name, dtype, shape, byte length), then the entries' bytes. */
const stateFile = (entries: readonly StateEntry[]): Buffer => {
  const header = Buffer.from(JSON.stringify(entries.map(({ name, dtype, shape, bytes }) => ({ name, dtype, shape, byteLength: bytes.length }))));
  const length = Buffer.alloc(4);
  length.writeUInt32LE(header.length);
  return Buffer.concat([length, header, ...entries.map((e) => e.bytes)]);
};

const bytesOf = (data: ArrayBufferView): Buffer => Buffer.from(data.buffer, data.byteOffset, data.byteLength);

/** The arrays' bytes of a state (scalars are bookkeeping whose encoding differs from way to way: an int32 iteration count here, an int64 there). */
const arrayBytesOf = (entries: Iterable<{ readonly shape: readonly number[]; readonly byteLength: number }>): number => {
  let n = 0;
  for (const e of entries) if (e.shape.length > 0) n += e.byteLength;
  return n;
};

/** The state files of `dir` (written by {@link durableWrite}) whose CRC32C verifies, and their arrays' bytes. */
const verifiedWrites = (dir: string): Durable => {
  let saves = 0;
  let arrayBytes = 0;
  for (const f of readdirSync(dir)) {
    if (!f.endsWith(".bin")) continue;
    const b = readFileSync(join(dir, f));
    if (b.length < 8 || (crc32c(b.subarray(0, b.length - 4)) >>> 0) !== b.readUInt32LE(b.length - 4)) continue;
    const header = JSON.parse(b.subarray(4, 4 + b.readUInt32LE(0)).toString("utf8")) as { shape: number[]; byteLength: number }[];
    saves += 1;
    arrayBytes += arrayBytesOf(header);
  }
  return { saves, arrayBytes };
};

/** The checkpoint bundles of `dir` whose checksums verify, and their arrays' bytes. */
const verifiedBundles = async (dir: string): Promise<Durable> => {
  let saves = 0;
  let arrayBytes = 0;
  for (const f of readdirSync(dir)) {
    if (!f.endsWith(".index")) continue;
    try {
      const contents = await readBundle(join(dir, f.slice(0, -".index".length)));
      saves += 1;
      arrayBytes += arrayBytesOf([...contents.values.values()].map((v) => ({ shape: v.shape, byteLength: (v.data as ArrayBufferView).byteLength })));
    } catch {
      // not durable
    }
  }
  return { saves, arrayBytes };
};

/**
 * What resuming needs, as a bare loop saves it by hand: the model's weights, the optimizer's
 * (Adam's iteration count and its m and v slots, once the first step made them), the data
 * source's position (its epoch, offset, rng and permutation) and the step.
 */
const trainingState = async (model: tf.LayersModel, optimizer: tf.Optimizer, data: InMemoryDataSource, step: number): Promise<StateEntry[]> => {
  const entries: StateEntry[] = model.getWeights().map((w, i) => ({ name: `model/${model.weights[i]?.name ?? i}`, dtype: w.dtype, shape: w.shape, bytes: Buffer.from(bytesOf(w.dataSync())) }));
  for (const { name, tensor } of await optimizer.getWeights()) {
    entries.push({ name: `optimizer/${name}`, dtype: tensor.dtype, shape: tensor.shape, bytes: Buffer.from(bytesOf(tensor.dataSync())) });
    // The iteration count is a new tensor; the slots are the optimizer's own variables.
    if (!(tensor instanceof tf.Variable)) tensor.dispose();
  }
  for (const [name, v] of data.state()) entries.push({ name: `data/${name}`, dtype: v.dtype, shape: v.shape, bytes: Buffer.from(bytesOf(v.data as ArrayBufferView)) });
  entries.push({ name: "global_step", dtype: "int64", shape: [], bytes: bytesOf(new BigInt64Array([BigInt(step)])) });
  return entries;
};

/**
 * Disposes a way's model and optimizer (its slot variables). Until 2026-11-29 no way disposed its
 * optimizer: every round left Adam's slots registered with the engine, and the bare loop's
 * `minimize` without a variable list walks every registered variable each step, so the bare
 * loop slowed down from round to round (the other ways pass their variables).
 */
const disposeAll = (model: tf.LayersModel, optimizer: tf.Optimizer): void => {
  model.dispose();
  optimizer.dispose();
};

/** A way's time for `STEPS` steps and what it made durable. */
interface WayResult {
  readonly ms: number;
  readonly cpuMs: number;
  readonly durable: Durable;
}

/** Wall time, and the process's CPU time (user + system, every thread: libuv's fsyncs too), of `fn`, in ms. */
const timed = async (fn: () => Promise<void>): Promise<{ readonly ms: number; readonly cpuMs: number }> => {
  const c0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  await fn();
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  const c = process.cpuUsage(c0);
  return { ms, cpuMs: (c.user + c.system) / 1000 };
};

const bare = async (dir: string): Promise<WayResult> => {
  const model = buildModel();
  const optimizer = buildOptimizer();
  const data = new InMemoryDataSource({ xs, ys: labels, batchSize: BATCH, seed: 7 });
  const { ms, cpuMs } = await timed(async () => {
    const save = async (step: number): Promise<void> => durableWrite(dir, `state-${step}.bin`, stateFile(await trainingState(model, optimizer, data, step)));
    await save(0);
    for (let step = 1; step <= STEPS; step++) {
      const batch = data.next();
      const bx = batch.xs as tf.Tensor;
      const by = batch.ys as tf.Tensor;
      tf.tidy(() => {
        optimizer.minimize(() => loss(by, model.apply(bx) as tf.Tensor) as tf.Scalar);
      });
      tf.dispose([bx, by]);
      if (step % SAVE_EVERY === 0) await save(step);
    }
  });
  disposeAll(model, optimizer);
  return { ms, cpuMs, durable: verifiedWrites(dir) };
};

const fit = async (dir: string): Promise<WayResult> => {
  const model = buildModel();
  const optimizer = buildOptimizer();
  model.compile({ optimizer, loss });
  const x = tf.tensor2d(xs.data, [n, 2]);
  const y = tf.tensor2d(oneHot, [n, NUM_CLASSES]);
  let step = 0;
  const batchesPerEpoch = Math.ceil(n / BATCH);
  const save = async (): Promise<void> => {
    await model.save(
      tf.io.withSaveHandler(async (artifacts) => {
        // Keras's own save: the topology, the weights and (includeOptimizer) the optimizer's.
        const weightData = Buffer.from(artifacts.weightData as ArrayBuffer);
        let at = 0;
        const entries: StateEntry[] = (artifacts.weightSpecs ?? []).map((spec) => {
          const length = spec.shape.reduce((a, b) => a * b, 1) * 4;
          const bytes = weightData.subarray(at, at + length);
          at += length;
          return { name: spec.name, dtype: spec.dtype, shape: spec.shape, bytes };
        });
        if (at !== weightData.length) throw new Error(`fit: the weight specs cover ${at} of ${weightData.length} bytes`);
        entries.push({ name: "modelTopology", dtype: "string", shape: [], bytes: Buffer.from(JSON.stringify(artifacts.modelTopology)) });
        durableWrite(dir, `model-${step}.bin`, stateFile(entries));
        return { modelArtifactsInfo: { dateSaved: new Date(), modelTopologyType: "JSON" } };
      }),
      { includeOptimizer: true },
    );
  };
  const { ms, cpuMs } = await timed(async () => {
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
  disposeAll(model, optimizer);
  if (step !== STEPS) throw new Error(`fit ran ${step} steps, not ${STEPS}`);
  return { ms, cpuMs, durable: verifiedWrites(dir) };
};

/** What a variant of the monitored way changes in `monitoredTrainingSession`'s options (attribution: each default piece switched off in turn). */
type MonitoredVariant = Partial<Pick<MonitoredTrainingSessionOptions, "logStepCountSteps" | "saveSummariesSteps" | "saveSummariesSecs" | "asyncCheckpoints" | "yieldIntervalMs">> & {
  /** No checkpoint directory: no saves at all (summaries, which default to it, go to the same directory as `summaryDir`). */
  readonly noCheckpoints?: boolean;
};

const monitoredWith =
  (variant: MonitoredVariant) =>
  async (dir: string): Promise<WayResult> => {
    const { noCheckpoints, ...options } = variant;
    const model = buildModel();
    const optimizer = buildOptimizer();
    const sess = await monitoredTrainingSession({
      sessionFactory: () =>
        tfjsSession({ model, optimizer, data: new InMemoryDataSource({ xs, ys: labels, batchSize: BATCH, seed: 7 }), lossFn: loss }),
      checkpointDir: noCheckpoints === true ? null : dir,
      ...(noCheckpoints === true ? { summaryDir: dir } : {}),
      saveCheckpointSteps: SAVE_EVERY,
      // In the background, but every save made: `true` (TensorFlow's skip policy) drops a save
      // that falls due while the last is still being written, which the equal-work check refuses
      // (on 2026-12-01 a slow fsync made 12 of 13 saves, twice in 40 runs). `block` waits for the
      // running save only then.
      asyncCheckpoints: "block",
      maxToKeep: null, // keep every save, as the other ways do: durableSaves counts them
      hooks: [new StopAtStepHook({ lastStep: STEPS })],
      logger: silentLogger,
      ...options,
    });
    const { ms, cpuMs } = await timed(async () => {
      while (!sess.shouldStop()) await sess.run("train");
      await sess.close();
    });
    disposeAll(model, optimizer);
    return { ms, cpuMs, durable: await verifiedBundles(dir) };
  };

const monitored = monitoredWith({});

/**
 * The pipeline without the pipeline: the same `TfjsSession` (its `train` fetch reads the loss
 * back, as the monitored way's does) in a plain loop, saving its whole state (the session's
 * snapshot) in a state file as the bare loop does. What it adds over the bare loop is
 * `TfjsSession`'s own step; what the monitored way adds over it is MonitoredSession and its hooks.
 */
const tfjsSessionLoop = async (dir: string): Promise<WayResult> => {
  const model = buildModel();
  const optimizer = buildOptimizer();
  const sess = await tfjsSession({ model, optimizer, data: new InMemoryDataSource({ xs, ys: labels, batchSize: BATCH, seed: 7 }), lossFn: loss });
  await sess.variables.initialize();
  const { ms, cpuMs } = await timed(async () => {
    const save = async (step: number): Promise<void> => {
      const snapshot = await sess.variables.snapshot();
      const entries = [...snapshot].map(([name, v]) => ({ name, dtype: v.dtype, shape: v.shape, bytes: Buffer.from(bytesOf(v.data as ArrayBufferView)) }));
      durableWrite(dir, `state-${step}.bin`, stateFile(entries));
    };
    await save(0);
    for (let step = 1; step <= STEPS; step++) {
      await sess.run("train");
      if (step % SAVE_EVERY === 0) await save(step);
    }
  });
  await sess.close();
  disposeAll(model, optimizer);
  return { ms, cpuMs, durable: verifiedWrites(dir) };
};

/**
 * The attribution variants: the monitored way with one default piece switched off (or changed),
 * and what each does not do. Each runs right beside a monitored run of its own in every round
 * (see the default export); `saves` is the durable saves it must make (the benchmark fails on any
 * other count).
 *
 * Not a variant: the monitored way without its timed event-loop turns (`yieldIntervalMs:
 * Infinity`). It does not do equal work: with turns only while a save is pending, a save that is
 * still being written when the next falls due is coalesced with it, and a run made 11 of its 13
 * saves durable. The turns' cost is read from the profile instead (setImmediate's frames).
 */
const VARIANTS = {
  noStepCounter: { way: monitoredWith({ logStepCountSteps: null }), saves: SAVES, without: "no StepCounterHook (no global_step/sec summaries or lines)" },
  noSummaries: { way: monitoredWith({ saveSummariesSteps: null, saveSummariesSecs: null }), saves: SAVES, without: "no SummarySaverHook (no loss summaries every 100 steps)" },
  syncCheckpoints: { way: monitoredWith({ asyncCheckpoints: false }), saves: SAVES, without: "the same 13 saves, each blocking the loop while it is written (no background save, so no event-loop turn per step while one is pending)" },
  noCheckpoints: { way: monitoredWith({ noCheckpoints: true }), saves: 0, without: "no checkpoints at all: 0 durable saves against the bare loop's 13 (summaries still written, to the same directory)" },
  hooksOff: {
    way: monitoredWith({ logStepCountSteps: null, saveSummariesSteps: null, saveSummariesSecs: null, noCheckpoints: true, yieldIntervalMs: Number.POSITIVE_INFINITY }),
    saves: 0,
    without: "MonitoredSession with StopAtStepHook only: no step counter, summaries, checkpoints (0 durable saves) or timed turns",
  },
  tfjsSessionLoop: { way: tfjsSessionLoop, saves: SAVES, without: "no MonitoredSession: TfjsSession's run in a plain loop, saving its whole state in a state file as the bare loop does (fsynced, not a checkpoint bundle)" },
} as const;

type VariantName = keyof typeof VARIANTS;

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
      const { ms } = await timed(async () => {
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

/**
 * What each way must make durable, counted from the model and the data source themselves. Every
 * save holds the model's weights (`W` bytes of arrays) and the data source's permutation (`P`);
 * the 12 after the first step also Adam's m and v slots (`2W`), which the first step makes. `fit`
 * saves no data position (`model.fit` shuffles inside and exposes none to save): its saves hold
 * `P` bytes fewer each, the one difference of work, stated in the results.
 */
const expectedDurable = (): { readonly full: Durable; readonly fit: Durable; readonly none: Durable; readonly dataArrayBytes: number } => {
  const model = buildModel();
  const W = arrayBytesOf(model.getWeights().map((w) => ({ shape: w.shape, byteLength: w.size * 4 })));
  model.dispose();
  const state = new InMemoryDataSource({ xs, ys: labels, batchSize: BATCH, seed: 7 }).state();
  const P = arrayBytesOf([...state.values()].map((v) => ({ shape: v.shape, byteLength: (v.data as ArrayBufferView).byteLength })));
  const perSaves = (withData: boolean): number => (W + (withData ? P : 0)) * SAVES + 2 * W * (SAVES - 1);
  return { full: { saves: SAVES, arrayBytes: perSaves(true) }, fit: { saves: SAVES, arrayBytes: perSaves(false) }, none: { saves: 0, arrayBytes: 0 }, dataArrayBytes: P };
};

/** Runs `way` in a fresh directory and checks what it made durable: its saves and their arrays' bytes. */
const runWay = async (name: string, way: (dir: string) => Promise<WayResult>, expected: Durable): Promise<WayResult> => {
  const dir = mkdtempSync(join(tmpdir(), `bench-tfjs-${name}-`));
  try {
    const result = await way(dir);
    const { saves, arrayBytes } = result.durable;
    if (saves !== expected.saves || arrayBytes !== expected.arrayBytes)
      throw new Error(`${name}: ${saves} durable saves of ${arrayBytes} array bytes, expected ${expected.saves} of ${expected.arrayBytes}: the ways would not do equal work`);
    return result;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
};

/** Per-round samples of one way: wall and CPU ms. */
interface Samples {
  readonly ms: number[];
  readonly cpuMs: number[];
}

const samplesOf = (): Samples => ({ ms: [], cpuMs: [] });

const push = (s: Samples, r: WayResult): void => {
  s.ms.push(r.ms);
  s.cpuMs.push(r.cpuMs);
};

/** The per-round ratios `a[i] / b[i]`. */
const ratios = (a: readonly number[], b: readonly number[]): number[] => a.map((x, i) => x / (b[i] as number));

/** The median of the per-round ratios. */
const ratioOf = (a: readonly number[], b: readonly number[]): number => round(median(ratios(a, b)), 3);

/** The quartiles of the per-round ratios: how far single rounds spread around the median. */
const ratioQuartiles = (a: readonly number[], b: readonly number[]): { readonly p25: number; readonly p75: number } => {
  const r = ratios(a, b);
  return { p25: round(quantile(r, 0.25), 3), p75: round(quantile(r, 0.75), 3) };
};

export default async (): Promise<Record<string, unknown>> => {
  tf.enableProdMode();
  await useBackend("cpu");
  const ways = { bare, fit, monitored } as const;
  const expected = expectedDurable();
  const wayExpects: Record<keyof typeof ways, Durable> = { bare: expected.full, fit: expected.fit, monitored: expected.full };
  const variantExpects = (name: VariantName): Durable => (VARIANTS[name].saves === 0 ? expected.none : expected.full);
  const order = Object.entries(ways) as [keyof typeof ways, (d: string) => Promise<WayResult>][];
  // BENCH_TFJS_VARIANTS=noSummaries,noCheckpoints runs only those variants, and skips the profile and
  // the backends: for exploring one piece. Committed results run all of them.
  const only = process.env["BENCH_TFJS_VARIANTS"]?.split(",");
  const variants = (Object.keys(VARIANTS) as VariantName[]).filter((name) => only === undefined || only.includes(name));
  const main = { bare: samplesOf(), fit: samplesOf(), monitored: samplesOf() };
  // Each variant beside a monitored run of its own, in the same round: the pair's ratio is the piece's cost.
  const paired = Object.fromEntries(variants.map((name) => [name, { variant: samplesOf(), monitored: samplesOf(), bare: [] as number[] }]));
  // One warm-up round lets the JIT and tfjs kernels settle. Each round first runs the three ways
  // back to back, starting with another way each round (round r from way r mod 3), so no way
  // always runs first or always right after the same other way (whose garbage it would
  // collect). Then each variant runs right beside a monitored run of its own, variant first in
  // odd rounds and second in even ones: a piece's cost is the median of those pairs' ratios,
  // measured a second apart, where the VM's speed (it drifts by several per cent over the tens
  // of seconds of a round) has little time to change. No collection is forced between ways: a
  // forced full collection made every way slower (about a quarter here) and was not what a
  // training process does.
  for (let r = -1; r < ROUNDS; r++) {
    const start = (r + order.length) % order.length;
    const results = new Map<string, WayResult>();
    for (const [name, way] of [...order.slice(start), ...order.slice(0, start)]) results.set(name, await runWay(name, way, wayExpects[name]));
    if (r >= 0) for (const name of Object.keys(main) as (keyof typeof main)[]) push(main[name], results.get(name) as WayResult);
    const vStart = (r + variants.length) % Math.max(1, variants.length);
    for (const name of [...variants.slice(vStart), ...variants.slice(0, vStart)]) {
      const v = VARIANTS[name];
      const pair: [string, () => Promise<WayResult>][] = [
        [name, () => runWay(name, v.way, variantExpects(name))],
        ["monitored", () => runWay("monitored", monitored, expected.full)],
      ];
      if (r % 2 === 0) pair.reverse();
      const got = new Map<string, WayResult>();
      for (const [n, run] of pair) got.set(n, await run());
      if (r < 0) continue;
      const p = paired[name] as (typeof paired)[string];
      push(p.variant, got.get(name) as WayResult);
      push(p.monitored, got.get("monitored") as WayResult);
      p.bare.push(results.get("bare")?.ms as number);
    }
  }
  const attribution = Object.fromEntries(
    variants.map((name) => {
      const p = paired[name] as (typeof paired)[string];
      return [
        name,
        {
          ms: round(median(p.variant.ms), 1),
          monitoredOverThis: ratioOf(p.monitored.ms, p.variant.ms),
          monitoredOverThisRounds: ratioQuartiles(p.monitored.ms, p.variant.ms),
          cpuMonitoredOverThis: ratioOf(p.monitored.cpuMs, p.variant.cpuMs),
          overBare: ratioOf(p.variant.ms, p.bare),
          durableSaves: VARIANTS[name].saves,
          durableArrayBytes: variantExpects(name).arrayBytes,
          without: VARIANTS[name].without,
        },
      ];
    }),
  );
  return {
    steps: STEPS,
    batchSize: BATCH,
    saveEverySteps: SAVE_EVERY,
    rounds: ROUNDS,
    durableSaves: { bare: SAVES, fit: SAVES, monitored: SAVES },
    // Checked in every run of every way (the benchmark fails on any other count).
    durableArrayBytes: { bare: expected.full.arrayBytes, fit: expected.fit.arrayBytes, monitored: expected.full.arrayBytes },
    fitSavesNoDataPosition: `model.fit exposes no data position to save: its saves hold ${expected.dataArrayBytes} bytes (the permutation) fewer each`,
    bareMs: round(median(main.bare.ms), 1),
    fitMs: round(median(main.fit.ms), 1),
    monitoredMs: round(median(main.monitored.ms), 1),
    monitoredOverBare: ratioOf(main.monitored.ms, main.bare.ms),
    monitoredOverBareRounds: ratioQuartiles(main.monitored.ms, main.bare.ms),
    monitoredOverFit: ratioOf(main.monitored.ms, main.fit.ms),
    cpuMs: { bare: round(median(main.bare.cpuMs), 1), fit: round(median(main.fit.cpuMs), 1), monitored: round(median(main.monitored.cpuMs), 1) },
    monitoredCpuOverBare: ratioOf(main.monitored.cpuMs, main.bare.cpuMs),
    targets: { monitoredOverBare: "<= 1.03", monitoredOverFit: "<= 1.0", wasmSpeedup: ">= 4" },
    attribution,
    ...(only === undefined ? { profile: await profileMonitored(), ...(await backendResults()) } : { variants }),
  };
};

// ---------------------------------------------------------------------------------------------
// a CPU profile of the monitored way
// ---------------------------------------------------------------------------------------------

/** `:<line>`, where the profile knows it (tsx's transformed modules report line 0: nothing). */
const lineSuffix = (lineNumber: number): string => (lineNumber > 0 ? `:${lineNumber + 1}` : "");

/** Frames and areas listed in the profile's summary. */
const TOP_FRAMES = 20;

/** Where a frame's code lives, for the profile's summary by area. */
const areaOf = (url: string, functionName: string): string => {
  if (url === "") return functionName === "" ? "(anonymous)" : `(${functionName.replace(/^\(|\)$/g, "")})`;
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (m !== null) return m[1] as string;
  if (url.startsWith("node:")) return "node internals";
  const src = /\/(src|hooks|bench|examples)\/(?:([^/]+)\/)?/.exec(url);
  if (src !== null) return src[2] === undefined || src[2].includes(".") ? src[1] as string : `${src[1]}/${src[2]}`;
  return url;
};

/** Monitored runs the profile samples. */
const PROFILE_RUNS = 3;

/**
 * A CPU profile (V8's sampling profiler, through `node:inspector`) of the monitored way run
 * `PROFILE_RUNS` times: the frames with the most self time, and self time by area (tfjs, this
 * library's folders, Node's internals, the garbage collector, idle). Samples, not a timing: the
 * profiler slows everything it samples alike.
 */
const profileMonitored = async (): Promise<Record<string, unknown>> => {
  const session = new Session();
  session.connect();
  try {
    await session.post("Profiler.enable");
    await session.post("Profiler.setSamplingInterval", { interval: 100 });
    await session.post("Profiler.start");
    for (let i = 0; i < PROFILE_RUNS; i++) {
      const dir = mkdtempSync(join(tmpdir(), "bench-tfjs-profile-"));
      try {
        await monitored(dir);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
    const { profile } = await session.post("Profiler.stop");
    const total = profile.nodes.reduce((a, n) => a + (n.hitCount ?? 0), 0);
    const frames = new Map<string, number>();
    const areas = new Map<string, number>();
    for (const node of profile.nodes) {
      const hits = node.hitCount ?? 0;
      if (hits === 0) continue;
      const { functionName, url, lineNumber } = node.callFrame;
      const file = url.replace(/^.*\/(node_modules|src|hooks|bench|examples)\//, "$1/");
      const key = url === "" ? `(${functionName.replace(/^\(|\)$/g, "")})` : `${functionName === "" ? "(anonymous)" : functionName} ${file}${lineSuffix(lineNumber)}`;
      frames.set(key, (frames.get(key) ?? 0) + hits);
      const area = areaOf(url, functionName);
      areas.set(area, (areas.get(area) ?? 0) + hits);
    }
    // Inclusive time of this library's functions (src/, hooks/): each sample counts once for
    // every distinct function of ours on its stack. Attribution by piece: the hooks' methods,
    // the pipeline's layers, TfjsSession's step, the checkpointer.
    const byId = new Map(profile.nodes.map((node) => [node.id, node]));
    const inclusive = new Map<string, number>();
    const walk = (id: number, onStack: ReadonlySet<string>): void => {
      const node = byId.get(id);
      if (node === undefined) return;
      const { functionName, url, lineNumber } = node.callFrame;
      const ours = /\/(src|hooks)\//.test(url) && !url.includes("node_modules");
      const key = `${functionName === "" ? "(anonymous)" : functionName} ${url.replace(/^.*\/(src|hooks)\//, "$1/")}${lineSuffix(lineNumber)}`;
      const stack = ours && !onStack.has(key) ? new Set([...onStack, key]) : onStack;
      const hits = node.hitCount ?? 0;
      if (hits > 0) for (const k of stack) inclusive.set(k, (inclusive.get(k) ?? 0) + hits);
      for (const child of node.children ?? []) walk(child, stack);
    };
    const root = profile.nodes[0];
    if (root !== undefined) walk(root.id, new Set());
    const share = (hits: number): number => round((100 * hits) / total, 1);
    const top = (m: Map<string, number>) =>
      [...m.entries()]
        .sort((a, b) => b[1] - a[1])
        .slice(0, TOP_FRAMES)
        .map(([name, hits]) => ({ name, selfPercent: share(hits) }));
    return {
      runs: PROFILE_RUNS,
      samples: total,
      samplingIntervalUs: 100,
      topFrames: top(frames),
      byArea: top(areas),
      oursInclusive: [...inclusive.entries()]
        .sort((a, b) => b[1] - a[1])
        .slice(0, 3 * TOP_FRAMES)
        .map(([name, hits]) => ({ name, inclusivePercent: share(hits) })),
    };
  } finally {
    await session.post("Profiler.disable").catch(() => undefined);
    session.disconnect();
  }
};

/** The backend comparisons, as the result's `wasmSpeedup` and `backends` entries. */
const backendResults = async (): Promise<Record<string, unknown>> => {
  const mlp = await wasmSpeedup();
  const bundled = await bundledModelBackends();
  return { wasmSpeedup: mlp["wasmSpeedup"], backends: { mlp, bundledModel: bundled } };
};
