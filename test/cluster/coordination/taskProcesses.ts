/**
 * Coordination test clusters of real processes (test/fixtures/coordination/task.ts): start a
 * task, read its JSON-line events with bounded waits, and kill every child after each test.
 */

import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { afterEach, expect } from "vitest";
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
  // Judged on "close", once stdout is drained: a line printed just before exiting is never missed.
  let closed = false;
  child.once("close", () => {
    closed = true;
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
        } else if (closed) {
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

/**
 * Where a test cluster coordinates: the embedded service that its chief hosts, or a real etcd
 * under a key prefix of its own (one etcd serves every test of a file; see etcdHarness.ts).
 */
export type Backend =
  | { readonly kind: "embedded" }
  | { readonly kind: "etcd"; readonly etcdHosts: readonly string[]; readonly prefix: string };

/**
 * Starts a chief on `backend`; resolves with it and the arguments that make a task a member of
 * its cluster (embedded: the chief's target; etcd: the endpoints and prefix).
 */
export const startChief = async (backend: Backend, args: Record<string, unknown>): Promise<[Task, Record<string, unknown>]> => {
  if (backend.kind === "etcd") {
    const member = { etcdHosts: backend.etcdHosts, prefix: backend.prefix };
    return [start({ role: "chief", index: 0, ...member, ...args }), member];
  }
  const c = start({ role: "chief", index: 0, ...args });
  return [c, { target: (await c.next("serving", startBound)).target }];
};

/** A chief and two workers on `backend` with these scenarios (and arguments: `all` for every task), all connected. */
export const startCluster = async (
  backend: Backend,
  scenarios: { chief: string; worker0: string; worker1: string },
  extra: { all?: Record<string, unknown>; chief?: Record<string, unknown>; worker0?: Record<string, unknown>; worker1?: Record<string, unknown> } = {},
): Promise<[Task, Task, Task]> => {
  const [c, member] = await startChief(backend, { scenario: scenarios.chief, ...extra.all, ...extra.chief });
  const w0 = start({ role: "worker", index: 0, ...member, scenario: scenarios.worker0, ...extra.all, ...extra.worker0 });
  const w1 = start({ role: "worker", index: 1, ...member, scenario: scenarios.worker1, ...extra.all, ...extra.worker1 });
  await Promise.all([c, w0, w1].map((t) => t.next("connected", startBound)));
  return [c, w0, w1];
};

/** Every task of `others` raises UnavailableError naming `task` as declared failed (within {@link failBound}). */
export const expectDeclaredFailed = async (others: readonly Task[], task: string): Promise<void> => {
  for (const t of others) {
    const e = await t.next("error", failBound);
    expect(e.name).toBe("UnavailableError");
    expect(e.message).toContain(task);
    expect(e.message).toContain("declared failed");
  }
};
