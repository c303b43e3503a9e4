/**
 * An independent decoder for the tests: protobufjs loads our own minimal schema
 * (test/fixtures/tensorboard/tbevents.proto) and decodes what the writer wrote.
 */
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import protobuf from "protobufjs";
import { readRecords } from "../../src/summary/recordReader.js";

const here = dirname(fileURLToPath(import.meta.url));
const root = protobuf.loadSync(join(here, "../fixtures/tensorboard/tbevents.proto"));
const EventType = root.lookupType("tbtest.Event");
const SummaryType = root.lookupType("tbtest.Summary");

export interface DecodedTensor {
  dtype?: number;
  tensorShape?: { dim?: { size?: string; name?: string }[]; unknownRank?: boolean };
  tensorContent?: Uint8Array;
  floatVal?: number[];
  doubleVal?: number[];
  stringVal?: Uint8Array[];
  int64Val?: string[];
  intVal?: number[];
  boolVal?: boolean[];
}

export interface DecodedValue {
  tag?: string;
  value?: string;
  simpleValue?: number;
  image?: { height?: number; width?: number; colorspace?: number; encodedImageString?: Uint8Array };
  histo?: { min?: number; max?: number; num?: number; sum?: number; sumSquares?: number; bucketLimit?: number[]; bucket?: number[] };
  tensor?: DecodedTensor;
  metadata?: {
    pluginData?: { pluginName?: string; content?: Uint8Array };
    displayName?: string;
    summaryDescription?: string;
    dataClass?: number;
  };
}

export interface DecodedEvent {
  wallTime?: number;
  /** int64 as a decimal string. */
  step?: string;
  what?: string;
  fileVersion?: string;
  summary?: { value?: DecodedValue[] };
  sessionLog?: { status?: string; checkpointPath?: string; msg?: string };
  sourceMetadata?: { writer?: string };
}

const options = { longs: String, enums: String, oneofs: true } as const;

/** Decodes one serialized `Event`. */
export const decodeEvent = (bytes: Uint8Array): DecodedEvent =>
  EventType.toObject(EventType.decode(bytes), options) as DecodedEvent;

/** Decodes one serialized `Summary`. */
export const decodeSummary = (bytes: Uint8Array): { value?: DecodedValue[] } =>
  SummaryType.toObject(SummaryType.decode(bytes), options) as { value?: DecodedValue[] };

/** Every complete event of a file, decoded. */
export const readEvents = (path: string): DecodedEvent[] =>
  readRecords(readFileSync(path)).records.map((r) => decodeEvent(r.payload));

/** The event files of a directory, sorted (TensorBoard's reading order). */
export const eventFiles = (dir: string): string[] =>
  readdirSync(dir)
    .filter((f) => f.includes("tfevents"))
    .sort()
    .map((f) => join(dir, f));

/** The float32 in 4 little-endian bytes. */
export const float32At = (bytes: Uint8Array | undefined, index = 0): number => {
  if (bytes === undefined) throw new Error("no tensor_content");
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getFloat32(index * 4, true);
};

/** All float32 values of little-endian bytes. */
export const float32s = (bytes: Uint8Array | undefined): number[] => {
  if (bytes === undefined) return [];
  const out: number[] = [];
  for (let i = 0; i < bytes.length / 4; i++) out.push(float32At(bytes, i));
  return out;
};

/** Bytes from hex, ignoring spaces. */
export const hex = (s: string): Uint8Array => Uint8Array.from(Buffer.from(s.replace(/\s+/g, ""), "hex"));

/** Bytes to hex. */
export const toHex = (b: Uint8Array): string => Buffer.from(b).toString("hex");
