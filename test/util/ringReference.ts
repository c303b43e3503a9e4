/**
 * What a ring all-reduce must produce, computed independently of the transport: segment s of n
 * (elements floor(s·len/n) to floor((s+1)·len/n)) is summed starting at rank s, in ring order,
 * rounding to the buffer's precision after every addition; a mean divides that sum by n once.
 */

import { createHash } from "node:crypto";

type Floats = Float32Array | Float64Array;

export const ringReference = <B extends Floats>(inputs: readonly B[], op: "sum" | "mean"): B => {
  const n = inputs.length;
  const first = inputs[0] as B;
  const out = first.slice() as B;
  const len = first.length;
  for (let s = 0; s < n; s++) {
    for (let i = Math.floor((s * len) / n); i < Math.floor(((s + 1) * len) / n); i++) {
      let acc = (inputs[s] as B)[i] as number;
      for (let j = 1; j < n; j++) {
        out[i] = acc + ((inputs[(s + j) % n] as B)[i] as number);
        acc = out[i] as number; // rounded to the buffer's precision, as the ring stores it
      }
      if (op === "mean") out[i] = acc / n;
      else out[i] = acc;
    }
  }
  return out;
};

/** Rank `rank`'s inputs one value at a time: the values {@link rankInput} stores, before rounding to the buffer's type. */
const rankInputStream = (rank: number, salt = 0): (() => number) => {
  let state = (0x9e3779b9 ^ (rank * 0x85ebca6b) ^ salt) >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return ((state / 2 ** 32) - 0.5) * 10 ** ((state >>> 28) % 7);
  };
};

/** Deterministic inputs of mixed magnitudes (so that the order of additions shows in the bits). */
export const rankInput = <B extends Floats>(Type: new (n: number) => B, length: number, rank: number, salt = 0): B => {
  const out = new Type(length);
  const next = rankInputStream(rank, salt);
  for (let i = 0; i < length; i++) out[i] = next();
  return out;
};

/**
 * The sha256 of {@link ringReference} over `size` ranks' float32 {@link rankInput}s, computed a
 * block at a time: for buffers too big to hold every rank's input in one process (64 MB × 4).
 */
export const ringReferenceSha256 = (size: number, length: number, salt: number, op: "sum" | "mean"): string => {
  const inputs = Array.from({ length: size }, (_, r) => rankInputStream(r, salt));
  const values = new Float32Array(size);
  const block = new Float32Array(64 * 1024);
  const hash = createHash("sha256");
  let segment = 0;
  for (let start = 0; start < length; start += block.length) {
    const n = Math.min(block.length, length - start);
    for (let k = 0; k < n; k++) {
      const i = start + k;
      for (let r = 0; r < size; r++) values[r] = (inputs[r] as () => number)();
      while (i >= Math.floor(((segment + 1) * length) / size)) segment++;
      // Segment s is summed from rank s on, in ring order, rounded to float32 after every addition.
      let acc = values[segment] as number;
      for (let j = 1; j < size; j++) acc = Math.fround(acc + (values[(segment + j) % size] as number));
      block[k] = op === "mean" ? acc / size : acc;
    }
    hash.update(Buffer.from(block.buffer, 0, n * 4));
  }
  return hash.digest("hex");
};
