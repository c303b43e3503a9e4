/**
 * Shuffling for the in-memory data source, with a {@link Mulberry32} generator whose state a
 * checkpoint saves. Internal.
 *
 * @module
 */

import type { Mulberry32 } from "../../util/mulberry32.js";

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Fills `out` with a uniformly random permutation of 0..n-1 (Fisher–Yates from the identity). */
export const shuffledRange = (out: Int32Array, rng: Mulberry32): Int32Array => {
  for (let i = 0; i < out.length; i++) out[i] = i;
  for (let i = out.length - 1; i > 0; i--) {
    const j = rng.nextInt(i + 1);
    const tmp = out[i] as number;
    out[i] = out[j] as number;
    out[j] = tmp;
  }
  return out;
};
