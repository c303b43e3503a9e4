/**
 * The credit window of a link of the ring: a receiver grants its sender {@link CREDIT_WINDOW}
 * chunks, and one more each time it consumed one, so no rank ever buffers more than that per
 * peer. The sender's side ({@link CreditWindow}: what it may write now, its queue of chunks
 * waiting for credit, and the wait until every write was handed to the kernel) and the
 * receiver's ({@link ReceiveSlots}: the buffers chunks wait in until they are consumed).
 *
 * @module
 */

import type { CollectiveBuffer } from "../../session/Collective.js";
import { type DType, encodeHeader, type FrameHeader, FrameKind, type OpCode } from "./frames.js";
import type { Link, RingPeers } from "./links.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Chunks a receiver grants its sender: the per-peer buffering bound. */
export const CREDIT_WINDOW = 2;

/** A received frame. */
export interface Frame {
  readonly header: FrameHeader;
  readonly payload: Buffer;
  /** The receive slot holding the payload, or `PLACED` when it went straight into (or was reduced into) the caller's buffer. */
  readonly slot: number;
}

/** The slot of a frame received in place: no slot, its credit went back on arrival. */
export const PLACED = -1;

/** The counters of a collective the sender's side keeps (see `CollectiveStats`). */
interface SendCounters {
  chunksSent: number;
  bytesSent: number;
  maxBufferedChunksPerPeer: number;
  creditWaits: number;
}

type QueuedFrame = { header: Omit<FrameHeader, "seq">; payload: Buffer };

/** What a data frame says of its call. */
interface ChunkCall {
  readonly id: number;
  readonly op: OpCode;
  readonly dtype: DType;
  readonly elements: number;
  readonly root: number;
  /** Consecutive ranks upstream of this one known to have entered the call. */
  readonly upstreamArrived: number;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** The sending side of the outbound link: credits, the chunks waiting for them, and the flush. */
export class CreditWindow {
  private link: Link | undefined;
  /** Data frames written on the outbound link. */
  private written = 0;
  /** How many data frames the next rank's welcome and credit frames allow in all: the window plus every credit granted. */
  private granted = 0;
  /**
   * With two ranks: how many of the frames written the next rank has surely consumed, learnt from
   * its own data frames (see {@link consumedBefore}).
   */
  private consumedAtLeast = 0;
  /** The collective of the latest data frame written, and how many frames were written before its first. */
  private writing = { collective: 0, before: 0 };
  private readonly queue: QueuedFrame[] = [];
  private pendingWrites = 0;
  private flushWaiters: { resolve: () => void; reject: (e: Error) => void }[] = [];

  constructor(
    private readonly peers: RingPeers,
    private readonly counters: SendCounters,
  ) {}

  /** The next rank welcomed this one on `link`: it may send a window of chunks before its first credit. */
  open(link: Link): void {
    this.link = link;
    this.granted = CREDIT_WINDOW;
  }

  /** Data frames this rank may write now without overrunning the next rank's receive slots. */
  get credits(): number {
    return Math.max(this.granted, this.consumedAtLeast + CREDIT_WINDOW) - this.written;
  }

  /** Whether chunks wait for credit. */
  get waiting(): boolean {
    return this.queue.length > 0;
  }

  /** Whether chunks wait for credit or writes for the kernel. */
  get busy(): boolean {
    return this.queue.length > 0 || this.pendingWrites > 0;
  }

  /**
   * Sends elements `[a, b)` of `buffer` in `call`: now if there is credit and nothing queued
   * before it, else once credit comes (a credit wait).
   */
  send(call: ChunkCall, buffer: CollectiveBuffer, a: number, b: number): void {
    const bpe = buffer.BYTES_PER_ELEMENT;
    // A view, not a copy: the region is not written again before the next rank has received it
    // (every later write to it follows, causally, that rank's receipt), and the call resolves
    // only after every write was handed to the kernel.
    const payload = Buffer.from(buffer.buffer, buffer.byteOffset + a * bpe, (b - a) * bpe);
    const header = {
      kind: FrameKind.data,
      op: call.op,
      dtype: call.dtype,
      generation: this.peers.generation,
      rank: call.root,
      incarnation: this.peers.incarnation,
      collective: call.id,
      elements: call.elements,
      arrived: Math.min(this.peers.size, call.upstreamArrived + 1),
      payloadBytes: payload.length,
    };
    if (this.credits > 0 && this.queue.length === 0) this.write(header, payload);
    else {
      this.counters.creditWaits++;
      this.queue.push({ header, payload });
    }
  }

  /** The next rank granted `count` more chunks (a credit frame). */
  grant(count: number): void {
    this.granted += count;
    this.drain();
  }

  /**
   * Two ranks: the other rank's data frame of collective `collective` says it finished every
   * earlier collective, so it consumed every chunk this rank sent in them (see
   * `TcpCollective.impliedCredit`).
   */
  consumedBefore(collective: number): void {
    const { writing } = this;
    const consumed = collective > writing.collective ? this.written : collective === writing.collective ? writing.before : 0;
    if (consumed <= this.consumedAtLeast) return;
    this.consumedAtLeast = consumed;
    this.drain();
  }

  /** Resolves when every chunk was handed to the kernel, so the caller may reuse its buffer. */
  flushed(): Promise<void> {
    if (this.pendingWrites === 0 && this.queue.length === 0) return Promise.resolve();
    return new Promise((resolve, reject) => this.flushWaiters.push({ resolve, reject }));
  }

  /** The group broke: every flush waiting rejects with `error`, and the queue is dropped. */
  fail(error: Error): void {
    for (const w of this.flushWaiters.splice(0)) w.reject(error);
    this.queue.length = 0;
  }

  private write(header: Omit<FrameHeader, "seq">, payload: Buffer): void {
    const link = this.link as Link;
    if (header.collective !== this.writing.collective) this.writing = { collective: header.collective, before: this.written };
    this.written++;
    this.pendingWrites++;
    this.counters.chunksSent++;
    this.counters.bytesSent += payload.length;
    this.counters.maxBufferedChunksPerPeer = Math.max(this.counters.maxBufferedChunksPerPeer, CREDIT_WINDOW - this.credits);
    const onWritten = (): void => {
      this.pendingWrites--;
      if (this.pendingWrites === 0 && this.queue.length === 0) for (const w of this.flushWaiters.splice(0)) w.resolve();
    };
    link.socket.cork();
    link.socket.write(encodeHeader({ ...header, seq: link.sendSeq++ }), payload.length === 0 ? onWritten : undefined);
    if (payload.length > 0) link.socket.write(payload, onWritten);
    link.socket.uncork();
  }

  private drain(): void {
    while (this.credits > 0 && this.queue.length > 0) {
      const { header, payload } = this.queue.shift() as QueuedFrame;
      this.write(header, payload);
    }
    if (this.pendingWrites === 0 && this.queue.length === 0) for (const w of this.flushWaiters.splice(0)) w.resolve();
  }
}

/**
 * The receive buffers of the inbound link, one per chunk of the window, grown to the largest
 * chunk received (a group of small collectives never allocates a full `chunkBytes`).
 */
export class ReceiveSlots {
  private readonly slots: Buffer[] = Array.from({ length: CREDIT_WINDOW }, () => Buffer.alloc(0));
  private readonly free: number[] = this.slots.map((_, i) => i);

  /** Chunks received and not yet consumed. */
  get held(): number {
    return CREDIT_WINDOW - this.free.length;
  }

  /** A free slot and its first `bytes` bytes, or `undefined` when the sender overran its credit. */
  take(bytes: number): { readonly slot: number; readonly payload: Buffer } | undefined {
    const slot = this.free.shift();
    if (slot === undefined) return undefined;
    if ((this.slots[slot] as Buffer).length < bytes) this.slots[slot] = Buffer.allocUnsafeSlow(bytes);
    return { slot, payload: (this.slots[slot] as Buffer).subarray(0, bytes) };
  }

  /** The chunk in `slot` was consumed. */
  release(slot: number): void {
    this.free.push(slot);
  }
}
