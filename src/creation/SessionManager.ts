/**
 * `SessionManager`: creates sessions that are ready to use (TensorFlow's
 * `tf.compat.v1.train.SessionManager`). The chief prepares a session (restores the latest
 * checkpoint or runs the init op), workers wait until the chief made the shared state ready,
 * and both run the local init op once the global state allows it.
 *
 * @example
 * ```ts
 * // @prelude docs/preludes/session.ts
 * import { Scaffold, SessionManager } from "monitored-session";
 *
 * const scaffold = new Scaffold({ graph }).finalize();
 * const sm = new SessionManager({ graph, localInitOp: scaffold.localInitOp, readyOp: scaffold.readyOp });
 * const prepared = await sm.prepareSession({ initOp: scaffold.initOp, saver: scaffold.saver, checkpointDir: "/ckpts" });
 * ```
 *
 * @module
 */

import { readdir } from "node:fs/promises";
import { basename, resolve } from "node:path";

import { getCheckpointState, openCheckpointDirectory, type CheckpointManager, readCheckpointState, type Saver } from "../checkpoint/index.js";
import { restoreInto } from "../checkpoint/objectGraph.js";
import type { ChiefModel } from "../session/ChiefModel.js";
import { secs, systemClock, type Clock } from "../time/Clock.js";
import { DeadlineExceededError, FailedPreconditionError, NotFoundError, RuntimeError, ValueError } from "../errors.js";
import type { Graph } from "../session/Graph.js";
import { defaultLogger, type Logger } from "../Logger.js";
import { opName, runScaffoldOp, type ScaffoldOp } from "./Scaffold.js";
import type { Feeds, RunOptions, Session } from "../session/Session.js";
import { isTensorValue, numElements, type TensorValue } from "../session/Tensor.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Makes a new raw session (for a {@link Graph}: `() => graph.session()`). */
export type SessionFactory = () => Session | Promise<Session>;

/** Options of {@link SessionManager}. */
export interface SessionManagerOptions {
  /** Run on every session once `readyForLocalInitOp` reports ready. */
  readonly localInitOp?: ScaffoldOp | undefined;
  /** Names what is not initialized; empty means ready. `undefined` means always ready. */
  readonly readyOp?: ScaffoldOp | undefined;
  /** Names what must be initialized before `localInitOp` may run. Requires `localInitOp`. */
  readonly readyForLocalInitOp?: ScaffoldOp | undefined;
  /** Makes sessions. One of `sessionFactory` and `graph` is required. */
  readonly sessionFactory?: SessionFactory | undefined;
  /** Sessions are made with `graph.session()` when no `sessionFactory` is given. */
  readonly graph?: Graph | undefined;
  /** How long to wait between attempts when waiting for a checkpoint or for the chief (default 30). */
  readonly recoveryWaitSecs?: number | undefined;
  /** Run options for `localInitOp` (named ops only). */
  readonly localInitRunOptions?: RunOptions | undefined;
  /** Feeds for `localInitOp` (named ops only). */
  readonly localInitFeedDict?: Feeds | undefined;
  /** Where waiting time comes from (default the system clock). */
  readonly clock?: Clock | undefined;
  /** Where progress is logged (default console). */
  readonly logger?: Logger | undefined;
}

/**
 * Where to restore from: at most one of `checkpointDir` and `checkpointFilenameWithPath`, or
 * the directory's `checkpointManager`.
 */
export interface RestoreOptions {
  /** Saves and restores checkpoints. Without one (and without `checkpointManager`) nothing is restored. */
  readonly saver?: Saver | undefined;
  /**
   * The checkpoint directory's manager (its one writer, holding the directory's lock): the
   * restore goes through it, with its saver, and it records what it restored. Without it, a
   * `checkpointDir` is restored read-only (no lock, no leftovers removed).
   */
  readonly checkpointManager?: CheckpointManager | undefined;
  /** Restore the checkpoint its `checkpoint` state file names (falling back past corrupt ones). */
  readonly checkpointDir?: string | undefined;
  /** Restore this checkpoint prefix. */
  readonly checkpointFilenameWithPath?: string | undefined;
  /** Wait (polling every `recoveryWaitSecs`) for a checkpoint to appear in `checkpointDir` (default false). */
  readonly waitForCheckpoint?: boolean | undefined;
  /** How long `waitForCheckpoint` waits at most (default 7200). */
  readonly maxWaitSecs?: number | undefined;
}

/** Options of {@link SessionManager.prepareSession}. */
export interface PrepareSessionOptions extends RestoreOptions {
  /** Run when nothing was restored. */
  readonly initOp?: ScaffoldOp | undefined;
  /** Feeds for `initOp` (named ops only). */
  readonly initFeedDict?: Feeds | undefined;
  /** Called with the session after `initOp` when nothing was restored. */
  readonly initFn?: ((session: Session) => unknown) | undefined;
}

/** Options of {@link SessionManager.waitForSession}. */
export interface WaitForSessionOptions {
  /** Give up after this many seconds (default: wait forever). */
  readonly maxWaitSecs?: number | undefined;
  /**
   * The chief's model in another process (a `grpc://` master's): each attempt first asks it,
   * and once it is ready restores its values into the new session, bit for bit. Without it the
   * session itself must become ready (a session that shares the chief's variables).
   */
  readonly chiefModel?: ChiefModel | undefined;
}

/** A readiness check's answer: `[true, undefined]` or `[false, why]`. */
type Readiness = readonly [boolean, string | undefined];

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** Creates ready sessions: restored or initialized (chief), or waited for (workers). */
export class SessionManager {
  private readonly localInitOp: ScaffoldOp | undefined;
  private readonly readyOp: ScaffoldOp | undefined;
  private readonly readyForLocalInitOp: ScaffoldOp | undefined;
  private readonly sessionFactory: SessionFactory;
  private readonly recoveryWaitSecs: number;
  private readonly localInitRunOptions: RunOptions | undefined;
  private readonly localInitFeedDict: Feeds | undefined;
  private readonly clock: Clock;
  private readonly logger: Logger;
  /** The checkpoint the last prepare or recover restored, `null` if it restored none. */
  lastRestored: string | null = null;

  /**
   * Throws `ValueError` if `readyForLocalInitOp` is given without `localInitOp`, if neither
   * `sessionFactory` nor `graph` is given, or if `recoveryWaitSecs` is not a positive number.
   */
  constructor(options: SessionManagerOptions) {
    if (options.readyForLocalInitOp !== undefined && options.localInitOp === undefined) {
      throw new ValueError(
        `If you pass a readyForLocalInitOp you must also pass a localInitOp , readyForLocalInitOp [${opName(options.readyForLocalInitOp)}]`,
      );
    }
    const graph = options.graph;
    const factory = options.sessionFactory ?? (graph === undefined ? undefined : () => graph.session());
    if (factory === undefined) {
      throw new ValueError("SessionManager needs a sessionFactory or a graph to create sessions");
    }
    const wait = options.recoveryWaitSecs ?? 30;
    if (!(Number.isFinite(wait) && wait > 0)) {
      throw new ValueError(`SessionManager: recoveryWaitSecs must be a positive number of seconds, got ${String(wait)}`);
    }
    this.localInitOp = options.localInitOp;
    this.readyOp = options.readyOp;
    this.readyForLocalInitOp = options.readyForLocalInitOp;
    this.sessionFactory = factory;
    this.recoveryWaitSecs = wait;
    this.localInitRunOptions = options.localInitRunOptions;
    this.localInitFeedDict = options.localInitFeedDict;
    this.clock = options.clock ?? systemClock;
    this.logger = options.logger ?? defaultLogger;
  }

  // -------------------------------------------------------------------------------------------
  // operations
  // -------------------------------------------------------------------------------------------

  /**
   * The chief's path: creates a session, restores the latest checkpoint if there is one,
   * otherwise runs `initOp` then `initFn` (both skipped when restored), runs the local init op,
   * and checks that the model is ready. Throws `RuntimeError` when nothing can initialize the
   * model or the init did not make it ready; the session is closed then.
   */
  async prepareSession(options: PrepareSessionOptions = {}): Promise<Session> {
    const { initOp, initFeedDict, initFn } = options;
    const [session, restored] = await this.restoreCheckpoint(options);
    try {
      if (!restored) {
        if (initOp === undefined && initFn === undefined && this.localInitOp === undefined) {
          throw new RuntimeError("Model is not initialized and no init_op or init_fn or local_init_op was given");
        }
        if (initOp !== undefined) await runScaffoldOp(session, initOp, initFeedDict);
        if (initFn !== undefined) await initFn(session);
      }
      const [localInitOk, localMsg] = await this.tryRunLocalInitOp(session);
      if (!localInitOk) {
        throw new RuntimeError(
          `Init operations did not make model ready for local_init.  Init op: ${opName(initOp)}, init fn: ${opName(initFn)}, error: ${localMsg ?? ""}`,
        );
      }
      const [ready, msg] = await this.modelReady(session);
      if (!ready) {
        throw new RuntimeError(
          `Init operations did not make model ready.  Init op: ${opName(initOp)}, init fn: ${opName(initFn)}, local_init_op: ${opName(this.localInitOp)}, error: ${msg ?? ""}`,
        );
      }
      return session;
    } catch (e) {
      await this.safeClose(session);
      throw e;
    }
  }

  /**
   * Creates a session and restores the latest checkpoint if there is one; always runs the local
   * init op. Resolves with `[session, initialized]`: `initialized` is `true` only if a
   * checkpoint was restored and the model is ready (no readiness check without a checkpoint).
   */
  async recoverSession(options: RestoreOptions = {}): Promise<readonly [Session, boolean]> {
    const [session, restored] = await this.restoreCheckpoint(options);
    try {
      const [localInitOk, localMsg] = await this.tryRunLocalInitOp(session);
      if (!restored) return [session, false];
      const from = options.checkpointDir ?? options.checkpointFilenameWithPath;
      if (!localInitOk) {
        this.logger.info(`Restoring model from ${from} did not make model ready for local init: ${localMsg}`);
        return [session, false];
      }
      const [ready, msg] = await this.modelReady(session);
      if (!ready) {
        this.logger.info(`Restoring model from ${from} did not make model ready: ${msg}`);
        return [session, false];
      }
      this.logger.info(`Restored model from ${from}`);
      return [session, true];
    } catch (e) {
      await this.safeClose(session);
      throw e;
    }
  }

  /**
   * The workers' path: creates a session, runs the local init op when the global state allows
   * it and resolves once the model is ready. Each failed attempt closes its session and waits
   * `recoveryWaitSecs` before a new one. Never initializes or restores from a checkpoint. With a
   * `chiefModel`, each attempt asks the chief first and makes a session only once the chief is
   * ready, starting it from the chief's values. Throws `DeadlineExceededError` when the next
   * wait would go past `maxWaitSecs` (naming the chief's address when there is one).
   */
  async waitForSession(options: WaitForSessionOptions = {}): Promise<Session> {
    const maxWaitSecs = options.maxWaitSecs ?? Number.POSITIVE_INFINITY;
    if (!(maxWaitSecs >= 0)) throw new ValueError(`waitForSession: maxWaitSecs must be >= 0, got ${String(maxWaitSecs)}`);
    const chief = options.chiefModel;
    const deadline = this.clock.now() + secs(maxWaitSecs);
    for (;;) {
      let notReadyMsg: string | undefined;
      let notReadyLocalMsg: string | undefined;
      const state = chief === undefined ? undefined : await chief.pull();
      if (state !== undefined && !state.ready) {
        notReadyMsg = state.reason;
      } else {
        const session = await this.sessionFactory();
        try {
          if (state !== undefined) {
            await restoreChiefValues(session, state.values, (chief as ChiefModel).address);
            this.logger.info(`Starting from the chief's values: ${state.origin}`);
          }
          const [localInitOk, localMsg] = await this.tryRunLocalInitOp(session);
          notReadyLocalMsg = localMsg;
          if (localInitOk) {
            const [ready, msg] = await this.modelReady(session);
            if (ready) return session;
            notReadyMsg = msg;
          }
        } catch (e) {
          await this.safeClose(session);
          throw e;
        }
        await this.safeClose(session);
      }
      const remainingAfterWaitMs = deadline - this.clock.now() - secs(this.recoveryWaitSecs);
      if (remainingAfterWaitMs < 0) {
        const waited = `Session was not ready after waiting ${Math.trunc(maxWaitSecs)} secs.`;
        throw new DeadlineExceededError(
          chief === undefined ? waited : `${waited} The chief at ${chief.address}: ${notReadyLocalMsg ?? notReadyMsg ?? "not ready"}`,
        );
      }
      this.logger.info(
        state !== undefined && !state.ready
          ? `Waiting for the chief at ${(chief as ChiefModel).address}: ${notReadyMsg ?? ""}`
          : `Waiting for model to be ready.  Ready_for_local_init_op:  ${notReadyLocalMsg ?? "None"}, ready: ${notReadyMsg ?? "None"}`,
      );
      // Told when the chief publishes, where the chief model can say so; else poll.
      if (state !== undefined && !state.ready && chief?.waitForChange !== undefined) await chief.waitForChange(secs(this.recoveryWaitSecs));
      else await this.clock.sleep(secs(this.recoveryWaitSecs));
    }
  }

  // -------------------------------------------------------------------------------------------
  // internals
  // -------------------------------------------------------------------------------------------

  /**
   * Creates a session, then restores into it (TensorFlow's `_restore_checkpoint`). From a
   * directory, waits for a state file if asked; the restore goes through
   * {@link CheckpointManager.restoreOrInitialize}, which falls back past corrupt checkpoints.
   */
  private async restoreCheckpoint(options: RestoreOptions): Promise<readonly [Session, boolean]> {
    const { saver, checkpointDir, checkpointFilenameWithPath, checkpointManager } = options;
    this.lastRestored = null;
    const session = await this.sessionFactory();
    try {
      if (checkpointDir !== undefined && checkpointFilenameWithPath !== undefined) {
        throw new ValueError("Can not provide both checkpoint_dir and checkpoint_filename_with_path.");
      }
      if (checkpointManager !== undefined) {
        const restored = await this.restoreThrough(checkpointManager, session, options);
        return [session, restored];
      }
      if (saver === undefined || (checkpointDir === undefined && checkpointFilenameWithPath === undefined)) {
        return [session, false];
      }
      const store = session.variables;
      if (store === undefined) {
        throw new ValueError("Cannot restore a checkpoint into a session that exposes no variables (session.variables is undefined)");
      }
      if (checkpointFilenameWithPath !== undefined) {
        const contents = await saver.restore(checkpointFilenameWithPath);
        await restoreInto(store, contents);
        this.lastRestored = checkpointFilenameWithPath;
        return [session, true];
      }
      const dir = checkpointDir as string;
      const maxWaitSecs = options.maxWaitSecs ?? 7200;
      let waitedSecs = 0;
      let name: string | null = null;
      for (;;) {
        const read = await readCheckpointState(dir);
        if (read.status === "ok") {
          name = checkpointNameOf(read.state.modelCheckpointPath);
          break;
        }
        if (read.status === "invalid") {
          // TensorFlow treats it as missing: the chief starts over and then overwrites the
          // checkpoints on disk. Restore the newest one that verifies instead (read-only here;
          // the directory's writer rebuilds the state file).
          name = await checkpointNameOnDisk(dir);
          this.logger.warn(
            `${read.file}: invalid checkpoint state; ${name === null ? "checkpoint ignored" : `restoring the newest ${name}-<n> checkpoint on disk that verifies`}:\n  ${read.problems.join("\n  ")}`,
            { path: read.file, problems: read.problems },
          );
          if (name !== null) break;
        }
        if (options.waitForCheckpoint !== true || !(waitedSecs < maxWaitSecs)) return [session, false];
        this.logger.info("Waiting for checkpoint to be available.");
        await this.clock.sleep(secs(this.recoveryWaitSecs));
        waitedSecs += this.recoveryWaitSecs;
      }
      // The fallback past a missing or corrupt latest checkpoint scans `<name>-<n>` files: the
      // name is the state's (`model.ckpt` for the hooks), not the manager's default `ckpt`.
      // Restoring never deletes anything (a writer may be mid-save in this directory).
      const manager = await openCheckpointDirectory({
        directory: dir,
        checkpointName: name,
        saver,
        clock: this.clock,
        logger: this.logger,
        removeLeftovers: false,
        lock: false,
      }, "saver");
      const path = await manager.restoreOrInitialize(store, () => undefined);
      if (path === null) {
        throw new NotFoundError(`The checkpoint state in ${dir} names checkpoints, but none of them exists on disk.`);
      }
      this.lastRestored = path;
      return [session, true];
    } catch (e) {
      await this.safeClose(session);
      throw e;
    }
  }

  /**
   * Restores through the directory's manager: waits for a checkpoint if asked, then restores
   * the newest one that verifies. Resolves `false` when there is none.
   */
  private async restoreThrough(manager: CheckpointManager, session: Session, options: RestoreOptions): Promise<boolean> {
    if (options.checkpointFilenameWithPath !== undefined) {
      throw new ValueError("Can not provide both checkpointManager and checkpoint_filename_with_path.");
    }
    if (options.checkpointDir !== undefined && resolve(options.checkpointDir) !== manager.directory) {
      throw new ValueError(`checkpointDir ${options.checkpointDir} is not the checkpointManager's directory ${manager.directory}`);
    }
    const store = session.variables;
    if (store === undefined) {
      throw new ValueError("Cannot restore a checkpoint into a session that exposes no variables (session.variables is undefined)");
    }
    const maxWaitSecs = options.maxWaitSecs ?? 7200;
    let waitedSecs = 0;
    while (manager.latestCheckpoint === null && options.waitForCheckpoint === true && waitedSecs < maxWaitSecs) {
      if ((await getCheckpointState(manager.directory, { logger: this.logger })) !== null) break;
      this.logger.info("Waiting for checkpoint to be available.");
      await this.clock.sleep(secs(this.recoveryWaitSecs));
      waitedSecs += this.recoveryWaitSecs;
    }
    const path = await manager.restoreOrInitialize(store, () => undefined);
    if (path === null && manager.latestCheckpoint !== null) {
      throw new NotFoundError(`The checkpoint state in ${manager.directory} names checkpoints, but none of them exists on disk.`);
    }
    this.lastRestored = path;
    return path !== null;
  }

  /** Runs the local init op if the global state allows it (TensorFlow's `_try_run_local_init_op`). */
  private async tryRunLocalInitOp(session: Session): Promise<Readiness> {
    if (this.localInitOp === undefined) return [true, undefined];
    const [ready, msg] = await this.ready(this.readyForLocalInitOp, session, "Model not ready for local init");
    if (!ready) return [false, msg];
    this.logger.info("Running local_init_op.");
    await runScaffoldOp(session, this.localInitOp, this.localInitFeedDict, this.localInitRunOptions);
    this.logger.info("Done running local_init_op.");
    return [true, undefined];
  }

  private modelReady(session: Session): Promise<Readiness> {
    return this.ready(this.readyOp, session, "Model not ready");
  }

  /**
   * Runs a readiness op (TensorFlow's `_ready`). Ready when it yields nothing, an empty list, an
   * empty tensor or an `int32` tensor (TensorFlow's legacy convention). A
   * `FailedPreconditionError` about an uninitialized value means not ready; others are rethrown.
   */
  private async ready(op: ScaffoldOp | undefined, session: Session, what: string): Promise<Readiness> {
    if (op === undefined) return [true, undefined];
    let value: unknown;
    try {
      value = await runScaffoldOp(session, op);
    } catch (e) {
      if (e instanceof FailedPreconditionError) {
        if (e.message.includes("uninitialized")) return [false, e.message];
        this.logger.warn(`${what} : error [${e.message}]`);
      }
      throw e;
    }
    const names = notInitializedNames(value);
    return names === undefined ? [true, undefined] : [false, `Variables not initialized: ${names.join(", ")}`];
  }

  private async safeClose(session: Session): Promise<void> {
    try {
      await session.close?.();
    } catch (e) {
      this.logger.warn(`Error closing a session that was not ready: ${String(e)}`);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** Restores the chief's values into a worker's new session. */
const restoreChiefValues = async (session: Session, values: ReadonlyMap<string, TensorValue>, address: string): Promise<void> => {
  const store = session.variables;
  if (store === undefined) {
    throw new ValueError(`The chief at ${address} is ready, but this worker's session exposes no variables to restore its values into (session.variables is undefined)`);
  }
  await store.restore(values);
};

/** The base name of a numbered checkpoint path (`/d/model.ckpt-5` → `model.ckpt`); the file name if unnumbered. */
const checkpointNameOf = (path: string): string => {
  const base = basename(path);
  const m = /^(.+)-\d+$/.exec(base);
  return m === null ? base : (m[1] as string);
};

/** The one base name of the `<name>-<n>.index` files in `dir`, or `null` if there are none or several. */
const checkpointNameOnDisk = async (dir: string): Promise<string | null> => {
  const names = new Set<string>();
  for (const f of await readdir(dir).catch(() => [] as string[])) {
    const m = /^(.+)-\d+\.index$/.exec(f);
    if (m !== null) names.add(m[1] as string);
  }
  return names.size === 1 ? ([...names][0] as string) : null;
};

/** The names a readiness op reported, or `undefined` when it means "ready". */
const notInitializedNames = (value: unknown): readonly string[] | undefined => {
  if (value === undefined || value === null) return undefined;
  if (isTensorValue(value)) {
    if (value.dtype === "int32" || numElements(value.shape) === 0) return undefined;
    return Array.from(value.data as ArrayLike<unknown>, String);
  }
  if (Array.isArray(value)) return value.length === 0 ? undefined : value.map(String);
  if (typeof value === "string") return value === "" ? undefined : [value];
  throw new ValueError(
    `A readiness op must yield a list of the names of uninitialized variables (empty when ready), got ${typeof value}`,
  );
};
