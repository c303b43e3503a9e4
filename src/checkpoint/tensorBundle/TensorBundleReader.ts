/**
 * Reads TensorFlow's V2 checkpoint format (the "tensor bundle"), whether TensorFlow wrote it
 * (`tf.train.Checkpoint.write`, `tf.compat.v1.train.Saver`, `tf.raw_ops.SaveV2`) or
 * {@link TensorBundleWriter} did: lists every entry (name, dtype, shape, size, checksum) and
 * reads tensors, verifying each one's masked CRC-32C.
 *
 * float32, float64, int32, int64, bool and string tensors are read; the other TensorFlow dtypes
 * (float16, bfloat16, int8, int16, uint8, complex...) and partitioned tensors are listed, and
 * refused on read with a one-line `UnimplementedError` naming the tensor and its dtype.
 *
 * Nothing in the files is trusted: the index is checked as a whole when the bundle is opened
 * (see `readTable`, and each entry's size against its dtype and shape), a tensor's byte range
 * against its data file's size before anything is allocated, its checksum before it is
 * decoded. A problem is a one-line `DataLossError` naming the file and the byte offset.
 *
 * @module
 */

import { constants } from "node:buffer";
import { open, readFile, stat, type FileHandle } from "node:fs/promises";
import { endianness } from "node:os";

import { DataLossError, InvalidArgumentError, NotFoundError, UnimplementedError } from "../../errors.js";
import type { DType, TensorValue } from "../../session/Tensor.js";
import { extendCrc32c, maskCrc32c, maskedCrc32c } from "../../summary/maskedCrc32c.js";
import { decodeBundleEntry, decodeBundleHeader, type BundleEntry, type BundleHeader } from "./bundleProtos.js";
import { BYTES_PER_ELEMENT, dataTypeName, dtypeOfCode, swapBytes } from "./dtypes.js";
import { bundleDataPath, bundleIndexPath } from "./naming.js";
import { dataLossAt, readTable } from "./sstable.js";
import { decodeStringTensor } from "./stringTensor.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** One tensor of a bundle, as its index describes it (what `inspect_checkpoint` prints). */
export interface TensorBundleEntry {
  readonly name: string;
  /** The dtype as Python names it (`float32`, `bfloat16`...); see {@link TensorBundleEntry.supported}. */
  readonly dtype: string;
  /** TensorFlow's `DataType` code. */
  readonly dtypeCode: number;
  readonly shape: readonly number[];
  /** Whether {@link TensorBundleReader.read} can read it (a dtype this library holds, not partitioned). */
  readonly supported: boolean;
  readonly shardId: number;
  /** Where the tensor's bytes start in its data file. */
  readonly offset: number;
  readonly sizeBytes: number;
  /** The masked CRC-32C of the tensor's bytes, as stored. */
  readonly crc32c: number;
  /** How many slices a partitioned tensor has (0: a whole tensor). */
  readonly slices: number;
}

/** The decoded index of a bundle. */
export interface BundleIndex {
  readonly header: BundleHeader;
  /** Every entry but the header, in key order. */
  readonly entries: readonly TensorBundleEntry[];
}

/** An index is read whole; one this large (some ten million entries) is not a bundle's. */
const MAX_INDEX_BYTES = 1024 * 1024 * 1024;
/** The version of the bundle format this reader implements (TensorFlow's `kTensorBundleVersion`). */
const CONSUMER_VERSION = 1;
const LITTLE_ENDIAN_HOST = endianness() === "LE";
const SUPPORTED = "float32, float64, int32, int64, bool and string";
const UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const UTF8_LOSSY = new TextDecoder("utf-8", { ignoreBOM: true });

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * A TensorFlow V2 bundle opened for reading: its index decoded and checked, its tensors read
 * on demand.
 *
 * @example
 * ```ts
 * import { TensorBundleReader } from "monitored-session/checkpoint";
 *
 * const reader = await TensorBundleReader.open("/tmp/tf/ckpt-1"); // written by tf.train.Checkpoint
 * for (const e of reader.entries) console.log(e.name, e.dtype, e.shape);
 * const kernel = await reader.read("model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE");
 * ```
 */
export class TensorBundleReader {
  private readonly byName: ReadonlyMap<string, TensorBundleEntry>;

  private constructor(
    /** The bundle's prefix. */
    readonly prefix: string,
    /** The index's header: shards, byte order, version. */
    readonly header: BundleHeader,
    /** Every tensor's entry, in key order. */
    readonly entries: readonly TensorBundleEntry[],
    private readonly source: DataSource,
    /**
     * Numeric tensors' unmasked CRC-32Cs, computed while {@link load} read their bytes; each is
     * used by the first {@link read} of its tensor (a later read checksums the bytes again: the
     * caller may have changed the view it got).
     */
    private readonly crcs: Map<TensorBundleEntry, number> = new Map(),
  ) {
    const byName = new Map<string, TensorBundleEntry>();
    for (const e of entries) if (!byName.has(e.name)) byName.set(e.name, e);
    this.byName = byName;
  }

  /**
   * Opens the bundle at `prefix`: reads and checks `<prefix>.index`. Throws `NotFoundError` if
   * it does not exist, `DataLossError` if it is not a sound bundle index, `UnimplementedError`
   * for a bundle of a newer format version.
   */
  static async open(prefix: string): Promise<TensorBundleReader> {
    const path = bundleIndexPath(prefix);
    let bytes: Uint8Array;
    try {
      const { size } = await stat(path);
      if (size > MAX_INDEX_BYTES) throw dataLossAt(path, 0, `${size} bytes is too large for a bundle index (at most ${MAX_INDEX_BYTES})`);
      bytes = await readFile(path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") throw new NotFoundError(`${path}: no such bundle index`, { cause: e });
      throw e;
    }
    const { header, entries } = decodeBundleIndex(bytes, path);
    return new TensorBundleReader(prefix, header, entries, readFromFile);
  }

  /**
   * Opens the bundle at `prefix` and reads it whole: each data shard's bytes up to the end of
   * its last tensor, in one buffer per shard (checked against the file's size before it is
   * allocated). Reads then decode in place: a tensor at an offset that is a multiple of its
   * element size (every tensor of a bundle written with `alignmentBytes` 8) views that buffer
   * without a copy, so the tensors read share it (it lives as long as any of them). A shard
   * whose tensors end past the largest buffer Node makes (`buffer.constants.MAX_LENGTH`, 4 GiB
   * in Node 20) is read tensor by tensor instead, as {@link open} reads. Throws as {@link open}
   * does, and `DataLossError` for a missing or short shard. Only the shards that hold tensors are
   * read, whatever number of shards the header claims.
   */
  static async load(prefix: string): Promise<TensorBundleReader> {
    const opened = await TensorBundleReader.open(prefix);
    const ends = new Map<number, number>();
    for (const e of opened.entries) ends.set(e.shardId, Math.max(ends.get(e.shardId) ?? 0, e.offset + e.sizeBytes));
    if ([...ends.values()].some((end) => end > MAX_LOADED_BYTES)) return opened;
    const crcs = new Map<TensorBundleEntry, number>();
    const shards = new Map<number, Uint8Array>();
    // One shard at a time: a bad one stops the load before the next is read.
    for (const [shard, end] of ends) {
      const path = bundleDataPath(prefix, shard, opened.header.numShards);
      shards.set(shard, await readPrefixOfFile(path, end, opened.entries.filter((e) => e.shardId === shard), crcs));
    }
    const source: DataSource = (_path, entry) => Promise.resolve((shards.get(entry.shardId) as Uint8Array).subarray(entry.offset, entry.offset + entry.sizeBytes));
    return new TensorBundleReader(prefix, opened.header, opened.entries, source, crcs);
  }

  /**
   * A bundle held in memory (fetched over the network, say): its index file's bytes and each
   * data shard's, checked as {@link open} checks files; `prefix` names them in errors.
   */
  static fromBytes(index: Uint8Array, shards: readonly Uint8Array[], prefix = "(memory)"): TensorBundleReader {
    const { header, entries } = decodeBundleIndex(index, bundleIndexPath(prefix));
    const source: DataSource = (path, entry) => {
      const shard = shards[entry.shardId];
      if (shard === undefined) return Promise.reject(new DataLossError(`${path}: missing (the bundle's index names it)`));
      try {
        checkRange(path, entry, shard.length);
      } catch (e) {
        return Promise.reject(e);
      }
      return Promise.resolve(shard.slice(entry.offset, entry.offset + entry.sizeBytes));
    };
    return new TensorBundleReader(prefix, header, entries, source);
  }

  /** The entry of the tensor `name`, or `undefined`. */
  entry(name: string): TensorBundleEntry | undefined {
    return this.byName.get(name);
  }

  /**
   * Reads the tensor `name`, verifying its checksum. Strings are decoded as UTF-8 (an
   * `UnimplementedError` for one that is not, since a string tensor of this library holds text:
   * read it with {@link readStringBytes}).
   * Throws `NotFoundError` for an unknown name, `UnimplementedError` for a dtype this library
   * does not hold or a partitioned tensor, `DataLossError` for bytes that do not verify.
   */
  async read(name: string): Promise<TensorValue> {
    const entry = this.supportedEntry(name);
    const bytes = await this.source(this.dataPath(entry), entry);
    const at = { file: this.dataPath(entry), name };
    if (entry.dtype !== "string") {
      const crc = this.crcs.get(entry);
      this.crcs.delete(entry);
      return decodeNumeric(entry, bytes, this.header.endianness, at, crc);
    }
    const elements = decodeStrings(entry, bytes, this.header.endianness, at);
    const data = elements.map((b, i) => {
      try {
        return UTF8.decode(b);
      } catch {
        throw new UnimplementedError(`tensor ${JSON.stringify(name)} element ${i} is not UTF-8 text, which a string tensor of this library holds: read it with readStringBytes`);
      }
    });
    return { dtype: "string", shape: [...entry.shape], data };
  }

  /**
   * Verifies the checksum of the tensor `name` without decoding it, whatever its dtype (a
   * `bfloat16` tensor this library cannot read still verifies). A partitioned tensor's entry
   * holds no bytes of its own: nothing to verify. Throws `NotFoundError` for an unknown name,
   * `DataLossError` for bytes that do not verify.
   */
  async verify(name: string): Promise<void> {
    const entry = this.byName.get(name);
    if (entry === undefined) throw new NotFoundError(`${bundleIndexPath(this.prefix)}: no tensor ${JSON.stringify(name)} in the bundle`);
    if (entry.slices > 0) return;
    const bytes = await this.source(this.dataPath(entry), entry);
    const at = { file: this.dataPath(entry), name };
    if (entry.dtype === "string") {
      decodeStrings(entry, bytes, this.header.endianness, at);
      return;
    }
    const crc = this.crcs.get(entry);
    const calculated = crc === undefined ? maskedCrc32c(bytes) : maskCrc32c(crc);
    if (calculated !== entry.crc32c) throw checksumMismatch(entry, at, calculated);
  }

  /** Reads the string tensor `name` as raw bytes, one array per element (as `read` verifies). */
  async readStringBytes(name: string): Promise<Uint8Array[]> {
    const entry = this.supportedEntry(name);
    if (entry.dtype !== "string") throw new InvalidArgumentError(`tensor ${JSON.stringify(name)} has dtype ${entry.dtype}, not string`);
    return decodeStrings(entry, await this.source(this.dataPath(entry), entry), this.header.endianness, { file: this.dataPath(entry), name });
  }

  /** Reads the tensors `names` (default: every entry), as {@link read} does. */
  async readAll(names: Iterable<string> = this.entries.map((e) => e.name)): Promise<Map<string, TensorValue>> {
    const out = new Map<string, TensorValue>();
    for (const name of names) out.set(name, await this.read(name));
    return out;
  }

  private supportedEntry(name: string): TensorBundleEntry {
    const entry = this.byName.get(name);
    if (entry === undefined) throw new NotFoundError(`${bundleIndexPath(this.prefix)}: no tensor ${JSON.stringify(name)} in the bundle`);
    refuseUnsupported(entry);
    return entry;
  }

  /** The data file that holds `entry`'s bytes. */
  dataPath(entry: TensorBundleEntry): string {
    return bundleDataPath(this.prefix, entry.shardId, this.header.numShards);
  }
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Decodes and checks a bundle's index (the whole `.index` file, named `file` in errors): the
 * table, the header under the empty key, every entry. Throws `DataLossError` naming the file
 * and the byte offset, or `UnimplementedError` for a newer format version.
 */
export const decodeBundleIndex = (bytes: Uint8Array, file: string): BundleIndex => {
  const rows = readTable(bytes, file);
  const first = rows[0];
  if (first === undefined) throw dataLossAt(file, 0, "the table is empty: no bundle header");
  if (first.key.length !== 0) throw dataLossAt(file, first.valueOffset, "the first key is not the empty key of the bundle header");
  const header = decodeBundleHeader(first.value, { file, offset: first.valueOffset, what: "bundle header" });
  if (header.numShards < 1) throw dataLossAt(file, first.valueOffset, `bundle header: num_shards is ${header.numShards}`);
  const { producer, minConsumer, badConsumers } = header.version;
  if (minConsumer > CONSUMER_VERSION || badConsumers.includes(CONSUMER_VERSION)) {
    throw new UnimplementedError(
      `${file}: the bundle was produced by a newer version of TensorFlow (producer ${producer}, min consumer ${minConsumer}, bad consumers [${badConsumers.join(", ")}]); this reader is consumer version ${CONSUMER_VERSION}`,
    );
  }
  const entries = rows.slice(1).map((row) => {
    const name = UTF8_LOSSY.decode(row.key);
    const at = { file, offset: row.valueOffset, what: `entry ${JSON.stringify(name)}` };
    return checkEntry(name, decodeBundleEntry(row.value, at), header, at);
  });
  return { header, entries };
};

/** Throws `UnimplementedError` for an entry that {@link TensorBundleReader.read} cannot read. */
const refuseUnsupported = (entry: TensorBundleEntry): void => {
  if (entry.slices > 0) {
    throw new UnimplementedError(`tensor ${JSON.stringify(entry.name)} is partitioned into ${entry.slices} slices, which this reader does not read`);
  }
  if (!entry.supported) {
    throw new UnimplementedError(`tensor ${JSON.stringify(entry.name)} has dtype ${entry.dtype}, which this reader does not read (it reads ${SUPPORTED})`);
  }
};

/**
 * A numeric or bool tensor from its stored bytes, after verifying their checksum; `at` names
 * the data file and the tensor in errors.
 */
const decodeNumeric = (
  entry: TensorBundleEntry,
  bytes: Uint8Array,
  order: BundleHeader["endianness"],
  at: { readonly file: string; readonly name: string },
  /** The bytes' unmasked CRC-32C, if it was computed as they were read. */
  crc?: number,
): TensorValue => {
  refuseUnsupported(entry);
  const dtype = dtypeOfCode(entry.dtypeCode) as Exclude<DType, "string">;
  const calculated = crc === undefined ? maskedCrc32c(bytes) : maskCrc32c(crc);
  if (calculated !== entry.crc32c) throw checksumMismatch(entry, at, calculated);
  const size = BYTES_PER_ELEMENT[dtype];
  const swap = (order === "little") !== LITTLE_ENDIAN_HOST && size > 1;
  // A copy unless the bytes are a fresh buffer already aligned for the typed array. A Buffer
  // (what `load` reads into) is viewed as a plain Uint8Array first: Buffer's `slice` is a view,
  // not a copy, and a bool tensor must not come back as a Buffer.
  const plain = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const own = swap ? swapBytes(plain, size) : plain.byteOffset % size === 0 ? plain : plain.slice();
  const n = own.length / size;
  const data = {
    float32: () => new Float32Array(own.buffer, own.byteOffset, n),
    float64: () => new Float64Array(own.buffer, own.byteOffset, n),
    int32: () => new Int32Array(own.buffer, own.byteOffset, n),
    int64: () => new BigInt64Array(own.buffer, own.byteOffset, n),
    bool: () => own,
  }[dtype]();
  return { dtype, shape: [...entry.shape], data } as TensorValue;
};

/**
 * A string tensor's elements (views of `bytes`) after verifying the checksum of the lengths
 * and the entry's.
 */
const decodeStrings = (
  entry: TensorBundleEntry,
  bytes: Uint8Array,
  order: BundleHeader["endianness"],
  at: { readonly file: string; readonly name: string },
): Uint8Array[] => {
  refuseUnsupported(entry);
  const n = entry.shape.reduce((a, b) => a * b, 1);
  const fail = (offset: number, what: string): never => {
    throw dataLossAt(at.file, entry.offset + offset, `string tensor ${JSON.stringify(at.name)}: ${what}`);
  };
  const { elements, maskedCrc } = decodeStringTensor(bytes, n, order === "little", fail);
  if (maskedCrc !== entry.crc32c) throw checksumMismatch(entry, at, maskedCrc);
  return elements;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** Reads an entry's bytes from the data file at `path` (a fresh buffer of exactly its size). */
type DataSource = (path: string, entry: TensorBundleEntry) => Promise<Uint8Array>;

/** Throws `DataLossError` if the entry's bytes do not lie inside a data file of `fileBytes` bytes. */
const checkRange = (path: string, entry: TensorBundleEntry, fileBytes: number): void => {
  if (entry.offset + entry.sizeBytes > fileBytes) {
    throw dataLossAt(path, entry.offset, `tensor ${JSON.stringify(entry.name)} (${entry.sizeBytes} bytes) runs past the end of the file (${fileBytes} bytes): the file is truncated`);
  }
};

/** Opens a data file for reading; a missing one is `DataLossError` (its index names it). */
const openDataFile = async (path: string): Promise<FileHandle> => {
  try {
    return await open(path, "r");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") throw new DataLossError(`${path}: missing (the bundle's index names it)`, { cause: e });
    throw e;
  }
};

/** The entry's bytes from its data file, checked against the file's size before anything is allocated. */
const readFromFile: DataSource = async (path, entry) => {
  const fh = await openDataFile(path);
  try {
    checkRange(path, entry, (await fh.stat()).size);
    const bytes = new Uint8Array(entry.sizeBytes);
    let done = 0;
    while (done < bytes.length) {
      const { bytesRead } = await fh.read(bytes, done, bytes.length - done, entry.offset + done);
      if (bytesRead === 0) throw dataLossAt(path, entry.offset + done, `tensor ${JSON.stringify(entry.name)}: the file ended while reading it`);
      done += bytesRead;
    }
    return bytes;
  } finally {
    await fh.close();
  }
};

/**
 * The first `end` bytes of the data file at `path` (nothing is read for 0 bytes, and a missing
 * file is then no error: a shard with no tensors), read in chunks with two reads in flight; as
 * each chunk arrives, the running CRC-32C of every numeric tensor of `entries` it holds is
 * extended (into `crcs`), while the next chunk is read. `DataLossError` if the file is missing
 * or shorter, naming the first of `entries` that runs past its end.
 */
const readPrefixOfFile = async (path: string, end: number, entries: readonly TensorBundleEntry[], crcs: Map<TensorBundleEntry, number>): Promise<Uint8Array> => {
  if (end === 0) return new Uint8Array(0);
  const fh = await openDataFile(path);
  try {
    const { size } = await fh.stat();
    if (size < end) {
      const first = entries.filter((e) => e.offset + e.sizeBytes > size).sort((a, b) => a.offset - b.offset)[0];
      if (first !== undefined) checkRange(path, first, size);
      throw dataLossAt(path, size, `the file ends at ${size} bytes; the index needs ${end}`);
    }
    const bytes = Buffer.allocUnsafeSlow(end);
    // The numeric tensors by offset (a string tensor's checksum is not that of its bytes).
    const numeric = entries.filter((e) => e.supported && e.dtype !== "string" && e.sizeBytes > 0).sort((a, b) => a.offset - b.offset);
    for (const e of numeric) crcs.set(e, 0);
    let next = 0;
    const checksum = (from: number, to: number): void => {
      while (next < numeric.length && (numeric[next] as TensorBundleEntry).offset + (numeric[next] as TensorBundleEntry).sizeBytes <= from) next++;
      for (let i = next; i < numeric.length; i++) {
        const e = numeric[i] as TensorBundleEntry;
        if (e.offset >= to) break;
        const lo = Math.max(e.offset, from);
        const hi = Math.min(e.offset + e.sizeBytes, to);
        if (hi > lo) crcs.set(e, extendCrc32c(crcs.get(e) as number, bytes.subarray(lo, hi)));
      }
    };
    const readChunk = async (from: number): Promise<number> => {
      const to = Math.min(end, from + READ_CHUNK_BYTES);
      let done = from;
      while (done < to) {
        const { bytesRead } = await fh.read(bytes, done, to - done, done);
        if (bytesRead === 0) throw dataLossAt(path, done, `the file ended while reading it (the index needs ${end} bytes)`);
        done += bytesRead;
      }
      return to;
    };
    const inFlight: { from: number; read: Promise<number> }[] = [];
    let issued = 0;
    const issue = (): void => {
      while (inFlight.length < READS_IN_FLIGHT && issued < end) {
        const from = issued;
        const read = readChunk(from);
        read.catch(() => undefined);
        inFlight.push({ from, read });
        issued = Math.min(end, issued + READ_CHUNK_BYTES);
      }
    };
    issue();
    while (inFlight.length > 0) {
      const { from, read } = inFlight.shift() as { from: number; read: Promise<number> };
      const to = await read;
      issue();
      checksum(from, to);
    }
    return bytes;
  } finally {
    await fh.close();
  }
};

/** The largest shard {@link TensorBundleReader.load} reads into one buffer. */
const MAX_LOADED_BYTES = constants.MAX_LENGTH;

/** Reads kept in flight by {@link TensorBundleReader.load}, so the next chunk is ready when a checksum finishes. */
const READS_IN_FLIGHT = 2;

/** Bytes per read call of {@link TensorBundleReader.load}. */
const READ_CHUNK_BYTES = 8 * 1024 * 1024;

/** The listed entry, after checking what the index alone can tell: shard, element count, size. */
const checkEntry = (name: string, e: BundleEntry, header: BundleHeader, at: { file: string; offset: number; what: string }): TensorBundleEntry => {
  const fail = (what: string): never => {
    throw dataLossAt(at.file, at.offset, `${at.what}: ${what}`);
  };
  if (e.dtypeCode === 0) fail("no dtype");
  if (e.shardId >= header.numShards) fail(`shard ${e.shardId} of a bundle with ${header.numShards} shards`);
  const n = e.shape.reduce((a, b) => a * b, 1);
  if (!Number.isSafeInteger(n)) fail(`shape [${e.shape.join(", ")}] has too many elements`);
  const dtype = dtypeOfCode(e.dtypeCode);
  if (e.slices === 0 && dtype !== undefined) {
    if (dtype === "string") {
      if (e.size < n + 4) fail(`Invalid size in bundle entry: ${e.size} bytes cannot hold ${n} strings`);
    } else if (e.size !== n * BYTES_PER_ELEMENT[dtype]) {
      fail(`Invalid size in bundle entry: ${dtype}[${e.shape.join(", ")}] needs ${n * BYTES_PER_ELEMENT[dtype]} bytes, the entry says ${e.size}`);
    }
  }
  return {
    name,
    dtype: dataTypeName(e.dtypeCode),
    dtypeCode: e.dtypeCode,
    shape: e.shape,
    supported: dtype !== undefined && e.slices === 0,
    shardId: e.shardId,
    offset: e.offset,
    sizeBytes: e.size,
    crc32c: e.crc32c,
    slices: e.slices,
  };
};

const checksumMismatch = (entry: TensorBundleEntry, at: { readonly file: string; readonly name: string }, calculated: number): DataLossError =>
  dataLossAt(
    at.file,
    entry.offset,
    `tensor ${JSON.stringify(at.name)}: Checksum does not match: stored ${hex(entry.crc32c)} vs. calculated on the restored bytes ${hex(calculated)}`,
  );

const hex = (n: number): string => `0x${n.toString(16).padStart(8, "0")}`;
