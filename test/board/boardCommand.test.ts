import { EventEmitter } from "node:events";
import { createServer } from "node:net";
import { join } from "node:path";
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";

import { main } from "../../src/cli/program.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { cliInProcess } from "../util/cli.js";
import { send } from "./http.js";
import { logdirWithOneRun, runsOnceLoaded, servers, tempDir } from "./boardCommand.testHelpers.js";

describe("monitored-session board: exit 2 paths (in process)", () => {
  it("a logdir that does not exist: one line, exit 2", async () => {
    const r = await cliInProcess(["board", join(tempDir(), "nope"), "--port", "0"]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/^monitored-session board: .*nope: no such directory/);
  });

  it("a port in use: one line naming the port and the fix, exit 2", async () => {
    const taken = createServer();
    servers.push(taken);
    await new Promise<void>((r) => taken.listen(0, "127.0.0.1", r));
    const port = (taken.address() as { port: number }).port;
    const r = await cliInProcess(["board", await logdirWithOneRun(), "--port", String(port)]);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toContain(`port ${port} on 127.0.0.1 is in use`);
    expect(r.stderr).toContain("--port 0");
  });

  it("a bad --port is a usage error", async () => {
    const r = await cliInProcess(["board", tempDir(), "--port", "http"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--port/);
  });

  it("a --port past 65535: one line, as run --board says it, exit 2 (no stack); below 0 or not a number: commander's usage error, exit 2", async () => {
    for (const port of ["99999", "65536", "070000"]) {
      const r = await cliInProcess(["board", await logdirWithOneRun(), "--port", port]);
      expect([port, r.code, r.stdout]).toEqual([port, 2, ""]);
      expect(r.stderr).toBe(`monitored-session board: --port ${Number(port)}: expected a port from 0 to 65535 (0 picks a free one)\n`);
    }
    for (const port of ["-1", "1e3", "6006.5", "abc", ""]) {
      const r = await cliInProcess(["board", await logdirWithOneRun(), "--port", port]);
      expect([port, r.code, r.stdout]).toEqual([port, 2, ""]);
      expect(r.stderr).toMatch(/^error: option '--port <n>' argument '.*' is invalid\. expected an integer >= 0\n/);
    }
  });

  it("an empty or blank --token is refused before anything is bound: one line naming the problem and the fix, exit 2", async () => {
    for (const host of [[], ["--host", "0.0.0.0"]]) {
      for (const token of ["", "  "]) {
        const r = await cliInProcess(["board", await logdirWithOneRun(), "--port", "0", ...host, "--token", token]);
        expect([host, token, r.code, r.stdout]).toEqual([host, token, 2, ""]);
        expect(r.stderr.trim().split("\n")).toHaveLength(1);
        expect(r.stderr).toMatch(new RegExp(`^monitored-session board: --token ${JSON.stringify(JSON.stringify(token)).slice(1, -1)}: ${token === "" ? "empty" : "only whitespace"}, which is no secret; set a non-empty token`));
        expect(r.stderr).toContain('--token "${TOKEN:?set TOKEN}"');
        expect(r.stderr).toContain("or omit --token");
      }
    }
  });

  it("a bad --image-mib-per-tag, --histogram-mib-per-tag or --text-mib-per-tag is a usage error naming the flag and what it expects", async () => {
    for (const flag of ["--image-mib-per-tag", "--histogram-mib-per-tag", "--text-mib-per-tag"]) {
      for (const bad of ["0", "-1", "lots"]) {
        const r = await cliInProcess(["board", tempDir(), flag, bad]);
        expect(r.code, `${flag} ${bad}`).toBe(2);
        expect(r.stderr, `${flag} ${bad}`).toMatch(new RegExp(`${flag}.*expected a positive number of MiB`));
      }
    }
  });
});

/** `main(argv)` in this process, its output collected, stopped by emitting a signal on `proc`; resolves once it printed its URL. */
const boardInProcess = async (argv: string[]): Promise<{ out: () => string; err: () => string; proc: EventEmitter; done: Promise<number> }> => {
  let out = "";
  let err = "";
  const sink = (write: (s: string) => void): Writable =>
    new Writable({
      write(chunk: Buffer | string, _e, done) {
        write(String(chunk));
        done();
      },
    });
  const proc = Object.assign(new EventEmitter(), { ppid: 1 });
  const done = main(argv, {
    out: sink((s) => (out += s)),
    err: sink((s) => (err += s)),
    env: {},
    isTTY: false,
    noticeProcess: proc as unknown as { on: () => unknown; off: () => unknown; ppid: number },
  });
  for (let i = 0; i < 10_000 && !out.includes("\n"); i++) await new Promise<void>((r) => setImmediate(r));
  return { out: () => out, err: () => err, proc, done };
};

describe("monitored-session board: serves until SIGINT/SIGTERM, then exits 0", () => {
  it("in process: prints the URL, answers, stops on SIGTERM", async () => {
    const logdir = await logdirWithOneRun();
    const { out: printed, err: errors, proc, done } = await boardInProcess(["board", logdir, "--port", "0"]);
    const out = printed();
    const err = errors();
    expect(out).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/\n$/);
    expect(err).toContain(`serving ${logdir}`);
    const url = out.trim().replace(/\/$/, "");
    expect(await runsOnceLoaded(url)).toBe('["train"]');
    expect(proc.listenerCount("SIGTERM")).toBe(1);
    proc.emit("SIGTERM");
    expect(await done).toBe(0);
    expect(proc.listenerCount("SIGTERM") + proc.listenerCount("SIGINT")).toBe(0);
    await expect(send(`${url}/data/runs`)).rejects.toThrow(/ECONNREFUSED/);
  });

  it("--histogram-mib-per-tag and --text-mib-per-tag bound those tags: thinned, said on stderr and on /board/thinned", async () => {
    const logdir = tempDir();
    const w = new SummaryWriter(join(logdir, "train"), { clock: new VirtualClock() });
    for (let s = 0; s < 40; s++) {
      w.addHistogram("weights", [s, s + 1], s, { buckets: 30 }); // 748 bytes each
      w.addText("log", "x".repeat(920), s); // 1,000 bytes each
    }
    await w.close();
    // 0.005 MiB = 5,243 bytes: room for 7 histograms, 5 texts.
    const { out, err, proc, done } = await boardInProcess(["board", logdir, "--port", "0", "--histogram-mib-per-tag", "0.005", "--text-mib-per-tag", "0.005"]);
    const url = out().trim().replace(/\/$/, "");
    let thinned: { plugin: string; kept: number }[] = [];
    for (let i = 0; i < 1000 && thinned.length < 2; i++) thinned = JSON.parse((await send(`${url}/board/thinned`)).text) as typeof thinned;
    expect(thinned.map((t) => t.plugin)).toEqual(["histograms", "text"]);
    expect(thinned[0]?.kept).toBeLessThanOrEqual(7);
    expect(thinned[1]?.kept).toBeLessThanOrEqual(5);
    expect(err()).toMatch(/^monitored-session board: histograms of run "train", tag "weights": over the 0\.005 MiB kept per tag; .*--histogram-mib-per-tag/m);
    expect(err()).toMatch(/^monitored-session board: text of run "train", tag "log": over the 0\.005 MiB kept per tag; .*--text-mib-per-tag/m);
    proc.emit("SIGTERM");
    expect(await done).toBe(0);
  });

});
