/**
 * TFRecord framing on the reading side, with the semantics TensorBoard's readers rely on: every
 * complete record is returned, an incomplete record at the end of the data is a clean stop (the
 * writer may still be writing it, or crashed while writing it), and a checksum mismatch is a
 * `DataLossError` that names the offset of the bad record.
 *
 * @module
 */

import { readFile } from "node:fs/promises";
import { DataLossError, InvalidArgumentError } from "../errors.js";
import { crc32c, maskCrc32c } from "./maskedCrc32c.js";
import { maskedLengthCrc, RECORD_FOOTER_BYTES, RECORD_HEADER_BYTES } from "./recordWriter.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** One record found in the data. */
export interface TfRecord {
  /** Offset of the record's header in the data. */
  readonly offset: number;
  /** The payload (a view into the data, not a copy). */
  readonly payload: Uint8Array;
}

/** Where reading stopped. */
export interface RecordReadEnd {
  /** Offset just past the last complete record: where a later read should resume. */
  readonly endOffset: number;
  /** Bytes after `endOffset` that do not yet form a whole record (0 if the data ends cleanly). */
  readonly truncatedBytes: number;
}

/** Every complete record and where reading stopped. */
export interface RecordReadResult extends RecordReadEnd {
  readonly records: readonly TfRecord[];
}

/**
 * A record whose length CRC or data CRC does not match: a `DataLossError` that says where and
 * which, so that a reader can skip the record (a bad data CRC: the length is trusted) or look
 * for the next record header (a bad length CRC).
 */
export class CorruptRecordError extends DataLossError {
  /** Offset of the bad record's header in the data. */
  readonly offset: number;
  /** Which checksum failed. */
  readonly part: "length" | "data";
  /** The framed size of the bad record (header, payload, footer), when its length CRC held. */
  readonly recordBytes: number | undefined;

  constructor(offset: number, part: "length" | "data", stored: number, computed: number, recordBytes?: number) {
    super(`corrupted record at offset ${offset}: ${part} CRC mismatch (stored ${hex(stored)}, computed ${hex(computed)})`);
    this.offset = offset;
    this.part = part;
    this.recordBytes = recordBytes;
  }
}

/** Options of the readers. */
export interface RecordReadOptions {
  /** Offset to start at (default 0); use a previous `endOffset` to read on. */
  readonly startOffset?: number;
  /** Verify each payload's CRC (default `true`). The length CRC is always verified. */
  readonly checkDataCrc?: boolean;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Yields each complete record in `bytes` in order, then returns where it stopped. Throws
 * {@link CorruptRecordError} (a `DataLossError`) at a record whose length CRC or data CRC does not match; the records before
 * it have already been yielded.
 */
export function* iterateRecords(
  bytes: Uint8Array,
  options: RecordReadOptions = {},
): Generator<TfRecord, RecordReadEnd, undefined> {
  const checkData = options.checkDataCrc ?? true;
  let offset = options.startOffset ?? 0;
  if (!Number.isSafeInteger(offset) || offset < 0 || offset > bytes.length) {
    throw new InvalidArgumentError(`startOffset ${offset} is outside the data (0..${bytes.length})`);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (;;) {
    const left = bytes.length - offset;
    if (left < RECORD_HEADER_BYTES) return { endOffset: offset, truncatedBytes: left };
    const storedLengthCrc = view.getUint32(offset + 8, true);
    const lo = view.getUint32(offset, true);
    const hi = view.getUint32(offset + 4, true);
    // Below 2^32 the 8 length bytes are a function of the length: use the writer's cached CRC.
    const lengthCrc = hi === 0 ? maskedLengthCrc(lo) : maskCrc32c(crc32c(bytes.subarray(offset, offset + 8)));
    if (storedLengthCrc !== lengthCrc) throw new CorruptRecordError(offset, "length", storedLengthCrc, lengthCrc);
    const n = lo + hi * 2 ** 32;
    if (left < RECORD_HEADER_BYTES + n + RECORD_FOOTER_BYTES) {
      return { endOffset: offset, truncatedBytes: left };
    }
    const start = offset + RECORD_HEADER_BYTES;
    const payload = bytes.subarray(start, start + n);
    if (checkData) {
      const stored = view.getUint32(start + n, true);
      const computed = maskCrc32c(crc32c(payload));
      if (stored !== computed) {
        throw new CorruptRecordError(offset, "data", stored, computed, RECORD_HEADER_BYTES + n + RECORD_FOOTER_BYTES);
      }
    }
    yield { offset, payload };
    offset = start + n + RECORD_FOOTER_BYTES;
  }
}

/**
 * Reads every complete record of `bytes`. A truncated tail is not an error: it is reported in
 * `truncatedBytes`. A checksum mismatch throws `DataLossError` naming the record's offset.
 *
 * @example
 * ```ts
 * import { readFile } from "node:fs/promises";
 * import { readRecords } from "./recordReader.js";
 *
 * const path = "runs/exp1/events.out.tfevents.1599759586.host";
 * const { records, truncatedBytes } = readRecords(await readFile(path));
 * ```
 */
export const readRecords = (bytes: Uint8Array, options: RecordReadOptions = {}): RecordReadResult => {
  const records: TfRecord[] = [];
  const it = iterateRecords(bytes, options);
  for (;;) {
    const r = it.next();
    if (r.done === true) return { records, ...r.value };
    records.push(r.value);
  }
};

/** {@link readRecords} over a whole file. */
export const readRecordFile = async (
  path: string,
  options: RecordReadOptions = {},
): Promise<RecordReadResult> => {
  const bytes = await readFile(path);
  try {
    return readRecords(bytes, options);
  } catch (e) {
    if (e instanceof DataLossError) throw new DataLossError(`${path}: ${e.message}`, { cause: e });
    throw e;
  }
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const hex = (n: number): string => `0x${n.toString(16).padStart(8, "0")}`;
