/**
 * What a ring all-reduce must produce, computed independently of the transport: segment s of n
 * (elements floor(s·len/n) to floor((s+1)·len/n)) is summed starting at rank s, in ring order,
 * rounding to the buffer's precision after every addition; a mean divides that sum by n once.
 */

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

/** Deterministic inputs of mixed magnitudes (so that the order of additions shows in the bits). */
export const rankInput = <B extends Floats>(Type: new (n: number) => B, length: number, rank: number, salt = 0): B => {
  const out = new Type(length);
  let state = (0x9e3779b9 ^ (rank * 0x85ebca6b) ^ salt) >>> 0;
  for (let i = 0; i < length; i++) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    out[i] = ((state / 2 ** 32) - 0.5) * 10 ** ((state >>> 28) % 7);
  }
  return out;
};
