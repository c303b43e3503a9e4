/**
 * `Scaffold`: the pieces that make a session ready to train (TensorFlow's
 * `tf.compat.v1.train.Scaffold`): the init op and function, the readiness checks, the local init
 * op and the saver. Give the pieces you care about; {@link Scaffold.finalize} fills in the rest
 * with defaults that work on any session's {@link VariableStore}.
 *
 * @example
 * ```ts
 * // @prelude docs/preludes/session.ts
 * import { ChiefSessionCreator, MonitoredSession, Scaffold, type TensorValue } from "monitored-session";
 *
 * declare const pretrained: ReadonlyMap<string, TensorValue>; // weights loaded elsewhere
 * const scaffold = new Scaffold({
 *   graph,
 *   initFn: async (_scaffold, session) => session.variables?.restore(pretrained),
 * });
 * const monitored = await MonitoredSession.create({
 *   sessionCreator: new ChiefSessionCreator({ scaffold, checkpointDir: "/ckpts" }),
 * });
 * ```
 *
 * @module
 */

import { BundleSaver, type Saver } from "../checkpoint/index.js";
import type { Graph } from "../session/Graph.js";
import type { Feeds, RunOptions, Session } from "../session/Session.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/**
 * An op a scaffold or session manager runs: the name of a session op (run with
 * `session.run(name, feeds)`) or a function of the session.
 *
 * A readiness op (`readyOp`, `readyForLocalInitOp`) resolves with the names of what is not
 * initialized; an empty list (or `undefined`) means ready.
 */
export type ScaffoldOp = string | ((session: Session) => unknown);

/** TensorFlow's `init_fn`: called with the scaffold and the new session when nothing was restored. */
export type ScaffoldInitFn = (scaffold: Scaffold, session: Session) => unknown;

/** Options of {@link Scaffold}. Every option left `undefined` is filled by `finalize()`. */
export interface ScaffoldOptions {
  /** Initializes the model when no checkpoint was restored (default: initialize global variables). */
  readonly initOp?: ScaffoldOp | undefined;
  /** Feeds for `initOp`. */
  readonly initFeedDict?: Feeds | undefined;
  /** Called after `initOp` when no checkpoint was restored, as `initFn(scaffold, session)`. */
  readonly initFn?: ScaffoldInitFn | undefined;
  /** Names what is not initialized; empty means the model is ready (default: all variables). */
  readonly readyOp?: ScaffoldOp | undefined;
  /** Names what must be initialized before `localInitOp` may run (default: global variables). */
  readonly readyForLocalInitOp?: ScaffoldOp | undefined;
  /** Initializes per-process state on every session (default: initialize local variables). */
  readonly localInitOp?: ScaffoldOp | undefined;
  /** Feeds for `localInitOp`. */
  readonly localInitFeedDict?: Feeds | undefined;
  /**
   * Evaluates the summaries. No default: the graph's summary ops (`graph.op(name, fn, { summary: true })`)
   * are merged by default only by the `Supervisor`; give a `SummarySaverHook` its op here or directly.
   */
  readonly summaryOp?: ScaffoldOp | undefined;
  /** Saves and restores checkpoints (default: a {@link BundleSaver}, one per graph). */
  readonly saver?: Saver | undefined;
  /** Takes every option not given here from this scaffold. */
  readonly copyFromScaffold?: Scaffold | undefined;
  /** The graph that `finalize()` freezes (TensorFlow freezes the default graph). */
  readonly graph?: Graph | undefined;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** Initializes the global variables: the default `initOp`. */
export const defaultInitOp = (session: Session): void | Promise<void> => session.variables?.initialize("global");
/** Lists uninitialized variables, global and local: the default `readyOp`. */
export const defaultReadyOp = (session: Session): readonly string[] | Promise<readonly string[]> =>
  session.variables?.reportUninitialized("all") ?? [];
/** Lists uninitialized global variables: the default `readyForLocalInitOp`. */
const defaultReadyForLocalInitOp = (session: Session): readonly string[] | Promise<readonly string[]> =>
  session.variables?.reportUninitialized("global") ?? [];
/** Initializes the local variables: the default `localInitOp`. */
export const defaultLocalInitOp = (session: Session): void | Promise<void> => session.variables?.initialize("local");

/**
 * The default saver of each graph, so that every scaffold of a graph shares one (TensorFlow
 * keeps it in the graph's `SAVERS` collection).
 */
const saverOfGraph = new WeakMap<Graph, Saver>();

/** The pieces that create, initialize and check a session. Call {@link finalize} before use. */
export class Scaffold {
  /** The graph `finalize()` freezes, if any. */
  readonly graph: Graph | undefined;
  private initOpValue: ScaffoldOp | undefined;
  private readonly initFeedDictValue: Feeds | undefined;
  private readonly userInitFn: ScaffoldInitFn | undefined;
  private readonly initFnValue: ((session: Session) => unknown) | undefined;
  private readyOpValue: ScaffoldOp | undefined;
  private readyForLocalInitOpValue: ScaffoldOp | undefined;
  private localInitOpValue: ScaffoldOp | undefined;
  private readonly localInitFeedDictValue: Feeds | undefined;
  private summaryOpValue: ScaffoldOp | undefined;
  private saverValue: Saver | undefined;

  /**
   * Throws `TypeError` if `copyFromScaffold` is not a `Scaffold`. Each option is taken from
   * `copyFromScaffold` only when it is `undefined` here (not merely falsy).
   */
  constructor(options: ScaffoldOptions = {}) {
    const from = options.copyFromScaffold;
    if (from !== undefined && !(from instanceof Scaffold)) {
      throw new TypeError("copyFromScaffold is not a Scaffold instance.");
    }
    this.initOpValue = options.initOp ?? from?.initOp;
    this.initFeedDictValue = options.initFeedDict ?? from?.initFeedDict;
    // The copy takes the user's function, not the source's wrapper bound to the source.
    this.userInitFn = options.initFn ?? from?.userInitFn;
    const userInitFn = this.userInitFn;
    this.initFnValue = userInitFn === undefined ? undefined : (session: Session) => userInitFn(this, session);
    this.readyOpValue = options.readyOp ?? from?.readyOp;
    this.readyForLocalInitOpValue = options.readyForLocalInitOp ?? from?.readyForLocalInitOp;
    this.localInitOpValue = options.localInitOp ?? from?.localInitOp;
    this.localInitFeedDictValue = options.localInitFeedDict ?? from?.localInitFeedDict;
    this.summaryOpValue = options.summaryOp ?? from?.summaryOp;
    this.saverValue = options.saver ?? from?.saver;
    this.graph = options.graph ?? from?.graph;
  }

  /** The default `localInitOp`: initializes the session's local variables. */
  static defaultLocalInitOp(): ScaffoldOp {
    return defaultLocalInitOp;
  }

  // -------------------------------------------------------------------------------------------
  // operations
  // -------------------------------------------------------------------------------------------

  /**
   * Fills every piece still `undefined` with its default, freezes the graph if one was given,
   * and returns the scaffold. Idempotent: a session creator calls it on every (re)creation.
   */
  finalize(): this {
    this.initOpValue ??= defaultInitOp;
    this.readyOpValue ??= defaultReadyOp;
    this.readyForLocalInitOpValue ??= defaultReadyForLocalInitOp;
    this.localInitOpValue ??= defaultLocalInitOp;
    // summaryOp stays undefined: only the Supervisor merges the graph's summary ops by default.
    this.saverValue ??= this.defaultSaver();
    this.graph?.finalize();
    return this;
  }

  // -------------------------------------------------------------------------------------------
  // properties (TensorFlow's)
  // -------------------------------------------------------------------------------------------

  get initOp(): ScaffoldOp | undefined {
    return this.initOpValue;
  }
  get initFeedDict(): Feeds | undefined {
    return this.initFeedDictValue;
  }
  /** The user's `initFn` bound to this scaffold: call it with the session only. */
  get initFn(): ((session: Session) => unknown) | undefined {
    return this.initFnValue;
  }
  get readyOp(): ScaffoldOp | undefined {
    return this.readyOpValue;
  }
  get readyForLocalInitOp(): ScaffoldOp | undefined {
    return this.readyForLocalInitOpValue;
  }
  get localInitOp(): ScaffoldOp | undefined {
    return this.localInitOpValue;
  }
  get localInitFeedDict(): Feeds | undefined {
    return this.localInitFeedDictValue;
  }
  get summaryOp(): ScaffoldOp | undefined {
    return this.summaryOpValue;
  }
  get saver(): Saver | undefined {
    return this.saverValue;
  }

  private defaultSaver(): Saver {
    const graph = this.graph;
    if (graph === undefined) return new BundleSaver();
    let saver = saverOfGraph.get(graph);
    if (saver === undefined) {
      saver = new BundleSaver();
      saverOfGraph.set(graph, saver);
    }
    return saver;
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** Runs a {@link ScaffoldOp}: a name through `session.run`, a function with the session. */
export const runScaffoldOp = async (
  session: Session,
  op: ScaffoldOp,
  feeds?: Feeds,
  options?: RunOptions,
): Promise<unknown> => (typeof op === "string" ? session.run(op, feeds, options) : op(session));

/** A readable name of an op for error messages (TensorFlow's `_maybe_name`). */
export const opName = (op: ScaffoldOp | ((...args: never[]) => unknown) | undefined): string =>
  op === undefined ? "None" : typeof op === "string" ? op : op.name !== "" ? op.name : "<function>";
