/**
 * This library's own checkpoint format, version 1: the reader. Releases before 0.2.0 wrote it;
 * since 0.2.0 checkpoints are TensorFlow's V2 bundle (`checkpointFormat.ts`), and nothing writes
 * this format any more. It is read so that every old checkpoint keeps restoring
 * (`checkpointFormat.readBundle` tells the two apart by the index's first byte); its tests read
 * the checkpoints in test/checkpoint/fixtures/monitored-session-v1, which a release that still
 * wrote it made. A checkpoint at `<prefix>` is two files,
 *
 * - `<prefix>.data-00000-of-00001`: the tensors' bytes, little-endian, each tensor starting at
 *   an 8-byte-aligned offset (zero padding between), strings as `u32 byte length + UTF-8`;
 * - `<prefix>.index`: a JSON manifest naming each tensor's dtype, shape, byte range and
 *   CRC32C, plus a CRC32C of the manifest's own canonical body.
 *
 * Reading verifies every checksum before returning anything. See docs/checkpoints.md for the
 * byte layout. {@link tensorBytes} and {@link decodeTensor} live on as the model service's wire
 * form of a tensor (src/cluster).
 *
 * @module
 */

import { crc32c } from "@node-rs/crc32";
import { isLeft } from "fp-ts/lib/Either.js";
import * as t from "io-ts";
import { open, type FileHandle } from "node:fs/promises";
import { endianness } from "node:os";

import { DataLossError, InvalidArgumentError, NotFoundError } from "../errors.js";
import { DTYPES, numElements, type DType, type TensorValue } from "../session/Tensor.js";
import { decodeLines, DTypeCodec, NonNegativeInt, SafeInt, strictType, Uint32 } from "../codec.js";
import { assertValidPath } from "./internal/files.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The `format` field of every manifest. */
export const BUNDLE_FORMAT = "monitored-session/checkpoint";
/** The manifest version this library reads. */
const BUNDLE_VERSION = 1;
/** The suffix of the manifest file. */
export const INDEX_SUFFIX = ".index";
/** The suffix of the single data shard. */
export const DATA_SUFFIX = ".data-00000-of-00001";

/** One tensor's entry in the manifest. */
const TensorEntryCodec = strictType(
  {
    name: t.string,
    dtype: DTypeCodec,
    shape: t.array(NonNegativeInt),
    offset: NonNegativeInt,
    length: NonNegativeInt,
    crc32c: Uint32,
  },
  "TensorEntry",
);

/** The `.index` manifest, version 1. */
const ManifestCodec = strictType(
  {
    format: t.literal(BUNDLE_FORMAT),
    version: t.literal(BUNDLE_VERSION),
    step: SafeInt,
    createdAtMs: SafeInt,
    dataBytes: NonNegativeInt,
    tensors: t.array(TensorEntryCodec),
    checksum: Uint32,
  },
  "Manifest",
);

/** A tensor's entry in the manifest. */
export type TensorEntry = t.TypeOf<typeof TensorEntryCodec>;
/** A decoded, verified manifest. */
export type Manifest = t.TypeOf<typeof ManifestCodec>;

/** What reading a checkpoint yields. */
export interface CheckpointContents {
  /** The step recorded at save time. */
  readonly step: number;
  /** The save time, epoch milliseconds (from the saver's clock). */
  readonly createdAtMs: number;
  /** The variables. Numeric tensors view one shared buffer (no per-tensor copy). */
  readonly values: Map<string, TensorValue>;
}

const BYTES_PER_ELEMENT: Record<Exclude<DType, "string">, number> = {
  float32: 4,
  float64: 8,
  int32: 4,
  int64: 8,
  bool: 1,
};

/** Bytes per read call; the CRC of one chunk overlaps the read of the next. */
const CHUNK_BYTES = 8 * 1024 * 1024;
/** The smallest read chunk on restore (see `readDataFile`). */
const MIN_READ_CHUNK_BYTES = 256 * 1024;
/** Data files above this size are checked against the index before their buffer is allocated. */
const LARGE_DATA_BYTES = 64 * 1024 * 1024;
/** Reads kept in flight on restore, so the next chunk is ready when a CRC finishes. */
const READS_IN_FLIGHT = 2;
const LITTLE_ENDIAN_HOST = endianness() === "LE";

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** The manifest path of the checkpoint at `prefix`. */
export const indexPath = (prefix: string): string => `${prefix}${INDEX_SUFFIX}`;
/** The data path of the checkpoint at `prefix`. */
export const dataPath = (prefix: string): string => `${prefix}${DATA_SUFFIX}`;

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Reads and decodes the manifest at `<prefix>.index`, verifying its checksum.
 * Throws `NotFoundError` if it is missing and `DataLossError` listing every problem otherwise.
 */
export const readManifest = async (prefix: string): Promise<Manifest> => {
  assertValidPath(prefix);
  const path = indexPath(prefix);
  let text: string;
  try {
    text = await readSmallFile(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") {
      throw new NotFoundError(`checkpoint index ${path} not found`, { cause: e });
    }
    throw e;
  }
  return parseManifest(text, path);
};

/**
 * Decodes a manifest's text. Throws `DataLossError` listing every problem, each with its
 * path, or a checksum mismatch.
 */
export const parseManifest = (text: string, path = "(manifest)"): Manifest => {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new DataLossError(`checkpoint index ${path} is not valid JSON (truncated or corrupt): ${(e as Error).message}`, { cause: e });
  }
  // The version is checked on its own first, so a newer file gets a clear message.
  if (typeof json === "object" && json !== null && "version" in json && (json as { version: unknown }).version !== BUNDLE_VERSION) {
    const v = (json as { version: unknown }).version;
    throw new DataLossError(
      `checkpoint index ${path} has format version ${JSON.stringify(v)}; this library reads version ${BUNDLE_VERSION}`,
    );
  }
  const decoded = decodeLines(ManifestCodec, json);
  if (isLeft(decoded)) {
    throw new DataLossError(`checkpoint index ${path} is invalid:\n  ${decoded.left.join("\n  ")}`);
  }
  const m = decoded.right;
  const expected = manifestChecksum(m);
  if (expected !== m.checksum) {
    throw new DataLossError(
      `checkpoint index ${path} is corrupt: manifest checksum is ${hex(m.checksum)} but its body hashes to ${hex(expected)}`,
    );
  }
  const problems = checkLayout(m);
  if (problems.length > 0) {
    throw new DataLossError(`checkpoint index ${path} is inconsistent:\n  ${problems.join("\n  ")}`);
  }
  return m;
};

/**
 * Reads the checkpoint at `prefix`, verifying the manifest checksum, the data file's size and
 * every tensor's CRC32C before returning anything. Throws `NotFoundError` for a missing
 * checkpoint and `DataLossError` (naming the file and the variables) for a corrupt one.
 */
export const readBundle = async (prefix: string): Promise<CheckpointContents> => {
  assertValidPath(prefix);
  const path = dataPath(prefix);
  // The index and the data are read concurrently; nothing is returned before both are
  // verified. A missing index is reported as such even if the data is missing too.
  const manifestP = readManifest(prefix);
  manifestP.catch(() => undefined);
  let fh: FileHandle;
  try {
    fh = await open(path, "r");
  } catch (e) {
    await manifestP;
    if ((e as NodeJS.ErrnoException).code === "ENOENT") {
      throw new DataLossError(`checkpoint data ${path} is missing (its index exists)`, { cause: e });
    }
    throw e;
  }
  let manifest: Manifest;
  let buffer: Buffer;
  let crcs: number[];
  let closed: Promise<void> | undefined;
  try {
    const { size } = await fh.stat();
    const checkSize = async (m: Manifest): Promise<void> => {
      if (size !== m.dataBytes) {
        throw new DataLossError(
          `checkpoint data ${path} has ${size} bytes but its index says ${m.dataBytes} (${size < m.dataBytes ? "truncated" : "extended"})`,
        );
      }
    };
    // A large file is checked against its index before its buffer is allocated: a corrupt or
    // extended (e.g. sparse) file must be a DataLossError, not an allocation failure.
    if (size > LARGE_DATA_BYTES) await checkSize(await manifestP);
    buffer = Buffer.allocUnsafeSlow(size);
    const f = fh;
    // The CRCs start once the manifest (read meanwhile) gives the tensors' ranges.
    crcs = await readDataFile(f, buffer, manifestP, path, checkSize, () => {
      // The last read is done: close while the last chunk is checksummed.
      closed = f.close();
      closed.catch(() => undefined);
    });
    manifest = await manifestP;
  } finally {
    await (closed ?? fh.close());
  }
  const bad = manifest.tensors.filter((e, i) => crcs[i] !== e.crc32c);
  if (bad.length > 0) {
    throw new DataLossError(
      `checkpoint data ${path} is corrupt: CRC32C mismatch for ${bad.map((e) => JSON.stringify(e.name)).join(", ")}`,
    );
  }
  const values = new Map<string, TensorValue>();
  for (const e of manifest.tensors) values.set(e.name, decodeTensor(buffer, e, path));
  return { step: manifest.step, createdAtMs: manifest.createdAtMs, values };
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/**
 * The manifest's checksum: CRC32C of the UTF-8 JSON of its fields as an array in a fixed
 * order, so key order and whitespace in the file do not matter.
 */
export const manifestChecksum = (m: Omit<Manifest, "checksum">): number =>
  crc32c(
    Buffer.from(
      JSON.stringify([
        m.format,
        m.version,
        m.step,
        m.createdAtMs,
        m.dataBytes,
        m.tensors.map((e) => [e.name, e.dtype, e.shape, e.offset, e.length, e.crc32c]),
      ]),
      "utf8",
    ),
  );

/** A tensor's little-endian bytes (strings: a `uint32` byte length, then UTF-8, each); also the model service's wire form. */
export const tensorBytes = (name: string, value: TensorValue): Uint8Array => {
  const where = `variable ${JSON.stringify(name)}`;
  if (!DTYPES.includes(value.dtype)) throw new InvalidArgumentError(`${where} has unknown dtype ${String(value.dtype)}`);
  for (const d of value.shape) {
    if (!Number.isSafeInteger(d) || d < 0) throw new InvalidArgumentError(`${where} has invalid shape [${value.shape.join(", ")}]`);
  }
  const n = numElements(value.shape);
  if (value.data.length !== n) {
    throw new InvalidArgumentError(`${where} has shape [${value.shape.join(", ")}] (${n} elements) but ${value.data.length} elements`);
  }
  if (value.dtype === "string") {
    const data = value.data as readonly string[];
    let total = 0;
    const lengths: number[] = [];
    for (let i = 0; i < data.length; i++) {
      const s = data[i];
      if (typeof s !== "string") throw new InvalidArgumentError(`${where} element ${i} is not a string`);
      if (LONE_SURROGATE.test(s)) {
        throw new InvalidArgumentError(`${where} element ${i} is not well-formed Unicode (lone surrogate); UTF-8 cannot store it exactly`);
      }
      const len = Buffer.byteLength(s, "utf8");
      lengths.push(len);
      total += 4 + len;
    }
    const out = Buffer.allocUnsafe(total);
    let at = 0;
    for (let i = 0; i < data.length; i++) {
      const len = lengths[i] as number;
      out.writeUInt32LE(len, at);
      at += 4;
      at += out.write(data[i] as string, at, len, "utf8");
    }
    return out;
  }
  const ctor = STORAGE[value.dtype];
  if (!(value.data instanceof ctor)) {
    throw new InvalidArgumentError(`${where} has dtype ${value.dtype} but its data is not a ${ctor.name}`);
  }
  const data = value.data as Exclude<TensorValue["data"], readonly string[]>;
  const view = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  return LITTLE_ENDIAN_HOST ? view : swapBytes(view, BYTES_PER_ELEMENT[value.dtype]);
};

const STORAGE = {
  float32: Float32Array,
  float64: Float64Array,
  int32: Int32Array,
  int64: BigInt64Array,
  bool: Uint8Array,
} as const;

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Reads the whole data file into `buffer` in chunks; the CRCs of one chunk's tensor ranges are
 * computed while the next chunk is read. Reading starts at once; checksumming waits for the
 * manifest (read concurrently), which `check` validates against the file first. `lastRead` is
 * called once every read has returned.
 */
const readDataFile = async (
  fh: FileHandle,
  buffer: Buffer,
  manifestP: Promise<Manifest>,
  path: string,
  check: (m: Manifest) => Promise<void>,
  lastRead: () => void,
): Promise<number[]> => {
  // Checksumming 1 MB takes about as long as reading it from the page cache, so small files
  // are read in smaller chunks too (at least 8 per file, at least 256 KiB each): the CRCs then
  // overlap the reads instead of following them. Two reads stay in flight.
  const chunk = Math.min(CHUNK_BYTES, Math.max(MIN_READ_CHUNK_BYTES, Math.ceil(buffer.byteLength / 8 / 4096) * 4096));
  const readChunk = async (start: number): Promise<number> => {
    const end = Math.min(start + chunk, buffer.byteLength);
    let at = start;
    while (at < end) {
      const { bytesRead } = await fh.read(buffer, at, end - at, at);
      if (bytesRead === 0) throw new DataLossError(`checkpoint data ${path} ended early at byte ${at} (truncated while reading)`);
      at += bytesRead;
    }
    return end;
  };
  // Reads in flight, oldest first; `issued` is where the next one starts.
  const pending: Promise<number>[] = [];
  let issued = 0;
  const issue = (): void => {
    while (pending.length < READS_IN_FLIGHT && issued < buffer.byteLength) {
      const p = readChunk(issued);
      p.catch(() => undefined);
      pending.push(p);
      issued = Math.min(issued + chunk, buffer.byteLength);
    }
  };
  issue();
  let manifest: Manifest;
  try {
    manifest = await manifestP;
    await check(manifest);
  } catch (e) {
    await Promise.allSettled(pending);
    throw e;
  }
  const tensors = manifest.tensors;
  const crcs = tensors.map(() => 0);
  // Tensors sorted by offset, walked with a cursor as chunks arrive.
  const order = tensors.map((_, i) => i).sort((a, b) => (tensors[a] as TensorEntry).offset - (tensors[b] as TensorEntry).offset);
  let cursor = 0;
  const checksum = (from: number, to: number): void => {
    while (cursor < order.length) {
      const e = tensors[order[cursor] as number] as TensorEntry;
      if (e.offset + e.length <= from) cursor++;
      else break;
    }
    for (let k = cursor; k < order.length; k++) {
      const i = order[k] as number;
      const e = tensors[i] as TensorEntry;
      if (e.offset >= to) break;
      const a = Math.max(from, e.offset);
      const b = Math.min(to, e.offset + e.length);
      if (a < b) crcs[i] = crc32c(buffer.subarray(a, b), crcs[i]);
    }
  };
  let done = 0;
  if (pending.length === 0) lastRead();
  while (pending.length > 0) {
    let end: number;
    try {
      end = await (pending[0] as Promise<number>);
    } catch (e) {
      await Promise.allSettled(pending);
      throw e;
    }
    pending.shift();
    issue();
    if (pending.length === 0) lastRead();
    checksum(done, end);
    done = end;
  }
  return crcs;
};

/**
 * Reads a small file (an index) with as few calls as possible: no `stat`, one read for files
 * up to 64 KiB, then one more read that confirms the end.
 */
const readSmallFile = async (path: string): Promise<string> => {
  const fh = await open(path, "r");
  try {
    let buffer = Buffer.allocUnsafe(64 * 1024);
    let size = 0;
    for (;;) {
      if (size === buffer.byteLength) {
        const bigger = Buffer.allocUnsafe(buffer.byteLength * 2);
        buffer.copy(bigger, 0, 0, size);
        buffer = bigger;
      }
      const { bytesRead } = await fh.read(buffer, size, buffer.byteLength - size, size);
      if (bytesRead === 0) break;
      size += bytesRead;
    }
    return buffer.toString("utf8", 0, size);
  } finally {
    await fh.close();
  }
};

/** The tensor `e` describes, from its bytes in `buffer` (the inverse of {@link tensorBytes}). */
export const decodeTensor = (buffer: Buffer, e: TensorEntry, path: string): TensorValue => {
  const n = numElements(e.shape);
  const bytes = buffer.subarray(e.offset, e.offset + e.length);
  if (e.dtype === "string") {
    const out: string[] = [];
    let at = 0;
    for (let i = 0; i < n; i++) {
      if (at + 4 > bytes.byteLength) throw new DataLossError(`checkpoint data ${path}: string tensor ${JSON.stringify(e.name)} is cut short`);
      const len = bytes.readUInt32LE(at);
      at += 4;
      if (at + len > bytes.byteLength) throw new DataLossError(`checkpoint data ${path}: string tensor ${JSON.stringify(e.name)} is cut short`);
      out.push(bytes.toString("utf8", at, at + len));
      at += len;
    }
    if (at !== bytes.byteLength) throw new DataLossError(`checkpoint data ${path}: string tensor ${JSON.stringify(e.name)} has trailing bytes`);
    return { dtype: "string", shape: [...e.shape], data: out };
  }
  const size = BYTES_PER_ELEMENT[e.dtype];
  const source = LITTLE_ENDIAN_HOST ? bytes : swapBytes(bytes, size);
  const ctor = STORAGE[e.dtype];
  // The buffer is freshly allocated with byteOffset 0 and offsets are aligned, so this is a view.
  const buf = source.buffer as ArrayBuffer;
  const data =
    source.byteOffset % size === 0
      ? new ctor(buf, source.byteOffset, n)
      : new ctor(buf.slice(source.byteOffset, source.byteOffset + source.byteLength));
  return { dtype: e.dtype, shape: [...e.shape], data } as TensorValue;
};

/** Problems a well-formed manifest may still have: sizes, bounds, alignment, duplicates. */
const checkLayout = (m: Manifest): string[] => {
  const problems: string[] = [];
  const names = new Set<string>();
  m.tensors.forEach((e, i) => {
    const at = `tensors[${i}] (${JSON.stringify(e.name)})`;
    if (names.has(e.name)) problems.push(`${at}: duplicate variable name`);
    names.add(e.name);
    if (e.name.length === 0) problems.push(`${at}: empty variable name`);
    const n = numElements(e.shape);
    if (e.dtype === "string") {
      if (e.length < 4 * n) problems.push(`${at}: ${e.length} bytes cannot hold ${n} strings`);
    } else {
      const size = BYTES_PER_ELEMENT[e.dtype];
      if (e.length !== n * size) problems.push(`${at}: ${e.dtype}[${e.shape.join(", ")}] needs ${n * size} bytes, index says ${e.length}`);
      if (e.offset % size !== 0) problems.push(`${at}: offset ${e.offset} is not aligned to ${size} bytes`);
    }
    if (e.offset + e.length > m.dataBytes) problems.push(`${at}: bytes ${e.offset}..${e.offset + e.length} lie beyond the data size ${m.dataBytes}`);
  });
  return problems;
};

const swapBytes = (src: Uint8Array, size: number): Uint8Array => {
  const out = new Uint8Array(src.byteLength);
  for (let i = 0; i < src.byteLength; i += size) for (let j = 0; j < size; j++) out[i + j] = src[i + size - 1 - j] as number;
  return out;
};

const hex = (n: number): string => `0x${n.toString(16).padStart(8, "0")}`;
