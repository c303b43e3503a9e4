/**
 * TFRecord framing on the writing side. Event files are TFRecord files: each record is
 * `uint64 length | uint32 masked_crc32c(length bytes) | payload | uint32 masked_crc32c(payload)`,
 * all little-endian. {@link RecordBuffer} packs many framed records into one contiguous buffer so
 * a writer can hand whole records to the file system in a single write call.
 *
 * @module
 */

import { InvalidArgumentError } from "../errors.js";
import { crc32c, maskCrc32c } from "./maskedCrc32c.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Bytes before the payload: the 8-byte length and its 4-byte masked CRC. */
export const RECORD_HEADER_BYTES = 12;
/** Bytes after the payload: its 4-byte masked CRC. */
export const RECORD_FOOTER_BYTES = 4;

/**
 * A growable buffer of framed records. `append` frames a payload into it; `take` hands out the
 * bytes framed so far (whole records only) and starts over.
 *
 * @example
 * ```ts
 * import type { FileHandle } from "node:fs/promises";
 * import { RecordBuffer } from "./recordWriter.js";
 *
 * declare const handle: FileHandle;
 * declare const payloadA: Uint8Array, payloadB: Uint8Array;
 * const buf = new RecordBuffer();
 * buf.append(payloadA);
 * buf.append(payloadB);
 * await handle.write(buf.take()); // both records, one write
 * ```
 */
export class RecordBuffer {
  private bytes: Uint8Array;
  private view: DataView;
  private used = 0;
  private count = 0;

  private readonly initialBytes: number;

  constructor(initialBytes = 64 * 1024) {
    this.initialBytes = Math.max(64, initialBytes);
    this.bytes = new Uint8Array(this.initialBytes);
    this.view = new DataView(this.bytes.buffer);
  }

  /** The number of records appended since the last {@link take}. */
  get records(): number {
    return this.count;
  }

  /** The number of bytes appended since the last {@link take}. */
  get byteLength(): number {
    return this.used;
  }

  /** Frames `payload` and appends it. */
  append(payload: Uint8Array): void {
    const n = payload.length;
    this.reserve(RECORD_HEADER_BYTES + n + RECORD_FOOTER_BYTES);
    const at = this.used;
    writeHeader(this.view, at, n);
    this.bytes.set(payload, at + RECORD_HEADER_BYTES);
    this.view.setUint32(at + RECORD_HEADER_BYTES + n, maskCrc32c(crc32c(payload)), true);
    this.used = at + RECORD_HEADER_BYTES + n + RECORD_FOOTER_BYTES;
    this.count++;
  }

  /**
   * Returns the framed bytes appended since the last call, which the caller owns (the buffer
   * never writes into them again), and starts over. Returns an empty array if nothing is pending.
   */
  take(): Uint8Array {
    if (this.used === 0) return EMPTY;
    let out: Uint8Array;
    if (this.used <= COPY_LIMIT_BYTES) {
      // The usual case (a few records): copy them out and keep the buffer.
      out = this.bytes.slice(0, this.used);
    } else {
      // A large backlog: hand the buffer over instead of copying it, and start a fresh one.
      out = this.bytes.subarray(0, this.used);
      this.bytes = new Uint8Array(this.initialBytes);
      this.view = new DataView(this.bytes.buffer);
    }
    this.used = 0;
    this.count = 0;
    return out;
  }

  private reserve(extra: number): void {
    const need = this.used + extra;
    if (need <= this.bytes.length) return;
    let size = this.bytes.length * 2;
    while (size < need) size *= 2;
    const grown = new Uint8Array(size);
    grown.set(this.bytes.subarray(0, this.used));
    this.bytes = grown;
    this.view = new DataView(grown.buffer);
  }
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Frames one payload as a standalone TFRecord (header, payload, footer). */
export const frameRecord = (payload: Uint8Array): Uint8Array => {
  const n = payload.length;
  const out = new Uint8Array(RECORD_HEADER_BYTES + n + RECORD_FOOTER_BYTES);
  const view = new DataView(out.buffer);
  writeHeader(view, 0, n);
  out.set(payload, RECORD_HEADER_BYTES);
  view.setUint32(RECORD_HEADER_BYTES + n, maskCrc32c(crc32c(payload)), true);
  return out;
};

/** The framed size of a payload of `payloadBytes` bytes. */
export const framedLength = (payloadBytes: number): number =>
  RECORD_HEADER_BYTES + payloadBytes + RECORD_FOOTER_BYTES;

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const EMPTY = new Uint8Array(0);
/** Up to this size, {@link RecordBuffer.take} copies; above it, it hands its buffer over. */
const COPY_LIMIT_BYTES = 64 * 1024;
const TWO_32 = 2 ** 32;

/**
 * Masked CRCs of the 8 length bytes, by length. Event records repeat the same few lengths, and
 * this saves one native CRC call per record (a third of the framing cost for small records).
 */
const lengthCrcCache = new Map<number, number>();
const LENGTH_CRC_CACHE_LIMIT = 1 << 16;
const lengthScratch = new Uint8Array(8);
const lengthScratchView = new DataView(lengthScratch.buffer);

const writeHeader = (view: DataView, at: number, n: number): void => {
  if (!Number.isSafeInteger(n) || n < 0) {
    throw new InvalidArgumentError(`invalid record length ${n}`);
  }
  view.setUint32(at, n % TWO_32, true);
  view.setUint32(at + 4, Math.floor(n / TWO_32), true);
  view.setUint32(at + 8, maskedLengthCrc(n), true);
};

/**
 * The masked CRC of the 8 little-endian length bytes of a record of `n` payload bytes (a safe
 * integer), cached for small lengths. The reader checks a header's stored CRC against it.
 */
export const maskedLengthCrc = (n: number): number => {
  let crc = lengthCrcCache.get(n);
  if (crc === undefined) {
    lengthScratchView.setUint32(0, n % TWO_32, true);
    lengthScratchView.setUint32(4, Math.floor(n / TWO_32), true);
    crc = maskCrc32c(crc32c(lengthScratch));
    if (n < LENGTH_CRC_CACHE_LIMIT) lengthCrcCache.set(n, crc);
  }
  return crc;
};
