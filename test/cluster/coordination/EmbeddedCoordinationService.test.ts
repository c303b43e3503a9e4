import { describe, expect, it } from "vitest";
import {
  type CoordinationClient,
  EmbeddedCoordinationClient,
  EmbeddedCoordinationService,
  type EmbeddedTransport,
  inProcessTransport,
  newIncarnation,
  processIncarnationId,
} from "../../../src/cluster/coordination/index.js";
import {
  AbortedError,
  FailedPreconditionError,
  CancelledError,
  DeadlineExceededError,
  InvalidArgumentError,
  UnavailableError,
} from "../../../src/errors.js";
import { flush, VirtualClock } from "../../../src/testing/VirtualClock.js";
import { chief, rejection, tasks, worker1, worker2 } from "./conformance.js";

/** Three in-process tasks on a virtual clock, TensorFlow's default timeouts (10 s, 5 s). */
const setup = async (clock = new VirtualClock()) => {
  const service = new EmbeddedCoordinationService({ clock });
  const client = (task: string, isChief = task === chief): EmbeddedCoordinationClient =>
    new EmbeddedCoordinationClient(inProcessTransport(service), { task, tasks, isChief, clock, heartbeats: "inline" });
  const [c, w1, w2]: [CoordinationClient, CoordinationClient, CoordinationClient] = [client(chief), client(worker1), client(worker2)];
  await Promise.all([c.connect(), w1.connect(), w2.connect()]);
  return { clock, service, client, c, w1, w2 };
};

/** Whether `promise` settled (without waiting for it). */
const settled = async (promise: Promise<unknown>): Promise<boolean> => {
  let done = false;
  promise.then(
    () => (done = true),
    () => (done = true),
  );
  await new Promise((r) => setImmediate(r));
  return done;
};

/**
 * A few event-loop turns: a staleness check that finds a silent task gives the loop turns to
 * read waiting heartbeats before its verdict, so the verdict comes a few turns after the tick.
 */
const turns = async (n = 5): Promise<void> => {
  for (let i = 0; i < n; i++) await flush();
};

/** Three tasks of which the chief left first: its shutdown barrier timed out (the workers still train). */
const chiefLeftFirst = async (clock = new VirtualClock()) => {
  const cluster = await setup(clock);
  const leaving = rejection(cluster.c.shutdown());
  await clock.advanceSecs(11);
  expect(await leaving).toBeInstanceOf(DeadlineExceededError);
  await cluster.c.close();
  return cluster;
};

describe("EmbeddedCoordinationService (virtual clock)", () => {
  it("live tasks are never declared failed; a silent one is, after the heartbeat timeout, named to a blocked get", async () => {
    const { clock, c, w1, w2 } = await setup();
    const blocked = rejection(c.get("never", { timeoutMs: 3_600_000 }));
    await clock.advanceSecs(120);
    expect(await settled(blocked)).toBe(false);
    await w2.close();
    await clock.advanceSecs(9);
    expect(await settled(blocked)).toBe(false);
    await clock.advanceSecs(3);
    const e = await blocked;
    expect(e).toBeInstanceOf(UnavailableError);
    expect(e.message).toContain(worker2);
    const next = await rejection(w1.insert("k", "v"));
    expect(next).toBeInstanceOf(UnavailableError);
    expect(next.message).toContain(worker2);
  });

  it("a frozen task (SIGSTOP) is declared failed, and when it thaws its next call tells it so", async () => {
    const clock = new VirtualClock();
    const frozenClock = new VirtualClock(); // never advanced: its heartbeats never fire
    const service = new EmbeddedCoordinationService({ clock });
    const make = (task: string, c: VirtualClock): EmbeddedCoordinationClient =>
      new EmbeddedCoordinationClient(inProcessTransport(service), { task, tasks, isChief: task === chief, clock: c, heartbeats: "inline" });
    const [c, w1, frozen] = [make(chief, clock), make(worker1, clock), make(worker2, frozenClock)];
    await Promise.all([c.connect(), w1.connect(), frozen.connect()]);
    await clock.advanceSecs(12);
    await turns();
    const seen = await rejection(w1.tryGet("k"));
    expect(seen).toBeInstanceOf(UnavailableError);
    expect(seen.message).toContain(worker2);
    const told = await rejection(frozen.tryGet("k"));
    expect(told).toBeInstanceOf(UnavailableError);
    expect(told.message).toContain(`${worker2} declared failed`);
  });

  it("time its host thread was blocked does not count against the tasks", async () => {
    const { clock, c, w1 } = await setup();
    // The host's thread was blocked for 30 s: no timer ran, no heartbeat was read.
    clock.set(clock.now() + 30_000);
    await clock.advanceSecs(1);
    expect(await c.tryGet("k")).toBeUndefined();
    await clock.advanceSecs(60);
    await w1.insert("k", "v");
    expect(await c.tryGet("k")).toBe("v");
  });

  it("a task that dies while the host is blocked is still declared failed", async () => {
    const { clock, c, w2 } = await setup();
    await w2.close();
    clock.set(clock.now() + 30_000);
    await clock.advanceSecs(12);
    await turns();
    const e = await rejection(c.tryGet("k"));
    expect(e).toBeInstanceOf(UnavailableError);
    expect(e.message).toContain(worker2);
  });

  it("a barrier's deadline is the first arrival plus its timeout; the error names the stragglers and the first task", async () => {
    const { clock, c, w1 } = await setup();
    const first = rejection(c.barrier("ckpt", { timeoutMs: 10_000 }));
    await clock.advanceSecs(6);
    const second = rejection(w1.barrier("ckpt", { timeoutMs: 10_000 }));
    await clock.advanceSecs(3);
    expect(await settled(first)).toBe(false);
    await clock.advanceSecs(2);
    for (const e of [await first, await second]) {
      expect(e).toBeInstanceOf(DeadlineExceededError);
      expect(e.message).toContain(`2/3 tasks arrived (first: ${chief}); stragglers: ${worker2}`);
    }
  });

  it("arrivals naming different task sets fail the barrier with InvalidArgumentError", async () => {
    const { c, w1 } = await setup();
    const first = rejection(c.barrier("b", { tasks: [chief, worker1] }));
    const e = await rejection(w1.barrier("b", { tasks: [chief, worker1, worker2] }));
    expect(e).toBeInstanceOf(InvalidArgumentError);
    expect(await first).toBeInstanceOf(InvalidArgumentError);
  });

  it("when the host stops, all state is lost: calls fail with UnavailableError; a new service with new tasks starts at generation 1", async () => {
    const { clock, service, c, w1 } = await setup();
    await c.insert("RUN_TO_CHECKPOINT", "3");
    const blocked = rejection(w1.get("never"));
    service.close();
    expect(await blocked).toBeInstanceOf(UnavailableError);
    expect(await rejection(w1.tryGet("RUN_TO_CHECKPOINT"))).toBeInstanceOf(UnavailableError);
    const again = await setup(clock);
    expect(again.w1.generation).toBe(1);
    expect(await again.w1.tryGet("RUN_TO_CHECKPOINT")).toBeUndefined();
  });

  it("waitUntilAllLeft: the host waits for tasks that leave after its shutdown barrier timed out", async () => {
    const { clock, service, w1, w2 } = await chiefLeftFirst();
    const drained = service.waitUntilAllLeft(3_600_000);
    // The chief left: its silence is no failure, and the workers' calls still work.
    await clock.advanceSecs(60);
    await w1.insert("k", "v");
    expect(await settled(drained)).toBe(false);
    expect(await rejection(w1.shutdown())).toBeInstanceOf(DeadlineExceededError);
    expect(await settled(drained)).toBe(false);
    expect(await rejection(w2.shutdown())).toBeInstanceOf(DeadlineExceededError);
    expect(await drained).toEqual([]);
  });

  it("waitUntilAllLeft ends when a remaining task is declared failed, and at its deadline naming who is left", async () => {
    const { clock, service, w2 } = await chiefLeftFirst();
    const failed = service.waitUntilAllLeft(3_600_000);
    await w2.close(); // dies without leaving
    await clock.advanceSecs(12);
    expect(await failed).toEqual([]);

    const again = await chiefLeftFirst(clock);
    const bounded = again.service.waitUntilAllLeft(30_000);
    await clock.advanceSecs(29);
    expect(await settled(bounded)).toBe(false);
    await clock.advanceSecs(2);
    expect(await bounded).toEqual([worker1, worker2]);
  });

  it("reportHostError while the host waits: every task's blocked call raises it, and the wait ends", async () => {
    const { service, w1 } = await chiefLeftFirst();
    const drained = service.waitUntilAllLeft(3_600_000);
    const blocked = rejection(w1.get("never", { timeoutMs: 3_600_000 }));
    service.reportHostError(new CancelledError("cluster preemption: the host got a termination notice"));
    const e = await blocked;
    expect(e).toBeInstanceOf(CancelledError);
    expect(e.message).toContain("the host got a termination notice");
    expect(await drained).toEqual([]);
  });

  it("a final reportHostError reaches a task that registers again after its generation failed (not the generation's first error)", async () => {
    const { service, client, w2 } = await setup();
    // A rank was lost: the generation failed, and the others are between generations.
    await w2.reportErrorToCluster(new UnavailableError("task 2 left the replica group"));
    await w2.close(); // the lost rank: it never calls again
    const told = service.waitUntilTold([worker1], 30_000);
    service.reportHostError(new CancelledError("cluster preemption: the host got a termination notice"), { final: true });
    expect(await settled(told)).toBe(false);
    const late = await rejection(client(worker1).connect());
    expect(late).toBeInstanceOf(CancelledError);
    expect(late.message).toContain("the host got a termination notice");
    expect(await told).toEqual([]);
  });

  it("a final reportHostError fails a registration pending in the next generation; waitUntilTold ends at its deadline naming a task that never calls", async () => {
    const { clock, service, client, w2 } = await setup();
    await w2.reportErrorToCluster(new UnavailableError("task 2 left the replica group"));
    await w2.close();
    const pendingRegistration = rejection(client(chief).connect()); // the next generation waits for every task
    await turns();
    expect(await settled(pendingRegistration)).toBe(false);
    const told = service.waitUntilTold([chief], 30_000);
    service.reportHostError(new CancelledError("cluster preemption: the host got a termination notice"), { final: true });
    const pending = await pendingRegistration;
    expect(pending).toBeInstanceOf(CancelledError);
    expect(pending.message).toContain("the host got a termination notice");
    expect(await told).toEqual([]);
    // A live task's heartbeat hears it too; the lost one never does.
    const bounded = service.waitUntilTold([worker2], 10_000);
    await clock.advanceSecs(9);
    expect(await settled(bounded)).toBe(false);
    await clock.advanceSecs(2);
    expect(await bounded).toEqual([worker2]);
  });

  it("a task's final report between generations is taken from its last registration, and every rank hears it in any generation", async () => {
    const { service, client, c, w1, w2 } = await setup();
    // A rank was lost: the generation failed, and the others register again (the next generation waits for every task).
    await w2.reportErrorToCluster(new UnavailableError("task 2 left the replica group"));
    await w2.close();
    const chiefRegistering = rejection(client(chief).connect());
    const w1Registering = rejection(w1.connect());
    await turns();
    expect(await settled(chiefRegistering)).toBe(false);
    // Worker 1 gets a termination notice now: its client has no current generation.
    await w1.reportErrorToCluster(new CancelledError("cluster preemption: task worker:0 got a termination notice"), { final: true });
    for (const pending of [chiefRegistering, w1Registering]) {
      const e = await pending;
      expect(e).toBeInstanceOf(CancelledError);
      expect(e.message).toContain(`task worker:0 got a termination notice (reported by task ${worker1})`);
    }
    expect(service.hasFinalReport).toBe(true);
    // The reporter counts as told; a call of the old chief's client hears it too.
    expect(await service.waitUntilTold([worker1], 0)).toEqual([]);
    expect(await rejection(c.tryGet("k"))).toBeInstanceOf(CancelledError);
    // A later report does not replace it.
    await w1.reportErrorToCluster(new CancelledError("another"), { final: true });
    // A client that never registered has nothing to report to.
    expect(await rejection(client(worker1).reportErrorToCluster(new CancelledError("x"), { final: true }))).toBeInstanceOf(FailedPreconditionError);
    expect((await rejection(client(chief).connect())).message).toContain("task worker:0 got a termination notice");
  });

  it("a final report is refused from an incarnation that never registered with this service", async () => {
    const { service, c } = await setup();
    const e = await rejection(
      service.reportError({ task: worker1, incarnation: "not-registered", generation: 1, serviceId: service.serviceId, status: { code: 1, message: "x" }, final: true }),
    );
    expect(e).toBeInstanceOf(AbortedError);
    expect(e.message).toContain(`task ${worker1} (incarnation not-registered) is not registered with this coordination service`);
    expect(service.hasFinalReport).toBe(false);
    await c.insert("still", "working");
  });

  it("a client of a service instance that is gone gets UnavailableError, not another cluster's state", async () => {
    const { clock, c } = await setup();
    const other = await setup(clock);
    const identity = { task: chief, incarnation: c.incarnation, generation: 1, serviceId: "not-this-one" };
    const e = await rejection(other.service.tryGet({ ...identity, key: "k" }));
    expect(e).toBeInstanceOf(UnavailableError);
    expect(e.message).toContain("restarted");
  });

  it("a worker waits for the chief; without one it fails after the registration timeout", async () => {
    const clock = new VirtualClock();
    const service = new EmbeddedCoordinationService({ clock });
    const w = new EmbeddedCoordinationClient(inProcessTransport(service), {
      task: worker1,
      tasks,
      isChief: false,
      clock,
      heartbeats: "inline",
      timeouts: { registrationTimeoutMs: 60_000 },
    });
    const connecting = rejection(w.connect());
    await clock.advanceSecs(59);
    expect(await settled(connecting)).toBe(false);
    await clock.advanceSecs(2);
    const e = await connecting;
    expect(e).toBeInstanceOf(DeadlineExceededError);
    expect(e.message).toContain("chief");
  });

  it("a task that names other tasks than the chief gets InvalidArgumentError", async () => {
    const clock = new VirtualClock();
    const service = new EmbeddedCoordinationService({ clock });
    const c = new EmbeddedCoordinationClient(inProcessTransport(service), { task: chief, tasks, isChief: true, clock, heartbeats: "inline" });
    const w = new EmbeddedCoordinationClient(inProcessTransport(service), {
      task: worker1,
      tasks: [chief, worker1],
      isChief: false,
      clock,
      heartbeats: "inline",
    });
    const chiefConnect = c.connect().catch(() => {});
    const e = await rejection(w.connect());
    expect(e).toBeInstanceOf(InvalidArgumentError);
    expect(e.message).toContain("the chief named");
    service.close();
    await chiefConnect;
  });

  it("a worker of a stale generation gets AbortedError and joins the new one", async () => {
    const { clock, client, c, w1, w2 } = await setup();
    await c.close();
    const chief2 = client(chief);
    const connecting = chief2.connect();
    await settled(connecting); // lets the chief's registration reach the service
    expect(await rejection(w1.tryGet("k"))).toBeInstanceOf(AbortedError);
    await Promise.all([connecting, w1.connect(), w2.connect()]);
    expect(w1.generation).toBe(2);
    await clock.advanceSecs(60);
    expect(await w1.tryGet("k")).toBeUndefined();
  });
});

/**
 * The service's event loop, simulated: heartbeats the tasks sent wait in `inbox` (a socket's
 * queue) until the loop reads them, either in its normal turn ({@link read}) or when the
 * service itself yields a turn.
 */
class ServiceLoopClock extends VirtualClock {
  readonly inbox: Array<() => void> = [];

  override yieldTurn(): Promise<void> {
    this.read();
    return super.yieldTurn();
  }

  /** The loop's I/O phase: every waiting heartbeat reaches the service. */
  read(): void {
    for (const deliver of this.inbox.splice(0)) deliver();
  }
}

/**
 * Three tasks whose heartbeats (every 5 s of the tasks' own clock) queue in the service loop's
 * inbox; the service checks them every second of its own clock (TensorFlow's timeouts).
 */
const queuedSetup = async () => {
  const loop = new ServiceLoopClock();
  const tasksClock = new VirtualClock();
  const service = new EmbeddedCoordinationService({ clock: loop });
  const queuedHeartbeat = (req: Parameters<EmbeddedCoordinationService["heartbeat"]>[0]): Promise<void> =>
    new Promise((resolve, reject) => loop.inbox.push(() => void service.heartbeat(req).then(resolve, reject)));
  const api = new Proxy(service, {
    get: (target, key: keyof EmbeddedCoordinationService) =>
      key === "heartbeat" ? queuedHeartbeat : (target[key] as (...args: unknown[]) => unknown).bind(target),
  });
  const client = (task: string): EmbeddedCoordinationClient =>
    new EmbeddedCoordinationClient(
      { api, openPort: () => Promise.reject(new Error("inline heartbeats only")) },
      { task, tasks, isChief: task === chief, clock: tasksClock, heartbeats: "inline" },
    );
  const [c, w1, w2] = [client(chief), client(worker1), client(worker2)];
  await Promise.all([c.connect(), w1.connect(), w2.connect()]);
  /** Both run normally for `secs`: each second the service's timers, the tasks' beats, then the loop reads them. */
  const run = async (secs: number): Promise<void> => {
    for (let i = 0; i < secs; i++) {
      await loop.advanceSecs(1);
      await tasksClock.advanceSecs(1);
      loop.read();
    }
    await turns();
  };
  /** The service's loop does not run for `secs` (a long synchronous step), while the tasks beat on. */
  const stall = async (secs: number): Promise<void> => {
    loop.set(loop.now() + secs * 1000);
    await tasksClock.advanceSecs(secs);
  };
  return { loop, tasksClock, service, c, w1, w2, run, stall };
};

describe("staleness checks when the service's own loop stalls (virtual clock)", () => {
  it("the clock jumps past the heartbeat timeout while heartbeats wait unread: nobody is declared failed", async () => {
    const { loop, c, w1, run, stall } = await queuedSetup();
    await run(20);
    await stall(25);
    expect(loop.inbox.length).toBeGreaterThan(0);
    await loop.advanceSecs(1); // the late tick comes before the loop reads its queue
    await turns();
    expect(await c.tryGet("k")).toBeUndefined();
    await run(60);
    await w1.insert("k", "v");
    expect(await c.tryGet("k")).toBe("v");
  });

  it("heartbeats received but not read when a check finds the tasks silent are read before any verdict", async () => {
    const { loop, tasksClock, c, run } = await queuedSetup();
    await run(5);
    // The checks run on time for 12 s while the tasks beat on, but nothing is read in between:
    // every task looks silent past the heartbeat timeout.
    for (let i = 0; i < 12; i++) {
      await loop.advanceSecs(1);
      await tasksClock.advanceSecs(1);
    }
    await turns();
    expect(await c.tryGet("k")).toBeUndefined();
    await run(30);
    expect(await c.tryGet("k")).toBeUndefined();
  });

  it("a dead task is still declared failed within the heartbeat timeout plus one check, others' heartbeats queued or not", async () => {
    const { c, w1, w2, run } = await queuedSetup();
    await run(5); // every task's last heartbeat: t = 5 s
    await w2.close();
    await run(10);
    expect(await c.tryGet("k")).toBeUndefined();
    await run(1);
    const e = await rejection(w1.tryGet("k"));
    expect(e).toBeInstanceOf(UnavailableError);
    expect(e.message).toContain(`task ${worker2} declared failed`);
  });

  it("a task that dies before a stall is declared failed within the timeout plus one check of the service's running time", async () => {
    const { c, w1, w2, run, stall } = await queuedSetup();
    await run(5);
    await w2.close();
    await stall(30);
    await run(9);
    expect(await c.tryGet("k")).toBeUndefined();
    await run(2);
    const e = await rejection(w1.tryGet("k"));
    expect(e).toBeInstanceOf(UnavailableError);
    expect(e.message).toContain(`task ${worker2} declared failed`);
  });
});

describe("generations across chief restarts (virtual clock)", () => {
  /** The chief's address: whichever service the chief now hosts there answers. */
  const chiefAddress = (first: EmbeddedCoordinationService) => {
    let service = first;
    const transport: EmbeddedTransport = {
      get api() {
        return service;
      },
      openPort: () => Promise.reject(new Error("inline heartbeats only")),
    };
    return { transport, restart: (next: EmbeddedCoordinationService) => (service = next) };
  };

  it("a restarted chief's service numbers its generation above every one its tasks saw, so generations strictly increase", async () => {
    const clock = new VirtualClock();
    const address = chiefAddress(new EmbeddedCoordinationService({ clock }));
    const client = (task: string): EmbeddedCoordinationClient =>
      new EmbeddedCoordinationClient(address.transport, { task, tasks, isChief: task === chief, clock, heartbeats: "inline" });
    const [w1, w2] = [client(worker1), client(worker2)];
    await Promise.all([client(chief).connect(), w1.connect(), w2.connect()]);
    // The chief process restarts twice in the same service's life: generations 2 and 3.
    await Promise.all([client(chief).connect(), w1.connect(), w2.connect()]);
    await Promise.all([client(chief).connect(), w1.connect(), w2.connect()]);
    expect(w1.generation).toBe(3);
    await w1.insert("RUN_TO_CHECKPOINT", "3");

    // The chief process dies with its service and comes back (a new process, a new service).
    const seen: number[] = [3];
    for (let restart = 0; restart < 2; restart++) {
      address.restart(new EmbeddedCoordinationService({ clock }));
      expect(await rejection(w1.tryGet("RUN_TO_CHECKPOINT"))).toBeInstanceOf(UnavailableError);
      const chiefAgain = client(chief); // a new process: it remembers nothing
      await Promise.all([chiefAgain.connect(), w1.connect(), w2.connect()]);
      expect(chiefAgain.generation).toBe(w1.generation);
      expect(w2.generation).toBe(w1.generation);
      expect(w1.generation).toBeGreaterThan(Math.max(...seen));
      seen.push(w1.generation as number);
      expect(await w2.tryGet("RUN_TO_CHECKPOINT")).toBeUndefined();
      await clock.advanceSecs(30);
      await chiefAgain.insert("alive", String(restart));
      expect(await w2.tryGet("alive")).toBe(String(restart));
    }
    expect(seen).toEqual([3, 4, 5]);
  });

  it("one task that saw a higher generation is enough, whenever it registers", async () => {
    const clock = new VirtualClock();
    const service = new EmbeddedCoordinationService({ clock });
    const register = (task: string, lastGeneration: number) =>
      service.register({ task, incarnation: newIncarnation(), isChief: task === chief, tasks, timeoutMs: 60_000, lastGeneration });
    const all = Promise.all([register(chief, 0), register(worker1, 0), register(worker2, 7)]);
    expect((await all).map((r) => r.generation)).toEqual([8, 8, 8]);
    expect(service.generation).toBe(8);
  });
});

describe("incarnations: one per process start (virtual clock)", () => {
  it("every client of the process has the process's incarnation; a reconnect of the same process is no restart", async () => {
    const { clock, client, c, w1 } = await setup();
    expect([c.incarnation, w1.incarnation]).toEqual([processIncarnationId, processIncarnationId]);
    await clock.advanceSecs(3);
    await w1.connect(); // the same client again (after a lost connection, say)
    const sameProcess = client(worker1); // another client of the same process
    await sameProcess.connect();
    expect(sameProcess.generation).toBe(w1.generation);
    await clock.advanceSecs(60);
    await sameProcess.insert("k", "v");
    expect(await c.tryGet("k")).toBe("v");
  });

  it("a new process (new incarnation) is told it restarted, with AbortedError; the others learn it is gone", async () => {
    const { service, c } = await setup();
    const restarted = new EmbeddedCoordinationClient(inProcessTransport(service), {
      task: worker1,
      tasks,
      isChief: false,
      incarnation: newIncarnation(),
      heartbeats: "inline",
    });
    const told = await rejection(restarted.connect());
    expect(told).toBeInstanceOf(AbortedError);
    expect(told.message).toContain(`task ${worker1} restarted`);
    const seen = await rejection(c.tryGet("k"));
    expect(seen).toBeInstanceOf(UnavailableError);
    expect(seen.message).toContain(`task ${worker1} restarted`);
  });

  it("a new process whose old incarnation was already declared failed is still told it restarted, and registers in the next generation", async () => {
    const { clock, service, client, c, w1, w2 } = await setup();
    await w1.close(); // the process dies
    await clock.advanceSecs(12);
    await turns();
    expect(await rejection(c.tryGet("k"))).toBeInstanceOf(UnavailableError);
    const restarted = new EmbeddedCoordinationClient(inProcessTransport(service), {
      task: worker1,
      tasks,
      isChief: false,
      clock,
      incarnation: newIncarnation(),
      heartbeats: "inline",
    });
    const told = await rejection(restarted.connect());
    expect(told).toBeInstanceOf(AbortedError);
    expect(told.message).toContain("restarted");
    // The group restarts: the chief starts a new generation, and the new process joins it.
    const chief2 = client(chief);
    await Promise.all([chief2.connect(), restarted.connect(), w2.connect()]);
    expect(restarted.generation).toBe(2);
    await restarted.insert("k", "v");
    expect(await chief2.tryGet("k")).toBe("v");
  });

  it("a call with an incarnation other than the registered one gets AbortedError", async () => {
    const { service, c } = await setup();
    const e = await rejection(
      service.tryGet({ task: chief, incarnation: newIncarnation(), generation: c.generation as number, serviceId: service.serviceId, key: "k" }),
    );
    expect(e).toBeInstanceOf(AbortedError);
    expect(e.message).toContain("is not the one registered");
  });
});

describe("EmbeddedCoordinationClient.connect (virtual clock)", () => {
  it("opens its heartbeat path before it registers: a heartbeat thread slow to start does not get the task declared failed", async () => {
    const clock = new VirtualClock();
    const pair = [chief, worker1];
    const service = new EmbeddedCoordinationService({ clock });
    const c = new EmbeddedCoordinationClient(inProcessTransport(service), { task: chief, tasks: pair, isChief: true, clock, heartbeats: "inline" });
    // The worker's heartbeat path (on a loaded machine, a thread loading a gRPC client) takes
    // 30 s of the service's time, three heartbeat timeouts, to open.
    let open: () => void = () => undefined;
    const opened = new Promise<void>((resolve) => (open = resolve));
    const base = inProcessTransport(service);
    const slow = { ...base, openPort: () => opened.then(() => base.openPort()) };
    const w = new EmbeddedCoordinationClient(slow, { task: worker1, tasks: pair, isChief: false, clock, heartbeats: "thread" });
    const connected = w.connect();
    void c.connect();
    await clock.advanceSecs(30);
    open();
    await connected;
    try {
      // Registered only now: its heartbeat thread is already running, so it is alive.
      expect(await c.tryGet("k")).toBeUndefined();
      await w.insert("k", "v");
      expect(await c.tryGet("k")).toBe("v");
    } finally {
      await Promise.all([w.close(), c.close()]);
    }
  });
});
