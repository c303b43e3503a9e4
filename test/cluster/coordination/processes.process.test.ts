/**
 * The coordination service across real processes on loopback, on both backends: embedded (a
 * chief process hosts the service in its Server, two worker processes reach it over gRPC) and
 * etcd (every task is a client of one real etcd, started once for this file; each test has a key
 * prefix of its own). Faults are real signals. Each test asserts the outcome and the named task,
 * with deadlines of at least 3× the bound.
 *
 * Where the backends differ (see docs/distributed.md), the test says so:
 * - a chief restart: embedded, the service dies with the chief and the workers lose it (an
 *   error naming the chief's address); etcd, the chief's liveness lease expires and the workers
 *   learn that the chief was declared failed, naming it;
 * - heartbeats on the main thread (the control of the heartbeat-thread test) exist on the
 *   embedded backend only: etcd heartbeats always run on a thread.
 */

import { describe, expect, it } from "vitest";
import { etcdBinary, etcdForFile } from "./etcdHarness.js";
import {
  type Backend,
  chief,
  expectDeclaredFailed,
  failBound,
  heartbeatTimeoutMs,
  start,
  startBound,
  startChief,
  startCluster,
  worker0,
  worker1,
} from "./taskProcesses.js";

const etcd = etcdForFile();
let n = 0;

const backends: readonly { readonly name: string; readonly skip: boolean; readonly backend: () => Backend }[] = [
  { name: "embedded", skip: false, backend: () => ({ kind: "embedded" }) },
  {
    name: "etcd",
    skip: etcdBinary === undefined,
    backend: () => ({ kind: "etcd", etcdHosts: [etcd().endpoint], prefix: `processes-${process.pid}-${n++}/` }),
  },
];

for (const { name, skip, backend } of backends) {
  // Beyond the tests' own deadlines (process starts of up to a minute each on a loaded machine),
  // so that a late task fails with what it printed, not with vitest's bare timeout.
  describe.skipIf(skip)(`the coordination service across processes (${name} backend)`, { timeout: 170_000 }, () => {

    it("SIGKILL of a worker: every other task raises UnavailableError naming it", async () => {
      const [c, w0, w1] = await startCluster(backend(), { chief: "block", worker0: "block", worker1: "block" });
      w1.process.kill("SIGKILL");
      await expectDeclaredFailed([c, w0], worker1);
    });

    it("SIGSTOP of a worker: the same; after SIGCONT it is told it was declared failed", async () => {
      const [c, w0, w1] = await startCluster(backend(), { chief: "block", worker0: "block", worker1: "block" });
      w1.process.kill("SIGSTOP");
      await expectDeclaredFailed([c, w0], worker1);
      w1.process.kill("SIGCONT");
      const told = await w1.next("error", failBound);
      expect(told.name).toBe("UnavailableError");
      expect(told.message).toContain(worker1);
      expect(told.message).toContain("declared failed");
    });

    const slow = { steps: 3 };

    it("a worker whose synchronous steps take 2× the heartbeat interval is never declared failed", async () => {
      const tasks = await startCluster(backend(), { chief: "barrier", worker0: "barrier", worker1: "steps" }, { all: slow });
      for (const t of tasks) {
        const outcome = await t.next(["done", "error"], 3 * slow.steps * heartbeatTimeoutMs + startBound);
        expect(outcome).toMatchObject({ event: "done" });
      }
    });

    // The embedded service runs on the chief's main loop: while a step blocks it, the workers'
    // heartbeats wait unread in its sockets, and the chief's own in its port.
    it("the chief's synchronous steps take 2× the heartbeat interval: nobody is declared failed", async () => {
      const tasks = await startCluster(backend(), { chief: "steps", worker0: "barrier", worker1: "barrier" }, { all: slow });
      for (const t of tasks) {
        const outcome = await t.next(["done", "error"], 3 * slow.steps * heartbeatTimeoutMs + startBound);
        expect(outcome).toMatchObject({ event: "done" });
      }
    });

    // etcd heartbeats run on a thread only (the client rejects `heartbeats: "inline"`).
    it.skipIf(name !== "embedded")(
      "the control: the same steps (3 intervals each) with heartbeats on the main thread get the task declared failed",
      async () => {
        const [c, w0] = await startCluster(
          backend(),
          { chief: "barrier", worker0: "barrier", worker1: "steps" },
          { all: slow, worker1: { heartbeats: "inline", stepIntervals: 3 } },
        );
        for (const t of [c, w0]) {
          const e = await t.next("error", 3 * slow.steps * heartbeatTimeoutMs + startBound);
          expect(e.name).toBe("UnavailableError");
          expect(e.message).toContain(worker1);
        }
      },
    );

    it("reportErrorToCluster reaches every task, naming the reporter", async () => {
      const [c, w0, w1] = await startCluster(backend(), { chief: "block", worker0: "report", worker1: "block" });
      for (const t of [c, w0, w1]) {
        const e = await t.next("error", failBound);
        expect(e.name).toBe("InvalidArgumentError");
        expect(e.message).toContain("loss is NaN");
        expect(e.message).toContain(`reported by task ${worker0}`);
      }
    });

    it("a barrier timeout names the stragglers", async () => {
      const barrier = { barrierTimeoutMs: 1_500 };
      const [c, w0] = await startCluster(backend(), { chief: "barrier", worker0: "barrier", worker1: "block" }, { chief: barrier, worker0: barrier });
      for (const t of [c, w0]) {
        const e = await t.next("error", 3 * (barrier.barrierTimeoutMs + 1_000));
        expect(e.name).toBe("DeadlineExceededError");
        expect(e.message).toContain(`stragglers: ${worker1}`);
        expect(e.message).not.toContain(`stragglers: ${chief}`);
      }
    });

    it("a worker restarted as a new process (a new incarnation) is told so with AbortedError; the others learn it is gone", async () => {
      const b = backend();
      const [c, member] = await startChief(b, { scenario: "block" });
      const w0 = start({ role: "worker", index: 0, ...member, scenario: "block" });
      const w1 = start({ role: "worker", index: 1, ...member, scenario: "block" });
      await Promise.all([c, w0, w1].map((t) => t.next("connected", startBound)));
      w1.process.kill("SIGKILL");
      await w1.exited;
      const again = start({ role: "worker", index: 1, ...member, scenario: "block" });
      const told = await again.next("error", startBound);
      expect(told.name).toBe("AbortedError");
      expect(told.message).toContain(`task ${worker1} restarted`);
      for (const t of [c, w0]) {
        const e = await t.next("error", failBound);
        expect(e.name).toBe("UnavailableError");
        expect(e.message).toContain(worker1);
      }
    });

    it("a chief restart drops the launch's keys: the workers get UnavailableError, then register in the next generation", async () => {
      const b = backend();
      const [c1, member] = await startChief(b, { scenario: "block", launch: 1 });
      const workers = [0, 1].map((index) => start({ role: "worker", index, ...member, scenario: "follow" }));
      for (const w of workers) {
        expect(await w.next("value", startBound)).toMatchObject({ launch: "1", stale: "1" });
      }
      c1.process.kill("SIGKILL");
      await c1.exited;
      for (const w of workers) {
        const e = await w.next("error", failBound);
        expect(e.name).toBe("UnavailableError");
        // embedded: the service died with the chief, the workers name the address they lost;
        // etcd: the state outlived the chief, whose expired lease gets it declared failed.
        expect(e.message).toContain(b.kind === "etcd" ? `${chief} declared failed` : new URL(String(member.target).replace(/^grpc:/, "http:")).host);
      }
      // embedded: the new chief listens where the old one did. The new service remembers nothing,
      // but the workers report the generation they saw, so the counter goes on; etcd keeps the
      // counter itself.
      const port = b.kind === "embedded" ? { port: Number(new URL(String(member.target).replace(/^grpc:/, "http:")).port) } : {};
      const [c2] = await startChief(b, { scenario: "block", launch: 2, ...port });
      expect((await c2.next("connected", startBound)).generation).toBe(2);
      for (const w of workers) {
        expect((await w.next("connected", startBound)).generation).toBe(2);
        // The first launch's one-shot key is gone: with the chief (embedded), or with its
        // generation, which the new chief deleted (etcd).
        expect(await w.next("value", startBound)).toMatchObject({ launch: "2", stale: null });
      }
    });
  });
}

describe("the embedded coordination service across processes", () => {
  it("a wrong token: the worker gets UnauthenticatedError and exits 2", async () => {
    const c = start({ role: "chief", index: 0, scenario: "block", token: "the-cluster-token" });
    const { target } = await c.next("serving", startBound);
    const w0 = start({ role: "worker", index: 0, target, scenario: "block", token: "a-wrong-token" });
    const e = await w0.next("error", startBound);
    expect(e.name).toBe("UnauthenticatedError");
    expect(await w0.exited).toBe(2);
  });
});
