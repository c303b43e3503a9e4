/**
 * The ring's arithmetic: a chunk reduced as its bytes arrive, however a socket splits them
 * (inside an element, at odd byte offsets), gives the same bits as the whole chunk reduced at once;
 * and the frame parser hands a sink the payload's bytes in order.
 */
import { describe, expect, it } from "vitest";
import { DType, encodeHeader, FrameKind, FrameParser, OpCode, type PayloadSink } from "../../../src/cluster/collective/frames.js";
import type { CollectiveBuffer } from "../../../src/session/Collective.js";
import { reduceInto, reduceIntoDstFirst, scalarReduceInto, scalarReduceIntoDstFirst, simdReduction, streamingReducer } from "../../../src/cluster/collective/reduce.js";
import { BLOCK_BYTES } from "../../../src/cluster/collective/simdKernel.js";

/** Values whose float32 sums and means round, so a different order or rounding would show. */
const values = (make: (n: number) => CollectiveBuffer, n: number, seed: number): CollectiveBuffer => {
  const out = make(n);
  for (let i = 0; i < n; i++) out[i] = Math.sin(seed * 1000 + i) * 10 ** ((i % 7) - 3);
  return out;
};

/** `bytes` pushed to `sink` in pieces cut at `cuts`, each copied to an odd byte offset. */
const feed = (sink: PayloadSink, bytes: Buffer, cuts: readonly number[]): void => {
  let at = 0;
  for (const cut of [...cuts, bytes.length]) {
    const misaligned = Buffer.alloc(cut - at + 1).subarray(1);
    bytes.copy(misaligned, 0, at, cut);
    sink.write(misaligned);
    at = cut;
  }
};

describe("streamingReducer", () => {
  const types: [string, (n: number) => CollectiveBuffer][] = [
    ["float32", (n) => new Float32Array(n)],
    ["float64", (n) => new Float64Array(n)],
  ];
  for (const [name, make] of types) {
    for (const divisor of [1, 3]) {
      it(`${name}, divisor ${divisor}: pieces split inside elements and misaligned give the bits of reduceInto`, () => {
        const n = 37;
        const src = values(make, n, 1);
        const expected = values(make, n, 2);
        reduceInto(expected, src, divisor);
        const bytes = Buffer.from(src.buffer, src.byteOffset, src.byteLength);
        for (const cuts of [[], [1], [3, 5, 6, 7, 50], Array.from({ length: bytes.length - 1 }, (_, i) => i + 1), [src.BYTES_PER_ELEMENT * 10]]) {
          const dst = values(make, n, 2);
          feed(streamingReducer(dst, divisor), bytes, cuts);
          expect(Buffer.from(dst.buffer).equals(Buffer.from(expected.buffer))).toBe(true);
        }
      });
    }
  }
});

/** Random magnitudes over the whole exponent range, and the special values, so every rounding case shows. */
const mixed = (make: (n: number) => CollectiveBuffer, n: number, seed: number): CollectiveBuffer => {
  const out = make(n);
  let x = seed >>> 0 || 1;
  const next = (): number => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
  const special = [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, -0, 0, 1e-45, -1e-42, 3.4e38, -3.4e38, 1e-310];
  for (let i = 0; i < n; i++) out[i] = i % 97 === 5 ? (special[i % special.length] as number) : (next() - 0.5) * 10 ** (next() * 80 - 40);
  return out;
};

/** Equal bits, except that a NaN only needs to be a NaN (its payload is not fixed by IEEE 754). */
/** The bytes under `x`. */
const bytesOf = (x: CollectiveBuffer): Buffer => Buffer.from(x.buffer, x.byteOffset, x.byteLength);

/** Element `i` of `x` becomes a quiet NaN with payload `payload`. */
const setNaN = (x: CollectiveBuffer, i: number, payload: number): void => {
  if (x instanceof Float32Array) new Uint32Array(x.buffer, x.byteOffset, x.length)[i] = 0x7fc00000 | payload;
  else new BigUint64Array(x.buffer, x.byteOffset, x.length)[i] = 0x7ff8000000000000n | BigInt(payload);
};

const sameBits = (a: CollectiveBuffer, b: CollectiveBuffer): boolean => {
  if (a.length !== b.length) return false;
  const ab = Buffer.from(a.buffer, a.byteOffset, a.byteLength);
  const bb = Buffer.from(b.buffer, b.byteOffset, b.byteLength);
  const bpe = a.BYTES_PER_ELEMENT;
  for (let i = 0; i < a.length; i++) {
    if (Number.isNaN(a[i]) && Number.isNaN(b[i])) continue;
    if (!ab.subarray(i * bpe, (i + 1) * bpe).equals(bb.subarray(i * bpe, (i + 1) * bpe))) return false;
  }
  return true;
};

describe("the WebAssembly SIMD kernel", () => {
  it("is used on this runtime (Node 20 has WebAssembly SIMD)", () => {
    expect(simdReduction()).toBe(true);
  });

  const types: [string, (n: number) => CollectiveBuffer][] = [
    ["float32", (n) => new Float32Array(n)],
    ["float64", (n) => new Float64Array(n)],
  ];
  for (const [name, make] of types) {
    const bpe = make(0).BYTES_PER_ELEMENT;
    const block = BLOCK_BYTES / bpe;
    for (const divisor of [1, 2, 3, 7]) {
      it(`${name}, divisor ${divisor}: the bits of the scalar loop at every length around vectors and blocks`, () => {
        for (const n of [0, 1, 3, 4, 5, 15, 16, 17, block - 1, block, block + 1, 3 * block + 7]) {
          const src = mixed(make, n, 11 + n);
          const expected = mixed(make, n, 23 + n);
          const got = mixed(make, n, 23 + n);
          scalarReduceInto(expected, src, divisor);
          reduceInto(got, src, divisor);
          expect(sameBits(got, expected), `${n} elements`).toBe(true);
          // A sub-array of a larger buffer (nonzero byte offsets on both sides).
          const srcOuter = mixed(make, n + 3, 5);
          srcOuter.set(src, 1);
          const dstOuter = mixed(make, n + 3, 23 + n);
          const dstIn = dstOuter.subarray(2, 2 + n);
          dstIn.set(mixed(make, n, 23 + n));
          reduceInto(dstIn, srcOuter.subarray(1, 1 + n), divisor);
          expect(sameBits(dstIn, expected), `${n} elements at offsets`).toBe(true);
        }
      });
    }
    for (const divisor of [1, 2]) {
      it(`${name}, divisor ${divisor}: reduceIntoDstFirst(a, b) leaves in a the bits reduceInto(b, a) leaves in b, NaN payloads included`, () => {
        for (const n of [0, 1, 5, 17, block, block + 3]) {
          const a = mixed(make, n, 31 + n);
          const b = mixed(make, n, 37 + n);
          if (n >= 5) {
            // Two NaNs with different payloads at one index, and a NaN on one side at two others.
            setNaN(a, 2, 1);
            setNaN(b, 2, 2);
            setNaN(a, 3, 3);
            setNaN(b, 4, 4);
          }
          const dstFirst = a.slice();
          reduceIntoDstFirst(dstFirst, b, divisor);
          const swapped = b.slice();
          reduceInto(swapped, a, divisor);
          expect(bytesOf(dstFirst).equals(bytesOf(swapped)), `${n} elements`).toBe(true);
          // The scalar stand-in gives the same values (a NaN's payload may differ, as for reduceInto).
          const scalar = a.slice();
          scalarReduceIntoDstFirst(scalar, b, divisor);
          expect(sameBits(scalar, dstFirst), `${n} elements, scalar`).toBe(true);
        }
      });
    }
    it(`${name}: a streamed chunk on the kernel gives the scalar loop's bits, wherever the reads split it`, () => {
      const n = block + 13;
      const src = mixed(make, n, 3);
      const expected = mixed(make, n, 4);
      scalarReduceInto(expected, src, 3);
      const bytes = Buffer.from(src.buffer, src.byteOffset, src.byteLength);
      for (const cuts of [[], [1], [7, 4099, BLOCK_BYTES + 3], [bytes.length - 1]]) {
        const dst = mixed(make, n, 4);
        feed(streamingReducer(dst, 3), bytes, cuts);
        expect(sameBits(dst, expected), `cuts ${cuts.join(",")}`).toBe(true);
      }
    });
  }
});

describe("FrameParser with a sink", () => {
  it("gives the sink every payload byte in order, wherever the stream is split, and delivers the frame with an empty payload", () => {
    const payload = Buffer.from(Array.from({ length: 40 }, (_, i) => i));
    const stream = Buffer.concat([
      encodeHeader({ kind: FrameKind.data, op: OpCode.sum, dtype: DType.float32, generation: 0, rank: 0, incarnation: 1n, collective: 1, seq: 0, elements: 10, arrived: 1, payloadBytes: 40 }),
      payload,
    ]);
    for (let cut = 1; cut < stream.length; cut++) {
      const received: Buffer[] = [];
      const delivered: number[] = [];
      const parser = new FrameParser(
        (): PayloadSink => ({ write: (piece) => void received.push(Buffer.from(piece)) }),
        (h, p) => delivered.push(h.payloadBytes, p.length),
        (e) => {
          throw e;
        },
      );
      parser.push(stream.subarray(0, cut));
      parser.push(stream.subarray(cut));
      expect(Buffer.concat(received).equals(payload)).toBe(true);
      expect(delivered).toEqual([40, 0]);
    }
  });
});
