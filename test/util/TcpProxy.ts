/**
 * A userspace TCP proxy for partition tests: it listens on a loopback port and forwards each
 * connection to `target`. On command it cuts the path, the way a network fault would:
 *
 * - `drop()`: resets every open connection, and resets new ones at once (a peer that is gone,
 *   or a firewall that rejects);
 * - `blackhole()`: keeps every socket open and accepts new connections, but forwards nothing
 *   (a cable pulled, a firewall that silently drops). Bytes sent meanwhile wait in the kernel's
 *   buffers, as TCP keeps retransmitting them through a real partition;
 * - `hold(direction)`: a blackhole one way only: what the client sends (`"toTarget"`) or what
 *   the target sends (`"toClient"`) waits, and the other direction flows;
 * - `heal()`: forwards again, including what waited during a blackhole or a hold.
 *
 * `inject()` writes bytes of the test's own into the open connections, as a stale or confused
 * sender on the path would (a replayed or reordered frame).
 *
 * It lives with the tests, not in the package: users fault their own networks with their own
 * tools (netns, iptables, toxiproxy); this one only needs to be small and ours.
 */

import { connect, createServer, type Server, type Socket } from "node:net";

/** What the proxy does with traffic. */
export type ProxyMode = "forward" | "drop" | "blackhole";

/** A direction through the proxy: from the client towards the target, or back. */
export type ProxyDirection = "toTarget" | "toClient";

/** One proxied connection: the accepted socket and the one to the target. */
interface Pipe {
  readonly client: Socket;
  readonly upstream: Socket;
}

export class TcpProxy {
  #mode: ProxyMode = "forward";
  #held: ProxyDirection | undefined;
  readonly #pipes = new Set<Pipe>();

  private constructor(
    private readonly server: Server,
    /** The port the proxy listens on (127.0.0.1). */
    readonly port: number,
    private readonly target: { readonly host: string; readonly port: number },
  ) {}

  /** Starts a proxy on a free loopback port forwarding to `host:port`. */
  static start(target: { readonly host: string; readonly port: number }): Promise<TcpProxy> {
    if (!Number.isInteger(target.port) || target.port <= 0 || target.port > 65_535) {
      return Promise.reject(new TypeError(`TcpProxy: target port ${target.port} is not a TCP port (1..65535)`));
    }
    return new Promise((resolve, reject) => {
      const server = createServer();
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => {
        const address = server.address();
        if (typeof address !== "object" || address === null) return reject(new Error("TcpProxy: no bound address"));
        const proxy = new TcpProxy(server, address.port, target);
        server.on("connection", (socket) => proxy.accept(socket));
        resolve(proxy);
      });
    });
  }

  /** What the proxy does now. */
  get mode(): ProxyMode {
    return this.#mode;
  }

  /** Open proxied connections. */
  get connections(): number {
    return this.#pipes.size;
  }

  /** Resets every connection; new ones are reset on accept until {@link heal}. */
  drop(): void {
    this.#mode = "drop";
    for (const pipe of [...this.#pipes]) this.close(pipe);
  }

  /** Forwards nothing, keeping sockets open, until {@link heal}. */
  blackhole(): void {
    this.#mode = "blackhole";
    for (const { client, upstream } of this.#pipes) {
      client.pause();
      upstream.pause();
    }
  }

  /** Forwards nothing in `direction` (the other one flows), keeping sockets open, until {@link heal}. */
  hold(direction: ProxyDirection): void {
    this.#held = direction;
    for (const pipe of this.#pipes) this.source(pipe, direction).pause();
  }

  /** Forwards again, both ways. */
  heal(): void {
    this.#mode = "forward";
    this.#held = undefined;
    for (const { client, upstream } of this.#pipes) {
      client.resume();
      upstream.resume();
    }
  }

  /**
   * Writes `bytes` into every open connection, towards the target (`"toTarget"`) or back to the
   * client (`"toClient"`), between whatever the two ends send. Call it while that direction is
   * idle if the bytes must not split a message of theirs.
   */
  inject(direction: ProxyDirection, bytes: Buffer): void {
    if (this.#pipes.size === 0) throw new Error("TcpProxy.inject: no open connection to write into");
    for (const { client, upstream } of this.#pipes) (direction === "toTarget" ? upstream : client).write(bytes);
  }

  /** Stops listening and resets every connection. */
  stop(): Promise<void> {
    for (const pipe of [...this.#pipes]) this.close(pipe);
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    if (this.#mode === "drop") {
      client.resetAndDestroy();
      return;
    }
    const upstream = connect(this.target.port, this.target.host);
    const pipe: Pipe = { client, upstream };
    this.#pipes.add(pipe);
    const forward = (from: Socket, to: Socket): void => {
      // Flow control by hand rather than pipe(): pause() must hold the bytes, and a pipe resumes.
      from.on("data", (chunk: Buffer) => {
        if (!to.write(chunk)) {
          from.pause();
          to.once("drain", () => {
            if (this.#mode === "forward" && (this.#held === undefined || this.source(pipe, this.#held) !== from)) from.resume();
          });
        }
      });
      from.on("end", () => to.end());
    };
    forward(client, upstream);
    forward(upstream, client);
    const end = (): void => this.close(pipe);
    client.on("error", end).on("close", end);
    upstream.on("error", end).on("close", end);
    if (this.#mode === "blackhole") {
      client.pause();
      upstream.pause();
    }
    if (this.#held !== undefined) this.source(pipe, this.#held).pause();
  }

  /** The socket whose bytes go in `direction`. */
  private source(pipe: Pipe, direction: ProxyDirection): Socket {
    return direction === "toTarget" ? pipe.client : pipe.upstream;
  }

  /** Resets both sockets of `pipe` (a reset, not a clean end: the peer sees ECONNRESET). */
  private close(pipe: Pipe): void {
    if (!this.#pipes.delete(pipe)) return;
    for (const socket of [pipe.client, pipe.upstream]) {
      if (!socket.destroyed) socket.resetAndDestroy();
    }
  }
}
