/**
 * The two protobuf messages a tensor bundle's index stores, `BundleHeaderProto` (under the
 * empty key) and `BundleEntryProto` (under each tensor's name), with the `TensorShapeProto` and
 * `VersionDef` inside them, encoded and decoded field by field on `@bufbuild/protobuf`'s wire
 * writer and reader (a runtime dependency already; `protobufjs` is only a dev dependency here).
 * The field numbers are TensorFlow's (TF core/protobuf/tensor_bundle.proto,
 * core/framework/tensor_shape.proto, core/framework/versions.proto), written as proto3's C++
 * serializer does: fields in number order, default values left out, the shape always present.
 *
 * Decoding trusts nothing: a truncated or malformed message, a field with the wrong wire type, a
 * negative or oversized number is a one-line `DataLossError` naming the file and byte offset.
 * Unknown fields are skipped, as protobuf readers do.
 *
 * @module
 */

import { BinaryReader, BinaryWriter, WireType } from "@bufbuild/protobuf/wire";

import { DataLossError } from "../../errors.js";
import { dataLossAt } from "./sstable.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** `VersionDef`: the producer's version and the consumers it excludes. */
export interface VersionDef {
  readonly producer: number;
  readonly minConsumer: number;
  readonly badConsumers: readonly number[];
}

/** `BundleHeaderProto`: how many data shards there are, their byte order, the format version. */
export interface BundleHeader {
  readonly numShards: number;
  readonly endianness: "little" | "big";
  readonly version: VersionDef;
}

/** `BundleEntryProto`, with the shape's dimensions flattened and the slices counted. */
export interface BundleEntry {
  /** TensorFlow's `DataType` code. */
  readonly dtypeCode: number;
  readonly shape: readonly number[];
  readonly shardId: number;
  readonly offset: number;
  readonly size: number;
  /** The masked CRC-32C of the tensor's bytes, as stored. */
  readonly crc32c: number;
  /** How many `TensorSliceProto`s the entry has (non-zero: a partitioned tensor). */
  readonly slices: number;
}

/** Where a message lies, for error messages. */
export interface MessageAt {
  readonly file: string;
  /** The byte offset of the message in `file`. */
  readonly offset: number;
  /** What the message is, e.g. `entry "dense/kernel"`. */
  readonly what: string;
}

/** TensorFlow's tensors have at most this many dimensions (`TensorShape::MaxDimensions()`). */
const MAX_RANK = 254;
const ENDIANNESS_LITTLE = 0;
const ENDIANNESS_BIG = 1;

// ---------------------------------------------------------------------------------------------
// operations: encoding
// ---------------------------------------------------------------------------------------------

/** Serializes a `BundleHeaderProto`. */
export const encodeBundleHeader = (h: BundleHeader): Uint8Array => {
  const w = new BinaryWriter();
  if (h.numShards !== 0) w.tag(1, WireType.Varint).int32(h.numShards);
  if (h.endianness === "big") w.tag(2, WireType.Varint).int32(ENDIANNESS_BIG);
  w.tag(3, WireType.LengthDelimited).fork();
  if (h.version.producer !== 0) w.tag(1, WireType.Varint).int32(h.version.producer);
  if (h.version.minConsumer !== 0) w.tag(2, WireType.Varint).int32(h.version.minConsumer);
  if (h.version.badConsumers.length > 0) {
    w.tag(3, WireType.LengthDelimited).fork();
    for (const c of h.version.badConsumers) w.int32(c);
    w.join();
  }
  w.join();
  return w.finish();
};

/** Serializes a `BundleEntryProto` (no slices: this library writes whole tensors only). */
export const encodeBundleEntry = (e: BundleEntry): Uint8Array => {
  const w = new BinaryWriter();
  if (e.dtypeCode !== 0) w.tag(1, WireType.Varint).int32(e.dtypeCode);
  w.tag(2, WireType.LengthDelimited).fork();
  for (const d of e.shape) {
    w.tag(2, WireType.LengthDelimited).fork();
    if (d !== 0) w.tag(1, WireType.Varint).int64(d);
    w.join();
  }
  w.join();
  if (e.shardId !== 0) w.tag(3, WireType.Varint).int32(e.shardId);
  if (e.offset !== 0) w.tag(4, WireType.Varint).int64(e.offset);
  if (e.size !== 0) w.tag(5, WireType.Varint).int64(e.size);
  if (e.crc32c !== 0) w.tag(6, WireType.Bit32).fixed32(e.crc32c);
  return w.finish();
};

// ---------------------------------------------------------------------------------------------
// operations: decoding
// ---------------------------------------------------------------------------------------------

/** Decodes a `BundleHeaderProto`. */
export const decodeBundleHeader = (bytes: Uint8Array, at: MessageAt): BundleHeader => {
  let numShards = 0;
  let endianness: BundleHeader["endianness"] = "little";
  let version: VersionDef = { producer: 0, minConsumer: 0, badConsumers: [] };
  walk(bytes, at, (field, wire, r) => {
    switch (field) {
      case 1:
        numShards = int32(r, wire, "num_shards");
        if (numShards < 0) throw new Error(`num_shards is ${numShards}`);
        return true;
      case 2: {
        const e = int32(r, wire, "endianness");
        if (e !== ENDIANNESS_LITTLE && e !== ENDIANNESS_BIG) throw new Error(`endianness ${e} is neither LITTLE (0) nor BIG (1)`);
        endianness = e === ENDIANNESS_BIG ? "big" : "little";
        return true;
      }
      case 3: {
        const m = message(r, wire, "version");
        version = decodeVersion(m, nested(at, r, m, "version"));
        return true;
      }
      default:
        return false;
    }
  });
  return { numShards, endianness, version };
};

/** Decodes a `BundleEntryProto`. */
export const decodeBundleEntry = (bytes: Uint8Array, at: MessageAt): BundleEntry => {
  let dtypeCode = 0;
  let shape: readonly number[] = [];
  let shardId = 0;
  let offset = 0;
  let size = 0;
  let crc32c = 0;
  let slices = 0;
  walk(bytes, at, (field, wire, r) => {
    switch (field) {
      case 1:
        dtypeCode = int32(r, wire, "dtype");
        return true;
      case 2: {
        const m = message(r, wire, "shape");
        shape = decodeShape(m, nested(at, r, m, "shape"));
        return true;
      }
      case 3:
        shardId = int32(r, wire, "shard_id");
        if (shardId < 0) throw new Error(`shard_id is ${shardId}`);
        return true;
      case 4:
        offset = uint53(r, wire, "offset");
        return true;
      case 5:
        size = uint53(r, wire, "size");
        return true;
      case 6:
        if (wire !== WireType.Bit32) throw new Error(`crc32c has wire type ${wire}, expected ${WireType.Bit32}`);
        crc32c = r.fixed32();
        return true;
      case 7:
        message(r, wire, "slices");
        slices++;
        return true;
      default:
        return false;
    }
  });
  return { dtypeCode, shape, shardId, offset, size, crc32c, slices };
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** Takes one field of a message (returns false to have it skipped). */
export type Visit = (field: number, wire: WireType, r: BinaryReader) => boolean;

/**
 * Calls `visit` for each field of the message in `bytes`; a field it does not take (returns
 * false) is skipped. Any error becomes a `DataLossError` at the field's offset.
 */
export const walk = (bytes: Uint8Array, at: MessageAt, visit: Visit): void => {
  const r = new BinaryReader(bytes);
  while (r.pos < r.len) {
    const start = r.pos;
    try {
      const [field, wire] = r.tag();
      if (!visit(field, wire, r)) r.skip(wire, field);
      if (r.pos > r.len) throw new RangeError("truncated message");
    } catch (e) {
      if (e instanceof DataLossError) throw e;
      throw dataLossAt(at.file, at.offset + start, `${at.what}: ${(e as Error).message}`);
    }
  }
};

/** A nested message's bytes (length-delimited); {@link nested} says where it lies. */
export const message = (r: BinaryReader, wire: WireType, name: string): Uint8Array => {
  if (wire !== WireType.LengthDelimited) throw new Error(`${name} has wire type ${wire}, expected ${WireType.LengthDelimited}`);
  return r.bytes();
};

/** Where the nested message `m` that `r` has just read lies in the file. */
export const nested = (at: MessageAt, r: BinaryReader, m: Uint8Array, name: string): MessageAt => ({
  file: at.file,
  offset: at.offset + r.pos - m.length,
  what: `${at.what} ${name}`,
});

export const int32 = (r: BinaryReader, wire: WireType, name: string): number => {
  if (wire !== WireType.Varint) throw new Error(`${name} has wire type ${wire}, expected ${WireType.Varint}`);
  const v = r.int32();
  if (r.pos > r.len) throw new RangeError(`truncated ${name}`);
  return v;
};

/** A non-negative int64 field that must fit a JavaScript number exactly. */
const uint53 = (r: BinaryReader, wire: WireType, name: string): number => {
  if (wire !== WireType.Varint) throw new Error(`${name} has wire type ${wire}, expected ${WireType.Varint}`);
  const v = BigInt(r.int64());
  if (r.pos > r.len) throw new RangeError(`truncated ${name}`);
  if (v < 0n || v > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`${name} ${v} is out of range`);
  return Number(v);
};

const decodeVersion = (bytes: Uint8Array, at: MessageAt): VersionDef => {
  let producer = 0;
  let minConsumer = 0;
  const badConsumers: number[] = [];
  walk(bytes, at, (field, wire, r) => {
    switch (field) {
      case 1:
        producer = int32(r, wire, "producer");
        return true;
      case 2:
        minConsumer = int32(r, wire, "min_consumer");
        return true;
      case 3:
        if (wire === WireType.LengthDelimited) {
          const packed = new BinaryReader(r.bytes());
          while (packed.pos < packed.len) badConsumers.push(int32(packed, WireType.Varint, "bad_consumers"));
        } else {
          badConsumers.push(int32(r, wire, "bad_consumers"));
        }
        return true;
      default:
        return false;
    }
  });
  return { producer, minConsumer, badConsumers };
};

const decodeShape = (bytes: Uint8Array, at: MessageAt): number[] => {
  const dims: number[] = [];
  walk(bytes, at, (field, wire, r) => {
    switch (field) {
      case 2: {
        let size = 0;
        const m = message(r, wire, "dim");
        walk(m, nested(at, r, m, "dim"), (f, w, dr) => {
          if (f !== 1) return false;
          size = uint53(dr, w, "dim size");
          return true;
        });
        dims.push(size);
        if (dims.length > MAX_RANK) throw new Error(`more than ${MAX_RANK} dimensions`);
        return true;
      }
      case 3:
        if (int32(r, wire, "unknown_rank") !== 0) throw new Error("the shape has unknown rank");
        return true;
      default:
        return false;
    }
  });
  return dims;
};
