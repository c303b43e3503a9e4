/**
 * Keeps a {@link TfjsSession}'s replica in step with the other ranks' over a {@link Collective}
 * (synchronous data parallelism). Internal: the session calls it around each `train` step.
 *
 * - At join (the first step): the ranks exchange model signatures (every weight's name, dtype and
 *   shape, and the trainable parameter count); on a mismatch every rank raises the same
 *   `ModelMismatchError` (an `InvalidArgumentError`) naming the first differing rank and both shapes.
 * - After every `initialize()` or `restore()`: the next step first takes rank 0's (the chief's)
 *   live state (weights, optimizer slots, global step, data position), so every replica starts
 *   from the chief's values.
 * - After the collective re-formed its ring (`CollectiveReformedError`: a lost rank came back):
 *   the join again, as at the first step (signatures, then rank 0's state); the failed call
 *   applied nothing, and the session retries its step.
 * - Each step: the gradients, flattened in the fixed order of the trainable weights, the batch
 *   loss and the rank's stop vote (the collective's `stopVote`) are averaged in one all-reduce;
 *   every rank then applies the same bits, and, if any rank voted to stop, every rank learns it
 *   after the same step.
 *
 * @module
 */

import { createHash } from "node:crypto";

import * as tf from "@tensorflow/tfjs";
import * as t from "io-ts";

import { decodeOrThrow, DTypeCodec, JsonText, NonNegativeInt, Text } from "../../codec.js";
import { CollectiveReformedError, type Collective } from "../../session/Collective.js";
import { DataLossError, InvalidArgumentError, ModelMismatchError } from "../../errors.js";
import { numElements, type DType, type TensorData, type TensorValue } from "../../session/Tensor.js";
import type { ModelWeight } from "./naming.js";
import { DATA_PREFIX } from "./TfjsVariables.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The part of the session a {@link Replicas} reads and writes. */
interface ReplicaHost {
  globalStep: number;
  /** Every variable: the weights, the optimizer's slots, the global step and the data position. */
  snapshot(): Map<string, TensorValue>;
  /** Restores such a snapshot (it calls {@link Replicas.restored}). */
  restore(values: ReadonlyMap<string, TensorValue>): Promise<void>;
}

/** The averaged step: gradients as new tensors (the caller disposes them) and the global mean loss. */
interface AveragedStep {
  readonly grads: tf.NamedTensorMap;
  readonly loss: number;
}

/** Rank 0's state layout, broadcast as JSON: each variable's name, dtype and shape, in order. */
const StateLayout = JsonText.pipe(t.array(t.tuple([Text, DTypeCodec, t.array(NonNegativeInt)])), "a state layout");

/** One line of a model signature: a weight's name, a tab, its dtype and shape (or the parameter count). */
const SignatureLine = new t.Type<readonly [string, string], string, unknown>(
  "a signature line",
  (u): u is readonly [string, string] => Array.isArray(u) && u.length === 2 && u.every((x) => typeof x === "string"),
  (u, c) => {
    const parts = typeof u === "string" ? u.split("\t") : [];
    return parts.length === 2 ? t.success([parts[0] as string, parts[1] as string] as const) : t.failure(u, c, `expected "<name>\\t<dtype>[<shape>]", got ${JSON.stringify(u)}`);
  },
  (a) => a.join("\t"),
);

/** The slots after the gradients in each step's buffer. */
const LOSS_SLOT = 0;
const STOP_SLOT = 1;
const EXTRA_SLOTS = 2;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** One rank's view of the replicas: join, state from the chief, and gradient averaging. */
export class Replicas {
  private readonly signature: string;
  private readonly parameters: number;
  private joined = false;
  private synced = false;
  private broken: Error | undefined;
  /** A rank voted to stop in the last averaged step: told to the collective once the step is applied. */
  private stopAgreed = false;

  constructor(
    private readonly collective: Collective,
    weights: readonly ModelWeight[],
    private readonly trainable: readonly tf.Variable[],
  ) {
    this.parameters = trainable.reduce((n, v) => n + v.size, 0);
    this.signature = [
      ...weights.map((w) => `${w.name}\t${w.variable.dtype}[${w.variable.shape.join(", ")}]${trainable.includes(w.variable.read() as tf.Variable) ? "" : " (not trainable)"}`),
      `${PARAMETERS}\t${this.parameters}`,
    ].join("\n");
  }

  // -------------------------------------------------------------------------------------------
  // operations
  // -------------------------------------------------------------------------------------------

  /** The variables changed locally (initialize or restore): take the chief's again before the next step. */
  restored(): void {
    this.synced = false;
  }

  /** Before a step: joins (once) and, after a restore, takes rank 0's weights and global step. */
  async prepare(host: ReplicaHost): Promise<void> {
    if (this.broken !== undefined) throw this.broken;
    for (;;) {
      try {
        if (!this.joined) {
          await this.checkSignatures();
          this.joined = true;
        }
        if (!this.synced) {
          await this.takeLiveState(host);
          this.synced = true;
        }
        return;
      } catch (e) {
        if (this.reformed(e)) continue;
        this.broken = e as Error;
        throw e;
      }
    }
  }

  /**
   * Whether `e` says the collective re-formed its ring (the step applied nothing): then the next
   * {@link prepare} joins the new ring as at the first step, and the caller retries its step.
   */
  reformed(e: unknown): boolean {
    if (!(e instanceof CollectiveReformedError)) return false;
    this.joined = false;
    this.synced = false;
    this.stopAgreed = false;
    return true;
  }

  /**
   * Averages `grads` (keyed by variable name), `loss` and the ranks' stop votes in one
   * all-reduce. Every rank has the same buffer layout, with or without a vote (then 0).
   */
  async average(grads: tf.NamedTensorMap, loss: number): Promise<AveragedStep> {
    const buffer = new Float32Array(this.parameters + EXTRA_SLOTS);
    let offset = 0;
    for (const v of this.trainable) {
      // A weight without a gradient contributes zeros, and is left out of the update below.
      const g = grads[v.name];
      if (g !== undefined) buffer.set(g.dataSync() as Float32Array, offset);
      offset += v.size;
    }
    buffer[this.parameters + LOSS_SLOT] = loss;
    buffer[this.parameters + STOP_SLOT] = this.collective.stopVote?.requested === true ? 1 : 0;
    await this.collective.allReduce(buffer, "mean");
    // A mean of zeros and ones: non-zero, with the same bits on every rank, as soon as one rank voted.
    this.stopAgreed = buffer[this.parameters + STOP_SLOT] !== 0;
    const out: tf.NamedTensorMap = {};
    offset = 0;
    for (const v of this.trainable) {
      // A view, not a copy: the tensor takes the values (the buffer is not used again).
      if (grads[v.name] !== undefined) out[v.name] = tf.tensor(buffer.subarray(offset, offset + v.size), v.shape, "float32");
      offset += v.size;
    }
    return { grads: out, loss: buffer[this.parameters + LOSS_SLOT] as number };
  }

  /** The averaged step was applied (and counted): tells the collective's vote if the ranks agreed to stop. */
  applied(): void {
    if (!this.stopAgreed) return;
    this.stopAgreed = false;
    this.collective.stopVote?.agreed();
  }

  // -------------------------------------------------------------------------------------------
  // utils
  // -------------------------------------------------------------------------------------------

  /**
   * An all-gather by sum (every slot but one's own is zero, so the sum is exact): first each
   * rank's signature hash, parameter count and signature length; on a difference, the signatures
   * themselves, so that every rank can name both shapes.
   */
  private async checkSignatures(): Promise<void> {
    const { rank, size } = this.collective;
    const text = Buffer.from(this.signature, "utf8");
    const heads = new Float64Array(3 * size);
    heads.set([hash48(text), this.parameters, text.length], 3 * rank);
    await this.collective.allReduce(heads, "sum");
    const same = Array.from({ length: size }, (_, r) => heads[3 * r] === heads[0] && heads[3 * r + 1] === heads[1]).every(Boolean);
    if (same) return;

    const width = Math.max(...Array.from({ length: size }, (_, r) => heads[3 * r + 2] as number));
    const all = new Float64Array(width * size);
    all.set(text, width * rank);
    await this.collective.allReduce(all, "sum");
    const signatures = Array.from({ length: size }, (_, r) =>
      Buffer.from(Uint8Array.from(all.subarray(width * r, width * r + (heads[3 * r + 2] as number)))).toString("utf8"),
    );
    const other = signatures.findIndex((s) => s !== signatures[0]);
    const entriesOf = (r: number): SignatureEntries =>
      decodeOrThrow(t.array(SignatureLine), (signatures[r] as string).split("\n"), (problems) => new DataLossError(`the model signature of ${this.task(r)}: ${problems}`));
    throw new ModelMismatchError(
      `The replicas' models differ: ${this.task(other)} has ${describeDifference(entriesOf(other), entriesOf(0), this.task(0))}. Every worker must build the same model (same layers, shapes and dtypes).`,
    );
  }

  /**
   * Copies rank 0's whole live state (weights, optimizer slots, global step, data position) into
   * this replica: at the first join, and after the ring was re-formed (a rank may have applied
   * one step more than another, if the ring broke at its last chunk). Three broadcasts: the
   * layout's length, the layout (names, dtypes, shapes), then the values (float64 holds float32,
   * int32, bool and int64 steps and positions exactly). A data position of another shape (a
   * shard of another size) is left as it is: a data position is restored as a whole.
   */
  private async takeLiveState(host: ReplicaHost): Promise<void> {
    const root = this.collective.rank === 0;
    const mine = root ? host.snapshot() : undefined;
    const layout = mine === undefined ? new Uint8Array() : Buffer.from(JSON.stringify([...mine].map(([name, v]) => [name, v.dtype, v.shape])), "utf8");
    const length = await this.collective.broadcast(Float64Array.of(layout.length), 0);
    const layoutBuffer = await this.collective.broadcast(root ? Float64Array.from(layout) : new Float64Array(length[0] as number), 0);
    const entries = decodeOrThrow(
      StateLayout,
      Buffer.from(Uint8Array.from(layoutBuffer)).toString("utf8"),
      (problems) => new DataLossError(`the state layout broadcast by ${this.task(0)}: ${problems}`),
    );
    const total = entries.reduce((n, [, , shape]) => n + numElements(shape), 0);
    const values = new Float64Array(total);
    if (mine !== undefined) {
      let offset = 0;
      for (const v of mine.values()) {
        for (let i = 0; i < v.data.length; i++) values[offset + i] = Number(v.data[i]);
        offset += v.data.length;
      }
    }
    await this.collective.broadcast(values, 0);
    if (root) return;
    const local = host.snapshot();
    const state = new Map<string, TensorValue>();
    let offset = 0;
    let otherShard = false;
    for (const [name, dtype, shape] of entries) {
      const part = values.subarray(offset, offset + numElements(shape));
      offset += part.length;
      if (name.startsWith(DATA_PREFIX) && local.get(name)?.shape.join(",") !== shape.join(",")) otherShard = true;
      state.set(name, { dtype, shape, data: typed(dtype, part, name) } as TensorValue);
    }
    if (otherShard) for (const name of [...state.keys()]) if (name.startsWith(DATA_PREFIX)) state.delete(name);
    await host.restore(state);
  }

  private task(rank: number): string {
    const name = this.collective.tasks?.[rank];
    return name === undefined ? `rank ${rank}` : `rank ${rank} (${name})`;
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const PARAMETERS = "trainable parameters";


/** `part` as `dtype`'s storage; strings cannot travel in a numeric broadcast. */
const typed = (dtype: DType, part: Float64Array, name: string): TensorData => {
  switch (dtype) {
    case "float32":
      return Float32Array.from(part);
    case "float64":
      return Float64Array.from(part);
    case "int32":
      return Int32Array.from(part);
    case "int64":
      return BigInt64Array.from(part, (v) => BigInt(v));
    case "bool":
      return Uint8Array.from(part);
    case "string":
      throw new InvalidArgumentError(`variable "${name}" holds strings: a replica group cannot broadcast it when it re-forms`);
  }
};

/** The first 48 bits of the SHA-256 of `bytes`: an integer a float64 holds exactly. */
const hash48 = (bytes: Uint8Array): number => createHash("sha256").update(bytes).digest().readUIntBE(0, 6);

type SignatureEntries = readonly (readonly [string, string])[];

/** "model/0_dense/kernel float32[2, 4] where rank 0 has float32[2, 3]", for the first differing entry. */
const describeDifference = (mine: SignatureEntries, theirs: SignatureEntries, them: string): string => {
  const a = new Map(mine);
  const b = new Map(theirs);
  for (const name of new Set([...b.keys(), ...a.keys()])) {
    const [x, y] = [a.get(name), b.get(name)];
    if (x === y) continue;
    if (x === undefined) return `no ${name} where ${them} has ${name} ${y as string}`;
    return `${name} ${x} where ${them} has ${y ?? "none"}`;
  }
  return `another model than ${them}`;
};
