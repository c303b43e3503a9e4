/**
 * The checkpoint files this library writes and reads. Since 0.2.0 a checkpoint at `<prefix>` is
 * TensorFlow's V2 tensor bundle (`<prefix>.index`, `<prefix>.data-00000-of-00001`; see
 * `tensorBundle/`), which `tf.train.load_checkpoint`, `tf.train.Checkpoint.restore` and
 * `tf.compat.v1.train.Saver.restore` read. What a checkpoint carries beyond the variables is
 * stored as more tensors under reserved names, which TensorFlow loads as ordinary tensors and
 * a restore by name or by object graph ignores:
 *
 * | tensor | dtype, shape | what |
 * |---|---|---|
 * | `_MONITORED_SESSION/step` | int64 `[]` | the step the saver recorded (the global step) |
 * | `_MONITORED_SESSION/created_at_ms` | int64 `[]` | the save time, epoch ms, from the saver's clock |
 * | `_CHECKPOINTABLE_OBJECT_GRAPH` | string `[]` | TensorFlow 2's object graph, for a store with object paths (`objectGraph.ts`) |
 *
 * The save time is advisory: one that fails its checksum is replaced by the index's modification
 * time rather than failing the restore (see `recorded`).
 *
 * Tensors start at multiples of 8 bytes (TensorFlow packs them; its reader follows each entry's
 * offset, so padding is legal), so that a restore decodes every numeric tensor in place in one
 * buffer per data file, without a copy. The data holds the variables in the order given, then
 * the reserved tensors; the index lists them by key. The files are written under temporary
 * names, fsynced, and renamed data first, index last: an index on disk means a complete
 * checkpoint. A restore verifies every variable's and the step's checksum before it returns
 * anything; `verifyCheckpoint` verifies every tensor's.
 *
 * Reading takes both formats: the bundle (ours, or one TensorFlow wrote: its step is its
 * `global_step` tensor (TensorFlow 2: `global_step/.ATTRIBUTES/VARIABLE_VALUE`), else the number that ends its prefix, and its time the index's
 * modification time), and version 1 of this library's own format (a JSON manifest; see
 * `BundleFormat.ts`), which releases before 0.2.0 wrote. The index's first byte tells them apart.
 *
 * @module
 */

import { crc32c } from "@node-rs/crc32";
import { open, stat } from "node:fs/promises";
import { dirname } from "node:path";

import { DataLossError, InvalidArgumentError, NotFoundError, UnimplementedError } from "../errors.js";
import type { ObjectPaths } from "../session/Session.js";
import type { TensorValue } from "../session/Tensor.js";
import * as v1 from "./BundleFormat.js";
import { assertValidPath, fsyncDir, settleAll, unlinkIfExists } from "./internal/files.js";
import { TensorBundleReader, type TensorBundleEntry } from "./tensorBundle/TensorBundleReader.js";
import { concatOwned } from "./internal/fileJobs.js";
import type { BundleEntry } from "./tensorBundle/bundleProtos.js";
import { encodePlannedBundle, planTensorBundle, stagePlannedBundle, type BundleTensor, type PlannedTensorBundle } from "./tensorBundle/TensorBundleWriter.js";
import { ObjectGraph, planObjectGraph, VARIABLE_VALUE_SUFFIX, withoutValueSuffix } from "./objectGraph.js";
import { processTempFiles, type TempFileRegistry } from "./TempFileRegistry.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Which files a checkpoint is: TensorFlow's V2 bundle (what this library writes), or this library's version 1 (read only). */
export type CheckpointFormat = "tensorflow-v2" | "monitored-session-v1";

/** Names under this prefix are the checkpoint's own (step, time): no variable may take one. */
export const RESERVED_TENSOR_PREFIX = "_MONITORED_SESSION/";
/** The int64 scalar of the step the saver recorded. */
export const STEP_TENSOR = `${RESERVED_TENSOR_PREFIX}step`;
/** The int64 scalar of the save time, epoch milliseconds. */
export const CREATED_AT_TENSOR = `${RESERVED_TENSOR_PREFIX}created_at_ms`;
/** TensorFlow 2's object graph (a serialized proto in a string tensor): not a variable. */
export const OBJECT_GRAPH_TENSOR = "_CHECKPOINTABLE_OBJECT_GRAPH";

/** Every tensor starts at a multiple of this many bytes (see the module comment). */
const ALIGNMENT_BYTES = 8;

/** What reading a checkpoint yields. */
export interface CheckpointContents {
  /** The step recorded at save time (see {@link CheckpointInfo.step}). */
  readonly step: number;
  /** The save time, epoch milliseconds. */
  readonly createdAtMs: number;
  /**
   * The variables (without the reserved tensors and TensorFlow's object graph), by name. A
   * checkpoint this library wrote with an object graph gives them without the key's
   * `/.ATTRIBUTES/VARIABLE_VALUE`; one TensorFlow wrote gives its keys as they are.
   */
  readonly values: Map<string, TensorValue>;
  /**
   * The object graph of a checkpoint TensorFlow 2 wrote (`tf.train.Checkpoint`), which maps
   * object paths to {@link values}' keys; `restoreInto` restores through it.
   */
  readonly objectGraph?: ObjectGraph | undefined;
}

/** Metadata written with a checkpoint. */
export interface BundleMetadata {
  readonly step: number;
  readonly createdAtMs: number;
  /**
   * The variables' TensorFlow 2 object paths: with them, every variable is keyed
   * `<name>/.ATTRIBUTES/VARIABLE_VALUE` and `_CHECKPOINTABLE_OBJECT_GRAPH` is written (see
   * `objectGraph.ts`).
   */
  readonly objectPaths?: ObjectPaths | undefined;
}

/** One variable of a checkpoint, as its index lists it. */
export interface CheckpointTensorInfo {
  readonly name: string;
  /** The dtype as Python names it (`float32`, `bfloat16`...). */
  readonly dtype: string;
  readonly shape: readonly number[];
  /** Bytes in the data file. */
  readonly sizeBytes: number;
  /** The checksum as stored: TensorFlow's masked CRC-32C, or version 1's plain CRC32C. */
  readonly crc32c: number;
  /** Whether this library reads it (float32, float64, int32, int64, bool, string; not partitioned). */
  readonly supported: boolean;
}

/** What a checkpoint's index says, without reading its variables. */
export interface CheckpointInfo {
  readonly prefix: string;
  readonly format: CheckpointFormat;
  /**
   * The step the saver recorded. A bundle TensorFlow wrote has none: its `global_step` tensor
   * (a scalar integer; TensorFlow 2's `global_step/.ATTRIBUTES/VARIABLE_VALUE`), else the number its prefix ends with (`ckpt-3`: 3), else 0.
   */
  readonly step: number;
  /** The save time, epoch ms (a bundle TensorFlow wrote: its index's modification time). */
  readonly createdAtMs: number;
  /** Bytes of the data files that hold tensors. */
  readonly dataBytes: number;
  /** The variables, sorted by name (without the reserved tensors and TensorFlow's object graph). */
  readonly tensors: readonly CheckpointTensorInfo[];
}

/**
 * A checkpoint whose data and index are written under temporary names, not yet durable or
 * visible. `CheckpointManager` uses it to fsync the checkpoint's files together with the state
 * file's, and to cover all the renames with one directory fsync.
 */
export interface StagedBundle {
  readonly prefix: string;
  readonly info: CheckpointInfo;
  /** `fdatasync`s the data and index files, concurrently. */
  sync(): Promise<void>;
  /**
   * Makes the checkpoint visible: renames the data file and then the index to their final
   * names (replacing an older checkpoint at the same prefix). Call after {@link sync}. Does not
   * fsync the directory: the caller must, before anything relies on the checkpoint being durable.
   */
  publish(): Promise<void>;
  /** Deletes whatever temporary files are left. Never throws. */
  abort(): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** The index path of the checkpoint at `prefix`. */
export const indexPath = v1.indexPath;
/** The (single) data file path of the checkpoint at `prefix`. */
export const dataPath = v1.dataPath;
/** The suffix of the index file. */
export const INDEX_SUFFIX = v1.INDEX_SUFFIX;
/** The suffix of the single data file this library writes. */
export const DATA_SUFFIX = v1.DATA_SUFFIX;

/**
 * Writes `values` as a checkpoint at `prefix`, crash-safely: data and index go to temporary
 * names and are fsynced (concurrently), then renamed (data, then index) and the directory
 * fsynced. Resolves once the checkpoint is durable. Throws `InvalidArgumentError` (naming the
 * variable) for a malformed tensor or a reserved name before touching the disk.
 *
 * `values` must not be mutated until the returned promise settles (its buffers are written in
 * place, without a copy).
 */
export const writeBundle = async (
  prefix: string,
  values: ReadonlyMap<string, TensorValue>,
  meta: BundleMetadata,
  temps: TempFileRegistry = processTempFiles,
): Promise<CheckpointInfo> => {
  const staged = await stageBundle(prefix, values, meta, temps);
  try {
    await staged.sync();
    await staged.publish();
    await fsyncDir(dirname(prefix));
    return staged.info;
  } finally {
    await staged.abort();
  }
};

/**
 * Writes the checkpoint's data and index under temporary names (see {@link StagedBundle}).
 * Throws `InvalidArgumentError` for a malformed tensor or a reserved name before touching the disk.
 */
export const stageBundle = async (
  prefix: string,
  values: ReadonlyMap<string, TensorValue>,
  meta: BundleMetadata,
  temps: TempFileRegistry = processTempFiles,
): Promise<StagedBundle> => stagePlanned(planBundle(prefix, values, meta), temps);

/** A checkpoint laid out (every tensor checked) and not yet checksummed or written: {@link planBundle}. */
export interface PlannedBundle {
  readonly prefix: string;
  readonly plan: PlannedTensorBundle;
  /** What the index will say, from its entries. */
  info(entries: ReadonlyMap<string, BundleEntry>): CheckpointInfo;
}

/** A checkpoint encoded in memory: {@link encodeBundle}. */
export interface EncodedBundle {
  readonly prefix: string;
  readonly dataPath: string;
  readonly indexPath: string;
  /** The data file's bytes, one buffer of its own. */
  readonly data: Uint8Array;
  /** The index file's bytes. */
  readonly index: Uint8Array;
  readonly info: CheckpointInfo;
}

/**
 * Lays out the checkpoint of `values` at `prefix`: the reserved tensors added, TensorFlow 2's
 * keys and object graph where the store gave object paths. Throws `InvalidArgumentError` for a
 * malformed tensor, an empty or reserved name, or metadata that is not a safe integer.
 */
export const planBundle = (prefix: string, values: ReadonlyMap<string, TensorValue>, meta: BundleMetadata): PlannedBundle => {
  assertValidPath(prefix);
  for (const key of ["step", "createdAtMs"] as const) {
    if (!Number.isSafeInteger(meta[key])) throw new InvalidArgumentError(`checkpoint ${key} ${meta[key]} is not a safe integer`);
  }
  for (const name of values.keys()) {
    if (name.length === 0) throw new InvalidArgumentError("a checkpointed variable name must not be empty");
    if (isReserved(name)) throw new InvalidArgumentError(`variable name ${JSON.stringify(name)} is reserved for the checkpoint's own tensors (${RESERVED_TENSOR_PREFIX}…, ${OBJECT_GRAPH_TENSOR}): rename the variable`);
  }
  // With object paths, TensorFlow 2's keys and graph (objectGraph.ts); else the names as they are.
  const planned = meta.objectPaths === undefined ? undefined : planObjectGraph(values.keys(), meta.objectPaths);
  const keyOf = (name: string): string => planned?.keys.get(name) ?? name;
  const nameOf = new Map<string, string>();
  const tensors: (readonly [string, BundleTensor])[] = [];
  for (const [name, value] of values) {
    tensors.push([keyOf(name), value]);
    nameOf.set(keyOf(name), name);
  }
  tensors.push([STEP_TENSOR, int64Scalar(meta.step)], [CREATED_AT_TENSOR, int64Scalar(meta.createdAtMs)]);
  if (planned !== undefined) tensors.push([OBJECT_GRAPH_TENSOR, { dtype: "string", shape: [], data: [planned.graph] }]);
  // Laid out now (every tensor checked before the disk is touched); checksummed when written or encoded.
  const plan = planTensorBundle(tensors, { alignmentBytes: ALIGNMENT_BYTES });
  const info = (entries: ReadonlyMap<string, BundleEntry>): CheckpointInfo => ({
    prefix,
    format: "tensorflow-v2",
    step: meta.step,
    createdAtMs: meta.createdAtMs,
    dataBytes: plan.dataBytes,
    tensors: [...entries]
      .filter(([key]) => !isReserved(key))
      .map(([key, e]) => ({ name: key, dtype: (values.get(nameOf.get(key) as string) as TensorValue).dtype, shape: e.shape, sizeBytes: e.size, crc32c: e.crc32c, supported: true }))
      .sort((a, b) => byName(a.name, b.name)),
  });
  return { prefix, plan, info };
};

/** Checksums a planned checkpoint and encodes its two files in memory (the data file copied into one buffer of its own). */
export const encodeBundle = ({ prefix, plan, info }: PlannedBundle): EncodedBundle => {
  const encoded = encodePlannedBundle(plan);
  return { prefix, dataPath: dataPath(prefix), indexPath: indexPath(prefix), data: concatOwned(encoded.data), index: encoded.index, info: info(encoded.entries) };
};

/** Writes a planned checkpoint's data (checksummed while written) and index under temporary names. */
const stagePlanned = async ({ prefix, plan, info: infoOf }: PlannedBundle, temps: TempFileRegistry): Promise<StagedBundle> => {
  const staged = await stagePlannedBundle(prefix, plan, { fsync: true, temps });
  try {
    const { data: d, index: x, entries } = staged;
    return {
      prefix,
      info: infoOf(entries),
      sync: async () => {
        await settleAll([d.sync(), x.sync()]);
      },
      publish: async () => {
        // An older checkpoint at the same prefix (a re-save of the restored step) keeps its
        // index until the new one replaces it. If the save stops in between, the old index
        // sits beside the new data: identical data (the usual re-save) still verifies, other
        // data fails its checksums (DataLossError). Deleting the old index first would instead
        // make the checkpoint vanish, and a restore silently start over.
        await d.publish();
        await x.publish();
      },
      abort: () => staged.abort(),
    };
  } catch (e) {
    await staged.abort();
    throw e;
  }
};

/**
 * Reads the checkpoint at `prefix` (either format), verifying every variable's checksum before
 * returning anything (the save time is advisory: see the module comment). Numeric tensors view
 * one buffer per data file, which lives as long as any of them. Throws `NotFoundError` for a
 * missing checkpoint, `DataLossError` (naming the file and the offset or the variables) for a
 * corrupt one, and `UnimplementedError` naming a tensor that this library does not hold: a dtype
 * it lacks (float16, bfloat16, int8, complex...), a partitioned tensor, or a string tensor whose
 * bytes are not UTF-8 text.
 */
export const readBundle = async (prefix: string): Promise<CheckpointContents> => {
  assertValidPath(prefix);
  if ((await formatOf(prefix)) === "monitored-session-v1") return v1.readBundle(prefix);
  const reader = await TensorBundleReader.load(prefix);
  const values = await reader.readAll(reader.entries.filter((e) => !isReserved(e.name)).map((e) => e.name));
  const { step, createdAtMs } = await recorded(reader);
  const graph = reader.entry(OBJECT_GRAPH_TENSOR);
  if (graph === undefined) return { step, createdAtMs, values };
  // Ours (it has the step tensor): the variables by name. TensorFlow's: its keys, and the graph.
  if (reader.entry(STEP_TENSOR) !== undefined) return { step, createdAtMs, values: withoutValueSuffix(values) };
  return { step, createdAtMs, values, objectGraph: await readObjectGraph(reader) };
};

/** The bundle's `_CHECKPOINTABLE_OBJECT_GRAPH`, verified and decoded (`DataLossError` if malformed). */
const readObjectGraph = async (reader: TensorBundleReader): Promise<ObjectGraph> => {
  const entry = reader.entry(OBJECT_GRAPH_TENSOR) as TensorBundleEntry;
  const file = reader.dataPath(entry);
  if (entry.dtype !== "string" || entry.shape.length !== 0 || !entry.supported) {
    throw new DataLossError(`${indexPath(reader.prefix)}: ${OBJECT_GRAPH_TENSOR} is ${entry.dtype}[${entry.shape.join(", ")}]${entry.slices > 0 ? ", partitioned" : ""}, not a whole string scalar`);
  }
  const [bytes] = await reader.readStringBytes(OBJECT_GRAPH_TENSOR);
  // The serialized graph follows its length (a varint) and the lengths' checksum (4 bytes).
  return ObjectGraph.decode(bytes as Uint8Array, { file, offset: entry.offset + entry.sizeBytes - (bytes as Uint8Array).length });
};

/**
 * What the index of the checkpoint at `prefix` says (either format), reading no variable: its
 * format, step, time and tensors. Throws as {@link readBundle} does for a missing or corrupt index.
 */
export const readCheckpointInfo = async (prefix: string): Promise<CheckpointInfo> => {
  assertValidPath(prefix);
  if ((await formatOf(prefix)) === "monitored-session-v1") {
    const m = await v1.readManifest(prefix);
    return {
      prefix,
      format: "monitored-session-v1",
      step: m.step,
      createdAtMs: m.createdAtMs,
      dataBytes: m.dataBytes,
      tensors: m.tensors.map((e) => ({ name: e.name, dtype: e.dtype, shape: e.shape, sizeBytes: e.length, crc32c: e.crc32c, supported: true })).sort((a, b) => byName(a.name, b.name)),
    };
  }
  const reader = await TensorBundleReader.open(prefix);
  const { step, createdAtMs } = await recorded(reader);
  const shards = new Map<number, number>();
  for (const e of reader.entries) shards.set(e.shardId, Math.max(shards.get(e.shardId) ?? 0, e.offset + e.sizeBytes));
  return {
    prefix,
    format: "tensorflow-v2",
    step,
    createdAtMs,
    dataBytes: [...shards.values()].reduce((a, b) => a + b, 0),
    tensors: reader.entries.filter((e) => !isReserved(e.name)).map(tensorInfo).sort((a, b) => byName(a.name, b.name)),
  };
};

/**
 * Reads the variables `names` of the checkpoint at `prefix` (either format), each one's checksum
 * verified, without reading the rest of its data file; names the checkpoint does not hold are
 * left out. Throws as {@link readBundle} does; with `unreadable`, a tensor this library does not
 * hold (its `UnimplementedError`) is passed to it and left out instead, and the others are read.
 */
export const readTensors = async (
  prefix: string,
  names: readonly string[],
  unreadable?: (name: string, error: UnimplementedError) => void,
): Promise<Map<string, TensorValue>> => {
  assertValidPath(prefix);
  const out = new Map<string, TensorValue>();
  if ((await formatOf(prefix)) === "tensorflow-v2") {
    const reader = await TensorBundleReader.open(prefix);
    // Ours with an object graph keys a variable `<name>/.ATTRIBUTES/VARIABLE_VALUE`: either is found.
    const suffixed = reader.entry(OBJECT_GRAPH_TENSOR) !== undefined && reader.entry(STEP_TENSOR) !== undefined;
    for (const name of names) {
      if (isReserved(name)) continue;
      const key = reader.entry(name) === undefined && suffixed ? `${name}${VARIABLE_VALUE_SUFFIX}` : name;
      if (reader.entry(key) === undefined) continue;
      try {
        out.set(name, await reader.read(key));
      } catch (e) {
        if (unreadable === undefined || !(e instanceof UnimplementedError)) throw e;
        unreadable(name, e);
      }
    }
    return out;
  }
  const m = await v1.readManifest(prefix);
  const entries = m.tensors.filter((e) => names.includes(e.name));
  if (entries.length === 0) return out;
  const path = dataPath(prefix);
  let fh;
  try {
    fh = await open(path, "r");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") throw new DataLossError(`checkpoint data ${path} is missing (its index exists)`, { cause: e });
    throw e;
  }
  try {
    // Each range is checked against the file before its buffer is allocated: a lying manifest
    // (its checksum is a plain CRC) cannot make this allocate more than the file holds.
    const { size } = await fh.stat();
    for (const e of entries) {
      if (e.offset + e.length > size) throw new DataLossError(`checkpoint data ${path} is truncated: ${JSON.stringify(e.name)} ends at byte ${e.offset + e.length}, the file has ${size}`);
      const bytes = Buffer.alloc(e.length);
      for (let done = 0; done < e.length; ) {
        const { bytesRead } = await fh.read(bytes, done, e.length - done, e.offset + done);
        if (bytesRead === 0) throw new DataLossError(`checkpoint data ${path} is truncated: ${JSON.stringify(e.name)} ends past the file`);
        done += bytesRead;
      }
      if (crc32c(bytes) !== e.crc32c) throw new DataLossError(`checkpoint data ${path} is corrupt: CRC32C mismatch for ${JSON.stringify(e.name)}`);
      out.set(e.name, v1.decodeTensor(bytes, { ...e, offset: 0 }, path));
    }
  } finally {
    await fh.close();
  }
  return out;
};

/**
 * Verifies every checksum of the checkpoint at `prefix` (either format) without keeping its
 * values: every tensor of a bundle, also of a dtype this library does not read (a `bfloat16`
 * tensor TensorFlow wrote verifies as any other), TensorFlow's object graph and the save time
 * included. Throws `NotFoundError` for a missing checkpoint, `DataLossError` for a corrupt one.
 */
export const verifyCheckpoint = async (prefix: string): Promise<void> => {
  assertValidPath(prefix);
  if ((await formatOf(prefix)) === "monitored-session-v1") {
    await v1.readBundle(prefix);
    return;
  }
  const reader = await TensorBundleReader.load(prefix);
  for (const e of reader.entries) await reader.verify(e.name);
};

/** Deletes a checkpoint's files: the index first (so it disappears atomically), then the data. */
export const removeBundle = async (prefix: string): Promise<void> => {
  assertValidPath(prefix);
  await unlinkIfExists(indexPath(prefix));
  await unlinkIfExists(dataPath(prefix));
};

/** Whether `name` is one of the checkpoint's own tensors (never a variable). */
const isReserved = (name: string): boolean => name.startsWith(RESERVED_TENSOR_PREFIX) || name === OBJECT_GRAPH_TENSOR;

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** The format of the checkpoint at `prefix`, from its index's first byte (`{`: version 1's JSON manifest). */
const formatOf = async (prefix: string): Promise<CheckpointFormat> => {
  const path = indexPath(prefix);
  let fh;
  try {
    fh = await open(path, "r");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") throw new NotFoundError(`checkpoint index ${path} not found`, { cause: e });
    throw e;
  }
  try {
    const first = Buffer.alloc(1);
    const { bytesRead } = await fh.read(first, 0, 1, 0);
    if (bytesRead === 0) throw new DataLossError(`checkpoint index ${path} is empty (truncated or corrupt)`);
    return first[0] === 0x7b ? "monitored-session-v1" : "tensorflow-v2";
  } finally {
    await fh.close();
  }
};

/** The step and time a bundle records (see {@link CheckpointInfo}), reading only those scalars. */
const recorded = async (reader: TensorBundleReader): Promise<BundleMetadata> => {
  const step =
    (await scalarOf(reader, STEP_TENSOR)) ??
    (await scalarOf(reader, "global_step")) ??
    (await scalarOf(reader, `global_step${VARIABLE_VALUE_SUFFIX}`)) ??
    numberOfPrefix(reader.prefix) ??
    0;
  // The save time is advisory: one that fails its checksum gives way to the index's time. A
  // re-save of the same step (CheckpointSaverHook saves at the restored step after a restart)
  // stopped between its renames leaves the old index beside the new data: the variables verify,
  // the step is the same, and only the time differs.
  const createdAtMs =
    (await scalarOf(reader, CREATED_AT_TENSOR).catch((e: unknown) => {
      if (e instanceof DataLossError) return undefined;
      throw e;
    })) ?? Math.round((await stat(indexPath(reader.prefix))).mtimeMs);
  return { step, createdAtMs };
};

/** The integer scalar `name` of the bundle, if it has one (a corrupt one throws `DataLossError`). */
const scalarOf = async (reader: TensorBundleReader, name: string): Promise<number | undefined> => {
  const e = reader.entry(name);
  if (e === undefined || !e.supported || e.shape.length !== 0 || (e.dtype !== "int64" && e.dtype !== "int32")) return undefined;
  const v = (await reader.read(name)).data as BigInt64Array | Int32Array;
  const n = Number(v[0]);
  if (!Number.isSafeInteger(n)) throw new DataLossError(`${indexPath(reader.prefix)}: tensor ${JSON.stringify(name)} holds ${String(v[0])}, not a safe integer`);
  return n;
};

/** `ckpt-3` → 3; `undefined` for a prefix without a number at its end. */
const numberOfPrefix = (prefix: string): number | undefined => {
  const m = /-(\d+)$/.exec(prefix);
  const n = m === null ? Number.NaN : Number(m[1]);
  return Number.isSafeInteger(n) ? n : undefined;
};

const tensorInfo = (e: TensorBundleEntry): CheckpointTensorInfo => ({ name: e.name, dtype: e.dtype, shape: e.shape, sizeBytes: e.sizeBytes, crc32c: e.crc32c, supported: e.supported });

const int64Scalar = (n: number): TensorValue => ({ dtype: "int64", shape: [], data: BigInt64Array.of(BigInt(n)) });

const byName = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);
