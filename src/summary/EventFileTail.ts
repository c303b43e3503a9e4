/**
 * `EventFileTail`: reads an event file incrementally, from where the last read stopped, the way
 * TensorBoard's loaders do while a writer is still appending:
 *
 * - every complete record is handed over once, in order, with its file offset;
 * - a truncated last record is kept and completed by a later read (the writer has not finished
 *   it yet), never reported — unless the file is read as complete (`growing: false`): then a
 *   record that runs past the end of the file is corrupt;
 * - a record whose length CRC or data CRC fails, or whose length is more than `maxRecordBytes`,
 *   is reported, and reading resumes at the next offset where a whole record frames and both its
 *   CRCs hold (a damaged length is not trusted, so the record after it is found where it is).
 *   TensorBoard instead stops at the first bad record for good; here one damaged record costs
 *   only itself;
 * - a file whose first bytes are not a record header is not an event file: reported once, and
 *   the tail reads nothing more from it.
 *
 * No file makes a read allocate more than the file holds past the tail's position, nor more
 * than one record of `maxRecordBytes` and a chunk: a claimed length is allocated only once the
 * file holds that many bytes. Each problem is reported once (the tail's position moves past it),
 * and no bytes make it loop.
 *
 * @module
 */

import { open } from "node:fs/promises";
import { InvalidArgumentError } from "../errors.js";
import { crc32c, maskCrc32c } from "./maskedCrc32c.js";
import { checkedLength, crcMismatch, DEFAULT_MAX_RECORD_BYTES, findRecord, MAX_RECORD_BYTES_LIMIT } from "./recordReader.js";
import { RECORD_FOOTER_BYTES, RECORD_HEADER_BYTES } from "./recordWriter.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Something wrong found in a file's framing. */
export interface TailIssue {
  /**
   * `corruptRecord`: a checksum failed, or the header claims more bytes than the limit (or, in
   * a complete file, than the file holds); the record is skipped. `notEventFile`: the file does
   * not start with a record.
   */
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
  /**
   * The most payload bytes a record may claim (default {@link DEFAULT_MAX_RECORD_BYTES}, 256 MiB;
   * at most 1 GiB). A header claiming more is corrupt: reported, and skipped.
   */
  readonly maxRecordBytes?: number;
  /**
   * Whether the file may still grow (default `true`): a record that runs past the end of the file
   * is a writer still writing it, and waits for its bytes. `false` reads the file as complete:
   * such a record is corrupt (truncated, or a damaged length), reported and skipped.
   */
  readonly growing?: boolean;
}

/** An incremental reader of one event file. */
export class EventFileTail {
  /** The file. */
  readonly path: string;
  private readonly chunkBytes: number;
  private readonly maxRecordBytes: number;
  private readonly growing: boolean;
  /** File offset of `pending[0]`: just past the last complete (or skipped) record. */
  private pos = 0;
  /** Bytes after `pos` read but not yet a whole record. */
  private pending: Uint8Array = new Uint8Array(0);
  /** After a bad header: looking for the next whole record whose CRCs hold, instead of reading records. */
  private scanning = false;
  private sawRecord = false;
  private isDead = false;

  /** Throws `InvalidArgumentError` for a `maxRecordBytes` that is not an integer from 1 to 1 GiB. */
  constructor(path: string, options: EventFileTailOptions = {}) {
    this.path = path;
    this.chunkBytes = Math.max(RECORD_HEADER_BYTES, options.chunkBytes ?? DEFAULT_CHUNK_BYTES);
    this.maxRecordBytes = checkedMaxRecordBytes(options.maxRecordBytes);
    this.growing = options.growing ?? true;
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
      // Reads stop at the size the file has now: nothing is allocated for bytes not written yet,
      // whatever a header claims.
      const size = (await fh.stat()).size;
      for (;;) {
        const from = this.pos + this.pending.length;
        const want = Math.min(size - from, Math.max(this.chunkBytes, this.recordNeed() - this.pending.length));
        let n = 0;
        let buf = this.pending;
        if (want > 0) {
          buf = new Uint8Array(this.pending.length + want);
          buf.set(this.pending);
          n = (await fh.read(buf, this.pending.length, want, from)).bytesRead;
        }
        if (n === 0) {
          // The end of a complete file: what is left is judged as it is.
          if (!this.growing && this.pending.length > 0) records += this.consume(this.pending, onRecord, issues, true);
          return { records, bytesRead, atEnd: true, issues };
        }
        bytesRead += n;
        records += this.consume(buf.subarray(0, this.pending.length + n), onRecord, issues, false);
        if (this.isDead) return { records, bytesRead, atEnd: true, issues };
        if (bytesRead >= limitBytes) return { records, bytesRead, atEnd: false, issues };
      }
    } finally {
      await fh.close();
    }
  }

  /** The framed size of the record `pending` starts, if a header that may be one is there (else 0). */
  private recordNeed(): number {
    const p = this.pending;
    if (p.length < RECORD_HEADER_BYTES) return 0;
    const n = checkedLength(new DataView(p.buffer, p.byteOffset, p.byteLength), 0, this.maxRecordBytes);
    return n < 0 ? 0 : RECORD_HEADER_BYTES + n + RECORD_FOOTER_BYTES;
  }

  /**
   * Hands over every whole record of `data` (which starts at file offset `pos`), reports and
   * skips the bad ones, and keeps the rest. `final`: `data` ends where the (complete) file ends.
   * Returns the number of records handed over.
   */
  private consume(data: Uint8Array, onRecord: (payload: Uint8Array, offset: number) => void, issues: TailIssue[], final: boolean): number {
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    const base = this.pos;
    const max = this.maxRecordBytes;
    let records = 0;
    let at = 0;
    for (;;) {
      if (this.scanning) {
        const next = findRecord(data, at, max, final);
        if (next < 0) return records + this.keep(data, Math.max(at, data.length - (RECORD_HEADER_BYTES - 1)));
        // A header whose bytes are not all here yet: verified once they are.
        if (next + RECORD_HEADER_BYTES + view.getUint32(next, true) + RECORD_FOOTER_BYTES > data.length) return records + this.keep(data, next);
        this.scanning = false;
        at = next;
      }
      const left = data.length - at;
      if (left < RECORD_HEADER_BYTES) return records + this.keep(data, at);
      const n = checkedLength(view, at, max);
      const end = at + RECORD_HEADER_BYTES + n;
      if (n < 0 || end + RECORD_FOOTER_BYTES > data.length) {
        const issue = this.badHeader(data, at, left, final);
        if (issue === undefined) return records + this.keep(data, at); // a record still being written
        issues.push(issue);
        if (this.isDead) return records + this.keep(data, data.length);
        this.scanning = true;
        at++;
        continue;
      }
      const payload = data.subarray(at + RECORD_HEADER_BYTES, end);
      const storedDataCrc = view.getUint32(end, true);
      const dataCrc = maskCrc32c(crc32c(payload));
      if (storedDataCrc !== dataCrc) {
        // The payload or the length is damaged: which, the next record that checks will say.
        const offset = base + at;
        issues.push({ problem: "corruptRecord", offset, message: `${this.path}: ${crcMismatch(offset, "data", storedDataCrc, dataCrc)}; record skipped` });
        this.scanning = true;
        at++;
        continue;
      }
      this.sawRecord = true;
      records++;
      onRecord(payload, base + at);
      at = end + RECORD_FOOTER_BYTES;
    }
  }

  /**
   * What is wrong with the header at `data[at]`, which does not frame a record there; `undefined`
   * when nothing is: its record is only not all written yet. The slow path: damage only.
   */
  private badHeader(data: Uint8Array, at: number, left: number, final: boolean): TailIssue | undefined {
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    const stored = view.getUint32(at + 8, true);
    const computed = maskCrc32c(crc32c(data.subarray(at, at + 8)));
    const offset = this.pos + at;
    const corrupt = (why: string): TailIssue => ({ problem: "corruptRecord", offset, message: `${this.path}: ${why}; record skipped` });
    if (stored !== computed) {
      const why = crcMismatch(offset, "length", stored, computed);
      if (offset !== 0 || this.sawRecord) return corrupt(why);
      this.isDead = true;
      return { problem: "notEventFile", offset, message: `${this.path} is not an event file: ${why}` };
    }
    // As a bigint: a claim past 2^53 is printed as the file says it.
    const claimed = view.getBigUint64(at, true);
    if (claimed > BigInt(this.maxRecordBytes)) return corrupt(`corrupted record at offset ${offset}: its header claims ${claimed} bytes, more than the limit of ${this.maxRecordBytes} (maxRecordBytes)`);
    if (!final) return undefined;
    return corrupt(`corrupted record at offset ${offset}: its header claims ${claimed} bytes, but the file ends ${left} bytes after its start (truncated, or a damaged length)`);
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

/** `maxRecordBytes` as given, or the default; throws `InvalidArgumentError` outside 1 to 1 GiB. */
export const checkedMaxRecordBytes = (given: number | undefined): number => {
  const max = given ?? DEFAULT_MAX_RECORD_BYTES;
  if (!Number.isSafeInteger(max) || max < 1 || max > MAX_RECORD_BYTES_LIMIT) {
    throw new InvalidArgumentError(`maxRecordBytes must be an integer from 1 to ${MAX_RECORD_BYTES_LIMIT} (1 GiB), got ${max}`);
  }
  return max;
};
