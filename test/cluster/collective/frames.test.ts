/**
 * The collective wire format: headers round-trip, and the parser cuts a stream into the same
 * frames wherever the stream is split, pushed ('data' events) or pulled (a socket's `onread`,
 * reads of any size); it reads nothing after a refused frame.
 */
import { describe, expect, it } from "vitest";
import { DEFER, DType, encodeHeader, type FrameHeader, FrameKind, FrameParser, HEADER_BYTES, OpCode } from "../../../src/cluster/collective/frames.js";
import { DataLossError } from "../../../src/errors.js";

const header = (fields: Partial<FrameHeader>): FrameHeader => ({
  kind: FrameKind.data,
  op: OpCode.mean,
  dtype: DType.float64,
  generation: 0xfffffffe,
  rank: 3,
  incarnation: 0xfedcba9876543210n,
  collective: 7,
  seq: 12,
  elements: 2 ** 40 + 3,
  arrived: 2,
  payloadBytes: 0,
  ...fields,
});

const frame = (h: FrameHeader, payload: Buffer): Buffer => Buffer.concat([encodeHeader({ ...h, payloadBytes: payload.length }), payload]);

const parseAll = (stream: Buffer, cuts: readonly number[]) => {
  const frames: { header: FrameHeader; payload: Buffer }[] = [];
  const errors: Error[] = [];
  const parser = new FrameParser(
    (h) => Buffer.alloc(h.payloadBytes),
    (h, payload) => frames.push({ header: h, payload: Buffer.from(payload) }),
    (e) => errors.push(e),
  );
  let at = 0;
  for (const cut of [...cuts, stream.length]) {
    parser.push(stream.subarray(at, cut));
    at = cut;
  }
  return { frames, errors };
};

describe("frames", () => {
  const a = header({});
  const b = header({ kind: FrameKind.credit, op: OpCode.none, dtype: DType.none, seq: 13, elements: 1 });
  const c = header({ kind: FrameKind.abort, seq: 14 });
  const payloadA = Buffer.from(new Float64Array([1.5, -2, 3e300]).buffer);
  const payloadC = Buffer.from('{"code":14,"message":"gone"}');
  const stream = Buffer.concat([frame(a, payloadA), frame(b, Buffer.alloc(0)), frame(c, payloadC)]);

  it("a header is 48 bytes and round-trips every field", () => {
    expect(encodeHeader(a).length).toBe(HEADER_BYTES);
    const { frames } = parseAll(stream, []);
    expect(frames.map((f) => f.header)).toEqual([
      { ...a, payloadBytes: payloadA.length },
      { ...b, payloadBytes: 0 },
      { ...c, payloadBytes: payloadC.length },
    ]);
    expect(frames[0]!.payload.equals(payloadA)).toBe(true);
    expect(frames[2]!.payload.equals(payloadC)).toBe(true);
  });

  it("the same frames wherever the stream is cut (every single offset, and every byte apart)", () => {
    const whole = parseAll(stream, []).frames;
    for (let cut = 0; cut <= stream.length; cut++) expect(parseAll(stream, [cut]).frames).toEqual(whole);
    expect(parseAll(stream, Array.from({ length: stream.length }, (_, i) => i)).frames).toEqual(whole);
  });

  it("a truncated stream yields only its complete frames", () => {
    for (let end = 0; end < stream.length; end++) {
      const { frames, errors } = parseAll(stream.subarray(0, end), []);
      expect(errors).toEqual([]);
      expect(frames.length).toBe(end < HEADER_BYTES + payloadA.length ? 0 : end < 2 * HEADER_BYTES + payloadA.length ? 1 : 2);
    }
  });

  it("bad magic is a DataLossError, and nothing after it is parsed", () => {
    const bad = Buffer.from(stream);
    bad.writeUInt32LE(0x12345678, 0);
    const { frames, errors } = parseAll(bad, []);
    expect(frames).toEqual([]);
    expect(errors).toEqual([new DataLossError("not a collective frame (bad magic)")]);
  });

  it("a deferred frame holds it and every later byte until resume(), then the same frames come, wherever the stream is cut", () => {
    const whole = parseAll(stream, []).frames;
    for (let cut = 0; cut <= stream.length; cut++) {
      const frames: { header: FrameHeader; payload: Buffer }[] = [];
      const asked: boolean[] = [];
      const parser = new FrameParser(
        (h, retry) => {
          if (h.kind === FrameKind.data || h.kind === FrameKind.credit) asked.push(retry);
          // The data frame is deferred once; the (empty) credit frame twice.
          return !retry || (h.kind === FrameKind.credit && asked.filter((r) => r).length < 3) ? DEFER : Buffer.alloc(h.payloadBytes);
        },
        (h, payload) => frames.push({ header: h, payload: Buffer.from(payload) }),
        (e) => expect.unreachable(e.message),
      );
      parser.push(stream.subarray(0, cut));
      parser.push(stream.subarray(cut));
      expect(frames).toEqual([]); // the data frame is held
      parser.resume();
      expect(frames.length).toBe(1); // the credit frame is held
      parser.resume();
      expect(frames.length).toBe(1); // held again
      parser.resume();
      expect(frames.length).toBe(2); // the abort frame is held
      parser.resume();
      expect(frames, `cut at ${cut}`).toEqual(whole);
      parser.resume(); // nothing held: nothing happens
      expect(frames.length).toBe(3);
      expect(asked).toEqual([false, true, false, true, true]);
    }
  });

  /**
   * A socket's `onread` on `stream`, reads of at most `maxRead` bytes: as Node does, the buffer of
   * the first read is asked for up front and each next one after a read; a read that returns
   * `false` pauses the socket until the parser resumes it (the next read still goes to the buffer
   * asked for while paused). Give `resume` to the parser as its `resumeReading`, then `start` it.
   */
  const socketReading = (stream: Buffer, maxRead: number, onPause: () => void = () => undefined) => {
    let at = 0;
    let paused = false;
    let parser: FrameParser | undefined;
    let buffer: Buffer = Buffer.alloc(0);
    const step = (): void => {
      const p = parser as FrameParser;
      while (!paused && at < stream.length) {
        const n = Math.min(buffer.length, maxRead, stream.length - at);
        stream.copy(buffer, 0, at, at + n);
        at += n;
        const go = p.read(n);
        buffer = p.readTarget();
        if (!go) {
          paused = true;
          onPause();
        }
      }
    };
    return {
      /** The parser's `resumeReading`. */
      resume: (): void => {
        paused = false;
        queueMicrotask(step);
      },
      start: (p: FrameParser): void => {
        parser = p;
        buffer = p.readTarget();
        step();
      },
      done: () => at === stream.length,
      paused: () => paused,
    };
  };


  it("pull mode (onread): the same frames for reads of any size; a buffer target is read into directly, a sink gets its pieces", () => {
    const whole = parseAll(stream, []).frames;
    for (const maxRead of [1, 7, 47, 48, 49, 100, stream.length]) {
      for (const sink of [false, true]) {
        const frames: { header: FrameHeader; payload: Buffer }[] = [];
        const targets: Buffer[] = [];
        const pieces: Buffer[] = [];
        const reading = socketReading(stream, maxRead);
        const parser = new FrameParser(
          (h) => {
            if (sink && h.kind === FrameKind.data) return { write: (piece: Buffer) => void pieces.push(Buffer.from(piece)) };
            const b = Buffer.alloc(h.payloadBytes);
            targets.push(b);
            return b;
          },
          (h, payload) => frames.push({ header: h, payload: Buffer.from(payload) }),
          (e) => expect.unreachable(e.message),
          reading.resume,
        );
        reading.start(parser);
        if (!sink) expect(frames, `reads of ${maxRead}`).toEqual(whole);
        else {
          expect(frames.map((f) => f.header)).toEqual(whole.map((f) => f.header));
          expect(frames[0]!.payload.length).toBe(0); // a sink's frame is delivered with an empty payload
          expect(Buffer.concat(pieces).equals(payloadA)).toBe(true);
          expect(Math.max(...pieces.map((p) => p.length))).toBeLessThanOrEqual(maxRead);
        }
        // The buffers the target handed out hold the payloads: the reads went straight into them.
        expect(targets.filter((t) => t.length > 0).map((t) => t.toString("hex"))).toEqual((sink ? [payloadC] : [payloadA, payloadC]).map((p) => p.toString("hex")));
      }
    }
  });

  it("pull mode: a deferred frame pauses reading; what was read meanwhile is parsed after resume(), and the same frames come", async () => {
    const whole = parseAll(stream, []).frames;
    for (const maxRead of [1, 5, 48, 64, stream.length]) {
      const frames: { header: FrameHeader; payload: Buffer }[] = [];
      let deferred = 0;
      let pauses = 0;
      const reading = socketReading(stream, maxRead, () => pauses++);
      const parser = new FrameParser(
        (h, retry) => (h.kind === FrameKind.data && !retry ? (deferred++, DEFER) : Buffer.alloc(h.payloadBytes)),
        (h, payload) => frames.push({ header: h, payload: Buffer.from(payload) }),
        (e) => expect.unreachable(e.message),
        reading.resume,
      );
      reading.start(parser);
      expect(reading.paused()).toBe(true);
      expect(frames).toEqual([]);
      parser.resume();
      await new Promise((r) => setImmediate(r));
      expect(reading.done()).toBe(true);
      expect(frames, `reads of ${maxRead}`).toEqual(whole);
      expect([deferred, pauses]).toEqual([1, 1]);
    }
  });

  it("pull mode: a refused frame stops the parser; later reads are dropped unread", () => {
    const errors: Error[] = [];
    const reading = socketReading(stream, 64);
    const parser = new FrameParser(
      (h) => (h.kind === FrameKind.data ? new DataLossError("no data here") : Buffer.alloc(h.payloadBytes)),
      () => expect.unreachable("no frame is delivered"),
      (e) => errors.push(e),
      reading.resume,
    );
    reading.start(parser);
    expect(reading.done()).toBe(true);
    expect(errors).toEqual([new DataLossError("no data here")]);
  });

  it("a refused frame stops the parser before its payload", () => {
    const seen: FrameHeader[] = [];
    const errors: Error[] = [];
    const parser = new FrameParser(
      (h) => (seen.push(h), h.kind === FrameKind.data ? new DataLossError("no data here") : Buffer.alloc(h.payloadBytes)),
      () => expect.unreachable("no frame is delivered"),
      (e) => errors.push(e),
    );
    parser.push(stream);
    expect(seen.length).toBe(1);
    expect(errors).toEqual([new DataLossError("no data here")]);
  });
});
