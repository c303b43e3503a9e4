/** Bit-level views of tensor values, for exact comparisons in tests. */
import type { TensorValue } from "../../src/session/Tensor.js";

/** Bit-level view of a snapshot, for exact comparison (NaN-safe, -0-safe). */
export const bits = (m: ReadonlyMap<string, TensorValue>): Record<string, unknown> =>
  Object.fromEntries(
    [...m].map(([k, t]) => [
      k,
      { dtype: t.dtype, shape: t.shape, bytes: Array.isArray(t.data) ? t.data : Buffer.from((t.data as Uint8Array).buffer, (t.data as Uint8Array).byteOffset, (t.data as Uint8Array).byteLength).toString("hex") },
    ]),
  );
