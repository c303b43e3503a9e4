/**
 * The session contract: the thing a training loop calls once per step. A `Session` evaluates
 * named fetches (ops or variables) with optional feeds, and may expose its variables through a
 * {@link VariableStore} so that savers, readiness checks and recovery can work on any session:
 * a plain-TypeScript {@link Graph} session, a TensorFlow.js adapter, or a test fake.
 *
 * @module
 */

import type { TensorValue, VariableValue } from "./Tensor.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/**
 * What to evaluate: a name, an array, or a record, nested to any depth. `null` fetches nothing
 * and yields `null`. The result mirrors the structure.
 *
 * @example
 * ```ts
 * // @prelude docs/preludes/session.ts
 * await session.run({ loss: "loss", metrics: ["accuracy", "auc"] });
 * // → { loss: 0.31, metrics: [0.91, 0.95] }
 * ```
 */
export type Fetches = string | null | readonly Fetches[] | { readonly [key: string]: Fetches };

declare const fetchType: unique symbol;

/**
 * A fetch name that carries the type of its value: at runtime the plain name, in types the
 * value `run` resolves it to. Make one with {@link fetchOf}.
 *
 * @example
 * ```ts
 * // @prelude docs/preludes/session.ts
 * import { fetchOf } from "monitored-session";
 *
 * const lossFetch = fetchOf<number>("loss");
 * const { value } = await session.run({ value: lossFetch }); // value: number
 * ```
 */
export type Fetch<T> = string & { readonly [fetchType]?: T };

/**
 * What a plain (untyped) fetch name gives: a {@link TensorValue}, or a JS scalar or array for
 * sessions that return those (a graph op's number, the TensorFlow.js session's loss). Type a
 * name with {@link fetchOf} to get its exact type.
 */
export type FetchValue = VariableValue;

/**
 * The result type of `run(fetches)`: the same structure with each name replaced by its value.
 * A record gives a record, an array a tuple (`run` infers fetches as constants), a
 * {@link Fetch} its type, a plain name `V` ({@link FetchValue}). Only a fetch structure whose
 * shape is not known statically (a value of the wide `Fetches` type) gives `unknown`.
 */
export type FetchResult<F, V = FetchValue> = [Fetches] extends [F]
  ? unknown
  : F extends string
    ? F extends { readonly [fetchType]?: infer T }
      ? unknown extends T
        ? V
        : T
      : V
    : F extends null
      ? null
      : F extends readonly unknown[]
        ? { -readonly [K in keyof F]: FetchResult<F[K], V> }
        : F extends object
          ? { -readonly [K in keyof F]: FetchResult<F[K], V> }
          : never;

/** Values fed to named inputs for one run (TensorFlow's `feed_dict`). */
export type Feeds = Readonly<Record<string, unknown>>;

/**
 * Per-run options (TensorFlow's `RunOptions`). Hooks may add options; they are merged as
 * TensorFlow merges them (maximum of numbers, OR of flags, watches concatenated).
 */
export interface RunOptions {
  readonly traceLevel?: number;
  readonly timeoutInMs?: number;
  readonly interOpThreadPool?: number;
  readonly outputPartitionGraphs?: boolean;
  readonly debugTensorWatchOpts?: readonly string[];
  readonly reportTensorAllocationsUponOom?: boolean;
  readonly resetDiskByteUsage?: boolean;
}

/** A bag a session may fill with information about a run (TensorFlow's `RunMetadata`). */
export type RunMetadata = Record<string, unknown>;

/** Which variables an operation applies to (TensorFlow's global and local collections). */
export type VariableCollection = "global" | "local" | "all";

/**
 * TensorFlow 2 object paths by variable name: local names from a `tf.train.Checkpoint`'s root,
 * joined by `/` (`model/_functional/_operations/1/_kernel`). See {@link VariableStore.objectPaths}.
 */
export type ObjectPaths = ReadonlyMap<string, readonly string[]>;

/** Options of {@link VariableStore.restore}. */
export interface VariableRestoreOptions {
  /**
   * The values come from a checkpoint TensorFlow wrote, matched through its object graph and
   * {@link VariableStore.objectPaths}: they may be a subset. The store completes what it can
   * (the TensorFlow.js adapter: the global step from the optimizer's iterations, the data
   * position from its start) and throws `InvalidArgumentError` naming what it cannot.
   */
  readonly fromObjectGraph?: boolean;
}

/**
 * A session's named variables. This is the seam for checkpointing, readiness checks and the
 * TensorFlow.js adapter: anything that can list, initialize, snapshot and restore its state.
 *
 * `reportUninitialized`, `initialize`, `snapshot` and `restore` may answer with a promise (a
 * store whose variables live in another process fetches them). An in-process store answers
 * synchronously, and then pays nothing: callers test for a thenable and never `await` a plain
 * value.
 */
export interface VariableStore {
  /** The names of the variables in `collection` (default `all`), in a stable order. */
  names(collection?: VariableCollection): readonly string[];
  /** Names of variables in `collection` that are not initialized (empty means ready). */
  reportUninitialized(collection?: VariableCollection): readonly string[] | Promise<readonly string[]>;
  /** Initializes the variables of `collection` (default `all`) to their initial values. */
  initialize(collection?: VariableCollection): void | Promise<void>;
  /**
   * A consistent, deep copy of the variables' values that reflects exactly one step. Defaults
   * to the global variables (those that checkpoints hold). An asynchronous store resolves it
   * later: the monitored session starts no run until it has resolved (the hook that asked for
   * it awaits it in `afterRun`), so no later step leaks into it.
   */
  snapshot(collection?: VariableCollection): Map<string, TensorValue> | Promise<Map<string, TensorValue>>;
  /** Sets the variables named in `values`, marking them initialized. Unknown names are errors. */
  restore(values: ReadonlyMap<string, TensorValue>, options?: VariableRestoreOptions): void | Promise<void>;
  /**
   * Optional: where the variables sit in a TensorFlow 2 object graph. A store that has them is
   * checkpointed with `_CHECKPOINTABLE_OBJECT_GRAPH`, so `tf.train.Checkpoint(...).restore`
   * finds each variable at its paths (every listed path leads to it; a variable listed with
   * none, or not listed, sits at its own name), and a checkpoint TensorFlow wrote restores into
   * it by path: each variable takes the value at the first of its paths that the checkpoint's
   * graph holds. See "TensorFlow 2 object graph" in docs/checkpoints.md.
   */
  objectPaths?(): ObjectPaths;
}

/**
 * An in-process {@link VariableStore}: it snapshots and reports synchronously. The Graph,
 * TensorFlow.js and test-kit sessions have one, so code that holds such a session can read a
 * snapshot without `await`.
 */
export interface LocalVariableStore extends VariableStore {
  reportUninitialized(collection?: VariableCollection): readonly string[];
  snapshot(collection?: VariableCollection): Map<string, TensorValue>;
}

/**
 * A session runs one step at a time. Implement `run`; `close`, `variables` and the synchronous
 * fast path `runMaybeSync` are optional.
 */
export interface Session {
  /**
   * Evaluates `fetches` with `feeds`; resolves with values mirroring the fetch structure, typed
   * by {@link FetchResult}.
   */
  run<const F extends Fetches>(
    fetches: F,
    feeds?: Feeds,
    options?: RunOptions,
    runMetadata?: RunMetadata,
  ): Promise<FetchResult<F>>;
  /**
   * Optional: the same run as {@link run}, answered synchronously where the session can, as a
   * {@link VariableStore} answers: the results when the step completed in this call (a
   * single-process TensorFlow.js or Graph step), or a promise of them when it has to wait (a
   * data-parallel step waits for its peers, an op answered with a promise). It throws what `run`
   * would reject with. A monitored session calls it instead of `run` when it is there, which
   * saves a promise and a microtask per step; its results must never be a thenable.
   */
  runMaybeSync?<const F extends Fetches>(
    fetches: F,
    feeds?: Feeds,
    options?: RunOptions,
    runMetadata?: RunMetadata,
  ): FetchResult<F> | Promise<FetchResult<F>>;
  /** Releases resources. Called once by the monitored session when it closes. */
  close?(): void | Promise<void>;
  /** The session's variables, if it has any that can be checkpointed. */
  readonly variables?: VariableStore | undefined;
  /** The name of the global step variable, if the session has one. */
  readonly globalStepName?: string | undefined;
  /**
   * Every name `run` accepts as a fetch (ops and variables; not feeds), so that a configuration's
   * fetch and tensor names can be checked, with a "did you mean", before anything is written.
   * Optional: without it names are checked only when a step runs.
   */
  names?(): readonly string[];
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** A typed fetch: `name`, whose value `run` types as `T`. */
export const fetchOf = <T>(name: string): Fetch<T> => name as Fetch<T>;

/** The default name of the global step variable. */
export const GLOBAL_STEP_NAME = "global_step";
