/**
 * A graph in plain TypeScript: the counterpart of a TensorFlow graph for models written without
 * a tensor library. Declare variables and named ops on a {@link Graph}; each
 * {@link GraphSession} holds its own variable values, so a recovered session starts fresh and
 * restores from a checkpoint exactly as in TensorFlow.
 *
 * @example
 * ```ts
 * import { Graph } from "monitored-session";
 *
 * const g = new Graph();
 * const step = g.globalStep();
 * const w = g.variable("w", 0);
 * g.op("train", (ctx) => {
 *   ctx.assign(w, ctx.read(w) - 0.1 * (ctx.read(w) - 3));
 *   ctx.assignAdd(step, 1);
 * });
 * const sess = g.session();
 * await sess.variables.initialize();
 * await sess.run("train");
 * ```
 *
 * **Values are immutable.** An op changes a variable with `ctx.assign(v, next)`; it must not
 * mutate what `ctx.read(v)` (or a fetch) returned, since a fetch result or an in-flight
 * checkpoint snapshot may share it. This is what makes snapshots free: a checkpoint of a
 * 100 MB model takes references, not copies. For in-place updates of a large array, use
 * `ctx.readForUpdate(v)`, which returns an array the op owns (copied only if shared).
 *
 * @module
 */

import {
  FailedPreconditionError,
  InvalidArgumentError,
  RuntimeError,
  ValueError,
} from "../errors.js";
import { collectNames, mapFetchesAny } from "./fetches.js";
import { isPromiseLike } from "../util/promise.js";
import { LocalSession } from "./LocalSession.js";
import {
  fetchOf,
  GLOBAL_STEP_NAME,
  type Feeds,
  type Fetch,
  type Fetches,
  type VariableCollection,
  type LocalVariableStore,
} from "./Session.js";
import {
  copyTensor,
  fromTensorValue,
  inferDType,
  isTensorValue,
  tensorView,
  toTensorValue,
  type DType,
  type TensorValue,
  type VariableValue,
} from "./Tensor.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** How to declare a variable. */
export interface VariableOptions<T extends VariableValue> {
  /** The initial value, or a function that makes it (called on every initialization). */
  readonly initialValue: T | (() => T);
  /** The stored dtype. Defaults to the value's natural dtype (`float64` for a JS number). */
  readonly dtype?: DType;
  /** `global` (checkpointed, the default) or `local` (per-process, e.g. metric accumulators). */
  readonly collection?: "global" | "local";
}

/** A declared variable. Its value lives in each session, not in the graph. */
export class Variable<T extends VariableValue = VariableValue> {
  /** @internal */
  constructor(
    /** The variable's name, typed with its value: `run(v.name)` resolves to a `T`. */
    readonly name: Fetch<T>,
    readonly dtype: DType,
    readonly collection: "global" | "local",
    private readonly init: () => T,
  ) {}
  /** A fresh initial value. */
  initialValue(): T {
    const v = this.init();
    return cloneValue(v) as T;
  }
}

/** What an op sees while it runs. */
export interface OpContext {
  /** The feeds of this run. */
  readonly feeds: Feeds;
  /** The session running the op. */
  readonly session: GraphSession;
  /** The fed value for `name`; `InvalidArgumentError` if it was not fed. */
  feed<T = unknown>(name: string): T;
  /** The current value of a variable; `FailedPreconditionError` if uninitialized. */
  read<T extends VariableValue>(v: Variable<T> | string): T;
  /** Sets a variable's value. The value then belongs to the variable: do not mutate it. */
  assign<T extends VariableValue>(v: Variable<T>, value: T): void;
  /**
   * The variable's value as an array this op may mutate in place (copy-on-write: it is copied
   * only if a fetch or a snapshot still shares the current one). Mutations are the new value.
   */
  readForUpdate<T extends VariableValue>(v: Variable<T>): T;
  /** Adds `delta` to a numeric scalar variable and returns the new value. */
  assignAdd(v: Variable<number>, delta: number): number;
  /** Evaluates another op or variable within this run (each op runs at most once per run). */
  run(name: string): unknown;
}

/** A named op: a sync or async function of the run's {@link OpContext}. */
export type OpFn = (ctx: OpContext) => unknown;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** A set of variables and named ops. Frozen by {@link Graph.finalize} (as TensorFlow's). */
export class Graph {
  private readonly vars = new Map<string, Variable>();
  private readonly ops = new Map<string, OpFn>();
  private readonly summaryOps: string[] = [];
  private globalStepVar: Variable<number> | undefined;
  private isFinalized = false;

  /** Declares a variable. `init` is an initial value or {@link VariableOptions}. */
  variable<T extends VariableValue>(name: string, init: T | (() => T) | VariableOptions<T>): Variable<T> {
    this.assertMutable(`add variable "${name}"`);
    this.assertFreshName(name);
    const opts: VariableOptions<T> = isVariableOptions<T>(init) ? init : { initialValue: init };
    const make =
      typeof opts.initialValue === "function" ? (opts.initialValue as () => T) : () => opts.initialValue as T;
    const probe = make();
    const dtype = opts.dtype ?? inferDType(probe);
    toTensorValue(probe, dtype); // validates the value against the dtype
    const v = new Variable<T>(fetchOf<T>(name), dtype, opts.collection ?? "global", make);
    this.vars.set(name, v as unknown as Variable);
    return v;
  }

  /**
   * The global step: an `int64` scalar named `global_step` (or `name`), created on first call
   * and returned on later ones (TensorFlow's `get_or_create_global_step`).
   */
  globalStep(name: string = GLOBAL_STEP_NAME): Variable<number> {
    if (this.globalStepVar !== undefined) {
      if (this.globalStepVar.name !== name) {
        throw new ValueError(`the graph already has a global step named "${this.globalStepVar.name}"`);
      }
      return this.globalStepVar;
    }
    this.globalStepVar = this.variable<number>(name, { initialValue: 0, dtype: "int64" });
    return this.globalStepVar;
  }

  /** The global step variable, if one was created. */
  get globalStepVariable(): Variable<number> | undefined {
    return this.globalStepVar;
  }

  /**
   * Declares a named op. Returns its name typed with the op's result, so that `run` types what
   * it fetches (`graph.op<number>(...)` states the type; by default it is inferred from `fn`).
   * With `summary: true` the op is a summary op (TensorFlow's `SUMMARIES` collection): a
   * `Supervisor` writes all of them by default.
   *
   * @example
   * ```ts
   * import { Graph } from "monitored-session";
   *
   * const graph = new Graph();
   * const w = graph.variable("w", 0);
   * const loss = graph.op("loss", (ctx) => (ctx.read(w) - 3) ** 2);
   * const { value } = await graph.session().run({ value: loss }); // value: number (once initialized)
   * ```
   */
  op<T>(name: string, fn: (ctx: OpContext) => T | Promise<T>, options: { readonly summary?: boolean } = {}): Fetch<T> {
    this.assertMutable(`add op "${name}"`);
    this.assertFreshName(name);
    this.ops.set(name, fn);
    if (options.summary === true) this.summaryOps.push(name);
    return fetchOf<T>(name);
  }

  /** The summary ops' names, in declaration order (what TensorFlow's `merge_all` merges). */
  summaryOpNames(): readonly string[] {
    return [...this.summaryOps];
  }

  /** Freezes the graph: no more variables or ops. Idempotent. */
  finalize(): this {
    this.isFinalized = true;
    return this;
  }

  /** `true` after {@link Graph.finalize}. */
  get finalized(): boolean {
    return this.isFinalized;
  }

  /** Un-freezes the graph (used by `MonitoredSession.close`, as TensorFlow does). @internal */
  unfinalize(): void {
    this.isFinalized = false;
  }

  /** Declared variables, in declaration order. */
  variables(): readonly Variable[] {
    return [...this.vars.values()];
  }

  /** Declared op names, in declaration order. */
  opNames(): readonly string[] {
    return [...this.ops.keys()];
  }

  /** @internal */
  getVariable(name: string): Variable | undefined {
    return this.vars.get(name);
  }

  /** @internal */
  getOp(name: string): OpFn | undefined {
    return this.ops.get(name);
  }

  /** A new session on this graph. Its variables start uninitialized. */
  session(): GraphSession {
    return new GraphSession(this);
  }

  private assertMutable(what: string): void {
    if (this.isFinalized) throw new RuntimeError(`Graph is finalized and cannot be modified: cannot ${what}.`);
  }

  private assertFreshName(name: string): void {
    if (name.length === 0) throw new ValueError("a variable or op name must not be empty");
    if (this.vars.has(name) || this.ops.has(name)) {
      throw new ValueError(`the graph already has a variable or op named "${name}"`);
    }
  }
}

/**
 * A session on a {@link Graph}: holds variable values and runs ops. `runMaybeSync` answers
 * synchronously unless an op answers with a promise: then the rest of the run waits for it.
 */
export class GraphSession extends LocalSession {
  /** Variable values; absent means uninitialized. */
  private readonly values = new Map<string, VariableValue>();
  /** Variables whose current (object) value was handed out: a fetch, a read or a snapshot. */
  private readonly shared = new Set<string>();
  readonly variables: LocalVariableStore;
  readonly globalStepName: string | undefined;

  constructor(readonly graph: Graph) {
    super();
    this.globalStepName = graph.globalStepVariable?.name;
    this.variables = makeStore(graph, this.values, this.shared);
  }

  close(): void {
    this.closed = true;
  }

  /** The graph's variables and ops: every name `run` accepts besides feeds. */
  names(): readonly string[] {
    return [...this.graph.variables().map((v) => v.name), ...this.graph.opNames()];
  }

  /** The run's results, or a promise of them from the first op that answers with a promise on. */
  protected override evaluate(fetches: Fetches, feeds: Feeds): unknown {
    const names = collectNames(fetches, []);
    const results = new Map<string, unknown>();
    // Variables are read before any op runs: within one run a variable fetch sees the value
    // at the start of the step, like TensorFlow's cached global-step read.
    for (const n of names) {
      if (n in feeds) results.set(n, feeds[n]);
      else if (this.graph.getVariable(n) !== undefined) results.set(n, this.readValue(n));
      else if (this.graph.getOp(n) === undefined) {
        throw new InvalidArgumentError(`Fetch "${n}" is not a variable, op or feed of the graph.`);
      }
    }
    const ctx = this.opContext(feeds, new Map<string, unknown>());
    return this.runOps(fetches, names, 0, results, ctx);
  }

  /** Runs the ops of `names` from `i` on, synchronously until one answers with a promise. */
  private runOps(fetches: Fetches, names: readonly string[], i: number, results: Map<string, unknown>, ctx: OpContext): unknown {
    for (; i < names.length; i++) {
      const n = names[i] as string;
      if (results.has(n)) continue;
      const v = ctx.run(n);
      if (isPromiseLike(v)) {
        const next = i + 1;
        return Promise.resolve(v).then((value) => {
          results.set(n, value);
          return this.runOps(fetches, names, next, results, ctx);
        });
      }
      results.set(n, v);
    }
    return mapFetchesAny(fetches, (n) => results.get(n));
  }

  private opContext(feeds: Feeds, memo: Map<string, unknown>): OpContext {
    const ctx: OpContext = {
      feeds,
      session: this,
      feed: <T>(name: string): T => {
        if (!(name in feeds)) {
          throw new InvalidArgumentError(`You must feed a value for "${name}".`);
        }
        return feeds[name] as T;
      },
      read: <T extends VariableValue>(v: Variable<T> | string): T =>
        this.readValue(typeof v === "string" ? v : v.name) as T,
      assign: (v, value) => {
        this.checkOwn(v);
        this.values.set(v.name, value);
        this.shared.delete(v.name);
      },
      readForUpdate: <T extends VariableValue>(v: Variable<T>): T => {
        this.checkOwn(v);
        const current = this.readValue(v.name, false);
        if (typeof current !== "object" || !this.shared.has(v.name)) return current as T;
        const copy = cloneValue(current);
        this.values.set(v.name, copy);
        this.shared.delete(v.name);
        return copy as T;
      },
      assignAdd: (v, delta) => {
        this.checkOwn(v);
        const current = this.readValue(v.name);
        if (typeof current !== "number") {
          throw new InvalidArgumentError(`assignAdd needs a numeric scalar variable; "${v.name}" is not one.`);
        }
        const next = current + delta;
        this.values.set(v.name, next);
        return next;
      },
      run: (name) => {
        if (memo.has(name)) return memo.get(name);
        if (name in feeds) return feeds[name];
        if (this.graph.getVariable(name) !== undefined) return this.readValue(name);
        const op = this.graph.getOp(name);
        if (op === undefined) throw new InvalidArgumentError(`"${name}" is not a variable, op or feed of the graph.`);
        const v = op(ctx);
        memo.set(name, v);
        return v;
      },
    };
    return ctx;
  }

  private readValue(name: string, share = true): VariableValue {
    const v = this.values.get(name);
    if (v === undefined) {
      if (this.graph.getVariable(name) === undefined) throw new InvalidArgumentError(`No variable named "${name}".`);
      throw new FailedPreconditionError(`Attempting to use uninitialized value ${name}`);
    }
    if (share && typeof v === "object") this.shared.add(name);
    return v;
  }

  private checkOwn(v: Variable): void {
    if (this.graph.getVariable(v.name) !== v) {
      throw new InvalidArgumentError(`Variable "${v.name}" does not belong to this session's graph.`);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const makeStore = (graph: Graph, values: Map<string, VariableValue>, shared: Set<string>): LocalVariableStore => {
  const inCollection = (c: VariableCollection) => (v: Variable) => c === "all" || v.collection === c;
  return {
    names: (c = "all") => graph.variables().filter(inCollection(c)).map((v) => v.name),
    reportUninitialized: (c = "all") =>
      graph
        .variables()
        .filter(inCollection(c))
        .filter((v) => !values.has(v.name))
        .map((v) => v.name),
    initialize: (c = "all") => {
      for (const v of graph.variables().filter(inCollection(c))) {
        values.set(v.name, v.initialValue());
        shared.delete(v.name);
      }
    },
    snapshot: (c = "global") => {
      const out = new Map<string, TensorValue>();
      for (const v of graph.variables().filter(inCollection(c))) {
        const value = values.get(v.name);
        if (value === undefined) throw new FailedPreconditionError(`Attempting to use uninitialized value ${v.name}`);
        // No copy: values are immutable by contract, and the variable is marked shared so
        // that readForUpdate copies before mutating.
        out.set(v.name, tensorView(value, v.dtype));
        if (typeof value === "object") shared.add(v.name);
      }
      return out;
    },
    restore: (incoming) => {
      const decoded = new Map<string, VariableValue>();
      for (const [name, t] of incoming) {
        const v = graph.getVariable(name);
        if (v === undefined) throw new InvalidArgumentError(`Checkpoint has variable "${name}" that the graph does not.`);
        if (t.dtype !== v.dtype) {
          throw new InvalidArgumentError(`Variable "${name}" is ${v.dtype} but the checkpoint holds ${t.dtype}.`);
        }
        const like = values.get(name) ?? v.initialValue();
        try {
          decoded.set(name, fromTensorValue(t, like, v.dtype));
        } catch (e) {
          throw new InvalidArgumentError(`Variable "${name}": ${(e as Error).message}`, { cause: e });
        }
      }
      // All or nothing: a bad entry leaves every variable untouched.
      for (const [k, v] of decoded) {
        values.set(k, v);
        shared.delete(k);
      }
    },
  };
};

/** A deep copy of a variable value (primitives are returned as they are). */
const cloneValue = (v: VariableValue): VariableValue =>
  isTensorValue(v) ? copyTensor(v) : typeof v === "object" ? (v as unknown as { slice(): VariableValue }).slice() : v;

const isVariableOptions = <T extends VariableValue>(x: unknown): x is VariableOptions<T> =>
  typeof x === "object" && x !== null && "initialValue" in x;
