/**
 * `Saver`: the seam between checkpoint management and a storage format. The manager decides
 * *when* and *which* checkpoints exist; a saver writes, reads, verifies and deletes one. The
 * default {@link BundleSaver} writes TensorFlow's V2 checkpoint format, crash-safely (see `checkpointFormat`); a
 * TensorFlow.js adapter can plug in its own.
 *
 * @example
 * ```ts
 * // @prelude docs/preludes/session.ts
 * import { BundleSaver } from "monitored-session/checkpoint";
 *
 * const saver = new BundleSaver();
 * await saver.save(session.variables, "/ckpts/model.ckpt-100", { step: 100 });
 * const { values } = await saver.restore("/ckpts/model.ckpt-100");
 * await session.variables.restore(values);
 * ```
 *
 * @module
 */

import { access } from "node:fs/promises";
import { join } from "node:path";

import { systemClock, type Clock } from "../time/Clock.js";
import { isPromiseLike } from "../util/promise.js";
import type { ObjectPaths, VariableStore } from "../session/Session.js";
import type { TensorValue } from "../session/Tensor.js";
import {
  DATA_SUFFIX,
  INDEX_SUFFIX,
  indexPath,
  readBundle,
  readCheckpointInfo,
  planBundle,
  removeBundle,
  stageBundle,
  writeBundle,
  type BundleMetadata,
  type CheckpointContents,
  type StagedBundle,
  type PlannedBundle,
} from "./checkpointFormat.js";
import { assertPlainName, assertValidPath, isStaleTemp, readdirIfExists, TEMP_MARKER, unlinkIfExists } from "./internal/files.js";
import { processTempFiles, type TempFileRegistry } from "./TempFileRegistry.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What can be saved: a session's variable store (snapshotted at once) or a snapshot. */
export type SaveSource = VariableStore | ReadonlyMap<string, TensorValue>;

/** Options of {@link Saver.save}. */
export interface SaverSaveOptions {
  /** The step to record in the checkpoint (default 0). */
  readonly step?: number;
  /**
   * The variables' TensorFlow 2 object paths (default: the store's `objectPaths()`, if the
   * values are a store that has them). With them the checkpoint carries TensorFlow 2's object
   * graph (see "TensorFlow 2 object graph" in docs/checkpoints.md).
   */
  readonly objectPaths?: ObjectPaths | undefined;
}

/**
 * Writes, reads, verifies and deletes checkpoints at a prefix. Implementations must be
 * crash-safe: after a crash at any moment, `exists(prefix)` is true only for a complete
 * checkpoint, and `restore` never returns data that fails verification.
 */
export interface Saver {
  /**
   * Writes the values at `prefix`, resolving with `prefix` once the checkpoint is durable.
   * A {@link VariableStore} is snapshotted before the first `await` (an asynchronous store's
   * snapshot is awaited first).
   */
  save(values: SaveSource, prefix: string, options?: SaverSaveOptions): Promise<string>;
  /** Reads and verifies the checkpoint at `prefix`. `NotFoundError` if absent, `DataLossError` if corrupt. */
  restore(prefix: string): Promise<CheckpointContents>;
  /** `true` if a complete checkpoint is at `prefix` (its index exists; contents not verified). */
  exists(prefix: string): Promise<boolean>;
  /** The step recorded in the checkpoint at `prefix` (reads its index and its two reserved scalars only). */
  step(prefix: string): Promise<number>;
  /** Deletes the checkpoint's files; missing files are not an error. */
  remove(prefix: string): Promise<void>;
  /**
   * Deletes leftovers of interrupted saves of checkpoints named `<basename>-*` in `dir`:
   * temporary files of dead writers and data files without an index. Resolves with the
   * removed paths.
   */
  cleanup(dir: string, basename: string): Promise<string[]>;
}

/** Options of {@link BundleSaver}. */
export interface BundleSaverOptions {
  /** Where save times come from (default the system clock). */
  readonly clock?: Clock;
  /** The files its saves are writing (default the process-wide `processTempFiles`). */
  readonly tempFiles?: TempFileRegistry | undefined;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * The default {@link Saver}: TensorFlow's V2 bundle (`.index` + `.data-00000-of-00001`), which
 * TensorFlow reads; restores either it or this library's version 1 format.
 */
export class BundleSaver implements Saver {
  private readonly clock: Clock;
  private readonly temps: TempFileRegistry;

  constructor(options: BundleSaverOptions = {}) {
    this.clock = options.clock ?? systemClock;
    this.temps = options.tempFiles ?? processTempFiles;
  }

  save(values: SaveSource, prefix: string, options: SaverSaveOptions = {}): Promise<string> {
    try {
      assertValidPath(prefix);
      const write = (snapshot: ReadonlyMap<string, TensorValue>): Promise<string> =>
        writeBundle(prefix, snapshot, this.metadata(values, options), this.temps).then(() => prefix);
      const snapshot = toSnapshot(values);
      return isPromiseLike(snapshot) ? Promise.resolve(snapshot).then(write) : write(snapshot);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /**
   * The first half of {@link save}: writes the checkpoint under temporary names without
   * making it durable or visible. `CheckpointManager` uses it to fsync the checkpoint's files
   * together with the state file's and to cover every rename with one directory fsync.
   *
   * @internal
   */
  stage(values: SaveSource, prefix: string, options: SaverSaveOptions = {}): Promise<StagedBundle> {
    try {
      assertValidPath(prefix);
      const stage = (snapshot: ReadonlyMap<string, TensorValue>): Promise<StagedBundle> =>
        stageBundle(prefix, snapshot, this.metadata(values, options), this.temps);
      const snapshot = toSnapshot(values);
      return isPromiseLike(snapshot) ? Promise.resolve(snapshot).then(stage) : stage(snapshot);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /**
   * Lays out the checkpoint of a snapshot at `prefix` without writing anything (see
   * `planBundle`): `CheckpointManager` encodes a small one in memory and commits it on its
   * writer thread. Throws `InvalidArgumentError` as {@link save} rejects.
   *
   * @internal
   */
  plan(snapshot: ReadonlyMap<string, TensorValue>, prefix: string, options: SaverSaveOptions = {}): PlannedBundle {
    return planBundle(prefix, snapshot, this.metadata(snapshot, options));
  }

  restore(prefix: string): Promise<CheckpointContents> {
    return readBundle(prefix);
  }

  /** What a save records beside the values: the step, the time, and the object paths. */
  private metadata(values: SaveSource, options: SaverSaveOptions): BundleMetadata {
    const objectPaths = options.objectPaths ?? (isVariableStore(values) ? values.objectPaths?.() : undefined);
    return { step: options.step ?? 0, createdAtMs: Math.round(this.clock.now()), objectPaths };
  }

  async exists(prefix: string): Promise<boolean> {
    assertValidPath(prefix);
    try {
      await access(indexPath(prefix));
      return true;
    } catch {
      return false;
    }
  }

  async step(prefix: string): Promise<number> {
    return (await readCheckpointInfo(prefix)).step;
  }

  remove(prefix: string): Promise<void> {
    return removeBundle(prefix);
  }

  async cleanup(dir: string, basename: string): Promise<string[]> {
    assertPlainName(basename);
    const names = await readdirIfExists(dir);
    const present = new Set(names);
    const mine = (n: string): boolean => n.startsWith(`${basename}-`);
    const removed: string[] = [];
    for (const n of names) {
      const stale =
        (mine(n) && n.includes(TEMP_MARKER) && isStaleTemp(dir, n, this.temps)) ||
        (mine(n) && n.endsWith(DATA_SUFFIX) && !present.has(`${n.slice(0, -DATA_SUFFIX.length)}${INDEX_SUFFIX}`) && !this.temps.isHeld(join(dir, n)));
      if (stale && (await unlinkIfExists(join(dir, n)))) removed.push(join(dir, n));
    }
    return removed;
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/**
 * A store's snapshot (requested now; an asynchronous store resolves it later) or the given
 * snapshot.
 */
export const toSnapshot = (values: SaveSource): ReadonlyMap<string, TensorValue> | Promise<ReadonlyMap<string, TensorValue>> =>
  isVariableStore(values) ? values.snapshot("global") : values;

/** `true` for a {@link VariableStore} (rather than a snapshot map). */
export const isVariableStore = (v: SaveSource): v is VariableStore =>
  typeof (v as VariableStore).snapshot === "function" && typeof (v as VariableStore).restore === "function";
