/**
 * Conversions between TensorFlow.js tensors and the library's {@link TensorValue}s (always deep
 * copies, so neither side sees the other's later writes), and the checks a restored value must
 * pass.
 *
 * @module
 */

import * as tf from "@tensorflow/tfjs";

import { InvalidArgumentError } from "../../errors.js";
import { numElements, type DType, type TensorValue } from "../../session/Tensor.js";

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** A deep copy of a tf tensor's value; `name` is for the error of an unsupported dtype. */
export const fromTf = (t: tf.Tensor, name: string): TensorValue => {
  const data = t.dataSync();
  switch (t.dtype) {
    case "float32":
      return { dtype: "float32", shape: [...t.shape], data: Float32Array.from(data as Float32Array) };
    case "int32":
      return { dtype: "int32", shape: [...t.shape], data: Int32Array.from(data as Int32Array) };
    case "bool":
      return { dtype: "bool", shape: [...t.shape], data: Uint8Array.from(data as Uint8Array) };
    default:
      throw new InvalidArgumentError(`variable "${name}" has dtype ${t.dtype}, which checkpoints cannot hold`);
  }
};

/** A new tf tensor holding a copy of `t` (the cpu backend would otherwise keep our array). */
export const toTf = (t: TensorValue): tf.Tensor => {
  switch (t.dtype) {
    case "float32":
      return tf.tensor((t.data as Float32Array).slice(), [...t.shape], "float32");
    case "int32":
      return tf.tensor((t.data as Int32Array).slice(), [...t.shape], "int32");
    case "bool":
      return tf.tensor((t.data as Uint8Array).slice(), [...t.shape], "bool");
    default:
      throw new InvalidArgumentError(`a ${t.dtype} tensor cannot be loaded into TensorFlow.js`);
  }
};

/** An int64 scalar. */
export const int64 = (n: number): TensorValue<"int64"> => ({ dtype: "int64", shape: [], data: BigInt64Array.of(BigInt(n)) });

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Throws `InvalidArgumentError` unless `t` has `dtype` and `shape` and its data fits the shape. */
export const expectLike = (t: TensorValue, dtype: DType, shape: readonly number[], name: string): void => {
  if (t.dtype !== dtype) throw new InvalidArgumentError(`Variable "${name}" is ${dtype} but the checkpoint holds ${t.dtype}.`);
  if (!sameShape(t.shape, shape)) {
    throw new InvalidArgumentError(`Variable "${name}": shape mismatch: expected [${shape.join(", ")}], got [${t.shape.join(", ")}]`);
  }
  if (t.data.length !== numElements(t.shape)) {
    throw new InvalidArgumentError(`Variable "${name}" has ${t.data.length} elements for shape [${t.shape.join(", ")}]`);
  }
};

/** The value of an int64 scalar, which must be a safe non-negative integer. */
export const int64Value = (t: TensorValue, name: string): number => {
  expectLike(t, "int64", [], name);
  const v = (t.data as BigInt64Array)[0] as bigint;
  if (v < 0n || v > BigInt(Number.MAX_SAFE_INTEGER)) throw new InvalidArgumentError(`Variable "${name}" = ${v} is out of range`);
  return Number(v);
};

/** `true` if two shapes are equal. */
export const sameShape = (a: readonly number[], b: readonly number[]): boolean => a.length === b.length && a.every((d, i) => d === b[i]);
