/**
 * The byte-level reading under `EventDecoder`: a cursor over one record's payload (varints,
 * little-endian floats and doubles through a scratch buffer, length-delimited fields), the
 * cache that maps a tag's bytes to its string, and the check for the 10-byte form of a TF2 float
 * scalar. Kept apart from the decoder, which says what the fields mean.
 *
 * @module
 */

import { WireType } from "@bufbuild/protobuf/wire";

const textDecoder = new TextDecoder();

/** UTF-8 of `b[start, end)`; short ASCII (tags) without a `TextDecoder` call. */
export const utf8 = (b: Uint8Array, start: number, end: number): string => {
  if (end - start <= 64) {
    let ascii = true;
    for (let i = start; i < end; i++) {
      if ((b[i] as number) >= 0x80) {
        ascii = false;
        break;
      }
    }
    if (ascii) return String.fromCharCode.apply(null, b.subarray(start, end) as unknown as number[]);
  }
  return textDecoder.decode(b.subarray(start, end));
};

const TWO_32 = 2 ** 32;

/** A tag as the cache knows it: its bytes, its string, and its series' plugin once fixed. */
export interface TagEntry {
  readonly bytes: Uint8Array;
  readonly length: number;
  readonly tag: string;
  /** The plugin of the tag's series, fixed by its first value (`undefined` until then). */
  plugin: string | undefined;
  /** The tag that followed this one last time: writers repeat their tags in the same order. */
  next: TagEntry | undefined;
}

/**
 * Tags by their bytes: a run has few tags and writes them over and over, and comparing bytes
 * costs less than building the string each time. A writer writes its tags in the same order at
 * every step, so the tag after the previous one is tried first (a few byte compares); a hash of
 * the bytes finds the others.
 */
export class TagCache {
  private readonly byHash = new Map<number, TagEntry>();
  private last: TagEntry | undefined;

  get(b: Uint8Array, start: number, end: number): TagEntry {
    const last = this.last;
    if (last !== undefined) {
      const guess = last.next;
      if (guess !== undefined && guess.length === end - start) {
        const known = guess.bytes;
        let i = 0;
        while (i < known.length && known[i] === b[start + i]) i++;
        if (i === known.length) {
          this.last = guess;
          return guess;
        }
      }
    }
    let h = 0x811c9dc5; // FNV-1a
    for (let i = start; i < end; i++) h = Math.imul(h ^ (b[i] as number), 0x01000193);
    h &= 0x3fffffff; // a small integer key (a Smi): no boxed number per lookup
    let entry = this.byHash.get(h);
    if (entry === undefined || !sameBytes(entry.bytes, b, start, end)) {
      entry = { bytes: b.slice(start, end), length: end - start, tag: utf8(b, start, end), plugin: undefined, next: undefined };
      if (this.byHash.size < TAG_CACHE_LIMIT) this.byHash.set(h, entry);
      else return entry; // not remembered: neither learns an order
    }
    if (this.last !== undefined) this.last.next = entry;
    this.last = entry;
    return entry;
  }
}

const sameBytes = (known: Uint8Array, b: Uint8Array, start: number, end: number): boolean => {
  if (known.length !== end - start) return false;
  for (let i = 0; i < known.length; i++) if (known[i] !== b[start + i]) return false;
  return true;
};
const TAG_CACHE_LIMIT = 4096;

/**
 * Eight bytes seen as a float32 and a float64: numbers are read by copying their bytes here,
 * cheaper than a `DataView` over each payload's buffer. Little-endian, as the wire is; on a
 * big-endian machine the bytes are copied in reverse.
 */
const SCRATCH = new ArrayBuffer(8);
const SCRATCH_F32 = new Float32Array(SCRATCH);
const SCRATCH_F64 = new Float64Array(SCRATCH);
const SCRATCH_BYTES = new Uint8Array(SCRATCH);
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** `DT_FLOAT` (08 01), an empty shape (12 00), then 4 bytes of tensor_content (22 04) or a packed float_val (2a 04). */
export const isFloatScalarTensor = (p: Uint8Array, at: number): boolean =>
  p[at] === 0x08 && p[at + 1] === 0x01 && p[at + 2] === 0x12 && p[at + 3] === 0x00 && (p[at + 4] === 0x22 || p[at + 4] === 0x2a) && p[at + 5] === 0x04;

/** A read position over one payload, reused for every record (no allocation per record). */
export class Cursor {
  buf: Uint8Array = new Uint8Array(0);
  pos = 0;

  reset(buf: Uint8Array): void {
    this.buf = buf;
    this.pos = 0;
  }

  /** The little-endian float32 at `at` (no bounds check: the caller checked). */
  floatAt(at: number): number {
    const b = this.buf;
    if (LITTLE_ENDIAN) {
      SCRATCH_BYTES[0] = b[at] as number;
      SCRATCH_BYTES[1] = b[at + 1] as number;
      SCRATCH_BYTES[2] = b[at + 2] as number;
      SCRATCH_BYTES[3] = b[at + 3] as number;
    } else {
      for (let i = 0; i < 4; i++) SCRATCH_BYTES[3 - i] = b[at + i] as number;
    }
    return SCRATCH_F32[0] as number;
  }

  /** A varint as a number: uint64 exact up to 2^53, and a negative int64 (10 bytes) as negative. */
  varint(): number {
    const b = this.buf;
    let pos = this.pos;
    let byte = b[pos++] as number;
    if (byte < 0x80) {
      this.pos = pos;
      return byte;
    }
    let lo = byte & 0x7f;
    let hi = 0;
    let done = false;
    for (let shift = 7; shift < 28; shift += 7) {
      byte = b[pos++] ?? 0x80;
      lo |= (byte & 0x7f) << shift;
      if (byte < 0x80) {
        done = true;
        break;
      }
    }
    if (!done) {
      byte = b[pos++] ?? 0x80;
      lo |= (byte & 0x0f) << 28;
      hi = (byte & 0x7f) >> 4;
      done = byte < 0x80;
      for (let shift = 3; !done && shift <= 31; shift += 7) {
        byte = b[pos++] ?? 0x80;
        hi |= (byte & 0x7f) << shift;
        done = byte < 0x80;
      }
    }
    if (!done || pos > b.length) throw new Error(`invalid varint at ${this.pos}`);
    this.pos = pos;
    lo >>>= 0;
    hi >>>= 0;
    if (hi < 0x80000000) return hi * TWO_32 + lo;
    const negLo = (~lo + 1) >>> 0;
    const negHi = (~hi + (negLo === 0 ? 1 : 0)) >>> 0;
    return -(negHi * TWO_32 + negLo);
  }

  /** Reads a length and returns where the delimited bytes end; throws if past `limit`. */
  delimited(limit: number): number {
    const n = this.varint();
    const end = this.pos + n;
    if (end > limit) throw new Error(`a length-delimited field at ${this.pos} overruns its message`);
    return end;
  }

  double(): number {
    const b = this.buf;
    const at = this.pos;
    if (at + 8 > b.length) throw new Error("a double field overruns the record");
    if (LITTLE_ENDIAN) for (let i = 0; i < 8; i++) SCRATCH_BYTES[i] = b[at + i] as number;
    else for (let i = 0; i < 8; i++) SCRATCH_BYTES[7 - i] = b[at + i] as number;
    this.pos = at + 8;
    return SCRATCH_F64[0] as number;
  }

  float(): number {
    if (this.pos + 4 > this.buf.length) throw new Error("a float field overruns the record");
    const x = this.floatAt(this.pos);
    this.pos += 4;
    return x;
  }

  skip(wire: number, limit: number): void {
    if (wire === WireType.Varint) this.varint();
    else if (wire === WireType.Bit64) this.pos += 8;
    else if (wire === WireType.Bit32) this.pos += 4;
    else if (wire === WireType.LengthDelimited) this.pos = this.delimited(limit);
    else throw new Error(`unsupported wire type ${wire}`);
    if (this.pos > limit) throw new Error("a field overruns its message");
  }
}
