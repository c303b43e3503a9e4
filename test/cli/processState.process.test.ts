import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

import { hasEnded, isStopped } from "../../src/cli/processState.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-process-state-");
const children: import("node:child_process").ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) c.kill("SIGKILL");
});

/** Polls `check` until it holds, at most `tries` times (the kernel applies a signal asynchronously). */
const until = async (check: () => boolean, tries = 2000): Promise<boolean> => {
  for (let i = 0; i < tries; i += 1) {
    if (check()) return true;
    await new Promise((r) => setImmediate(r));
  }
  return check();
};

/** A fake `/proc/<pid>/stat` with `comm`, `state` and the task flags `flags` (default a running Node's, 0x400100). */
const fakeProc = (comm: string, state: string, flags = 4194560): string => {
  const root = tempDir();
  mkdirSync(join(root, "7"));
  writeFileSync(join(root, "7", "stat"), `7 (${comm}) ${state} 1 7 7 0 -1 ${flags} 1234 0 0`);
  return root;
};

describe("isStopped", () => {
  it.skipIf(process.platform !== "linux")("is true for a process stopped by SIGSTOP, and false again once it is continued", async () => {
    const child = spawn(process.execPath, ["-e", "setInterval(() => {}, 1000)"], { stdio: "ignore" });
    children.push(child);
    const pid = child.pid as number;
    expect(isStopped(pid)).toBe(false);
    child.kill("SIGSTOP");
    expect(await until(() => isStopped(pid))).toBe(true);
    child.kill("SIGCONT");
    expect(await until(() => !isStopped(pid))).toBe(true);
  });

  it("reads the state after the last parenthesis, whatever the command's name holds", () => {
    expect(isStopped(7, fakeProc("a) R (b", "T"))).toBe(true);
    expect(isStopped(7, fakeProc("node", "S"))).toBe(false);
  });

  it("is false for a process held by a tracer (t), a process gone, and a malformed stat", () => {
    expect(isStopped(7, fakeProc("node", "t"))).toBe(false);
    expect(isStopped(7, tempDir())).toBe(false);
    const root = tempDir();
    mkdirSync(join(root, "7"));
    writeFileSync(join(root, "7", "stat"), "garbage");
    expect(isStopped(7, root)).toBe(false);
  });
});

describe("hasEnded", () => {
  it.skipIf(process.platform !== "linux")("is true for a process that ended but is not reaped (a zombie), false for one running", async () => {
    // The shell starts `true` in the background, prints its pid, and becomes `sleep`, which never reaps it.
    const child = spawn("sh", ["-c", "true & echo $!; exec sleep 60"], { stdio: ["ignore", "pipe", "ignore"] });
    children.push(child);
    const zombie = await new Promise<number>((resolve, reject) => {
      child.stdout?.once("data", (d: Buffer) => resolve(Number(d.toString().trim())));
      child.once("exit", () => reject(new Error("the shell exited early")));
    });
    expect(await until(() => hasEnded(zombie))).toBe(true);
    expect(hasEnded(child.pid as number)).toBe(false);
  });

  it("reads Z and X as ended, every other state as not", () => {
    expect(hasEnded(7, fakeProc("node", "Z"))).toBe(true);
    expect(hasEnded(7, fakeProc("a) T (b", "X"))).toBe(true);
    for (const state of ["R", "S", "D", "T", "t"]) expect(hasEnded(7, fakeProc("node", state)), state).toBe(false);
  });

  it("reads a process in its exit (PF_EXITING, 0x4, in the flags: a SIGKILL under way, its sockets closing before it is a zombie) as ended, in any state", () => {
    for (const state of ["R", "D", "S"]) expect(hasEnded(7, fakeProc("a) 4 (b", state, 0x400104)), state).toBe(true);
    expect(hasEnded(7, fakeProc("node", "R", 0x400100))).toBe(false);
    // Flags that are not a number: not known to be exiting.
    expect(hasEnded(7, fakeProc("node", "R", Number.NaN))).toBe(false);
  });

  it.skipIf(process.platform !== "linux")("is true for a process SIGKILLed, from the moment its sockets close (what a peer sees first)", async () => {
    const { createServer } = await import("node:net");
    const server = createServer();
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as { port: number }).port;
    const child = spawn(process.execPath, ["-e", `require("net").connect(${port}, "127.0.0.1"); setInterval(() => {}, 1000)`], { stdio: "ignore" });
    children.push(child);
    const socket = await new Promise<import("node:net").Socket>((r) => server.once("connection", r));
    const closed = new Promise<void>((r) => socket.on("close", () => r()).on("error", () => undefined));
    expect(hasEnded(child.pid as number)).toBe(false);
    child.kill("SIGKILL");
    await closed;
    // The peer saw the reset: the process is exiting or a zombie, never "running" to launch.
    expect(hasEnded(child.pid as number)).toBe(true);
    server.close();
  });

  it("a stat cut at every offset (a read that raced the process's exit) gives an answer, never an error", () => {
    const full = `7 (a) b) R 1 7 7 0 -1 ${0x400104} 1234 0 0`;
    const root = tempDir();
    mkdirSync(join(root, "7"));
    for (let i = 0; i <= full.length; i++) {
      writeFileSync(join(root, "7", "stat"), full.slice(0, i));
      expect(typeof hasEnded(7, root), `cut at ${i}`).toBe("boolean");
      expect(isStopped(7, root), `cut at ${i}`).toBe(false);
    }
    // Whole, it is a process in its exit.
    expect(hasEnded(7, root)).toBe(true);
  });

  it("is true for an entry gone while procfs is there, false where there is no procfs", () => {
    const root = tempDir();
    mkdirSync(join(root, "self"));
    writeFileSync(join(root, "self", "stat"), "1 (node) R 0");
    expect(hasEnded(7, root)).toBe(true);
    expect(hasEnded(7, tempDir())).toBe(false);
  });
});
