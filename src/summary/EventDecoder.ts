/**
 * `EventDecoder`: serialized `Event` records of one run into typed {@link SummaryEvent}s —
 * scalars as numbers, histograms as bucket arrays, images as encoded bytes with their size, text
 * as strings, other tensors as `TensorProto`s, session logs with their status — in the forms
 * TensorFlow 1 and 2, tensorboardX, tfjs-node and this library write.
 *
 * A series' plugin comes from the metadata of its first value, as in TensorBoard (writers may
 * write metadata only once per tag), so a decoder keeps that per tag and is used for one run.
 *
 * Scalar values, the bulk of most files, are decoded by hand on the raw bytes; everything else
 * goes through the generic decoders of `decodeSummary.ts`. The hand path exists because a
 * measurement said so: through the generic `BinaryReader` decoders a scalar event cost about
 * 2.7 µs, six times the framing and CRC pass it follows (bench/reader.bench.ts).
 *
 * @module
 */

import { DataLossError } from "../errors.js";
import { decodeSummaryMetadata, decodeSummaryValue, expectWire, fields } from "./decodeSummary.js";
import { DataType, type Int64, SessionStatus, type SummaryValue, type TensorProto } from "./EventProto.js";
import type { SessionLogStatus } from "./SummaryWriter.js";
import { PluginName } from "./summaryValues.js";
import { WireType } from "@bufbuild/protobuf/wire";
import { Cursor, isFloatScalarTensor, TagCache, type TagEntry, utf8 } from "./eventWire.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What every decoded event carries. */
export interface EventHeader {
  /** The run: the directory of the event file, relative to the logdir (`"."` for the logdir itself). */
  readonly run: string;
  /** Seconds since the Unix epoch. */
  readonly wallTime: number;
  /** The step (int64 in the file; exact up to 2^53). */
  readonly step: number;
}

/** The `file_version` record every event file starts with (`"brain.Event:2"`). */
export interface FileVersionEvent extends EventHeader {
  readonly kind: "fileVersion";
  readonly version: string;
}

/** A scalar (TF2 rank-0 tensor of plugin `scalars`, or a TF1 `simple_value`). */
export interface ScalarEvent extends EventHeader {
  readonly kind: "scalar";
  readonly tag: string;
  readonly value: number;
}

/** A histogram as buckets `(left[i], right[i]]` holding `count[i]` values (TF1 histograms are converted as TensorBoard does). */
export interface HistogramEvent extends EventHeader {
  readonly kind: "histogram";
  readonly tag: string;
  readonly left: Float64Array;
  readonly right: Float64Array;
  readonly count: Float64Array;
}

/** One encoded image (PNG, usually). A TF2 image summary of k images gives k events, `sample` 0 to k-1. */
export interface ImageEvent extends EventHeader {
  readonly kind: "image";
  readonly tag: string;
  readonly sample: number;
  readonly width: number;
  readonly height: number;
  /** 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA; 0 where the file does not say (TF2 form). */
  readonly colorspace: number;
  readonly encoded: Uint8Array;
}

/** A TF1 `Summary.Audio` clip (TF2 audio comes as a {@link TensorEvent} of plugin `audio`). */
export interface AudioEvent extends EventHeader {
  readonly kind: "audio";
  readonly tag: string;
  readonly sampleRate: number;
  readonly contentType: string;
  readonly encoded: Uint8Array;
}

/** Text (plugin `text`): the strings of a string tensor, row-major, with its shape. */
export interface TextEvent extends EventHeader {
  readonly kind: "text";
  readonly tag: string;
  readonly text: readonly string[];
  readonly shape: readonly number[];
}

/** Any other tensor summary, with the plugin its series belongs to (`""` if none). */
export interface TensorEvent extends EventHeader {
  readonly kind: "tensor";
  readonly tag: string;
  readonly pluginName: string;
  readonly tensor: TensorProto;
}

/** A `SessionLog` marker (`START` after a restore purges stale steps; see `LogdirScalars`). */
export interface SessionLogEvent extends EventHeader {
  readonly kind: "sessionLog";
  readonly status: SessionLogStatus | "STATUS_UNSPECIFIED";
  readonly msg: string;
  readonly checkpointPath: string;
}

/**
 * A tag's description, from its first value (TensorBoard fixes a tag's plugin and metadata by its
 * first value too): emitted just before that value's event, when asked for (`tagMetadata`). `displayName` is the metadata's
 * `display_name`, or, for a TF1 value kind (`simple_value`, `histo`, `image`, `audio`), the tag
 * itself when that is empty, as TensorBoard's data migration does.
 */
export interface TagMetadataEvent extends EventHeader {
  readonly kind: "tagMetadata";
  readonly tag: string;
  /** The plugin that shows the tag (`scalars`, `histograms`, `images`, `text`, …; `""`: none known). */
  readonly plugin: string;
  readonly displayName: string;
  readonly description: string;
}

/**
 * One decoded event. Graphs, meta graphs and run metadata are not decoded (no event is
 * produced for them); TF1 `obsolete_old_style_histogram` values neither.
 */
export type SummaryEvent =
  | FileVersionEvent
  | TagMetadataEvent
  | ScalarEvent
  | HistogramEvent
  | ImageEvent
  | AudioEvent
  | TextEvent
  | TensorEvent
  | SessionLogEvent;

/**
 * Where scalars go when no event object is wanted for each (`EventDecoder.decode`'s `scalar`,
 * `readEventsInto`'s sink): the run, the tag, the step, the wall time in seconds, the value.
 */
export type ScalarSink = (run: string, tag: string, step: number, wallTime: number, value: number) => void;

/** Decodes the records of one run; keeps each tag's plugin from its first value. */
export class EventDecoder {
  /** The run named in every event. */
  readonly run: string;
  private readonly plugins = new Map<string, string>();
  private readonly tagMetadata: boolean;
  private readonly r = new Cursor();
  private readonly tags = new TagCache();
  /** The scalar sink of the `decode` call running, if it was given one. */
  private sink: ScalarSink | undefined;

  /** `tagMetadata`: also emit a {@link TagMetadataEvent} before each tag's first value (default `false`). */
  constructor(run: string, options: { readonly tagMetadata?: boolean } = {}) {
    this.run = run;
    this.tagMetadata = options.tagMetadata === true;
  }

  /**
   * Decodes one serialized `Event` and passes each event it holds to `emit`, in order (an
   * `Event` with several summary values gives several). With `scalar`, scalars go to it instead,
   * with no event object made for them (in the same order relative to the other events, which
   * go to `emit` as before). Throws `DataLossError` for bytes that are
   * not an `Event`; the events before the bad field have already been emitted.
   */
  decode(payload: Uint8Array, emit: (event: SummaryEvent) => void, scalar?: ScalarSink): void {
    this.sink = scalar;
    try {
      this.event(payload, emit);
    } catch (e) {
      throw new DataLossError(`not a serialized Event: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    } finally {
      this.sink = undefined;
    }
  }

  private event(p: Uint8Array, emit: (event: SummaryEvent) => void): void {
    const r = this.r;
    r.reset(p);
    let wallTime = 0;
    let step = 0;
    let version: string | undefined;
    let summaryStart = -1;
    let summaryEnd = -1;
    let logStart = -1;
    let logEnd = -1;
    // The order every writer uses: wall_time (09), then step (10). Read without the field walk.
    if (p.length > 10 && p[0] === 0x09 && p[9] === 0x10) {
      r.pos = 1;
      wallTime = r.double();
      r.pos = 10;
      step = r.varint();
    }
    while (r.pos < p.length) {
      const key = r.varint();
      const field = key >>> 3;
      const wire = key & 7;
      if (field === 1 && wire === WireType.Bit64) {
        wallTime = r.double();
      } else if (field === 2 && wire === WireType.Varint) {
        step = r.varint();
      } else if (field === 3 && wire === WireType.LengthDelimited) {
        const e = r.delimited(p.length);
        version = utf8(p, r.pos, e);
        r.pos = e;
      } else if (field === 5 && wire === WireType.LengthDelimited) {
        summaryEnd = r.delimited(p.length);
        summaryStart = r.pos;
        r.pos = summaryEnd;
      } else if (field === 7 && wire === WireType.LengthDelimited) {
        logEnd = r.delimited(p.length);
        logStart = r.pos;
        r.pos = logEnd;
      } else {
        r.skip(wire, p.length);
      }
    }
    const run = this.run;
    if (version !== undefined) emit({ kind: "fileVersion", run, wallTime, step, version });
    if (logStart >= 0) emit(this.sessionLog(p, logStart, logEnd, wallTime, step));
    if (summaryStart < 0) return;
    // Summary: repeated Value value = 1.
    let at = summaryStart;
    while (at < summaryEnd) {
      r.pos = at;
      const key = r.varint();
      if (key !== 0x0a) {
        r.skip(key & 7, summaryEnd);
        at = r.pos;
        continue;
      }
      const end = r.delimited(summaryEnd);
      this.value(p, r.pos, end, wallTime, step, emit);
      at = end;
    }
  }

  /** One `Summary.Value` in `p[start, end)`: scalars by hand, anything else generically. */
  private value(p: Uint8Array, start: number, end: number, wallTime: number, step: number, emit: (event: SummaryEvent) => void): void {
    const r = this.r;
    r.pos = start;
    let tag = "";
    let entry: TagEntry | undefined;
    let simple = 0;
    let hasSimple = false;
    let tensorStart = -1;
    let tensorEnd = -1;
    let quick = Number.NaN;
    let metaStart = -1;
    let metaEnd = -1;
    let other = false;
    while (r.pos < end) {
      const key = r.varint();
      if (key === 0x0a) {
        const e = r.delimited(end);
        entry = this.tags.get(p, r.pos, e);
        tag = entry.tag;
        r.pos = e;
      } else if (key === 0x15) {
        simple = r.float();
        hasSimple = true;
      } else if (key === 0x42) {
        tensorEnd = r.delimited(end);
        tensorStart = r.pos;
        // The form every TF2 scalar takes: {dtype: DT_FLOAT, tensor_shape: {}, 4 bytes of
        // tensor_content or a packed float_val}, checked byte by byte instead of field by field.
        if (tensorEnd - tensorStart === 10 && isFloatScalarTensor(p, tensorStart)) quick = r.floatAt(tensorStart + 6);
        r.pos = tensorEnd;
      } else if (key === 0x4a) {
        metaEnd = r.delimited(end);
        metaStart = r.pos;
        r.pos = metaEnd;
      } else if (key >>> 3 === 7) {
        r.skip(key & 7, end); // node_name: deprecated, never set
      } else {
        other = true; // image, histo, audio, an old-style histogram or a field newer than this reader
        break;
      }
    }
    if (r.pos > end) throw new Error("Summary.Value overruns its message");
    const run = this.run;
    if (!other && hasSimple) {
      if (entry?.plugin === undefined) this.pluginOf(tag, PluginName.scalars, p, metaStart, metaEnd, wallTime, step, emit, undefined, entry);
      if (this.sink === undefined) emit({ kind: "scalar", run, wallTime, step, tag, value: simple });
      else this.sink(run, tag, step, wallTime, simple);
      return;
    }
    if (!other && tensorStart >= 0) {
      const plugin = entry?.plugin ?? this.pluginOf(tag, "", p, metaStart, metaEnd, wallTime, step, emit, undefined, entry);
      if (plugin === PluginName.scalars) {
        const value = quick === quick ? quick : this.scalarTensor(tensorStart, tensorEnd); // (NaN: not the quick form, or a NaN value)
        if (value !== undefined) {
          if (this.sink === undefined) emit({ kind: "scalar", run, wallTime, step, tag, value });
          else this.sink(run, tag, step, wallTime, value);
          return;
        }
      }
    }
    const v = decodeSummaryValue(p.subarray(start, end));
    const plugin = this.pluginOf(v.tag, implicitPlugin(v), p, metaStart, metaEnd, wallTime, step, emit, v);
    const sink = this.sink;
    classify(v, plugin, { run, wallTime, step }, sink === undefined ? emit : (e) => (e.kind === "scalar" ? sink(e.run, e.tag, e.step, e.wallTime, e.value) : emit(e)));
  }

  /**
   * The plugin of `tag`'s series, fixed by its first value as TensorBoard fixes it: a TF1 value
   * kind names its plugin (`simple_value` is a scalar whatever its metadata says); a tensor
   * takes the plugin of its metadata.
   */
  private pluginOf(
    tag: string,
    implicit: string,
    p: Uint8Array,
    metaStart: number,
    metaEnd: number,
    wallTime: number,
    step: number,
    emit: (event: SummaryEvent) => void,
    v?: SummaryValue,
    entry?: TagEntry,
  ): string {
    const known = this.plugins.get(tag);
    if (known !== undefined) {
      if (entry !== undefined) entry.plugin = known;
      return known;
    }
    const metadata = implicit !== "" && !this.tagMetadata ? undefined : (v?.metadata ?? (metaStart >= 0 ? decodeSummaryMetadata(p.subarray(metaStart, metaEnd)) : undefined));
    const plugin = implicit === "" ? (metadata?.pluginData?.pluginName ?? "") : implicit;
    this.plugins.set(tag, plugin);
    if (entry !== undefined) entry.plugin = plugin;
    if (!this.tagMetadata) return plugin;
    // A TF1 value kind names its plugin: TensorBoard's migration shows the tag when no display name was given.
    const displayName = metadata?.displayName || (implicit === "" ? "" : tag);
    emit({ kind: "tagMetadata", run: this.run, wallTime, step, tag, plugin, displayName, description: metadata?.summaryDescription ?? "" });
    return plugin;
  }

  /** The value of a rank-0 float or double tensor at `[start, end)` of the payload, or `undefined` for any other tensor. */
  private scalarTensor(start: number, end: number): number | undefined {
    const r = this.r;
    r.pos = start;
    let dtype = 0;
    let at = -1; // where the one value is
    let bytes = 0; // 4 (float) or 8 (double)
    let values = 0;
    while (r.pos < end) {
      const key = r.varint();
      if (key === 0x08) {
        dtype = r.varint();
      } else if (key === 0x12) {
        if (r.delimited(end) !== r.pos) return undefined; // a shape with dims: not rank 0
      } else if (key === 0x22 || key === 0x2a || key === 0x32) {
        // tensor_content (its dtype may come later), or a packed float_val / double_val
        const e = r.delimited(end);
        if (key !== 0x22 && e - r.pos !== (key === 0x2a ? 4 : 8)) return undefined;
        at = r.pos;
        bytes = e - r.pos;
        values++;
        r.pos = e;
      } else if (key === 0x2d || key === 0x31) {
        at = r.pos; // float_val / double_val, not packed
        bytes = key === 0x2d ? 4 : 8;
        values++;
        r.pos += bytes;
      } else {
        return undefined;
      }
    }
    if (values !== 1 || r.pos !== end) return undefined;
    if (!(dtype === DataType.DT_FLOAT && bytes === 4) && !(dtype === DataType.DT_DOUBLE && bytes === 8)) return undefined;
    r.pos = at;
    return bytes === 4 ? r.float() : r.double();
  }

  private sessionLog(p: Uint8Array, start: number, end: number, wallTime: number, step: number): SessionLogEvent {
    let status = 0;
    let checkpointPath = "";
    let msg = "";
    fields(p.subarray(start, end), (f, wire, r) => {
      if (f === 1) {
        expectWire("SessionLog.status", wire, WireType.Varint);
        status = r.uint32();
      } else if (f === 2 || f === 3) {
        expectWire("SessionLog", wire, WireType.LengthDelimited);
        if (f === 2) checkpointPath = r.string();
        else msg = r.string();
      } else {
        return false;
      }
      return true;
    });
    return { kind: "sessionLog", run: this.run, wallTime, step, status: statusName(status), msg, checkpointPath };
  }
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * The numbers of a numeric `TensorProto`, row-major, as float64 (int64 rounded beyond 2^53).
 * Throws for a string tensor or a dtype the reader does not know.
 */
export const tensorNumbers = (t: TensorProto): Float64Array => {
  const c = t.tensorContent;
  if (c !== undefined && c.length > 0) {
    const view = new DataView(c.buffer, c.byteOffset, c.byteLength);
    const read = CONTENT_READERS[t.dtype];
    if (read === undefined) throw new Error(`tensors of dtype ${t.dtype} are not supported`);
    const out = new Float64Array(Math.floor(c.length / read.bytes));
    for (let i = 0; i < out.length; i++) out[i] = read.at(view, i * read.bytes);
    return out;
  }
  const vals: ArrayLike<number | Int64 | boolean> | undefined = t.floatVal ?? t.doubleVal ?? t.intVal ?? t.int64Val ?? t.boolVal;
  if (vals === undefined) return new Float64Array(0);
  return Float64Array.from({ length: vals.length }, (_, i) => Number(vals[i]));
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const STATUS_NAMES = new Map<number, SessionLogEvent["status"]>([
  [SessionStatus.START, "START"],
  [SessionStatus.STOP, "STOP"],
  [SessionStatus.CHECKPOINT, "CHECKPOINT"],
]);
const statusName = (status: number): SessionLogEvent["status"] => STATUS_NAMES.get(status) ?? "STATUS_UNSPECIFIED";

const CONTENT_READERS: Partial<Record<number, { bytes: number; at: (v: DataView, o: number) => number }>> = {
  [DataType.DT_FLOAT]: { bytes: 4, at: (v, o) => v.getFloat32(o, true) },
  [DataType.DT_DOUBLE]: { bytes: 8, at: (v, o) => v.getFloat64(o, true) },
  [DataType.DT_INT32]: { bytes: 4, at: (v, o) => v.getInt32(o, true) },
  [DataType.DT_INT64]: { bytes: 8, at: (v, o) => Number(v.getBigInt64(o, true)) },
  [DataType.DT_UINT8]: { bytes: 1, at: (v, o) => v.getUint8(o) },
  [DataType.DT_INT16]: { bytes: 2, at: (v, o) => v.getInt16(o, true) },
  [DataType.DT_INT8]: { bytes: 1, at: (v, o) => v.getInt8(o) },
  [DataType.DT_BOOL]: { bytes: 1, at: (v, o) => v.getUint8(o) },
};

/** The plugin a TF1 value kind implies (TensorBoard's `initial_metadata`); `""` for a tensor. */
const implicitPlugin = (v: SummaryValue): string => {
  if (v.simpleValue !== undefined) return PluginName.scalars;
  if (v.histo !== undefined) return PluginName.histograms;
  if (v.image !== undefined) return PluginName.images;
  if (v.audio !== undefined) return "audio";
  return "";
};

const textDecoder = new TextDecoder();

const dims = (t: TensorProto): number[] => (t.tensorShape?.dim ?? []).map((d) => Number(d.size));

/** A generically decoded value as the event its plugin makes of it (nothing for an empty value). */
const classify = (v: SummaryValue, plugin: string, h: EventHeader, emit: (event: SummaryEvent) => void): void => {
  const { run, wallTime, step } = h;
  const tag = v.tag;
  if (v.simpleValue !== undefined) {
    emit({ kind: "scalar", run, wallTime, step, tag, value: v.simpleValue });
  } else if (v.histo !== undefined) {
    emit({ kind: "histogram", run, wallTime, step, tag, ...migrateHistogram(v.histo.min, v.histo.max, v.histo.bucketLimit, v.histo.bucket) });
  } else if (v.image !== undefined) {
    const { width, height, colorspace, encodedImageString: encoded } = v.image;
    emit({ kind: "image", run, wallTime, step, tag, sample: 0, width, height, colorspace, encoded });
  } else if (v.audio !== undefined) {
    const { sampleRate, contentType, encodedAudioString: encoded } = v.audio;
    emit({ kind: "audio", run, wallTime, step, tag, sampleRate, contentType, encoded });
  } else if (v.tensor !== undefined) {
    tensorEvent(v.tensor, tag, plugin, h, emit);
  }
};

const tensorEvent = (t: TensorProto, tag: string, plugin: string, h: EventHeader, emit: (event: SummaryEvent) => void): void => {
  const { run, wallTime, step } = h;
  const shape = dims(t);
  if (plugin === PluginName.scalars && shape.length === 0 && t.dtype !== DataType.DT_STRING) {
    const [value] = tensorNumbers(t);
    if (value !== undefined) {
      emit({ kind: "scalar", run, wallTime, step, tag, value });
      return;
    }
  }
  if (plugin === PluginName.histograms && shape.length === 2 && shape[1] === 3) {
    const xs = tensorNumbers(t);
    const k = Math.floor(xs.length / 3);
    const left = new Float64Array(k);
    const right = new Float64Array(k);
    const count = new Float64Array(k);
    for (let i = 0; i < k; i++) {
      left[i] = xs[3 * i] as number;
      right[i] = xs[3 * i + 1] as number;
      count[i] = xs[3 * i + 2] as number;
    }
    emit({ kind: "histogram", run, wallTime, step, tag, left, right, count });
    return;
  }
  if (t.dtype === DataType.DT_STRING && plugin === PluginName.text) {
    emit({ kind: "text", run, wallTime, step, tag, text: (t.stringVal ?? []).map((s) => (typeof s === "string" ? s : textDecoder.decode(s))), shape });
    return;
  }
  if (t.dtype === DataType.DT_STRING && plugin === PluginName.images && (t.stringVal?.length ?? 0) >= 2) {
    // TF2 `tf.summary.image`: [width, height, png_0, ..., png_k-1] as strings.
    const [w, hgt, ...images] = (t.stringVal ?? []).map((s) => (typeof s === "string" ? new TextEncoder().encode(s) : s));
    const width = Number(textDecoder.decode(w));
    const height = Number(textDecoder.decode(hgt));
    images.forEach((encoded, sample) => emit({ kind: "image", run, wallTime, step, tag, sample, width, height, colorspace: 0, encoded }));
    return;
  }
  emit({ kind: "tensor", run, wallTime, step, tag, pluginName: plugin, tensor: t });
};

/**
 * A TF1 `HistogramProto` as TensorBoard converts it (`data_compat.py`): empty buckets at both
 * ends are dropped, `min` and `max` become the outer edges, and the limits between stay.
 */
const migrateHistogram = (
  min: number,
  max: number,
  limits: ArrayLike<number>,
  counts: ArrayLike<number>,
): { left: Float64Array; right: Float64Array; count: Float64Array } => {
  let first = 0;
  while (first < counts.length && (counts[first] as number) <= 0) first++;
  let last = counts.length - 1;
  while (last >= 0 && (counts[last] as number) <= 0) last--;
  const k = Math.max(0, last - first + 1);
  const left = new Float64Array(k);
  const right = new Float64Array(k);
  const count = new Float64Array(k);
  for (let i = 0; i < k; i++) {
    const b = first + i;
    left[i] = i === 0 ? min : (limits[b - 1] as number);
    right[i] = i === k - 1 ? max : (limits[b] as number);
    count[i] = counts[b] as number;
  }
  return { left, right, count };
};
