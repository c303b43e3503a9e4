/**
 * A second launch on the same etcd prefix (`launch --max-restarts`, or a restart by hand), on a
 * real etcd: workers of the new launch that start BEFORE its chief find the previous launch's
 * generation. Whether their task name was claimed there (AbortedError at once) or not (they
 * register in it and wait for peers that are gone), every task ends up in the new chief's
 * generation within the registration timeout, never hangs. That holds too when the previous
 * launch's tasks died less than a lease ago (their liveness keys still there).
 */
import { Etcd3 } from "etcd3";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type CoordinationClient, EtcdCoordinationClient, newIncarnation } from "../../../src/cluster/coordination/index.js";
import { AbortedError, CancelledError, DeadlineExceededError, ErrorCode, InvalidArgumentError, UnavailableError } from "../../../src/errors.js";
import { chief, rejection, tasks, within, worker1, worker2 } from "./conformance.js";
import { etcdBinary, EtcdProcess } from "./etcdHarness.js";

// The etcd minimum: leases of 2 s.
const heartbeatTimeoutMs = 2_000;
const registrationTimeoutMs = 20_000;
let etcd: EtcdProcess | undefined;
let kv: Etcd3 | undefined;
let n = 0;
const clients: CoordinationClient[] = [];

beforeAll(async () => {
  if (etcdBinary === undefined) return;
  etcd = await EtcdProcess.start();
  kv = new Etcd3({ hosts: [etcd.endpoint] });
}, 60_000);
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close().catch(() => undefined)));
});
afterAll(async () => {
  kv?.close();
  await etcd?.stop();
});

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A fresh prefix; `client` makes a task's client of it (every client is closed after the test). */
const cluster = () => {
  const prefix = `relaunch-${process.pid}-${n++}/`;
  return {
    prefix,
    client: (task: string, timeouts: { registrationTimeoutMs: number } = { registrationTimeoutMs }): CoordinationClient => {
      const c = new EtcdCoordinationClient({
        task,
        incarnation: newIncarnation(), // every client stands for a process of its own
        tasks,
        isChief: task === chief,
        hosts: [(etcd as EtcdProcess).endpoint],
        prefix,
        timeouts: { heartbeatTimeoutMs, ...timeouts },
      });
      clients.push(c);
      return c;
    },
  };
};

/** Connects, again after each AbortedError (what `run` does), within the registration timeout. */
const connectRetrying = async (client: CoordinationClient): Promise<number | undefined> => {
  const deadline = Date.now() + registrationTimeoutMs;
  for (;;) {
    try {
      await client.connect();
      return client.generation;
    } catch (e) {
      if (!(e instanceof AbortedError) || Date.now() >= deadline) throw e;
      await sleep(100);
    }
  }
};

/** Waits (up to `ms`) until `test` holds for the keys under `prefix`. */
const untilKeys = async (prefix: string, test: (keys: string[]) => boolean, ms: number, what: string): Promise<void> =>
  within(
    (async () => {
      while (!test(await (kv as Etcd3).getAll().prefix(prefix).keys())) await sleep(50);
    })(),
    ms,
    what,
  );

const enc = (task: string): string => encodeURIComponent(task);

/**
 * Generation 1 of a launch whose chief and worker 0 registered, then died less than a lease ago:
 * their liveness keys are still there (a lease of 60 s stands for one that has not expired yet).
 * Worker 1 never came. Returns the lease, to revoke after the test.
 */
const deadLaunchWithLiveLeases = async (prefix: string) => {
  const etcd3 = kv as Etcd3;
  await etcd3.put(`${prefix}generation`).value("1");
  const lease = etcd3.lease(60, { autoKeepAlive: false });
  for (const task of [chief, worker1]) {
    await etcd3.put(`${prefix}g/1/tasks/${enc(task)}`).value("1111");
    await lease.put(`${prefix}g/1/alive/${enc(task)}`).value("1111");
  }
  return lease;
};

describe.skipIf(etcdBinary === undefined)("etcd backend: a new launch on the same prefix, workers before the chief", () => {
  it("a worker that registers in the previous launch's generation (its name unclaimed there) moves to the new chief's generation", async () => {
    const { prefix, client } = cluster();
    // Launch 1: the chief and worker 0 register; worker 1 never comes, so their registration
    // times out and they leave their leases to expire, as killed tasks do.
    const first = [client(chief, { registrationTimeoutMs: 1_000 }), client(worker1, { registrationTimeoutMs: 1_000 })];
    const [c1, w1] = first as [CoordinationClient, CoordinationClient];
    const w1Connect = rejection(w1.connect());
    await sleep(50);
    for (const e of await Promise.all([rejection(c1.connect()), w1Connect])) expect(e).toBeInstanceOf(DeadlineExceededError);
    await untilKeys(`${prefix}g/1/alive/`, (keys) => keys.length === 0, 3 * (heartbeatTimeoutMs + 1000), "the old leases expiring");

    // Launch 2: both workers start first. Worker 1 registers in generation 1 (nobody claimed its
    // name there) and waits for peers that are gone, until the new chief starts generation 2.
    const [c, a, b] = [client(chief), client(worker1), client(worker2)];
    const workers = Promise.all([connectRetrying(a), connectRetrying(b)]);
    await untilKeys(`${prefix}g/1/alive/`, (keys) => keys.includes(`${prefix}g/1/alive/${enc(worker2)}`), 3 * registrationTimeoutMs, "worker 1 in generation 1");
    const generations = await within(Promise.all([connectRetrying(c), workers]), 3 * registrationTimeoutMs, "registration of the new launch");
    expect(generations).toEqual([2, [2, 2]]);
    await b.insert("from-worker-1", "x");
    expect(await c.get("from-worker-1", { timeoutMs: 5_000 })).toBe("x");
  });

  it("the previous launch's tasks died less than a lease ago: a worker started first waits in their generation, then registers in the new chief's", async () => {
    const { prefix, client } = cluster();
    const lease = await deadLaunchWithLiveLeases(prefix);
    try {
      // Worker 1 (its name unclaimed in generation 1) sees every liveness key there, stale ones
      // included, and confirms; the dead tasks never do, so it waits.
      const b = client(worker2);
      const waiting = connectRetrying(b);
      await untilKeys(`${prefix}g/1/ready/`, (keys) => keys.includes(`${prefix}g/1/ready/${enc(worker2)}`), 3 * registrationTimeoutMs, "worker 1 waiting in generation 1");
      const [c, a] = [client(chief), client(worker1)];
      const generations = await within(Promise.all([connectRetrying(c), connectRetrying(a), waiting]), 3 * registrationTimeoutMs, "registration of the new launch");
      expect(generations).toEqual([2, 2, 2]);
      await b.insert("from-worker-1", "x");
      expect(await c.get("from-worker-1", { timeoutMs: 5_000 })).toBe("x");
    } finally {
      await lease.revoke().catch(() => undefined);
    }
  });

  it("with no new chief, a worker waiting in a dead launch's generation gives up at the registration timeout, naming the tasks that never confirmed", async () => {
    const { prefix, client } = cluster();
    const lease = await deadLaunchWithLiveLeases(prefix);
    try {
      const b = client(worker2, { registrationTimeoutMs: 3_000 });
      const e = await within(rejection(b.connect()), 3 * (3_000 + heartbeatTimeoutMs), "the registration timeout");
      expect(e).toBeInstanceOf(DeadlineExceededError);
      expect(e.message).toContain(`${chief}, ${worker1} never confirmed the registration`);
    } finally {
      await lease.revoke().catch(() => undefined);
    }
  });

  it("a task that connects again to its failed generation (an error reported there) waits for the next one instead of joining it", async () => {
    const { client } = cluster();
    const [c1, a, b] = [client(chief), client(worker1), client(worker2)];
    await within(Promise.all([c1.connect(), a.connect(), b.connect()]), 3 * registrationTimeoutMs, "registration of launch 1");
    await a.reportErrorToCluster(new Error("loss is NaN"));
    await within(rejection(b.get("never", { timeoutMs: 60_000 })), 3 * registrationTimeoutMs, "the reported error");
    // Every liveness and ready key of generation 1 is still there.
    const again = connectRetrying(b);
    await sleep(500);
    await c1.close(); // the chief restarts: a new process
    const generations = await within(Promise.all([connectRetrying(client(chief)), connectRetrying(a), again]), 3 * registrationTimeoutMs, "registration of launch 2");
    expect(generations).toEqual([2, 2, 2]);
  });

  it("a final report of the previous launch (a termination notice while its group re-formed) is not heard by the next launch, whose chief deletes it", async () => {
    const { prefix, client } = cluster();
    const [c1, a, b] = [client(chief), client(worker1), client(worker2)];
    await within(Promise.all([c1.connect(), a.connect(), b.connect()]), 3 * registrationTimeoutMs, "registration of launch 1");
    await a.reportErrorToCluster(new CancelledError("cluster preemption: task worker:0 got a termination notice"), { final: true });
    expect(await within(rejection(b.tryGet("k")), 3 * registrationTimeoutMs, "launch 1's call")).toBeInstanceOf(CancelledError);
    await Promise.all([c1, a, b].map((x) => x.close()));
    // Launch 2: new processes, the workers first (the old report is still there when they start).
    expect(await (kv as Etcd3).get(`${prefix}final`).string()).toContain("termination notice");
    const workers = Promise.all([connectRetrying(client(worker1)), connectRetrying(client(worker2))]);
    await sleep(500);
    const c2 = client(chief);
    const generations = await within(Promise.all([connectRetrying(c2), workers]), 3 * registrationTimeoutMs, "registration of launch 2");
    expect(generations).toEqual([2, [2, 2]]);
    expect(await (kv as Etcd3).get(`${prefix}final`).string()).toBeNull();
    await c2.insert("k", "v");
    expect(await c2.tryGet("k")).toBe("v");
  });

  it("a rank registering again (its group re-forms) waits for a generation newer than its last, and gives up when the chief's lease expires, before or after the chief opened it", async () => {
    for (const opened of [false, true]) {
      const { prefix, client } = cluster();
      const [c, a, b] = [client(chief), client(worker1), client(worker2)];
      await within(Promise.all([c.connect(), a.connect(), b.connect()]), 3 * registrationTimeoutMs, "registration");
      // Worker 2 is lost; worker 1 registers again: not in generation 1, where it was.
      await b.close();
      const chiefRegistering = opened ? rejection(c.connect()) : undefined;
      if (opened) await untilKeys(`${prefix}g/2/alive/`, (keys) => keys.some((k) => k.includes("chief")), 10_000, "the chief's liveness key in generation 2");
      const registering = rejection(a.connect({ unreachableTimeoutMs: heartbeatTimeoutMs }));
      await sleep(300);
      expect(a.generation).toBeUndefined();
      // The chief dies: its heartbeats stop, its lease expires after the heartbeat timeout.
      await c.close();
      await chiefRegistering;
      const e = await within(registering, 4 * heartbeatTimeoutMs + 2_000, `worker 1's registration (chief lost ${opened ? "after" : "before"} it opened generation 2)`);
      expect(e).toBeInstanceOf(UnavailableError);
      expect(e.message).toMatch(new RegExp(`^task ${chief.replace(/[/]/g, "\\/")} declared failed: .* in generation ${opened ? 2 : 1}`));
    }
  });

  it("an error recorded after this task confirmed its registration (a faster peer failed at once): connect() completes, and the first call raises it", async () => {
    const { prefix, client } = cluster();
    const etcd3 = kv as Etcd3;
    const [c, a] = [client(chief), client(worker1)];
    const connecting = Promise.all([c.connect(), a.connect()]);
    // Worker 1 stands for a peer process: it registers as a task does, but confirms only after the
    // others did, and reports an error in the same transaction, as a peer that saw every ready
    // key first and failed at once would (its report lands before the others read that key).
    await untilKeys(`${prefix}generation`, (keys) => keys.length === 1, 3 * registrationTimeoutMs, "the chief's generation");
    const lease = etcd3.lease(60, { autoKeepAlive: false });
    try {
      await etcd3.put(`${prefix}g/1/tasks/${enc(worker2)}`).value("2222");
      await lease.put(`${prefix}g/1/alive/${enc(worker2)}`).value("2222");
      await untilKeys(`${prefix}g/1/ready/`, (keys) => keys.length === 2, 3 * registrationTimeoutMs, "the chief and worker 0 confirming");
      const reported = JSON.stringify({ code: ErrorCode.INVALID_ARGUMENT, message: `loss is NaN (reported by task ${worker2})` });
      await etcd3
        .if(`${prefix}g/1/error`, "Create", "==", 0)
        .then(etcd3.put(`${prefix}g/1/ready/${enc(worker2)}`).value("2222"), etcd3.put(`${prefix}g/1/error`).value(reported))
        .commit();
      await within(connecting, 3 * heartbeatTimeoutMs, "registration completing");
      for (const x of [c, a]) {
        const e = await within(rejection(x.tryGet("k")), 3 * heartbeatTimeoutMs, `${x.task}'s first call`);
        expect(e).toBeInstanceOf(InvalidArgumentError);
        expect(e.message).toContain(`loss is NaN (reported by task ${worker2})`);
      }
    } finally {
      await lease.revoke().catch(() => undefined);
    }
  });

  it("after a launch whose tasks were all killed, the new launch's workers (started first) and chief register in a new generation", async () => {
    const { client } = cluster();
    const old = [client(chief), client(worker1), client(worker2)];
    const oldWorkers = Promise.all(old.slice(1).map((x) => x.connect()));
    await sleep(50);
    await within(Promise.all([old[0]?.connect(), oldWorkers]), 3 * registrationTimeoutMs, "registration of launch 1");
    expect(old.map((x) => x.generation)).toEqual([1, 1, 1]);
    // Killed: heartbeats stop, nobody leaves through the shutdown barrier.
    await Promise.all(old.map((x) => x.close()));

    const [c, a, b] = [client(chief), client(worker1), client(worker2)];
    const workers = Promise.all([connectRetrying(a), connectRetrying(b)]);
    await sleep(500);
    const generations = await within(Promise.all([connectRetrying(c), workers]), 3 * registrationTimeoutMs, "registration of launch 2");
    expect(generations).toEqual([2, [2, 2]]);
  });
});
