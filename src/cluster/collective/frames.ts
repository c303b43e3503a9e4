/**
 * The collective data plane's wire format: fixed 48-byte little-endian frame headers, each
 * followed by `payloadBytes` of payload, and a parser that cuts a byte stream into frames. Every
 * frame carries the sender's generation and incarnation and a per-link sequence number, so traffic
 * from another launch or another process start is recognised and refused.
 *
 * @module
 */

import { DataLossError } from "../../errors.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** `MSCL` read as a little-endian u32: the first four bytes of every frame. */
const MAGIC = 0x4c43534d;
/**
 * 5: a rank's termination notice travels the ring both ways as a `notice` frame (version 4 had
 * none). 4: two ranks pass a barrier by exchange, one empty frame each way (version 3: around the
 * ring, two each way). 3: two ranks all-reduce a buffer of one chunk by exchange, not by the
 * ring (version 2: by the ring). 2: the receiver of a link dials it (version 1: the sender did),
 * and the welcome carries the token.
 */
const VERSION = 5;

/** Size of every frame header. */
export const HEADER_BYTES = 48;

/** The largest payload of a control frame (hello, reject, abort). */
export const MAX_CONTROL_PAYLOAD_BYTES = 64 * 1024;

/** What a frame is. */
export const FrameKind = {
  /** Connector (the link's receiver) → acceptor (its sender), before anything else: token, generation, incarnation, rank, group size. */
  hello: 1,
  /** Acceptor → connector: the handshake passed; `elements` is the credit window (chunks); the payload is the token. */
  welcome: 2,
  /** Acceptor → connector: the handshake failed; the payload is a JSON `{ code, message }`. */
  reject: 3,
  /** One chunk of a collective's buffer. */
  data: 4,
  /** Receiver → sender: `elements` more chunks may be sent. */
  credit: 5,
  /** Either way: the group failed; the payload is a JSON `{ code, message }` to raise. */
  abort: 6,
  /**
   * Either way, outside any collective: rank `rank` got a termination notice. Each rank passes the
   * first notice of a rank on in the direction it came, so it reaches every rank up to a frozen one
   * from both sides. No payload.
   */
  notice: 7,
} as const;
export type FrameKind = (typeof FrameKind)[keyof typeof FrameKind];

/** Which collective a data frame belongs to (all ranks must agree). */
export const OpCode = { none: 0, sum: 1, mean: 2, broadcast: 3, barrier: 4 } as const;
export type OpCode = (typeof OpCode)[keyof typeof OpCode];

/** The element type of a data frame. */
export const DType = { none: 0, float32: 1, float64: 2 } as const;
export type DType = (typeof DType)[keyof typeof DType];

/** A decoded frame header. */
export interface FrameHeader {
  readonly kind: FrameKind;
  readonly op: OpCode;
  readonly dtype: DType;
  readonly generation: number;
  /** Sender's rank (hello), broadcast root (data), the rank that got the notice (notice), or 0. */
  readonly rank: number;
  readonly incarnation: bigint;
  /** The collective's number on this group (data), or 0. */
  readonly collective: number;
  /** The frame's number on its link and direction, from 0 after the handshake. */
  readonly seq: number;
  /** Elements of the whole buffer (data); the group size (hello); the credit window (welcome); granted chunks (credit). */
  readonly elements: number;
  /** How many consecutive ranks upstream of the receiver, ending at the sender, are known to have entered the collective. */
  readonly arrived: number;
  readonly payloadBytes: number;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Encodes a header (48 bytes). */
export const encodeHeader = (h: FrameHeader): Buffer => {
  const b = Buffer.allocUnsafe(HEADER_BYTES);
  b.writeUInt32LE(MAGIC, 0);
  b.writeUInt8(VERSION, 4);
  b.writeUInt8(h.kind, 5);
  b.writeUInt8(h.op, 6);
  b.writeUInt8(h.dtype, 7);
  b.writeUInt32LE(h.generation, 8);
  b.writeUInt32LE(h.rank, 12);
  b.writeBigUInt64LE(h.incarnation, 16);
  b.writeUInt32LE(h.collective, 24);
  b.writeUInt32LE(h.seq, 28);
  b.writeDoubleLE(h.elements, 32);
  b.writeUInt32LE(h.arrived, 40);
  b.writeUInt32LE(h.payloadBytes, 44);
  return b;
};

/** Decodes a header, or a one-line reason why these bytes are not one. */
const decodeHeader = (b: Buffer): FrameHeader | string => {
  if (b.readUInt32LE(0) !== MAGIC) return "not a collective frame (bad magic)";
  if (b.readUInt8(4) !== VERSION) return `frame version ${b.readUInt8(4)}, expected ${VERSION}`;
  const kind = b.readUInt8(5);
  if (kind < FrameKind.hello || kind > FrameKind.notice) return `unknown frame kind ${kind}`;
  return {
    kind: kind as FrameKind,
    op: b.readUInt8(6) as OpCode,
    dtype: b.readUInt8(7) as DType,
    generation: b.readUInt32LE(8),
    rank: b.readUInt32LE(12),
    incarnation: b.readBigUInt64LE(16),
    collective: b.readUInt32LE(24),
    seq: b.readUInt32LE(28),
    elements: b.readDoubleLE(32),
    arrived: b.readUInt32LE(40),
    payloadBytes: b.readUInt32LE(44),
  };
};

/** Takes a payload piece by piece as the bytes arrive, instead of a buffer being filled. */
export interface PayloadSink {
  /** The next bytes of the payload, in order; `piece` is only valid during the call. */
  write(piece: Buffer): void;
}

/** What a {@link PayloadTarget} returns to leave a frame's payload unread until {@link FrameParser.resume}. */
export const DEFER: unique symbol = Symbol("defer");

/**
 * Where a parser puts a frame's payload: a buffer of exactly `payloadBytes`, or a sink (the
 * frame is then delivered with an empty payload). Returning an error refuses the frame before
 * its payload is read (the link then fails with that error). Returning {@link DEFER} holds the
 * frame and every later byte until `resume()`, which asks again with `retry` set.
 */
export type PayloadTarget = (header: FrameHeader, retry: boolean) => Buffer | PayloadSink | Error | typeof DEFER;

const EMPTY = Buffer.alloc(0);

/** Pull mode: the most a read takes into the scratch buffer (a payload that goes to a sink, or bytes while a frame is held). */
const SCRATCH_BYTES = 256 * 1024;

/**
 * Cuts a byte stream into frames. Payload bytes are copied straight into the buffer that
 * `target` picks (a receive slot for data, a fresh buffer for control frames), so a frame is
 * copied once. After `stop()` it ignores everything: nothing past a refused frame is read.
 */
export class FrameParser {
  private readonly header = Buffer.allocUnsafe(HEADER_BYTES);
  private headerFill = 0;
  private current: { readonly header: FrameHeader; readonly payload: Buffer | PayloadSink; fill: number } | undefined;
  /** A frame whose target said {@link DEFER}, and the bytes that came after its header, in order. */
  private deferred: { readonly header: FrameHeader; readonly queue: Buffer[] } | undefined;
  private stopped = false;
  /** Pull mode: where the buffer handed out by `readTarget` goes (see {@link FrameParser.readTarget}). */
  private lastTarget: "header" | "payload" | "sink" | "spill" = "header";
  private scratch: Buffer | undefined;
  /** Pull mode: reading was paused for a held frame; `resume()` starts it again. */
  private paused = false;

  /** `resumeReading`, in pull mode: starts the socket reading again after a held frame paused it. */
  constructor(
    private readonly target: PayloadTarget,
    private readonly onFrame: (header: FrameHeader, payload: Buffer) => void,
    private readonly onError: (error: Error) => void,
    private readonly resumeReading?: () => void,
  ) {}

  /** Stops parsing: later bytes (and the rest of this chunk) are dropped unread. */
  stop(): void {
    this.stopped = true;
  }

  push(chunk: Buffer): void {
    if (this.deferred !== undefined) this.deferred.queue.push(chunk);
    else this.parse(chunk);
  }

  /**
   * Pull mode, for a socket's `onread` (its `buffer` function and its `callback`): the buffer
   * the next read goes to. A payload that goes to a buffer is read straight into it (no copy);
   * a header into the header buffer; a payload that goes to a sink into a scratch buffer, which
   * the sink then takes. The constructor's `resumeReading` resumes the socket after a held frame
   * (the callback returned `false`, which pauses it).
   */
  readTarget(): Buffer {
    if (this.stopped) return this.take("spill", SCRATCH_BYTES);
    // The first read after `resume()` goes to the buffer handed out now, before the frame's
    // target is known: a header's worth, parsed as pushed bytes; the reads after it go to the target.
    if (this.deferred !== undefined) return this.take("spill", HEADER_BYTES);
    const c = this.current;
    if (c === undefined) {
      this.lastTarget = "header";
      return this.header.subarray(this.headerFill);
    }
    const left = c.header.payloadBytes - c.fill;
    if (Buffer.isBuffer(c.payload)) {
      this.lastTarget = "payload";
      return c.payload.subarray(c.fill);
    }
    return this.take("sink", Math.min(left, SCRATCH_BYTES));
  }

  /** Pull mode: `n` bytes were read into the last {@link readTarget}; `false` pauses reading (a frame is held). */
  read(n: number): boolean {
    if (this.stopped) return true;
    switch (this.lastTarget) {
      case "spill":
        // Read while a frame was held (or before the parser learnt it was): parsed as pushed bytes.
        this.push(Buffer.from((this.scratch as Buffer).subarray(0, n)));
        break;
      case "header": {
        this.headerFill += n;
        if (this.headerFill < HEADER_BYTES) return true;
        if (this.beginHeader()) this.finishIfWhole();
        break;
      }
      case "payload":
        (this.current as NonNullable<FrameParser["current"]>).fill += n;
        this.finishIfWhole();
        break;
      case "sink": {
        const c = this.current as NonNullable<FrameParser["current"]>;
        (c.payload as PayloadSink).write((this.scratch as Buffer).subarray(0, n));
        c.fill += n;
        this.finishIfWhole();
        break;
      }
    }
    if (this.deferred === undefined) return true;
    this.paused = true;
    return false;
  }

  /** Asks the target again for a deferred frame, then parses what came after it. */
  resume(): void {
    const d = this.deferred;
    if (d === undefined || this.stopped) return;
    if (this.paused) {
      this.paused = false;
      this.resumeReading?.();
    }
    this.deferred = undefined;
    // EMPTY first: a frame without payload is delivered even when nothing came after it.
    const queue = this.begin(d.header, true) ? [EMPTY, ...d.queue] : d.queue;
    for (const [i, chunk] of queue.entries()) {
      const again = this.held();
      if (again !== undefined) return void again.queue.push(...queue.slice(i));
      this.parse(chunk);
    }
  }

  /** The deferred frame, if any (a method, so that the check is not narrowed away across calls). */
  private held(): FrameParser["deferred"] {
    return this.deferred;
  }

  private parse(chunk: Buffer): void {
    let at = 0;
    while (!this.stopped) {
      if (this.current === undefined) {
        if (at === chunk.length) return;
        const n = Math.min(HEADER_BYTES - this.headerFill, chunk.length - at);
        chunk.copy(this.header, this.headerFill, at, at + n);
        this.headerFill += n;
        at += n;
        if (this.headerFill < HEADER_BYTES) return;
        if (!this.beginHeader()) {
          if (this.deferred !== undefined && at < chunk.length) this.deferred.queue.push(chunk.subarray(at));
          return;
        }
      }
      const c = this.current as NonNullable<FrameParser["current"]>;
      const n = Math.min(c.header.payloadBytes - c.fill, chunk.length - at);
      if (Buffer.isBuffer(c.payload)) chunk.copy(c.payload, c.fill, at, at + n);
      else if (n > 0) c.payload.write(chunk.subarray(at, at + n));
      c.fill += n;
      at += n;
      if (c.fill < c.header.payloadBytes) return; // the chunk is used up
      this.finishIfWhole();
    }
  }

  /** The header buffer is full: decodes it and starts its frame; false when refused, deferred or malformed (the parser stopped). */
  private beginHeader(): boolean {
    this.headerFill = 0;
    const header = decodeHeader(this.header);
    if (typeof header === "string") {
      this.fail(new DataLossError(header));
      return false;
    }
    return this.begin(header, false);
  }

  /** The current frame, if its payload is all there: delivered. */
  private finishIfWhole(): void {
    const c = this.current;
    if (c === undefined || c.fill < c.header.payloadBytes) return;
    this.current = undefined;
    this.onFrame(c.header, Buffer.isBuffer(c.payload) ? c.payload : EMPTY);
  }

  /** The scratch buffer's first `n` bytes, for a read of kind `kind`. */
  private take(kind: "sink" | "spill", n: number): Buffer {
    this.lastTarget = kind;
    this.scratch ??= Buffer.allocUnsafeSlow(SCRATCH_BYTES);
    return this.scratch.subarray(0, n);
  }

  /** Starts a frame's payload where its target says; false when refused (the parser stopped) or deferred. */
  private begin(header: FrameHeader, retry: boolean): boolean {
    const payload = this.target(header, retry);
    if (payload === DEFER) {
      this.deferred = { header, queue: [] };
      return false;
    }
    if (payload instanceof Error) {
      this.fail(payload);
      return false;
    }
    this.current = { header, payload, fill: 0 };
    return true;
  }

  private fail(error: Error): void {
    this.stopped = true;
    this.onError(error);
  }
}
