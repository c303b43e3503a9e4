/**
 * `EventFileTail`: reads an event file incrementally, from where the last read stopped, the way
 * TensorBoard's loaders do while a writer is still appending:
 *
 * - every complete record is handed over once, in order, with its file offset;
 * - a truncated last record is kept and completed by a later read (the writer has not finished
 *   it yet), never reported;
 * - a record whose data CRC fails is reported and skipped (its length is trusted); one whose
 *   length CRC fails is reported, and reading resumes at the next offset that holds a valid record
 *   header. TensorBoard instead stops at the first bad record for good; here one damaged record
 *   costs only itself;
 * - a file whose first bytes are not a record header is not an event file: reported once, and
 *   the tail reads nothing more from it.
 *
 * @module
 */

import { open } from "node:fs/promises";
import { CorruptRecordError, iterateRecords } from "./recordReader.js";
import { maskedLengthCrc, RECORD_FOOTER_BYTES, RECORD_HEADER_BYTES } from "./recordWriter.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Something wrong found in a file's framing. */
export interface TailIssue {
  /** `corruptRecord`: a checksum failed (the record is skipped); `notEventFile`: the file does not start with a record. */
  readonly problem: "corruptRecord" | "notEventFile";
  /** File offset of the bad record. */
  readonly offset: number;
  readonly message: string;
}

/** What one {@link EventFileTail.read} did. */
export interface TailReadResult {
  /** Complete records handed to the callback. */
  readonly records: number;
  /** Bytes read from the file. */
  readonly bytesRead: number;
  /** `true` if the read reached the end of the file (`false`: it stopped at `limitBytes`). */
  readonly atEnd: boolean;
  readonly issues: readonly TailIssue[];
}

/** Options of {@link EventFileTail}. */
export interface EventFileTailOptions {
  /** Bytes read per system call (default 1 MiB). */
  readonly chunkBytes?: number;
}

/** An incremental reader of one event file. */
export class EventFileTail {
  /** The file. */
  readonly path: string;
  private readonly chunkBytes: number;
  /** File offset of `pending[0]`: just past the last complete (or skipped) record. */
  private pos = 0;
  /** Bytes after `pos` read but not yet a whole record. */
  private pending: Uint8Array = new Uint8Array(0);
  /** After a bad length CRC: looking for the next valid header instead of reading records. */
  private scanning = false;
  private sawRecord = false;
  private isDead = false;

  constructor(path: string, options: EventFileTailOptions = {}) {
    this.path = path;
    this.chunkBytes = Math.max(RECORD_HEADER_BYTES, options.chunkBytes ?? DEFAULT_CHUNK_BYTES);
  }

  /** File offset just past the last complete record: where the next read resumes. */
  get offset(): number {
    return this.pos;
  }

  /** Bytes of an incomplete record waiting for the writer (0 if the file ends on a record). */
  get pendingBytes(): number {
    return this.pending.length;
  }

  /** `true` once the file proved not to be an event file; reads do nothing after that. */
  get dead(): boolean {
    return this.isDead;
  }

  /**
   * Reads what was appended since the last read and calls `onRecord` with each complete record
   * (the payload is a view valid only during the call). Reads until the end of the file, or
   * until at least `limitBytes` were read. Rejects with the file system's error (`ENOENT` once
   * the file is deleted); the tail's position is kept, so a later read can retry.
   */
  async read(onRecord: (payload: Uint8Array, offset: number) => void, limitBytes = Number.POSITIVE_INFINITY): Promise<TailReadResult> {
    const issues: TailIssue[] = [];
    let records = 0;
    let bytesRead = 0;
    if (this.isDead) return { records, bytesRead, atEnd: true, issues };
    const fh = await open(this.path, "r");
    try {
      for (;;) {
        const want = Math.max(this.chunkBytes, this.recordNeed() - this.pending.length);
        const buf = new Uint8Array(this.pending.length + want);
        buf.set(this.pending);
        const { bytesRead: n } = await fh.read(buf, this.pending.length, want, this.pos + this.pending.length);
        if (n === 0) return { records, bytesRead, atEnd: true, issues };
        bytesRead += n;
        records += this.consume(buf.subarray(0, this.pending.length + n), onRecord, issues);
        if (this.isDead) return { records, bytesRead, atEnd: true, issues };
        if (bytesRead >= limitBytes) return { records, bytesRead, atEnd: false, issues };
      }
    } finally {
      await fh.close();
    }
  }

  /** The framed size of the record `pending` starts, if its header is there (else 0). */
  private recordNeed(): number {
    const p = this.pending;
    if (this.scanning || p.length < RECORD_HEADER_BYTES) return 0;
    const view = new DataView(p.buffer, p.byteOffset, p.byteLength);
    return RECORD_HEADER_BYTES + view.getUint32(0, true) + view.getUint32(4, true) * 2 ** 32 + RECORD_FOOTER_BYTES;
  }

  /** Hands over every whole record of `data` (which starts at file offset `pos`); keeps the rest. */
  private consume(data: Uint8Array, onRecord: (payload: Uint8Array, offset: number) => void, issues: TailIssue[]): number {
    let records = 0;
    let at = 0;
    if (this.scanning) {
      const next = findHeader(data, 0);
      if (next < 0) return this.keep(data, Math.max(0, data.length - (RECORD_HEADER_BYTES - 1)));
      this.scanning = false;
      at = next;
    }
    const base = this.pos;
    for (;;) {
      try {
        const it = iterateRecords(data, { startOffset: at });
        for (let r = it.next(); ; r = it.next()) {
          if (r.done === true) return records + this.keep(data, r.value.endOffset);
          this.sawRecord = true;
          records++;
          onRecord(r.value.payload, base + r.value.offset);
        }
      } catch (e) {
        if (!(e instanceof CorruptRecordError)) throw e;
        const offset = base + e.offset;
        if (e.part === "length" && offset === 0 && !this.sawRecord) {
          issues.push({ problem: "notEventFile", offset, message: `${this.path} is not an event file: ${e.message}` });
          this.isDead = true;
          return records + this.keep(data, data.length);
        }
        issues.push({ problem: "corruptRecord", offset, message: `${this.path}: ${e.message}; record skipped` });
        if (e.part === "data" && e.recordBytes !== undefined) {
          at = e.offset + e.recordBytes;
          continue;
        }
        const next = findHeader(data, e.offset + 1);
        if (next >= 0) {
          at = next;
          continue;
        }
        this.scanning = true;
        return records + this.keep(data, Math.max(e.offset + 1, data.length - (RECORD_HEADER_BYTES - 1)));
      }
    }
  }

  /** Keeps `data[from..]` as pending and moves `pos` to it. Returns 0 (for the callers' sums). */
  private keep(data: Uint8Array, from: number): number {
    this.pos += from;
    this.pending = data.slice(from);
    return 0;
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const DEFAULT_CHUNK_BYTES = 1 << 20;
/** A header claiming more than this is taken for noise while looking for the next record. */
const MAX_PLAUSIBLE_RECORD_BYTES = 1 << 30;

/** The first offset at or after `from` where a record header with a valid length CRC starts, or -1. */
const findHeader = (data: Uint8Array, from: number): number => {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  for (let i = from; i + RECORD_HEADER_BYTES <= data.length; i++) {
    const n = view.getUint32(i, true);
    if (view.getUint32(i + 4, true) !== 0 || n > MAX_PLAUSIBLE_RECORD_BYTES) continue;
    if (view.getUint32(i + 8, true) === maskedLengthCrc(n)) return i;
  }
  return -1;
};
