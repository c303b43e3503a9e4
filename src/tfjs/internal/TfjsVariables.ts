/**
 * The {@link VariableStore} of a `TfjsSession`: the model's weights, the optimizer's state, the
 * global step and the data position, with what is initialized, consistent snapshots, and
 * restores that validate everything before anything changes.
 *
 * @module
 */

import { FailedPreconditionError, InvalidArgumentError } from "../../errors.js";
import type { LocalVariableStore, ObjectPaths, VariableCollection, VariableRestoreOptions } from "../../session/Session.js";
import type { DType, TensorValue } from "../../session/Tensor.js";
import type { TfjsDataSource } from "../DataSource.js";
import { weightShape, type ModelWeight } from "./naming.js";
import { OPTIMIZER_PREFIX, type OptimizerState } from "./OptimizerState.js";
import { expectLike, fromTf, int64, int64Value, toTf } from "./tensors.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What the store needs from its session. */
export interface TfjsVariablesHost {
  /** Throws if the session is closed. */
  assertOpen(): void;
  /** Called after a restore changed anything (the last batch no longer matches the model). */
  restored(): void;
}

export const DATA_PREFIX = "data/";

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** A session's variables. All are `global`: there are no local variables. */
export class TfjsVariables implements LocalVariableStore {
  /** The global step (the session increments it with each `train` step). */
  globalStep = 0;
  /** `data/<name>` for each part of the data source's position. */
  readonly dataNames: readonly string[];
  private readonly weightByName: ReadonlyMap<string, ModelWeight>;
  // What is initialized: weights by name, the other groups as a whole.
  private readonly initWeights = new Set<string>();
  private initOptimizer = false;
  private initStep = false;
  private initData = false;
  private initialValues: ReadonlyMap<string, TensorValue> = new Map();

  constructor(
    private readonly weights: readonly ModelWeight[],
    private readonly optimizer: OptimizerState,
    private readonly data: TfjsDataSource,
    readonly globalStepName: string,
    private readonly host: TfjsVariablesHost,
    private readonly paths: ObjectPaths = new Map(),
  ) {
    this.weightByName = new Map(weights.map((w) => [w.name, w]));
    this.dataNames = data.stateNames().map((n) => `${DATA_PREFIX}${n}`);
  }

  /** Records the current values as those `initialize()` restores (call while everything is new). */
  captureInitialValues(): void {
    this.initialValues = this.readAll();
  }

  // -------------------------------------------------------------------------------------------
  // VariableStore
  // -------------------------------------------------------------------------------------------

  names(collection: VariableCollection = "all"): readonly string[] {
    return collection === "local" ? [] : this.allNames();
  }

  reportUninitialized(collection: VariableCollection = "all"): readonly string[] {
    return collection === "local" ? [] : this.uninitialized();
  }

  async initialize(collection: VariableCollection = "all"): Promise<void> {
    if (collection === "local") return;
    await this.restore(this.initialValues);
  }

  snapshot(collection: VariableCollection = "global"): Map<string, TensorValue> {
    if (collection === "local") return new Map();
    const missing = this.uninitialized();
    if (missing.length > 0) throw new FailedPreconditionError(`Attempting to use uninitialized value ${missing[0] as string}`);
    return this.readAll();
  }

  /** The Keras 3 object paths of the weights and the optimizer's state (see kerasPaths.ts). */
  objectPaths(): ObjectPaths {
    return this.paths;
  }

  /**
   * Restores `values`: any subset of the model's weights, and the optimizer, the global step and
   * the data position each as a whole. Everything is validated before anything changes.
   *
   * From an object graph (a checkpoint Keras wrote): every model weight must be there; an
   * optimizer state that is missing starts afresh, as do Adam's beta powers (derived from the
   * iterations) and the data position; the global step is the optimizer's iterations.
   */
  async restore(input: ReadonlyMap<string, TensorValue>, options: VariableRestoreOptions = {}): Promise<void> {
    this.host.assertOpen();
    const fromGraph = options.fromObjectGraph === true;
    const values = fromGraph ? this.completed(input) : input;
    const weights: [ModelWeight, TensorValue][] = [];
    const optimizerEntries = new Map<string, TensorValue>();
    const dataEntries = new Map<string, TensorValue>();
    let step: TensorValue | undefined;
    for (const [name, t] of values) {
      const w = this.weightByName.get(name);
      if (w !== undefined) {
        expectLike(t, w.variable.dtype as DType, weightShape(w), name);
        weights.push([w, t]);
      } else if (name === this.globalStepName) {
        expectLike(t, "int64", [], name);
        step = t;
      } else if (name.startsWith(OPTIMIZER_PREFIX)) optimizerEntries.set(name, t);
      else if (this.dataNames.includes(name)) dataEntries.set(name.slice(DATA_PREFIX.length), t);
      else throw new InvalidArgumentError(`Checkpoint has variable "${name}" that the session does not.`);
    }
    const optimizerPlan = optimizerEntries.size > 0 ? this.optimizer.plan(optimizerEntries, { derivedHidden: fromGraph }) : undefined;
    if (dataEntries.size > 0) {
      const missing = this.data.stateNames().filter((n) => !dataEntries.has(n));
      if (missing.length > 0) {
        throw new InvalidArgumentError(`The data position is restored as a whole; the checkpoint lacks ${missing.map((n) => `"${DATA_PREFIX}${n}"`).join(", ")}.`);
      }
    }
    const globalStep = step === undefined ? undefined : int64Value(step, this.globalStepName);

    // The data source validates its own state first: nothing has changed if it throws.
    if (dataEntries.size > 0) {
      try {
        this.data.restore(dataEntries);
      } catch (e) {
        if (e instanceof InvalidArgumentError) throw e;
        throw new InvalidArgumentError(`data position: ${(e as Error).message}`, { cause: e });
      }
      this.initData = true;
    }
    if (optimizerPlan !== undefined) {
      await this.optimizer.apply(optimizerPlan);
      this.initOptimizer = true;
    }
    for (const [w, t] of weights) {
      const v = toTf(t);
      w.variable.write(v);
      v.dispose();
      this.initWeights.add(w.name);
    }
    if (globalStep !== undefined) {
      this.globalStep = globalStep;
      this.initStep = true;
    }
    this.host.restored();
  }

  // -------------------------------------------------------------------------------------------
  // operations
  // -------------------------------------------------------------------------------------------

  /** `true` if `name` is a variable (the optimizer's slots once known). */
  has(name: string): boolean {
    if (name === this.globalStepName || this.weightByName.has(name)) return true;
    if (name.startsWith(OPTIMIZER_PREFIX)) return this.optimizer.names().includes(name);
    return this.dataNames.includes(name);
  }

  /** `true` when every variable is initialized. */
  isReady(): boolean {
    return this.initOptimizer && this.initStep && this.initData && this.initWeights.size === this.weights.length;
  }

  /** The names of the variables not initialized yet. */
  uninitialized(): string[] {
    return [
      ...this.weights.filter((w) => !this.initWeights.has(w.name)).map((w) => w.name),
      ...(this.initOptimizer ? [] : this.optimizer.names()),
      ...(this.initStep ? [] : [this.globalStepName]),
      ...(this.initData ? [] : this.dataNames),
    ];
  }

  /** One variable's value as a fetch: the global step as a number, others as a deep-copied tensor. */
  read(name: string): number | TensorValue {
    if (name === this.globalStepName) return this.globalStep;
    const w = this.weightByName.get(name);
    if (w !== undefined) return fromTf(w.variable.read(), name);
    const o = name.startsWith(OPTIMIZER_PREFIX) ? this.optimizer.read(name) : undefined;
    if (o !== undefined) return o;
    const v = this.data.state().get(name.slice(DATA_PREFIX.length));
    if (v === undefined) throw new InvalidArgumentError(`No variable named "${name}".`);
    return v;
  }

  /** What a checkpoint TensorFlow wrote lacks, completed (see {@link restore}); `InvalidArgumentError` for a missing weight. */
  private completed(values: ReadonlyMap<string, TensorValue>): Map<string, TensorValue> {
    const missing = this.weights.filter((w) => !values.has(w.name));
    if (missing.length > 0) {
      const listed = missing.slice(0, 3).map((w) => `${w.name} (at ${this.paths.get(w.name)?.[0] ?? w.name})`);
      throw new InvalidArgumentError(
        `The checkpoint's object graph has no value for ${listed.join(", ")}${missing.length > 3 ? ` and ${missing.length - 3} more` : ""}: it was written for a model of another architecture (compare tf.train.list_variables with docs/checkpoints.md's Keras mapping).`,
      );
    }
    const out = new Map(values);
    const initial = (name: string): void => {
      const v = this.initialValues.get(name);
      if (v !== undefined) out.set(name, v);
    };
    const iterations = values.get(`${OPTIMIZER_PREFIX}iterations`);
    if (iterations === undefined) for (const name of this.initialValues.keys()) if (name.startsWith(OPTIMIZER_PREFIX)) initial(name);
    if (!values.has(this.globalStepName)) {
      if (iterations !== undefined) out.set(this.globalStepName, iterations);
      else initial(this.globalStepName);
    }
    if (this.dataNames.some((n) => !values.has(n))) for (const n of this.dataNames) initial(n);
    return out;
  }

  private allNames(): string[] {
    return [...this.weights.map((w) => w.name), ...this.optimizer.names(), this.globalStepName, ...this.dataNames];
  }

  /** Every variable's current value, deep-copied (initialized or not). */
  private readAll(): Map<string, TensorValue> {
    const out = new Map<string, TensorValue>();
    for (const w of this.weights) out.set(w.name, fromTf(w.variable.read(), w.name));
    this.optimizer.readAll(out);
    out.set(this.globalStepName, int64(this.globalStep));
    for (const [k, v] of this.data.state()) out.set(`${DATA_PREFIX}${k}`, v);
    return out;
  }
}
