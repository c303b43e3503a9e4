/**
 * The input side of the TensorFlow.js adapter: a source of `{ xs, ys }` batches whose position
 * is part of the session's checkpointed state, so that a restored session continues with exactly
 * the batch the saved one would have taken next.
 *
 * @module
 */

import type * as tf from "@tensorflow/tfjs";

import type { TensorValue } from "../session/Tensor.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Batch data: a tf tensor, or nested plain arrays / a typed array that `tf.tensor` accepts. */
export type BatchData = tf.Tensor | tf.TensorLike;

/** One batch: inputs and targets with the same leading (batch) dimension. */
export interface TfjsBatch {
  readonly xs: BatchData;
  readonly ys: BatchData;
}

/**
 * A checkpointable source of batches.
 *
 * The session takes ownership of tensors returned by {@link TfjsDataSource.next} and disposes
 * them; a source must return fresh tensors on every call.
 */
export interface TfjsDataSource {
  /** The next batch. A finite source throws `OutOfRangeError` once exhausted (and keeps throwing). */
  next(): TfjsBatch;
  /** The names of the position's parts, in a stable order (the session prefixes them with `data/`). */
  stateNames(): readonly string[];
  /** The current position as deep-copied tensors, one per name of {@link TfjsDataSource.stateNames}. */
  state(): Map<string, TensorValue>;
  /**
   * Moves to a position returned by {@link TfjsDataSource.state} (of this or an identically
   * configured source). Validates everything before changing anything; throws
   * `InvalidArgumentError` for a position that does not fit.
   */
  restore(state: ReadonlyMap<string, TensorValue>): void;
  /**
   * Optional: a cheap way back to the current position. Returns a function that moves the source
   * back to where it is now. A replica's session marks the
   * position before each step's batch and goes back when the step fails in its collective, so the
   * step runs again on the same batch. Without it the session takes {@link TfjsDataSource.state}
   * before each replicated step instead, which copies the whole position.
   */
  mark?(): () => void;
}
