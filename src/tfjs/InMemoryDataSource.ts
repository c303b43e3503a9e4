/**
 * An in-memory data set served in mini-batches, epoch after epoch, reshuffled each epoch by a
 * seeded generator. Its position (epoch, offset, generator state and the epoch's permutation) is
 * a checkpointable {@link TfjsDataSource} state, so that training resumes on the exact batch.
 *
 * @example
 * ```ts
 * import { InMemoryDataSource } from "monitored-session/tfjs";
 *
 * const xs = Array.from({ length: 256 }, (_, i) => [Math.cos(i), Math.sin(i)]);
 * const ys = Array.from({ length: 256 }, (_, i) => i % 3);
 * const data = new InMemoryDataSource({ xs, ys, batchSize: 32, seed: 7 });
 * const { xs: bx, ys: by } = data.next(); // tf tensors of 32 rows
 * ```
 *
 * ## Shards
 * With `shard: { index, count }`, every rank shuffles the whole data set with the same seed and
 * takes the examples at positions `i ≡ index (mod count)` of the shuffled order: a step consumes
 * `batchSize × count` positions (the global batch), `batchSize` of them on each rank. The
 * position (epoch, offset, generator state, permutation) is the global one, the same on every
 * rank after the same number of steps, so the chief's checkpoint holds it for every shard.
 * {@link InMemoryDataSource.concatenatedShards} is the single-process reference: each of its
 * batches is the `count` shards' batches concatenated in rank order.
 *
 * @example
 * ```ts
 * import { InMemoryDataSource } from "monitored-session/tfjs";
 *
 * const xs = Array.from({ length: 96 }, (_, i) => [i]);
 * const ys = Array.from({ length: 96 }, (_, i) => i % 2);
 * const rank1 = new InMemoryDataSource({ xs, ys, batchSize: 8, seed: 3, shard: { index: 1, count: 3 } });
 * const reference = InMemoryDataSource.concatenatedShards({ xs, ys, batchSize: 8, seed: 3 }, 3); // 24 rows a batch
 * ```
 *
 * @module
 */

import * as tf from "@tensorflow/tfjs";

import { InvalidArgumentError, OutOfRangeError, ValueError } from "../errors.js";
import { numElements, tensor, type TensorValue } from "../session/Tensor.js";
import type { TfjsBatch, TfjsDataSource } from "./DataSource.js";
import { Mulberry32 } from "../util/mulberry32.js";
import { shuffledRange } from "./internal/rng.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A data set array: row-major `float32` or `int32` values whose first dimension is the example. */
export type ExampleArray = TensorValue<"float32"> | TensorValue<"int32"> | readonly number[] | readonly (readonly number[])[];

/** Options of {@link InMemoryDataSource}. */
export interface InMemoryDataSourceOptions {
  /** Inputs: one row per example (nested arrays are stored as `float32`). */
  readonly xs: ExampleArray;
  /** Targets: one row (or one label) per example (plain arrays are stored as `float32`). */
  readonly ys: ExampleArray;
  /** Examples per batch. */
  readonly batchSize: number;
  /** Reshuffle every epoch (default `true`); otherwise examples come in order. */
  readonly shuffle?: boolean;
  /** Seed of the shuffling generator (default 0). */
  readonly seed?: number;
  /** Number of passes over the data before `OutOfRangeError` (default `Infinity`). */
  readonly epochs?: number;
  /** Skip an epoch's last, smaller batch (default `false`; sharded sources must skip it, and default to `true`). */
  readonly dropRemainder?: boolean;
  /** Serve only this rank's shard of every global batch (see "Shards" above). */
  readonly shard?: InMemoryShard;
}

/** Which shard a data-parallel rank reads: its rank and the number of ranks. */
export interface InMemoryShard {
  /** This rank, `0 ≤ index < count`. */
  readonly index: number;
  /** The number of ranks (shards). */
  readonly count: number;
}

/** Marks the single-process reference: serve every shard, concatenated in rank order. */
const ALL_SHARDS = Symbol("allShards");

/** The names of an {@link InMemoryDataSource}'s position parts. */
export const IN_MEMORY_STATE_NAMES = ["epoch", "offset", "rng", "permutation"] as const;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Serves an in-memory data set in batches. State names: `epoch` (int64: the current pass, from 0),
 * `offset` (int64: index into this epoch's permutation of the next example), `rng` (int64: the
 * mulberry32 state, after this epoch's shuffle) and `permutation` (int32[n]: this epoch's order).
 */
export class InMemoryDataSource implements TfjsDataSource {
  /** The number of examples. */
  readonly size: number;
  /** Examples per `next()` (for the reference of {@link InMemoryDataSource.concatenatedShards}, every shard's). */
  readonly batchSize: number;
  /** The number of shards a step's global batch is split into (1 if unsharded). */
  readonly shardCount: number;
  /** The shards this source serves, concatenated in this order. */
  private readonly shards: readonly number[];
  /** Examples per shard and step. */
  private readonly shardBatch: number;
  private readonly xs: TensorValue<"float32"> | TensorValue<"int32">;
  private readonly ys: TensorValue<"float32"> | TensorValue<"int32">;
  private readonly shuffle: boolean;
  private readonly epochs: number;
  private readonly dropRemainder: boolean;
  private readonly rng: Mulberry32;
  private permutation: Int32Array;
  private epoch = 0;
  private offset = 0;

  /**
   * The single-process reference of `count` data-parallel ranks that each read
   * `{ ...options, shard: { index, count } }`: the same global batches, each the ranks' batches
   * concatenated in rank order (`options.batchSize × count` rows).
   */
  static concatenatedShards(options: Omit<InMemoryDataSourceOptions, "shard">, count: number): InMemoryDataSource {
    return new InMemoryDataSource({ ...options, shard: { index: 0, count }, [ALL_SHARDS]: true });
  }

  constructor(options: InMemoryDataSourceOptions & { readonly [ALL_SHARDS]?: true }) {
    this.xs = toExamples(options.xs, "xs");
    this.ys = toExamples(options.ys, "ys");
    this.size = this.xs.shape[0] as number;
    if (this.ys.shape[0] !== this.size) {
      throw new ValueError(`xs has ${this.size} examples but ys has ${String(this.ys.shape[0])}`);
    }
    if (this.size === 0) throw new ValueError("the data set is empty");
    if (!Number.isSafeInteger(options.batchSize) || options.batchSize <= 0) {
      throw new ValueError(`batchSize: expected a positive integer, got ${options.batchSize}`);
    }
    const epochs = options.epochs ?? Infinity;
    if (!(epochs === Infinity || (Number.isSafeInteger(epochs) && epochs > 0))) {
      throw new ValueError(`epochs: expected a positive integer or Infinity, got ${epochs}`);
    }
    const shard = options.shard ?? { index: 0, count: 1 };
    if (!Number.isSafeInteger(shard.count) || shard.count <= 0) {
      throw new ValueError(`shard.count: expected a positive integer (the number of ranks), got ${shard.count}`);
    }
    if (!Number.isSafeInteger(shard.index) || shard.index < 0 || shard.index >= shard.count) {
      throw new ValueError(`shard.index: expected an integer rank in [0, ${shard.count - 1}], got ${shard.index}`);
    }
    this.shardCount = shard.count;
    this.shardBatch = options.batchSize;
    this.shards = options[ALL_SHARDS] === true ? Array.from({ length: shard.count }, (_, i) => i) : [shard.index];
    this.batchSize = options.batchSize * this.shards.length;
    this.shuffle = options.shuffle ?? true;
    this.epochs = epochs;
    this.dropRemainder = options.dropRemainder ?? this.shardCount > 1;
    if (this.shardCount > 1 && !this.dropRemainder) {
      throw new ValueError(
        "dropRemainder: false cannot shard: a partial last batch would give the ranks unequal batches; drop it (dropRemainder: true) or size the data set to a multiple of batchSize × shard.count",
      );
    }
    if (this.dropRemainder && this.stride() > this.size) {
      const what = this.shardCount > 1 ? `the global batch (batchSize ${this.shardBatch} × ${this.shardCount} shards)` : `batchSize ${this.batchSize}`;
      throw new ValueError(`${what} exceeds the ${this.size} examples, and dropRemainder is set`);
    }
    this.rng = new Mulberry32(options.seed ?? 0);
    this.permutation = this.order(new Int32Array(this.size));
  }

  // -------------------------------------------------------------------------------------------
  // operations
  // -------------------------------------------------------------------------------------------

  next(): TfjsBatch {
    if (this.remaining() === 0) {
      // The epoch is used up. Check before mutating, so an exhausted source keeps throwing.
      if (this.epoch + 1 >= this.epochs) throw new OutOfRangeError("End of sequence");
      this.epoch += 1;
      this.offset = 0;
      // A new array, never one changed in place: a mark (see `mark`) keeps the old one.
      this.permutation = this.order(new Int32Array(this.size));
    }
    let rows: Int32Array;
    if (this.shardCount === 1) {
      const n = Math.min(this.batchSize, this.size - this.offset);
      rows = this.permutation.subarray(this.offset, this.offset + n);
      this.offset += n;
    } else {
      // A full global batch (dropRemainder): shard r takes positions offset + r + k·count.
      rows = new Int32Array(this.batchSize);
      let j = 0;
      for (const r of this.shards) {
        for (let k = 0; k < this.shardBatch; k++) rows[j++] = this.permutation[this.offset + r + k * this.shardCount] as number;
      }
      this.offset += this.stride();
    }
    return { xs: gather(this.xs, rows), ys: gather(this.ys, rows) };
  }

  stateNames(): readonly string[] {
    return IN_MEMORY_STATE_NAMES;
  }

  state(): Map<string, TensorValue> {
    return new Map<string, TensorValue>([
      ["epoch", tensor("int64", [], BigInt64Array.of(BigInt(this.epoch)))],
      ["offset", tensor("int64", [], BigInt64Array.of(BigInt(this.offset)))],
      ["rng", tensor("int64", [], BigInt64Array.of(BigInt(this.rng.state)))],
      ["permutation", tensor("int32", [this.size], this.permutation.slice())],
    ]);
  }

  /** The position as it is now, without a copy: the permutation is replaced, never changed in place. */
  mark(): () => void {
    const { epoch, offset, permutation } = this;
    const rng = this.rng.state;
    return () => {
      this.epoch = epoch;
      this.offset = offset;
      this.rng.state = rng;
      this.permutation = permutation;
    };
  }

  restore(state: ReadonlyMap<string, TensorValue>): void {
    for (const name of state.keys()) {
      if (!(IN_MEMORY_STATE_NAMES as readonly string[]).includes(name)) {
        throw new InvalidArgumentError(`data source state has unknown entry "${name}"`);
      }
    }
    const epoch = int64Scalar(state, "epoch", 0, Number.MAX_SAFE_INTEGER);
    const offset = int64Scalar(state, "offset", 0, this.size);
    const rng = int64Scalar(state, "rng", 0, 2 ** 32 - 1);
    const perm = state.get("permutation");
    if (perm === undefined) throw new InvalidArgumentError(`data source state lacks "permutation"`);
    if (perm.dtype !== "int32" || perm.shape.length !== 1 || perm.shape[0] !== this.size) {
      throw new InvalidArgumentError(
        `data source "permutation" must be int32[${this.size}] (the data set's size), got ${perm.dtype}[${perm.shape.join(", ")}]`,
      );
    }
    const seen = new Uint8Array(this.size);
    for (const i of perm.data as Int32Array) {
      if (i < 0 || i >= this.size || seen[i] === 1) {
        throw new InvalidArgumentError(`data source "permutation" is not a permutation of 0..${this.size - 1}`);
      }
      seen[i] = 1;
    }
    if (this.shardCount > 1 && offset % this.stride() !== 0) {
      throw new InvalidArgumentError(
        `data source "offset" ${offset} is not a multiple of the global batch ${this.stride()} (batchSize × shard.count): the position comes from another batch size or shard count`,
      );
    }
    if (epoch >= this.epochs) {
      throw new InvalidArgumentError(`data source "epoch" ${epoch} is beyond the configured ${this.epochs} epochs`);
    }
    this.epoch = epoch;
    this.offset = offset;
    this.rng.state = rng;
    this.permutation = (perm.data as Int32Array).slice();
  }

  // -------------------------------------------------------------------------------------------
  // utils
  // -------------------------------------------------------------------------------------------

  private remaining(): number {
    const left = this.size - this.offset;
    return this.dropRemainder && left < this.stride() ? 0 : left;
  }

  /** Positions of the shuffled order that one step consumes: the global batch. */
  private stride(): number {
    return this.shardBatch * this.shardCount;
  }

  private order(out: Int32Array): Int32Array {
    if (this.shuffle) return shuffledRange(out, this.rng);
    for (let i = 0; i < out.length; i++) out[i] = i;
    return out;
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const toExamples = (a: ExampleArray, what: string): TensorValue<"float32"> | TensorValue<"int32"> => {
  if (!Array.isArray(a)) {
    const t = a as TensorValue;
    if ((t.dtype !== "float32" && t.dtype !== "int32") || t.shape.length === 0) {
      throw new ValueError(`${what}: expected a float32 or int32 tensor with an example dimension, got ${t.dtype}[${t.shape.join(", ")}]`);
    }
    // Copied: the caller may reuse its arrays.
    return tensor(t.dtype, t.shape, (t.data as Float32Array).slice()) as TensorValue<"float32">;
  }
  const rows = a as readonly (number | readonly number[])[];
  if (rows.every((r) => typeof r === "number")) {
    return tensor("float32", [rows.length], Float32Array.from(rows as readonly number[]));
  }
  const width = Array.isArray(rows[0]) ? (rows[0] as readonly number[]).length : -1;
  const flat = new Float32Array(rows.length * Math.max(width, 0));
  rows.forEach((r, i) => {
    if (!Array.isArray(r) || r.length !== width || !r.every((v) => typeof v === "number")) {
      throw new ValueError(`${what}[${i}]: expected an array of ${width} numbers like ${what}[0]`);
    }
    flat.set(r as readonly number[], i * width);
  });
  return tensor("float32", [rows.length, width], flat);
};

/** The rows `rows` of `t` as a new tf tensor. */
const gather = (t: TensorValue<"float32"> | TensorValue<"int32">, rows: Int32Array): tf.Tensor => {
  const rowShape = t.shape.slice(1);
  const width = numElements(rowShape);
  const src = t.data as Float32Array | Int32Array;
  const out = t.dtype === "float32" ? new Float32Array(rows.length * width) : new Int32Array(rows.length * width);
  for (let i = 0; i < rows.length; i++) {
    const r = rows[i] as number;
    out.set(src.subarray(r * width, (r + 1) * width), i * width);
  }
  return tf.tensor(out, [rows.length, ...rowShape], t.dtype);
};

const int64Scalar = (state: ReadonlyMap<string, TensorValue>, name: string, min: number, max: number): number => {
  const t = state.get(name);
  if (t === undefined) throw new InvalidArgumentError(`data source state lacks "${name}"`);
  if (t.dtype !== "int64" || t.shape.length !== 0) {
    throw new InvalidArgumentError(`data source "${name}" must be an int64 scalar, got ${t.dtype}[${t.shape.join(", ")}]`);
  }
  const v = (t.data as BigInt64Array)[0] as bigint;
  if (v < BigInt(min) || v > BigInt(max)) {
    throw new InvalidArgumentError(`data source "${name}" = ${v} is outside [${min}, ${max}]`);
  }
  return Number(v);
};
