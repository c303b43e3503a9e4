/**
 * `decodeSummary`: a serialized `Summary` protocol buffer (what TensorFlow's summary ops
 * return and `SerializeToString` gives) back into the {@link Summary} model the writer takes,
 * so that `Supervisor.summaryComputed` accepts bytes as TensorFlow's `summary_computed` does.
 * Unknown fields are skipped, as protobuf readers do; anything that is not a well-formed
 * `Summary` throws `InvalidArgumentError`. The message decoders are shared with the event-file
 * reader (`EventDecoder`), which wraps their errors in its own.
 *
 * @module
 */

import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";

import { InvalidArgumentError } from "../errors.js";
import type {
  Colorspace,
  DataClass,
  DataType,
  HistogramProto,
  Int64,
  PluginData,
  Summary,
  SummaryAudio,
  SummaryImage,
  SummaryMetadata,
  SummaryValue,
  TensorProto,
  TensorShapeDim,
  TensorShapeProto,
} from "./EventProto.js";

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Decodes a serialized `Summary`. Throws `InvalidArgumentError` for bytes that are not one. */
export const decodeSummary = (bytes: Uint8Array): Summary => {
  try {
    const value: SummaryValue[] = [];
    fields(bytes, (f, wire, r) => {
      if (f !== 1) return false;
      expectWire("Summary.value", wire, WireType.LengthDelimited);
      value.push(summaryValue(r.bytes()));
      return true;
    });
    return { value };
  } catch (e) {
    throw new InvalidArgumentError(`summaryComputed: the bytes are not a serialized Summary (${e instanceof Error ? e.message : String(e)})`);
  }
};

/**
 * Decodes a serialized `Summary.Value`. Throws a plain `Error` naming the field for bytes that
 * are not one (callers wrap it in their own error).
 */
export const decodeSummaryValue = (bytes: Uint8Array): SummaryValue => summaryValue(bytes);

/** Decodes a serialized `SummaryMetadata`; throws like {@link decodeSummaryValue}. */
export const decodeSummaryMetadata = (bytes: Uint8Array): SummaryMetadata => metadata(bytes);

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/** Reads each field of a message; `read` returns `false` for a field it does not know (skipped). */
export const fields = (bytes: Uint8Array, read: (field: number, wire: WireType, r: BinaryReader) => boolean): void => {
  const r = new BinaryReader(bytes);
  while (r.pos < r.len) {
    const [f, wire] = r.tag();
    if (!read(f, wire, r)) r.skip(wire, f);
  }
};

/** Throws (a plain `Error`; the entry points wrap it) unless a field has the wire type its schema says. */
export const expectWire = (what: string, got: WireType, want: WireType): void => {
  if (got !== want) throw new Error(`${what} has wire type ${got}, expected ${want}`);
};

/** A repeated scalar field, packed (one length-delimited run) or not (one value per tag). */
const repeated = <T>(r: BinaryReader, wire: WireType, scalar: WireType, read: (r: BinaryReader) => T, out: T[]): void => {
  if (wire !== WireType.LengthDelimited) {
    expectWire("a repeated field", wire, scalar);
    out.push(read(r));
    return;
  }
  const inner = new BinaryReader(r.bytes());
  while (inner.pos < inner.len) out.push(read(inner));
};

const int64 = (r: BinaryReader): Int64 => BigInt(r.int64());

const summaryValue = (bytes: Uint8Array): SummaryValue => {
  const v: Mutable<SummaryValue> = { tag: "" };
  fields(bytes, (f, wire, r) => {
    switch (f) {
      case 1:
        expectWire("Summary.Value.tag", wire, WireType.LengthDelimited);
        v.tag = r.string();
        return true;
      case 2:
        expectWire("Summary.Value.simple_value", wire, WireType.Bit32);
        v.simpleValue = r.float();
        return true;
      case 3:
        expectWire("Summary.Value.obsolete_old_style_histogram", wire, WireType.LengthDelimited);
        v.obsoleteOldStyleHistogram = r.bytes();
        return true;
      case 4:
        expectWire("Summary.Value.image", wire, WireType.LengthDelimited);
        v.image = image(r.bytes());
        return true;
      case 5:
        expectWire("Summary.Value.histo", wire, WireType.LengthDelimited);
        v.histo = histogram(r.bytes());
        return true;
      case 6:
        expectWire("Summary.Value.audio", wire, WireType.LengthDelimited);
        v.audio = audio(r.bytes());
        return true;
      case 8:
        expectWire("Summary.Value.tensor", wire, WireType.LengthDelimited);
        v.tensor = tensor(r.bytes());
        return true;
      case 9:
        expectWire("Summary.Value.metadata", wire, WireType.LengthDelimited);
        v.metadata = metadata(r.bytes());
        return true;
      default:
        return false; // node_name (7) and fields newer than this reader
    }
  });
  return v;
};

const metadata = (bytes: Uint8Array): SummaryMetadata => {
  const m: Mutable<SummaryMetadata> = {};
  fields(bytes, (f, wire, r) => {
    if (f === 4) {
      expectWire("SummaryMetadata.data_class", wire, WireType.Varint);
      m.dataClass = r.uint32() as DataClass;
      return true;
    }
    if (f < 1 || f > 3) return false;
    expectWire("SummaryMetadata", wire, WireType.LengthDelimited);
    if (f === 1) m.pluginData = pluginData(r.bytes());
    else if (f === 2) m.displayName = r.string();
    else m.summaryDescription = r.string();
    return true;
  });
  return m;
};

const pluginData = (bytes: Uint8Array): PluginData => {
  let pluginName = "";
  let content: Uint8Array | undefined;
  fields(bytes, (f, wire, r) => {
    if (f !== 1 && f !== 2) return false;
    expectWire("SummaryMetadata.PluginData", wire, WireType.LengthDelimited);
    if (f === 1) pluginName = r.string();
    else content = r.bytes();
    return true;
  });
  return content === undefined ? { pluginName } : { pluginName, content };
};

const image = (bytes: Uint8Array): SummaryImage => {
  const img: { height: number; width: number; colorspace: number; encodedImageString: Uint8Array } = { height: 0, width: 0, colorspace: 0, encodedImageString: new Uint8Array(0) };
  fields(bytes, (f, wire, r) => {
    if (f === 4) {
      expectWire("Summary.Image.encoded_image_string", wire, WireType.LengthDelimited);
      img.encodedImageString = r.bytes();
      return true;
    }
    if (f < 1 || f > 3) return false;
    expectWire("Summary.Image", wire, WireType.Varint);
    const n = r.int32();
    if (f === 1) img.height = n;
    else if (f === 2) img.width = n;
    else img.colorspace = n;
    return true;
  });
  return { ...img, colorspace: img.colorspace as Colorspace };
};

const audio = (bytes: Uint8Array): SummaryAudio => {
  const a: Mutable<SummaryAudio> = { sampleRate: 0, numChannels: 0n, lengthFrames: 0n, encodedAudioString: new Uint8Array(0), contentType: "" };
  fields(bytes, (f, wire, r) => {
    switch (f) {
      case 1:
        expectWire("Summary.Audio.sample_rate", wire, WireType.Bit32);
        a.sampleRate = r.float();
        return true;
      case 2:
      case 3:
        expectWire("Summary.Audio", wire, WireType.Varint);
        if (f === 2) a.numChannels = int64(r);
        else a.lengthFrames = int64(r);
        return true;
      case 4:
        expectWire("Summary.Audio.encoded_audio_string", wire, WireType.LengthDelimited);
        a.encodedAudioString = r.bytes();
        return true;
      case 5:
        expectWire("Summary.Audio.content_type", wire, WireType.LengthDelimited);
        a.contentType = r.string();
        return true;
      default:
        return false;
    }
  });
  return a;
};

const histogram = (bytes: Uint8Array): HistogramProto => {
  const h = { min: 0, max: 0, num: 0, sum: 0, sumSquares: 0 };
  const keys = ["min", "max", "num", "sum", "sumSquares"] as const;
  const bucketLimit: number[] = [];
  const bucket: number[] = [];
  fields(bytes, (f, wire, r) => {
    if (f >= 1 && f <= 5) {
      expectWire(`HistogramProto.${keys[f - 1] as string}`, wire, WireType.Bit64);
      h[keys[f - 1] as (typeof keys)[number]] = r.double();
      return true;
    }
    if (f !== 6 && f !== 7) return false;
    repeated(r, wire, WireType.Bit64, (x) => x.double(), f === 6 ? bucketLimit : bucket);
    return true;
  });
  return { ...h, bucketLimit, bucket };
};

const tensor = (bytes: Uint8Array): TensorProto => {
  const t: Mutable<TensorProto> = { dtype: 0 };
  const floatVal: number[] = [];
  const doubleVal: number[] = [];
  const intVal: number[] = [];
  const stringVal: Uint8Array[] = [];
  const int64Val: Int64[] = [];
  const boolVal: boolean[] = [];
  fields(bytes, (f, wire, r) => {
    switch (f) {
      case 1:
        expectWire("TensorProto.dtype", wire, WireType.Varint);
        t.dtype = r.uint32() as DataType;
        return true;
      case 2:
        expectWire("TensorProto.tensor_shape", wire, WireType.LengthDelimited);
        t.tensorShape = shape(r.bytes());
        return true;
      case 3:
        expectWire("TensorProto.version_number", wire, WireType.Varint);
        t.versionNumber = r.int32();
        return true;
      case 4:
        expectWire("TensorProto.tensor_content", wire, WireType.LengthDelimited);
        t.tensorContent = r.bytes();
        return true;
      case 5:
        repeated(r, wire, WireType.Bit32, (x) => x.float(), floatVal);
        return true;
      case 6:
        repeated(r, wire, WireType.Bit64, (x) => x.double(), doubleVal);
        return true;
      case 7:
        repeated(r, wire, WireType.Varint, (x) => x.int32(), intVal);
        return true;
      case 8:
        expectWire("TensorProto.string_val", wire, WireType.LengthDelimited);
        stringVal.push(r.bytes());
        return true;
      case 10:
        repeated(r, wire, WireType.Varint, int64, int64Val);
        return true;
      case 11:
        repeated(r, wire, WireType.Varint, (x) => x.bool(), boolVal);
        return true;
      default:
        return false; // half_val, complex and resource fields: not written by this library's readers
    }
  });
  if (floatVal.length > 0) t.floatVal = floatVal;
  if (doubleVal.length > 0) t.doubleVal = doubleVal;
  if (intVal.length > 0) t.intVal = intVal;
  if (stringVal.length > 0) t.stringVal = stringVal;
  if (int64Val.length > 0) t.int64Val = int64Val;
  if (boolVal.length > 0) t.boolVal = boolVal;
  return t;
};

const shape = (bytes: Uint8Array): TensorShapeProto => {
  const dim: TensorShapeDim[] = [];
  let unknownRank = false;
  fields(bytes, (f, wire, r) => {
    if (f === 3) {
      expectWire("TensorShapeProto.unknown_rank", wire, WireType.Varint);
      unknownRank = r.bool();
      return true;
    }
    if (f !== 2) return false;
    expectWire("TensorShapeProto.dim", wire, WireType.LengthDelimited);
    let size: Int64 = 0n;
    let name: string | undefined;
    fields(r.bytes(), (g, w, x) => {
      if (g === 1) {
        expectWire("TensorShapeProto.Dim.size", w, WireType.Varint);
        size = int64(x);
        return true;
      }
      if (g !== 2) return false;
      expectWire("TensorShapeProto.Dim.name", w, WireType.LengthDelimited);
      name = x.string();
      return true;
    });
    dim.push(name === undefined ? { size } : { size, name });
    return true;
  });
  return unknownRank ? { dim, unknownRank } : { dim };
};
