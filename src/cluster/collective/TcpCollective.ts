/**
 * The shipped {@link Collective}: a chunked ring over plain TCP (`node:net`), or TLS (`node:tls`)
 * when certificate files are given. Each rank connects to the previous rank of the ring (the one
 * it receives from: on plain TCP its socket then reads into buffers the frame parser picks, with
 * no buffer per read) and accepts the next one; all-reduce is a reduce-scatter then an all-gather in which every chunk is
 * forwarded as soon as it is reduced, so reduction overlaps the transfer of the next chunks.
 * See docs/distributed.md ("Collectives") and docs/performance.md ("Ring all-reduce").
 *
 * @module
 */

import { isIP, type AddressInfo, type Server as NetServer, type Socket, createServer as createNetServer, connect as netConnect } from "node:net";
import { createServer as createTlsServer, connect as tlsConnect } from "node:tls";
import { type Clock, systemClock, secs, type TimerHandle } from "../../Clock.js";
import {
  AbortedError,
  AlreadyExistsError,
  CancelledError,
  DataLossError,
  DeadlineExceededError,
  FailedPreconditionError,
  InvalidArgumentError,
  UnauthenticatedError,
  UnavailableError,
} from "../../errors.js";
import { consoleLogger, type Logger } from "../../Logger.js";
import { newIncarnation, taskName } from "../coordination/identity.js";
import { decodeStatusJson, fromStatus, toStatus } from "../coordination/status.js";
import { parseAddress } from "../TfConfig.js";
import { bearer, loadTlsCredentials, tokenMatches, type TlsCredentials, type TlsFiles } from "../security.js";
import {
  type Collective,
  type CollectiveBuffer,
  type CollectiveCallOptions,
  DEFAULT_COLLECTIVE_TIMEOUT_SECS,
  RankStopVote,
  type ReduceOp,
} from "./Collective.js";
import { DEFER, DType, encodeHeader, type FrameHeader, FrameKind, FrameParser, MAX_CONTROL_PAYLOAD_BYTES, OpCode, type PayloadSink } from "./frames.js";
import { reduceInto, reduceIntoDstFirst, streamingReducer, typedView } from "./reduce.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** How to build a {@link TcpCollective}. */
export interface TcpCollectiveOptions {
  /** This process's rank: its index in `addresses`. */
  readonly rank: number;
  /**
   * Every rank's `host:port`, by rank. This rank listens on `addresses[rank]` (port 0 picks a free
   * port; {@link TcpCollective.listen} reports it) and connects to the next rank's address.
   */
  readonly addresses: readonly string[];
  /** Every rank's task name, for error messages; default `/job:worker/replica:0/task:<rank>`. */
  readonly tasks?: readonly string[] | undefined;
  /** The cluster's generation (from the coordination service); a peer of another generation is refused. Default 0. */
  readonly generation?: number | undefined;
  /** This process's incarnation (a decimal u64, as `newIncarnation()` makes); default a new one. */
  readonly incarnation?: string | undefined;
  /** The incarnation each rank registered with, when known; a peer with another one is refused (it restarted). */
  readonly peerIncarnations?: readonly (string | undefined)[] | undefined;
  /** The cluster token: sent in the handshake, and required from the previous rank. */
  readonly token?: string | undefined;
  /** TLS from PEM files (as the Server's `tls`): listen and connect with `node:tls`; `caFile` makes it mutual. */
  readonly tls?: TlsFiles | undefined;
  /** The deadline of each collective, in seconds. Default 60. */
  readonly collectiveTimeoutSecs?: number | undefined;
  /** The deadline of `listen()` and of `connect()` (both neighbours connected and authenticated), in seconds. Default 60. */
  readonly connectTimeoutSecs?: number | undefined;
  /** The largest chunk on the wire, in bytes (a multiple of 8). Each rank buffers at most 2 per peer. Default 4 MiB. */
  readonly chunkBytes?: number | undefined;
  /** Time for deadlines and retries. */
  readonly clock?: Clock | undefined;
  readonly logger?: Logger | undefined;
}

/** Counters of a {@link TcpCollective}, for tests and monitoring. */
export interface CollectiveStats {
  /** Collectives called. */
  readonly collectives: number;
  readonly chunksSent: number;
  readonly chunksReceived: number;
  /** Payload bytes of the data chunks sent and received (headers and credits not counted). */
  readonly bytesSent: number;
  readonly bytesReceived: number;
  /** Chunks received from the previous rank and not yet reduced or copied. */
  readonly bufferedChunks: number;
  /** Chunks sent to the next rank and not yet consumed there (no credit back yet). */
  readonly unacknowledgedChunks: number;
  /**
   * The most chunks ever outstanding with one peer: received and not consumed, or sent and not
   * credited. Never above 2; a stopped peer makes its sender wait, not buffer.
   */
  readonly maxBufferedChunksPerPeer: number;
  /** How many chunks had to wait for the next rank's credit (it was slow or stopped). */
  readonly creditWaits: number;
  /**
   * Chunks (with a payload) that arrived before this rank's call was ready for them and waited
   * whole in a receive slot; the others went straight into, or were reduced into, the caller's
   * buffer as their bytes arrived.
   */
  readonly slottedChunks: number;
  /** Connections refused at the handshake (bad token, stale generation or incarnation, wrong rank). */
  readonly rejectedConnections: number;
}

/** Chunks a receiver grants its sender: the per-peer buffering bound. */
const CREDIT_WINDOW = 2;
/**
 * 4 MiB: the 2-chunk window then holds 8 MiB in flight per link, so credits rarely stall the
 * sender on loopback (256 KiB chunks made a 16 MiB all-reduce ~2.5× the raw exchange, mostly idle).
 */
const DEFAULT_CHUNK_BYTES = 4 * 1024 * 1024;
/** How long `close()` lets a peer acknowledge the end of a link before cutting it. */
const CLOSE_GRACE_MS = 5000;
const MAX_HELLO_AUTH_BYTES = 4096;
const RETRYABLE = new Set(["ECONNREFUSED", "ECONNRESET", "EPIPE", "EHOSTUNREACH", "ENETUNREACH", "ETIMEDOUT", "EAI_AGAIN"]);

interface Frame {
  readonly header: FrameHeader;
  readonly payload: Buffer;
  /** The receive slot holding the payload, or `PLACED` when it went straight into (or was reduced into) the caller's buffer. */
  readonly slot: number;
}

/** The slot of a frame received in place: no slot, its credit went back on arrival. */
const PLACED = -1;

/** Elements `[a, b)` of a buffer, and the divisor of a mean's last reduction (`undefined`: a chunk copied, not reduced). */
interface RingChunk {
  readonly a: number;
  readonly b: number;
  readonly divisor: number | undefined;
}

/**
 * Where the active call's chunks go, in the order they arrive, so that none is stored in a slot:
 * a chunk that is only copied (all-gather, broadcast) is read from the socket straight into the
 * caller's buffer; a chunk to reduce is added into it as its bytes arrive (`divisor` as in
 * {@link reduceInto}).
 */
interface ReceivePlan {
  readonly call: Call;
  readonly buffer: CollectiveBuffer;
  readonly chunks: readonly RingChunk[];
}

/** One rank's part in a ring all-reduce of buffers of one length and element size (see `ringSchedule`). */
interface RingSchedule {
  readonly elements: number;
  readonly bytesPerElement: number;
  readonly mean: boolean;
  readonly own: readonly (readonly [number, number])[];
  readonly reduceSteps: readonly (readonly RingChunk[])[];
  readonly gatherSteps: readonly (readonly RingChunk[])[];
  readonly expected: readonly RingChunk[];
}

interface Call {
  readonly id: number;
  readonly what: string;
  readonly op: OpCode;
  readonly dtype: DType;
  readonly elements: number;
  readonly root: number;
  /** Consecutive ranks upstream of this one known to have entered the call. */
  upstreamArrived: number;
  phase: "receiving" | "flushing";
  readonly reject: (e: Error) => void;
  /** When the call expires, on the clock's monotonic time (see {@link TcpCollective.armDeadline}). */
  readonly deadline: number;
  readonly timeoutMs: number;
}

/** A link's socket and what the other end identified as. */
interface Link {
  readonly socket: Socket;
  readonly peer: number;
  readonly peerIncarnation: bigint;
  sendSeq: number;
  receiveSeq: number;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * A ring collective over TCP. Call {@link listen} on every rank, then {@link connect}, then the
 * collectives; {@link close} at the end.
 *
 * @example
 * ```ts
 * import { TcpCollective } from "monitored-session/cluster";
 *
 * const collective = new TcpCollective({ rank: 0, addresses: ["127.0.0.1:0"] });
 * await collective.listen();
 * await collective.connect();
 * const gradients = await collective.allReduce(new Float32Array([1, 2, 3]), "mean");
 * await collective.close();
 * ```
 */
export class TcpCollective implements Collective {
  readonly rank: number;
  readonly size: number;
  /**
   * This rank's stop vote: a trainer that carries it (`tfjsSession({ collective })`) stops every
   * rank after the same step once any rank called {@link requestStop}.
   */
  readonly stopVote = new RankStopVote();
  private readonly next: number;
  private readonly prev: number;
  /** Every rank's task name. */
  readonly tasks: readonly string[];
  private readonly generation: number;
  private readonly incarnation: bigint;
  private readonly peerIncarnations: readonly (bigint | undefined)[];
  private readonly token: string | undefined;
  /** What the hello and the welcome carry: the cluster token as a bearer credential, or nothing. */
  private readonly auth: Buffer;
  private readonly credentials: TlsCredentials | undefined;
  private readonly collectiveTimeoutMs: number;
  /** The one deadline timer, and the deadline it was armed for (monotonic time). */
  private deadlineTimer: { readonly at: number; readonly handle: TimerHandle } | undefined;
  private readonly connectTimeoutMs: number;
  private readonly chunkBytes: number;
  private readonly clock: Clock;
  private readonly logger: Logger;
  private addresses: readonly string[];

  private server: NetServer | undefined;
  private boundAddress: string | undefined;
  private outbound: Link | undefined;
  private inbound: Link | undefined;
  private readonly outboundReady = deferred();
  private readonly pendingSockets = new Set<Socket>();
  /** Set when a link closed while nothing waited on it; raised at its next use. */
  private inboundGone: Error | undefined;
  private outboundGone: Error | undefined;
  private connected = false;
  private closed = false;
  private broken: Error | undefined;

  // receiving (from prev)
  /** Receive buffers, grown to the largest chunk received (a group of small collectives never allocates a full `chunkBytes`). */
  private readonly slots: Buffer[];
  private readonly freeSlots: number[];
  private readonly ready: Frame[] = [];
  /** The slot the frame being parsed goes to. */
  private parsingSlot = -1;
  private waiter: { resolve: (f: Frame) => void; reject: (e: Error) => void } | undefined;
  private plan: ReceivePlan | undefined;
  private lastSchedule: RingSchedule | undefined;
  /** Data frames whose header came, of the latest collective that sent any: the index of the next chunk. */
  private headersSeen = { collective: 0, count: 0 };
  /** The index (as in `headersSeen`) of the data frame held for a turn. */
  private heldIndex = 0;
  /** Credits granted with `release(frame, true)`, to be written at the next turn of the event loop. */
  private laterCredits = 0;

  // sending (to next)
  /** Data frames written on the outbound link. */
  private written = 0;
  /** How many data frames the next rank's welcome and credit frames allow in all: the window plus every credit granted. */
  private granted = 0;
  /**
   * With two ranks: how many of the frames written the next rank has surely consumed, learnt from
   * its own data frames (see {@link impliedCredit}).
   */
  private consumedAtLeast = 0;
  /** The collective of the latest data frame written, and how many frames were written before its first. */
  private writing = { collective: 0, before: 0 };
  private readonly sendQueue: { header: Omit<FrameHeader, "seq">; payload: Buffer }[] = [];
  private pendingWrites = 0;
  private flushWaiters: { resolve: () => void; reject: (e: Error) => void }[] = [];

  // calls
  private chain: Promise<void> = Promise.resolve();
  private readonly calls = new Set<Call>();
  private active: Call | undefined;
  private counters = { collectives: 0, chunksSent: 0, chunksReceived: 0, bytesSent: 0, bytesReceived: 0, maxBufferedChunksPerPeer: 0, creditWaits: 0, slottedChunks: 0, rejectedConnections: 0 };

  /** @throws InvalidArgumentError (one line) naming a bad option. */
  constructor(options: TcpCollectiveOptions) {
    const { rank, addresses } = options;
    if (!Array.isArray(addresses) || addresses.length === 0) throw new InvalidArgumentError("TcpCollective: addresses must list every rank's host:port (at least one)");
    if (!Number.isInteger(rank) || rank < 0 || rank >= addresses.length) {
      throw new InvalidArgumentError(`TcpCollective: rank ${rank} is not an index of addresses (0..${addresses.length - 1})`);
    }
    this.rank = rank;
    this.size = addresses.length;
    this.next = (rank + 1) % this.size;
    this.prev = (rank + this.size - 1) % this.size;
    checkAddresses(addresses, this.size);
    this.addresses = addresses;
    if (options.tasks !== undefined && options.tasks.length !== this.size) {
      throw new InvalidArgumentError(`TcpCollective: tasks has ${options.tasks.length} names for ${this.size} addresses; give one task name per rank`);
    }
    this.tasks = options.tasks ?? addresses.map((_, i) => taskName("worker", i));
    this.generation = options.generation ?? 0;
    if (!Number.isInteger(this.generation) || this.generation < 0 || this.generation > 0xffffffff) {
      throw new InvalidArgumentError(`TcpCollective: generation ${options.generation} must be an integer in 0..2^32-1`);
    }
    this.incarnation = parseIncarnation(options.incarnation ?? newIncarnation(), "incarnation");
    this.peerIncarnations = addresses.map((_, i) => {
      const s = options.peerIncarnations?.[i];
      return s === undefined ? undefined : parseIncarnation(s, `peerIncarnations[${i}]`);
    });
    if (options.token !== undefined && options.token === "") throw new InvalidArgumentError("TcpCollective: token is empty; give the cluster token or leave it unset");
    this.token = options.token;
    this.auth = Buffer.from(this.token === undefined ? "" : bearer(this.token));
    this.credentials = options.tls === undefined ? undefined : loadTlsCredentials(options.tls);
    this.collectiveTimeoutMs = secs(positive(options.collectiveTimeoutSecs ?? DEFAULT_COLLECTIVE_TIMEOUT_SECS, "collectiveTimeoutSecs"));
    this.connectTimeoutMs = secs(positive(options.connectTimeoutSecs ?? DEFAULT_COLLECTIVE_TIMEOUT_SECS, "connectTimeoutSecs"));
    this.chunkBytes = options.chunkBytes ?? DEFAULT_CHUNK_BYTES;
    if (!Number.isInteger(this.chunkBytes) || this.chunkBytes < 8 || this.chunkBytes % 8 !== 0 || this.chunkBytes > 64 * 1024 * 1024) {
      throw new InvalidArgumentError(`TcpCollective: chunkBytes ${options.chunkBytes} must be a multiple of 8 between 8 and 64 MiB`);
    }
    this.clock = options.clock ?? systemClock;
    this.logger = options.logger ?? consoleLogger();
    this.slots = Array.from({ length: CREDIT_WINDOW }, () => Buffer.alloc(0));
    this.freeSlots = this.slots.map((_, i) => i);
  }

  // -------------------------------------------------------------------------------------------
  // lifecycle
  // -------------------------------------------------------------------------------------------

  /** Binds `addresses[rank]` and accepts the next rank (which receives from this one); resolves with the bound `host:port`. */
  async listen(): Promise<string> {
    if (this.boundAddress !== undefined) return this.boundAddress;
    this.checkUsable();
    const { host, port } = parseAddress(this.addresses[this.rank] as string) as { host: string; port: number };
    const c = this.credentials;
    const server: NetServer =
      c === undefined
        ? createNetServer((s) => this.accept(s))
        : createTlsServer({ cert: c.cert, key: c.key, ca: c.ca, requestCert: c.ca !== undefined, rejectUnauthorized: c.ca !== undefined }, (s) => this.accept(s));
    if (c !== undefined) server.on("tlsClientError", () => void this.counters.rejectedConnections++);
    this.server = server;
    await this.withDeadline(
      new Promise<void>((resolve, reject) => {
        server.once("error", (e: NodeJS.ErrnoException) =>
          reject(new UnavailableError(`${this.who(this.rank)} cannot listen on ${host}:${port}: ${e.code ?? e.message}; free the port or pick another`, { cause: e })),
        );
        server.listen(port, host, () => resolve());
      }),
      () => new DeadlineExceededError(`${this.who(this.rank)} could not listen on ${host}:${port} within ${this.connectTimeoutMs / 1000} s`),
    ).catch((e: unknown) => {
      server.close();
      this.server = undefined;
      throw e;
    });
    server.on("error", (e) => this.logger.warn(`collective: ${this.who(this.rank)}: listener error: ${e.message}`));
    this.boundAddress = `${isIP(host) === 6 ? `[${host}]` : host}:${(server.address() as AddressInfo).port}`;
    return this.boundAddress;
  }

  /**
   * Connects the ring: dials the previous rank (the one it receives from; the receiver of a link
   * dials it) and waits for the next one to dial this one, both authenticated,
   * within `connectTimeoutSecs`. `addresses` replaces the constructor's (e.g. once ports bound
   * to 0 are known).
   *
   * @throws DeadlineExceededError naming the rank that could not be reached or did not connect;
   *   AbortedError for a peer of another generation or incarnation; UnauthenticatedError for a token mismatch.
   */
  async connect(addresses?: readonly string[]): Promise<void> {
    this.checkUsable();
    if (this.connected) return;
    if (addresses !== undefined) {
      checkAddresses(addresses, this.size);
      if (addresses.length !== this.size) throw new InvalidArgumentError(`TcpCollective.connect: ${addresses.length} addresses for a group of ${this.size} ranks`);
      this.addresses = addresses;
    }
    if (this.size === 1) {
      this.connected = true;
      return;
    }
    await this.listen();
    const stop = new AbortController();
    let lastDialError = "no answer";
    let dialed = false;
    const dial = this.dialPrev(stop.signal, (e) => (lastDialError = e)).then((link) => {
      dialed = true;
      return link;
    });
    try {
      await this.withDeadline(Promise.all([dial, this.outboundReady.promise]), () => {
        const missing = [
          ...(dialed ? [] : [`could not connect to ${this.who(this.prev)} at ${this.addresses[this.prev]} (last error: ${lastDialError})`]),
          ...(this.outbound !== undefined ? [] : [`was not connected to by ${this.who(this.next)}`]),
        ];
        return new DeadlineExceededError(`${this.who(this.rank)} ${missing.join(" and ")} within ${this.connectTimeoutMs / 1000} s (connectTimeoutSecs); is every rank running?`);
      });
    } catch (e) {
      stop.abort();
      for (const s of this.pendingSockets) s.destroy();
      this.fail(e as Error);
      throw e;
    }
    this.checkUsable();
    this.connected = true;
  }

  /** Asks every rank to stop after the step this rank contributes to next (a termination notice): see {@link stopVote}. */
  requestStop(): void {
    this.stopVote.request();
  }

  /** Whether the ranks agreed to stop: set on every rank after the same step. */
  get stopAgreed(): boolean {
    return this.stopVote.isAgreed;
  }

  /** Whether the trainer carries {@link stopVote} in its steps. */
  get votes(): boolean {
    return this.stopVote.carried;
  }

  /**
   * Leaves the group: pending calls raise CancelledError. The links are closed gracefully (what
   * was sent is delivered), so a peer still finishing the last collective finishes it; a peer
   * that needs more from this rank raises UnavailableError naming it.
   *
   * Resolves once both neighbours have closed their ends too, or after 5 s for a neighbour that
   * does not (a frozen one is cut off). Waiting matters when the process exits next: a socket
   * the kernel resets on exit can make a neighbour that is still writing to it see the reset
   * before it reads this rank's abort frame, and then raise "closed its connection" naming this
   * rank instead of the failure the abort frame names.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.fail(new CancelledError(`the collective of ${this.who(this.rank)} was closed`), null);
    for (const s of this.pendingSockets) s.destroy();
    const closing: Promise<void>[] = [];
    for (const link of [this.outbound, this.inbound]) {
      if (link === undefined || link.socket.destroyed) continue;
      // Keep reading until the peer closes too, so its last frames are not reset; a frozen peer is cut off.
      link.socket.end();
      const timer = this.clock.setTimer(CLOSE_GRACE_MS, () => link.socket.destroy());
      closing.push(
        new Promise((resolve) =>
          link.socket.once("close", () => {
            timer.cancel();
            resolve();
          }),
        ),
      );
    }
    this.server?.close();
    await Promise.all(closing);
  }

  /** The address `listen()` bound, or `undefined` before. */
  get address(): string | undefined {
    return this.boundAddress;
  }

  /** Data frames this rank may write now without overrunning the next rank's receive slots. */
  private get credits(): number {
    return Math.max(this.granted, this.consumedAtLeast + CREDIT_WINDOW) - this.written;
  }

  /** Counters: chunks moved, buffering, credit waits, refused connections. */
  stats(): CollectiveStats {
    return { ...this.counters, bufferedChunks: CREDIT_WINDOW - this.freeSlots.length, unacknowledgedChunks: this.outbound === undefined ? 0 : CREDIT_WINDOW - this.credits };
  }

  // -------------------------------------------------------------------------------------------
  // collectives
  // -------------------------------------------------------------------------------------------

  allReduce<B extends CollectiveBuffer>(buffer: B, op: ReduceOp, options?: CollectiveCallOptions): Promise<B> {
    if (op !== "sum" && op !== "mean") return Promise.reject(new InvalidArgumentError(`allReduce: op ${JSON.stringify(op)} is not "sum" or "mean"`));
    const code = op === "sum" ? OpCode.sum : OpCode.mean;
    const mean = op === "mean";
    // Two ranks and one chunk: an exchange, one hop instead of the ring's two (see exchangeAllReduce).
    const exchange = this.size === 2 && buffer.length > 0 && buffer.byteLength <= this.chunkBytes;
    return this.enqueue(buffer, code, 0, options, `allReduce(${op})`, (call) => (exchange ? this.exchangeAllReduce(call, buffer, mean) : this.ringAllReduce(call, buffer, mean))).then(() => buffer);
  }

  broadcast<B extends CollectiveBuffer>(buffer: B, root: number, options?: CollectiveCallOptions): Promise<B> {
    if (!Number.isInteger(root) || root < 0 || root >= this.size) {
      return Promise.reject(new InvalidArgumentError(`broadcast: root ${root} is not a rank of this group (0..${this.size - 1})`));
    }
    return this.enqueue(buffer, OpCode.broadcast, root, options, `broadcast from rank ${root}`, (call) => this.ringBroadcast(call, buffer, root)).then(() => buffer);
  }

  async barrier(options?: CollectiveCallOptions): Promise<void> {
    // A ring all-reduce of nothing still passes 2(N−1) frames around: no rank can leave before
    // every rank entered. Two ranks exchange one empty frame each way instead.
    const empty = new Float64Array(0);
    await this.enqueue(empty, OpCode.barrier, 0, options, "barrier", (call) => (this.size === 2 ? this.exchangeAllReduce(call, empty, false) : this.ringAllReduce(call, empty, false)));
  }

  onPeerFailed(task: string, error?: Error): void {
    const rank = this.tasks.indexOf(task);
    if (rank < 0 || rank === this.rank) return;
    this.fail(error instanceof UnavailableError ? error : new UnavailableError(`${this.who(rank)} failed${error === undefined ? "" : `: ${error.message}`}`, { cause: error }));
  }

  // -------------------------------------------------------------------------------------------
  // the ring
  // -------------------------------------------------------------------------------------------

  /**
   * Reduce-scatter then all-gather. Segment s (a contiguous 1/N of the buffer) starts at rank s
   * and is summed as ((x_s + x_{s+1}) + …) + x_{s−1}, once, by the ranks in ring order; its owner
   * (rank s−1) divides it for a mean; the all-gather copies the result. Each received chunk is
   * reduced and sent on at once, so chunks of one step overlap those of the next.
   */
  private async ringAllReduce(call: Call, buffer: CollectiveBuffer, mean: boolean): Promise<void> {
    const n = this.size;
    if (n === 1) return;
    const { own, reduceSteps, gatherSteps, expected } = this.ringSchedule(buffer, mean);
    this.expect(call, buffer, expected);
    for (const [a, b] of own) this.send(call, buffer, a, b);
    for (const chunks of reduceSteps) {
      for (const { a, b, divisor } of chunks) {
        const frame = await this.receive(call, b - a);
        if (frame.slot !== PLACED) reduceInto(buffer.subarray(a, b), typedView(buffer, frame.payload), divisor ?? 1);
        this.release(frame);
        this.send(call, buffer, a, b);
      }
    }
    for (const [k, chunks] of gatherSteps.entries()) {
      for (const { a, b } of chunks) {
        this.place(buffer, a, await this.receive(call, b - a));
        if (k < n - 2) this.send(call, buffer, a, b);
      }
    }
    await this.flushed(call);
  }

  /**
   * Two ranks and a buffer of one chunk (or none: a barrier): each rank sends its whole buffer
   * and adds the other's. The ring would take two dependent hops of half the buffer (the
   * reduce-scatter's, then the all-gather's); this is one hop of the whole buffer each way, with
   * the same bytes sent and received. Each segment is added in the ring's order (segment s as
   * x_s + x_{s+1}, then divided for a mean), so both ranks get exactly the ring's bits, NaN
   * payloads included. The peer's chunk waits in a receive slot until this rank's own bytes were
   * handed to the kernel: they are sent from the caller's buffer, which the sum overwrites. The
   * slot's credit goes back at the next turn of the event loop, not before the call resolves:
   * the end of the call is on a training step's critical path, where the write took about 0.1 ms. The other rank needs it no
   * sooner: this rank's next data frame implies it (see {@link impliedCredit}), and a next call
   * in which this rank sends nothing turns the event loop while it waits.
   */
  private async exchangeAllReduce(call: Call, buffer: CollectiveBuffer, mean: boolean): Promise<void> {
    this.expect(call, buffer, []);
    this.send(call, buffer, 0, buffer.length);
    const frame = await this.receive(call, buffer.length);
    try {
      await this.flushed(call);
      const theirs = typedView(buffer, frame.payload);
      const divisor = mean ? 2 : 1;
      for (let s = 0; s < 2 && buffer.length > 0; s++) {
        const [a, b] = segment(buffer.length, 2, s);
        // Segment s starts at rank s: this rank's value comes first in its own segment.
        (s === this.rank ? reduceIntoDstFirst : reduceInto)(buffer.subarray(a, b), theirs.subarray(a, b), divisor);
      }
    } finally {
      this.release(frame, true);
    }
  }

  /**
   * This rank's chunks of a ring all-reduce of `buffer`'s length and element size: its own
   * segment's (sent first), the reduce-scatter's and the all-gather's steps, and every chunk it
   * receives, in order. The last one is kept: a training loop all-reduces a buffer of the same
   * length at every step, and the schedule depends on nothing else.
   */
  private ringSchedule(buffer: CollectiveBuffer, mean: boolean): RingSchedule {
    const cached = this.lastSchedule;
    if (cached !== undefined && cached.elements === buffer.length && cached.bytesPerElement === buffer.BYTES_PER_ELEMENT && cached.mean === mean) return cached;
    const n = this.size;
    const bounds = (s: number): readonly [number, number] => segment(buffer.length, n, mod(s, n));
    const steps = (first: number, divisor: (k: number) => number | undefined): RingChunk[][] =>
      Array.from({ length: n - 1 }, (_, k) => this.chunks(buffer, bounds(first - k)).map(([a, b]) => ({ a, b, divisor: divisor(k) })));
    const reduceSteps = steps(this.rank - 1, (k) => (mean && k === n - 2 ? n : 1));
    const gatherSteps = steps(this.rank, () => undefined);
    const schedule: RingSchedule = {
      elements: buffer.length,
      bytesPerElement: buffer.BYTES_PER_ELEMENT,
      mean,
      own: this.chunks(buffer, bounds(this.rank)),
      reduceSteps,
      gatherSteps,
      expected: [...reduceSteps.flat(), ...gatherSteps.flat()],
    };
    this.lastSchedule = schedule;
    return schedule;
  }

  /** A pipeline from the root around the ring; the rank before the root does not send. */
  private async ringBroadcast(call: Call, buffer: CollectiveBuffer, root: number): Promise<void> {
    if (this.size === 1) return;
    const all = this.chunks(buffer, [0, buffer.length]);
    if (this.rank === root) {
      for (const [a, b] of all) this.send(call, buffer, a, b);
    } else {
      this.expect(call, buffer, all.map(([a, b]) => ({ a, b, divisor: undefined })));
      for (const [a, b] of all) {
        this.place(buffer, a, await this.receive(call, b - a));
        if (this.next !== root) this.send(call, buffer, a, b);
      }
    }
    await this.flushed(call);
  }

  /** `[start, end)` element ranges of at most `chunkBytes`; an empty range is one empty chunk (a frame still passes). */
  private chunks(buffer: CollectiveBuffer, [start, end]: readonly [number, number]): [number, number][] {
    const per = this.chunkBytes / buffer.BYTES_PER_ELEMENT;
    const out: [number, number][] = [];
    for (let a = start; a < end; a += per) out.push([a, Math.min(end, a + per)]);
    return out.length === 0 ? [[start, start]] : out;
  }

  // -------------------------------------------------------------------------------------------
  // calls: order, deadlines, failure
  // -------------------------------------------------------------------------------------------

  private enqueue(buffer: CollectiveBuffer, op: OpCode, root: number, options: CollectiveCallOptions | undefined, what: string, run: (call: Call) => Promise<void>): Promise<void> {
    const dtype = buffer instanceof Float32Array ? DType.float32 : buffer instanceof Float64Array ? DType.float64 : DType.none;
    if (dtype === DType.none) return Promise.reject(new InvalidArgumentError(`${what}: expected a Float32Array or Float64Array buffer`));
    const timeoutSecs = options?.timeoutSecs ?? this.collectiveTimeoutMs / 1000;
    if (!(timeoutSecs > 0)) return Promise.reject(new InvalidArgumentError(`${what}: timeoutSecs ${timeoutSecs} must be a positive number of seconds`));
    if (this.broken !== undefined) return Promise.reject(this.broken);
    if (!this.connected) return Promise.reject(new FailedPreconditionError(`${what}: call listen() and connect() on every rank first`));
    const timeoutMs = secs(timeoutSecs);
    this.counters.collectives++;
    const id = this.counters.collectives;
    const d = deferred();
    const deadline = this.monotonic() + timeoutMs;
    const call: Call = {
      id,
      what: `${what} #${id} over ${buffer.length} ${dtype === DType.float32 ? "float32" : "float64"} elements`,
      op,
      dtype,
      elements: buffer.length,
      root,
      upstreamArrived: 0,
      phase: "receiving",
      reject: d.reject,
      deadline,
      timeoutMs,
    };
    this.calls.add(call);
    this.armDeadline(deadline);
    const done = (): void => {
      this.calls.delete(call);
      if (this.active === call) this.active = undefined;
      if (this.plan?.call === call) this.plan = undefined;
    };
    this.chain = this.chain.then(async () => {
      try {
        if (this.broken !== undefined) throw this.broken;
        this.active = call;
        await run(call);
        d.resolve();
      } catch (e) {
        d.reject(e as Error);
      } finally {
        done();
      }
    });
    return d.promise;
  }

  /**
   * One timer serves every call's deadline. It is armed for the earliest deadline and left armed
   * when that call ends: a training loop's calls, each due after the one before, then arm and
   * cancel no timer (a timer each took about 0.05 ms of a step's all-reduce). Deadlines are read
   * on the clock's monotonic time, which a step of the system clock does not move.
   */
  private armDeadline(at: number): void {
    const armed = this.deadlineTimer;
    if (armed !== undefined && armed.at <= at) return; // it fires first, and arms again for the calls still waiting
    armed?.handle.cancel();
    this.deadlineTimer = { at, handle: this.clock.setTimer(at - this.monotonic(), () => this.onDeadlineTimer()) };
  }

  /** The deadline timer fired: the call past its deadline fails the group; else the timer is armed for the next deadline. */
  private onDeadlineTimer(): void {
    this.deadlineTimer = undefined;
    if (this.broken !== undefined) return;
    const now = this.monotonic();
    let next: Call | undefined;
    for (const call of this.calls) if (next === undefined || call.deadline < next.deadline) next = call;
    if (next === undefined) return;
    if (next.deadline <= now) return this.fail(this.deadlineError(next));
    this.armDeadline(next.deadline);
  }

  private monotonic(): number {
    return this.clock.monotonic?.() ?? this.clock.now();
  }

  /** The slowest rank as this rank can tell: the first rank upstream not known to have entered, else the neighbour it waits on. */
  private deadlineError(call: Call): DeadlineExceededError {
    const base = `${call.what} did not finish within ${call.timeoutMs / 1000} s on ${this.who(this.rank)}`;
    if (this.active !== call) return new DeadlineExceededError(`${base}: it was still queued behind ${this.active?.what ?? "another collective"}`);
    for (const f of this.ready) if (f.header.collective === call.id) call.upstreamArrived = Math.max(call.upstreamArrived, f.header.arrived);
    const reach = call.op === OpCode.broadcast ? mod(this.rank - call.root, this.size) : this.size - 1;
    if (call.phase === "receiving" && call.upstreamArrived < reach) {
      return new DeadlineExceededError(`${base}: the slowest rank is ${this.who(mod(this.rank - call.upstreamArrived - 1, this.size))}, which had not entered it`);
    }
    // A rank waiting for data has consumed every chunk it received, so chunks the next rank never
    // credited mean that rank stopped taking them (frozen, or the link to it is cut): the previous
    // rank's data is late only because the ring is held up there.
    const uncredited = this.sendQueue.length > 0 || (this.outbound !== undefined && this.credits < CREDIT_WINDOW);
    const onNext = call.phase === "flushing" || uncredited;
    return new DeadlineExceededError(`${base}: the slowest rank is ${this.who(onNext ? this.next : this.prev)}, whose ${onNext ? "credit" : "data"} did not come`);
  }

  /**
   * Breaks the group: every pending call rejects with `local`; unless `remote` is `null`,
   * both neighbours get an abort frame carrying it (so every rank raises the same error) and the
   * links are closed.
   */
  private fail(local: Error, remote: Error | null = local): void {
    if (this.broken !== undefined) return;
    this.broken = local;
    for (const call of this.calls) call.reject(local);
    this.waiter?.reject(local);
    this.waiter = undefined;
    this.plan = undefined;
    for (const w of this.flushWaiters.splice(0)) w.reject(local);
    this.sendQueue.length = 0;
    this.outboundReady.reject(local);
    this.server?.close();
    if (remote === null) return;
    const status = Buffer.from(JSON.stringify(toStatus(remote)));
    for (const link of [this.outbound, this.inbound]) {
      if (link === undefined || link.socket.destroyed) continue;
      link.socket.end(Buffer.concat([this.header(link, { kind: FrameKind.abort, payloadBytes: status.length }), status]));
    }
  }

  private checkUsable(): void {
    if (this.broken !== undefined) throw this.broken;
  }

  // -------------------------------------------------------------------------------------------
  // sending (to the next rank), with credits
  // -------------------------------------------------------------------------------------------

  private send(call: Call, buffer: CollectiveBuffer, a: number, b: number): void {
    if (this.outboundGone !== undefined) this.fail(this.outboundGone);
    if (this.broken !== undefined) return;
    const bpe = buffer.BYTES_PER_ELEMENT;
    // A view, not a copy: the region is not written again before the next rank has received it
    // (every later write to it follows, causally, that rank's receipt), and the call resolves
    // only after every write was handed to the kernel.
    const payload = Buffer.from(buffer.buffer, buffer.byteOffset + a * bpe, (b - a) * bpe);
    const header = {
      kind: FrameKind.data,
      op: call.op,
      dtype: call.dtype,
      generation: this.generation,
      rank: call.root,
      incarnation: this.incarnation,
      collective: call.id,
      elements: call.elements,
      arrived: Math.min(this.size, call.upstreamArrived + 1),
      payloadBytes: payload.length,
    };
    if (this.credits > 0 && this.sendQueue.length === 0) this.write(header, payload);
    else {
      this.counters.creditWaits++;
      this.sendQueue.push({ header, payload });
    }
  }

  private write(header: Omit<FrameHeader, "seq">, payload: Buffer): void {
    const link = this.outbound as Link;
    if (header.collective !== this.writing.collective) this.writing = { collective: header.collective, before: this.written };
    this.written++;
    this.pendingWrites++;
    this.counters.chunksSent++;
    this.counters.bytesSent += payload.length;
    this.counters.maxBufferedChunksPerPeer = Math.max(this.counters.maxBufferedChunksPerPeer, CREDIT_WINDOW - this.credits);
    const onWritten = (): void => {
      this.pendingWrites--;
      if (this.pendingWrites === 0 && this.sendQueue.length === 0) for (const w of this.flushWaiters.splice(0)) w.resolve();
    };
    link.socket.cork();
    link.socket.write(encodeHeader({ ...header, seq: link.sendSeq++ }), payload.length === 0 ? onWritten : undefined);
    if (payload.length > 0) link.socket.write(payload, onWritten);
    link.socket.uncork();
  }

  private onCredit(count: number): void {
    this.granted += count;
    this.drainSendQueue();
  }

  /**
   * Two ranks: the other rank's data frame of collective `collective`, once checked against this
   * rank's own call (so the ranks agree on the calls so far), says it entered that collective,
   * so it finished every earlier one and consumed every chunk this rank sent in them:
   * a call ends only after its chunks were reduced or placed and their slots freed, and the frame
   * was sent after that, so a chunk this rank sends now finds a slot free. Their credit frames
   * come later, and are read only when this rank's event loop turns, which a training step does
   * not let it do between steps: without this, a rank often entered a step's all-reduce with no
   * credit and sent its chunk only after reading the other's. (With more ranks, data comes from
   * the previous rank and credits from the next: nothing follows.)
   */
  private impliedCredit(collective: number): void {
    if (this.size !== 2 || this.outbound === undefined) return;
    const { writing } = this;
    const consumed = collective > writing.collective ? this.written : collective === writing.collective ? writing.before : 0;
    if (consumed <= this.consumedAtLeast) return;
    this.consumedAtLeast = consumed;
    this.drainSendQueue();
  }

  private drainSendQueue(): void {
    while (this.credits > 0 && this.sendQueue.length > 0) {
      const { header, payload } = this.sendQueue.shift() as { header: Omit<FrameHeader, "seq">; payload: Buffer };
      this.write(header, payload);
    }
    if (this.pendingWrites === 0 && this.sendQueue.length === 0) for (const w of this.flushWaiters.splice(0)) w.resolve();
  }

  /** Resolves when every chunk of the call was handed to the kernel, so the caller may reuse its buffer. */
  private flushed(call: Call): Promise<void> {
    call.phase = "flushing";
    if (this.broken !== undefined) return Promise.reject(this.broken);
    if (this.pendingWrites === 0 && this.sendQueue.length === 0) return Promise.resolve();
    return new Promise((resolve, reject) => this.flushWaiters.push({ resolve, reject }));
  }

  // -------------------------------------------------------------------------------------------
  // receiving (from the previous rank), into two slots
  // -------------------------------------------------------------------------------------------

  private receive(call: Call, elements: number): Promise<Frame> {
    const check = (frame: Frame): Frame => {
      const h = frame.header;
      if (h.collective !== call.id || h.op !== call.op || h.dtype !== call.dtype || h.elements !== call.elements || h.rank !== call.root) {
        const error = new InvalidArgumentError(`the ranks disagree: ${this.who(this.rank)} called ${call.what}, ${this.who(this.prev)} called ${describe(h)}; every rank must make the same calls with buffers of the same type and length`);
        this.fail(error);
        throw error;
      }
      if (h.payloadBytes !== elements * (call.dtype === DType.float32 ? 4 : 8)) {
        const error = new DataLossError(`${this.who(this.prev)} sent a chunk of ${h.payloadBytes} bytes in ${call.what}; expected ${elements} elements`);
        this.fail(error);
        throw error;
      }
      call.upstreamArrived = Math.max(call.upstreamArrived, h.arrived);
      this.impliedCredit(h.collective);
      return frame;
    };
    const ready = this.ready.shift();
    if (ready !== undefined) return Promise.resolve(check(ready));
    if (this.inboundGone !== undefined) this.fail(this.inboundGone);
    if (this.broken !== undefined) return Promise.reject(this.broken);
    return new Promise<Frame>((resolve, reject) => (this.waiter = { resolve, reject })).then(check);
  }

  /**
   * The active call's chunks, in the order the previous rank sends them. Those whose header
   * came before the call started go to slots; the plan applies from the next one.
   */
  private expect(call: Call, buffer: CollectiveBuffer, chunks: ReceivePlan["chunks"]): void {
    this.plan = { call, buffer, chunks };
  }

  /** Copies a received chunk to `buffer[a…]`, unless it was received there. */
  private place(buffer: CollectiveBuffer, a: number, frame: Frame): void {
    if (frame.slot !== PLACED) buffer.set(typedView(buffer, frame.payload), a);
    this.release(frame);
  }

  /**
   * The chunk was consumed: free its slot and grant the previous rank one more chunk, at once or,
   * with `later`, at the next turn of the event loop (one credit frame for all granted so).
   */
  private release(frame: Frame, later = false): void {
    if (frame.slot === PLACED) return; // credited on arrival
    this.freeSlots.push(frame.slot);
    if (!later) return this.grantCredit(1);
    if (this.laterCredits++ === 0) {
      setImmediate(() => {
        const count = this.laterCredits;
        this.laterCredits = 0;
        this.grantCredit(count);
      });
    }
  }

  private grantCredit(count: number): void {
    const link = this.inbound;
    if (link === undefined || this.broken !== undefined) return;
    link.socket.write(this.header(link, { kind: FrameKind.credit, elements: count }));
  }

  private onInboundFrame(link: Link, header: FrameHeader, payload: Buffer): void {
    if (header.kind === FrameKind.abort) return this.onAbort(link, payload);
    const slot = this.parsingSlot;
    this.counters.chunksReceived++;
    this.counters.bytesReceived += header.payloadBytes; // a chunk reduced as it arrived has an empty payload
    this.counters.maxBufferedChunksPerPeer = Math.max(this.counters.maxBufferedChunksPerPeer, CREDIT_WINDOW - this.freeSlots.length);
    const frame: Frame = { header, payload, slot };
    if (slot === PLACED) this.grantCredit(1);
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
  private inboundTarget(link: Link, h: FrameHeader, retry: boolean, parser: FrameParser): Buffer | PayloadSink | Error | typeof DEFER {
    if (retry) return this.dataTarget(link, h, this.heldIndex);
    const bad = this.checkFrame(link, h);
    if (bad !== undefined) return bad;
    if (h.kind === FrameKind.abort) return h.payloadBytes <= MAX_CONTROL_PAYLOAD_BYTES ? Buffer.alloc(h.payloadBytes) : new DataLossError(`${this.who(link.peer)} sent an abort frame of ${h.payloadBytes} bytes`);
    if (h.kind !== FrameKind.data) return new DataLossError(`${this.who(link.peer)} sent a frame of kind ${h.kind} where data was expected`);
    if (h.payloadBytes > this.chunkBytes || h.payloadBytes % 4 !== 0) return new DataLossError(`${this.who(link.peer)} sent a chunk of ${h.payloadBytes} bytes; chunks hold at most ${this.chunkBytes} (check that every rank uses the same chunkBytes)`);
    if (h.collective !== this.headersSeen.collective) this.headersSeen = { collective: h.collective, count: 0 };
    const index = this.headersSeen.count++;
    if (h.payloadBytes > 0 && this.plan?.call.id !== h.collective && this.broken === undefined) {
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
    const slot = this.freeSlots.shift();
    if (slot === undefined) return new DataLossError(`${this.who(link.peer)} sent more than its credit of ${CREDIT_WINDOW} chunks`);
    if (h.payloadBytes > 0) this.counters.slottedChunks++;
    // Held from now on, while its payload is read (a read of its own on an `onread` socket).
    this.counters.maxBufferedChunksPerPeer = Math.max(this.counters.maxBufferedChunksPerPeer, CREDIT_WINDOW - this.freeSlots.length);
    this.parsingSlot = slot;
    if ((this.slots[slot] as Buffer).length < h.payloadBytes) this.slots[slot] = Buffer.allocUnsafeSlow(h.payloadBytes);
    return (this.slots[slot] as Buffer).subarray(0, h.payloadBytes);
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

  // -------------------------------------------------------------------------------------------
  // links: the handshake, frames after it, death
  // -------------------------------------------------------------------------------------------

  /** An incoming connection: nothing but a hello is read until it passed every check. */
  private accept(socket: Socket): void {
    socket.setNoDelay(true);
    if (this.broken !== undefined) return void socket.destroy();
    this.pendingSockets.add(socket);
    const timer = this.clock.setTimer(this.connectTimeoutMs, () => drop(new DeadlineExceededError("no hello within connectTimeoutSecs")));
    const drop = (e: Error): void => {
      timer.cancel();
      parser.stop();
      this.pendingSockets.delete(socket);
      this.counters.rejectedConnections++;
      this.logger.warn(`collective: ${this.who(this.rank)} dropped a connection from ${socket.remoteAddress}:${socket.remotePort}: ${e.message}`);
      socket.destroy();
    };
    const parser = new FrameParser(
      (h) =>
        h.kind !== FrameKind.hello
          ? new UnauthenticatedError("the first frame was not a hello")
          : h.payloadBytes > MAX_HELLO_AUTH_BYTES
            ? new UnauthenticatedError(`a hello of ${h.payloadBytes} bytes`)
            : Buffer.alloc(h.payloadBytes),
      (h, auth) => {
        timer.cancel();
        parser.stop();
        socket.off("data", onData);
        this.pendingSockets.delete(socket);
        this.onHello(socket, h, auth.toString("utf8"));
      },
      drop,
    );
    const onData = (d: Buffer): void => parser.push(d);
    socket.on("data", onData);
    socket.on("error", () => undefined); // a refused or dead connector is the connector's error
  }

  private onHello(socket: Socket, h: FrameHeader, auth: string): void {
    const from = `${this.who(h.rank < this.size ? h.rank : this.next)}`;
    if (this.token !== undefined && !tokenMatches(auth, this.token)) {
      return this.refuse(socket, new UnauthenticatedError(`${this.who(this.rank)} refused a connection from ${socket.remoteAddress}: it did not present the cluster token; give every task the same token`));
    }
    if (h.elements !== this.size || h.rank !== this.next) {
      return this.refuse(socket, new InvalidArgumentError(`${this.who(this.rank)} (of ${this.size} ranks) accepts only ${this.who(this.next)}; it was called by rank ${h.rank} of ${h.elements}; give every rank the same addresses`));
    }
    if (h.generation !== this.generation) {
      const stale = new AbortedError(`${from} of generation ${h.generation} was refused by ${this.who(this.rank)} of generation ${this.generation}: the generation of ${h.generation < this.generation ? from : this.who(this.rank)} is stale; join the current generation`);
      this.refuse(socket, stale);
      if (h.generation > this.generation) this.fail(stale);
      return;
    }
    const expected = this.peerIncarnations[h.rank];
    if (expected !== undefined && expected !== h.incarnation) {
      return this.refuse(socket, new AbortedError(`${from} has incarnation ${h.incarnation}, not ${expected}, the one it registered with (it restarted); it must join the next generation`));
    }
    if (this.outbound !== undefined || this.broken !== undefined) return this.refuse(socket, new AlreadyExistsError(`${this.who(this.rank)} already has its connection from ${from}`));
    const link: Link = { socket, peer: h.rank, peerIncarnation: h.incarnation, sendSeq: 0, receiveSeq: 0 };
    this.outbound = link;
    // The receiver grants the window: this rank may send that many chunks before its first credit.
    this.granted = CREDIT_WINDOW;
    // The welcome carries the token too: the receiver reads no data from a peer that lacks it.
    socket.write(Buffer.concat([encodeHeader({ ...this.blank(), kind: FrameKind.welcome, elements: CREDIT_WINDOW, seq: 0, payloadBytes: this.auth.length }), this.auth]));
    const parser: FrameParser = new FrameParser(
      (header) => this.outboundTarget(link, header),
      (header, payload) => this.onOutboundFrame(link, header, payload),
      (e) => this.fail(e),
    );
    socket.on("data", (d: Buffer) => parser.push(d));
    this.watchDeath(link);
    this.outboundReady.resolve();
  }

  private refuse(socket: Socket, error: Error): void {
    this.counters.rejectedConnections++;
    this.logger.warn(`collective: ${error.message}`);
    const status = Buffer.from(JSON.stringify(toStatus(error)));
    socket.write(Buffer.concat([encodeHeader({ ...this.blank(), kind: FrameKind.reject, seq: 0, payloadBytes: status.length }), status]), () => socket.destroy());
  }

  /**
   * Dials the previous rank (the one this rank receives from) until it welcomes this one,
   * retrying refused connections until `signal` aborts. The receiver dials, so that its socket
   * reads into buffers the frame parser picks (`onread`, plain TCP).
   */
  private async dialPrev(signal: AbortSignal, onRetry: (error: string) => void): Promise<Link> {
    const { host, port } = parseAddress(this.addresses[this.prev] as string) as { host: string; port: number };
    for (let attempt = 0; ; attempt++) {
      try {
        const link = await this.dialOnce(host, port);
        if (signal.aborted) {
          link.socket.destroy();
          if (this.inbound === link) this.inbound = undefined;
          throw new CancelledError("connect() gave up");
        }
        return link;
      } catch (e) {
        if (!(e instanceof RetryableDialError) || signal.aborted) throw e;
        onRetry(e.message);
        await this.clock.sleep(Math.min(1000, 50 * 2 ** attempt), signal);
        if (signal.aborted) throw e;
      }
    }
  }

  private dialOnce(host: string, port: number): Promise<Link> {
    return new Promise<Link>((resolve, reject) => {
      const c = this.credentials;
      let welcomed: Link | undefined;
      let settled = false;
      const settle = (e: Error | undefined, link?: Link): void => {
        if (settled) return;
        settled = true;
        this.pendingSockets.delete(socket);
        if (e !== undefined) {
          socket.destroy();
          reject(e);
        } else resolve(link as Link);
      };
      const parser: FrameParser = new FrameParser(
        (h, retry) => {
          if (welcomed !== undefined) return this.inboundTarget(welcomed, h, retry, parser);
          if ((h.kind !== FrameKind.welcome && h.kind !== FrameKind.reject) || h.payloadBytes > MAX_CONTROL_PAYLOAD_BYTES) {
            return new DataLossError(`${this.who(this.prev)} at ${host}:${port} answered the hello with a frame of kind ${h.kind}; is that a collective port?`);
          }
          return Buffer.alloc(h.payloadBytes);
        },
        (h, payload) => {
          if (welcomed !== undefined) return this.onInboundFrame(welcomed, h, payload);
          if (h.kind === FrameKind.reject) {
            const error = fromStatus(decodeStatusJson(payload.toString("utf8"), `the handshake answer of ${this.who(this.prev)}`));
            // A stale acceptor will be replaced by the current one at the same address: try again.
            return settle(h.generation < this.generation ? new RetryableDialError(error.message) : error);
          }
          if (this.token !== undefined && !tokenMatches(payload.toString("utf8"), this.token)) {
            parser.stop();
            this.counters.rejectedConnections++;
            return settle(new UnauthenticatedError(`${this.who(this.rank)} refused the welcome of ${host}:${port}: it did not present the cluster token; give every task the same token`));
          }
          const expected = this.peerIncarnations[this.prev];
          if (h.generation !== this.generation || (expected !== undefined && expected !== h.incarnation)) {
            return settle(new AbortedError(`${this.who(this.prev)} answered from generation ${h.generation} incarnation ${h.incarnation}; this rank is at generation ${this.generation}${expected === undefined ? "" : ` and expects incarnation ${expected}`}`));
          }
          welcomed = { socket, peer: this.prev, peerIncarnation: h.incarnation, sendSeq: 0, receiveSeq: 0 };
          // Set now, not when the dial resolves: data may follow the welcome in the same read.
          this.inbound = welcomed;
          socket.off("close", onClose);
          socket.off("error", onError);
          this.watchDeath(welcomed);
          settle(undefined, welcomed);
        },
        (e) => (welcomed === undefined ? settle(e) : this.fail(e)),
        () => socket.resume(),
      );
      // Plain TCP reads where the parser says (a header buffer, a receive slot, or its scratch
      // buffer, which the call's sink reduces or copies from), without a buffer per read. TLS
      // decrypts into buffers of its own.
      const socket: Socket =
        c === undefined
          ? netConnect({ host, port, onread: { buffer: () => parser.readTarget(), callback: (n: number) => parser.read(n) } })
          : tlsConnect({ host, port, ca: c.ca, cert: c.cert, key: c.key, ...(isIP(host) === 0 ? { servername: host } : {}) });
      if (c !== undefined) socket.on("data", (d: Buffer) => parser.push(d));
      this.pendingSockets.add(socket);
      socket.setNoDelay(true);
      socket.once(c === undefined ? "connect" : "secureConnect", () => {
        socket.write(Buffer.concat([encodeHeader({ ...this.blank(), kind: FrameKind.hello, rank: this.rank, elements: this.size, seq: 0, payloadBytes: this.auth.length }), this.auth]));
      });
      const onError = (e: NodeJS.ErrnoException): void => {
        const code = e.code ?? "";
        settle(RETRYABLE.has(code) ? new RetryableDialError(code) : new UnavailableError(`${this.who(this.rank)} cannot connect to ${this.who(this.prev)} at ${host}:${port}: ${code || e.message}${code.startsWith("ERR_SSL") || code.includes("CERT") ? "; check the TLS CA and certificates" : ""}`, { cause: e }));
      };
      const onClose = (): void => settle(new RetryableDialError("closed before the handshake"));
      socket.on("error", onError);
      socket.on("close", onClose);
    });
  }

  private outboundTarget(link: Link, h: FrameHeader): Buffer | Error {
    const bad = this.checkFrame(link, h);
    if (bad !== undefined) return bad;
    if (h.kind === FrameKind.credit && h.payloadBytes === 0) return Buffer.alloc(0);
    if (h.kind === FrameKind.abort && h.payloadBytes <= MAX_CONTROL_PAYLOAD_BYTES) return Buffer.alloc(h.payloadBytes);
    return new DataLossError(`${this.who(link.peer)} sent a frame of kind ${h.kind} (${h.payloadBytes} bytes) where credits were expected`);
  }

  private onOutboundFrame(link: Link, h: FrameHeader, payload: Buffer): void {
    if (h.kind === FrameKind.abort) return this.onAbort(link, payload);
    this.onCredit(h.elements);
  }

  /** Every frame after the handshake: the peer's generation and incarnation, and the next sequence number. */
  private checkFrame(link: Link, h: FrameHeader): Error | undefined {
    if (h.generation !== this.generation || h.incarnation !== link.peerIncarnation) {
      return new AbortedError(`a frame of generation ${h.generation} incarnation ${h.incarnation} came on the link from ${this.who(link.peer)}, which joined as generation ${this.generation} incarnation ${link.peerIncarnation}; refused`);
    }
    if (h.seq !== link.receiveSeq) return new DataLossError(`frame ${h.seq} came from ${this.who(link.peer)} where frame ${link.receiveSeq} was expected`);
    link.receiveSeq++;
    return undefined;
  }

  private onAbort(link: Link, payload: Buffer): void {
    this.fail(fromStatus(decodeStatusJson(payload.toString("utf8"), `the abort frame of ${this.who(link.peer)}`)));
  }

  /**
   * A closed or reset link is the peer's death or departure: UnavailableError naming it, at once
   * if this rank waits for the peer's data or credit, else at the next use of the link. (A peer
   * that finished and closed delivered every frame before its close.)
   */
  private watchDeath(link: Link): void {
    let code = "";
    link.socket.on("error", (e: NodeJS.ErrnoException) => (code = e.code ?? e.message));
    link.socket.on("close", () => {
      if (this.broken !== undefined) return;
      const gone = new UnavailableError(`${this.who(link.peer)} closed its connection to ${this.who(this.rank)}${code === "" ? "" : ` (${code})`}: it died or left the group, or the network between them failed`);
      if (link === this.inbound) {
        this.inboundGone = gone;
        if (this.waiter !== undefined) this.fail(gone);
      } else {
        this.outboundGone = gone;
        if (this.sendQueue.length > 0 || this.pendingWrites > 0) this.fail(gone);
      }
    });
  }

  // -------------------------------------------------------------------------------------------
  // utils
  // -------------------------------------------------------------------------------------------

  private who(rank: number): string {
    return `rank ${rank} (${this.tasks[rank]})`;
  }

  private blank(): Omit<FrameHeader, "kind" | "seq"> {
    return { op: OpCode.none, dtype: DType.none, generation: this.generation, rank: this.rank, incarnation: this.incarnation, collective: 0, elements: 0, arrived: 0, payloadBytes: 0 };
  }

  private header(link: Link, fields: Partial<FrameHeader> & Pick<FrameHeader, "kind">): Buffer {
    return encodeHeader({ ...this.blank(), ...fields, seq: link.sendSeq++ });
  }

  private withDeadline<T>(promise: Promise<T>, onTimeout: () => Error): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = this.clock.setTimer(this.connectTimeoutMs, () => reject(onTimeout()));
      promise.then(
        (v) => {
          timer.cancel();
          resolve(v);
        },
        (e: unknown) => {
          timer.cancel();
          reject(e as Error);
        },
      );
    });
  }
}

/** A dial that may succeed later (the peer is not listening yet, or restarting). */
class RetryableDialError extends Error {}

const mod = (a: number, n: number): number => ((a % n) + n) % n;

/** Segment `s` of `n` nearly equal contiguous segments of `length` elements. */
const segment = (length: number, n: number, s: number): readonly [number, number] => [Math.floor((s * length) / n), Math.floor(((s + 1) * length) / n)];


/** Copies a payload's pieces, in order, into `target`. */
const copyingSink = (target: Buffer): PayloadSink => {
  let filled = 0;
  return { write: (piece) => void (filled += piece.copy(target, filled)) };
};

const describe = (h: FrameHeader): string => {
  const what = h.op === OpCode.sum ? "allReduce(sum)" : h.op === OpCode.mean ? "allReduce(mean)" : h.op === OpCode.broadcast ? `broadcast from rank ${h.rank}` : "barrier";
  return `${what} #${h.collective} over ${h.elements} ${h.dtype === DType.float32 ? "float32" : "float64"} elements`;
};

const deferred = (): { promise: Promise<void>; resolve: () => void; reject: (e: Error) => void } => {
  let resolve!: () => void;
  let reject!: (e: Error) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => undefined);
  return { promise, resolve, reject };
};

const positive = (value: number, name: string): number => {
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) throw new InvalidArgumentError(`TcpCollective: ${name} ${value} must be a positive number of seconds`);
  return value;
};

const parseIncarnation = (s: string, name: string): bigint => {
  if (!/^\d{1,20}$/.test(s) || BigInt(s) > 0xffffffffffffffffn) throw new InvalidArgumentError(`TcpCollective: ${name} ${JSON.stringify(s)} is not a decimal 64-bit incarnation (as newIncarnation() makes)`);
  return BigInt(s);
};

const checkAddresses = (addresses: readonly string[], size: number): void => {
  addresses.forEach((a, i) => {
    if (parseAddress(a) === undefined) throw new InvalidArgumentError(`TcpCollective: addresses[${i}] ${JSON.stringify(a)} is not host:port (of ${size} ranks)`);
  });
};
