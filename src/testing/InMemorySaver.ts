/**
 * `InMemorySaver`: a checkpoint {@link Saver} that keeps checkpoints in memory, so a test of
 * save cadence, retention or restore needs no checkpoint files. It copies the values at save
 * time (a later change to the session does not reach a saved checkpoint), records each save,
 * and can mark a checkpoint corrupt to exercise a fallback to an older one.
 *
 * A `CheckpointManager` given this saver still keeps its `checkpoint` state file and its lock
 * in its directory; only the checkpoints themselves stay in memory.
 *
 * @example
 * ```ts
 * import { Graph } from "monitored-session";
 * import { InMemorySaver } from "monitored-session/testing";
 *
 * const graph = new Graph();
 * graph.variable("w", 1.5);
 * const session = graph.session();
 * await session.variables.initialize();
 *
 * const saver = new InMemorySaver();
 * await saver.save(session.variables, "/ckpts/model.ckpt-1", { step: 1 });
 * saver.prefixes(); // ["/ckpts/model.ckpt-1"]
 * const { step, values } = await saver.restore("/ckpts/model.ckpt-1");
 * ```
 *
 * @module
 */

import { posix } from "node:path";

import type { CheckpointContents } from "../checkpoint/checkpointFormat.js";
import { toSnapshot, type SaveSource, type Saver, type SaverSaveOptions } from "../checkpoint/Saver.js";
import { systemClock, type Clock } from "../time/Clock.js";
import { DataLossError, InvalidArgumentError, NotFoundError } from "../errors.js";
import { isPromiseLike } from "../util/promise.js";
import type { TensorValue } from "../session/Tensor.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link InMemorySaver}. */
export interface InMemorySaverOptions {
  /** Where save times come from (default the system clock; pass the test's `VirtualClock`). */
  readonly clock?: Clock;
}

/** One call to {@link InMemorySaver.save} that completed. */
export interface InMemorySave {
  readonly prefix: string;
  readonly step: number;
}

interface Stored {
  readonly contents: CheckpointContents;
  corrupt: boolean;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** A {@link Saver} whose checkpoints live in memory, keyed by prefix. */
export class InMemorySaver implements Saver {
  private readonly clock: Clock;
  private readonly stored = new Map<string, Stored>();
  /** Every completed save, oldest first (removed checkpoints included). */
  readonly saves: InMemorySave[] = [];

  constructor(options: InMemorySaverOptions = {}) {
    this.clock = options.clock ?? systemClock;
  }

  save(values: SaveSource, prefix: string, options: SaverSaveOptions = {}): Promise<string> {
    try {
      checkPrefix(prefix);
      // Snapshot and copy now, as a real save does before its first await (an asynchronous
      // store's snapshot is awaited first).
      const keep = (snapshot: ReadonlyMap<string, TensorValue>): string => {
        const copy = new Map<string, TensorValue>();
        for (const [name, value] of snapshot) copy.set(name, structuredClone(value));
        const step = options.step ?? 0;
        this.stored.set(prefix, { contents: { step, createdAtMs: Math.round(this.clock.now()), values: copy }, corrupt: false });
        this.saves.push({ prefix, step });
        return prefix;
      };
      const snapshot = toSnapshot(values);
      return isPromiseLike(snapshot) ? Promise.resolve(snapshot).then(keep) : Promise.resolve(keep(snapshot));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  async restore(prefix: string): Promise<CheckpointContents> {
    const s = this.get(prefix);
    if (s.corrupt) throw new DataLossError(`Checkpoint ${prefix} is corrupt (marked by InMemorySaver.corrupt)`);
    const values = new Map<string, TensorValue>();
    for (const [name, value] of s.contents.values) values.set(name, structuredClone(value));
    return { step: s.contents.step, createdAtMs: s.contents.createdAtMs, values };
  }

  async exists(prefix: string): Promise<boolean> {
    checkPrefix(prefix);
    return this.stored.has(prefix);
  }

  async step(prefix: string): Promise<number> {
    return this.get(prefix).contents.step;
  }

  async remove(prefix: string): Promise<void> {
    this.stored.delete(prefix);
  }

  /** Nothing is ever left half-written in memory: removes nothing. */
  async cleanup(_dir: string, _basename: string): Promise<string[]> {
    return [];
  }

  // -------------------------------------------------------------------------------------------
  // test helpers
  // -------------------------------------------------------------------------------------------

  /** The prefixes of the checkpoints held now, in save order. */
  prefixes(): string[] {
    return [...this.stored.keys()];
  }

  /** Makes the next restores of `prefix` fail with `DataLossError`, as a damaged file would. */
  corrupt(prefix: string): void {
    this.get(prefix).corrupt = true;
  }

  private get(prefix: string): Stored {
    checkPrefix(prefix);
    const s = this.stored.get(prefix);
    if (s === undefined) throw new NotFoundError(`No checkpoint at ${prefix} in this InMemorySaver (held: ${this.prefixes().join(", ") || "none"})`);
    return s;
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const checkPrefix = (prefix: string): void => {
  if (prefix.length === 0 || prefix.includes("\0") || posix.basename(prefix) === "") {
    throw new InvalidArgumentError(`Checkpoint prefix ${JSON.stringify(prefix)} is not a path to a file: pass e.g. "/ckpts/model.ckpt-1"`);
  }
};
