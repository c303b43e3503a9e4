/**
 * The partition tests' TCP proxy (test/util/TcpProxy.ts) against an echo server on loopback:
 * forward, drop (resets), blackhole (open sockets, nothing forwarded) and heal. Every wait has a
 * deadline; nothing depends on timing.
 */

import { connect, createServer, type Server, type Socket } from "node:net";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { TcpProxy } from "../util/TcpProxy.js";

const deadlineMs = 10_000;

/** Resolves with `promise`, or rejects after the deadline naming `what`. */
const within = <T>(promise: Promise<T>, what: string): Promise<T> =>
  new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`test deadline: ${what} within ${deadlineMs} ms`)), deadlineMs);
    promise.then(
      (v) => (clearTimeout(timer), resolve(v)),
      (e: unknown) => (clearTimeout(timer), reject(e as Error)),
    );
  });

let echo: Server;
let echoPort: number;
/** Every chunk the echo server received. */
let received: string[];
/** Called (then forgotten) at the echo server's next chunk. */
let onReceived: (() => void)[] = [];
let proxy: TcpProxy;
const sockets: Socket[] = [];

beforeEach(async () => {
  received = [];
  onReceived = [];
  echo = createServer((s) => {
    s.on("error", () => undefined);
    s.on("data", (d: Buffer) => {
      received.push(d.toString());
      for (const f of onReceived.splice(0)) f();
      s.write(d);
    });
  });
  await new Promise<void>((r) => echo.listen(0, "127.0.0.1", r));
  echoPort = (echo.address() as { port: number }).port;
  proxy = await TcpProxy.start({ host: "127.0.0.1", port: echoPort });
});

afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await proxy.stop();
  await new Promise<void>((r) => echo.close(() => r()));
});

/** A connected client of `port`, with a reader of the next `n` echoed bytes and its end. */
const client = async (port: number) => {
  const socket = connect(port, "127.0.0.1");
  sockets.push(socket);
  let buffered = "";
  const closed = new Promise<string>((resolve) => {
    socket.on("error", (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
    socket.on("close", () => resolve("closed"));
  });
  socket.on("data", (d: Buffer) => (buffered += d.toString()));
  await within(new Promise((r) => socket.once("connect", r)), "connect");
  const read = (n: number): Promise<string> =>
    within(
      new Promise((resolve) => {
        const check = (): void => {
          if (buffered.length < n) return;
          socket.off("data", check);
          const out = buffered.slice(0, n);
          buffered = buffered.slice(n);
          resolve(out);
        };
        socket.on("data", check);
        check();
      }),
      `${n} echoed bytes`,
    );
  return { socket, read, closed };
};

describe("TcpProxy", () => {
  it("forwards both ways", async () => {
    const c = await client(proxy.port);
    c.socket.write("hello");
    expect(await c.read(5)).toBe("hello");
    expect(proxy.connections).toBe(1);
  });

  it("drop resets open connections and new ones until heal", async () => {
    const c = await client(proxy.port);
    c.socket.write("a");
    await c.read(1);
    proxy.drop();
    expect(await within(c.closed, "the reset")).toBe("ECONNRESET");
    const refused = connect(proxy.port, "127.0.0.1");
    sockets.push(refused);
    const outcome = await within(
      new Promise<string>((resolve) => {
        refused.on("error", (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
        refused.on("data", () => resolve("data"));
        refused.on("close", () => resolve("closed"));
        refused.write("x");
      }),
      "the new connection's reset",
    );
    expect(["ECONNRESET", "EPIPE", "closed"]).toContain(outcome);
    expect(received.join("")).toBe("a");
    proxy.heal();
    const again = await client(proxy.port);
    again.socket.write("b");
    expect(await again.read(1)).toBe("b");
  });

  it("blackhole forwards nothing but keeps the sockets open; heal delivers what waited", async () => {
    const c = await client(proxy.port);
    c.socket.write("1");
    await c.read(1);
    proxy.blackhole();
    c.socket.write("2");
    // A new connection is accepted too, and also forwards nothing.
    const late = await client(proxy.port);
    late.socket.write("3");
    // A round trip that bypasses the proxy: the blackholed bytes were written before it.
    const direct = await client(echoPort);
    direct.socket.write("d");
    await direct.read(1);
    expect(received.join("")).toBe("1d");
    expect(c.socket.destroyed).toBe(false);
    expect(late.socket.destroyed).toBe(false);
    expect(proxy.mode).toBe("blackhole");
    proxy.heal();
    expect(await c.read(1)).toBe("2");
    expect(await late.read(1)).toBe("3");
  });

  it("hold stops one direction only, keeping the sockets open; heal delivers what waited", async () => {
    const c = await client(proxy.port);
    c.socket.write("1");
    await c.read(1);
    proxy.hold("toTarget");
    c.socket.write("2");
    const direct = await client(echoPort);
    direct.socket.write("d");
    await direct.read(1);
    expect(received.join("")).toBe("1d");
    // The other direction flows: what the target sends reaches the client.
    proxy.inject("toClient", Buffer.from("C"));
    expect(await c.read(1)).toBe("C");
    proxy.heal();
    expect(await c.read(1)).toBe("2");
    // Held the other way: the target gets the bytes, and its echo waits.
    proxy.hold("toClient");
    c.socket.write("3");
    await within(
      new Promise<void>((resolve) => {
        const check = (): void => void (received.join("").endsWith("3") ? resolve() : onReceived.push(check));
        check();
      }),
      "the target to receive the byte",
    );
    expect(c.socket.destroyed).toBe(false);
    proxy.heal();
    expect(await c.read(1)).toBe("3");
  });

  it("inject writes into the open connection: towards the target, or back to the client only", async () => {
    expect(() => proxy.inject("toTarget", Buffer.from("x"))).toThrow("no open connection");
    const c = await client(proxy.port);
    c.socket.write("a");
    expect(await c.read(1)).toBe("a");
    proxy.inject("toTarget", Buffer.from("T")); // the echo server gets it, and echoes it
    expect(await c.read(1)).toBe("T");
    proxy.inject("toClient", Buffer.from("C"));
    expect(await c.read(1)).toBe("C");
    c.socket.write("b");
    expect(await c.read(1)).toBe("b");
    expect(received.join("")).toBe("aTb");
  });

  it("rejects a target that is not a TCP port", async () => {
    await expect(TcpProxy.start({ host: "127.0.0.1", port: 0 })).rejects.toThrow("not a TCP port");
  });
});
