/**
 * The string→string table that a tensor bundle's `.index` file is: LevelDB's table format, as
 * TensorFlow's `core/lib/io` table builder writes it without compression.
 *
 * A table is data blocks, an (empty) metaindex block, an index block and a 48-byte footer.
 * A block holds entries (`varint32 shared | varint32 unshared | varint32 value length |
 * unshared key bytes | value`, keys sharing a prefix with the entry before, except at a restart
 * point), then the restart offsets (fixed32 each) and their count (fixed32); on disk every
 * block is followed by a compression type byte and the masked CRC-32C of the block and that
 * byte. The index block maps a separator key per data block to the block's handle
 * (`varint64 offset | varint64 size`); the footer holds the metaindex and index handles,
 * zero-padded to 40 bytes, then the magic number.
 *
 * The reader takes the whole file in memory (an index is small) and trusts nothing in it: every
 * handle, length, restart offset and varint is checked against the bytes that exist, every
 * block's checksum is verified, keys must strictly increase across the table, data blocks must
 * follow each other without overlap and the keys may not add up to more than 16 times the
 * file's size, so the work is linear in the file's size. A problem is a one-line
 * `DataLossError` naming the file and the byte offset.
 *
 * @module
 */

import { DataLossError, InvalidArgumentError, UnimplementedError } from "../../errors.js";
import { maskedCrc32c } from "../../summary/maskedCrc32c.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** One key/value pair of a table, with where its value lies in the file (for error messages). */
export interface TableEntry {
  readonly key: Uint8Array;
  readonly value: Uint8Array;
  /** The byte offset of `value` in the table's file. */
  readonly valueOffset: number;
}

/** How the builder lays out blocks. */
export interface TableBuildOptions {
  /** A data block is closed once its size reaches this; TensorFlow's bundle writer uses 256 KiB. */
  readonly blockSizeBytes?: number;
  /** Keys between restart points in data blocks (the index block restarts at every key). */
  readonly restartInterval?: number;
}

/** The footer's length: two block handles padded to 40 bytes, then the 8-byte magic. */
const FOOTER_BYTES = 48;
/** The type byte and the masked CRC-32C after every block. */
const BLOCK_TRAILER_BYTES = 5;
/** The table magic number 0xdb4775248b80fb57, as the two little-endian words stored. */
const MAGIC_LO = 0x8b80fb57;
const MAGIC_HI = 0xdb477524;
const DEFAULT_BLOCK_SIZE_BYTES = 256 * 1024;
const DEFAULT_RESTART_INTERVAL = 16;
/**
 * The keys of a table may add up to this many times its file's size (plus {@link KEY_BYTES_SLACK}).
 * A key shares its prefix with the one before, so a few bytes can stand for a long key; with a
 * restart every 16 keys, as TensorFlow writes, keys add up to less than 16 times the entries'
 * bytes. A larger total is a table built to make the reader copy prefixes without end.
 */
const KEY_BYTES_PER_FILE_BYTE = 16;
const KEY_BYTES_SLACK = 1024 * 1024;
const NO_COMPRESSION = 0;
const SNAPPY_COMPRESSION = 1;

/** Where a block lies: `size` excludes its 5-byte trailer. */
interface BlockHandle {
  readonly offset: number;
  readonly size: number;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** A one-line `DataLossError` naming the file and the byte offset of the problem. */
export const dataLossAt = (file: string, offset: number, what: string): DataLossError =>
  new DataLossError(`${file}: at byte ${offset}: ${what}`);

// ---------------------------------------------------------------------------------------------
// operations: writing
// ---------------------------------------------------------------------------------------------

/**
 * Builds a table from `entries`, whose keys must strictly increase bytewise (an
 * `InvalidArgumentError` otherwise), laid out as TensorFlow's table builder does: a data block
 * is closed once its estimated size reaches the block size; each closed block gets an index
 * entry keyed by the shortest separator between its last key and the next block's first key
 * (the last block: the short successor of its last key).
 */
export const buildTable = (entries: Iterable<readonly [Uint8Array, Uint8Array]>, options: TableBuildOptions = {}): Uint8Array => {
  const blockSizeBytes = options.blockSizeBytes ?? DEFAULT_BLOCK_SIZE_BYTES;
  const out = new ByteSink();
  const data = new BlockBuilder(options.restartInterval ?? DEFAULT_RESTART_INTERVAL);
  const index = new BlockBuilder(1);
  let lastKey: Uint8Array | undefined;
  let pending: BlockHandle | undefined;
  for (const [key, value] of entries) {
    if (lastKey !== undefined && compareBytes(key, lastKey) <= 0) {
      throw new InvalidArgumentError(`table keys must strictly increase: ${JSON.stringify(text(key))} after ${JSON.stringify(text(lastKey))}`);
    }
    if (pending !== undefined && lastKey !== undefined) {
      index.add(shortestSeparator(lastKey, key), encodeHandle(pending));
      pending = undefined;
    }
    data.add(key, value);
    lastKey = key;
    if (data.sizeEstimate() >= blockSizeBytes) pending = writeBlock(out, data.finish());
  }
  if (!data.isEmpty()) pending = writeBlock(out, data.finish());
  const metaindex = writeBlock(out, new BlockBuilder(DEFAULT_RESTART_INTERVAL).finish());
  if (pending !== undefined && lastKey !== undefined) index.add(shortSuccessor(lastKey), encodeHandle(pending));
  const indexHandle = writeBlock(out, index.finish());
  const footer = new ByteSink();
  footer.varint(metaindex.offset).varint(metaindex.size).varint(indexHandle.offset).varint(indexHandle.size);
  footer.zeros(FOOTER_BYTES - 8 - footer.length).fixed32(MAGIC_LO).fixed32(MAGIC_HI);
  out.bytes(footer.finish());
  return out.finish();
};

/** Compares two byte strings as the table orders keys (bytewise, a prefix first). */
export const compareBytes = (a: Uint8Array, b: Uint8Array): number => {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const d = (a[i] as number) - (b[i] as number);
    if (d !== 0) return d;
  }
  return a.length - b.length;
};

// ---------------------------------------------------------------------------------------------
// operations: reading
// ---------------------------------------------------------------------------------------------

/**
 * Every entry of the table in `bytes` (the whole file, named `file` in errors), in key order,
 * after verifying the footer, every block's checksum and the table's structure. Throws a
 * one-line `DataLossError` naming `file` and the byte offset of the first problem, or
 * `UnimplementedError` for a Snappy-compressed block (legal in LevelDB tables; TensorFlow's
 * bundle writer never compresses).
 */
export const readTable = (bytes: Uint8Array, file: string): TableEntry[] => {
  const fail = (offset: number, what: string): never => {
    throw dataLossAt(file, offset, what);
  };
  const length = bytes.length;
  if (length < FOOTER_BYTES) fail(0, `file is too short to be an sstable (${length} bytes, the footer alone is ${FOOTER_BYTES})`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const footerAt = length - FOOTER_BYTES;
  if (view.getUint32(length - 8, true) !== MAGIC_LO || view.getUint32(length - 4, true) !== MAGIC_HI) {
    fail(length - 8, "not an sstable (bad magic number)");
  }
  const footer = new Cursor(bytes, footerAt, length - 8, fail);
  const metaindexAt = footer.position;
  const metaindexHandle = footer.handle("metaindex");
  const indexAt = footer.position;
  const indexHandle = footer.handle("index");

  const block = (handle: BlockHandle, what: string, at: number): Uint8Array => {
    const end = handle.offset + handle.size + BLOCK_TRAILER_BYTES;
    if (end > footerAt) {
      fail(at, `bad block handle: the ${what} block (bytes ${handle.offset}..${end} with its trailer) runs past the footer at ${footerAt}`);
    }
    const contents = bytes.subarray(handle.offset, handle.offset + handle.size);
    const type = bytes[handle.offset + handle.size] as number;
    const stored = view.getUint32(handle.offset + handle.size + 1, true);
    const computed = maskedCrc32c(bytes.subarray(handle.offset, handle.offset + handle.size + 1));
    if (stored !== computed) {
      fail(handle.offset + handle.size + 1, `block checksum mismatch in the ${what} block at ${handle.offset}: stored ${hex(stored)}, computed ${hex(computed)}`);
    }
    if (type === SNAPPY_COMPRESSION) {
      throw new UnimplementedError(`${file}: at byte ${handle.offset + handle.size}: the ${what} block is Snappy-compressed, which this reader does not support`);
    }
    if (type !== NO_COMPRESSION) fail(handle.offset + handle.size, `bad block type ${type} of the ${what} block`);
    return contents;
  };

  const budget = { keyBytes: KEY_BYTES_PER_FILE_BYTE * length + KEY_BYTES_SLACK };
  parseBlock(block(metaindexHandle, "metaindex", metaindexAt), metaindexHandle.offset, budget, fail);
  const separators = parseBlock(block(indexHandle, "index", indexAt), indexHandle.offset, budget, fail);
  const entries: TableEntry[] = [];
  let previousSeparator: Uint8Array | undefined;
  let previousEnd = 0;
  for (const sep of separators) {
    const handleCursor = new Cursor(bytes, sep.valueOffset, sep.valueOffset + sep.value.length, fail);
    const handle = handleCursor.handle("data");
    if (!handleCursor.atEnd()) fail(handleCursor.position, "bad block handle: bytes after the data block's handle in the index block");
    if (handle.offset < previousEnd) fail(sep.valueOffset, `bad block handle: the data block at ${handle.offset} overlaps the one before it (which ends at ${previousEnd})`);
    if (previousSeparator !== undefined && compareBytes(sep.key, previousSeparator) <= 0) {
      fail(sep.valueOffset, "bad entry in block: the index block's keys do not increase");
    }
    for (const entry of parseBlock(block(handle, "data", sep.valueOffset), handle.offset, budget, fail)) {
      const last = entries[entries.length - 1];
      if (last !== undefined && compareBytes(entry.key, last.key) <= 0) {
        fail(entry.valueOffset, `bad entry in block: key ${JSON.stringify(text(entry.key))} does not sort after ${JSON.stringify(text(last.key))}`);
      }
      if (previousSeparator !== undefined && compareBytes(entry.key, previousSeparator) <= 0) {
        fail(entry.valueOffset, `bad entry in block: key ${JSON.stringify(text(entry.key))} is not after the previous block's separator`);
      }
      if (compareBytes(entry.key, sep.key) > 0) {
        fail(entry.valueOffset, `bad entry in block: key ${JSON.stringify(text(entry.key))} is after its block's separator in the index`);
      }
      entries.push(entry);
    }
    previousSeparator = sep.key;
    previousEnd = handle.offset + handle.size + BLOCK_TRAILER_BYTES;
  }
  return entries;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/**
 * The entries of one block's contents (without trailer) that starts at `base` in the file.
 * Restart points must start at 0, increase, each mark an entry that shares nothing, and lie
 * inside the entries' area; an entry's lengths must stay inside it; its key is charged to
 * `budget` (see {@link KEY_BYTES_PER_FILE_BYTE}).
 */
const parseBlock = (
  block: Uint8Array,
  base: number,
  budget: { keyBytes: number },
  fail: (offset: number, what: string) => never,
): TableEntry[] => {
  if (block.length < 4) fail(base, `bad block contents: ${block.length} bytes cannot hold the restart count`);
  const view = new DataView(block.buffer, block.byteOffset, block.byteLength);
  const count = view.getUint32(block.length - 4, true);
  const maxCount = Math.floor((block.length - 4) / 4);
  if (count > maxCount) fail(base + block.length - 4, `bad block contents: ${count} restart points run past the block (room for ${maxCount})`);
  const restartsAt = block.length - 4 - 4 * count;
  const restarts: number[] = [];
  for (let i = 0; i < count; i++) {
    const r = view.getUint32(restartsAt + 4 * i, true);
    const previous = restarts[i - 1];
    const valid = previous === undefined ? r === 0 : r > previous && r < restartsAt;
    if (!valid) fail(base + restartsAt + 4 * i, `bad block contents: restart point ${i} is ${r} (entries end at ${restartsAt})`);
    restarts.push(r);
  }
  if (restartsAt > 0 && count === 0) fail(base + block.length - 4, "bad block contents: entries but no restart point");
  const entries: TableEntry[] = [];
  const cursor = new Cursor(block, 0, restartsAt, (offset, what) => fail(base + offset, what));
  let key: Uint8Array = new Uint8Array(0);
  let nextRestart = 0;
  while (!cursor.atEnd()) {
    const at = cursor.position;
    const shared = cursor.varint32("shared key length");
    const unshared = cursor.varint32("unshared key length");
    const valueLength = cursor.varint32("value length");
    const isRestart = restarts[nextRestart] === at;
    if (isRestart) nextRestart++;
    else if ((restarts[nextRestart] ?? Infinity) < at) fail(base + (restarts[nextRestart] as number), "bad block contents: a restart point is not at an entry");
    if (isRestart && shared !== 0) fail(base + at, `bad entry in block: an entry at a restart point shares ${shared} bytes`);
    if (shared > key.length) fail(base + at, `bad entry in block: shares ${shared} bytes with a ${key.length}-byte key`);
    if (unshared + valueLength > restartsAt - cursor.position) {
      fail(base + at, `bad entry in block: ${unshared} key bytes and a ${valueLength}-byte value run past the entries' end at ${base + restartsAt}`);
    }
    budget.keyBytes -= shared + unshared;
    if (budget.keyBytes < 0) fail(base + at, `bad block contents: the keys add up to more than ${KEY_BYTES_PER_FILE_BYTE} times the file's size`);
    const next = new Uint8Array(shared + unshared);
    next.set(key.subarray(0, shared));
    next.set(cursor.take(unshared), shared);
    key = next;
    const valueOffset = base + cursor.position;
    entries.push({ key, value: cursor.take(valueLength), valueOffset });
  }
  if (nextRestart < restarts.length && restartsAt > 0) fail(base + (restarts[nextRestart] as number), "bad block contents: a restart point is not at an entry");
  return entries;
};

/** A bounded reader over `bytes[position, end)`: varints and slices that never pass `end`. */
class Cursor {
  position: number;

  constructor(
    private readonly bytes: Uint8Array,
    start: number,
    private readonly end: number,
    private readonly fail: (offset: number, what: string) => never,
  ) {
    this.position = start;
  }

  atEnd(): boolean {
    return this.position >= this.end;
  }

  /** A varint of at most `maxBytes` bytes whose value is at most 2^53 - 1. */
  private varint(what: string, maxBytes: number): number {
    const at = this.position;
    let value = 0;
    for (let i = 0; i < maxBytes; i++) {
      if (this.position >= this.end) this.fail(at, `truncated varint (${what})`);
      const b = this.bytes[this.position++] as number;
      value += (b & 0x7f) * 2 ** (7 * i);
      if ((b & 0x80) === 0) {
        if (!Number.isSafeInteger(value)) this.fail(at, `varint too large (${what})`);
        return value;
      }
    }
    return this.fail(at, `varint longer than ${maxBytes} bytes (${what})`);
  }

  varint32(what: string): number {
    const at = this.position;
    const v = this.varint(what, 5);
    if (v > 0xffffffff) this.fail(at, `varint32 overflows 32 bits (${what})`);
    return v;
  }

  handle(what: string): BlockHandle {
    const at = this.position;
    const fail = (): never => this.fail(at, `bad block handle (${what})`);
    try {
      return { offset: this.varint(`${what} block offset`, 10), size: this.varint(`${what} block size`, 10) };
    } catch (e) {
      if (e instanceof DataLossError) return fail();
      throw e;
    }
  }

  take(n: number): Uint8Array {
    const out = this.bytes.subarray(this.position, this.position + n);
    this.position += n;
    return out;
  }
}

/** A growable byte buffer for building blocks (and the varint lengths of string tensors). */
export class ByteSink {
  private buf = new Uint8Array(256);
  length = 0;

  private reserve(n: number): void {
    if (this.length + n <= this.buf.length) return;
    const next = new Uint8Array(Math.max(this.buf.length * 2, this.length + n));
    next.set(this.buf.subarray(0, this.length));
    this.buf = next;
  }

  varint(v: number): this {
    this.reserve(10);
    let x = v;
    while (x >= 0x80) {
      this.buf[this.length++] = (x % 0x80) | 0x80;
      x = Math.floor(x / 0x80);
    }
    this.buf[this.length++] = x;
    return this;
  }

  fixed32(v: number): this {
    this.reserve(4);
    new DataView(this.buf.buffer).setUint32(this.length, v >>> 0, true);
    this.length += 4;
    return this;
  }

  bytes(b: Uint8Array): this {
    this.reserve(b.length);
    this.buf.set(b, this.length);
    this.length += b.length;
    return this;
  }

  zeros(n: number): this {
    this.reserve(n);
    this.buf.fill(0, this.length, this.length + n);
    this.length += n;
    return this;
  }

  finish(): Uint8Array {
    return this.buf.slice(0, this.length);
  }
}

/** One block under construction: prefix-compressed entries and their restart points. */
class BlockBuilder {
  private sink = new ByteSink();
  private restarts: number[] = [0];
  private sinceRestart = 0;
  private lastKey: Uint8Array = new Uint8Array(0);

  constructor(private readonly restartInterval: number) {}

  add(key: Uint8Array, value: Uint8Array): void {
    let shared = 0;
    if (this.sinceRestart < this.restartInterval) {
      const n = Math.min(key.length, this.lastKey.length);
      while (shared < n && key[shared] === this.lastKey[shared]) shared++;
    } else {
      this.restarts.push(this.sink.length);
      this.sinceRestart = 0;
    }
    this.sink.varint(shared).varint(key.length - shared).varint(value.length);
    this.sink.bytes(key.subarray(shared)).bytes(value);
    this.lastKey = key;
    this.sinceRestart++;
  }

  isEmpty(): boolean {
    return this.sink.length === 0;
  }

  /** The size the block would have if finished now (TensorFlow's `CurrentSizeEstimate`). */
  sizeEstimate(): number {
    return this.sink.length + 4 * this.restarts.length + 4;
  }

  /** The block's contents; the builder starts over. */
  finish(): Uint8Array {
    for (const r of this.restarts) this.sink.fixed32(r);
    this.sink.fixed32(this.restarts.length);
    const contents = this.sink.finish();
    this.sink = new ByteSink();
    this.restarts = [0];
    this.sinceRestart = 0;
    this.lastKey = new Uint8Array(0);
    return contents;
  }
}

/** Appends a block and its trailer (no compression, masked CRC-32C); returns its handle. */
const writeBlock = (out: ByteSink, contents: Uint8Array): BlockHandle => {
  const handle = { offset: out.length, size: contents.length };
  const withType = new Uint8Array(contents.length + 1);
  withType.set(contents);
  withType[contents.length] = NO_COMPRESSION;
  out.bytes(withType).fixed32(maskedCrc32c(withType));
  return handle;
};

const encodeHandle = (h: BlockHandle): Uint8Array => new ByteSink().varint(h.offset).varint(h.size).finish();

/**
 * A short key `k` with `start <= k < limit` (TensorFlow's and LevelDB's `FindShortestSeparator`):
 * the common prefix plus the first differing byte of `start` incremented, when that stays below
 * `limit`'s byte; `start` unchanged otherwise.
 */
const shortestSeparator = (start: Uint8Array, limit: Uint8Array): Uint8Array => {
  const n = Math.min(start.length, limit.length);
  let i = 0;
  while (i < n && start[i] === limit[i]) i++;
  if (i >= n) return start;
  const b = start[i] as number;
  if (b < 0xff && b + 1 < (limit[i] as number)) {
    const out = start.slice(0, i + 1);
    out[i] = b + 1;
    return out;
  }
  return start;
};

/** A short key `>= key` (`FindShortSuccessor`): the first byte that is not 0xff, incremented, and nothing after it. */
const shortSuccessor = (key: Uint8Array): Uint8Array => {
  for (let i = 0; i < key.length; i++) {
    const b = key[i] as number;
    if (b !== 0xff) {
      const out = key.slice(0, i + 1);
      out[i] = b + 1;
      return out;
    }
  }
  return key;
};

/** A key as text for a message (invalid UTF-8 shows as U+FFFD). */
const text = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("utf8");

const hex = (n: number): string => `0x${n.toString(16).padStart(8, "0")}`;
