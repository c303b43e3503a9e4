/**
 * The ring's arithmetic: `dst[i] = (src[i] + dst[i]) / divisor` over float32 or float64 chunks,
 * on a whole chunk or on its bytes as they arrive from a socket. Both give the same bits.
 *
 * @module
 */

import type { CollectiveBuffer } from "./Collective.js";
import type { PayloadSink } from "./frames.js";

/**
 * `dst[i] = (src[i] + dst[i]) / divisor`, the received partial sum first: the order is fixed by
 * the ring, not by timing. One loop per element type keeps each loop monomorphic.
 */
export const reduceInto = (dst: CollectiveBuffer, src: CollectiveBuffer, divisor: number): void => {
  if (dst instanceof Float32Array) reduceFloat32(dst, src as Float32Array, divisor);
  else reduceFloat64(dst, src as Float64Array, divisor);
};

const reduceFloat32 = (dst: Float32Array, src: Float32Array, divisor: number): void => {
  const n = dst.length;
  if (divisor === 1) for (let i = 0; i < n; i++) dst[i] = (src[i] as number) + (dst[i] as number);
  // Rounded to float32 after the sum, then after the division, as the two steps would be.
  else for (let i = 0; i < n; i++) dst[i] = Math.fround((src[i] as number) + (dst[i] as number)) / divisor;
};

const reduceFloat64 = (dst: Float64Array, src: Float64Array, divisor: number): void => {
  const n = dst.length;
  if (divisor === 1) for (let i = 0; i < n; i++) dst[i] = (src[i] as number) + (dst[i] as number);
  else for (let i = 0; i < n; i++) dst[i] = ((src[i] as number) + (dst[i] as number)) / divisor;
};

/**
 * Reduces a chunk into `dst` as its bytes arrive, as {@link reduceInto} would once it is whole:
 * nothing is stored but an element split between two reads (and a misaligned read, copied to be
 * viewed as floats).
 */
export const streamingReducer = (dst: CollectiveBuffer, divisor: number): PayloadSink => {
  const bpe = dst.BYTES_PER_ELEMENT;
  const split = Buffer.alloc(bpe);
  let splitBytes = 0;
  let done = 0;
  const reduce = (bytes: Buffer): void => {
    const aligned = bytes.byteOffset % bpe === 0 ? bytes : Buffer.from(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
    const elements = bytes.length / bpe;
    reduceInto(dst.subarray(done, done + elements), typedView(dst, aligned), divisor);
    done += elements;
  };
  return {
    write(piece) {
      let at = 0;
      if (splitBytes > 0) {
        at = piece.copy(split, splitBytes, 0, bpe - splitBytes);
        splitBytes += at;
        if (splitBytes < bpe) return;
        reduce(split);
        splitBytes = 0;
      }
      const whole = piece.length - at - ((piece.length - at) % bpe);
      if (whole > 0) reduce(piece.subarray(at, at + whole));
      splitBytes = piece.copy(split, 0, at + whole);
    },
  };
};

/** `payload` viewed as elements of `like`'s type (its byte offset must be aligned). */
export const typedView = (like: CollectiveBuffer, payload: Buffer): CollectiveBuffer =>
  like instanceof Float32Array ? new Float32Array(payload.buffer, payload.byteOffset, payload.length / 4) : new Float64Array(payload.buffer, payload.byteOffset, payload.length / 8);
