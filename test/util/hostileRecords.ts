/**
 * Record headers no writer makes (issue 33: hostile event files): a TFRecord header that claims
 * any length, with the length CRC that makes readers believe it, and the 154-byte file of the
 * issue.
 */
import { maskedCrc32c } from "../../src/summary/maskedCrc32c.js";

/** A record header (12 bytes) claiming `claimed` payload bytes, its length CRC valid. */
export const recordHeader = (claimed: number | bigint): Buffer => {
  const header = Buffer.alloc(12);
  header.writeBigUInt64LE(BigInt(claimed), 0);
  header.writeUInt32LE(maskedCrc32c(header.subarray(0, 8)), 8);
  return header;
};

/** The file of issue 33: 154 bytes whose first header claims `claimed` bytes (3.5e9 unless told), then `rest` (142 bytes of filler unless told). */
export const issue33File = (claimed: number | bigint = 3_500_000_000n, rest: Uint8Array = Buffer.alloc(142, 0x5a)): Buffer => Buffer.concat([recordHeader(claimed), rest]);
