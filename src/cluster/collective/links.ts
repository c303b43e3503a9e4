/**
 * The two links of a rank of the ring and their handshake. Each rank dials the previous rank
 * (the one it receives from) with a hello (its rank, the group's size, generation, incarnation
 * and the cluster token), which that rank answers with a welcome (the credit window and its own
 * token) or a reject (the error, as a status). {@link RingPeers} is who this rank is and whom it
 * accepts: the checks of a hello, of its answer and of every frame after it, and the headers it
 * sends; the rest are the sockets' plumbing (listening, dialling, reading the hello, closing).
 *
 * @module
 */

import { isIP, type Server as NetServer, type Socket, createServer as createNetServer, connect as netConnect } from "node:net";
import { createServer as createTlsServer, connect as tlsConnect } from "node:tls";
import type { Clock } from "../../time/Clock.js";
import { AbortedError, CancelledError, DataLossError, DeadlineExceededError, InvalidArgumentError, UnauthenticatedError, UnavailableError } from "../../errors.js";
import { newIncarnation, taskName } from "../coordination/identity.js";
import { decodeStatusJson, fromStatus } from "../coordination/status.js";
import { parseAddress } from "../TfConfig.js";
import { bearer, tokenMatches, type TlsCredentials } from "../security.js";
import { type DEFER, DType, encodeHeader, type FrameHeader, FrameKind, FrameParser, MAX_CONTROL_PAYLOAD_BYTES, OpCode, type PayloadSink } from "./frames.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A link's socket and what the other end identified as. */
export interface Link {
  readonly socket: Socket;
  readonly peer: number;
  readonly peerIncarnation: bigint;
  sendSeq: number;
  receiveSeq: number;
}

/** What a dial of the previous rank uses of its collective, and tells it. */
export interface Dialer {
  readonly peers: RingPeers;
  readonly credentials: TlsCredentials | undefined;
  /** Sockets not past their handshake yet (destroyed if `connect()` gives up). */
  readonly pendingSockets: Set<Socket>;
  /** Where a frame after the welcome goes (see `FrameParser`). */
  target(link: Link, h: FrameHeader, retry: boolean, parser: FrameParser): Buffer | PayloadSink | Error | typeof DEFER;
  /** A frame after the welcome. */
  onFrame(link: Link, h: FrameHeader, payload: Buffer): void;
  /** The previous rank welcomed this one: `link` is the inbound link from now on (data may follow the welcome in the same read). */
  welcomed(link: Link): void;
  /** A welcome without the cluster token was refused. */
  rejected(): void;
  /** Breaks the group (a bad frame after the welcome). */
  fail(error: Error): void;
  /** `connect()` gave up after `link` was welcomed: it is not the inbound link. */
  abandoned(link: Link): void;
}

/** Who a rank is, as given to a `TcpCollective` (validated by {@link RingPeers}). */
interface PeerOptions {
  readonly tasks?: readonly string[] | undefined;
  readonly generation?: number | undefined;
  readonly incarnation?: string | undefined;
  readonly peerIncarnations?: readonly (string | undefined)[] | undefined;
  readonly token?: string | undefined;
}

/** How long `close()` lets a peer acknowledge the end of a link before cutting it. */
const CLOSE_GRACE_MS = 5000;
const MAX_HELLO_AUTH_BYTES = 4096;
const RETRYABLE = new Set(["ECONNREFUSED", "ECONNRESET", "EPIPE", "EHOSTUNREACH", "ENETUNREACH", "ETIMEDOUT", "EAI_AGAIN"]);

/** A dial that may succeed later (the peer is not listening yet, or restarting). */
class RetryableDialError extends Error {}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** This rank's identity in the ring, its neighbours', and the checks of what they send. */
export class RingPeers {
  /** The rank this one sends to (it accepts that rank's connection). */
  readonly next: number;
  /** The rank this one receives from (it dials that rank). */
  readonly prev: number;
  /** Every rank's task name. */
  readonly tasks: readonly string[];
  readonly generation: number;
  readonly incarnation: bigint;
  readonly peerIncarnations: readonly (bigint | undefined)[];
  readonly token: string | undefined;
  /** What the hello and the welcome carry: the cluster token as a bearer credential, or nothing. */
  readonly auth: Buffer;

  /** @throws InvalidArgumentError (one line) naming a bad option. */
  constructor(
    readonly rank: number,
    readonly size: number,
    options: PeerOptions,
  ) {
    this.next = (rank + 1) % size;
    this.prev = (rank + size - 1) % size;
    if (options.tasks !== undefined && options.tasks.length !== size) {
      throw new InvalidArgumentError(`TcpCollective: tasks has ${options.tasks.length} names for ${size} addresses; give one task name per rank`);
    }
    this.tasks = options.tasks ?? Array.from({ length: size }, (_, i) => taskName("worker", i));
    this.generation = options.generation ?? 0;
    if (!Number.isInteger(this.generation) || this.generation < 0 || this.generation > 0xffffffff) {
      throw new InvalidArgumentError(`TcpCollective: generation ${options.generation} must be an integer in 0..2^32-1`);
    }
    this.incarnation = parseIncarnation(options.incarnation ?? newIncarnation(), "incarnation");
    this.peerIncarnations = Array.from({ length: size }, (_, i) => {
      const s = options.peerIncarnations?.[i];
      return s === undefined ? undefined : parseIncarnation(s, `peerIncarnations[${i}]`);
    });
    if (options.token !== undefined && options.token === "") throw new InvalidArgumentError("TcpCollective: token is empty; give the cluster token or leave it unset");
    this.token = options.token;
    this.auth = Buffer.from(this.token === undefined ? "" : bearer(this.token));
  }

  who(rank: number): string {
    return `rank ${rank} (${this.tasks[rank]})`;
  }

  /** A header's fields that name this rank, and nothing else. */
  blank(): Omit<FrameHeader, "kind" | "seq"> {
    return { op: OpCode.none, dtype: DType.none, generation: this.generation, rank: this.rank, incarnation: this.incarnation, collective: 0, elements: 0, arrived: 0, payloadBytes: 0 };
  }

  /** The header of the next frame on `link`. */
  header(link: Link, fields: Partial<FrameHeader> & Pick<FrameHeader, "kind">): Buffer {
    return encodeHeader({ ...this.blank(), ...fields, seq: link.sendSeq++ });
  }

  /**
   * Why a hello is refused (the token, the rank, the generation, the incarnation), or
   * `undefined`; `fails` when the caller is of a newer generation: this rank's is stale.
   */
  helloRefusal(socket: Socket, h: FrameHeader, auth: string): { readonly error: Error; readonly fails: boolean } | undefined {
    const from = `${this.who(h.rank < this.size ? h.rank : this.next)}`;
    if (this.token !== undefined && !tokenMatches(auth, this.token)) {
      return { error: new UnauthenticatedError(`${this.who(this.rank)} refused a connection from ${socket.remoteAddress}: it did not present the cluster token; give every task the same token`), fails: false };
    }
    if (h.elements !== this.size || h.rank !== this.next) {
      return { error: new InvalidArgumentError(`${this.who(this.rank)} (of ${this.size} ranks) accepts only ${this.who(this.next)}; it was called by rank ${h.rank} of ${h.elements}; give every rank the same addresses`), fails: false };
    }
    if (h.generation !== this.generation) {
      const stale = new AbortedError(`${from} of generation ${h.generation} was refused by ${this.who(this.rank)} of generation ${this.generation}: the generation of ${h.generation < this.generation ? from : this.who(this.rank)} is stale; join the current generation`);
      return { error: stale, fails: h.generation > this.generation };
    }
    const expected = this.peerIncarnations[h.rank];
    if (expected !== undefined && expected !== h.incarnation) {
      return { error: new AbortedError(`${from} has incarnation ${h.incarnation}, not ${expected}, the one it registered with (it restarted); it must join the next generation`), fails: false };
    }
    return undefined;
  }

  /**
   * Why the answer to this rank's hello is not a welcome it accepts, or `undefined`: a reject
   * (retryable from a stale acceptor, which the current one will replace at the same address), a
   * welcome without the cluster token (`unauthenticated`), or one of another generation or
   * incarnation.
   */
  answerRefusal(h: FrameHeader, payload: Buffer, host: string, port: number): { readonly error: Error; readonly unauthenticated: boolean } | undefined {
    if (h.kind === FrameKind.reject) {
      const error = fromStatus(decodeStatusJson(payload.toString("utf8"), `the handshake answer of ${this.who(this.prev)}`));
      return { error: h.generation < this.generation ? new RetryableDialError(error.message) : error, unauthenticated: false };
    }
    if (this.token !== undefined && !tokenMatches(payload.toString("utf8"), this.token)) {
      return { error: new UnauthenticatedError(`${this.who(this.rank)} refused the welcome of ${host}:${port}: it did not present the cluster token; give every task the same token`), unauthenticated: true };
    }
    const expected = this.peerIncarnations[this.prev];
    if (h.generation !== this.generation || (expected !== undefined && expected !== h.incarnation)) {
      return {
        error: new AbortedError(`${this.who(this.prev)} answered from generation ${h.generation} incarnation ${h.incarnation}; this rank is at generation ${this.generation}${expected === undefined ? "" : ` and expects incarnation ${expected}`}`),
        unauthenticated: false,
      };
    }
    return undefined;
  }

  /** Every frame after the handshake: the peer's generation and incarnation, and the next sequence number. */
  checkFrame(link: Link, h: FrameHeader): Error | undefined {
    if (h.generation !== this.generation || h.incarnation !== link.peerIncarnation) {
      return new AbortedError(`a frame of generation ${h.generation} incarnation ${h.incarnation} came on the link from ${this.who(link.peer)}, which joined as generation ${this.generation} incarnation ${link.peerIncarnation}; refused`);
    }
    if (h.seq !== link.receiveSeq) return new DataLossError(`frame ${h.seq} came from ${this.who(link.peer)} where frame ${link.receiveSeq} was expected`);
    link.receiveSeq++;
    return undefined;
  }

  /** A failed dial of the previous rank: retryable for a refused or reset connection, else UnavailableError naming it. */
  dialError(e: NodeJS.ErrnoException, host: string, port: number): Error {
    const code = e.code ?? "";
    return RETRYABLE.has(code)
      ? new RetryableDialError(code)
      : new UnavailableError(`${this.who(this.rank)} cannot connect to ${this.who(this.prev)} at ${host}:${port}: ${code || e.message}${code.startsWith("ERR_SSL") || code.includes("CERT") ? "; check the TLS CA and certificates" : ""}`, { cause: e });
  }
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** A listener for the next rank's connection: plain TCP, or TLS (mutual when there is a CA). */
export const createListener = (c: TlsCredentials | undefined, accept: (s: Socket) => void, onTlsClientError: () => void): NetServer => {
  const server: NetServer =
    c === undefined
      ? createNetServer((s) => accept(s))
      : createTlsServer({ cert: c.cert, key: c.key, ca: c.ca, requestCert: c.ca !== undefined, rejectUnauthorized: c.ca !== undefined }, (s) => accept(s));
  if (c !== undefined) server.on("tlsClientError", onTlsClientError);
  return server;
};

/** Starts `server` on `host:port`; rejects with UnavailableError naming this rank when it cannot. */
export const listening = (server: NetServer, host: string, port: number, peers: RingPeers): Promise<void> =>
  new Promise<void>((resolve, reject) => {
    server.once("error", (e: NodeJS.ErrnoException) =>
      reject(new UnavailableError(`${peers.who(peers.rank)} cannot listen on ${host}:${port}: ${e.code ?? e.message}; free the port or pick another`, { cause: e })),
    );
    server.listen(port, host, () => resolve());
  });

/**
 * Reads an incoming connection's hello and nothing else: `onHello` with its header and token
 * once it came, or `onDrop` (then the socket is destroyed) for anything but a hello, an
 * oversized one, or none within `timeoutMs`.
 */
export const readHello = (socket: Socket, clock: Clock, timeoutMs: number, onHello: (h: FrameHeader, auth: string) => void, onDrop: (e: Error) => void): void => {
  const timer = clock.setTimer(timeoutMs, () => drop(new DeadlineExceededError("no hello within connectTimeoutSecs")));
  const drop = (e: Error): void => {
    timer.cancel();
    parser.stop();
    onDrop(e);
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
      onHello(h, auth.toString("utf8"));
    },
    drop,
  );
  const onData = (d: Buffer): void => parser.push(d);
  socket.on("data", onData);
  socket.on("error", () => undefined); // a refused or dead connector is the connector's error
};

/**
 * Dials the previous rank (the one this rank receives from) at `address` until it welcomes
 * this one, retrying refused connections until `signal` aborts. The receiver dials, so that its
 * socket reads into buffers the frame parser picks (`onread`, plain TCP).
 */
export const dialPrev = async (address: string, dialer: Dialer, clock: Clock, signal: AbortSignal, onRetry: (error: string) => void): Promise<Link> => {
  const { host, port } = parseAddress(address) as { host: string; port: number };
  for (let attempt = 0; ; attempt++) {
    try {
      const link = await dialOnce(host, port, dialer);
      if (signal.aborted) {
        link.socket.destroy();
        dialer.abandoned(link);
        throw new CancelledError("connect() gave up");
      }
      return link;
    } catch (e) {
      if (!(e instanceof RetryableDialError) || signal.aborted) throw e;
      onRetry(e.message);
      await clock.sleep(Math.min(1000, 50 * 2 ** attempt), signal);
      if (signal.aborted) throw e;
    }
  }
};

/**
 * Dials the previous rank once and sends the hello: resolves with the link once it welcomed this
 * rank, or rejects with the refusal (a {@link RetryableDialError} when a later dial may succeed).
 */
const dialOnce = (host: string, port: number, dialer: Dialer): Promise<Link> => {
  const { peers } = dialer;
  return new Promise<Link>((resolve, reject) => {
    const c = dialer.credentials;
    let welcomed: Link | undefined;
    let settled = false;
    const settle = (e: Error | undefined, link?: Link): void => {
      if (settled) return;
      settled = true;
      dialer.pendingSockets.delete(socket);
      if (e !== undefined) {
        socket.destroy();
        reject(e);
      } else resolve(link as Link);
    };
    const parser: FrameParser = new FrameParser(
      (h, retry) => {
        if (welcomed !== undefined) return dialer.target(welcomed, h, retry, parser);
        if ((h.kind !== FrameKind.welcome && h.kind !== FrameKind.reject) || h.payloadBytes > MAX_CONTROL_PAYLOAD_BYTES) {
          return new DataLossError(`${peers.who(peers.prev)} at ${host}:${port} answered the hello with a frame of kind ${h.kind}; is that a collective port?`);
        }
        return Buffer.alloc(h.payloadBytes);
      },
      (h, payload) => {
        if (welcomed !== undefined) return dialer.onFrame(welcomed, h, payload);
        const refusal = peers.answerRefusal(h, payload, host, port);
        if (refusal !== undefined) {
          if (refusal.unauthenticated) {
            parser.stop();
            dialer.rejected();
          }
          return settle(refusal.error);
        }
        welcomed = { socket, peer: peers.prev, peerIncarnation: h.incarnation, sendSeq: 0, receiveSeq: 0 };
        socket.off("close", onClose);
        socket.off("error", onError);
        dialer.welcomed(welcomed);
        settle(undefined, welcomed);
      },
      (e) => (welcomed === undefined ? settle(e) : dialer.fail(e)),
      () => socket.resume(),
    );
    const socket = dialSocket(host, port, c, parser);
    dialer.pendingSockets.add(socket);
    socket.setNoDelay(true);
    socket.once(c === undefined ? "connect" : "secureConnect", () => {
      const { auth } = peers;
      socket.write(Buffer.concat([encodeHeader({ ...peers.blank(), kind: FrameKind.hello, rank: peers.rank, elements: peers.size, seq: 0, payloadBytes: auth.length }), auth]));
    });
    const onError = (e: NodeJS.ErrnoException): void => settle(peers.dialError(e, host, port));
    const onClose = (): void => settle(new RetryableDialError("closed before the handshake"));
    socket.on("error", onError);
    socket.on("close", onClose);
  });
};

/**
 * Dials `host:port` for `parser`. Plain TCP reads where the parser says (a header buffer, a
 * receive slot, or its scratch buffer, which the call's sink reduces or copies from), without a
 * buffer per read. TLS decrypts into buffers of its own.
 */
const dialSocket = (host: string, port: number, c: TlsCredentials | undefined, parser: FrameParser): Socket => {
  const socket: Socket =
    c === undefined
      ? netConnect({ host, port, onread: { buffer: () => parser.readTarget(), callback: (n: number) => parser.read(n) } })
      : tlsConnect({ host, port, ca: c.ca, cert: c.cert, key: c.key, ...(isIP(host) === 0 ? { servername: host } : {}) });
  if (c !== undefined) socket.on("data", (d: Buffer) => parser.push(d));
  return socket;
};

/**
 * Welcomes the next rank on the link it opened (granting it `window` chunks; the welcome carries
 * this rank's token too: the receiver reads no data from a peer that lacks it), then reads what
 * comes back on it: credits, or an abort.
 */
export const welcome = (
  peers: RingPeers,
  link: Link,
  window: number,
  on: { readonly onCredit: (count: number) => void; readonly onAbort: (payload: Buffer) => void; readonly onNotice: (origin: number) => void; readonly fail: (e: Error) => void },
): void => {
  const { socket } = link;
  socket.write(Buffer.concat([encodeHeader({ ...peers.blank(), kind: FrameKind.welcome, elements: window, seq: 0, payloadBytes: peers.auth.length }), peers.auth]));
  const parser: FrameParser = new FrameParser(
    (h) => {
      const bad = peers.checkFrame(link, h);
      if (bad !== undefined) return bad;
      if (h.kind === FrameKind.credit && h.payloadBytes === 0) return Buffer.alloc(0);
      if (h.kind === FrameKind.abort && h.payloadBytes <= MAX_CONTROL_PAYLOAD_BYTES) return Buffer.alloc(h.payloadBytes);
      if (h.kind === FrameKind.notice) return noticeTarget(peers, link, h);
      return new DataLossError(`${peers.who(link.peer)} sent a frame of kind ${h.kind} (${h.payloadBytes} bytes) where credits were expected`);
    },
    (h, payload) => (h.kind === FrameKind.abort ? on.onAbort(payload) : h.kind === FrameKind.notice ? on.onNotice(h.rank) : on.onCredit(h.elements)),
    (e) => on.fail(e),
  );
  socket.on("data", (d: Buffer) => parser.push(d));
};

/** Where a notice frame's (empty) payload goes, or why the frame is refused: a payload, or a rank outside the group. */
export const noticeTarget = (peers: RingPeers, link: Link, h: FrameHeader): Buffer | DataLossError => {
  if (h.payloadBytes !== 0) return new DataLossError(`${peers.who(link.peer)} sent a notice frame with ${h.payloadBytes} bytes of payload (a notice has none)`);
  if (h.rank >= peers.size) return new DataLossError(`${peers.who(link.peer)} sent the notice of rank ${h.rank}, outside the group of ${peers.size}`);
  return Buffer.alloc(0);
};

/** `promise`, or `onTimeout()` once `timeoutMs` passed (the deadline of `listen()` and `connect()`). */
export const withTimeout = <T>(clock: Clock, timeoutMs: number, promise: Promise<T>, onTimeout: () => Error): Promise<T> =>
  new Promise<T>((resolve, reject) => {
    const timer = clock.setTimer(timeoutMs, () => reject(onTimeout()));
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

/**
 * Ends a link gracefully: keeps reading until the peer closes too, so its last frames are not
 * reset; a frozen peer is cut off after {@link CLOSE_GRACE_MS}. Resolves once the socket closed.
 */
export const endLink = (link: Link, clock: Clock): Promise<void> => {
  link.socket.end();
  const timer = clock.setTimer(CLOSE_GRACE_MS, () => link.socket.destroy());
  return new Promise((resolve) =>
    link.socket.once("close", () => {
      timer.cancel();
      resolve();
    }),
  );
};

/** @throws InvalidArgumentError for an address that is not `host:port`. */
export const checkAddresses = (addresses: readonly string[], size: number): void => {
  addresses.forEach((a, i) => {
    if (parseAddress(a) === undefined) throw new InvalidArgumentError(`TcpCollective: addresses[${i}] ${JSON.stringify(a)} is not host:port (of ${size} ranks)`);
  });
};

const parseIncarnation = (s: string, name: string): bigint => {
  if (!/^\d{1,20}$/.test(s) || BigInt(s) > 0xffffffffffffffffn) throw new InvalidArgumentError(`TcpCollective: ${name} ${JSON.stringify(s)} is not a decimal 64-bit incarnation (as newIncarnation() makes)`);
  return BigInt(s);
};
