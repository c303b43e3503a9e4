import { describe, expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/errors.js";
import { fromTensorValue, numElements, tensor, toTensorValue } from "../../src/session/Tensor.js";

describe("Tensor", () => {
  it("builds tensors and checks storage and element count", () => {
    expect(tensor("float32", [2, 2], new Float32Array(4)).shape).toEqual([2, 2]);
    expect(() => tensor("float32", [3], new Float32Array(4))).toThrow(new InvalidArgumentError("tensor of shape [3] needs 3 elements, got 4"));
    expect(() => tensor("int32", [1], new Float32Array(1) as never)).toThrow(/does not match dtype int32/);
    expect(() => tensor("string", [-1], [])).toThrow(/invalid tensor shape/);
    expect(numElements([])).toBe(1);
  });

  it("converts JS values to tensors and back, bit-exactly", () => {
    const cases = [1.1, -0, Number.NaN, 7n, true, "text", new Float32Array([1.5, Number.NaN]), new Int32Array([-1]), BigInt64Array.of(2n ** 62n), ["a", "b"]] as const;
    for (const v of cases) {
      const t = toTensorValue(v);
      const back = fromTensorValue(t, v);
      expect(back).toEqual(v);
      if (typeof v === "number") expect(Object.is(back, v)).toBe(true);
    }
    expect(toTensorValue(3, "int64")).toEqual({ dtype: "int64", shape: [], data: BigInt64Array.of(3n) });
    expect(() => toTensorValue(0.5, "int64")).toThrow(/int64/);
  });

  it("refuses a tensor that does not fit the variable", () => {
    expect(() => fromTensorValue(toTensorValue(1, "float32"), 1)).toThrow(/dtype mismatch: expected float64, got float32/);
    expect(() => fromTensorValue({ dtype: "float64", shape: [2], data: new Float64Array(2) }, 1)).toThrow(/shape mismatch/);
  });
});
