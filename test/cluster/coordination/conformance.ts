/**
 * The conformance suite every coordination backend passes. Real time, loopback only, short
 * timeouts; each test asserts the outcome and the named task, never a duration, and every wait
 * has a deadline of at least 3× the bound it checks. Real heartbeats on real threads: the files
 * that run it are `*.conformance.realtime.test.ts` (or `.process.test.ts` for etcd), which the
 * integration project runs.
 */

import { afterAll, describe, expect, it } from "vitest";
import {
  type CoordinationClient,
  type CoordinationTimeouts,
  newIncarnation,
  taskName,
} from "../../../src/cluster/coordination/index.js";
import {
  AbortedError,
  AlreadyExistsError,
  CancelledError,
  DeadlineExceededError,
  FailedPreconditionError,
  ErrorCode,
  InvalidArgumentError,
  ModelMismatchError,
  type OpError,
  ResourceExhaustedError,
  UnavailableError,
} from "../../../src/errors.js";

/** Options of one client of a conformance cluster. */
export interface ClientSpec {
  readonly task: string;
  readonly isChief: boolean;
  readonly incarnation?: string;
  readonly timeouts?: Partial<CoordinationTimeouts>;
  readonly heartbeats?: "thread" | "inline";
}

/** A fresh cluster (own state) of a backend. */
export interface ConformanceCluster {
  client(spec: ClientSpec): CoordinationClient;
}

/** A backend under test. */
export interface ConformanceBackend {
  readonly heartbeatTimeoutMs: number;
  /** A new, empty cluster with these tasks. */
  cluster(tasks: readonly string[]): Promise<ConformanceCluster>;
  /** Releases what `cluster` started. */
  dispose(): Promise<void>;
}

export const chief = taskName("chief", 0);
export const worker1 = taskName("worker", 0);
export const worker2 = taskName("worker", 1);
export const tasks = [chief, worker1, worker2] as const;

/** `promise`, or a failed test naming `what` after `ms`. */
export const within = <T>(promise: Promise<T>, ms: number, what: string): Promise<T> => {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`test deadline: ${what} did not settle within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
};

/** The rejection of `promise` (fails if it resolves). */
export const rejection = async (promise: Promise<unknown>): Promise<Error> => {
  try {
    await promise;
  } catch (e) {
    return e as Error;
  }
  throw new Error("expected a rejection, got a value");
};

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Repeats `call` every 100 ms until it rejects; its error, or a failed test after `ms`. */
export const untilRejected = (call: () => Promise<unknown>, ms: number, what: string): Promise<Error> =>
  within(
    (async () => {
      for (;;) {
        const e = await rejection(call()).catch(() => undefined);
        if (e !== undefined) return e;
        await sleep(100);
      }
    })(),
    ms,
    what,
  );

/** Connects the three tasks of a fresh cluster (chief last, so the workers wait for it). */
export const connectAll = async (
  cluster: ConformanceCluster,
  specs: Partial<Record<string, Partial<ClientSpec>>> = {},
): Promise<CoordinationClient[]> => {
  const clients = tasks.map((task) => cluster.client({ task, isChief: task === chief, ...specs[task] }));
  const [c, w1, w2] = clients as [CoordinationClient, CoordinationClient, CoordinationClient];
  const workers = Promise.all([w1.connect(), w2.connect()]);
  await sleep(50);
  await within(Promise.all([c.connect(), workers]), 20_000, "registration of 3 tasks");
  return clients;
};

const closeAll = (clients: CoordinationClient[]): Promise<unknown> => Promise.all(clients.map((c) => c.close()));

/** Registers the conformance tests for `backend`. */
export const describeConformance = (name: string, setup: () => ConformanceBackend, skip = false): void => {
  describe.skipIf(skip)(`coordination conformance: ${name}`, () => {
    let current: ConformanceBackend | undefined;
    const backend = (): ConformanceBackend => (current ??= setup());
    afterAll(async () => {
      await current?.dispose();
    });
    const failBound = (): number => 3 * (backend().heartbeatTimeoutMs + 1000);

    it("insert is insert-if-absent; tryGet, delete (recursive) and listDir", async () => {
      const clients = await connectAll(await backend().cluster(tasks));
      const [c, w1] = clients as [CoordinationClient, CoordinationClient];
      try {
        expect(c.generation).toBe(w1.generation);
        await c.insert("config/a", "1");
        await c.insert("config/b/c", "2");
        await c.insert("other", "3");
        const dup = await rejection(w1.insert("config/a", "9"));
        expect(dup).toBeInstanceOf(AlreadyExistsError);
        expect(dup.message).toContain("config/a");
        expect(await w1.tryGet("config/a")).toBe("1");
        expect(await w1.tryGet("missing")).toBeUndefined();
        expect(await w1.listDir("config")).toEqual([
          { key: "config/a", value: "1" },
          { key: "config/b/c", value: "2" },
        ]);
        await w1.delete("config");
        expect(await c.listDir("config")).toEqual([]);
        expect(await c.tryGet("other")).toBe("3");
        await expect(c.insert("/bad", "x")).rejects.toBeInstanceOf(InvalidArgumentError);
      } finally {
        await closeAll(clients);
      }
    });

    it("get blocks until another task inserts the key, and fails with DeadlineExceededError naming the key", async () => {
      const clients = await connectAll(await backend().cluster(tasks));
      const [c, w1] = clients as [CoordinationClient, CoordinationClient];
      try {
        const waiting = w1.get("RUN_TO_CHECKPOINT", { timeoutMs: 30_000 });
        await sleep(100);
        await c.insert("RUN_TO_CHECKPOINT", "7");
        expect(await within(waiting, 10_000, "blocking get")).toBe("7");
        const late = await within(rejection(w1.get("never", { timeoutMs: 300 })), 10_000, "get timeout");
        expect(late).toBeInstanceOf(DeadlineExceededError);
        expect(late.message).toContain("never");
      } finally {
        await closeAll(clients);
      }
    });

    it("a barrier passes when every task arrives; a straggler fails it for everyone, named", async () => {
      const clients = await connectAll(await backend().cluster(tasks));
      const [c, w1, w2] = clients as [CoordinationClient, CoordinationClient, CoordinationClient];
      try {
        await within(Promise.all(clients.map((x) => x.barrier("init", { timeoutMs: 20_000 }))), 30_000, "barrier");
        const outcomes = await within(
          Promise.all([rejection(c.barrier("save", { timeoutMs: 500 })), rejection(w1.barrier("save", { timeoutMs: 500 }))]),
          20_000,
          "barrier timeout",
        );
        for (const e of outcomes) {
          expect(e).toBeInstanceOf(DeadlineExceededError);
          expect(e.message).toContain(`stragglers: ${worker2}`);
        }
        // One-shot: the straggler arriving late gets the recorded outcome.
        await expect(w2.barrier("save", { timeoutMs: 500 })).rejects.toBeInstanceOf(DeadlineExceededError);
        // Arrivals naming different task sets fail the barrier for both.
        const mismatch = await within(
          Promise.all([
            rejection(c.barrier("mixed", { tasks: [chief, worker1], timeoutMs: 20_000 })),
            rejection(w1.barrier("mixed", { timeoutMs: 20_000 })),
          ]),
          30_000,
          "mismatched barrier",
        );
        for (const e of mismatch) expect(e).toBeInstanceOf(InvalidArgumentError);
        // A barrier over a subset of tasks.
        await within(
          Promise.all([c.barrier("pair", { tasks: [chief, worker1] }), w1.barrier("pair", { tasks: [chief, worker1] })]),
          20_000,
          "subset barrier",
        );
        await expect(w2.barrier("outsider", { tasks: [chief, worker1] })).rejects.toBeInstanceOf(InvalidArgumentError);
      } finally {
        await closeAll(clients);
      }
    });

    it("a task that stops heartbeating is declared failed: a blocked call and the next call raise UnavailableError naming it", async () => {
      const clients = await connectAll(await backend().cluster(tasks));
      const [c, w1, w2] = clients as [CoordinationClient, CoordinationClient, CoordinationClient];
      try {
        const blocked = rejection(c.get("never", { timeoutMs: 120_000 }));
        await w2.close(); // no shutdown barrier: it just goes silent, as a killed process does
        const e = await within(blocked, failBound(), "the blocked get");
        expect(e).toBeInstanceOf(UnavailableError);
        expect(e.message).toContain(worker2);
        // What the failure is travels as data, alike on every backend.
        expect((e as OpError).failure).toEqual({ kind: "declaredFailed", tasks: [worker2] });
        const next = await rejection(w1.tryGet("x"));
        expect(next).toBeInstanceOf(UnavailableError);
        expect(next.message).toContain(worker2);
        expect((next as OpError).failure).toEqual({ kind: "declaredFailed", tasks: [worker2] });
      } finally {
        await closeAll(clients);
      }
    });

    it("reportErrorToCluster: every task's next call raises that error, naming the reporter", async () => {
      const clients = await connectAll(await backend().cluster(tasks));
      const [, w1] = clients as [CoordinationClient, CoordinationClient];
      try {
        await w1.reportErrorToCluster(new InvalidArgumentError("loss is NaN"));
        for (const client of clients) {
          const e = await untilRejected(() => client.tryGet("x"), 10_000, `error propagation to ${client.task}`);
          expect(e).toBeInstanceOf(InvalidArgumentError);
          expect(e.message).toContain("loss is NaN");
          expect(e.message).toContain(`reported by task ${worker1}`);
          expect((e as OpError).failure).toEqual({ kind: "reported", reporter: worker1, errorName: "InvalidArgumentError" });
        }
      } finally {
        await closeAll(clients);
      }
    });

    it("a reported preemption stays one on every task, naming its reporter and notice; a reported class and code stay theirs", async () => {
      const clients = await connectAll(await backend().cluster(tasks));
      const [, , w2] = clients as [CoordinationClient, CoordinationClient, CoordinationClient];
      try {
        await w2.reportErrorToCluster(new CancelledError("xyzzy", { failure: { kind: "preemption", reporter: worker2, notice: "SIGTERM" } }));
        for (const client of clients) {
          const e = await untilRejected(() => client.tryGet("x"), 10_000, `the preemption's propagation to ${client.task}`);
          expect(e).toBeInstanceOf(CancelledError);
          expect((e as OpError).failure).toEqual({ kind: "preemption", reporter: worker2, notice: "SIGTERM" });
        }
      } finally {
        await closeAll(clients);
      }
      const again = await connectAll(await backend().cluster(tasks));
      try {
        await (again[1] as CoordinationClient).reportErrorToCluster(new ResourceExhaustedError("out of memory"));
        const e = await untilRejected(() => (again[0] as CoordinationClient).tryGet("x"), 10_000, "the reported error's propagation to the chief");
        expect(e).toBeInstanceOf(ResourceExhaustedError);
        expect((e as OpError).code).toBe(ErrorCode.RESOURCE_EXHAUSTED);
        expect((e as OpError).failure).toEqual({ kind: "reported", reporter: worker1, errorName: "ResourceExhaustedError" });
      } finally {
        await closeAll(again);
      }
    });

    it("a reported error's own class name (a subclass such as ModelMismatchError) reaches every task in its failure, whatever its message", async () => {
      const clients = await connectAll(await backend().cluster(tasks));
      try {
        // As a task's runtime reports it: the failure names the subclass the code alone cannot.
        const mismatch = new ModelMismatchError("zork", { failure: { kind: "reported", reporter: worker1, errorName: "ModelMismatchError" } });
        await (clients[1] as CoordinationClient).reportErrorToCluster(mismatch);
        for (const client of clients) {
          const e = await untilRejected(() => client.tryGet("x"), 10_000, `the mismatch's propagation to ${client.task}`);
          expect(e).toBeInstanceOf(InvalidArgumentError);
          expect((e as OpError).failure).toEqual({ kind: "reported", reporter: worker1, errorName: "ModelMismatchError" });
        }
      } finally {
        await closeAll(clients);
      }
    });

    it("the shutdown barrier: a task that leaves late is not taken for a failure", async () => {
      const hb = backend().heartbeatTimeoutMs;
      const shutdownTimeoutMs = 6 * hb + 10_000;
      const clients = await connectAll(await backend().cluster(tasks), {
        [chief]: { timeouts: { shutdownTimeoutMs } },
        [worker1]: { timeouts: { shutdownTimeoutMs } },
        [worker2]: { timeouts: { shutdownTimeoutMs } },
      });
      const [c, w1, w2] = clients as [CoordinationClient, CoordinationClient, CoordinationClient];
      const early = Promise.all([c.shutdown(), w1.shutdown()]);
      await sleep(1.5 * hb);
      await within(Promise.all([early, w2.shutdown()]), shutdownTimeoutMs * 2, "shutdown");
      await expect(c.tryGet("x")).rejects.toBeInstanceOf(FailedPreconditionError);
    });

    it("a restarted task (new incarnation) gets AbortedError; the others learn it is gone", async () => {
      const cluster = await backend().cluster(tasks);
      const clients = await connectAll(cluster);
      const [c] = clients as [CoordinationClient];
      // The same task in a new process: a new incarnation (clients of one process share one).
      const again = cluster.client({ task: worker1, isChief: false, incarnation: newIncarnation() });
      try {
        expect(again.incarnation).not.toBe(clients[1]?.incarnation);
        const e = await within(rejection(again.connect()), 20_000, "the restarted task's connect");
        expect(e).toBeInstanceOf(AbortedError);
        expect(e.message).toContain(worker1);
        const seen = await within(rejection(c.get("never", { timeoutMs: 60_000 })), failBound(), "the chief's get");
        expect(seen).toBeInstanceOf(UnavailableError);
        expect(seen.message).toContain(worker1);
        expect((seen as OpError).failure).toEqual({ kind: "declaredFailed", tasks: [worker1] });
      } finally {
        await closeAll([...clients, again]);
      }
    });

    it("generations: a restarted chief starts a new one; a stale worker gets AbortedError, registers again and never sees the old one-shot keys", async () => {
      const cluster = await backend().cluster(tasks);
      const clients = await connectAll(cluster);
      const [c, w1, w2] = clients as [CoordinationClient, CoordinationClient, CoordinationClient];
      const first = c.generation as number;
      await c.insert("TERMINATED_WORKER", "1");
      await c.close();
      const chief2 = cluster.client({ task: chief, isChief: true });
      try {
        const connecting = chief2.connect();
        const stale = await within(rejection(w1.get("never", { timeoutMs: 60_000 })), 20_000, "the stale worker's get");
        expect(stale).toBeInstanceOf(AbortedError);
        await within(Promise.all([connecting, w1.connect(), w2.connect()]), 20_000, "registration in the new generation");
        expect(chief2.generation).toBe(first + 1);
        expect(w1.generation).toBe(first + 1);
        expect(await w1.tryGet("TERMINATED_WORKER")).toBeUndefined();
        await w2.insert("TERMINATED_WORKER", "2");
        expect(await chief2.get("TERMINATED_WORKER", { timeoutMs: 5_000 })).toBe("2");
      } finally {
        await closeAll([w1, w2, chief2]);
      }
    });

    it("a final report between generations (a rank's termination notice while its group re-forms): the chief opening the next generation and a rank registering again both raise it; it needs a registration", async () => {
      const cluster = await backend().cluster(tasks);
      const clients = await connectAll(cluster);
      const [c, w1, w2] = clients as [CoordinationClient, CoordinationClient, CoordinationClient];
      const never = cluster.client({ task: worker2, isChief: false, incarnation: newIncarnation() });
      try {
        // Worker 2 is lost: the chief opens the next generation, worker 1 registers again; both
        // wait for worker 2.
        await w2.reportErrorToCluster(new UnavailableError(`${worker2} left the replica group`));
        await w2.close();
        // As a re-forming group does: again after the old generation's error or its end.
        const registerAgain = async (client: CoordinationClient): Promise<Error> => {
          for (;;) {
            const e = await rejection(client.connect());
            if (!(e instanceof UnavailableError || e instanceof AbortedError)) return e;
            await sleep(100);
          }
        };
        const chiefRegistering = registerAgain(c);
        const w1Registering = registerAgain(w1);
        await sleep(200);
        // Worker 1 gets a termination notice now: its client is between generations.
        await within(w1.reportErrorToCluster(new CancelledError("cluster preemption: task worker:0 got a termination notice"), { final: true }), 20_000, "the final report");
        for (const [pending, who] of [[chiefRegistering, "the chief's registration"], [w1Registering, "worker 1's registration"]] as const) {
          const e = await within(pending, 20_000, who);
          expect(e, who).toBeInstanceOf(CancelledError);
          expect(e.message).toContain(`task worker:0 got a termination notice (reported by task ${worker1})`);
        }
        // A later registration raises it too.
        expect((await within(rejection(c.connect()), 20_000, "a later registration")).message).toContain("task worker:0 got a termination notice");
        // A client that never registered has no generation to send one from.
        expect(await rejection(never.reportErrorToCluster(new CancelledError("x"), { final: true }))).toBeInstanceOf(FailedPreconditionError);
      } finally {
        await closeAll([...clients, never]);
      }
    });

    it("registration: workers wait for the chief; a task that never registers is named when it times out", async () => {
      const cluster = await backend().cluster(tasks);
      const timeouts = { registrationTimeoutMs: 3 * backend().heartbeatTimeoutMs };
      const c = cluster.client({ task: chief, isChief: true, timeouts });
      const w1 = cluster.client({ task: worker1, isChief: false, timeouts });
      try {
        const e = await within(rejection(Promise.all([w1.connect(), c.connect()])), 20_000, "registration");
        expect(e).toBeInstanceOf(DeadlineExceededError);
        expect(e.message).toContain(`missing: ${worker2}`);
      } finally {
        await closeAll([c, w1]);
      }
    });

    it("heartbeats run off the main thread: a task blocked synchronously for 3 heartbeat intervals is not declared failed", async () => {
      const clients = await connectAll(await backend().cluster(tasks));
      try {
        const intervalMs = backend().heartbeatTimeoutMs / 2;
        // Every client of this process is blocked, as in a long synchronous training step.
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 3 * intervalMs);
        await sleep(backend().heartbeatTimeoutMs + 1000);
        for (const client of clients) expect(await client.tryGet("x")).toBeUndefined();
      } finally {
        await closeAll(clients);
      }
    });
  });
};
