/**
 * Coordination test clusters of real processes (test/fixtures/coordination/task.ts): start a
 * task, read its JSON-line events with bounded waits, and kill every child after each test.
 */

import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { afterEach } from "vitest";
import { taskName } from "../../../src/cluster/coordination/index.js";
import { repoRoot } from "../../util/cliChild.js";

// Generous for a loaded 2-core machine, where a 1 s heartbeat interval leaves too little margin
// for scheduling and a live task could be declared failed.
export const heartbeatTimeoutMs = 4_000;
export const failBound = 3 * (heartbeatTimeoutMs + 1_000);
export const startBound = 60_000; // process start with tsx on a loaded 2-core machine
export const chief = taskName("chief", 0);
export const worker0 = taskName("worker", 0);
export const worker1 = taskName("worker", 1);

export interface TaskEvent {
  readonly task: string;
  readonly event: string;
  readonly [field: string]: unknown;
}

/** A child task: its process, what it printed, and a bounded wait for an event. */
export interface Task {
  readonly process: ChildProcess;
  readonly events: TaskEvent[];
  /** The next of these events (after the last one returned); rejects after `ms` or if the child exits first. */
  next(event: string | readonly string[], ms: number): Promise<TaskEvent>;
  readonly exited: Promise<number | null>;
}

const children: ChildProcess[] = [];

afterEach(async () => {
  const running = children.splice(0);
  await Promise.all(
    running.map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once("exit", () => resolve());
          child.kill("SIGCONT");
          child.kill("SIGKILL");
        }),
    ),
  );
});

/** Starts a task; `wrapper` runs it through a command (e.g. `ip netns exec NS`) that execs Node. */
export const start = (args: Record<string, unknown>, wrapper: readonly string[] = []): Task => {
  const command = [...wrapper, process.execPath, "--import", "tsx", "test/fixtures/coordination/task.ts"];
  const child = spawn(
    command[0] as string,
    [...command.slice(1), JSON.stringify({ heartbeatTimeoutMs, ...args })],
    { cwd: repoRoot, stdio: ["ignore", "pipe", "pipe"] },
  );
  children.push(child);
  const events: TaskEvent[] = [];
  let stderr = "";
  const waiters = new Set<() => void>();
  child.stderr?.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  createInterface({ input: child.stdout! }).on("line", (line) => {
    try {
      events.push(JSON.parse(line) as TaskEvent);
    } catch {
      stderr += `${line}\n`;
    }
    for (const wake of [...waiters]) wake();
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  void exited.then(() => {
    for (const wake of [...waiters]) wake();
  });
  let seen = 0;
  const next = (event: string | readonly string[], ms: number): Promise<TaskEvent> =>
    new Promise((resolve, reject) => {
      const wanted = typeof event === "string" ? [event] : event;
      const check = (): void => {
        const i = events.findIndex((e, j) => j >= seen && wanted.includes(e.event));
        if (i >= 0) {
          seen = i + 1;
          done();
          resolve(events[i] as TaskEvent);
        } else if (child.exitCode !== null || child.signalCode !== null) {
          done();
          reject(new Error(`${JSON.stringify(args)} exited before "${String(event)}"; printed ${JSON.stringify(events)}; stderr:\n${stderr}`));
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`test deadline: no "${String(event)}" from ${JSON.stringify(args)} within ${ms} ms; printed ${JSON.stringify(events)}; stderr:\n${stderr}`));
      }, ms);
      const done = (): void => {
        clearTimeout(timer);
        waiters.delete(check);
      };
      waiters.add(check);
      check();
    });
  return { process: child, events, next, exited };
};

/** A chief and two workers with these scenarios (and arguments: `all` for every task), all connected. */
export const startCluster = async (
  scenarios: { chief: string; worker0: string; worker1: string },
  extra: { all?: Record<string, unknown>; chief?: Record<string, unknown>; worker0?: Record<string, unknown>; worker1?: Record<string, unknown> } = {},
): Promise<[Task, Task, Task]> => {
  const c = start({ role: "chief", index: 0, scenario: scenarios.chief, ...extra.all, ...extra.chief });
  const { target } = await c.next("serving", startBound);
  const w0 = start({ role: "worker", index: 0, target, scenario: scenarios.worker0, ...extra.all, ...extra.worker0 });
  const w1 = start({ role: "worker", index: 1, target, scenario: scenarios.worker1, ...extra.all, ...extra.worker1 });
  await Promise.all([c, w0, w1].map((t) => t.next("connected", startBound)));
  return [c, w0, w1];
};
