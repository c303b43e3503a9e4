/**
 * In-process TcpCollective ranks on loopback for the collective tests: groups (optionally with
 * one link through the partition tests' TcpProxy), a frame builder for fake or injected traffic,
 * the few internals the fault tests reach into, and one cleanup for afterEach that also cuts off
 * ranks a test froze (their close() waits on a virtual clock that only the cleanup advances).
 */
import type { Socket } from "node:net";
import { DType, encodeHeader, type FrameHeader, OpCode } from "../../../src/cluster/collective/frames.js";
import { TcpCollective, type TcpCollectiveOptions } from "../../../src/cluster/collective/TcpCollective.js";
import type { Logger } from "../../../src/Logger.js";
import { VirtualClock } from "../../../src/testing/index.js";
import { TcpProxy } from "../../util/TcpProxy.js";

/** Bound on any one real-time wait for I/O between in-process ranks, on a loaded machine. */
const WAIT_MS = 30_000;

const quiet: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };

/** The default task name of `rank`. */
export const task = (rank: number): string => `/job:worker/replica:0/task:${rank}`;

const open: TcpCollective[] = [];
const proxies: TcpProxy[] = [];
const clocks: VirtualClock[] = [];
/** Raw sockets a test opened; destroyed by {@link closeAll}. */
export const sockets: Socket[] = [];

/** For afterEach: stops the proxies, destroys raw sockets, closes every rank, cutting off frozen ones. */
export const closeAll = async (): Promise<void> => {
  await Promise.all(proxies.splice(0).map((p) => p.stop()));
  for (const s of sockets.splice(0)) s.destroy();
  const closing = Promise.all(open.splice(0).map((c) => c.close()));
  // close() waits up to 5 s (clock time) for each neighbour to close its end; a frozen one never does.
  for (const clock of clocks.splice(0)) await clock.advanceSecs(6);
  await closing;
};

/** A virtual clock that {@link closeAll} advances past close()'s grace period. */
export const virtualClock = (): VirtualClock => {
  const clock = new VirtualClock();
  clocks.push(clock);
  return clock;
};

/** One rank of a group of `size` on loopback (port 0), closed by {@link closeAll}. */
export const make = (options: Partial<TcpCollectiveOptions> & { rank: number; size: number }): TcpCollective => {
  const { size, ...rest } = options;
  const c = new TcpCollective({ addresses: Array.from({ length: size }, () => "127.0.0.1:0"), logger: quiet, ...rest });
  open.push(c);
  return c;
};

/** `size` ranks listening on free ports and connected; `perRank` adds options by rank (e.g. the incarnation). */
export const group = async (size: number, options: Partial<TcpCollectiveOptions> = {}, perRank: (rank: number) => Partial<TcpCollectiveOptions> = () => ({})): Promise<TcpCollective[]> =>
  (await connectRanks(size, options, perRank, false)).ranks;

/**
 * A {@link group} in which the link from rank 0 to rank 1 goes through a {@link TcpProxy} (rank 1,
 * the receiver, dials rank 0 through it: data goes `toClient`, credits `toTarget`): that link can
 * then be blackholed, reset or written into.
 */
export const proxiedGroup = async (
  size: number,
  options: Partial<TcpCollectiveOptions> = {},
  perRank: (rank: number) => Partial<TcpCollectiveOptions> = () => ({}),
): Promise<{ ranks: TcpCollective[]; proxy: TcpProxy }> => {
  const { ranks, proxy } = await connectRanks(size, options, perRank, true);
  return { ranks, proxy: proxy as TcpProxy };
};

const connectRanks = async (
  size: number,
  options: Partial<TcpCollectiveOptions>,
  perRank: (rank: number) => Partial<TcpCollectiveOptions>,
  proxied: boolean,
): Promise<{ ranks: TcpCollective[]; proxy: TcpProxy | undefined }> => {
  const ranks = Array.from({ length: size }, (_, rank) => make({ ...options, ...perRank(rank), rank, size }));
  const addresses = await Promise.all(ranks.map((c) => c.listen()));
  let proxy: TcpProxy | undefined;
  if (proxied) {
    // The link from rank 0 to rank 1 is the one rank 1 dials (a receiver dials its sender).
    const at = addresses[0] as string;
    proxy = await TcpProxy.start({ host: at.slice(0, at.lastIndexOf(":")), port: Number(at.slice(at.lastIndexOf(":") + 1)) });
    proxies.push(proxy);
  }
  const port = proxy?.port;
  const through = port === undefined ? addresses : addresses.map((a, i) => (i === 0 ? `127.0.0.1:${port}` : a));
  await Promise.all(ranks.map((c, rank) => c.connect(rank === 1 ? through : addresses)));
  return { ranks, proxy };
};

/** Polls `cond` until it holds (real time, bounded): for I/O between the ranks to happen. */
export const until = async (cond: () => boolean, what: string): Promise<void> => {
  const end = Date.now() + WAIT_MS;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
};

/** Whether `p` is still pending after the event loop turned a few times. */
export const pending = async (p: Promise<unknown>): Promise<boolean> => {
  let settled = false;
  p.then(
    () => (settled = true),
    () => (settled = true),
  );
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
  return !settled;
};

/** The error `p` rejects with; a resolution fails the test. */
export const rejection = (p: Promise<unknown>): Promise<Error> =>
  p.then(
    () => {
      throw new Error("expected a rejection");
    },
    (e: unknown) => e as Error,
  );

export const bytes = (b: Float32Array | Float64Array): Buffer => Buffer.from(b.buffer, b.byteOffset, b.byteLength);

/** What the fault tests read or cut inside a rank: its links and whether the group broke. */
export interface Internals {
  readonly broken?: Error;
  readonly inbound?: { readonly socket: Socket };
  readonly outbound?: { readonly socket: Socket };
  readonly inboundGone?: Error;
  readonly outboundGone?: Error;
  /** The running call: how many consecutive ranks upstream it knows have entered. */
  readonly active?: { readonly upstreamArrived: number };
}
export const internals = (c: TcpCollective): Internals => c as unknown as Internals;

/** A frame on the wire, header and payload, as a peer (or something on the path) would send it. */
export const frame = (fields: Partial<Omit<FrameHeader, "payloadBytes">> & Pick<FrameHeader, "kind">, payload: Buffer = Buffer.alloc(0)): Buffer =>
  Buffer.concat([
    encodeHeader({ op: OpCode.none, dtype: DType.none, generation: 0, rank: 0, incarnation: 0n, collective: 0, seq: 0, elements: 0, arrived: 0, ...fields, payloadBytes: payload.length }),
    payload,
  ]);
