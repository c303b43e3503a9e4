/**
 * The ring's arithmetic: `dst[i] = (src[i] + dst[i]) / divisor` over float32 or float64 chunks,
 * on a whole chunk or on its bytes as they arrive from a socket. Both give the same bits, and
 * so do the WebAssembly SIMD kernel (simdKernel.ts, used where the runtime has it) and the
 * scalar loops that stand in for it.
 *
 * @module
 */

import type { CollectiveBuffer } from "../../session/Collective.js";
import type { PayloadSink } from "./frames.js";
import { BLOCK_BYTES, loadSimdKernel, type SimdKernel } from "./simdKernel.js";

/** The SIMD kernel, or `undefined` where the runtime has no WebAssembly SIMD (the scalar loops serve). */
const kernel: SimdKernel | undefined = loadSimdKernel();

/** Whether reductions run on the WebAssembly SIMD kernel in this process. */
export const simdReduction = (): boolean => kernel !== undefined;

/**
 * `dst[i] = (src[i] + dst[i]) / divisor`, the received partial sum first: the order is fixed by
 * the ring, not by timing.
 */
export const reduceInto = (dst: CollectiveBuffer, src: CollectiveBuffer, divisor: number): void => {
  if (kernel !== undefined) reduceBytes(kernel, dst, new Uint8Array(src.buffer, src.byteOffset, src.byteLength), divisor);
  else scalarReduceInto(dst, src, divisor);
};

/**
 * `dst[i] = (dst[i] + src[i]) / divisor`: {@link reduceInto} with the operands the other way
 * round, for a rank whose own value comes first in the fixed order (the exchange of two ranks).
 * `reduceIntoDstFirst(a, b)` gives the bits `reduceInto(b, a)` would give in `b`, NaN payloads
 * included: the same loop runs on the same operands in the same order.
 */
export const reduceIntoDstFirst = (dst: CollectiveBuffer, src: CollectiveBuffer, divisor: number): void => {
  if (kernel !== undefined) reduceBytes(kernel, dst, new Uint8Array(src.buffer, src.byteOffset, src.byteLength), divisor, true);
  else scalarReduceIntoDstFirst(dst, src, divisor);
};

/** {@link reduceIntoDstFirst} with the scalar loops only (where there is no kernel): the roles swapped through a copy. */
export const scalarReduceIntoDstFirst = (dst: CollectiveBuffer, src: CollectiveBuffer, divisor: number): void => {
  const own = dst.slice();
  dst.set(src);
  scalarReduceInto(dst, own, divisor);
};

/** {@link reduceInto} with the scalar loops only: the reference the kernel is tested against. */
export const scalarReduceInto = (dst: CollectiveBuffer, src: CollectiveBuffer, divisor: number): void => {
  if (dst instanceof Float32Array) reduceFloat32(dst, 0, src as Float32Array, 0, dst.length, divisor);
  else reduceFloat64(dst, 0, src as Float64Array, 0, dst.length, divisor);
};

/**
 * Reduces a chunk into `dst` as its bytes arrive, as {@link reduceInto} would once it is whole:
 * nothing is stored but an element split between two reads (and, without the kernel, a
 * misaligned read, copied to be viewed as floats).
 */
export const streamingReducer = (dst: CollectiveBuffer, divisor: number): PayloadSink => {
  const bpe = dst.BYTES_PER_ELEMENT;
  const split = Buffer.alloc(bpe);
  let splitBytes = 0;
  let done = 0;
  const reduce = (bytes: Buffer): void => {
    const elements = bytes.length / bpe;
    const into = dst.subarray(done, done + elements);
    if (kernel !== undefined) reduceBytes(kernel, into, bytes, divisor);
    else {
      const aligned = bytes.byteOffset % bpe === 0 ? bytes : Buffer.from(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
      scalarReduceInto(into, typedView(dst, aligned), divisor);
    }
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

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/**
 * `dst = (src + dst) / divisor` on the kernel, a block at a time: both operands are copied into
 * its memory (`src` at any byte offset), the whole vectors reduced there, the last elements of a
 * block that do not fill a vector by the scalar loop on the same memory, and the block copied
 * back. `src` holds exactly `dst.length` elements. With `dstFirst`, `dst`'s bytes go where the
 * kernel reads its first operand and `src`'s where it reads and writes its second:
 * `dst = (dst + src) / divisor`, by the same loops.
 */
const reduceBytes = (k: SimdKernel, dst: CollectiveBuffer, src: Uint8Array, divisor: number, dstFirst = false): void => {
  const bpe = dst.BYTES_PER_ELEMENT;
  const f32 = dst instanceof Float32Array;
  const dstBytes = new Uint8Array(dst.buffer, dst.byteOffset, dst.byteLength);
  const total = dstBytes.length;
  const mem = k.bytes;
  for (let at = 0; at < total; at += BLOCK_BYTES) {
    const n = Math.min(BLOCK_BYTES, total - at);
    const vectors = n - (n % 16);
    mem.set((dstFirst ? dstBytes : src).subarray(at, at + n), 0);
    mem.set((dstFirst ? src : dstBytes).subarray(at, at + n), BLOCK_BYTES);
    if (vectors > 0) {
      if (divisor === 1) (f32 ? k.addF32(vectors) : k.addF64(vectors));
      else if (f32) k.addDivF32(vectors, divisor);
      else k.addDivF64(vectors, divisor);
    }
    if (vectors < n) {
      const first = vectors / bpe;
      const count = (n - vectors) / bpe;
      const d = BLOCK_BYTES / bpe;
      if (f32) reduceFloat32(k.f32, d + first, k.f32, first, count, divisor);
      else reduceFloat64(k.f64, d + first, k.f64, first, count, divisor);
    }
    dstBytes.set(mem.subarray(BLOCK_BYTES, BLOCK_BYTES + n), at);
  }
};

/** `count` elements from `d0` of `dst` and `s0` of `src`; one loop per element type keeps each monomorphic. */
const reduceFloat32 = (dst: Float32Array, d0: number, src: Float32Array, s0: number, count: number, divisor: number): void => {
  if (divisor === 1) for (let i = 0; i < count; i++) dst[d0 + i] = (src[s0 + i] as number) + (dst[d0 + i] as number);
  // Rounded to float32 after the sum, then after the division, as the two steps would be.
  else for (let i = 0; i < count; i++) dst[d0 + i] = Math.fround((src[s0 + i] as number) + (dst[d0 + i] as number)) / divisor;
};

const reduceFloat64 = (dst: Float64Array, d0: number, src: Float64Array, s0: number, count: number, divisor: number): void => {
  if (divisor === 1) for (let i = 0; i < count; i++) dst[d0 + i] = (src[s0 + i] as number) + (dst[d0 + i] as number);
  else for (let i = 0; i < count; i++) dst[d0 + i] = ((src[s0 + i] as number) + (dst[d0 + i] as number)) / divisor;
};
