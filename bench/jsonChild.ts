/**
 * Child processes that report JSON lines (`{"event": ..., ...}`) on stdout, for the benchmarks
 * that run several processes (`cluster-control`, `cluster`). A `failed` event, or the child's exit,
 * rejects any wait; every wait has a deadline.
 */

import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { repoRoot } from "../test/util/cliChild.js";

/** One JSON line of a child. */
export interface ChildEvent {
  readonly event: string;
  readonly t?: number;
  readonly [field: string]: unknown;
}

/** A child and a bounded wait for its next event of a kind. */
export interface JsonChild {
  readonly process: ChildProcess;
  next(event: string, ms: number): Promise<ChildEvent>;
  /** Writes one line to its stdin. */
  send(line: string): void;
}

/** Starts `node --import tsx <script> '<json args>'` in the repository. */
export const spawnJsonChild = (script: string, args: Record<string, unknown>): JsonChild => {
  const child = spawn(process.execPath, ["--import", "tsx", script, JSON.stringify(args)], {
    cwd: repoRoot,
    stdio: ["pipe", "pipe", "pipe"],
  });
  const events: ChildEvent[] = [];
  const wakers = new Set<() => void>();
  let stderr = "";
  child.stderr?.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  child.stdin?.on("error", () => undefined); // a child that died is reported by `next`
  createInterface({ input: child.stdout! }).on("line", (line) => {
    try {
      events.push(JSON.parse(line) as ChildEvent);
    } catch {
      stderr += `${line}\n`;
    }
    for (const wake of [...wakers]) wake();
  });
  child.once("exit", () => {
    for (const wake of [...wakers]) wake();
  });
  const next = (event: string, ms: number): Promise<ChildEvent> =>
    new Promise((resolve, reject) => {
      const check = (): void => {
        const i = events.findIndex((e) => e.event === event || e.event === "failed");
        if (i >= 0) {
          const [e] = events.splice(0, i + 1).slice(-1) as [ChildEvent];
          done();
          if (e.event === "failed") reject(new Error(`${script} ${JSON.stringify(args)} failed: ${String(e.name)}: ${String(e.message)}\n${stderr}`));
          else resolve(e);
        } else if (child.exitCode !== null || child.signalCode !== null) {
          done();
          reject(new Error(`${script} ${JSON.stringify(args)} exited before "${event}"; stderr:\n${stderr}`));
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`no "${event}" from ${script} ${JSON.stringify(args)} within ${ms} ms; stderr:\n${stderr}`));
      }, ms);
      const done = (): void => {
        clearTimeout(timer);
        wakers.delete(check);
      };
      wakers.add(check);
      check();
    });
  return { process: child, next, send: (line) => void child.stdin?.write(`${line}\n`) };
};

/** SIGKILLs every child still running and waits for their exits. */
export const killAll = (children: readonly JsonChild[]): Promise<unknown> =>
  Promise.all(
    children.map(
      ({ process: p }) =>
        new Promise<void>((resolve) => {
          if (p.exitCode !== null || p.signalCode !== null) return resolve();
          p.once("exit", () => resolve());
          p.kill("SIGKILL");
        }),
    ),
  );
