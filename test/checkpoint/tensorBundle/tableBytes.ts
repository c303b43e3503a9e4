/**
 * Tables assembled byte by byte from the format's description
 * (shared/reference/tf-checkpoint-format.md), independently of `buildTable`: for golden
 * comparisons and for hostile tables that no builder would make (keys out of order, lying
 * restart arrays, handles past the end), each with valid checksums unless a test breaks them.
 */
import { maskedCrc32c } from "../../../src/summary/maskedCrc32c.js";

/** Bytes from hex, spaces and newlines ignored. */
export const hex = (s: string): Uint8Array => Uint8Array.from(Buffer.from(s.replace(/\s+/g, ""), "hex"));

/** Bytes of a string (UTF-8), or bytes as they are. */
export const bytes = (s: string | Uint8Array): Uint8Array => (typeof s === "string" ? Uint8Array.from(Buffer.from(s, "utf8")) : s);

export const concat = (...parts: (Uint8Array | readonly number[])[]): Uint8Array => Uint8Array.from(Buffer.concat(parts.map((p) => Uint8Array.from(p))));

/** LevelDB's varint (7 bits a byte, low group first). */
export const varint = (n: number): number[] => {
  const out: number[] = [];
  let x = n;
  while (x >= 0x80) {
    out.push((x % 0x80) | 0x80);
    x = Math.floor(x / 0x80);
  }
  out.push(x);
  return out;
};

export const fixed32 = (n: number): number[] => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n >>> 0);
  return [...b];
};

/** A block entry: shared length, unshared length, value length, the unshared key bytes, the value. */
export const entry = (shared: number, unshared: string | Uint8Array, value: string | Uint8Array): Uint8Array => {
  const k = bytes(unshared);
  const v = bytes(value);
  return concat(varint(shared), varint(k.length), varint(v.length), k, v);
};

/** A block's contents: its entries, then the restart offsets and their count (fixed32 each). */
export const blockContents = (entries: readonly Uint8Array[], restarts: readonly number[] = [0]): Uint8Array =>
  concat(...entries, ...restarts.map(fixed32), fixed32(restarts.length));

/** A block on disk: contents, compression type byte, masked CRC-32C of both. */
export const withTrailer = (contents: Uint8Array, type = 0): Uint8Array => {
  const typed = concat(contents, [type]);
  return concat(typed, fixed32(maskedCrc32c(typed)));
};

/** A block handle: varint64 offset, varint64 size. */
export const handle = (offset: number, size: number): Uint8Array => concat(varint(offset), varint(size));

/** The footer: two handles zero-padded to 40 bytes, then the magic 0xdb4775248b80fb57 (low word first). */
export const footer = (metaindex: Uint8Array, index: Uint8Array): Uint8Array => {
  const handles = concat(metaindex, index);
  return concat(handles, new Array<number>(40 - handles.length).fill(0), fixed32(0x8b80fb57), fixed32(0xdb477524));
};

/** The empty metaindex block's contents: no entries, one restart at 0. */
export const EMPTY_BLOCK = blockContents([]);

/**
 * A table of the given data blocks (contents, each with its separator key): the data blocks
 * with trailers, the empty metaindex, an index block restarting at every entry, the footer.
 */
export const assembleTable = (blocks: readonly { readonly contents: Uint8Array; readonly separator: string | Uint8Array }[]): Uint8Array => {
  const parts: Uint8Array[] = [];
  let at = 0;
  const indexEntries: Uint8Array[] = [];
  const restarts: number[] = [];
  let indexAt = 0;
  for (const b of blocks) {
    const e = entry(0, b.separator, handle(at, b.contents.length));
    restarts.push(indexAt);
    indexAt += e.length;
    indexEntries.push(e);
    parts.push(withTrailer(b.contents));
    at += b.contents.length + 5;
  }
  const metaAt = at;
  parts.push(withTrailer(EMPTY_BLOCK));
  at += EMPTY_BLOCK.length + 5;
  const index = blockContents(indexEntries, restarts.length > 0 ? restarts : [0]);
  parts.push(withTrailer(index), footer(handle(metaAt, EMPTY_BLOCK.length), handle(at, index.length)));
  return concat(...parts);
};
