/**
 * TensorFlow's `DataType` enum (TF core/framework/types.proto) as far as a tensor bundle needs
 * it: the codes of the dtypes this library holds, both ways, and the names of the others, so
 * that a bundle holding them can be listed and its tensors refused by name.
 *
 * @module
 */

import type { DType } from "../../session/Tensor.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The `DataType` code TensorFlow stores for each dtype this library holds. */
export const TF_DATA_TYPE: Readonly<Record<DType, number>> = {
  float32: 1, // DT_FLOAT
  float64: 2, // DT_DOUBLE
  int32: 3, // DT_INT32
  string: 7, // DT_STRING
  int64: 9, // DT_INT64
  bool: 10, // DT_BOOL
};

/** Python's names (`tf.float16`...) of the `DataType` codes this library lists but cannot hold. */
const OTHER_NAMES: Readonly<Record<number, string>> = {
  4: "uint8",
  5: "int16",
  6: "int8",
  8: "complex64",
  11: "qint8",
  12: "quint8",
  13: "qint32",
  14: "bfloat16",
  15: "qint16",
  16: "quint16",
  17: "uint16",
  18: "complex128",
  19: "float16",
  20: "resource",
  21: "variant",
  22: "uint32",
  23: "uint64",
};

const BY_CODE: ReadonlyMap<number, DType> = new Map(
  Object.entries(TF_DATA_TYPE).map(([dtype, code]) => [code, dtype as DType]),
);

/** Bytes per element of the fixed-size dtypes this library holds. */
export const BYTES_PER_ELEMENT: Readonly<Record<Exclude<DType, "string">, number>> = {
  float32: 4,
  float64: 8,
  int32: 4,
  int64: 8,
  bool: 1,
};

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** The dtype of a `DataType` code, or `undefined` for one this library does not hold. */
export const dtypeOfCode = (code: number): DType | undefined => BY_CODE.get(code);

/** A `DataType` code's name as Python spells it (`float32`, `bfloat16`...), or `DataType <n>`. */
export const dataTypeName = (code: number): string => BY_CODE.get(code) ?? OTHER_NAMES[code] ?? `DataType ${code}`;

/** A copy of `bytes` with every `size`-byte element's bytes reversed (little- ↔ big-endian). */
export const swapBytes = (bytes: Uint8Array, size: number): Uint8Array => {
  const out = new Uint8Array(bytes.length);
  for (let i = 0; i < bytes.length; i += size) for (let j = 0; j < size; j++) out[i + j] = bytes[i + size - 1 - j] as number;
  return out;
};
