/**
 * A {@link Session} over a TensorFlow.js `LayersModel`: one `train` op applies one optimizer step
 * on the next batch of a checkpointable {@link TfjsDataSource}, and the session's
 * {@link VariableStore} holds everything a bit-exact resume needs — the model's weights, the
 * optimizer's state, the global step and the data position — under names that do not depend on
 * tfjs's process-wide layer-name counters.
 *
 * ## Ops
 * - `train`: one optimizer step on the next batch (or on the fed `xs`/`ys`); increments the
 *   global step; returns the batch loss computed by the step's forward pass (before the update).
 * - `loss` and each metric: in a run that also fetches `train`, the value from that step's forward
 *   pass on its batch (so `run(["train", "loss"])` costs one forward pass and both numbers agree).
 *   In a run without `train`, the current model evaluated (inference mode) on the fed `xs`/`ys`,
 *   or else on the batch of this session's last `train` step (`FailedPreconditionError` if none).
 * - each summary: the summary function's number, evaluated after this run's `train` step.
 * - a variable name (`global_step`, `model/0_dense/kernel`...): its value at the start of the run
 *   (the global step as a number, other variables as a {@link TensorValue}).
 *
 * ## Variable names
 * - `model/<i>_<class>/<weight>`: weights of the layer at position `i` of `model.layers`, `class`
 *   the snake-cased layer class, `weight` the weight's own name inside the layer (`kernel`,
 *   `bias`, `gamma`...). E.g. `model/0_dense/kernel`. Nested models fall back to
 *   `<j>_<last name segment>` where `j` is the weight's position in the layer.
 * - `optimizer/iterations` (int64), `optimizer/<field>` for every tf variable the optimizer holds
 *   outside `getWeights()` (Adam's `accBeta1`/`accBeta2`, which `setWeights` would otherwise
 *   recompute with `pow` and lose bit-exactness), and `optimizer/slot_<k>/<weight>/<slot>` for the
 *   k-th entry of `optimizer.getWeights()` (Adam: `.../m`, `.../v`). Slots exist once the
 *   optimizer made its first step (or after a restore that holds them). The optimizer is restored
 *   as a whole: a checkpoint that holds any `optimizer/` entry must hold them all, except one
 *   Keras wrote (restored through its object graph), whose Adam state has no beta powers: they
 *   follow from the iterations (docs/checkpoints.md, "TensorFlow 2 object graph and Keras 3").
 * - the global step (`global_step`, int64).
 * - `data/<name>` for each part of the data source's position (restored as a whole).
 *
 * All are in the `global` collection; there are no local variables.
 *
 * ## Replicas
 * With `collective` (any {@link Collective}, e.g. `TcpCollective` from `monitored-session/cluster`),
 * the session is one replica of a synchronous data-parallel group; give each rank its shard of
 * the data (`InMemoryDataSource`'s `shard`). Every rank must run `train` the same number of times,
 * in the same order.
 * - The first `train` step exchanges model signatures (every weight's name, dtype and shape, and
 *   the trainable parameter count); on a mismatch every rank raises `ModelMismatchError` (an `InvalidArgumentError`) naming
 *   the differing rank and both shapes, before any update.
 * - The first `train` step after `initialize()` or `restore()` first copies rank 0's (the chief's)
 *   live state into every replica: weights, optimizer slots, global step and data position.
 * - A collective call that raises `CollectiveReformedError` (the group re-formed its ring after a
 *   lost rank came back) applied nothing: the step joins the new ring as at the first step
 *   (signatures, then rank 0's live state) and runs again, on the same batch (a replica's step
 *   that fails in its all-reduce puts the data source back where it was before the step).
 * - Each step computes the local gradients, averages them and the batch loss in one all-reduce
 *   (flattened in the fixed order of the trainable weights), and applies the averaged gradients on
 *   every rank: the replicas' weights and optimizer state stay bit-identical.
 * - The same all-reduce carries the collective's `stopVote`: after the first step in which any
 *   rank asked to stop, `stopVote.agreed()` is called on every rank (how `run` stops every
 *   replica at one step boundary on a preemption, the chief saving that step).
 * - `train` (and `loss` in a run with `train`) returns the global mean loss, the same bits on
 *   every rank, so a NaN on any rank is a NaN on all of them at the same step. Metrics fetched with
 *   `train` are the local replica's.
 *
 * ## Modules
 * This module runs the ops. The variables live in `internal/TfjsVariables.ts` (the store:
 * initialization, snapshots, validated restores), the optimizer's state in
 * `internal/OptimizerState.ts` (slots and Adam's hidden beta powers), the stable names in
 * `internal/naming.ts`, tensor conversions in `internal/tensors.ts`, and the export for serving
 * in `exportModel.ts`.
 *
 * @example
 * ```ts
 * import * as tf from "@tensorflow/tfjs";
 * import { withSession } from "monitored-session";
 * import { StopAtStepHook } from "monitored-session/hooks";
 * import { InMemoryDataSource, tfjsSession } from "monitored-session/tfjs";
 *
 * const buildModel = () => tf.sequential({ layers: [tf.layers.dense({ inputShape: [2], units: 3, activation: "softmax" })] });
 * const data = new InMemoryDataSource({ xs: [[0, 1], [1, 0]], ys: [[1, 0, 0], [0, 1, 0]], batchSize: 2 });
 * const lossFn = (yTrue: tf.Tensor, yPred: tf.Tensor) => tf.losses.meanSquaredError(yTrue, yPred);
 *
 * const sessionCreator = {
 *   createSession: async () => {
 *     const sess = await tfjsSession({ model: buildModel(), optimizer: tf.train.adam(0.01), data, lossFn });
 *     await sess.variables.initialize();
 *     return sess;
 *   },
 * };
 * await withSession({ sessionCreator, hooks: [new StopAtStepHook({ lastStep: 500 })] }, async (s) => {
 *   while (!s.shouldStop()) await s.run("train");
 * });
 * ```
 *
 * @module
 */

import * as tf from "@tensorflow/tfjs";

import type { Collective } from "../session/Collective.js";
import { FailedPreconditionError, InvalidArgumentError, RuntimeError, ValueError } from "../errors.js";
import { collectNames, mapFetchesAny } from "../session/fetches.js";
import { LocalSession } from "../session/LocalSession.js";
import {
  fetchOf,
  GLOBAL_STEP_NAME,
  type Feeds,
  type Fetch,
  type Fetches,
  type Session,
  type LocalVariableStore,
  type VariableStore,
} from "../session/Session.js";
import type { BatchData, TfjsDataSource } from "./DataSource.js";
import { exportModelArtifacts, type ExportedModel } from "./exportModel.js";
import { InMemoryDataSource } from "./InMemoryDataSource.js";
import { kerasObjectPaths } from "./internal/kerasPaths.js";
import { modelWeights } from "./internal/naming.js";
import { compiledOptimizer, OptimizerState } from "./internal/OptimizerState.js";
import { Replicas } from "./internal/Replicas.js";
import { TfjsVariables } from "./internal/TfjsVariables.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A loss: a scalar (or per-example values, averaged) from targets and predictions. */
export type TfjsLossFn = (yTrue: tf.Tensor, yPred: tf.Tensor) => tf.Tensor;

/** A metric: a scalar (or per-example values, averaged) from targets and predictions. */
export type TfjsMetricFn = (yTrue: tf.Tensor, yPred: tf.Tensor) => tf.Tensor;

/** What a summary function sees. */
export interface TfjsSummaryContext {
  readonly model: tf.LayersModel;
  readonly optimizer: tf.Optimizer;
  /** The global step after this run's `train` step, if any. */
  readonly globalStep: number;
}

/** A summary value: a number, or a one-element tensor (disposed by the session). */
export type TfjsSummaryFn = (ctx: TfjsSummaryContext) => number | tf.Tensor;

/** Options of {@link TfjsSession.create}. */
export interface TfjsSessionOptions {
  /** A single-input, single-output model. Its weights at creation are what `initialize()` restores. */
  readonly model: tf.LayersModel;
  /** The optimizer (default: the compiled model's). It must implement `getWeights`/`setWeights`. */
  readonly optimizer?: tf.Optimizer;
  /** Where `train` takes its batches. Its position at creation is what `initialize()` restores. */
  readonly data: TfjsDataSource;
  /** The loss (default: the compiled model's single loss, averaged over the batch). */
  readonly lossFn?: TfjsLossFn;
  /** Metrics, fetched by name. */
  readonly metrics?: Readonly<Record<string, TfjsMetricFn>>;
  /** Summary values, fetched by name. */
  readonly summaries?: Readonly<Record<string, TfjsSummaryFn>>;
  /** The global step variable's name (default `global_step`). */
  readonly globalStepName?: string;
  /**
   * Train as one replica of a synchronous data-parallel group (TensorFlow's
   * `MultiWorkerMirroredStrategy`): each `train` step averages the gradients and the loss over the
   * collective's ranks, and every rank applies the same update. See "Replicas" above.
   */
  readonly collective?: Collective;
}

/** The name of the training op; it resolves to the step's batch loss. */
export const TRAIN_OP: Fetch<number> = fetchOf<number>("train");
/** The name of the loss op. */
export const LOSS_OP: Fetch<number> = fetchOf<number>("loss");
/** The feed names a {@link TfjsSession} accepts. */
export const FEED_NAMES = ["xs", "ys"] as const;

/** A batch as tensors this session owns. */
interface OwnedBatch {
  readonly xs: tf.Tensor;
  readonly ys: tf.Tensor;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** A {@link Session} that trains a TensorFlow.js model. Create it with {@link TfjsSession.create}. */
export class TfjsSession extends LocalSession {
  readonly variables: LocalVariableStore;
  readonly globalStepName: string;
  readonly model: tf.LayersModel;
  readonly optimizer: tf.Optimizer;
  private readonly data: TfjsDataSource;
  private readonly lossFn: TfjsLossFn;
  private readonly metrics: ReadonlyMap<string, TfjsMetricFn>;
  private readonly summaries: ReadonlyMap<string, TfjsSummaryFn>;
  private readonly trainableVars: tf.Variable[];
  private readonly optimizerState: OptimizerState;
  private readonly vars: TfjsVariables;
  private readonly replicas: Replicas | undefined;
  private lastBatch: OwnedBatch | undefined;

  /**
   * Wraps `options.model`. The session starts uninitialized: call `variables.initialize()` (which
   * restores the model's weights, the optimizer's state and the data position as they are now)
   * or `variables.restore(checkpoint)`.
   */
  static async create(options: TfjsSessionOptions): Promise<TfjsSession> {
    const session = new TfjsSession(options);
    await session.optimizerState.refresh();
    // Captured while everything is in its creation state, so initialize() restarts identically.
    session.vars.captureInitialValues();
    return session;
  }

  private constructor(options: TfjsSessionOptions) {
    super();
    this.model = options.model;
    this.data = options.data;
    this.globalStepName = options.globalStepName ?? GLOBAL_STEP_NAME;
    if (this.model.inputs.length !== 1 || this.model.outputs.length !== 1) {
      throw new ValueError(
        `TfjsSession needs a model with one input and one output, got ${this.model.inputs.length} and ${this.model.outputs.length}`,
      );
    }
    const optimizer = options.optimizer ?? compiledOptimizer(this.model);
    if (optimizer === undefined) {
      throw new ValueError("TfjsSession needs an optimizer: pass `optimizer` or compile the model with one");
    }
    this.optimizer = optimizer;
    this.lossFn = options.lossFn ?? compiledLoss(this.model);
    this.metrics = new Map(Object.entries(options.metrics ?? {}));
    this.summaries = new Map(Object.entries(options.summaries ?? {}));

    const weights = modelWeights(this.model);
    const trainable = new Set(this.model.trainableWeights);
    this.trainableVars = weights.filter((w) => trainable.has(w.variable)).map((w) => w.variable.read() as tf.Variable);
    this.optimizerState = new OptimizerState(this.optimizer, weights);
    this.replicas = options.collective === undefined ? undefined : new Replicas(options.collective, weights, this.trainableVars);
    const shards = this.data instanceof InMemoryDataSource ? this.data.shardCount : 1;
    if (options.collective !== undefined && shards > 1 && shards !== options.collective.size) {
      throw new ValueError(`the data source has ${shards} shards but the collective ${options.collective.size} ranks; shard the data by the collective's size`);
    }
    const objectPaths = kerasObjectPaths({
      weights,
      sequential: this.model.getClassName() === "Sequential",
      trainable: weights.filter((w) => trainable.has(w.variable)).map((w) => w.name),
      optimizerClass: this.optimizer.getClassName(),
    });
    this.vars = new TfjsVariables(
      weights,
      this.optimizerState,
      this.data,
      this.globalStepName,
      {
        assertOpen: () => this.assertOpen(),
        restored: () => {
          this.setLastBatch(undefined);
          this.replicas?.restored();
        },
      },
      objectPaths,
    );
    this.variables = this.vars;

    const taken = new Set<string>();
    const claim = (name: string, what: string) => {
      if (name.length === 0) throw new ValueError(`${what} name must not be empty`);
      if (taken.has(name)) throw new ValueError(`"${name}" names two things (${what} and an earlier op or variable)`);
      taken.add(name);
    };
    claim(TRAIN_OP, "op");
    claim(LOSS_OP, "op");
    for (const m of this.metrics.keys()) claim(m, "metric");
    for (const s of this.summaries.keys()) claim(s, "summary");
    claim(this.globalStepName, "global step");
    for (const w of weights) claim(w.name, "model weight");
    for (const n of this.vars.dataNames) claim(n, "data source state");
    for (const n of this.optimizerState.names()) claim(n, "optimizer variable");
  }

  // -------------------------------------------------------------------------------------------
  // operations
  // -------------------------------------------------------------------------------------------

  /** Releases the session's own tensors (the last batch). The model and optimizer stay the caller's. */
  close(): void {
    this.closed = true;
    this.setLastBatch(undefined);
  }

  /**
   * Every fetchable name: the ops (`train`, `loss`, the metrics and summaries) and the variables.
   * The optimizer's slot variables are listed once the optimizer has created them (after the
   * first step or a restore).
   */
  names(): readonly string[] {
    return [TRAIN_OP, LOSS_OP, ...this.metrics.keys(), ...this.summaries.keys(), ...this.vars.names()];
  }

  /**
   * Writes the model as `model.json` + `weights.bin` in `dir` (created if missing), the layout
   * `tf.loadLayersModel` reads. See {@link exportModelArtifacts}.
   */
  exportModelArtifacts(dir: string): Promise<ExportedModel> {
    return exportModelArtifacts(this.model, dir);
  }

  /**
   * The run's results; a promise of them when the step has to wait. A single session's step
   * after its first (which lists the optimizer's new slots) completes synchronously; a
   * replica's step waits for its peers.
   */
  protected override evaluate(fetches: Fetches, feeds: Feeds): unknown {
    const names = collectNames(fetches, []);
    const wanted = new Set(names);
    for (const n of wanted) {
      if (!this.isFetchable(n)) {
        throw new InvalidArgumentError(
          `Fetch "${n}" is not an op or variable of this session (ops: ${[TRAIN_OP, LOSS_OP, ...this.metrics.keys(), ...this.summaries.keys()].join(", ")}; variables: see variables.names()).`,
        );
      }
    }
    if (wanted.size > 0 && !this.vars.isReady()) {
      throw new FailedPreconditionError(`Attempting to use uninitialized value ${this.vars.uninitialized()[0] as string}`);
    }
    const fed = this.feedBatch(feeds);
    const results = new Map<string, unknown>();
    let waiting = false;
    try {
      // Variables are read before the step: a fetched variable shows the value at the start of
      // the run, as TensorFlow's cached global-step read does.
      for (const n of wanted) if (this.vars.has(n)) results.set(n, this.vars.read(n));

      const evalNames = [...wanted].filter((n) => n === LOSS_OP || this.metrics.has(n));
      if (wanted.has(TRAIN_OP)) {
        if (this.replicas !== undefined || this.optimizerState.refreshPending) {
          waiting = true;
          return this.trainWaiting(fed, evalNames, results)
            .then(() => this.collectResults(fetches, wanted, results))
            .finally(() => disposeFed(fed));
        }
        this.train(fed, evalNames, results);
      } else if (evalNames.length > 0) {
        const batch = fed ?? this.lastBatch;
        if (batch === undefined) {
          throw new FailedPreconditionError(
            `"${evalNames[0] as string}" without "train" evaluates the last training batch, and this session has not trained yet; feed "xs" and "ys" or fetch it with "train".`,
          );
        }
        const out = this.evaluateOn(batch, evalNames);
        for (const n of evalNames) results.set(n, out.get(n));
      }
      return this.collectResults(fetches, wanted, results);
    } finally {
      if (!waiting) disposeFed(fed);
    }
  }

  /** The summaries, then the fetches' structure filled from `results`. */
  private collectResults(fetches: Fetches, wanted: ReadonlySet<string>, results: Map<string, unknown>): unknown {
    for (const n of wanted) if (this.summaries.has(n)) results.set(n, this.summary(n));
    return mapFetchesAny(fetches, (n) => results.get(n));
  }

  /** The batch a step trains on: a copy of the fed one, else the data source's next. */
  private takeBatch(fed: OwnedBatch | undefined): OwnedBatch {
    return fed === undefined ? this.nextBatch() : { xs: tf.clone(fed.xs), ys: tf.clone(fed.ys) };
  }

  /** A single session's step once the optimizer's slots are known: all synchronous. */
  private train(fed: OwnedBatch | undefined, evalNames: readonly string[], results: Map<string, unknown>): void {
    const batch = this.takeBatch(fed);
    let out: Map<string, number>;
    try {
      out = this.trainStep(batch, evalNames);
    } catch (e) {
      tf.dispose([batch.xs, batch.ys]);
      throw e;
    }
    this.vars.globalStep += 1;
    this.setLastBatch(batch);
    this.setStepResults(out, evalNames, results);
  }

  /** A step that waits: a replica's (for its peers), or the first (the optimizer's new slots are listed after it). */
  private async trainWaiting(fed: OwnedBatch | undefined, evalNames: readonly string[], results: Map<string, unknown>): Promise<void> {
    let batch: OwnedBatch;
    let out: Map<string, number> | undefined;
    do {
      if (this.replicas !== undefined) await this.replicas.prepare(this.vars);
      // A replica's step that fails in its all-reduce applied nothing, and must not have used up
      // its batch either: the step runs again on the same batch after a re-formed ring, and a
      // checkpoint saved after the failure (the chief's, on a termination notice) holds the
      // position of the step it holds.
      const rewind = this.replicas !== undefined && fed === undefined ? this.markData() : undefined;
      batch = this.takeBatch(fed);
      try {
        out = this.replicas === undefined ? this.trainStep(batch, evalNames) : await this.replicatedTrainStep(this.replicas, batch, evalNames);
      } catch (e) {
        tf.dispose([batch.xs, batch.ys]);
        rewind?.();
        // The replicas re-formed their ring: nothing was applied; take rank 0's state and step again.
        if (this.replicas?.reformed(e) !== true) throw e;
      }
    } while (out === undefined);
    this.vars.globalStep += 1;
    this.setLastBatch(batch);
    await this.optimizerState.afterStep();
    this.replicas?.applied();
    this.setStepResults(out, evalNames, results);
  }

  /** A function that moves the data source back to its current position. */
  private markData(): () => void {
    if (this.data.mark !== undefined) return this.data.mark();
    const position = this.data.state();
    return () => this.data.restore(position);
  }

  private setStepResults(out: Map<string, number>, evalNames: readonly string[], results: Map<string, unknown>): void {
    results.set(TRAIN_OP, out.get(LOSS_OP));
    for (const n of evalNames) results.set(n, out.get(n));
  }

  /** One optimizer step; returns the loss and `evalNames` from the step's forward pass. */
  private trainStep(batch: OwnedBatch, evalNames: readonly string[]): Map<string, number> {
    const out = new Map<string, number>();
    let cost: tf.Scalar | null;
    try {
      cost = this.optimizer.minimize(
        () => {
          const pred = this.predict(batch.xs, true);
          const loss = meanScalar(this.lossFn(batch.ys, pred), "lossFn");
          // Read inside the gradient tape's tidy, which disposes these tensors.
          for (const n of evalNames) if (n !== LOSS_OP) out.set(n, this.metricValue(n, batch.ys, pred));
          return loss;
        },
        true,
        this.trainableVars,
      );
    } catch (e) {
      discardGradientTape();
      throw e;
    }
    if (cost === null) throw new RuntimeError("optimizer.minimize returned no cost");
    out.set(LOSS_OP, (cost.dataSync() as Float32Array)[0] as number);
    cost.dispose();
    return out;
  }

  /** One step of a replica: local gradients, averaged with the other ranks', applied on every rank. */
  private async replicatedTrainStep(replicas: Replicas, batch: OwnedBatch, evalNames: readonly string[]): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    let local: { value: tf.Scalar; grads: tf.NamedTensorMap };
    try {
      local = this.optimizer.computeGradients(() => {
        const pred = this.predict(batch.xs, true);
        const loss = meanScalar(this.lossFn(batch.ys, pred), "lossFn");
        for (const n of evalNames) if (n !== LOSS_OP) out.set(n, this.metricValue(n, batch.ys, pred));
        return loss;
      }, this.trainableVars);
    } catch (e) {
      discardGradientTape();
      throw e;
    }
    let averaged;
    try {
      averaged = await replicas.average(local.grads, scalarValue(local.value));
    } finally {
      tf.dispose([local.value, ...Object.values(local.grads)]);
    }
    try {
      this.optimizer.applyGradients(averaged.grads);
    } finally {
      tf.dispose(Object.values(averaged.grads));
    }
    out.set(LOSS_OP, averaged.loss);
    return out;
  }

  /** The loss and metrics of the current model, in inference mode, on `batch`. */
  private evaluateOn(batch: OwnedBatch, evalNames: readonly string[]): Map<string, number> {
    const out = new Map<string, number>();
    tf.tidy(() => {
      const pred = this.predict(batch.xs, false);
      for (const n of evalNames) {
        out.set(n, n === LOSS_OP ? scalarValue(meanScalar(this.lossFn(batch.ys, pred), "lossFn")) : this.metricValue(n, batch.ys, pred));
      }
    });
    return out;
  }

  private metricValue(name: string, ys: tf.Tensor, pred: tf.Tensor): number {
    const fn = this.metrics.get(name) as TfjsMetricFn;
    return scalarValue(meanScalar(fn(ys, pred), `metric "${name}"`));
  }

  private summary(name: string): number {
    const fn = this.summaries.get(name) as TfjsSummaryFn;
    return tf.tidy(() => {
      const v = fn({ model: this.model, optimizer: this.optimizer, globalStep: this.vars.globalStep });
      if (typeof v === "number") return v;
      if (v.size !== 1) throw new InvalidArgumentError(`summary "${name}" must be a number or a one-element tensor, got shape [${v.shape.join(", ")}]`);
      return scalarValue(v);
    });
  }

  private predict(xs: tf.Tensor, training: boolean): tf.Tensor {
    const y = this.model.apply(xs, { training });
    if (!(y instanceof tf.Tensor)) throw new ValueError("the model must have a single tensor output");
    return y;
  }

  private nextBatch(): OwnedBatch {
    const b = this.data.next();
    // The session owns the tensors a data source returns (its contract), whoever made them.
    const xs = toTensor(b.xs, "data source xs");
    const ys = toTensor(b.ys, "data source ys");
    const batch = { xs: xs.tensor, ys: ys.tensor };
    try {
      this.checkBatch(batch, "the data source's batch");
    } catch (e) {
      tf.dispose([batch.xs, batch.ys]);
      throw e;
    }
    return batch;
  }

  /** The fed batch, if `xs` and `ys` are fed. */
  private feedBatch(feeds: Feeds): (OwnedBatch & { owned: boolean }) | undefined {
    const keys = Object.keys(feeds);
    if (keys.length === 0) return undefined;
    for (const k of keys) {
      if (!(FEED_NAMES as readonly string[]).includes(k)) {
        throw new InvalidArgumentError(`Cannot feed "${k}": this session accepts feeds "xs" and "ys" (a batch).`);
      }
    }
    if (!("xs" in feeds) || !("ys" in feeds)) {
      throw new InvalidArgumentError(`Feed "xs" and "ys" together (a batch); got only "${keys[0] as string}".`);
    }
    const xs = toTensor(feeds["xs"] as BatchData, 'feed "xs"');
    let ys;
    try {
      ys = toTensor(feeds["ys"] as BatchData, 'feed "ys"');
    } catch (e) {
      if (xs.owned) xs.tensor.dispose();
      throw e;
    }
    const batch = { xs: xs.tensor, ys: ys.tensor, owned: xs.owned && ys.owned };
    try {
      this.checkBatch(batch, "the fed batch");
    } catch (e) {
      if (xs.owned) xs.tensor.dispose();
      if (ys.owned) ys.tensor.dispose();
      throw e;
    }
    if (xs.owned !== ys.owned) {
      // Mixed ownership: own both, so the run disposes exactly what it made.
      return { xs: xs.owned ? xs.tensor : tf.clone(xs.tensor), ys: ys.owned ? ys.tensor : tf.clone(ys.tensor), owned: true };
    }
    return batch;
  }

  private checkBatch(batch: OwnedBatch, what: string): void {
    const want = (this.model.inputs[0] as tf.SymbolicTensor).shape;
    const got = batch.xs.shape;
    if (got.length !== want.length || want.some((d, i) => d !== null && d !== got[i])) {
      throw new InvalidArgumentError(
        `${what}: xs has shape [${got.join(", ")}] but the model takes [${want.map((d) => (d === null ? "null" : d)).join(", ")}]`,
      );
    }
    if (batch.ys.shape[0] !== got[0]) {
      throw new InvalidArgumentError(`${what}: xs has ${got[0]} examples but ys has ${String(batch.ys.shape[0])}`);
    }
  }

  private setLastBatch(batch: OwnedBatch | undefined): void {
    if (this.lastBatch !== undefined) tf.dispose([this.lastBatch.xs, this.lastBatch.ys]);
    this.lastBatch = batch;
  }

  private isFetchable(n: string): boolean {
    return n === TRAIN_OP || n === LOSS_OP || this.metrics.has(n) || this.summaries.has(n) || this.vars.has(n);
  }
}

/** Creates a {@link TfjsSession} (same as {@link TfjsSession.create}). */
export const tfjsSession = (options: TfjsSessionOptions): Promise<TfjsSession> => TfjsSession.create(options);

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const compiledLoss = (model: tf.LayersModel): TfjsLossFn => {
  // A Sequential compiles its inner LayersModel, which holds the loss functions.
  type Compiled = { lossFunctions?: TfjsLossFn[]; model?: Compiled };
  const m = model as unknown as Compiled;
  const fns = m.lossFunctions ?? m.model?.lossFunctions;
  if (fns?.length !== 1) {
    throw new ValueError("TfjsSession needs a loss: pass `lossFn` or compile the model with a single loss");
  }
  return fns[0] as TfjsLossFn;
};

const meanScalar = (t: tf.Tensor, what: string): tf.Scalar => {
  if (t.dtype !== "float32" && t.dtype !== "int32" && t.dtype !== "bool") {
    throw new InvalidArgumentError(`${what} returned a ${t.dtype} tensor; expected numbers`);
  }
  return t.rank === 0 ? (t as tf.Scalar) : tf.mean(t);
};

const scalarValue = (t: tf.Tensor): number => (t.dataSync() as Float32Array)[0] as number;

/**
 * Disposes a fed batch's tensors that the session made from arrays (a run's end). A function of
 * the module, not a closure made in each run: a closure per run showed in profiles of a small
 * model's step (its allocation, and under tsx the name it is given).
 */
const disposeFed = (fed: { readonly xs: tf.Tensor; readonly ys: tf.Tensor; readonly owned: boolean } | undefined): void => {
  if (fed?.owned === true) tf.dispose([fed.xs, fed.ys]);
};

/** A batch part as a tensor, and whether this call made it (and so must dispose it). */
const toTensor = (x: BatchData, what: string): { tensor: tf.Tensor; owned: boolean } => {
  if (x instanceof tf.Tensor) {
    if (x.isDisposed) throw new InvalidArgumentError(`${what} is a disposed tensor`);
    return { tensor: x, owned: false };
  }
  try {
    return { tensor: tf.tensor(x), owned: true };
  } catch (e) {
    throw new InvalidArgumentError(`${what} is not a tensor or array of numbers: ${(e as Error).message}`, { cause: e });
  }
};

/**
 * After the forward pass of `minimize` throws, tfjs leaves the gradient tape with the tensors it
 * saved for the backward pass (its normal path disposes them once the gradients are computed):
 * dispose them, as that path does.
 */
const discardGradientTape = (): void => {
  const state = tf.engine().state;
  if (state.gradientDepth !== 0 || state.activeTape == null) return;
  for (const node of state.activeTape) for (const t of node.saved ?? []) t.dispose();
  (state as { activeTape: unknown }).activeTape = null;
};
