import { BinaryWriter } from "@bufbuild/protobuf/wire";
import { describe, expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/errors.js";
import { tensor } from "../../src/session/Tensor.js";
import { DataClass, DataType, encodeEvent, encodeSummary } from "../../src/summary/EventProto.js";
import {
  scalarValue,
  tensorSummaryValue,
  textValue,
  toTensorProto,
  writeScalarEvent,
} from "../../src/summary/summaryValues.js";
import { decodeSummary, float32At, toHex } from "./decoder.js";

const ascii = (s: string): string => Buffer.from(s, "ascii").toString("hex");

describe("scalarValue", () => {
  it("is TF2's form: rank-0 DT_FLOAT tensor_content, plugin scalars, data class SCALAR", () => {
    const [v] = decodeSummary(encodeSummary({ value: [scalarValue("accuracy", 0.99)] })).value ?? [];
    expect(v?.tag).toBe("accuracy");
    expect(v?.tensor?.dtype).toBe(DataType.DT_FLOAT);
    expect(v?.tensor?.tensorShape?.dim ?? []).toEqual([]);
    expect(float32At(v?.tensor?.tensorContent)).toBe(Math.fround(0.99));
    expect(v?.metadata?.pluginData?.pluginName).toBe("scalars");
    expect(v?.metadata?.dataClass).toBe(DataClass.DATA_CLASS_SCALAR);
  });

  it("differs from the canonical A.1e bytes only by data_class = SCALAR (20 01)", () => {
    const bytes = encodeSummary({ value: [scalarValue("accuracy", 0.99)] });
    expect(toHex(bytes)).toBe(
      `0a25 0a08${ascii("accuracy")} 420a 0801 1200 2204a4707d3f 4a0d 0a09 0a07${ascii("scalars")} 2001`.replace(/ /g, ""),
    );
  });

  it("writes the legacy simple_value on request, with display metadata only if given", () => {
    const [a, b] =
      decodeSummary(
        encodeSummary({
          value: [scalarValue("a", 1.5, { simpleValue: true }), scalarValue("b", -2, { simpleValue: true, displayName: "B" })],
        }),
      ).value ?? [];
    expect(a).toEqual({ tag: "a", simpleValue: 1.5, value: "simpleValue" });
    expect(b?.simpleValue).toBe(-2);
    expect(b?.metadata?.displayName).toBe("B");
  });

  it("writes NaN and infinities as they are", () => {
    const [n, p] = decodeSummary(encodeSummary({ value: [scalarValue("n", Number.NaN), scalarValue("p", 1e39)] })).value ?? [];
    expect(float32At(n?.tensor?.tensorContent)).toBeNaN();
    expect(float32At(p?.tensor?.tensorContent)).toBe(Number.POSITIVE_INFINITY);
  });

  it("rejects an empty tag and a non-number value", () => {
    expect(() => scalarValue("", 1)).toThrow(InvalidArgumentError);
    expect(() => scalarValue("", 1)).toThrow(/summary tag must be a non-empty string/);
    expect(() => scalarValue("x", "1" as unknown as number)).toThrow(/scalar "x": value must be a number/);
  });
});

describe("writeScalarEvent (the writer's hot path)", () => {
  it("produces exactly the bytes of the generic encoder", () => {
    const w = new BinaryWriter();
    for (const [wallTime, step, value] of [
      [1700000000.5, 0, 0],
      [1, 77, 0.99],
      [1599759586.1, -5, -1e-3],
      [2e9, 2 ** 40, Number.NaN],
    ] as const) {
      writeScalarEvent(w, wallTime, step, "loss/é", value);
      const fast = w.finish();
      const generic = encodeEvent({ wallTime, step, summary: { value: [scalarValue("loss/é", value)] } });
      expect(toHex(fast)).toBe(toHex(generic));
    }
    writeScalarEvent(w, 1, 12345678901234567n, "t", 1);
    expect(toHex(w.finish())).toBe(
      toHex(encodeEvent({ wallTime: 1, step: 12345678901234567n, summary: { value: [scalarValue("t", 1)] } })),
    );
  });
});

describe("textValue", () => {
  it("is a rank-0 DT_STRING tensor with plugin text", () => {
    const [v] = decodeSummary(encodeSummary({ value: [textValue("notes", "**hello** é")] })).value ?? [];
    expect(v?.tensor?.dtype).toBe(DataType.DT_STRING);
    expect(v?.tensor?.tensorShape?.dim ?? []).toEqual([]);
    expect(Buffer.from(v?.tensor?.stringVal?.[0] ?? []).toString("utf8")).toBe("**hello** é");
    expect(v?.metadata?.pluginData?.pluginName).toBe("text");
  });

  it("writes an array of strings as a rank-1 tensor", () => {
    const [v] = decodeSummary(encodeSummary({ value: [textValue("rows", ["a", "b", "c"])] })).value ?? [];
    expect(v?.tensor?.tensorShape?.dim).toEqual([{ size: "3" }]);
    expect(v?.tensor?.stringVal?.map((s) => Buffer.from(s).toString())).toEqual(["a", "b", "c"]);
  });
});

describe("tensorSummaryValue", () => {
  it("writes any TensorValue with the plugin metadata given", () => {
    const t = tensor("float64", [2, 2], Float64Array.of(1, 2, 3, 4.5));
    const [v] =
      decodeSummary(
        encodeSummary({
          value: [
            tensorSummaryValue("pr", t, {
              pluginName: "pr_curves",
              content: Uint8Array.of(8, 1),
              displayName: "PR",
              description: "desc",
            }),
          ],
        }),
      ).value ?? [];
    expect(v?.tensor?.dtype).toBe(DataType.DT_DOUBLE);
    expect(v?.tensor?.tensorShape?.dim).toEqual([{ size: "2" }, { size: "2" }]);
    const c = v?.tensor?.tensorContent ?? new Uint8Array();
    expect(Array.from(new Float64Array(Uint8Array.from(c).buffer))).toEqual([1, 2, 3, 4.5]);
    expect(v?.metadata?.pluginData?.pluginName).toBe("pr_curves");
    expect([...(v?.metadata?.pluginData?.content ?? [])]).toEqual([8, 1]);
    expect(v?.metadata?.dataClass).toBe(DataClass.DATA_CLASS_TENSOR);
    expect(v?.metadata?.displayName).toBe("PR");
    expect(v?.metadata?.summaryDescription).toBe("desc");
  });

  it("maps every dtype", () => {
    expect(toTensorProto(tensor("int32", [1], Int32Array.of(-1))).dtype).toBe(DataType.DT_INT32);
    expect(toTensorProto(tensor("int64", [1], BigInt64Array.of(-1n))).dtype).toBe(DataType.DT_INT64);
    expect(toTensorProto(tensor("bool", [2], Uint8Array.of(1, 0))).dtype).toBe(DataType.DT_BOOL);
    expect(toTensorProto(tensor("float32", [], Float32Array.of(1))).dtype).toBe(DataType.DT_FLOAT);
    const s = toTensorProto(tensor("string", [2], ["x", "y"]));
    expect(s.dtype).toBe(DataType.DT_STRING);
    expect(s.stringVal).toEqual(["x", "y"]);
    expect([...(toTensorProto(tensor("int64", [1], BigInt64Array.of(-2n))).tensorContent ?? [])]).toEqual([
      0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    ]);
  });

  it("requires a plugin name", () => {
    expect(() => tensorSummaryValue("t", tensor("float32", [], Float32Array.of(1)), { pluginName: "" })).toThrow(
      /tensor summary "t": pluginName must be a non-empty string/,
    );
  });
});
