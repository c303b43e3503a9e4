import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { DataLossError } from "../../src/errors.js";
import { tensor } from "../../src/session/Tensor.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { EventDecoder, type SummaryEvent, tensorNumbers } from "../../src/summary/EventDecoder.js";
import { DataType, encodeEvent } from "../../src/summary/EventProto.js";
import { readRecords } from "../../src/summary/recordReader.js";
import { frameRecord, RECORD_HEADER_BYTES } from "../../src/summary/recordWriter.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { tfFirstRecord, tfScalarPayload } from "../fixtures/summary/tfWritten.js";
import { decodeEvent as independent } from "./decoder.js";

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "event-decoder-"));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

const decodeAll = (payloads: readonly Uint8Array[], run = "r"): SummaryEvent[] => {
  const d = new EventDecoder(run);
  const out: SummaryEvent[] = [];
  for (const p of payloads) d.decode(p, (e) => out.push(e));
  return out;
};

const decodeFile = (path: string): SummaryEvent[] => decodeAll(readRecords(readFileSync(path)).records.map((r) => r.payload));

const START_MS = 1_599_759_586_000;

describe("EventDecoder: golden bytes written by TensorFlow", () => {
  it("the first record of a TF file is brain.Event:2 at wall time 1599759586", () => {
    const payload = tfFirstRecord.subarray(RECORD_HEADER_BYTES, tfFirstRecord.length - 4);
    expect(decodeAll([payload])).toEqual([{ kind: "fileVersion", run: "r", wallTime: 1599759586, step: 0, version: "brain.Event:2" }]);
  });

  it("tf.summary.scalar('accuracy', 0.99, step=77) is a scalar of float32 0.99 at step 77", () => {
    const [e] = decodeAll([tfScalarPayload]);
    expect(e).toMatchObject({ kind: "scalar", tag: "accuracy", step: 77, value: Math.fround(0.99) });
    expect(e?.wallTime).toBe(independent(tfScalarPayload).wallTime); // protobufjs with the .proto schema
  });

  it("a value without metadata after the first keeps the tag's plugin (metadata only on the first value, as TF1's FileWriter writes)", () => {
    const withoutMetadata = tfScalarPayload.slice(0, tfScalarPayload.length - 13);
    withoutMetadata[12] = 0x18; // Summary length 37 - 13
    withoutMetadata[14] = 0x16; // Value length 35 - 13
    const events = decodeAll([tfScalarPayload, withoutMetadata]);
    expect(events.map((e) => e.kind)).toEqual(["scalar", "scalar"]);
    // Alone, a rank-0 float tensor without plugin metadata is a tensor, not a scalar.
    expect(decodeAll([withoutMetadata])[0]).toMatchObject({ kind: "tensor", pluginName: "" });
  });

  it("negative and large steps (10-byte two's-complement varints, up to 2^53)", () => {
    for (const step of [-1, -123456789012, 2 ** 31, 2 ** 53 - 1]) {
      const [e] = decodeAll([encodeEvent({ wallTime: 1, step: BigInt(step), sessionLog: { status: 2 } })]);
      expect(e).toMatchObject({ kind: "sessionLog", status: "STOP", step });
    }
  });

  it("bytes that are not an Event throw DataLossError", () => {
    expect(() => decodeAll([Uint8Array.of(0x2a, 0x10, 0x01)])).toThrow(DataLossError);
    expect(() => decodeAll([Uint8Array.of(0x0b)])).toThrow(/not a serialized Event/);
  });
});

describe("EventDecoder: round trips through SummaryWriter", () => {
  it("every kind the writer writes comes back typed", async () => {
    const clock = new VirtualClock({ startMs: START_MS });
    const w = new SummaryWriter(dir, { clock });
    w.addScalar("loss", 0.25, 1);
    w.addScalar("legacy", 0.5, 2, { simpleValue: true });
    w.addScalars({ "a/x": 1, "a/y": 2 }, 3);
    w.addHistogram("h", new Float32Array([1, 2, 2, 3]), 4, { buckets: 2 });
    w.addHistogram("hl", new Float32Array([1, 2, 2, 3]), 5, { buckets: 2, legacy: true });
    w.addText("notes", ["a", "b"], 6);
    const png = Uint8Array.from([137, 80, 78, 71]);
    w.addImage("img", { pixels: new Uint8Array(4), height: 2, width: 2, channels: 1 }, 7);
    w.addTensor("t", tensor("float64", [2], new Float64Array([1.5, 2.5])), 8, { pluginName: "custom" });
    w.addSessionLog("CHECKPOINT", 9, { checkpointPath: "ckpt/model-9", msg: "saved" });
    w.markRestart(10);
    await w.close();
    const events = decodeFile(w.path);
    const wallTime = START_MS / 1000;
    expect(events[0]).toEqual({ kind: "fileVersion", run: "r", wallTime, step: 0, version: "brain.Event:2" });
    expect(events.slice(1, 5)).toEqual([
      { kind: "scalar", run: "r", wallTime, step: 1, tag: "loss", value: 0.25 },
      { kind: "scalar", run: "r", wallTime, step: 2, tag: "legacy", value: 0.5 },
      { kind: "scalar", run: "r", wallTime, step: 3, tag: "a/x", value: 1 },
      { kind: "scalar", run: "r", wallTime, step: 3, tag: "a/y", value: 2 },
    ]);
    const [h, hl] = events.slice(5, 7);
    expect(h).toMatchObject({ kind: "histogram", tag: "h", step: 4 });
    expect(hl).toMatchObject({ kind: "histogram", tag: "hl", step: 5 });
    for (const x of [h, hl]) {
      if (x?.kind !== "histogram") throw new Error("not a histogram");
      expect([...x.count].reduce((a, b) => a + b, 0)).toBe(4);
      expect(x.left[0]).toBe(1);
      expect(x.right[x.right.length - 1]).toBe(3);
    }
    expect(events[7]).toEqual({ kind: "text", run: "r", wallTime, step: 6, tag: "notes", text: ["a", "b"], shape: [2] });
    const img = events[8];
    expect(img).toMatchObject({ kind: "image", tag: "img", step: 7, sample: 0, width: 2, height: 2, colorspace: 1 });
    if (img?.kind !== "image") throw new Error("not an image");
    expect([...img.encoded.subarray(0, 4)]).toEqual([...png]);
    const t = events[9];
    expect(t).toMatchObject({ kind: "tensor", tag: "t", step: 8, pluginName: "custom" });
    if (t?.kind !== "tensor") throw new Error("not a tensor");
    expect(t.tensor.dtype).toBe(DataType.DT_DOUBLE);
    expect([...tensorNumbers(t.tensor)]).toEqual([1.5, 2.5]);
    expect(events.slice(10)).toEqual([
      { kind: "sessionLog", run: "r", wallTime, step: 9, status: "CHECKPOINT", msg: "saved", checkpointPath: "ckpt/model-9" },
      { kind: "sessionLog", run: "r", wallTime, step: 10, status: "START", msg: "", checkpointPath: "" },
    ]);
  });

  it("TF2 image summaries ([width, height, png...] strings) give one event per image", () => {
    const enc = new TextEncoder();
    const payload = encodeEvent({
      wallTime: 2,
      step: 3,
      summary: {
        value: [
          {
            tag: "imgs",
            metadata: { pluginData: { pluginName: "images" } },
            tensor: { dtype: DataType.DT_STRING, tensorShape: { dim: [{ size: 4 }] }, stringVal: [enc.encode("5"), enc.encode("6"), Uint8Array.of(1), Uint8Array.of(2)] },
          },
        ],
      },
    });
    const events = decodeAll([payload]);
    expect(events.map((e) => (e.kind === "image" ? [e.sample, e.width, e.height, [...e.encoded]] : e.kind))).toEqual([
      [0, 5, 6, [1]],
      [1, 5, 6, [2]],
    ]);
  });

  it("a framed record of an Event with a double scalar tensor decodes to the double", () => {
    const content = new Uint8Array(new Float64Array([0.1]).buffer);
    const payload = encodeEvent({
      wallTime: 1,
      step: 1,
      summary: { value: [{ tag: "d", metadata: { pluginData: { pluginName: "scalars" } }, tensor: { dtype: DataType.DT_DOUBLE, tensorContent: content } }] },
    });
    const framed = frameRecord(payload);
    const [e] = decodeAll([framed.subarray(RECORD_HEADER_BYTES, framed.length - 4)]);
    expect(e).toMatchObject({ kind: "scalar", value: 0.1 });
  });
});

describe("EventDecoder: the quick form of a float scalar, and the scalar sink", () => {
  const floatScalar = (value: number, packed: boolean, tag = "x"): Uint8Array =>
    encodeEvent({
      wallTime: 2.5,
      step: 9,
      summary: {
        value: [
          {
            tag,
            metadata: { pluginData: { pluginName: "scalars" } },
            tensor: packed ? { dtype: DataType.DT_FLOAT, tensorShape: {}, floatVal: [value] } : { dtype: DataType.DT_FLOAT, tensorShape: {}, tensorContent: new Uint8Array(new Float32Array([value]).buffer) },
          },
        ],
      },
    });

  it("tensor_content and a packed float_val give the same value as the field-by-field walk, NaN, -0 and infinities included", () => {
    for (const value of [1.5, -0, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, Math.fround(-3.25e-20)]) {
      for (const packed of [false, true]) {
        const payload = floatScalar(value, packed);
        const [e] = decodeAll([payload]);
        expect(e, `${value} (${packed ? "float_val" : "tensor_content"})`).toMatchObject({ kind: "scalar", tag: "x", step: 9, wallTime: 2.5 });
        expect(Object.is((e as { value: number }).value, value)).toBe(true);
      }
    }
  });

  it("with a scalar sink, scalars go to it with no event, in order with the other events", () => {
    const d = new EventDecoder("r");
    const out: string[] = [];
    const sink = (run: string, tag: string, step: number, wallTime: number, value: number): void => {
      out.push(`${run}:${tag}@${step}=${value} (${wallTime})`);
    };
    for (const p of [floatScalar(1, false, "a"), encodeEvent({ wallTime: 3, step: 4, sessionLog: { status: 1 } }), floatScalar(2, true, "b"), floatScalar(3, false, "a")]) {
      d.decode(p, (e) => out.push(e.kind), sink);
    }
    expect(out).toEqual(["r:a@9=1 (2.5)", "sessionLog", "r:b@9=2 (2.5)", "r:a@9=3 (2.5)"]);
  });
});
