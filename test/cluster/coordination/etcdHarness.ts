/**
 * A real etcd for tests: Debian's `etcd-server` binary started on free loopback ports with a
 * temporary data dir, stopped (and the dir removed) afterwards. `restart()` keeps the data dir
 * and ports. A missing binary makes `etcdBinary` undefined: the suites skip with a message.
 */

import { type ChildProcess, spawn } from "node:child_process";
import { accessSync, constants, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { afterAll, beforeAll } from "vitest";

/** The `etcd` binary on PATH (or in /usr/bin), if any. */
export const etcdBinary: string | undefined = [...(process.env.PATH ?? "").split(delimiter), "/usr/bin"]
  .map((dir) => join(dir, "etcd"))
  .find((path) => {
    try {
      accessSync(path, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });

if (etcdBinary === undefined) {
  console.warn("SKIP etcd coordination tests: no `etcd` binary (install Debian's etcd-server: apt-get install -y etcd-server)");
}

export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const address = s.address();
      s.close(() => (typeof address === "object" && address !== null ? resolve(address.port) : reject(new Error("no port"))));
    });
  });

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A running etcd. */
export class EtcdProcess {
  private child: ChildProcess | undefined;
  private log = "";

  private constructor(
    private readonly dataDir: string,
    private readonly clientPort: number,
    private readonly peerPort: number,
  ) {}

  /** Starts etcd and waits (at most 30 s) until it reports healthy. */
  static async start(): Promise<EtcdProcess> {
    const dir = mkdtempSync(join(tmpdir(), "ms-etcd-"));
    const etcd = new EtcdProcess(dir, await freePort(), await freePort());
    await etcd.launch();
    return etcd;
  }

  get endpoint(): string {
    return `http://127.0.0.1:${this.clientPort}`;
  }

  /** Stops etcd (SIGTERM, SIGKILL after 10 s) and starts it again with the same data dir. */
  async restart(): Promise<void> {
    await this.halt();
    await this.launch();
  }

  /** Stops etcd, keeping its data dir and ports for {@link resume}. */
  pause(): Promise<void> {
    return this.halt();
  }

  /** Kills etcd with SIGKILL (a crash: no clean shutdown), keeping its data dir and ports for {@link resume}. */
  async kill(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((r) => child.once("exit", () => r()));
    child.kill("SIGKILL");
    await exited;
  }

  /** Starts a paused or killed etcd again. */
  resume(): Promise<void> {
    return this.launch();
  }

  /** Stops etcd and removes its data dir. */
  async stop(): Promise<void> {
    await this.halt();
    rmSync(this.dataDir, { recursive: true, force: true });
  }

  private async launch(): Promise<void> {
    const peer = `http://127.0.0.1:${this.peerPort}`;
    this.log = "";
    const child = spawn(
      etcdBinary as string,
      [
        "--name=test",
        `--data-dir=${this.dataDir}`,
        `--listen-client-urls=${this.endpoint}`,
        `--advertise-client-urls=${this.endpoint}`,
        `--listen-peer-urls=${peer}`,
        `--initial-advertise-peer-urls=${peer}`,
        `--initial-cluster=test=${peer}`,
      ],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    child.stdout?.on("data", (d: Buffer) => (this.log += d.toString()));
    child.stderr?.on("data", (d: Buffer) => (this.log += d.toString()));
    this.child = child;
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      if (child.exitCode !== null) throw new Error(`etcd exited with ${child.exitCode}:\n${this.log.slice(-2000)}`);
      try {
        const r = await fetch(`${this.endpoint}/health`, { signal: AbortSignal.timeout(1000) });
        if (r.ok && ((await r.json()) as { health?: string }).health === "true") return;
      } catch {
        // not up yet
      }
      await sleep(100);
    }
    child.kill("SIGKILL");
    throw new Error(`etcd did not become healthy within 30 s:\n${this.log.slice(-2000)}`);
  }

  private async halt(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((r) => child.once("exit", () => r()));
    child.kill("SIGTERM");
    const killer = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(killer);
  }
}

/**
 * One etcd for the calling test file: started before its tests (unless the binary is missing)
 * and stopped after them. The returned function gives the running etcd.
 */
export const etcdForFile = (): (() => EtcdProcess) => {
  let etcd: EtcdProcess | undefined;
  beforeAll(async () => {
    if (etcdBinary !== undefined) etcd = await EtcdProcess.start();
  }, 60_000);
  afterAll(async () => {
    await etcd?.stop();
  });
  return () => {
    if (etcd === undefined) throw new Error("etcd is not running: skip the suite when etcdBinary is undefined");
    return etcd;
  };
};
