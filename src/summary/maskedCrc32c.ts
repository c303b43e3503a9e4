/**
 * CRC-32C (Castagnoli) and the "masked" form that TFRecord framing stores. TensorFlow masks the
 * checksums it embeds in files because computing a CRC over data that itself contains CRCs is
 * weak; the mask (rotate right 15, add a constant) is the same as LevelDB's.
 *
 * @module
 */

import { crc32c as nativeCrc32c } from "@node-rs/crc32";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** TensorFlow's `kMaskDelta`, added after the rotation. */
const CRC32C_MASK_DELTA = 0xa282ead8;

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * The CRC-32C of `bytes` as an unsigned 32-bit number.
 *
 * @example
 * ```ts
 * import { crc32c } from "./maskedCrc32c.js";
 *
 * crc32c(new Uint8Array(32)) === 0x8a9136aa; // RFC 3720 B.4
 * ```
 */
export const crc32c = (bytes: Uint8Array): number => nativeCrc32c(bytes) >>> 0;

/** `crc` (the unmasked CRC-32C of some bytes) extended over `bytes`: the CRC-32C of both, one after the other. */
export const extendCrc32c = (crc: number, bytes: Uint8Array): number => nativeCrc32c(bytes, crc) >>> 0;

/** Masks a CRC as TFRecord stores it: `rotr(crc, 15) + 0xa282ead8` (mod 2^32). */
export const maskCrc32c = (crc: number): number =>
  // `|`, `<<` and `+` work on signed 32-bit values in JS: bring each result back to unsigned.
  ((((crc >>> 15) | (crc << 17)) >>> 0) + CRC32C_MASK_DELTA) >>> 0;

/** The inverse of {@link maskCrc32c}. */
export const unmaskCrc32c = (masked: number): number => {
  const rot = (masked - CRC32C_MASK_DELTA) >>> 0;
  return ((rot >>> 17) | (rot << 15)) >>> 0;
};

/** The masked CRC-32C of `bytes`, as stored in a TFRecord header or footer. */
export const maskedCrc32c = (bytes: Uint8Array): number => maskCrc32c(crc32c(bytes));
