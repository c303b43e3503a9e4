/**
 * The embedded coordination service across real processes on loopback: a chief process hosts it
 * in its Server, two worker processes reach it over gRPC. Faults are real signals. Each test
 * asserts the outcome and the named task, with deadlines of at least 3× the bound.
 */

import { describe, expect, it } from "vitest";
import { chief, failBound, heartbeatTimeoutMs, start, startBound, startCluster, worker0, worker1 } from "./taskProcesses.js";

describe("embedded coordination service across processes", () => {
  it("SIGKILL of a worker: every other task raises UnavailableError naming it", async () => {
    const [c, w0, w1] = await startCluster({ chief: "block", worker0: "block", worker1: "block" });
    w1.process.kill("SIGKILL");
    for (const t of [c, w0]) {
      const e = await t.next("error", failBound);
      expect(e.name).toBe("UnavailableError");
      expect(e.message).toContain(worker1);
    }
  });

  it("SIGSTOP of a worker: the same; after SIGCONT it is told it was declared failed", async () => {
    const [c, w0, w1] = await startCluster({ chief: "block", worker0: "block", worker1: "block" });
    w1.process.kill("SIGSTOP");
    for (const t of [c, w0]) {
      const e = await t.next("error", failBound);
      expect(e.name).toBe("UnavailableError");
      expect(e.message).toContain(worker1);
    }
    w1.process.kill("SIGCONT");
    const told = await w1.next("error", failBound);
    expect(told.name).toBe("UnavailableError");
    expect(told.message).toContain(worker1);
    expect(told.message).toContain("declared failed");
  });

  const slow = { steps: 3 };

  it("a task whose synchronous steps take 2× the heartbeat interval is never declared failed", async () => {
    const tasks = await startCluster({ chief: "barrier", worker0: "barrier", worker1: "steps" }, { all: slow });
    for (const t of tasks) {
      const outcome = await t.next(["done", "error"], 3 * slow.steps * heartbeatTimeoutMs + startBound);
      expect(outcome).toMatchObject({ event: "done" });
    }
  });

  it("the control: the same steps (3 intervals each) with heartbeats on the main thread get the task declared failed", async () => {
    const [c, w0] = await startCluster(
      { chief: "barrier", worker0: "barrier", worker1: "steps" },
      { all: slow, worker1: { heartbeats: "inline", stepIntervals: 3 } },
    );
    for (const t of [c, w0]) {
      const e = await t.next("error", 3 * slow.steps * heartbeatTimeoutMs + startBound);
      expect(e.name).toBe("UnavailableError");
      expect(e.message).toContain(worker1);
    }
  });

  it("a wrong token: the worker gets UnauthenticatedError and exits 2", async () => {
    const c = start({ role: "chief", index: 0, scenario: "block", token: "the-cluster-token" });
    const { target } = await c.next("serving", startBound);
    const w0 = start({ role: "worker", index: 0, target, scenario: "block", token: "a-wrong-token" });
    const e = await w0.next("error", startBound);
    expect(e.name).toBe("UnauthenticatedError");
    expect(await w0.exited).toBe(2);
  });

  it("reportErrorToCluster reaches every task, naming the reporter", async () => {
    const [c, w0, w1] = await startCluster({ chief: "block", worker0: "report", worker1: "block" });
    for (const t of [c, w0, w1]) {
      const e = await t.next("error", failBound);
      expect(e.name).toBe("InvalidArgumentError");
      expect(e.message).toContain("loss is NaN");
      expect(e.message).toContain(`reported by task ${worker0}`);
    }
  });

  it("a barrier timeout names the stragglers", async () => {
    const barrier = { barrierTimeoutMs: 1_500 };
    const [c, w0] = await startCluster({ chief: "barrier", worker0: "barrier", worker1: "block" }, { chief: barrier, worker0: barrier });
    for (const t of [c, w0]) {
      const e = await t.next("error", 3 * (barrier.barrierTimeoutMs + 1_000));
      expect(e.name).toBe("DeadlineExceededError");
      expect(e.message).toContain(`stragglers: ${worker1}`);
      expect(e.message).not.toContain(`stragglers: ${chief}`);
    }
  });

  it("a worker restarted as a new process (a new incarnation) is told so with AbortedError; the others learn it is gone", async () => {
    const [c, w0, w1] = await startCluster({ chief: "block", worker0: "block", worker1: "block" });
    w1.process.kill("SIGKILL");
    await w1.exited;
    const target = String(c.events.find((e) => e.event === "serving")?.target);
    const again = start({ role: "worker", index: 1, target, scenario: "block" });
    const told = await again.next("error", startBound);
    expect(told.name).toBe("AbortedError");
    expect(told.message).toContain(`task ${worker1} restarted`);
    for (const t of [c, w0]) {
      const e = await t.next("error", failBound);
      expect(e.name).toBe("UnavailableError");
      expect(e.message).toContain(worker1);
    }
  });

  it("a chief restart loses every key: the workers get UnavailableError, then register with the new service in the next generation", async () => {
    const c1 = start({ role: "chief", index: 0, scenario: "block", launch: 1 });
    const target = String((await c1.next("serving", startBound)).target);
    const workers = [0, 1].map((index) => start({ role: "worker", index, target, scenario: "follow" }));
    for (const w of workers) {
      expect(await w.next("value", startBound)).toMatchObject({ launch: "1", stale: "1" });
    }
    c1.process.kill("SIGKILL");
    await c1.exited;
    for (const w of workers) {
      const e = await w.next("error", failBound);
      expect(e.name).toBe("UnavailableError");
    }
    const port = Number(new URL(target.replace(/^grpc:/, "http:")).port);
    const c2 = start({ role: "chief", index: 0, scenario: "block", launch: 2, port });
    // The new chief process remembers nothing, but the workers report the generation they saw:
    // the counter goes on.
    const { generation } = await c2.next("connected", startBound);
    expect(generation).toBe(2);
    for (const w of workers) {
      expect((await w.next("connected", startBound)).generation).toBe(2);
      // The first launch's one-shot key is gone with the chief.
      expect(await w.next("value", startBound)).toMatchObject({ launch: "2", stale: null });
    }
  });
});
