/**
 * The shipped {@link Collective}: a chunked ring over plain TCP (`node:net`), or TLS (`node:tls`)
 * when certificate files are given. Each rank connects to the previous rank of the ring (the one
 * it receives from: on plain TCP its socket then reads into buffers the frame parser picks, with
 * no buffer per read) and accepts the next one; all-reduce is a reduce-scatter then an all-gather in which every chunk is
 * forwarded as soon as it is reduced, so reduction overlaps the transfer of the next chunks.
 * See docs/distributed.md ("Collectives") and docs/performance.md ("Ring all-reduce").
 *
 * This class is the façade: the calls, their order, deadlines and failure. The links and their
 * handshake are in links.ts, the credit window in creditWindow.ts (the sender's side) and
 * inbound.ts (the receiver's), the ring's schedule and algorithms in ringSchedule.ts, the
 * deadline timer in callDeadlines.ts.
 *
 * @module
 */

import { isIP, type AddressInfo, type Server as NetServer, type Socket } from "node:net";
import { type Clock, systemClock, secs } from "../../time/Clock.js";
import {
  AlreadyExistsError,
  CancelledError,
  DeadlineExceededError,
  FailedPreconditionError,
  InvalidArgumentError,
  OpError,
  UnavailableError,
} from "../../errors.js";
import type { Observable } from "rxjs";
import { ComponentEvents } from "../../events/componentEvents.js";
import type { SessionEvent } from "../../events/SessionEvent.js";
import { consoleLogger, type Logger } from "../../Logger.js";
import { decodeStatusJson, fromStatus, toStatus } from "../coordination/status.js";
import { parseAddress } from "../TfConfig.js";
import { loadTlsCredentials, type TlsCredentials, type TlsFiles } from "../security.js";
import {
  type Collective,
  type CollectiveBuffer,
  type CollectiveCallOptions,
  DEFAULT_COLLECTIVE_TIMEOUT_SECS,
  RankStopVote,
  type ReduceOp,
} from "../../session/Collective.js";
import { DeadlineTimer } from "./callDeadlines.js";
import { CREDIT_WINDOW, CreditWindow } from "./creditWindow.js";
import { DType, encodeHeader, type FrameHeader, FrameKind, OpCode } from "./frames.js";
import { Inbound, type InboundCall } from "./inbound.js";
import { checkAddresses, createListener, type Dialer, dialPrev, endLink, type Link, listening, readHello, RingPeers, welcome, withTimeout } from "./links.js";
import { exchangeAllReduce, mod, ringAllReduce, ringBroadcast, type RingTransport, ScheduleCache } from "./ringSchedule.js";

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
  /**
   * Prints the rank's lines (default: the console at info) until a session adopts its
   * {@link TcpCollective.events$}; given a task runtime's logger, they join its stream instead.
   */
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

/**
 * 4 MiB: the 2-chunk window then holds 8 MiB in flight per link, so credits rarely stall the
 * sender on loopback (256 KiB chunks made a 16 MiB all-reduce ~2.5× the raw exchange, mostly idle).
 */
const DEFAULT_CHUNK_BYTES = 4 * 1024 * 1024;
/** A collective call, from its enqueueing to its end. */
interface Call extends InboundCall {
  phase: "receiving" | "flushing";
  readonly reject: (e: Error) => void;
  /** When the call expires, on the clock's monotonic time (see `DeadlineTimer`). */
  readonly deadline: number;
  readonly timeoutMs: number;
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
  /** Every rank's task name. */
  readonly tasks: readonly string[];
  /**
   * The rank's lines as `log` events (source `collective`): a dropped or refused connection, a
   * listener error, a broken ring. Its `logger` option prints them until a session adopts them
   * (`session.forwardEvents(collective)`).
   */
  get events$(): Observable<SessionEvent> {
    return this.events.events$;
  }

  /** The caller prints the rank's lines from now on; the function returned hands them back. */
  adopt(): () => void {
    return this.events.adopt();
  }
  /** Who this rank is and whom it accepts: the handshake's checks. */
  private readonly peers: RingPeers;
  private readonly credentials: TlsCredentials | undefined;
  private readonly collectiveTimeoutMs: number;
  /** The one timer of every call's deadline. */
  private readonly deadlines: DeadlineTimer;
  private readonly connectTimeoutMs: number;
  private readonly chunkBytes: number;
  private readonly clock: Clock;
  private readonly events: ComponentEvents;
  private readonly logger: Logger;
  private addresses: readonly string[];

  // links (links.ts)
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
  /** What a dial of the previous rank reports to. */
  private readonly dialer: Dialer;

  // receiving from the previous rank (inbound.ts), sending to the next (creditWindow.ts)
  private readonly receiver: Inbound;
  private readonly window: CreditWindow;

  // calls, and the ring (ringSchedule.ts)
  private chain: Promise<void> = Promise.resolve();
  private readonly calls = new Set<Call>();
  private active: Call | undefined;
  /** The ring's schedule of the last buffer all-reduced. */
  private readonly schedules: ScheduleCache;
  /** What the ring's algorithms run on. */
  private readonly ring: RingTransport<Call>;
  /** The ranks whose termination notice this rank knows of (its own, once announced). */
  private readonly noticed = new Set<number>();
  private readonly noticeListeners: ((task: string, rank: number) => void)[] = [];
  private readonly counters = { collectives: 0, chunksSent: 0, chunksReceived: 0, bytesSent: 0, bytesReceived: 0, maxBufferedChunksPerPeer: 0, creditWaits: 0, slottedChunks: 0, rejectedConnections: 0 };

  /** @throws InvalidArgumentError (one line) naming a bad option. */
  constructor(options: TcpCollectiveOptions) {
    const { rank, addresses } = options;
    if (!Array.isArray(addresses) || addresses.length === 0) throw new InvalidArgumentError("TcpCollective: addresses must list every rank's host:port (at least one)");
    if (!Number.isInteger(rank) || rank < 0 || rank >= addresses.length) {
      throw new InvalidArgumentError(`TcpCollective: rank ${rank} is not an index of addresses (0..${addresses.length - 1})`);
    }
    this.rank = rank;
    this.size = addresses.length;
    checkAddresses(addresses, this.size);
    this.addresses = addresses;
    this.peers = new RingPeers(rank, this.size, options);
    this.tasks = this.peers.tasks;
    this.window = new CreditWindow(this.peers, this.counters);
    this.credentials = options.tls === undefined ? undefined : loadTlsCredentials(options.tls);
    this.collectiveTimeoutMs = secs(positive(options.collectiveTimeoutSecs ?? DEFAULT_COLLECTIVE_TIMEOUT_SECS, "collectiveTimeoutSecs"));
    this.connectTimeoutMs = secs(positive(options.connectTimeoutSecs ?? DEFAULT_COLLECTIVE_TIMEOUT_SECS, "connectTimeoutSecs"));
    this.chunkBytes = options.chunkBytes ?? DEFAULT_CHUNK_BYTES;
    if (!Number.isInteger(this.chunkBytes) || this.chunkBytes < 8 || this.chunkBytes % 8 !== 0 || this.chunkBytes > 64 * 1024 * 1024) {
      throw new InvalidArgumentError(`TcpCollective: chunkBytes ${options.chunkBytes} must be a multiple of 8 between 8 and 64 MiB`);
    }
    this.clock = options.clock ?? systemClock;
    const clock = this.clock;
    this.events = new ComponentEvents(options.logger ?? consoleLogger(), () => clock.now(), "collective");
    this.logger = this.events.logger;
    this.schedules = new ScheduleCache(rank, this.size, this.chunkBytes);
    this.deadlines = new DeadlineTimer(this.clock, () => this.onDeadlineTimer());
    this.receiver = new Inbound({
      peers: this.peers,
      chunkBytes: this.chunkBytes,
      counters: this.counters,
      broken: () => this.broken,
      link: () => this.inbound,
      gone: () => this.inboundGone,
      fail: (e) => this.fail(e),
      onAbort: (link, payload) => this.onAbort(link, payload),
      onNotice: (link, origin) => this.onNotice(link, origin),
      impliedCredit: (collective) => this.impliedCredit(collective),
    });
    const { receiver } = this;
    this.ring = {
      rank: this.rank,
      size: this.size,
      next: this.peers.next,
      chunkBytes: this.chunkBytes,
      send: (call, buffer, a, b) => this.send(call, buffer, a, b),
      receive: (call, elements) => receiver.receive(call, elements),
      expect: (call, buffer, chunks) => receiver.expect(call, buffer, chunks),
      place: (buffer, a, frame) => receiver.place(buffer, a, frame),
      release: (frame, later) => receiver.release(frame, later),
      flushed: (call) => this.flushed(call),
    };
    this.dialer = {
      peers: this.peers,
      credentials: this.credentials,
      pendingSockets: this.pendingSockets,
      target: (link, h, retry, parser) => receiver.target(link, h, retry, parser),
      onFrame: (link, h, payload) => receiver.onFrame(link, h, payload),
      welcomed: (link) => {
        // Set now, not when the dial resolves: data may follow the welcome in the same read.
        this.inbound = link;
        this.watchDeath(link);
      },
      rejected: () => void this.counters.rejectedConnections++,
      fail: (e) => this.fail(e),
      abandoned: (link) => {
        if (this.inbound === link) this.inbound = undefined;
      },
    };
  }

  // -------------------------------------------------------------------------------------------
  // lifecycle
  // -------------------------------------------------------------------------------------------

  /** Binds `addresses[rank]` and accepts the next rank (which receives from this one); resolves with the bound `host:port`. */
  async listen(): Promise<string> {
    if (this.boundAddress !== undefined) return this.boundAddress;
    this.checkUsable();
    const { host, port } = parseAddress(this.addresses[this.rank] as string) as { host: string; port: number };
    const server = createListener(this.credentials, (s) => this.accept(s), () => void this.counters.rejectedConnections++);
    this.server = server;
    const timedOut = (): Error => new DeadlineExceededError(`${this.who(this.rank)} could not listen on ${host}:${port} within ${this.connectTimeoutMs / 1000} s`);
    await withTimeout(this.clock, this.connectTimeoutMs, listening(server, host, port, this.peers), timedOut).catch((e: unknown) => {
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
    const dial = dialPrev(this.addresses[this.peers.prev] as string, this.dialer, this.clock, stop.signal, (e) => (lastDialError = e)).then((link) => {
      dialed = true;
      return link;
    });
    try {
      await withTimeout(this.clock, this.connectTimeoutMs, Promise.all([dial, this.outboundReady.promise]), () => {
        const missing = [
          ...(dialed ? [] : [`could not connect to ${this.who(this.peers.prev)} at ${this.addresses[this.peers.prev]} (last error: ${lastDialError})`]),
          ...(this.outbound !== undefined ? [] : [`was not connected to by ${this.who(this.peers.next)}`]),
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

  /**
   * Tells every rank this one can reach, at once and outside any collective, that it got a
   * termination notice: a `notice` frame to both neighbours, which each rank passes on in the
   * direction it came (the first time it hears of that rank). A frozen rank stops it on its own
   * side only, so every live rank hears of the notice even when the stop vote's all-reduce can
   * never complete (the chief froze, and with the embedded backend the coordination service with
   * it). Does nothing before `connect()` or once the group broke. Idempotent.
   */
  announceNotice(): void {
    if (this.noticed.has(this.rank)) return;
    this.noticed.add(this.rank);
    this.sendNotice(this.outbound, this.rank);
    this.sendNotice(this.inbound, this.rank);
  }

  /** Calls `f` with the task name and rank of each other rank whose termination notice reaches this one ({@link announceNotice}), once per rank. */
  onNoticeHeard(f: (task: string, rank: number) => void): void {
    this.noticeListeners.push(f);
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
      closing.push(endLink(link, this.clock));
    }
    this.server?.close();
    await Promise.all(closing);
  }

  /** The address `listen()` bound, or `undefined` before. */
  get address(): string | undefined {
    return this.boundAddress;
  }

  /** Counters: chunks moved, buffering, credit waits, refused connections. */
  stats(): CollectiveStats {
    return { ...this.counters, bufferedChunks: this.receiver.held, unacknowledgedChunks: this.outbound === undefined ? 0 : CREDIT_WINDOW - this.window.credits };
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
    return this.enqueue(buffer, code, 0, options, `allReduce(${op})`, (call) => (exchange ? exchangeAllReduce(this.ring, call, buffer, mean) : ringAllReduce(this.ring, call, buffer, () => this.schedules.get(buffer, mean)))).then(() => buffer);
  }

  broadcast<B extends CollectiveBuffer>(buffer: B, root: number, options?: CollectiveCallOptions): Promise<B> {
    if (!Number.isInteger(root) || root < 0 || root >= this.size) {
      return Promise.reject(new InvalidArgumentError(`broadcast: root ${root} is not a rank of this group (0..${this.size - 1})`));
    }
    return this.enqueue(buffer, OpCode.broadcast, root, options, `broadcast from rank ${root}`, (call) => ringBroadcast(this.ring, call, buffer, root)).then(() => buffer);
  }

  async barrier(options?: CollectiveCallOptions): Promise<void> {
    // A ring all-reduce of nothing still passes 2(N−1) frames around: no rank can leave before
    // every rank entered. Two ranks exchange one empty frame each way instead.
    const empty = new Float64Array(0);
    await this.enqueue(empty, OpCode.barrier, 0, options, "barrier", (call) => (this.size === 2 ? exchangeAllReduce(this.ring, call, empty, false) : ringAllReduce(this.ring, call, empty, () => this.schedules.get(empty, false))));
  }

  onPeerFailed(task: string, error?: Error): void {
    const rank = this.tasks.indexOf(task);
    if (rank < 0 || rank === this.rank) return;
    // A cluster's failure keeps its class and what it is (a reported ResourceExhaustedError stays one on every rank).
    this.fail((error instanceof OpError && error.failure !== undefined) || error instanceof UnavailableError ? error : new UnavailableError(`${this.who(rank)} failed${error === undefined ? "" : `: ${error.message}`}`, { cause: error, failure: { kind: "peerLost", task } }));
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
    const deadline = this.deadlines.now() + timeoutMs;
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
    this.deadlines.arm(deadline);
    const done = (): void => {
      this.calls.delete(call);
      if (this.active === call) this.active = undefined;
      this.receiver.end(call);
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

  /** The deadline timer fired: the call past its deadline fails the group; else the timer is armed for the next deadline. */
  private onDeadlineTimer(): void {
    if (this.broken !== undefined) return;
    const now = this.deadlines.now();
    let next: Call | undefined;
    for (const call of this.calls) if (next === undefined || call.deadline < next.deadline) next = call;
    if (next === undefined) return;
    if (next.deadline <= now) return this.fail(this.deadlineError(next));
    this.deadlines.arm(next.deadline);
  }

  /** The slowest rank as this rank can tell: the first rank upstream not known to have entered, else the neighbour it waits on. */
  private deadlineError(call: Call): DeadlineExceededError {
    const base = `${call.what} did not finish within ${call.timeoutMs / 1000} s on ${this.who(this.rank)}`;
    if (this.active !== call) return new DeadlineExceededError(`${base}: it was still queued behind ${this.active?.what ?? "another collective"}`);
    this.receiver.noteArrivals(call);
    const reach = call.op === OpCode.broadcast ? mod(this.rank - call.root, this.size) : this.size - 1;
    if (call.phase === "receiving" && call.upstreamArrived < reach) {
      return new DeadlineExceededError(`${base}: the slowest rank is ${this.who(mod(this.rank - call.upstreamArrived - 1, this.size))}, which had not entered it`);
    }
    // A rank waiting for data has consumed every chunk it received, so chunks the next rank never
    // credited mean that rank stopped taking them (frozen, or the link to it is cut): the previous
    // rank's data is late only because the ring is held up there.
    const uncredited = this.window.waiting || (this.outbound !== undefined && this.window.credits < CREDIT_WINDOW);
    const onNext = call.phase === "flushing" || uncredited;
    return new DeadlineExceededError(`${base}: the slowest rank is ${this.who(onNext ? this.peers.next : this.peers.prev)}, whose ${onNext ? "credit" : "data"} did not come`);
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
    this.receiver.fail(local);
    this.window.fail(local);
    this.outboundReady.reject(local);
    this.server?.close();
    if (remote === null) return;
    const status = Buffer.from(JSON.stringify(toStatus(remote)));
    for (const link of [this.outbound, this.inbound]) {
      if (link === undefined || link.socket.destroyed) continue;
      link.socket.end(Buffer.concat([this.peers.header(link, { kind: FrameKind.abort, payloadBytes: status.length }), status]));
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
    this.window.send(call, buffer, a, b);
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
    this.window.consumedBefore(collective);
  }

  /** Resolves when every chunk of the call was handed to the kernel, so the caller may reuse its buffer. */
  private flushed(call: Call): Promise<void> {
    call.phase = "flushing";
    if (this.broken !== undefined) return Promise.reject(this.broken);
    return this.window.flushed();
  }

  // -------------------------------------------------------------------------------------------
  // links: the handshake, frames after it, death
  // -------------------------------------------------------------------------------------------

  /** An incoming connection: nothing but a hello is read until it passed every check. */
  private accept(socket: Socket): void {
    socket.setNoDelay(true);
    if (this.broken !== undefined) return void socket.destroy();
    this.pendingSockets.add(socket);
    readHello(
      socket,
      this.clock,
      this.connectTimeoutMs,
      (h, auth) => {
        this.pendingSockets.delete(socket);
        this.onHello(socket, h, auth);
      },
      (e) => {
        this.pendingSockets.delete(socket);
        this.counters.rejectedConnections++;
        this.logger.warn(`collective: ${this.who(this.rank)} dropped a connection from ${socket.remoteAddress}:${socket.remotePort}: ${e.message}`);
      },
    );
  }

  private onHello(socket: Socket, h: FrameHeader, auth: string): void {
    const refusal = this.peers.helloRefusal(socket, h, auth);
    if (refusal !== undefined) {
      this.refuse(socket, refusal.error);
      if (refusal.fails) this.fail(refusal.error);
      return;
    }
    if (this.outbound !== undefined || this.broken !== undefined) {
      return this.refuse(socket, new AlreadyExistsError(`${this.who(this.rank)} already has its connection from ${this.who(h.rank < this.size ? h.rank : this.peers.next)}`));
    }
    const link: Link = { socket, peer: h.rank, peerIncarnation: h.incarnation, sendSeq: 0, receiveSeq: 0 };
    this.outbound = link;
    // The receiver grants the window: this rank may send that many chunks before its first credit.
    this.window.open(link);
    welcome(this.peers, link, CREDIT_WINDOW, {
      onCredit: (count) => this.window.grant(count),
      onAbort: (payload) => this.onAbort(link, payload),
      onNotice: (origin) => this.onNotice(link, origin),
      fail: (e) => this.fail(e),
    });
    this.watchDeath(link);
    this.outboundReady.resolve();
  }

  private refuse(socket: Socket, error: Error): void {
    this.counters.rejectedConnections++;
    this.logger.warn(`collective: ${error.message}`);
    const status = Buffer.from(JSON.stringify(toStatus(error)));
    socket.write(Buffer.concat([encodeHeader({ ...this.peers.blank(), kind: FrameKind.reject, seq: 0, payloadBytes: status.length }), status]), () => socket.destroy());
  }

  /** Rank `origin`'s notice came on `link`: passed on the way it came (previous to next, next to previous), then told to the listeners. */
  private onNotice(link: Link, origin: number): void {
    if (this.noticed.has(origin)) return;
    this.noticed.add(origin);
    this.sendNotice(link === this.inbound ? this.outbound : this.inbound, origin);
    const task = this.tasks[origin] as string;
    for (const f of this.noticeListeners) f(task, origin);
  }

  private sendNotice(link: Link | undefined, origin: number): void {
    if (link === undefined || this.broken !== undefined || link.socket.destroyed || link.socket.writableEnded) return;
    link.socket.write(this.peers.header(link, { kind: FrameKind.notice, rank: origin }));
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
      const gone = new UnavailableError(`${this.who(link.peer)} closed its connection to ${this.who(this.rank)}${code === "" ? "" : ` (${code})`}: it died or left the group, or the network between them failed`, {
        failure: { kind: "peerLost", task: this.tasks[link.peer] as string },
      });
      if (link === this.inbound) {
        this.inboundGone = gone;
        if (this.receiver.waiting) this.fail(gone);
      } else {
        this.outboundGone = gone;
        if (this.window.busy) this.fail(gone);
      }
    });
  }

  // -------------------------------------------------------------------------------------------
  // utils
  // -------------------------------------------------------------------------------------------

  private who(rank: number): string {
    return this.peers.who(rank);
  }
}

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
