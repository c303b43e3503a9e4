/**
 * The receiving side of a rank of the ring: the previous rank's frames, each read into a slot of
 * the credit window ({@link ReceiveSlots}) or, when the active call expects it, straight into
 * (or reduced into) the caller's buffer as its bytes arrive; the checks that both ranks made the
 * same call; and the credits granted back as chunks are consumed.
 *
 * @module
 */

import type { CollectiveBuffer } from "../../session/Collective.js";
import { CREDIT_WINDOW, type Frame, PLACED, ReceiveSlots } from "./creditWindow.js";
import { DataLossError, InvalidArgumentError } from "../../errors.js";
import { DEFER, DType, type FrameHeader, FrameKind, type FrameParser, MAX_CONTROL_PAYLOAD_BYTES, OpCode, type PayloadSink } from "./frames.js";
import { type Link, noticeTarget, type RingPeers } from "./links.js";
import { streamingReducer, typedView } from "./reduce.js";
import type { RingChunk } from "./ringSchedule.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What the receiving side knows of a collective call: what both ranks must agree on. */
export interface InboundCall {
  readonly id: number;
  /** The call, for error messages. */
  readonly what: string;
  readonly op: OpCode;
  readonly dtype: DType;
  readonly elements: number;
  readonly root: number;
  /** Consecutive ranks upstream of this one known to have entered the call. */
  upstreamArrived: number;
}

/**
 * Where the active call's chunks go, in the order they arrive, so that none is stored in a slot:
 * a chunk that is only copied (all-gather, broadcast) is read from the socket straight into the
 * caller's buffer; a chunk to reduce is added into it as its bytes arrive (`divisor` as in
 * `reduceInto`).
 */
interface ReceivePlan {
  readonly call: InboundCall;
  readonly buffer: CollectiveBuffer;
  readonly chunks: readonly RingChunk[];
}

/** What the receiving side uses of its collective. */
interface InboundHost {
  readonly peers: RingPeers;
  readonly chunkBytes: number;
  readonly counters: { chunksReceived: number; bytesReceived: number; maxBufferedChunksPerPeer: number; slottedChunks: number };
  /** The group's error, once it broke. */
  broken(): Error | undefined;
  /** The link from the previous rank, once it welcomed this one. */
  link(): Link | undefined;
  /** Set when the link from the previous rank closed while nothing waited on it. */
  gone(): Error | undefined;
  /** Breaks the group. */
  fail(error: Error): void;
  onAbort(link: Link, payload: Buffer): void;
  /** Rank `origin`'s termination notice came from the previous rank. */
  onNotice(link: Link, origin: number): void;
  /** A data frame of `collective` came (two ranks: the other one consumed what this one sent before). */
  impliedCredit(collective: number): void;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** The frames from the previous rank, for the collective's calls. */
export class Inbound {
  private readonly slots = new ReceiveSlots();
  private readonly ready: Frame[] = [];
  /** The slot the frame being parsed goes to. */
  private parsingSlot = -1;
  private waiter: { resolve: (f: Frame) => void; reject: (e: Error) => void } | undefined;
  private plan: ReceivePlan | undefined;
  /** Data frames whose header came, of the latest collective that sent any: the index of the next chunk. */
  private headersSeen = { collective: 0, count: 0 };
  /** The index (as in `headersSeen`) of the data frame held for a turn. */
  private heldIndex = 0;
  /** Credits granted with `release(frame, true)`, to be written at the next turn of the event loop. */
  private laterCredits = 0;

  constructor(private readonly host: InboundHost) {}

  /** Chunks received and not yet consumed. */
  get held(): number {
    return this.slots.held;
  }

  /** Whether a call waits for the previous rank's next frame. */
  get waiting(): boolean {
    return this.waiter !== undefined;
  }

  /** The group broke: the call waiting for a frame rejects with `error`, and no chunk goes to a caller's buffer any more. */
  fail(error: Error): void {
    this.waiter?.reject(error);
    this.waiter = undefined;
    this.plan = undefined;
  }

  /** `call` ended: its buffer is the caller's again. */
  end(call: InboundCall): void {
    if (this.plan?.call === call) this.plan = undefined;
  }

  /** Learns from the frames waiting in slots how many ranks upstream entered `call`. */
  noteArrivals(call: InboundCall): void {
    for (const f of this.ready) if (f.header.collective === call.id) call.upstreamArrived = Math.max(call.upstreamArrived, f.header.arrived);
  }

  receive(call: InboundCall, elements: number): Promise<Frame> {
    const { peers } = this.host;
    const check = (frame: Frame): Frame => {
      const h = frame.header;
      if (h.collective !== call.id || h.op !== call.op || h.dtype !== call.dtype || h.elements !== call.elements || h.rank !== call.root) {
        const error = new InvalidArgumentError(`the ranks disagree: ${peers.who(peers.rank)} called ${call.what}, ${peers.who(peers.prev)} called ${describe(h)}; every rank must make the same calls with buffers of the same type and length`);
        this.host.fail(error);
        throw error;
      }
      if (h.payloadBytes !== elements * (call.dtype === DType.float32 ? 4 : 8)) {
        const error = new DataLossError(`${peers.who(peers.prev)} sent a chunk of ${h.payloadBytes} bytes in ${call.what}; expected ${elements} elements`);
        this.host.fail(error);
        throw error;
      }
      call.upstreamArrived = Math.max(call.upstreamArrived, h.arrived);
      this.host.impliedCredit(h.collective);
      return frame;
    };
    const ready = this.ready.shift();
    if (ready !== undefined) return Promise.resolve(check(ready));
    const gone = this.host.gone();
    if (gone !== undefined) this.host.fail(gone);
    if (this.host.broken() !== undefined) return Promise.reject(this.host.broken());
    return new Promise<Frame>((resolve, reject) => (this.waiter = { resolve, reject })).then(check);
  }

  /**
   * The active call's chunks, in the order the previous rank sends them. Those whose header
   * came before the call started go to slots; the plan applies from the next one.
   */
  expect(call: InboundCall, buffer: CollectiveBuffer, chunks: ReceivePlan["chunks"]): void {
    this.plan = { call, buffer, chunks };
  }

  /** Copies a received chunk to `buffer[a…]`, unless it was received there. */
  place(buffer: CollectiveBuffer, a: number, frame: Frame): void {
    if (frame.slot !== PLACED) buffer.set(typedView(buffer, frame.payload), a);
    this.release(frame);
  }

  /**
   * The chunk was consumed: free its slot and grant the previous rank one more chunk, at once or,
   * with `later`, at the next turn of the event loop (one credit frame for all granted so).
   */
  release(frame: Frame, later = false): void {
    if (frame.slot === PLACED) return; // credited on arrival
    this.slots.release(frame.slot);
    if (!later) return this.grant(1);
    if (this.laterCredits++ === 0) {
      setImmediate(() => {
        const count = this.laterCredits;
        this.laterCredits = 0;
        this.grant(count);
      });
    }
  }

  private grant(count: number): void {
    const link = this.host.link();
    if (link === undefined || this.host.broken() !== undefined) return;
    link.socket.write(this.host.peers.header(link, { kind: FrameKind.credit, elements: count }));
  }

  onFrame(link: Link, header: FrameHeader, payload: Buffer): void {
    if (header.kind === FrameKind.abort) return this.host.onAbort(link, payload);
    if (header.kind === FrameKind.notice) return this.host.onNotice(link, header.rank);
    const slot = this.parsingSlot;
    this.host.counters.chunksReceived++;
    this.host.counters.bytesReceived += header.payloadBytes; // a chunk reduced as it arrived has an empty payload
    this.host.counters.maxBufferedChunksPerPeer = Math.max(this.host.counters.maxBufferedChunksPerPeer, this.slots.held);
    const frame: Frame = { header, payload, slot };
    if (slot === PLACED) this.grant(1);
    const w = this.waiter;
    if (w !== undefined) {
      this.waiter = undefined;
      w.resolve(frame);
    } else this.ready.push(frame);
  }

  /**
   * Where the next inbound frame's payload goes; a data frame takes a free slot, or breaks the
   * credit rule. A data frame of a collective this rank has not started yet is held for one
   * event-loop turn first: its header often comes in the same read as the end of the previous
   * collective, whose caller starts the next one in the microtasks that follow; after the turn
   * the frame can go straight into (or be reduced into) the caller's buffer instead of waiting
   * whole in a slot, with its credit held back until it is consumed.
   */
  target(link: Link, h: FrameHeader, retry: boolean, parser: FrameParser): Buffer | PayloadSink | Error | typeof DEFER {
    if (retry) return this.dataTarget(link, h, this.heldIndex);
    const bad = this.host.peers.checkFrame(link, h);
    if (bad !== undefined) return bad;
    if (h.kind === FrameKind.abort) return h.payloadBytes <= MAX_CONTROL_PAYLOAD_BYTES ? Buffer.alloc(h.payloadBytes) : new DataLossError(`${this.host.peers.who(link.peer)} sent an abort frame of ${h.payloadBytes} bytes`);
    if (h.kind === FrameKind.notice) return noticeTarget(this.host.peers, link, h);
    if (h.kind !== FrameKind.data) return new DataLossError(`${this.host.peers.who(link.peer)} sent a frame of kind ${h.kind} where data was expected`);
    if (h.payloadBytes > this.host.chunkBytes || h.payloadBytes % 4 !== 0) return new DataLossError(`${this.host.peers.who(link.peer)} sent a chunk of ${h.payloadBytes} bytes; chunks hold at most ${this.host.chunkBytes} (check that every rank uses the same chunkBytes)`);
    if (h.collective !== this.headersSeen.collective) this.headersSeen = { collective: h.collective, count: 0 };
    const index = this.headersSeen.count++;
    if (h.payloadBytes > 0 && this.plan?.call.id !== h.collective && this.host.broken() === undefined) {
      this.heldIndex = index;
      setImmediate(() => parser.resume()); // a turn of the event loop, not a time
      return DEFER;
    }
    return this.dataTarget(link, h, index);
  }

  /** A checked data frame's payload: in place when the active call expects it, else a slot. */
  private dataTarget(link: Link, h: FrameHeader, index: number): Buffer | PayloadSink | Error {
    const inPlace = this.inPlaceTarget(h, index);
    if (inPlace !== undefined) {
      this.parsingSlot = PLACED;
      return inPlace;
    }
    const taken = this.slots.take(h.payloadBytes);
    if (taken === undefined) return new DataLossError(`${this.host.peers.who(link.peer)} sent more than its credit of ${CREDIT_WINDOW} chunks`);
    if (h.payloadBytes > 0) this.host.counters.slottedChunks++;
    // Held from now on, while its payload is read (a read of its own on an `onread` socket).
    this.host.counters.maxBufferedChunksPerPeer = Math.max(this.host.counters.maxBufferedChunksPerPeer, this.slots.held);
    this.parsingSlot = taken.slot;
    return taken.payload;
  }

  /**
   * The caller's bytes a data frame goes to, read into or reduced into as it arrives: only when
   * its header matches the active call and the chunk expected (else a slot takes it and
   * `receive` reports the mismatch). Credits still bound what the sender has in flight.
   */
  private inPlaceTarget(h: FrameHeader, index: number): PayloadSink | undefined {
    const plan = this.plan;
    if (plan === undefined || h.collective !== plan.call.id) return undefined;
    const chunk = plan.chunks[index];
    const { call, buffer } = plan;
    const bpe = buffer.BYTES_PER_ELEMENT;
    if (chunk === undefined || h.op !== call.op || h.dtype !== call.dtype || h.elements !== call.elements || h.rank !== call.root) return undefined;
    if (h.payloadBytes !== (chunk.b - chunk.a) * bpe) return undefined;
    const into = chunk.divisor === undefined ? copyingSink(Buffer.from(buffer.buffer, buffer.byteOffset + chunk.a * bpe, h.payloadBytes)) : streamingReducer(buffer.subarray(chunk.a, chunk.b), chunk.divisor);
    // Once the call failed (or timed out) its buffer is the caller's again: the rest of the chunk is dropped.
    return { write: (piece) => void (this.plan === plan && into.write(piece)) };
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** Copies a payload's pieces, in order, into `target`. */
const copyingSink = (target: Buffer): PayloadSink => {
  let filled = 0;
  return { write: (piece) => void (filled += piece.copy(target, filled)) };
};

const describe = (h: FrameHeader): string => {
  const what = h.op === OpCode.sum ? "allReduce(sum)" : h.op === OpCode.mean ? "allReduce(mean)" : h.op === OpCode.broadcast ? `broadcast from rank ${h.rank}` : "barrier";
  return `${what} #${h.collective} over ${h.elements} ${h.dtype === DType.float32 ? "float32" : "float64"} elements`;
};
