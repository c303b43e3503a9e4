import { describe, expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/errors.js";
import { DataClass, DataType, SessionStatus, encodeEvent, encodeSummary } from "../../src/summary/EventProto.js";
import { decodeEvent, hex, toHex } from "./decoder.js";

const ascii = (s: string): string => Buffer.from(s, "ascii").toString("hex");

// TF2 `tf.summary.scalar("accuracy", 0.99, step=77)`, byte by byte (reference A.1e).
const WALL_TIME_BYTES = hex("c4 05 b7 3d 99 d6 d7 41");
const WALL_TIME = new DataView(WALL_TIME_BYTES.buffer).getFloat64(0, true);
const ACCURACY_SUMMARY = hex(`
  0a 23
    0a 08 ${ascii("accuracy")}
    42 0a
      08 01
      12 00
      22 04 a4 70 7d 3f
    4a 0b
      0a 09 0a 07 ${ascii("scalars")}`);

const accuracyContent = (): Uint8Array => {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setFloat32(0, 0.99, true);
  return b;
};

describe("encodeEvent", () => {
  it("encodes the file_version event as 090000803899d6d7411a0d'brain.Event:2'", () => {
    expect(toHex(encodeEvent({ wallTime: 1599759586, fileVersion: "brain.Event:2" }))).toBe(
      `090000803899d6d741 1a0d ${ascii("brain.Event:2")}`.replace(/ /g, ""),
    );
  });

  it("encodes the canonical accuracy step-77 scalar event: the 37-byte summary of A.1e", () => {
    const summary = {
      value: [
        {
          tag: "accuracy",
          tensor: { dtype: DataType.DT_FLOAT, tensorShape: {}, tensorContent: accuracyContent() },
          metadata: { pluginData: { pluginName: "scalars" } },
        },
      ],
    };
    const s = encodeSummary(summary);
    expect(s.length).toBe(37);
    expect(toHex(s)).toBe(toHex(ACCURACY_SUMMARY));
    const event = encodeEvent({ wallTime: WALL_TIME, step: 77, summary });
    expect(toHex(event)).toBe(`09${toHex(WALL_TIME_BYTES)}104d2a25${toHex(ACCURACY_SUMMARY)}`);
  });

  it("encodes large and negative int64 steps exactly (decoded independently)", () => {
    const steps: (number | bigint)[] = [
      0,
      1,
      2 ** 32,
      Number.MAX_SAFE_INTEGER,
      -1,
      -(2 ** 40),
      2n ** 63n - 1n,
      -(2n ** 63n),
      12345678901234567n,
    ];
    for (const step of steps) {
      const bytes = encodeEvent({ wallTime: 1, step, sessionLog: { status: SessionStatus.START } });
      expect(decodeEvent(bytes).step ?? "0", `step ${step}`).toBe(String(step)); // proto3 omits 0
    }
    // A negative step is a 10-byte two's-complement varint.
    expect(toHex(encodeEvent({ wallTime: 0, step: -1 }))).toBe("10ffffffffffffffffff01");
  });

  it("rejects steps that are not int64 integers", () => {
    for (const step of [Number.NaN, 1.5, 2 ** 53, Number.POSITIVE_INFINITY, 2n ** 63n, -(2n ** 63n) - 1n]) {
      expect(() => encodeEvent({ wallTime: 1, step }), `step ${step}`).toThrow(InvalidArgumentError);
    }
  });

  it("writes a oneof member at its default value (simple_value 0) but omits proto3 defaults elsewhere", () => {
    const bytes = encodeSummary({ value: [{ tag: "z", simpleValue: 0 }] });
    expect(toHex(bytes)).toBe(`0a08 0a01${ascii("z")} 1500000000`.replace(/ /g, ""));
    expect(toHex(encodeEvent({ wallTime: 0, step: 0 }))).toBe("");
  });

  it("rejects a NaN or infinite wall time (rustboard drops a file at a NaN wall_time)", () => {
    expect(() => encodeEvent({ wallTime: Number.NaN })).toThrow(/Event.wall_time must be a finite number of seconds, got NaN/);
    expect(() => encodeEvent({ wallTime: Number.POSITIVE_INFINITY })).toThrow(InvalidArgumentError);
  });

  it("rejects an event with two members of the oneof set", () => {
    expect(() => encodeEvent({ wallTime: 1, fileVersion: "x", summary: { value: [] } })).toThrow(
      /Event: at most one member of the oneof may be set, got 2/,
    );
    expect(() => encodeSummary({ value: [{ tag: "t", simpleValue: 1, tensor: { dtype: 1 } }] })).toThrow(
      /Summary.Value "t": at most one member/,
    );
  });

  it("round-trips every message through the independent decoder", () => {
    const bytes = encodeEvent({
      wallTime: 1700000000.25,
      step: 3,
      summary: {
        value: [
          { tag: "s", simpleValue: 2.5, metadata: { displayName: "S", summaryDescription: "d" } },
          { tag: "i", image: { height: 2, width: 3, colorspace: 4, encodedImageString: Uint8Array.of(1, 2) } },
          {
            tag: "h",
            histo: { min: -1, max: 2, num: 3, sum: 1, sumSquares: 6, bucketLimit: [0, 2], bucket: [1, 2] },
          },
          {
            tag: "t",
            tensor: {
              dtype: DataType.DT_INT64,
              tensorShape: { dim: [{ size: 2, name: "n" }] },
              int64Val: [5n, -7],
              floatVal: [0.5],
              doubleVal: [0.25],
              intVal: [-3],
              boolVal: [true, false],
              stringVal: ["é", Uint8Array.of(0xff)],
            },
            metadata: { pluginData: { pluginName: "p", content: Uint8Array.of(8) }, dataClass: DataClass.DATA_CLASS_TENSOR },
          },
        ],
      },
      sourceMetadata: { writer: "w" },
    });
    const e = decodeEvent(bytes);
    expect(e.wallTime).toBe(1700000000.25);
    expect(e.step).toBe("3");
    expect(e.sourceMetadata?.writer).toBe("w");
    const [s, i, h, t] = e.summary?.value ?? [];
    expect(s).toMatchObject({ tag: "s", simpleValue: 2.5, metadata: { displayName: "S", summaryDescription: "d" } });
    expect(i?.image).toMatchObject({ height: 2, width: 3, colorspace: 4 });
    expect([...(i?.image?.encodedImageString ?? [])]).toEqual([1, 2]);
    expect(h?.histo).toMatchObject({ min: -1, max: 2, num: 3, sum: 1, sumSquares: 6, bucketLimit: [0, 2], bucket: [1, 2] });
    expect(t?.tensor).toMatchObject({
      dtype: DataType.DT_INT64,
      tensorShape: { dim: [{ size: "2", name: "n" }] },
      int64Val: ["5", "-7"],
      floatVal: [0.5],
      doubleVal: [0.25],
      intVal: [-3],
      boolVal: [true, false],
    });
    expect(Buffer.from(t?.tensor?.stringVal?.[0] ?? []).toString("utf8")).toBe("é");
    expect([...(t?.tensor?.stringVal?.[1] ?? [])]).toEqual([0xff]);
    expect(t?.metadata).toMatchObject({ pluginData: { pluginName: "p" }, dataClass: DataClass.DATA_CLASS_TENSOR });
  });

  it("encodes SessionLog with status and checkpoint path", () => {
    const e = decodeEvent(
      encodeEvent({ wallTime: 5, step: 10, sessionLog: { status: SessionStatus.CHECKPOINT, checkpointPath: "/ckpt/model.ckpt-10" } }),
    );
    expect(e.sessionLog).toEqual({ status: "CHECKPOINT", checkpointPath: "/ckpt/model.ckpt-10" });
  });
});
