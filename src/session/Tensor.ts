/**
 * Plain tensor values: a dtype, a shape and little-endian-ready typed data. This is the currency
 * between sessions, savers and summary writers, so that a plain-TypeScript graph and the
 * TensorFlow.js adapter checkpoint through the same code.
 *
 * @module
 */

import { InvalidArgumentError } from "../errors.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Element types a tensor can hold (TensorFlow's names). */
export type DType = "float32" | "float64" | "int32" | "int64" | "bool" | "string";

/** The storage for each dtype. `bool` is one byte per element (0 or 1). */
export interface TensorDataMap {
  float32: Float32Array;
  float64: Float64Array;
  int32: Int32Array;
  int64: BigInt64Array;
  bool: Uint8Array;
  string: readonly string[];
}

/** The storage of any dtype. */
export type TensorData = TensorDataMap[DType];

/** A dense tensor: row-major `data` of `dtype` with `shape` (`[]` for a scalar). */
export interface TensorValue<D extends DType = DType> {
  readonly dtype: D;
  readonly shape: readonly number[];
  readonly data: TensorDataMap[D];
}

/**
 * What a variable may hold: a JS scalar, a typed array (a 1-D tensor), a string array, or a
 * full {@link TensorValue}. {@link toTensorValue} and {@link fromTensorValue} convert.
 */
export type VariableValue =
  | number
  | bigint
  | boolean
  | string
  | Float32Array
  | Float64Array
  | Int32Array
  | BigInt64Array
  | Uint8Array
  | readonly string[]
  | TensorValue;

/** All supported dtypes. */
export const DTYPES: readonly DType[] = ["float32", "float64", "int32", "int64", "bool", "string"];

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Builds a tensor, checking that `data` has the dtype's storage and as many elements as `shape`.
 *
 * @example
 * ```ts
 * import { tensor } from "monitored-session";
 *
 * const w = tensor("float32", [2, 2], new Float32Array([1, 2, 3, 4]));
 * ```
 */
export const tensor = <D extends DType>(
  dtype: D,
  shape: readonly number[],
  data: TensorDataMap[D],
): TensorValue<D> => {
  for (const d of shape) {
    if (!Number.isInteger(d) || d < 0) {
      throw new InvalidArgumentError(`invalid tensor shape [${shape.join(", ")}]`);
    }
  }
  if (!isStorageOf(dtype, data)) {
    throw new InvalidArgumentError(`tensor data does not match dtype ${dtype}`);
  }
  const n = numElements(shape);
  if (data.length !== n) {
    throw new InvalidArgumentError(
      `tensor of shape [${shape.join(", ")}] needs ${n} elements, got ${data.length}`,
    );
  }
  return { dtype, shape: [...shape], data };
};

/** A scalar tensor. */
export const scalar = (value: number, dtype: "float32" | "float64" | "int32" | "int64" = "float64"): TensorValue =>
  toTensorValue(value, dtype);

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Converts a variable value to a tensor. Scalars become rank-0 tensors of `dtype` (numbers
 * default to `float64`, which round-trips a JS number bit-exactly); typed arrays become 1-D.
 */
export const toTensorValue = (value: VariableValue, dtype?: DType): TensorValue => {
  if (isTensorValue(value)) return value;
  if (typeof value === "number") {
    const dt = dtype ?? "float64";
    switch (dt) {
      case "float32":
        return { dtype: dt, shape: [], data: Float32Array.of(value) };
      case "float64":
        return { dtype: dt, shape: [], data: Float64Array.of(value) };
      case "int32":
        return { dtype: dt, shape: [], data: Int32Array.of(value) };
      case "int64":
        if (!Number.isSafeInteger(value)) {
          throw new InvalidArgumentError(`${value} is not an integer that int64 can hold exactly`);
        }
        return { dtype: dt, shape: [], data: BigInt64Array.of(BigInt(value)) };
      case "bool":
        return { dtype: dt, shape: [], data: Uint8Array.of(value === 0 ? 0 : 1) };
      case "string":
        return { dtype: dt, shape: [], data: [String(value)] };
    }
  }
  if (typeof value === "bigint") return { dtype: "int64", shape: [], data: BigInt64Array.of(value) };
  if (typeof value === "boolean") return { dtype: "bool", shape: [], data: Uint8Array.of(value ? 1 : 0) };
  if (typeof value === "string") return { dtype: "string", shape: [], data: [value] };
  if (value instanceof Float32Array) return { dtype: "float32", shape: [value.length], data: value.slice() };
  if (value instanceof Float64Array) return { dtype: "float64", shape: [value.length], data: value.slice() };
  if (value instanceof Int32Array) return { dtype: "int32", shape: [value.length], data: value.slice() };
  if (value instanceof BigInt64Array) return { dtype: "int64", shape: [value.length], data: value.slice() };
  if (value instanceof Uint8Array) return { dtype: "bool", shape: [value.length], data: value.slice() };
  return { dtype: "string", shape: [value.length], data: [...value] };
};

/**
 * Like {@link toTensorValue}, but typed arrays are wrapped, not copied: the tensor shares the
 * array's memory. For values that are immutable by contract (a `Graph` variable's value), this
 * makes a snapshot free.
 */
export const tensorView = (value: VariableValue, dtype?: DType): TensorValue => {
  if (isTensorValue(value)) return value;
  if (value instanceof Float32Array) return { dtype: "float32", shape: [value.length], data: value };
  if (value instanceof Float64Array) return { dtype: "float64", shape: [value.length], data: value };
  if (value instanceof Int32Array) return { dtype: "int32", shape: [value.length], data: value };
  if (value instanceof BigInt64Array) return { dtype: "int64", shape: [value.length], data: value };
  if (value instanceof Uint8Array) return { dtype: "bool", shape: [value.length], data: value };
  return toTensorValue(value, dtype);
};

/**
 * Converts a tensor back to the JS form of `like` (the variable's current or initial value):
 * a number for a numeric scalar, a typed array for a 1-D tensor, or the tensor itself.
 * `dtype` is the variable's declared dtype when `like` is a JS number stored as another type
 * (an `int64` global step, say).
 * Throws `InvalidArgumentError` if the dtype or shape do not fit `like`.
 */
export const fromTensorValue = (t: TensorValue, like: VariableValue, dtype?: DType): VariableValue => {
  const expected = toTensorValue(like, isTensorValue(like) ? undefined : (dtype ?? inferDType(like)));
  if (t.dtype !== expected.dtype) {
    throw new InvalidArgumentError(`dtype mismatch: expected ${expected.dtype}, got ${t.dtype}`);
  }
  if (isTensorValue(like)) {
    if (!sameShape(t.shape, like.shape)) throw shapeMismatch(like.shape, t.shape);
    return copyTensor(t);
  }
  if (!sameShape(t.shape, expected.shape)) {
    // Typed arrays may change length; scalars may not.
    if (expected.shape.length !== 1 || t.shape.length !== 1) throw shapeMismatch(expected.shape, t.shape);
  }
  if (typeof like === "number") {
    const v = t.data[0];
    return typeof v === "bigint" ? Number(v) : Number(v);
  }
  if (typeof like === "bigint") return t.data[0] as bigint;
  if (typeof like === "boolean") return t.data[0] === 1;
  if (typeof like === "string") return t.data[0] as string;
  return Array.isArray(t.data) ? [...(t.data as readonly string[])] : (t.data as Exclude<TensorData, readonly string[]>).slice();
};

/** A deep copy (the data buffer is copied). */
export const copyTensor = <D extends DType>(t: TensorValue<D>): TensorValue<D> => ({
  dtype: t.dtype,
  shape: [...t.shape],
  data: (Array.isArray(t.data) ? [...t.data] : (t.data as Float32Array).slice()) as TensorDataMap[D],
});

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** The number of elements of a shape (1 for a scalar). */
export const numElements = (shape: readonly number[]): number => shape.reduce((a, b) => a * b, 1);

/** `true` if `v` is a {@link TensorValue}. */
export const isTensorValue = (v: unknown): v is TensorValue =>
  typeof v === "object" && v !== null && "dtype" in v && "shape" in v && "data" in v;

/** The dtype a JS value is stored as by default. */
export const inferDType = (v: VariableValue): DType => {
  if (isTensorValue(v)) return v.dtype;
  return toTensorValue(v).dtype;
};

const sameShape = (a: readonly number[], b: readonly number[]): boolean =>
  a.length === b.length && a.every((d, i) => d === b[i]);

const shapeMismatch = (want: readonly number[], got: readonly number[]) =>
  new InvalidArgumentError(`shape mismatch: expected [${want.join(", ")}], got [${got.join(", ")}]`);

const isStorageOf = (dtype: DType, data: unknown): boolean => {
  switch (dtype) {
    case "float32":
      return data instanceof Float32Array;
    case "float64":
      return data instanceof Float64Array;
    case "int32":
      return data instanceof Int32Array;
    case "int64":
      return data instanceof BigInt64Array;
    case "bool":
      return data instanceof Uint8Array;
    case "string":
      return Array.isArray(data) && data.every((s) => typeof s === "string");
  }
};
