/**
 * The session creators a `MonitoredSession` uses (TensorFlow's `ChiefSessionCreator` and
 * `WorkerSessionCreator`). The chief's creator restores the latest checkpoint or initializes
 * the model; a worker's waits until the chief made the model ready. Both run on every
 * (re)creation, so `MonitoredSession` recovery restores the latest checkpoint.
 *
 * @example
 * ```ts
 * // @prelude docs/preludes/session.ts
 * import { ChiefSessionCreator, MonitoredSession } from "monitored-session";
 *
 * const monitored = await MonitoredSession.create({
 *   sessionCreator: new ChiefSessionCreator({ graph, checkpointDir: "/ckpts" }),
 *   graph,
 * });
 * ```
 *
 * @module
 */

import type { CheckpointManager } from "../checkpoint/CheckpointManager.js";
import type { ChiefModel } from "../session/ChiefModel.js";
import { ValueError } from "../errors.js";
import type { Logger } from "../Logger.js";
import type { Graph } from "../session/Graph.js";
import { Scaffold } from "./Scaffold.js";
import type { Session } from "../session/Session.js";
import {
  SessionManager,
  type RestoreOptions,
  type SessionFactory,
  type SessionManagerOptions,
  type WaitForSessionOptions,
} from "./SessionManager.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Creates the raw session a monitored session wraps (TensorFlow's `SessionCreator`). */
export interface SessionCreator {
  /**
   * Creates a session. A monitored session passes its `context`: the creator's lines then go
   * to `context.logger` (events on the session's `events$`) rather than its own logger.
   */
  createSession(context?: SessionCreationContext): Promise<Session>;
  /**
   * The checkpoint the last created session was restored from (`null`: initialized, not
   * restored). Optional; reported in the `sessionCreated` event.
   */
  readonly restoredFrom?: string | null;
}

/** What a monitored session gives its creator at each `createSession`. */
export interface SessionCreationContext {
  /** The session's logger: what is written to it becomes a `log` event of the session. */
  readonly logger?: Logger | undefined;
}

/**
 * Options shared by the chief's and the workers' creators: the {@link SessionManager}'s way to
 * make sessions (`sessionFactory`, or `graph.session()`; the graph is finalized at each
 * creation, as TensorFlow's default graph), its clock and logger, and the scaffold.
 */
export interface SessionCreatorOptions extends Pick<SessionManagerOptions, "sessionFactory" | "graph" | "clock" | "logger"> {
  /**
   * The pieces that initialize and check the session (default `new Scaffold({ graph })`).
   * Without `sessionFactory` and `graph`, sessions are made from the scaffold's graph.
   */
  readonly scaffold?: Scaffold | undefined;
}

/**
 * Options of {@link ChiefSessionCreator}: at most one of the two checkpoint locations, or the
 * directory's manager (the one the checkpoint hook saves with; the caller owns it and closes
 * it): the restore is the {@link SessionManager}'s. This creator writes nothing itself.
 */
export interface ChiefSessionCreatorOptions
  extends SessionCreatorOptions,
    Pick<RestoreOptions, "checkpointDir" | "checkpointManager" | "checkpointFilenameWithPath"> {}

/** Options of {@link WorkerSessionCreator}: each session waits for the chief, as {@link SessionManager.waitForSession}. */
export interface WorkerSessionCreatorOptions
  extends SessionCreatorOptions,
    Pick<SessionManagerOptions, "recoveryWaitSecs">,
    Pick<WaitForSessionOptions, "chiefModel"> {
  /** How long to wait for the chief to make the model ready (default 30 minutes, where `waitForSession` waits forever). */
  readonly maxWaitSecs?: number | undefined;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * The chief's creator: each `createSession()` finalizes the scaffold, then prepares a session:
 * restores the latest checkpoint if there is one, else runs the scaffold's init op and init
 * function, then the local init op, and checks readiness.
 */
export class ChiefSessionCreator implements SessionCreator {
  /** The scaffold (finalized at the first `createSession()`). */
  readonly scaffold: Scaffold;
  private readonly base: Base;
  private readonly checkpointDir: string | undefined;
  private readonly checkpointFilenameWithPath: string | undefined;
  /** The directory's manager the restores go through, if one was given. */
  readonly checkpointManager: CheckpointManager | undefined;

  /**
   * Throws `ValueError` if nothing can make sessions (no `sessionFactory`, `graph` or scaffold
   * graph) or if both checkpoint locations are given.
   */
  constructor(options: ChiefSessionCreatorOptions = {}) {
    if (options.checkpointDir !== undefined && options.checkpointFilenameWithPath !== undefined) {
      throw new ValueError("Can not provide both checkpoint_dir and checkpoint_filename_with_path.");
    }
    if (options.checkpointManager !== undefined && options.checkpointFilenameWithPath !== undefined) {
      throw new ValueError("Can not provide both checkpointManager and checkpoint_filename_with_path.");
    }
    this.base = new Base("ChiefSessionCreator", options);
    this.scaffold = this.base.scaffold;
    this.checkpointDir = options.checkpointDir;
    this.checkpointFilenameWithPath = options.checkpointFilenameWithPath;
    this.checkpointManager = options.checkpointManager;
  }

  /** The checkpoint the last created session was restored from, `null` if it was initialized. */
  get restoredFrom(): string | null {
    return this.base.sessionManager().lastRestored;
  }

  /** Finalizes the scaffold and prepares a session (restored or initialized, then checked). */
  async createSession(context?: SessionCreationContext): Promise<Session> {
    const scaffold = this.base.finalize();
    return this.base.sessionManager(undefined, context?.logger).prepareSession({
      saver: scaffold.saver,
      checkpointManager: this.checkpointManager,
      checkpointDir: this.checkpointDir,
      checkpointFilenameWithPath: this.checkpointFilenameWithPath,
      initOp: scaffold.initOp,
      initFeedDict: scaffold.initFeedDict,
      initFn: scaffold.initFn,
    });
  }
}

/**
 * A worker's creator: each `createSession()` finalizes the scaffold, then waits (polling every
 * `recoveryWaitSecs`, 30 s of the clock by default) until the chief made the model ready,
 * running the local init op. With a `chiefModel` the session starts from the chief's values. It
 * never initializes or restores a checkpoint; after `maxWaitSecs` it throws
 * `DeadlineExceededError`.
 */
export class WorkerSessionCreator implements SessionCreator {
  /** The scaffold (finalized at the first `createSession()`). */
  readonly scaffold: Scaffold;
  private readonly base: Base;
  private readonly maxWaitSecs: number;
  private readonly chiefModel: ChiefModel | undefined;
  private readonly recoveryWaitSecs: number | undefined;

  /**
   * Throws `ValueError` if nothing can make sessions (no `sessionFactory`, `graph` or scaffold
   * graph) or `recoveryWaitSecs` is not positive.
   */
  constructor(options: WorkerSessionCreatorOptions = {}) {
    this.base = new Base("WorkerSessionCreator", options);
    this.scaffold = this.base.scaffold;
    this.maxWaitSecs = options.maxWaitSecs ?? 30 * 60;
    this.chiefModel = options.chiefModel;
    const wait = options.recoveryWaitSecs;
    if (wait !== undefined && !(Number.isFinite(wait) && wait > 0)) {
      throw new ValueError(`WorkerSessionCreator: recoveryWaitSecs must be a positive number of seconds, got ${String(wait)}`);
    }
    this.recoveryWaitSecs = wait;
  }

  /** Finalizes the scaffold and waits for a ready session. */
  async createSession(context?: SessionCreationContext): Promise<Session> {
    this.base.finalize();
    return this.base.sessionManager(this.recoveryWaitSecs, context?.logger).waitForSession({ maxWaitSecs: this.maxWaitSecs, chiefModel: this.chiefModel });
  }
}

// ---------------------------------------------------------------------------------------------
// internals
// ---------------------------------------------------------------------------------------------

/** What both creators share: the scaffold, the graph, and the cached {@link SessionManager}. */
class Base {
  readonly scaffold: Scaffold;
  private readonly graph: Graph | undefined;
  private readonly factory: SessionFactory;
  private manager: SessionManager | undefined;

  constructor(
    who: string,
    private readonly options: SessionCreatorOptions,
  ) {
    const scaffold = options.scaffold ?? new Scaffold({ graph: options.graph });
    if (!(scaffold instanceof Scaffold)) throw new TypeError(`${who}: scaffold is not a Scaffold instance.`);
    this.scaffold = scaffold;
    const graph = options.graph ?? scaffold.graph;
    this.graph = graph;
    const factory = options.sessionFactory ?? (graph === undefined ? undefined : () => graph.session());
    if (factory === undefined) {
      throw new ValueError(`${who} needs a sessionFactory, a graph, or a scaffold with a graph to create sessions`);
    }
    this.factory = factory;
  }

  /** Finalizes the scaffold and the graph (harmless on every recovery). */
  finalize(): Scaffold {
    this.scaffold.finalize();
    this.graph?.finalize();
    return this.scaffold;
  }

  /**
   * Created once, from the finalized scaffold (TensorFlow's `_get_session_manager`); `logger`
   * (the session's) wins over the creator's own.
   */
  sessionManager(recoveryWaitSecs?: number, logger?: Logger): SessionManager {
    this.manager ??= new SessionManager({
      recoveryWaitSecs,
      localInitOp: this.scaffold.localInitOp,
      localInitFeedDict: this.scaffold.localInitFeedDict,
      readyOp: this.scaffold.readyOp,
      readyForLocalInitOp: this.scaffold.readyForLocalInitOp,
      sessionFactory: this.factory,
      clock: this.options.clock,
      logger: logger ?? this.options.logger,
    });
    return this.manager;
  }
}
