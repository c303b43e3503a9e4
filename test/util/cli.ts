/**
 * Runs the `monitored-session` command in a child process for the CLI tests: from the sources
 * (`node --import tsx src/cli/main.ts`, cwd = project root so tsx resolves), or any other
 * command line (an installed bin, a pseudo-terminal through `script(1)`), with a bounded time.
 */
import { spawn, type ChildProcess, type SpawnOptions } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { Writable } from "node:stream";
import { fileURLToPath } from "node:url";

/** The repository root. */
export const root = resolve(fileURLToPath(new URL("../..", import.meta.url)));

/** The tiny Graph job of test/fixtures/cli. */
export const linearJob = join(root, "test/fixtures/cli/linear-job.ts");

/**
 * The source of a tiny Graph model (`graph`, with a global step, `w`, `loss` and `train`) for the
 * programs the installed-package tests write; it needs `Graph` imported from "monitored-session".
 */
export const LINEAR_GRAPH_SOURCE = `const graph = new Graph();
const step = graph.globalStep();
const w = graph.variable("w", 0);
graph.op("loss", (ctx) => (ctx.read(w) - 3) ** 2);
graph.op("train", (ctx) => {
  ctx.assign(w, ctx.read(w) + 0.5);
  return ctx.assignAdd(step, 1);
});
`;

/** What a child process printed and how it ended. */
export interface Result {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `command args` to its end (killed after `timeoutMs`); `onSpawn` sees the child. */
export const spawnResult = (
  command: string,
  args: readonly string[],
  options: SpawnOptions & { timeoutMs?: number } = {},
  onSpawn?: (p: ChildProcess) => void,
): Promise<Result> =>
  new Promise((done, fail) => {
    const child = spawn(command, [...args], { cwd: root, ...options, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout?.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 30_000);
    child.on("error", fail);
    child.on("close", (code) => {
      clearTimeout(timer);
      done({ code, stdout, stderr });
    });
    onSpawn?.(child);
  });

/** Runs `monitored-session <args>` from the sources, with `CI=true` (plain lines) unless `env` says otherwise. */
export const cli = (args: readonly string[], env: Record<string, string> = {}, onSpawn?: (p: ChildProcess) => void): Promise<Result> =>
  spawnResult(process.execPath, ["--import", "tsx", "src/cli/main.ts", ...args], { env: { ...process.env, CI: "true", ...env } }, onSpawn);

/**
 * Runs the command's `main` in this process with its output captured: for usage errors and help,
 * which `main` answers before it loads a module, writes a file or starts a process (the entry
 * point's exit with the code `main` returns is the child-process tests').
 */
export const cliInProcess = async (args: readonly string[]): Promise<Result> => {
  // Loaded on first use: most users of this module never need the whole program.
  const { main } = await import("../../src/cli/program.js");
  const captured = { stdout: "", stderr: "" };
  const sink = (key: keyof typeof captured): Writable =>
    new Writable({
      write(chunk: Buffer | string, _encoding, done) {
        captured[key] += String(chunk);
        done();
      },
    });
  const code = await main(args, { out: sink("stdout"), err: sink("stderr"), env: {}, isTTY: false });
  return { code, ...captured };
};

/** Waits until `cond()` holds, polling; throws after `ms`. */
export const waitFor = async (cond: () => boolean, ms = 20_000): Promise<void> => {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, 20));
  }
};

/** The entries of `dir` (recursively, relative), or `[]` when it does not exist: "nothing created" checks. */
export const listTree = (dir: string): string[] =>
  !existsSync(dir)
    ? []
    : readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory() ? [e.name + "/", ...listTree(join(dir, e.name)).map((f) => `${e.name}/${f}`)] : [e.name],
      );
