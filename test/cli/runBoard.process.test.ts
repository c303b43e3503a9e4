/**
 * `run --board`: the board beside training (issue 26). A real `run` child on a linear job with
 * summaries: its output names the board's URL, the board answers TensorBoard's routes while
 * training goes on, and the run still ends as usual (a watched file preempts it: exit 42). A port
 * in use is a warning, never the end of training. Tests act on printed lines, never on time.
 *
 * The board runs in a process of its own (issue 33): a hostile event file in the logdir is one
 * warning while the bundled job trains on, and the board's process dying is one warning too.
 */
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

import { linearJob } from "../util/cli.js";
import { startCli, type CliChild } from "../util/cliChild.js";
import { exampleTree } from "../util/exampleTree.js";
import { issue33File } from "../util/hostileRecords.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-run-board-");
const children: CliChild[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) {
    c.process.kill("SIGKILL");
    await c.done;
  }
});

const config = async (dir: string): Promise<string> => {
  const file = join(dir, "train.yaml");
  await writeFile(file, `module: ${linearJob}\ncheckpoint:\n  dir: ckpt\n  saveSteps: 100000\nsummaries:\n  saveSteps: 1\npreemption:\n  watchFile: stop-now\nlastStep: 100000000\nlogStepCountSteps: 0\n`);
  return file;
};

describe("run --board", () => {
  it("serves the board on the summaries while training: its URL is printed and TensorBoard's routes answer", async () => {
    const dir = tempDir();
    const run = startCli(["run", await config(dir), "--board", "0"], { timeoutMs: 120_000 });
    children.push(run);
    await run.waitFor(/INFO Board: (http:\/\/127\.0\.0\.1:\d+\/) \(monitored-session board /, 90_000);
    const url = /INFO Board: (http:\/\/127\.0\.0\.1:\d+\/)/.exec(run.output())?.[1] as string;
    await run.waitFor("Starting at global step", 90_000);
    // The board answers while the chief trains: its environment names the summaries' directory.
    const env = (await (await fetch(`${url}data/environment`)).json()) as { data_location: string };
    expect(env.data_location).toBe(join(dir, "ckpt"));
    expect(Array.isArray(await (await fetch(`${url}data/runs`)).json())).toBe(true);
    await writeFile(join(dir, "stop-now"), "");
    const r = await run.done;
    expect(r.code, run.output()).toBe(42);
  }, 120_000);

  it("a port in use is a warning: training goes on without the board", async () => {
    const busy = createServer();
    await new Promise<void>((ok) => busy.listen(0, "127.0.0.1", ok));
    const port = (busy.address() as { port: number }).port;
    try {
      const dir = tempDir();
      const run = startCli(["run", await config(dir), "--board", String(port)], { timeoutMs: 120_000 });
      children.push(run);
      await run.waitFor(`WARN The board could not serve ${join(dir, "ckpt")} (port ${port} is in use: give another with --board <port>, or 0 for a free one); training goes on without it.`, 90_000);
      await run.waitFor("Starting at global step", 90_000);
      await writeFile(join(dir, "stop-now"), "");
      expect((await run.done).code, run.output()).toBe(42);
    } finally {
      busy.close();
    }
  }, 120_000);

  it("a bad port is a usage error (exit 2, one line)", async () => {
    const run = startCli(["run", "nothing.yaml", "--board", "http"], { timeoutMs: 60_000 });
    children.push(run);
    const r = await run.done;
    expect(r.code).toBe(2);
    expect(r.stderr.trim()).toBe("monitored-session run: --board http: expected a port from 0 to 65535 (0 picks a free one)");
  });
});

describe("run --board: the board in a process of its own (issue 33)", () => {
  /** A matcher for an output holding two progress lines (`step N/M | …`) more than `output`: training went on. */
  const progressLinesBeyond = (output: string): RegExp => {
    const n = (output.match(/^step \d+\/\d+ /gm) ?? []).length;
    return new RegExp(`(?:^step \\d+\\/\\d+ [^\\n]*\\n[\\s\\S]*?){${n + 2}}`, "m");
  };

  /** The warnings about the board, and the board's reports. */
  const boardWarnings = (output: string): string[] => output.split("\n").filter((l) => /^WARN (?:board:|The board)/.test(l));

  it("a hostile event file in a subfolder of the logdir: the bundled job trains on, the board warns once, and the exit code is the training's", async () => {
    const root = tempDir();
    const yaml = exampleTree(root, (y) =>
      y
        .replace("lastStep: 15000", "lastStep: 100000000")
        .replace("saveSteps: 100\n", "saveSteps: 10\n")
        .replace("preemption:\n", "preemption:\n  watchFile: stop-now\n"),
    );
    // The file of the issue: 154 bytes whose first header claims 3.5e9 bytes, its length CRC valid.
    const dropped = join(root, "runs", "tfjs-classifier", "dropped", "here");
    await mkdir(dropped, { recursive: true });
    const hostile = join(dropped, "events.out.tfevents.1599759586.hostile");
    await writeFile(hostile, issue33File());
    const run = startCli(["run", yaml, "--board", "0"], { timeoutMs: 240_000 });
    children.push(run);
    await run.waitFor(`WARN board: ${hostile}: corrupted record at offset 0: its header claims 3500000000 bytes`, 200_000);
    await run.waitFor("Starting at global step", 200_000);
    await run.waitFor(progressLinesBeyond(run.output()), 200_000);
    await writeFile(join(root, "examples", "stop-now"), "");
    const r = await run.done;
    expect(r.code, run.output()).toBe(42);
    expect(boardWarnings(r.stderr)).toEqual([`WARN board: ${hostile}: corrupted record at offset 0: its header claims 3500000000 bytes, more than the limit of 268435456 (maxRecordBytes); record skipped`]);
  }, 240_000);

  it("the board's process dying is one warning: training goes on, and the exit code is the training's", async () => {
    const dir = tempDir();
    const run = startCli(["run", await config(dir), "--board", "0"], { timeoutMs: 120_000 });
    children.push(run);
    await run.waitFor(/INFO Board: http:\/\/127\.0\.0\.1:\d+\//, 90_000);
    await run.waitFor("Starting at global step", 90_000);
    const board = await boardProcess(run.process.pid as number);
    process.kill(board, "SIGKILL");
    await run.waitFor("WARN The board stopped (killed by SIGKILL); training goes on without it.", 90_000);
    await run.waitFor(progressLinesBeyond(run.output()), 90_000);
    await writeFile(join(dir, "stop-now"), "");
    const r = await run.done;
    expect(r.code, run.output()).toBe(42);
    expect(boardWarnings(r.stderr)).toEqual(["WARN The board stopped (killed by SIGKILL); training goes on without it."]);
  }, 120_000);
});

/** The pid of the board's process among the children of `pid` (Linux: /proc). */
const boardProcess = async (pid: number): Promise<number> => {
  const children = (await readFile(`/proc/${pid}/task/${pid}/children`, "utf8")).trim().split(/\s+/).map(Number);
  for (const child of children) {
    const cmdline = await readFile(`/proc/${child}/cmdline`, "utf8").catch(() => "");
    if (cmdline.includes("runBoard")) return child;
  }
  throw new Error(`no board process among the children of ${pid}: ${children.join(", ")}`);
};
