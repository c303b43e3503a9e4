import { describe, expect, it } from "vitest";
import { formatG, formatValue } from "../../../hooks/internal/format.js";

describe("formatG (Python's %g)", () => {
  it.each([
    [100, "100"],
    [0.5, "0.5"],
    [1 / 3, "0.333333"],
    [1234567, "1.23457e+06"],
    [999999.5, "1e+06"],
    [123456, "123456"],
    [0.0001, "0.0001"],
    [0.00001234, "1.234e-05"],
    [-2.5, "-2.5"],
    [0, "0"],
    [1e21, "1e+21"],
    [1e-100, "1e-100"],
    [Number.NaN, "nan"],
    [Number.POSITIVE_INFINITY, "inf"],
  ])("%s → %s", (x, expected) => {
    expect(formatG(x)).toBe(expected);
  });
});

describe("formatValue", () => {
  it("renders scalars, arrays and tensors NumPy-style", () => {
    expect(formatValue(42)).toBe("42");
    expect(formatValue(10n)).toBe("10");
    expect(formatValue("abc")).toBe("abc");
    expect(formatValue(new Int32Array([1, 2, 3]))).toBe("[1 2 3]");
    expect(formatValue([0.5, [1, 2]])).toBe("[0.5 [1 2]]");
    expect(formatValue({ dtype: "float64", shape: [2, 2], data: new Float64Array([1, 2, 3, 4]) })).toBe("[[1 2] [3 4]]");
    expect(formatValue({ dtype: "int64", shape: [], data: new BigInt64Array([7n]) })).toBe("7");
    expect(formatValue({ a: 1 })).toBe('{"a":1}');
  });
});
