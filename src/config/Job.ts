/**
 * The job contract: what a training module named by a configuration's `module` exports by
 * default. {@link defineJob} types it; {@link decodeJob} checks a module's export at the
 * boundary (it is external input), listing every problem.
 *
 * @example
 * ```ts
 * // @prelude docs/preludes/session.ts
 * // train.ts
 * import { defineJob } from "monitored-session/config";
 *
 * declare function nextBatch(): Record<string, Float32Array>; // your input pipeline
 *
 * export default defineJob({
 *   graph,
 *   fetches: { train: "train", loss: "loss" }, // a `loss` fetch shows in the progress line
 *   feeds: () => nextBatch(),
 *   lastStep: 1000,
 * });
 * ```
 *
 * @module
 */

import * as E from "fp-ts/lib/Either.js";
import { left, type Either } from "fp-ts/lib/Either.js";
import { pipe } from "fp-ts/lib/function.js";
import * as t from "io-ts";

import type { Collective } from "../session/Collective.js";
import { Graph } from "../session/Graph.js";
import { Scaffold } from "../creation/Scaffold.js";
import type { Feeds, FetchResult, Fetches } from "../session/Session.js";
import type { SessionFactory } from "../creation/SessionManager.js";
import { hookProblems, type SessionRunHook } from "../hook/SessionRunHook.js";
import { FetchesCodec } from "./HookRegistry.js";
import { decode, NonNegativeInt, optional, PositiveInt, refined, struct, type Issue } from "../codec.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What one step's `onStep` callback receives besides the results. */
export interface StepInfo {
  /** Runs of this process, from 1. */
  readonly run: number;
}

/** This process's place in a synchronous data-parallel group, as `run` gives it to a job (see {@link JobContext}). */
export interface ReplicaContext {
  /** This replica's rank: the chief is 0, workers 1..N−1 in index order. */
  readonly rank: number;
  /** The number of replicas. */
  readonly size: number;
  /** The group: pass it to `tfjsSession({ collective })` to average the gradients. */
  readonly collective: Collective;
  /** This replica's shard of the data: pass it to `InMemoryDataSource`'s `shard`. */
  readonly shard: { readonly index: number; readonly count: number };
}

/**
 * What `run` passes to a module whose default export is a function returning the job:
 * `replica` is set when the process is one replica of a data-parallel cluster (TF_CONFIG set,
 * `cluster.dataParallel` not false), and absent in one process.
 */
export interface JobContext {
  readonly replica?: ReplicaContext | undefined;
}

/** A training job: what to run each step. One of `graph`, `sessionFactory` and `scaffold` is needed. */
export interface Job<F extends Fetches = Fetches> {
  /** The graph to train. */
  readonly graph?: Graph;
  /** Makes raw sessions (instead of `graph.session()`). */
  readonly sessionFactory?: SessionFactory;
  /** The scaffold (init ops, saver, summary op). */
  readonly scaffold?: Scaffold;
  /** What each step runs (default `"train"`). A `loss` fetch (or a record key `loss`) is shown as progress. */
  readonly fetches?: F;
  /** Feeds of each step: fixed, or a function called before every step. */
  readonly feeds?: Feeds | (() => Feeds);
  /** Where to stop when the configuration gives no `lastStep`. */
  readonly lastStep?: number;
  /** Hooks that need code (e.g. a `FeedFnHook`); they run after the configured ones. */
  readonly hooks?: readonly SessionRunHook[];
  /**
   * The examples one step consumes on one replica (the per-worker batch). With it the chief's
   * StepCounterHook also reports `examples/sec`, counting the global batch (× the replicas).
   */
  readonly batchSize?: number;
  /** Called after each step with its results. */
  readonly onStep?: (results: FetchResult<F>, info: StepInfo) => void | Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** Types a job (the identity at runtime). */
export const defineJob = <const F extends Fetches = "train">(job: Job<F>): Job<F> => job;

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

const instance = <C>(name: string, ctor: abstract new (...args: never[]) => C): t.Type<C, C, unknown> => {
  const is = (u: unknown): u is C => u instanceof ctor;
  return new t.Type<C, C, unknown>(
    name,
    is,
    (u, c) => {
      if (is(u)) return t.success(u);
      // Same class name, other class: the job imported another copy of monitored-session than the CLI's.
      const other = typeof u === "object" && u !== null ? (u as object).constructor?.name : undefined;
      return other === ctor.name
        ? t.failure(u, c, `expected ${name} of the monitored-session the CLI runs, got a ${other} from another copy of it (the job and the CLI load monitored-session from different paths: import it by its package name, once, e.g. "monitored-session"; inside a clone of monitored-session, run the command as npm run cli -- ..., whose --conditions=monitored-session-source gives the job the CLI's copy in src/)`)
        : t.failure(u, c);
    },
    (a) => a,
  );
};
/** A hook as the `SessionRunHook` interface has it: a class instance or a plain object. */
const HookCodec = new t.Type<SessionRunHook, SessionRunHook, unknown>(
  "a SessionRunHook",
  (u): u is SessionRunHook => hookProblems(u).length === 0,
  (u, c) => {
    const problems = hookProblems(u);
    return problems.length === 0 ? t.success(u as SessionRunHook) : t.failure(u, c, `expected a SessionRunHook (${problems.join("; ")})`);
  },
  (a) => a,
);
const fn = refined("a function", (u): u is (...args: never[]) => unknown => typeof u === "function");

/** The codec of a module's default export (checked field by field, unknown keys are errors). */
export const JobCodec = struct(
  "Job",
  "A training job.",
  {
    graph: optional(instance("a Graph", Graph), "The graph to train."),
    sessionFactory: optional(fn, "Makes raw sessions."),
    scaffold: optional(instance("a Scaffold", Scaffold), "The scaffold."),
    fetches: optional(FetchesCodec, "What each step runs.", '"train"'),
    feeds: optional(
      refined("feeds (an object or a function returning one)", (u): u is Feeds | (() => Feeds) => typeof u === "function" || (typeof u === "object" && u !== null && !Array.isArray(u))),
      "Feeds of each step.",
    ),
    lastStep: optional(NonNegativeInt, "Where to stop without a configured lastStep."),
    hooks: optional(t.array(HookCodec), "Hooks that need code: `SessionRunHook` instances or plain objects with hook methods."),
    batchSize: optional(PositiveInt, "The examples one step consumes on one replica; the chief's StepCounterHook then reports examples/sec of the global batch."),
    onStep: optional(fn, "Called after each step."),
  },
  (j) => (j.graph === undefined && j.sessionFactory === undefined && j.scaffold === undefined ? [{ message: "a job needs one of graph, sessionFactory and scaffold" }] : []),
);

/**
 * Checks a training module's namespace: its default export must be a job (or a function,
 * possibly async, returning one from `context`). Paths start at `default`.
 */
export const decodeJob = async (moduleNamespace: unknown, context: JobContext = {}): Promise<Either<Issue[], Job>> => {
  let value = (moduleNamespace as { default?: unknown } | null)?.default;
  if (value === undefined) return left([{ path: "default", message: "the training module has no default export (export default defineJob({ ... }))" }]);
  if (typeof value === "function") value = await (value as (context: JobContext) => unknown)(context);
  return pipe(
    decode(JobCodec, value),
    E.bimap(
      (issues) => issues.map((i) => ({ ...i, path: i.path === "(root)" ? "default" : `default.${i.path}` })),
      (job) => job as unknown as Job,
    ),
  );
};
