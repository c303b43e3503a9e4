/**
 * The grpc:// session target with real processes on loopback: a chief and 2 workers, each a
 * child running test/fixtures/cluster/modelTask.ts with its own TF_CONFIG. Workers started
 * before the chief wait for it, then start from its values bit for bit (sha-256 of every
 * variable's bytes); a worker with the wrong cluster token fails in one line with
 * UnauthenticatedError and exits 2. Outcomes only, never timings: every wait has a deadline
 * far above what it needs, and every child is killed after each test.
 */
import { spawn, type ChildProcess } from "node:child_process";

import { afterEach, describe, expect, it } from "vitest";

import { freePorts, repoRoot } from "../util/cliChild.js";

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

const FIXTURE = "test/fixtures/cluster/modelTask.ts";
/** Loading tfjs and training a few steps takes seconds; this is many times that. */
const DEADLINE_MS = 45_000;

interface Line {
  readonly event: string;
  readonly task?: string;
  readonly step?: number;
  readonly digest?: string;
  readonly name?: string;
  readonly message?: string;
}

interface Task {
  readonly child: ChildProcess;
  readonly lines: Line[];
  /** Resolves with the first line `match` accepts; rejects at the deadline or when the child exits without one. */
  next(match: (l: Line) => boolean, ms?: number): Promise<Line>;
  readonly exited: Promise<number | null>;
  output(): string;
}

const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
});

const start = (cluster: object, type: string, index: number, token: string): Task => {
  const env = { ...process.env, TF_CONFIG: JSON.stringify({ cluster, task: { type, index } }), MONITORED_SESSION_CLUSTER_TOKEN: token };
  const child = spawn(process.execPath, ["--import", "tsx", FIXTURE], { cwd: repoRoot, env, stdio: ["ignore", "pipe", "pipe"] });
  children.push(child);
  const lines: Line[] = [];
  let out = "";
  let buffered = "";
  const waiters = new Set<() => void>();
  child.stdout.setEncoding("utf8").on("data", (d: string) => {
    out += d;
    buffered += d;
    const parts = buffered.split("\n");
    buffered = parts.pop() ?? "";
    for (const p of parts) if (p.startsWith("{")) lines.push(JSON.parse(p) as Line);
    for (const w of [...waiters]) w();
  });
  child.stderr.setEncoding("utf8").on("data", (d: string) => (out += d));
  const exited = new Promise<number | null>((ok) => child.on("close", (code) => {
    ok(code);
    for (const w of [...waiters]) w();
  }));
  const next = (match: (l: Line) => boolean, ms = DEADLINE_MS): Promise<Line> =>
    new Promise((ok, fail) => {
      const timer = setTimeout(() => {
        waiters.delete(check);
        fail(new Error(`${type}:${index}: no matching line within ${ms} ms; output:\n${out}`));
      }, ms);
      const check = (): void => {
        const found = lines.find(match);
        if (found !== undefined || child.exitCode !== null || child.signalCode !== null) {
          clearTimeout(timer);
          waiters.delete(check);
          if (found !== undefined) ok(found);
          else fail(new Error(`${type}:${index} exited (${String(child.exitCode ?? child.signalCode)}) without a matching line; output:\n${out}`));
        }
      };
      waiters.add(check);
      check();
    });
  return { child, lines, next, exited, output: () => out };
};

const withDeadline = <T>(p: Promise<T>, what: string, ms = DEADLINE_MS): Promise<T> =>
  Promise.race([p, new Promise<never>((_, fail) => setTimeout(() => fail(new Error(`${what}: not within ${ms} ms`)), ms).unref())]);

const event = (name: string) => (l: Line) => l.event === name;

// ---------------------------------------------------------------------------------------------
// tests
// ---------------------------------------------------------------------------------------------

describe("grpc:// sessions across real processes", () => {
  it("workers started before the chief wait for it, then start from its values bit for bit, then train their own replicas", async () => {
    const [p0, p1, p2] = await freePorts(3);
    const cluster = { chief: [`127.0.0.1:${p0}`], worker: [`127.0.0.1:${p1}`, `127.0.0.1:${p2}`] };
    const workers = [start(cluster, "worker", 0, "tok"), start(cluster, "worker", 1, "tok")];
    // Both ask the chief, find nobody, and wait.
    for (const w of workers) expect((await w.next(event("waiting"))).message).toContain(`the chief at grpc://127.0.0.1:${p0}: not reachable`);
    const chief = start(cluster, "chief", 0, "tok");
    const chiefStarted = await chief.next(event("started"));
    expect(chiefStarted.step).toBe(4);
    for (const w of workers) {
      const started = await w.next(event("started"));
      expect(started.step).toBe(4);
      expect(started.digest).toBe(chiefStarted.digest);
      expect((await w.next(event("trained"))).step).toBe(6);
      expect(await withDeadline(w.exited, "worker exit")).toBe(0);
    }
    expect(chief.lines.filter(event("error"))).toEqual([]);
  }, 4 * DEADLINE_MS);

  it("a chief started first: a worker starting later gets the same values without waiting", async () => {
    const [p0, p1] = await freePorts(2);
    const cluster = { chief: [`127.0.0.1:${p0}`], worker: [`127.0.0.1:${p1}`] };
    const chief = start(cluster, "chief", 0, "tok");
    const chiefStarted = await chief.next(event("started"));
    const worker = start(cluster, "worker", 0, "tok");
    expect((await worker.next(event("started"))).digest).toBe(chiefStarted.digest);
    expect(await withDeadline(worker.exited, "worker exit")).toBe(0);
    expect(worker.lines.filter(event("waiting"))).toEqual([]);
  }, 3 * DEADLINE_MS);

  it("a worker with the wrong cluster token fails in one line with UnauthenticatedError and exits 2", async () => {
    const [p0, p1] = await freePorts(2);
    const cluster = { chief: [`127.0.0.1:${p0}`], worker: [`127.0.0.1:${p1}`] };
    const chief = start(cluster, "chief", 0, "right");
    await chief.next(event("started"));
    const worker = start(cluster, "worker", 0, "wrong");
    const error = await worker.next(event("error"));
    expect(error.name).toBe("UnauthenticatedError");
    expect(error.message).toMatch(new RegExp(`^grpc://127\\.0\\.0\\.1:${p0}: .*wrong cluster token`));
    expect(await withDeadline(worker.exited, "worker exit")).toBe(2);
    expect(worker.lines.filter(event("error"))).toHaveLength(1);
  }, 3 * DEADLINE_MS);
});
