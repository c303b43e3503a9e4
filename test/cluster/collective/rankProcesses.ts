/**
 * Ranks of a TcpCollective group as real processes on loopback, for the process tests
 * (test/cluster/collective/processes.process.test.ts, test/integration/collective-big.test.ts). A rank's
 * fixture prints `LISTENING <host:port>`, then reads the JSON list of every rank's address from
 * stdin; after that it prints lines the test waits for. Every wait has a deadline, and
 * {@link killRanks} SIGKILLs (after a SIGCONT) whatever is still running.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { repoRoot } from "../../util/cliChild.js";

/** A rank's process and what it printed. */
export interface Rank {
  readonly child: ChildProcess;
  readonly lines: string[];
  /** Resolves with the first line (seen from `from` on) that matches; rejects after the group's wait bound. */
  waitFor(pattern: RegExp, from?: number): Promise<string>;
  readonly exited: Promise<number | null>;
}

const running: ChildProcess[] = [];

/** SIGKILLs every rank still running (call it in afterEach). */
export const killRanks = (): void => {
  for (const c of running.splice(0)) {
    if (c.exitCode === null && c.signalCode === null) {
      c.kill("SIGCONT");
      c.kill("SIGKILL");
    }
  }
};

const startRank = (fixture: string, rank: number, args: readonly string[], waitMs: number): Rank => {
  const child = spawn(process.execPath, ["--import", "tsx", fixture, ...args], { cwd: repoRoot, stdio: ["pipe", "pipe", "pipe"] });
  running.push(child);
  const lines: string[] = [];
  const watchers = new Set<() => void>();
  createInterface({ input: child.stdout! }).on("line", (line) => {
    lines.push(line);
    for (const w of [...watchers]) w();
  });
  let stderr = "";
  child.stderr!.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  const waitFor = (pattern: RegExp, from = 0): Promise<string> =>
    new Promise((resolve, reject) => {
      const check = (): boolean => {
        const hit = lines.slice(from).find((l) => pattern.test(l));
        if (hit === undefined) return false;
        clearTimeout(timer);
        watchers.delete(watch);
        resolve(hit);
        return true;
      };
      const watch = (): void => void check();
      const timer = setTimeout(() => {
        watchers.delete(watch);
        reject(new Error(`rank ${rank}: no line matching ${pattern} within ${waitMs} ms; stdout:\n${lines.filter((l) => !l.startsWith("STATS")).join("\n")}\nstderr:\n${stderr}`));
      }, waitMs);
      if (!check()) watchers.add(watch);
    });
  return { child, lines, waitFor, exited };
};

/**
 * Starts `size` ranks of `fixture` (argv from `argsOf(rank)`) and gives each the addresses the
 * others bound, or what `addressesOf` makes of them for that rank (e.g. a proxy in front of one).
 */
export const startRanks = async (
  fixture: string,
  size: number,
  argsOf: (rank: number) => readonly string[],
  waitMs: number,
  addressesOf: (rank: number, bound: readonly string[]) => readonly string[] | Promise<readonly string[]> = (_, bound) => bound,
): Promise<Rank[]> => {
  const ranks = Array.from({ length: size }, (_, r) => startRank(fixture, r, argsOf(r), waitMs));
  const addresses = await Promise.all(ranks.map(async (r) => (await r.waitFor(/^LISTENING /)).slice("LISTENING ".length)));
  for (const [i, r] of ranks.entries()) r.child.stdin!.write(`${JSON.stringify(await addressesOf(i, addresses))}\n`);
  return ranks;
};

/** The task name TcpCollective gives `rank` by default. */
export const task = (rank: number): string => `/job:worker/replica:0/task:${rank}`;
