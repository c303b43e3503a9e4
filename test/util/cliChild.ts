/**
 * Runs the `monitored-session` command as users do (node directly, through npm, or on a
 * pseudo-terminal with script(1)) in a child process, and lets a test act when a line appears.
 * Every wait is bounded: a child that outlives `timeoutMs` is SIGKILLed and the test fails.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { loopbackPorts } from "../../src/cluster/loopbackPorts.js";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root (the CLI runs with it as cwd so that tsx resolves). */
export const repoRoot = resolve(fileURLToPath(new URL("../..", import.meta.url)));

/** How a child ended, and everything it printed. */
export interface CliRun {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** A running child: its process, its output so far, and a way to wait for a line. */
export interface CliChild {
  readonly process: ChildProcess;
  output(): string;
  /** Resolves once the combined output matches `pattern`; rejects after `ms` or if the child exits first. */
  waitFor(pattern: RegExp | string, ms?: number): Promise<void>;
  readonly done: Promise<CliRun>;
}

/** How the command is started. */
export type Launcher = "node" | "npm" | "tty";

/** Starts `monitored-session <args>` with `launcher`. */
export const startCli = (
  args: readonly string[],
  options: {
    launcher?: Launcher;
    env?: NodeJS.ProcessEnv;
    timeoutMs?: number;
    nodeArgs?: readonly string[];
    /** A compiled `main.js` to run with plain node (as the installed bin runs), instead of src/cli/main.ts through tsx; `launcher` "node" only. */
    compiledCli?: string;
    /** A TypeScript program of the repository to run through tsx instead of src/cli/main.ts (a loop of your own); `launcher` "node" only. */
    program?: string;
  } = {},
): CliChild => {
  const launcher = options.launcher ?? "node";
  const env = { ...process.env, CI: "true", ...options.env };
  const quoted = args.map((a) => `'${a.replace(/'/g, "'\\''")}'`).join(" ");
  const entry = options.compiledCli === undefined ? ["--import", "tsx", ...(options.nodeArgs ?? []), options.program ?? "src/cli/main.ts"] : [...(options.nodeArgs ?? []), options.compiledCli];
  const child =
    launcher === "node"
      ? spawn(process.execPath, [...entry, ...args], { cwd: repoRoot, env, stdio: ["ignore", "pipe", "pipe"] })
      : launcher === "npm"
        ? spawn("npm", ["run", "--silent", "cli", "--", ...args], { cwd: repoRoot, env, stdio: ["ignore", "pipe", "pipe"] })
        : // script(1) gives the command a pseudo-terminal; `-e` returns its exit code. Its shell is
          // $SHELL, pinned to /bin/sh here; `exec` replaces it with npm, as a user's interactive shell hands the
          // terminal to npm. Without it, dash stays as npm's parent and dies of the terminal's SIGINT
          // (script then reports 130 whatever npm returns).
          spawn("script", ["-qfec", `exec npm run --silent cli -- ${quoted}`, "/dev/null"], { cwd: repoRoot, env: { ...env, SHELL: "/bin/sh" }, stdio: ["pipe", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  /** Set before the waiters are told of the close, so that a waiter fails at once. */
  let exited = false;
  const waiters = new Set<() => void>();
  const notify = (): void => {
    for (const w of [...waiters]) w();
  };
  child.stdout?.setEncoding("utf8").on("data", (d: string) => {
    stdout += d;
    notify();
  });
  child.stderr?.setEncoding("utf8").on("data", (d: string) => {
    stderr += d;
    notify();
  });
  const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 60_000);
  const done = new Promise<CliRun>((resolveRun, reject) => {
    child.on("error", reject);
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      exited = true;
      notify();
      resolveRun({ code, signal, stdout, stderr });
    });
  });
  const output = (): string => stdout + stderr;
  const waitFor = (pattern: RegExp | string, ms = 45_000): Promise<void> =>
    new Promise((ok, fail) => {
      const matches = (): boolean => (typeof pattern === "string" ? output().includes(pattern) : pattern.test(output()));
      const t = setTimeout(() => {
        waiters.delete(check);
        fail(new Error(`timed out after ${ms} ms waiting for ${String(pattern)}; output:\n${output()}`));
      }, ms);
      const check = (): void => {
        if (matches()) {
          clearTimeout(t);
          waiters.delete(check);
          ok();
        } else if (exited) {
          clearTimeout(t);
          waiters.delete(check);
          fail(new Error(`the command exited before printing ${String(pattern)}; output:\n${output()}`));
        }
      };
      waiters.add(check);
      check();
    });
  return { process: child, output, waitFor, done };
};

/** Whether a process with this pid exists. */
export const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** Free loopback ports for tasks' addresses: the ones `launch` picks (below the ephemeral range, so no client socket takes them first). */
export const freePorts = (n: number): Promise<number[]> => loopbackPorts(n);

/** The task pids a `launch` printed (`[launch] started <task> at <address> (pid N)`, `(pid N, its standby)`, `(pid N, alone: …)`), its standbys' included (`--standby`). */
export const launchedTaskPids = (output: string): number[] => [
  ...[...output.matchAll(/^\[launch\] started \S+ at \S+ \(pid (\d+)(?:, [^)]*)?\)$/gm)].map((m) => Number(m[1])),
  ...standbyPids(output),
];

/** The standby pids a `launch --standby` printed (`[launch] standby for a restart: chief:0 (pid N), …`). */
export const standbyPids = (output: string): number[] =>
  [...output.matchAll(/^\[launch\] standby for a restart: (.*)$/gm)].flatMap((m) => [...(m[1] as string).matchAll(/\(pid (\d+)\)/g)].map((p) => Number(p[1])));

/** SIGKILLs a `launch` child and every task it printed it started, and waits for it to close. */
export const killLaunchTree = async (launch: CliChild): Promise<void> => {
  const pids = launchedTaskPids(launch.output());
  launch.process.kill("SIGKILL");
  for (const pid of pids) if (alive(pid)) process.kill(pid, "SIGKILL");
  await launch.done;
};
