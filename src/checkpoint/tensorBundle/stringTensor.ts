/**
 * How a tensor bundle stores a string tensor (TensorFlow's `WriteStringTensor` and
 * `ReadStringTensor`): every element's length as a varint64, then the masked CRC-32C of the
 * lengths, each taken as a uint32 in the file's byte order (a uint64 from 2^32 bytes), then the
 * elements' bytes. The entry's checksum is that CRC of the lengths (unmasked) extended over the
 * 4 checksum bytes and the elements: it does not cover the varints. Checked against bytes that
 * TensorFlow 2.21 wrote.
 *
 * @module
 */

import { crc32c } from "@node-rs/crc32";

import { maskCrc32c } from "../../summary/maskedCrc32c.js";
import { ByteSink } from "./sstable.js";

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * The stored bytes of a string tensor of `elements` (little-endian), as chunks (the elements
 * are not copied), and the entry's CRC-32C, unmasked.
 */
export const encodeStringTensor = (elements: readonly Uint8Array[]): { bytes: Uint8Array[]; crc: number } => {
  const head = new ByteSink();
  for (const e of elements) head.varint(e.length);
  const lengthsCrc = crcOfLengths(elements.map((e) => e.length), true);
  const checksum = new ByteSink().fixed32(maskCrc32c(lengthsCrc)).finish();
  let crc = crc32c(checksum, lengthsCrc) >>> 0;
  for (const e of elements) crc = crc32c(e, crc) >>> 0;
  return { bytes: [head.bytes(checksum).finish(), ...elements.filter((e) => e.length > 0)], crc };
};

/**
 * The `n` elements of the string tensor stored as `bytes` (views of it), and the entry's
 * CRC-32C recomputed (masked), after checking the lengths against the bytes and their own
 * checksum. `fail` reports a problem at an offset in `bytes`.
 */
export const decodeStringTensor = (
  bytes: Uint8Array,
  n: number,
  littleEndian: boolean,
  fail: (offset: number, what: string) => never,
): { elements: Uint8Array[]; maskedCrc: number } => {
  // Each element needs a varint byte at least, and the checksum 4.
  if (n + 4 > bytes.length) fail(0, `${bytes.length} bytes cannot hold ${n} lengths and their checksum`);
  const lengths = new Array<number>(n);
  let pos = 0;
  let total = 0;
  for (let i = 0; i < n; i++) {
    const start = pos;
    let v = 0;
    for (let k = 0; ; k++) {
      if (k === 10) fail(start, `length ${i} is a varint longer than 10 bytes`);
      if (pos >= bytes.length - 4) fail(start, `length ${i} runs into the checksum`);
      const b = bytes[pos++] as number;
      v += (b & 0x7f) * 2 ** (7 * k);
      if ((b & 0x80) === 0) break;
    }
    if (v > bytes.length) fail(start, `length ${i} is ${v}, more than the tensor's ${bytes.length} bytes`);
    lengths[i] = v;
    total += v;
  }
  const lengthsCrc = crcOfLengths(lengths, littleEndian);
  const stored = new DataView(bytes.buffer, bytes.byteOffset + pos, 4).getUint32(0, littleEndian);
  if (stored !== maskCrc32c(lengthsCrc)) {
    fail(pos, `checksum of the lengths does not match: stored ${hex(stored)} vs. calculated ${hex(maskCrc32c(lengthsCrc))}`);
  }
  pos += 4;
  if (total !== bytes.length - pos) fail(pos, `the lengths add up to ${total} bytes, but ${bytes.length - pos} follow them`);
  const maskedCrc = maskCrc32c(crc32c(bytes.subarray(pos - 4), lengthsCrc) >>> 0);
  const elements = lengths.map((len) => {
    const element = bytes.subarray(pos, pos + len);
    pos += len;
    return element;
  });
  return { elements, maskedCrc };
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** The CRC-32C (unmasked) of the lengths as TensorFlow sums them: uint32 each, uint64 from 2^32. */
const crcOfLengths = (lengths: readonly number[], littleEndian: boolean): number => {
  const asStored = new Uint8Array(lengths.reduce((n, v) => n + (v > 0xffffffff ? 8 : 4), 0));
  const view = new DataView(asStored.buffer);
  let at = 0;
  for (const v of lengths) {
    if (v > 0xffffffff) {
      view.setBigUint64(at, BigInt(v), littleEndian);
      at += 8;
    } else {
      view.setUint32(at, v, littleEndian);
      at += 4;
    }
  }
  return crc32c(asStored) >>> 0;
};

const hex = (n: number): string => `0x${n.toString(16).padStart(8, "0")}`;
