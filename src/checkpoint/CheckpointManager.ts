/**
 * `CheckpointManager`: numbered checkpoints in a directory, with retention and a `checkpoint`
 * state file (TensorFlow's `tf.train.CheckpointManager`). It decides when to save (step
 * interval gating), names checkpoints `<dir>/<checkpointName>-<n>`, records them in the state
 * file, deletes old ones (`maxToKeep`, `keepCheckpointEveryNHours` or a custom
 * {@link RetentionPolicy}), and restores the newest checkpoint that verifies. The retention plan
 * is in retentionPlan.ts, the take-up and repair of the state file in stateRecovery.ts.
 *
 * @example
 * ```ts
 * // @prelude docs/preludes/session.ts
 * import { CheckpointManager } from "monitored-session/checkpoint";
 *
 * const manager = await CheckpointManager.create({ directory: "/tmp/run", maxToKeep: 3 });
 * await manager.restoreOrInitialize(session.variables);
 * // ... train ...
 * await manager.save(session.variables, { checkpointNumber: step });
 * ```
 *
 * @module
 */

import { join, resolve } from "node:path";

import { systemClock, type Clock } from "../time/Clock.js";
import { DataLossError, NotFoundError, RuntimeError, ValueError } from "../errors.js";
import { isPromiseLike } from "../util/promise.js";
import { processTempFiles, type TempFileRegistry } from "./TempFileRegistry.js";
import { defaultLogger, type Logger } from "../Logger.js";
import type { ObjectPaths, VariableStore } from "../session/Session.js";
import type { TensorValue } from "../session/Tensor.js";
import { dataPath, encodeBundle, indexPath, type EncodedBundle, type StagedBundle } from "./checkpointFormat.js";
import { ownedBytes, sharedFileCommitter, toError, type FileCommitter, type FileStep } from "./internal/fileJobs.js";
import { CheckpointDirLock, type CheckpointDirLockOptions } from "./CheckpointDirLock.js";
import { CHECKPOINT_STATE_FILENAME, readCheckpointState, renderCheckpointState } from "./CheckpointState.js";
import {
  assertPlainName,
  fsyncDir,
  isStaleTemp,
  mkdirDurable,
  readdirIfExists,
  resolveInside,
  settleAll,
  stageFile,
  syncCounters,
  TEMP_MARKER,
  unlinkIfExists,
  type StagedFile,
} from "./internal/files.js";
import { BundleSaver, isVariableStore, toSnapshot, type SaveSource, type Saver } from "./Saver.js";
import { restoreInto } from "./objectGraph.js";
import { checkpointNumberOf, scanCheckpointNumbers } from "./checkpointNumbers.js";
import { assertOneRetention, planRetention, Retention, type RetentionPolicy } from "./retentionPlan.js";
import { CheckpointDefaults } from "./checkpointDefaults.js";
import { adoptState, recoverState } from "./stateRecovery.js";

export { describePolicy, Retention, type DescribedRetentionPolicy, type ManagedCheckpoint, type RetentionContext, type RetentionDecision, type RetentionPolicy } from "./retentionPlan.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link CheckpointManager.create}. */
export interface CheckpointManagerOptions {
  /** The checkpoint directory (created when the manager takes its lock, else on the first save). */
  readonly directory: string;
  /** How many checkpoints to keep (default 5). `null` keeps all. `<= 0` is a `ValueError`. */
  readonly maxToKeep?: number | null;
  /** Keep one checkpoint per this many hours forever (beyond `maxToKeep`). */
  readonly keepCheckpointEveryNHours?: number | null;
  /** The checkpoint base name (default `ckpt`; `MonitoredTrainingSession` uses `model.ckpt`). */
  readonly checkpointName?: string;
  /** Reads the current step, for interval gating and the recorded step. */
  readonly stepCounter?: () => number | bigint;
  /** Save at most once per this many steps of `stepCounter` (requires `stepCounter`). */
  readonly checkpointInterval?: number | null;
  /** Called by {@link CheckpointManager.restoreOrInitialize} when there is nothing to restore. */
  readonly initFn?: () => void | Promise<void>;
  /** The step of the last checkpoint, if known (interval gating starts from it). */
  readonly lastCheckpointStep?: number | null;
  /** The state file's name (default `checkpoint`). */
  readonly latestFilename?: string;
  /** The storage format (default {@link BundleSaver}). */
  readonly saver?: Saver;
  /**
   * Which checkpoints stay after each save, as a value (see {@link Retention}): replaces
   * `maxToKeep` and `keepCheckpointEveryNHours`, which are `Retention.tensorflow` of the two
   * (giving it beside either is a `ValueError`).
   */
  readonly retentionPolicy?: RetentionPolicy;
  /** Time source for timestamps and `keepCheckpointEveryNHours` (default the system clock). */
  readonly clock?: Clock;
  /** Where warnings (corrupt checkpoints, leftovers, clock skew) go. */
  readonly logger?: Logger;
  /**
   * Remove leftovers of interrupted saves at creation (default `true`). A manager that only
   * restores, in a directory another process may be writing, passes `false`: a data file
   * between that writer's data and index renames would otherwise look like a leftover.
   */
  readonly removeLeftovers?: boolean;
  /**
   * The files its saves are writing, which its cleanup leaves alone (default the process-wide
   * `processTempFiles`; the default saver uses it too). Managers of one directory in one
   * process must share it.
   */
  readonly tempFiles?: TempFileRegistry | undefined;
  /**
   * Take the directory's lock before anything else (default `true`): a manager that saves is
   * the directory's one writer, and a second one (another process, or another session of this
   * process) fails with `CheckpointDirInUseError` before it writes or removes anything. Give
   * lease options for locks from other hosts; `false` for a manager that only restores.
   * {@link CheckpointManager.close} releases it.
   */
  readonly lock?: boolean | CheckpointManagerLockOptions;
  /**
   * Where saves of the default saver with up to 1 MiB of data are committed: the process's
   * checkpoint writer thread by default; `null` streams every save on the calling thread.
   *
   * @internal
   */
  readonly fileCommitter?: FileCommitter | null;
}

/** Lease options of a manager's directory lock (its clock and logger are the manager's). */
export type CheckpointManagerLockOptions = Omit<CheckpointDirLockOptions, "clock" | "logger">;

/** Options of {@link CheckpointManager.save}. */
export interface CheckpointSaveOptions {
  /** The `<n>` of the name (default: the save counter). */
  readonly checkpointNumber?: number;
  /** Apply interval gating (default `true`). */
  readonly checkInterval?: boolean;
  /** The step to record (default: `stepCounter()`, else the checkpoint number). */
  readonly step?: number;
}

/**
 * A save whose number and snapshot are fixed, not yet written. Made by
 * {@link CheckpointManager.prepareSave}; written by {@link CheckpointManager.commitSave}.
 */
export interface PreparedSave {
  readonly checkpointNumber: number;
  readonly step: number;
  /** The absolute prefix it will be written to. */
  readonly path: string;
  readonly snapshot: ReadonlyMap<string, TensorValue>;
  /** The store's TensorFlow 2 object paths when the snapshot was taken (see `VariableStore.objectPaths`). */
  readonly objectPaths?: ObjectPaths | undefined;
  /** @internal its place in the commit order */
  readonly turn: Turn;
  /**
   * Its files, encoded for the writer thread (a small save of the default saver); `undefined`
   * for a save written on the calling thread.
   *
   * @internal
   */
  readonly encoded?: EncodedBundle | undefined;
}

interface Turn {
  readonly previous: Promise<void>;
  readonly done: () => void;
}

/**
 * The most data a save commits on the writer thread: its files are encoded in memory and copied
 * to the thread once. A larger one is written from the tensors' own buffers on this thread,
 * where the disk, not the number of steps, is its cost. Measured (a blocking `save`, medians of
 * 30, 2026-12-02): the thread is faster up to 1 MiB (2.9 against 3.6 ms at 256 KiB, 4.5
 * against 4.7 ms at 1 MiB) and slower at 2 MiB (6.5 against 5.5 ms), the copy's cost.
 */
const THREAD_COMMIT_MAX_BYTES = 1024 * 1024;
/** State files' text as bytes of their own (not a view of Node's shared pool). */
const utf8 = new TextEncoder();

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** Manages numbered checkpoints in one directory. Create it with {@link CheckpointManager.create}. */
export class CheckpointManager {
  /** The checkpoint directory (absolute). */
  readonly directory: string;
  /** The checkpoint base name. */
  readonly checkpointName: string;
  /** The interval of step gating, if any. */
  readonly checkpointInterval: number | null;
  /** The storage format. */
  readonly saver: Saver;
  /** How many checkpoints it keeps (`null`: all). */
  readonly maxToKeep: number | null;
  /** It also keeps one checkpoint every this many hours (`null`: none). */
  readonly keepEveryNHours: number | null;
  private readonly stepCounter: (() => number | bigint) | undefined;
  private readonly temps: TempFileRegistry;
  /** Where small saves of the default saver are committed (`null`: every save streams on this thread). */
  private readonly committer: FileCommitter | null;
  private readonly initFn: (() => void | Promise<void>) | undefined;
  private readonly latestFilename: string;
  /** Which checkpoints stay after each save: the option's, or `Retention.tensorflow` of `maxToKeep` and `keepCheckpointEveryNHours`. */
  readonly retentionPolicy: RetentionPolicy;
  private readonly clock: Clock;
  private readonly logger: Logger;
  private latest: string | null = null;
  private lastPreserved: number;
  private maybeDelete = new Map<string, number>();
  private counter = 0;
  private lastCheckpointStep: number | null;
  private tail: Promise<void> = Promise.resolve();
  private lock: CheckpointDirLock | null = null;
  private closed = false;
  private restored: string | null = null;

  private constructor(options: CheckpointManagerOptions) {
    assertOneRetention("CheckpointManager", options);
    const maxToKeep = options.maxToKeep === undefined ? CheckpointDefaults.manager.maxToKeep : options.maxToKeep;
    if (maxToKeep !== null && (!Number.isInteger(maxToKeep) || maxToKeep <= 0)) {
      throw new ValueError(`CheckpointManager: maxToKeep must be a positive integer or null (keep all), got ${maxToKeep}`);
    }
    const interval = options.checkpointInterval ?? null;
    if (interval !== null && options.stepCounter === undefined) {
      throw new ValueError("`stepCounter` should be passed if `checkpointInterval` is not None.");
    }
    if (interval !== null && !(Number.isFinite(interval) && interval > 0)) {
      throw new ValueError(`CheckpointManager: checkpointInterval must be a positive number, got ${interval}`);
    }
    const hours = options.keepCheckpointEveryNHours ?? null;
    if (hours !== null && !(hours > 0)) {
      throw new ValueError(`CheckpointManager: keepCheckpointEveryNHours must be positive, got ${hours}`);
    }
    this.checkpointName = options.checkpointName ?? CheckpointDefaults.manager.checkpointName;
    assertPlainName(this.checkpointName);
    this.latestFilename = options.latestFilename ?? CHECKPOINT_STATE_FILENAME;
    assertPlainName(this.latestFilename, "state file name");
    this.directory = resolve(options.directory);
    this.maxToKeep = maxToKeep;
    this.keepEveryNHours = hours;
    this.checkpointInterval = interval;
    this.stepCounter = options.stepCounter;
    this.initFn = options.initFn;
    this.clock = options.clock ?? systemClock;
    this.logger = options.logger ?? defaultLogger;
    this.temps = options.tempFiles ?? processTempFiles;
    this.saver = options.saver ?? new BundleSaver({ clock: this.clock, tempFiles: this.temps });
    this.committer = options.fileCommitter === undefined ? sharedFileCommitter() : options.fileCommitter;
    this.retentionPolicy = options.retentionPolicy ?? Retention.tensorflow({ maxToKeep, keepCheckpointEveryNHours: hours });
    this.lastCheckpointStep = options.lastCheckpointStep ?? null;
    this.lastPreserved = this.nowSecs() - 1;
  }

  /**
   * Creates a manager: validates the options, removes leftovers of interrupted saves, and
   * recovers the state file. Entries with a timestamp `<= last_preserved_timestamp` are
   * preserved: never managed or deleted. Throws `ValueError` for invalid options or a state
   * file with an empty `model_checkpoint_path`.
   */
  static async create(options: CheckpointManagerOptions): Promise<CheckpointManager> {
    const m = new CheckpointManager(options);
    const lock = options.lock ?? true;
    if (lock !== false) {
      m.lock = await CheckpointDirLock.acquire(m.directory, { ...(lock === true ? {} : lock), clock: m.clock, logger: m.logger });
      // The directory's writer: its writer thread starts now, not at the first save.
      if (m.committer !== null && options.fileCommitter === undefined) sharedFileCommitter()?.warm();
    }
    try {
      if (options.removeLeftovers ?? true) await m.cleanup();
      await m.recover();
    } catch (e) {
      await m.lock?.release();
      throw e;
    }
    return m;
  }

  // -------------------------------------------------------------------------------------------
  // properties
  // -------------------------------------------------------------------------------------------

  /** The newest checkpoint's prefix, or `null`. */
  get latestCheckpoint(): string | null {
    return this.latest;
  }

  /** The managed checkpoints' prefixes, oldest first (preserved ones excluded). */
  get checkpoints(): readonly string[] {
    return [...this.maybeDelete.keys()];
  }

  /** How many saves this manager has made (TensorFlow's `save_counter`), resumed from the names on disk. */
  get saveCounter(): number {
    return this.counter;
  }

  /** The last preserved timestamp, Unix seconds. */
  get lastPreservedTimestamp(): number {
    return this.lastPreserved;
  }

  /** Whether this manager holds its directory's lock (it is the directory's writer). */
  get holdsLock(): boolean {
    return this.lock !== null && !this.closed;
  }

  /** The checkpoint the last restore through this manager loaded, `null` if none did. */
  get lastRestored(): string | null {
    return this.restored;
  }

  // -------------------------------------------------------------------------------------------
  // operations
  // -------------------------------------------------------------------------------------------

  /**
   * Saves a checkpoint at `<dir>/<name>-<n>` and resolves with its path once it is durable and
   * recorded, or with `null` if interval gating skipped it. The state file names it before
   * checkpoints beyond the retention are deleted, and is then replaced by one without them (so
   * a crash while deleting still sees the new checkpoint). A synchronous store is snapshotted
   * before this returns; an asynchronous one when its snapshot resolves.
   */
  save(values: SaveSource, options: CheckpointSaveOptions = {}): Promise<string | null> {
    let prepared: PreparedSave | null | Promise<PreparedSave | null>;
    try {
      prepared = this.prepareSave(values, options);
    } catch (e) {
      return Promise.reject(e);
    }
    if (isPromiseLike(prepared)) return prepared.then((p) => (p === null ? null : this.commitSave(p)));
    return prepared === null ? Promise.resolve(null) : this.commitSave(prepared);
  }

  /**
   * The first half of {@link save}: interval gating, the save counter, the name and the
   * snapshot, all synchronous unless the store's snapshot is asynchronous (then the result
   * resolves with it). Returns `null` if gating skips the save. Every prepared save must be passed to
   * {@link commitSave} or {@link abandonSave}, in any order; they are recorded in
   * preparation order.
   */
  prepareSave(values: SaveSource, options: CheckpointSaveOptions = {}): PreparedSave | null | Promise<PreparedSave | null> {
    if (this.closed) throw new RuntimeError(`CheckpointManager of ${this.directory} is closed; create a new one to save.`);
    if (this.stepCounter !== undefined && this.checkpointInterval !== null) {
      const current = Number(this.stepCounter());
      if (this.lastCheckpointStep !== null) {
        if (current === this.lastCheckpointStep) return null;
        if ((options.checkInterval ?? true) && current < this.lastCheckpointStep + this.checkpointInterval) return null;
      }
      this.lastCheckpointStep = current;
    }
    return this.reserve(toSnapshot(values), options, isVariableStore(values) ? values.objectPaths?.() : undefined);
  }

  /**
   * Numbers and orders a save whose snapshot may still be coming: its place in the commit order
   * is taken now, so saves are recorded in the order they were requested; if the snapshot
   * fails, the place is given up.
   */
  private reserve(
    snapshot: ReadonlyMap<string, TensorValue> | Promise<ReadonlyMap<string, TensorValue>>,
    options: CheckpointSaveOptions,
    objectPaths: ObjectPaths | undefined,
  ): PreparedSave | Promise<PreparedSave> {
    this.counter += 1;
    const checkpointNumber = options.checkpointNumber ?? this.counter;
    if (!Number.isSafeInteger(checkpointNumber)) {
      throw new ValueError(`checkpointNumber must be a safe integer, got ${checkpointNumber}`);
    }
    const step = options.step ?? (this.stepCounter !== undefined ? Number(this.stepCounter()) : checkpointNumber);
    const path = resolveInside(this.directory, `${this.checkpointName}-${checkpointNumber}`);
    const previous = this.tail;
    let done!: () => void;
    this.tail = new Promise<void>((r) => {
      done = r;
    });
    const turn = { previous, done };
    // Encoded now, while the snapshot is fresh: a malformed tensor fails the request, not the write.
    const prepare = (s: ReadonlyMap<string, TensorValue>): PreparedSave => {
      try {
        return { checkpointNumber, step, path, snapshot: s, objectPaths, turn, encoded: this.encodeForThread(s, path, step, objectPaths) };
      } catch (e) {
        void previous.then(done);
        throw e;
      }
    };
    if (!isPromiseLike(snapshot)) return prepare(snapshot);
    return Promise.resolve(snapshot).then(prepare, (e: unknown) => {
      void previous.then(done);
      throw e;
    });
  }

  /**
   * Whether a prepared save's files are written on the process's checkpoint writer thread: it
   * then needs no event-loop turn between training steps to make progress (see "How a save is
   * written" in docs/checkpoints.md). `false`: written on this thread, in asynchronous steps.
   */
  writesOnThread(prepared: PreparedSave): boolean {
    return prepared.encoded !== undefined;
  }

  /**
   * Writes and records a {@link PreparedSave}; resolves with its path once the checkpoint is
   * durable and the state file names it (see "How a save is written" in docs/checkpoints.md).
   */
  async commitSave(prepared: PreparedSave): Promise<string> {
    if (prepared.encoded !== undefined) return this.commitOnThread(prepared, prepared.encoded, this.committer as FileCommitter);
    let bundle: StagedBundle | null = null;
    const states: StagedFile[] = [];
    let ordered = false;
    try {
      // The default saver's files are written now and made durable below, together with the
      // state file's; any other saver makes its checkpoint durable itself.
      if (Object.getPrototypeOf(this.saver) === BundleSaver.prototype) {
        bundle = await (this.saver as BundleSaver).stage(prepared.snapshot, prepared.path, { step: prepared.step, objectPaths: prepared.objectPaths });
      } else {
        await this.saver.save(prepared.snapshot, prepared.path, { step: prepared.step, objectPaths: prepared.objectPaths });
        // The state file is recorded in it: durable in its parent if this made it.
        await mkdirDurable(this.directory);
      }
      await prepared.turn.previous;
      ordered = true;
      // A writer that stalled past its lease may have lost the directory: record nothing then.
      await this.lock?.verify();
      const { recorded, plan, swept } = this.planRecord(prepared.path);
      const keep = (f: StagedFile): StagedFile => (states.push(f), f);
      const [first, second] = await settleAll([
        stageFile(recorded.file, recorded.text, this.temps).then(keep),
        swept.text === recorded.text ? null : stageFile(swept.file, swept.text, this.temps).then(keep),
      ]);
      // One round of concurrent file fsyncs: data, index, both states (not yet visible).
      await settleAll([bundle?.sync(), first?.sync(), second?.sync()]);
      // Then the renames, the state last, and one directory fsync for all of them.
      await bundle?.publish();
      await first?.publish();
      await fsyncDir(this.directory);
      this.latest = prepared.path;
      this.maybeDelete = plan.managed;
      this.lastPreserved = plan.lastPreserved;
      for (const path of plan.remove) await this.deleteCheckpoint(path);
      // Its content is durable already; the rename becomes durable with the next directory
      // fsync. Until then a power cut leaves the first state, which is valid.
      await second?.publish();
      return prepared.path;
    } finally {
      await Promise.all([bundle?.abort(), ...states.map((f) => f.abort())]);
      // A save that failed before its turn lets the next one record only after the previous one.
      if (ordered) prepared.turn.done();
      else void prepared.turn.previous.then(prepared.turn.done);
    }
  }

  /**
   * A save of the default saver small enough for the writer thread, encoded in memory;
   * `undefined` for any other (written by the streaming path of {@link commitSave}).
   */
  private encodeForThread(snapshot: ReadonlyMap<string, TensorValue>, path: string, step: number, objectPaths: ObjectPaths | undefined): EncodedBundle | undefined {
    if (this.committer === null || Object.getPrototypeOf(this.saver) !== BundleSaver.prototype) return undefined;
    // The tensors' own bytes are a lower bound of the data file's size: a save over the limit
    // by them alone is not laid out twice (here, then again by the streaming path), and starts
    // no thread.
    let raw = 0;
    for (const v of snapshot.values()) if (!Array.isArray(v.data)) raw += (v.data as ArrayBufferView).byteLength;
    if (raw > THREAD_COMMIT_MAX_BYTES) return undefined;
    // A thread still starting would hold the save up (25 ms and more, measured: a non-chief's
    // first preemption save, in a directory made for it, doubled): it streams instead.
    if (this.committer.ready?.() === false) return undefined;
    const planned = (this.saver as BundleSaver).plan(snapshot, path, { step, objectPaths });
    return planned.plan.dataBytes > THREAD_COMMIT_MAX_BYTES ? undefined : encodeBundle(planned);
  }

  /**
   * {@link commitSave} as one job of the writer thread: the bundle's files and the state
   * files written under temporary names and fdatasynced, the lock checked, the renames (data,
   * index, state) and the directory's fsync, then the retention's deletions and the second
   * state, as the streaming path orders them.
   */
  private async commitOnThread(prepared: PreparedSave, encoded: EncodedBundle, committer: FileCommitter): Promise<string> {
    const held: string[] = [];
    const tmp = (path: string): string => {
      const t = this.temps.tempPathFor(path);
      held.push(t);
      return t;
    };
    let ordered = false;
    try {
      await prepared.turn.previous;
      ordered = true;
      const expected = this.lock?.expectation();
      const { recorded, plan, swept } = this.planRecord(prepared.path);
      // Between its rename and the index's, the data file has no index: a cleanup must leave it.
      this.temps.hold(encoded.dataPath);
      held.push(encoded.dataPath);
      const dataTmp = tmp(encoded.dataPath);
      const indexTmp = tmp(encoded.indexPath);
      const firstTmp = tmp(recorded.file);
      const secondTmp = swept.text === recorded.text ? null : tmp(swept.file);
      const steps: FileStep[] = [
        { op: "mkdir", dir: this.directory },
        { op: "write", tmp: dataTmp, path: encoded.dataPath, bytes: encoded.data },
        { op: "write", tmp: indexTmp, path: encoded.indexPath, bytes: ownedBytes(encoded.index) },
        { op: "write", tmp: firstTmp, path: recorded.file, bytes: utf8.encode(recorded.text) },
        ...(secondTmp === null ? [] : [{ op: "write", tmp: secondTmp, path: swept.file, bytes: utf8.encode(swept.text) } as const]),
        // One round of concurrent fdatasyncs: data, index, both states (not yet visible).
        { op: "syncWritten" },
        ...(expected === undefined ? [] : [{ op: "checkLock", ...expected } as const]),
        // An older checkpoint at this prefix keeps its index until the new one replaces it (see `StagedBundle.publish`).
        { op: "rename", from: dataTmp, to: encoded.dataPath },
        { op: "rename", from: indexTmp, to: encoded.indexPath },
        { op: "rename", from: firstTmp, to: recorded.file },
        { op: "fsyncDir", dir: this.directory },
      ];
      const recordedAfter = steps.length;
      const removed = new Map<string, string>();
      // Index first, then data (as `removeBundle`): a checkpoint whose index stays keeps its data.
      for (const path of plan.remove) {
        const files = [indexPath(path), dataPath(path)];
        for (const file of files) removed.set(file, path);
        steps.push({ op: "unlink", paths: files });
      }
      if (secondTmp !== null) steps.push({ op: "rename", from: secondTmp, to: swept.file });
      const result = await committer.run({ steps });
      syncCounters.files += result.syncs.files;
      syncCounters.directories += result.syncs.directories;
      for (const w of result.warnings) {
        const path = removed.get(w.path ?? "") ?? w.path ?? "(unknown)";
        this.logger.warn(`Could not delete checkpoint ${path}: ${w.message}`, { path });
      }
      if (result.lock !== undefined) (this.lock as CheckpointDirLock).lostWith(result.lock);
      if (result.error !== undefined && result.done < recordedAfter) throw toError(result.error);
      this.latest = prepared.path;
      this.maybeDelete = plan.managed;
      this.lastPreserved = plan.lastPreserved;
      // Recorded; only the second state's rename failed (its content was durable already).
      if (result.error !== undefined) throw toError(result.error);
      return prepared.path;
    } finally {
      for (const t of held) this.temps.release(t);
      if (ordered) prepared.turn.done();
      else void prepared.turn.previous.then(prepared.turn.done);
    }
  }

  /** Gives up a {@link PreparedSave} without writing it (e.g. superseded by a newer one). */
  abandonSave(prepared: PreparedSave): void {
    void prepared.turn.previous.then(prepared.turn.done);
  }

  /**
   * Restores the newest checkpoint that verifies into `store` and resolves with its path;
   * with nothing to restore, calls `initFn` (this argument, else the option) and resolves with
   * `null`. A corrupt or incomplete checkpoint is logged as a warning and skipped in favour of
   * the previous one. If checkpoints exist but none verifies, throws `DataLossError` listing
   * each: training never silently starts over.
   */
  async restoreOrInitialize(store: VariableStore, initFn?: () => void | Promise<void>): Promise<string | null> {
    const failures: string[] = [];
    for (const path of await this.candidates()) {
      let contents;
      try {
        contents = await this.saver.restore(path);
      } catch (e) {
        if (e instanceof NotFoundError) continue;
        if (!(e instanceof DataLossError)) throw e;
        failures.push(`${path}: ${e.message}`);
        this.logger.warn(`Checkpoint ${path} is corrupt or incomplete and was skipped; trying the previous one. ${e.message}`, {
          path,
        });
        continue;
      }
      await restoreInto(store, contents);
      if (this.checkpointInterval !== null && this.stepCounter !== undefined) {
        this.lastCheckpointStep = Number(this.stepCounter());
      }
      const n = checkpointNumberOf(path, this.checkpointName);
      if (n !== null && n > this.counter) this.counter = n;
      if (failures.length > 0) this.logger.warn(`Restored the previous valid checkpoint ${path} (step ${contents.step}).`, { path });
      this.restored = path;
      return path;
    }
    if (failures.length > 0) {
      throw new DataLossError(`No valid checkpoint in ${this.directory}; every candidate failed verification:\n  ${failures.join("\n  ")}`);
    }
    const init = initFn ?? this.initFn;
    if (init !== undefined) await init();
    return null;
  }

  /**
   * Restores a given checkpoint (default the latest) into `store`, verifying it first. Throws
   * `InvalidArgumentError` for a path outside the directory, `NotFoundError`, or
   * `DataLossError` for a corrupt checkpoint. Resolves with the recorded step.
   */
  async restore(store: VariableStore, path: string | null = this.latest): Promise<number> {
    if (path === null) throw new NotFoundError(`No checkpoint to restore in ${this.directory}`);
    const full = resolveInside(this.directory, path);
    const contents = await this.saver.restore(full);
    await restoreInto(store, contents);
    this.restored = full;
    return contents.step;
  }

  /**
   * Waits for the saves already being written (they are recorded), then releases the
   * directory's lock. Saving afterwards throws `RuntimeError`. Idempotent.
   */
  async close(): Promise<void> {
    this.closed = true;
    await this.tail;
    await this.lock?.release();
  }

  /** `close()`, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /**
   * Removes leftovers of interrupted saves: temporary files of dead writers and data files
   * without an index (for this checkpoint name), and temporary state files. Called by
   * {@link create}; safe to call again. Resolves with the removed paths.
   */
  async cleanup(): Promise<string[]> {
    const removed = await this.saver.cleanup(this.directory, this.checkpointName);
    for (const n of await readdirIfExists(this.directory)) {
      if (n.startsWith(`${this.latestFilename}${TEMP_MARKER}`) && isStaleTemp(this.directory, n, this.temps)) {
        if (await unlinkIfExists(join(this.directory, n))) removed.push(join(this.directory, n));
      }
    }
    if (removed.length > 0) {
      this.logger.warn(`Removed ${removed.length} leftover file(s) of interrupted checkpoint saves in ${this.directory}`, {
        removed,
      });
    }
    return removed;
  }

  // -------------------------------------------------------------------------------------------
  // internals
  // -------------------------------------------------------------------------------------------

  private async recover(): Promise<void> {
    const read = await readCheckpointState(this.directory, { latestFilename: this.latestFilename });
    for (const n of await scanCheckpointNumbers(this.directory, this.checkpointName)) if (n > this.counter) this.counter = n;
    const state = await recoverState(read, {
      directory: this.directory,
      checkpointName: this.checkpointName,
      latestFilename: this.latestFilename,
      saver: this.saver,
      clock: this.clock,
      logger: this.logger,
      repair: this.lock !== null,
      lastPreserved: this.lastPreserved,
    });
    if (state === undefined) return;
    const { latest, lastPreserved } = adoptState(state, this.nowSecs(), this.logger, this.maybeDelete);
    this.latest = latest;
    this.lastPreserved = lastPreserved;
  }

  /**
   * How recording a save at `path` changes the bookkeeping, computed on copies (adopted once the
   * save is recorded, so a failed save changes nothing): first the state naming the new
   * checkpoint and every managed one, then (after the deletions) the state without the swept
   * ones, as TensorFlow records it twice: a crash while deleting still sees the new checkpoint,
   * and leaves the swept ones listed so a later sweep deletes them. Identical states are
   * written once.
   */
  private planRecord(path: string): { recorded: { file: string; text: string }; plan: ReturnType<typeof planRetention>; swept: { file: string; text: string } } {
    const managed = new Map(this.maybeDelete);
    managed.delete(path);
    managed.set(path, this.nowSecs());
    const recorded = this.renderState(path, managed, this.lastPreserved);
    const plan = planRetention(managed, path, {
      policy: this.retentionPolicy,
      checkpointName: this.checkpointName,
      lastPreserved: this.lastPreserved,
      nowSecs: () => this.nowSecs(),
    });
    return { recorded, plan, swept: this.renderState(path, plan.managed, plan.lastPreserved) };
  }

  private renderState(latest: string, managed: ReadonlyMap<string, number>, lastPreserved: number): { file: string; text: string } {
    return renderCheckpointState(
      this.directory,
      {
        modelCheckpointPath: latest,
        allModelCheckpointPaths: [...managed.keys()],
        allModelCheckpointTimestamps: [...managed.values()],
        lastPreservedTimestamp: lastPreserved,
      },
      { latestFilename: this.latestFilename },
    );
  }

  private async deleteCheckpoint(path: string): Promise<void> {
    try {
      await this.saver.remove(path);
    } catch (e) {
      this.logger.warn(`Could not delete checkpoint ${path}: ${(e as Error).message}`, { path });
    }
  }

  /** Restore candidates, newest first: the state's latest and list, then other checkpoints of this name on disk. */
  private async candidates(): Promise<string[]> {
    const out: string[] = [];
    const add = (p: string): void => {
      if (!out.includes(p)) out.push(p);
    };
    if (this.latest !== null) add(this.latest);
    for (const p of [...this.maybeDelete.keys()].reverse()) add(p);
    for (const n of (await scanCheckpointNumbers(this.directory, this.checkpointName)).sort((a, b) => b - a)) add(join(this.directory, `${this.checkpointName}-${n}`));
    return out;
  }

  private nowSecs(): number {
    return this.clock.now() / 1000;
  }
}
