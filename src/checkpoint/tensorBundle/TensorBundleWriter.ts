/**
 * Writes TensorFlow's V2 checkpoint format (the "tensor bundle") as TensorFlow's `BundleWriter`
 * lays it out, so that `tf.train.load_checkpoint(prefix)` reads every tensor: one data shard
 * `<prefix>.data-00000-of-00001` with the tensors' bytes, and `<prefix>.index`, a LevelDB-style
 * table whose empty key holds the header (1 shard, little-endian, producer version 1) and whose
 * other keys, bytewise sorted, hold each tensor's dtype, shape, offset, size and masked CRC-32C.
 *
 * Alignment: tensors are packed back to back (`alignmentBytes` 1), as TensorFlow writes them
 * by default. With the same tensors TensorFlow's own index and ours are then byte-identical,
 * which makes TensorFlow's files a golden reference, and nothing is wasted on padding. Padding
 * is legal (readers follow each entry's offset; the checksums do not cover it) and is kept as
 * an option for a restore that views one large buffer in place, which needs each tensor at a
 * multiple of its element size; the reader here does not need it, as it reads each tensor into
 * a buffer of its own.
 *
 * Tensors are written in key order; strings as TensorFlow stores them (see `stringTensor.ts`),
 * elements given as text in UTF-8, or as raw bytes.
 *
 * @module
 */

import { mkdir } from "node:fs/promises";
import { endianness } from "node:os";
import { dirname } from "node:path";

import { InvalidArgumentError } from "../../errors.js";
import { tensor as checkedTensor, type DType, type TensorValue } from "../../session/Tensor.js";
import { crc32c, maskCrc32c } from "../../summary/maskedCrc32c.js";
import { assertValidPath, fsyncDir, settleAll, stageFile, stageFileWith, writeAll, type StagedFile } from "../internal/files.js";
import { processTempFiles, type TempFileRegistry } from "../TempFileRegistry.js";
import { encodeBundleEntry, encodeBundleHeader, type BundleEntry, type BundleHeader } from "./bundleProtos.js";
import { BYTES_PER_ELEMENT, swapBytes, TF_DATA_TYPE } from "./dtypes.js";
import { bundleDataPath, bundleIndexPath } from "./naming.js";
import { buildTable, compareBytes } from "./sstable.js";
import { encodeStringTensor } from "./stringTensor.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A tensor to write: a {@link TensorValue}, or a string tensor whose elements may be raw bytes. */
export type BundleTensor =
  | TensorValue
  | { readonly dtype: "string"; readonly shape: readonly number[]; readonly data: readonly (string | Uint8Array)[] };

/** Options of {@link TensorBundleWriter}. */
export interface TensorBundleWriterOptions {
  /** Each tensor starts at a multiple of this many bytes (a power of two); 1, TensorFlow's default, packs them. */
  readonly alignmentBytes?: number;
  /**
   * fsync both files before they are renamed into place, and their directory after (default
   * `true`). TensorFlow's own writer does not fsync; `false` writes as it does.
   */
  readonly fsync?: boolean;
  /** Where the temporary files are registered (for the checkpoint directory's cleanup). */
  readonly temps?: TempFileRegistry;
}

/** A bundle in memory: the index file, and the data file as chunks. */
export interface EncodedTensorBundle {
  readonly index: Uint8Array;
  /** The data file's bytes: the tensors' own buffers (no copy where possible) and padding. */
  readonly data: readonly Uint8Array[];
  readonly dataBytes: number;
  /** Each tensor's entry, in key order. */
  readonly entries: ReadonlyMap<string, BundleEntry>;
}

/** The header TensorFlow's `BundleWriter` writes: one shard, little-endian, producer 1. */
const HEADER: BundleHeader = { numShards: 1, endianness: "little", version: { producer: 1, minConsumer: 0, badConsumers: [] } };
/** TensorFlow's bundle writer closes an index block at 256 KiB. */
const INDEX_BLOCK_BYTES = 256 * 1024;
const MAX_RANK = 254;
const LITTLE_ENDIAN_HOST = endianness() === "LE";
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Collects tensors and writes them as a TensorFlow V2 bundle at a prefix, like TensorFlow's
 * `BundleWriter` (`add`, then `finish`).
 *
 * @example
 * ```ts
 * import { tensor } from "monitored-session";
 * import { TensorBundleWriter } from "monitored-session/checkpoint";
 *
 * const writer = new TensorBundleWriter("/tmp/ckpt/model.ckpt-1");
 * writer.add("dense/kernel", tensor("float32", [2, 2], Float32Array.of(1, 2, 3, 4)));
 * writer.add("global_step", tensor("int64", [], BigInt64Array.of(1n)));
 * await writer.finish(); // then, in Python: tf.train.load_checkpoint("/tmp/ckpt/model.ckpt-1")
 * ```
 */
export class TensorBundleWriter {
  private readonly tensors = new Map<string, BundleTensor>();
  private finished = false;

  /** A writer of the bundle at `prefix` (`<prefix>.index`, `<prefix>.data-00000-of-00001`). */
  constructor(
    readonly prefix: string,
    private readonly options: TensorBundleWriterOptions = {},
  ) {
    assertValidPath(prefix);
    alignment(options);
  }

  /**
   * Adds a tensor under `name`. Throws `InvalidArgumentError` for an empty or repeated name, a
   * malformed tensor, or a string that UTF-8 cannot hold exactly. The tensor's buffer is
   * written in place at {@link finish}: do not change it before.
   */
  add(name: string, tensor: BundleTensor): this {
    if (this.finished) throw new InvalidArgumentError("the bundle is finished: nothing can be added");
    if (this.tensors.has(name)) throw new InvalidArgumentError(`Adding duplicate key ${JSON.stringify(name)}`);
    checkTensor(name, tensor);
    this.tensors.set(name, tensor);
    return this;
  }

  /**
   * Writes the data file and then the index, each under a temporary name renamed into place
   * (with `fsync`: both made durable first), so an index on disk means a complete bundle.
   */
  async finish(): Promise<void> {
    if (this.finished) throw new InvalidArgumentError("the bundle is already finished");
    this.finished = true;
    const bundle = encodeTensorBundle(this.tensors, { alignmentBytes: alignment(this.options) });
    await writeFiles(this.prefix, bundle, this.options.fsync ?? true, this.options.temps ?? processTempFiles);
  }
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Encodes `tensors` as a bundle in memory (the index, and the data file as chunks). Throws
 * `InvalidArgumentError` as {@link TensorBundleWriter.add} does.
 */
export const encodeTensorBundle = (
  tensors: Iterable<readonly [string, BundleTensor]>,
  options: { readonly alignmentBytes?: number } = {},
): EncodedTensorBundle => {
  const align = alignment(options);
  const named: { name: string; key: Uint8Array; tensor: BundleTensor }[] = [];
  for (const [name, tensor] of tensors) {
    checkTensor(name, tensor);
    named.push({ name, key: Buffer.from(name, "utf8"), tensor });
  }
  // The table orders keys by their UTF-8 bytes, which is not JavaScript's UTF-16 order.
  named.sort((a, b) => compareBytes(a.key, b.key));
  const data: Uint8Array[] = [];
  const entries = new Map<string, BundleEntry>();
  const rows: (readonly [Uint8Array, Uint8Array])[] = [[new Uint8Array(0), encodeBundleHeader(HEADER)]];
  let offset = 0;
  for (let i = 0; i < named.length; i++) {
    const { name, key, tensor } = named[i] as (typeof named)[number];
    if (i > 0 && compareBytes(key, (named[i - 1] as (typeof named)[number]).key) === 0) {
      throw new InvalidArgumentError(`Adding duplicate key ${JSON.stringify(name)}`);
    }
    const pad = (align - (offset % align)) % align;
    if (pad > 0) {
      data.push(new Uint8Array(pad));
      offset += pad;
    }
    const { bytes, crc } = tensorBytes(tensor);
    data.push(...bytes);
    const size = bytes.reduce((n, b) => n + b.length, 0);
    const entry: BundleEntry = {
      dtypeCode: TF_DATA_TYPE[tensor.dtype],
      shape: [...tensor.shape],
      shardId: 0,
      offset,
      size,
      crc32c: maskCrc32c(crc),
      slices: 0,
    };
    entries.set(name, entry);
    rows.push([key, encodeBundleEntry(entry)]);
    offset += size;
  }
  return { index: buildTable(rows, { blockSizeBytes: INDEX_BLOCK_BYTES }), data, dataBytes: offset, entries };
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const alignment = (options: { readonly alignmentBytes?: number }): number => {
  const a = options.alignmentBytes ?? 1;
  if (!Number.isInteger(a) || a < 1 || a > 2 ** 30 || (a & (a - 1)) !== 0) {
    throw new InvalidArgumentError(`alignmentBytes must be a power of two, got ${a}`);
  }
  return a;
};

const checkTensor = (name: string, tensor: BundleTensor): void => {
  if (name.length === 0) throw new InvalidArgumentError("a tensor's name must not be empty (the empty key holds the bundle's header)");
  if (LONE_SURROGATE.test(name)) throw new InvalidArgumentError(`tensor name ${JSON.stringify(name)} is not well-formed Unicode (lone surrogate)`);
  const where = `tensor ${JSON.stringify(name)}`;
  const { dtype, shape, data } = tensor as { dtype: DType; shape: readonly number[]; data: unknown };
  if (!Object.hasOwn(TF_DATA_TYPE, dtype)) throw new InvalidArgumentError(`${where} has unknown dtype ${String(dtype)}`);
  if (!Array.isArray(shape) || shape.length > MAX_RANK || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    throw new InvalidArgumentError(`${where} has invalid shape [${String(shape)}]`);
  }
  const n = shape.reduce((a, b) => a * b, 1);
  if (!Number.isSafeInteger(n)) throw new InvalidArgumentError(`${where} has too many elements (shape [${shape.join(", ")}])`);
  if (dtype !== "string") {
    // The storage and the element count, as every tensor of this library is checked.
    try {
      checkedTensor<DType>(dtype, shape, data as TensorValue["data"]);
    } catch (e) {
      throw new InvalidArgumentError(`${where}: ${(e as Error).message}`);
    }
    return;
  }
  if (!Array.isArray(data)) throw new InvalidArgumentError(`${where} has dtype string but its data is not an array`);
  data.forEach((s: unknown, i) => {
    if (typeof s === "string") {
      if (LONE_SURROGATE.test(s)) throw new InvalidArgumentError(`${where} element ${i} is not well-formed Unicode (lone surrogate); UTF-8 cannot store it exactly`);
    } else if (!(s instanceof Uint8Array)) {
      throw new InvalidArgumentError(`${where} element ${i} is neither a string nor a Uint8Array`);
    }
  });
  if (data.length !== n) throw new InvalidArgumentError(`${where} has shape [${shape.join(", ")}] (${n} elements) but ${data.length} elements`);
};

/** A tensor's bytes as stored in the data file (little-endian), and their CRC-32C (unmasked). */
const tensorBytes = (tensor: BundleTensor): { bytes: Uint8Array[]; crc: number } => {
  if (tensor.dtype === "string") {
    return encodeStringTensor((tensor.data as readonly (string | Uint8Array)[]).map((s) => (typeof s === "string" ? Buffer.from(s, "utf8") : s)));
  }
  const data = tensor.data as Exclude<TensorValue["data"], readonly string[]>;
  const view = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const bytes = LITTLE_ENDIAN_HOST ? view : swapBytes(view, BYTES_PER_ELEMENT[tensor.dtype]);
  return { bytes: [bytes], crc: crc32c(bytes) };
};

/** Data file, then index: each under a temporary name, (fsynced,) renamed into place. */
const writeFiles = async (prefix: string, bundle: EncodedTensorBundle, fsync: boolean, temps: TempFileRegistry): Promise<void> => {
  const dir = dirname(prefix);
  const created = await mkdir(dir, { recursive: true });
  if (fsync && created !== undefined) await fsyncDir(dirname(created));
  const finalData = bundleDataPath(prefix);
  // Between the two renames the data file has no index; cleanup must not take it for a leftover.
  temps.hold(finalData);
  let data: StagedFile | undefined;
  let index: StagedFile | undefined;
  try {
    data = (await stageFileWith(finalData, (fh) => writeAll(fh, bundle.data, 0), temps)).staged;
    index = await stageFile(bundleIndexPath(prefix), bundle.index, temps);
    if (fsync) await settleAll([data.sync(), index.sync()]);
    await data.publish();
    await index.publish();
    if (fsync) await fsyncDir(dir);
  } finally {
    await Promise.all([data?.abort(), index?.abort()]);
    temps.release(finalData);
  }
};
