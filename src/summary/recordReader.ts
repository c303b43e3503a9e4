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
    super(crcMismatch(offset, part, stored, computed));
    this.offset = offset;
    this.part = part;
    this.recordBytes = recordBytes;
  }
}

/**
 * The most payload bytes a record may claim before the event readers (`EventFileTail`,
 * `readEvents`, the board) take its header for corrupt: 256 MiB. TensorFlow's writers never come
 * near it (an event is a few bytes to a few MiB); a header claiming more is damage, or a hostile
 * file, and believing it would mean allocating what it claims.
 */
export const DEFAULT_MAX_RECORD_BYTES = 256 * 1024 * 1024;

/** The largest `maxRecordBytes` a reader takes (1 GiB): one read of a record stays below Node's 2 GiB per call. */
export const MAX_RECORD_BYTES_LIMIT = 1024 * 1024 * 1024;

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

/**
 * The payload length the record header at `at` of `view` claims, if its length CRC holds and the
 * length is at most `maxRecordBytes`; -1 if not.
 */
export const checkedLength = (view: DataView, at: number, maxRecordBytes: number): number => {
  // A length of 2^32 or more (its high word not 0) is past every limit.
  if (view.getUint32(at + 4, true) !== 0) return -1;
  const n = view.getUint32(at, true);
  return n <= maxRecordBytes && view.getUint32(at + 8, true) === maskedLengthCrc(n) ? n : -1;
};

/**
 * The first offset at or after `from` where a record starts whose header's length CRC holds,
 * whose payload is at most `maxRecordBytes`, and whose data CRC holds; -1 if there is none. With
 * `complete` false (more bytes may follow), a header that passes the first two checks but whose
 * payload runs past the end of `bytes` is returned too: the caller verifies it once its bytes
 * are there. What a reader looks for after a bad header: a false start needs both CRCs to pass.
 */
export const findRecord = (bytes: Uint8Array, from: number, maxRecordBytes: number, complete: boolean): number => {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let i = from; i + RECORD_HEADER_BYTES <= bytes.length; i++) {
    const n = checkedLength(view, i, maxRecordBytes);
    if (n < 0) continue;
    const end = i + RECORD_HEADER_BYTES + n;
    if (end + RECORD_FOOTER_BYTES > bytes.length) {
      if (complete) continue;
      return i;
    }
    if (view.getUint32(end, true) === maskCrc32c(crc32c(bytes.subarray(i + RECORD_HEADER_BYTES, end)))) return i;
  }
  return -1;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const hex = (n: number): string => `0x${n.toString(16).padStart(8, "0")}`;

/** The message of a {@link CorruptRecordError}, for readers that report it without throwing. */
export const crcMismatch = (offset: number, part: "length" | "data", stored: number, computed: number): string =>
  `corrupted record at offset ${offset}: ${part} CRC mismatch (stored ${hex(stored)}, computed ${hex(computed)})`;
