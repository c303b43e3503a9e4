/**
 * The ring's arithmetic: a chunk reduced as its bytes arrive, however a socket splits them
 * (inside an element, at odd byte offsets), gives the same bits as the whole chunk reduced at once;
 * and the frame parser hands a sink the payload's bytes in order.
 */
import { describe, expect, it } from "vitest";
import { DType, encodeHeader, FrameKind, FrameParser, OpCode, type PayloadSink } from "../../../src/cluster/collective/frames.js";
import type { CollectiveBuffer } from "../../../src/cluster/collective/Collective.js";
import { reduceInto, streamingReducer } from "../../../src/cluster/collective/reduce.js";

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
