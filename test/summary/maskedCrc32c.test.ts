import { describe, expect, it } from "vitest";
import { crc32c, maskCrc32c, maskedCrc32c, unmaskCrc32c } from "../../src/summary/maskedCrc32c.js";

describe("crc32c", () => {
  it("matches RFC 3720 B.4: 32 zero bytes -> 0x8a9136aa", () => {
    expect(crc32c(new Uint8Array(32))).toBe(0x8a9136aa);
  });

  it("returns unsigned values", () => {
    // 0x8a9136aa has the top bit set: a signed result would be negative.
    expect(crc32c(new Uint8Array(32))).toBeGreaterThan(0);
  });
});

describe("maskedCrc32c", () => {
  it("matches the rustboard vector: masked CRC of 1a 11 'CRC test, one two' = 0x5794d08a", () => {
    const bytes = Uint8Array.from([0x1a, 0x11, ...Buffer.from("CRC test, one two", "ascii")]);
    expect(maskedCrc32c(bytes)).toBe(0x5794d08a);
  });

  it("unmask inverts mask for values across the 32-bit range", () => {
    for (const crc of [0, 1, 0x7fff, 0x8000, 0x7fffffff, 0x80000000, 0x8a9136aa, 0xffffffff, 0x12345678]) {
      const masked = maskCrc32c(crc);
      expect(masked).toBeGreaterThanOrEqual(0);
      expect(masked).toBeLessThanOrEqual(0xffffffff);
      expect(unmaskCrc32c(masked)).toBe(crc);
    }
  });

  it("masks as rotate-right-15 plus 0xa282ead8, modulo 2^32", () => {
    const crc = 0x8a9136aa;
    const rotated = Number(((BigInt(crc) >> 15n) | (BigInt(crc) << 17n)) & 0xffffffffn);
    expect(maskCrc32c(crc)).toBe((rotated + 0xa282ead8) % 2 ** 32);
  });
});
