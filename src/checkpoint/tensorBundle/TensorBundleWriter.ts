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
 * multiple of its element size (`TensorBundleReader.load` decodes such tensors without a copy,
 * and copies the others; `BundleSaver` writes with 8).
 *
 * Tensors are written in the order they are added (as TensorFlow's `BundleWriter` appends them),
 * listed in the index by key; strings as TensorFlow stores them (see `stringTensor.ts`),
 * elements given as text in UTF-8, or as raw bytes.
 *
 * @module
 */

import { mkdir, type FileHandle } from "node:fs/promises";
import { endianness } from "node:os";
import { dirname } from "node:path";

import { InvalidArgumentError } from "../../errors.js";
import { tensor as checkedTensor, type DType, type TensorValue } from "../../session/Tensor.js";
import { extendCrc32c, maskCrc32c } from "../../summary/maskedCrc32c.js";
import { assertValidPath, fsyncDir, mkdirDurable, settleAll, stageFile, stageFileWith, writeAll, type StagedFile } from "../internal/files.js";
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
/** Bytes per write of {@link writePlannedData}. */
const WRITE_BATCH_BYTES = 8 * 1024 * 1024;
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
    const plan = planTensorBundle(this.tensors, { alignmentBytes: alignment(this.options) });
    await writeFiles(this.prefix, plan, this.options.fsync ?? true, this.options.temps ?? processTempFiles);
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
): EncodedTensorBundle => encodePlannedBundle(planTensorBundle(tensors, options));

/** Encodes a planned bundle in memory (see {@link encodeTensorBundle}): each tensor checksummed, then the index. */
export const encodePlannedBundle = (plan: PlannedTensorBundle): EncodedTensorBundle => {
  const crcs = new Map<string, number>();
  for (const t of plan.tensors) crcs.set(t.name, t.crc ?? t.bytes.reduce((crc, b) => extendCrc32c(crc, b), 0));
  const { index, entries } = plan.index(crcs);
  return { index, data: plan.tensors.flatMap((t) => (t.padding === 0 ? t.bytes : [new Uint8Array(t.padding), ...t.bytes])), dataBytes: plan.dataBytes, entries };
};

/** A planned bundle's data and index, written under temporary names (see {@link stagePlannedBundle}). */
export interface StagedPlannedBundle {
  readonly data: StagedFile;
  readonly index: StagedFile;
  /** The index's entries by tensor name. */
  readonly entries: ReadonlyMap<string, BundleEntry>;
  /** Removes what is still staged and releases the data file's name (after publishing: only the name). */
  abort(): Promise<void>;
}

/**
 * Writes a planned bundle's data (checksummed while written) and then its index under temporary
 * names: neither synced nor visible yet. The data file's final name is held in `temps` until
 * `abort` (between the two renames it has no index, and a cleanup must not take it for a
 * leftover). With `fsync`, a directory it creates is made durable in its parent.
 */
export const stagePlannedBundle = async (
  prefix: string,
  plan: PlannedTensorBundle,
  { fsync, temps }: { readonly fsync: boolean; readonly temps: TempFileRegistry },
): Promise<StagedPlannedBundle> => {
  if (fsync) await mkdirDurable(dirname(prefix));
  else await mkdir(dirname(prefix), { recursive: true });
  const finalData = bundleDataPath(prefix);
  temps.hold(finalData);
  let data: StagedFile | undefined;
  let index: StagedFile | undefined;
  const abort = async (): Promise<void> => {
    await Promise.all([data?.abort(), index?.abort()]);
    temps.release(finalData);
  };
  try {
    const written = await stageFileWith(finalData, (fh) => writePlannedData(fh, plan), temps);
    data = written.staged;
    const built = plan.index(written.result);
    index = await stageFile(bundleIndexPath(prefix), built.index, temps);
    return { data, index, entries: built.entries, abort };
  } catch (e) {
    await abort();
    throw e;
  }
};

/** One tensor of a {@link PlannedTensorBundle}, in data order (the order the tensors were given). */
export interface PlannedTensor {
  readonly name: string;
  /** Zero bytes before it (alignment). */
  readonly padding: number;
  /** Where its bytes start in the data file. */
  readonly offset: number;
  /** Its bytes as stored (views of the tensor's own buffer where possible). */
  readonly bytes: readonly Uint8Array[];
  /**
   * Its unmasked CRC-32C when it is not that of {@link bytes} (a string tensor's covers its
   * lengths as uint32s, not as stored): known already. `undefined`: the CRC-32C of its bytes,
   * for the writer to compute (while it writes them, say).
   */
  readonly crc: number | undefined;
}

/** A bundle laid out, its index still to be made from the tensors' checksums. */
export interface PlannedTensorBundle {
  /** In data order: the order they were given (the index lists them by key). */
  readonly tensors: readonly PlannedTensor[];
  readonly dataBytes: number;
  /** The index file and the entries, from each tensor's unmasked CRC-32C by name (a missing one throws). */
  index(crcs: ReadonlyMap<string, number>): { readonly index: Uint8Array; readonly entries: ReadonlyMap<string, BundleEntry> };
}

/**
 * Lays `tensors` out as a bundle without checksumming their bytes, so that a writer can compute
 * each checksum while it writes (no pass over the bytes before the first write). Throws
 * `InvalidArgumentError` as {@link TensorBundleWriter.add} does.
 */
export const planTensorBundle = (tensors: Iterable<readonly [string, BundleTensor]>, options: { readonly alignmentBytes?: number } = {}): PlannedTensorBundle => {
  const align = alignment(options);
  const named: { name: string; key: Uint8Array; tensor: BundleTensor }[] = [];
  for (const [name, tensor] of tensors) {
    checkTensor(name, tensor);
    named.push({ name, key: Buffer.from(name, "utf8"), tensor });
  }
  // The data in the order given, as TensorFlow's BundleWriter appends each tensor as it is added.
  const planned: (PlannedTensor & { readonly key: Uint8Array; readonly size: number; readonly tensor: BundleTensor })[] = [];
  const seen = new Set<string>();
  let offset = 0;
  for (const { name, key, tensor } of named) {
    // Well-formed names (lone surrogates are refused) are equal exactly when their UTF-8 keys are.
    if (seen.has(name)) throw new InvalidArgumentError(`Adding duplicate key ${JSON.stringify(name)}`);
    seen.add(name);
    const padding = (align - (offset % align)) % align;
    offset += padding;
    const { bytes, crc } = tensorBytes(tensor);
    const size = bytes.reduce((n, b) => n + b.length, 0);
    planned.push({ name, key, tensor, padding, offset, bytes, crc, size });
    offset += size;
  }
  // The table orders keys by their UTF-8 bytes, which is not JavaScript's UTF-16 order.
  const byKey = [...planned].sort((a, b) => compareBytes(a.key, b.key));
  return {
    tensors: planned,
    dataBytes: offset,
    index: (crcs) => {
      const entries = new Map<string, BundleEntry>();
      const rows: (readonly [Uint8Array, Uint8Array])[] = [[new Uint8Array(0), encodeBundleHeader(HEADER)]];
      for (const t of byKey) {
        const crc = crcs.get(t.name);
        if (crc === undefined) throw new InvalidArgumentError(`no checksum for tensor ${JSON.stringify(t.name)}`);
        const entry: BundleEntry = { dtypeCode: TF_DATA_TYPE[t.tensor.dtype], shape: [...t.tensor.shape], shardId: 0, offset: t.offset, size: t.size, crc32c: maskCrc32c(crc), slices: 0 };
        entries.set(t.name, entry);
        rows.push([t.key, encodeBundleEntry(entry)]);
      }
      return { index: buildTable(rows, { blockSizeBytes: INDEX_BLOCK_BYTES }), entries };
    },
  };
};

/**
 * Writes the data file of `plan` to `fh` from offset 0: the tensors' bytes and the padding, in
 * batches of 8 MiB, each batch's checksums computed while the batch is being written (so the
 * bytes are read once, the CRC overlaps the I/O, and the event loop turns between batches).
 * Resolves with every tensor's unmasked CRC-32C, for {@link PlannedTensorBundle.index}.
 */
const writePlannedData = async (fh: FileHandle, plan: PlannedTensorBundle): Promise<Map<string, number>> => {
  const crcs = new Map<string, number>();
  for (const t of plan.tensors) crcs.set(t.name, t.crc ?? 0);
  let batch: Uint8Array[] = [];
  let checksummed: { readonly name: string; readonly bytes: Uint8Array }[] = [];
  let batchBytes = 0;
  let position = 0;
  const flush = async (): Promise<void> => {
    if (batchBytes === 0) return;
    const writing = writeAll(fh, batch, position);
    for (const c of checksummed) crcs.set(c.name, extendCrc32c(crcs.get(c.name) as number, c.bytes));
    await writing;
    position += batchBytes;
    batch = [];
    checksummed = [];
    batchBytes = 0;
  };
  for (const t of plan.tensors) {
    if (t.padding > 0) {
      batch.push(new Uint8Array(t.padding));
      batchBytes += t.padding;
    }
    for (const b of t.bytes) {
      for (let at = 0; at < b.length; at += WRITE_BATCH_BYTES) {
        const piece = at === 0 && b.length <= WRITE_BATCH_BYTES ? b : b.subarray(at, Math.min(b.length, at + WRITE_BATCH_BYTES));
        batch.push(piece);
        if (t.crc === undefined) checksummed.push({ name: t.name, bytes: piece });
        batchBytes += piece.length;
        if (batchBytes >= WRITE_BATCH_BYTES) await flush();
      }
    }
  }
  await flush();
  return crcs;
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

/** A tensor's bytes as stored in the data file (little-endian), and a string tensor's CRC-32C (unmasked; see {@link PlannedTensor.crc}). */
const tensorBytes = (tensor: BundleTensor): { bytes: Uint8Array[]; crc: number | undefined } => {
  if (tensor.dtype === "string") {
    return encodeStringTensor((tensor.data as readonly (string | Uint8Array)[]).map((s) => (typeof s === "string" ? Buffer.from(s, "utf8") : s)));
  }
  const data = tensor.data as Exclude<TensorValue["data"], readonly string[]>;
  const view = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  return { bytes: [LITTLE_ENDIAN_HOST ? view : swapBytes(view, BYTES_PER_ELEMENT[tensor.dtype])], crc: undefined };
};

/** Data file, then index: each under a temporary name, (fsynced,) renamed into place. */
const writeFiles = async (prefix: string, plan: PlannedTensorBundle, fsync: boolean, temps: TempFileRegistry): Promise<void> => {
  const staged = await stagePlannedBundle(prefix, plan, { fsync, temps });
  try {
    if (fsync) await settleAll([staged.data.sync(), staged.index.sync()]);
    await staged.data.publish();
    await staged.index.publish();
    if (fsync) await fsyncDir(dirname(prefix));
  } finally {
    await staged.abort();
  }
};
