/**
 * The replica group's state machine (src/runtime/replicaGroup.ts) with its rejoin
 * (src/runtime/groupRejoin.ts), on a virtual clock with scripted transports and a scripted
 * coordination client: a lost worker is waited for and the ring re-formed (the pending call
 * raises CollectiveReformedError, later calls use the new ring), a worker that never comes back
 * (one line naming it and maxWaitSecs), a lost chief (no wait), a termination notice meanwhile,
 * and a group without a rejoin (fails for good, as before). The real processes are in
 * test/runtime/groupRejoinProcesses.process.test.ts.
 */
import { describe, expect, it } from "vitest";

import type { RuntimeEventBody } from "../../src/runtime/events.js";
import { GroupRejoin } from "../../src/runtime/groupRejoin.js";
import { ReplicaGroup, ReplicaGroupError } from "../../src/runtime/replicaGroup.js";
import type { CoordinationClient } from "../../src/cluster/coordination/CoordinationClient.js";
import { CollectiveReformedError, type Collective, type CollectiveBuffer } from "../../src/session/Collective.js";
import { AbortedError, CancelledError, DeadlineExceededError, UnavailableError, UnknownError } from "../../src/errors.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { flush, VirtualClock } from "../../src/testing/VirtualClock.js";

const CHIEF = "/job:chief/replica:0/task:0";
const W0 = "/job:worker/replica:0/task:0";
const W1 = "/job:worker/replica:0/task:1";
const TASKS = [CHIEF, W0, W1];

/** A transport whose calls stay pending until the test settles them; `onPeerFailed` and `close` fail them. */
const transport = (rank: number) => {
  const pending: { resolve: () => void; reject: (e: Error) => void }[] = [];
  const t = {
    rank,
    size: TASKS.length,
    tasks: TASKS,
    calls: 0,
    closed: false,
    allReduce: <B extends CollectiveBuffer>(buffer: B) =>
      new Promise<B>((resolve, reject) => {
        t.calls += 1;
        pending.push({ resolve: () => resolve(buffer), reject });
      }),
    broadcast: <B extends CollectiveBuffer>(buffer: B) => Promise.resolve(buffer),
    barrier: () => Promise.resolve(),
    onPeerFailed: (task: string) => {
      for (const p of pending.splice(0)) p.reject(new UnavailableError(`task ${task} declared failed: no heartbeat`, declared(task)));
    },
    close: async () => {
      t.closed = true;
      for (const p of pending.splice(0)) p.reject(new CancelledError("the collective was closed"));
    },
    finishAll: () => {
      for (const p of pending.splice(0)) p.resolve();
    },
  };
  return t satisfies Collective;
};

/** A group of `rank` with a rejoin whose registration is scripted (`connects` in order; then it waits forever). */
const setup = (rank: number, connects: (() => Promise<void>)[]) => {
  const clock = new VirtualClock();
  const events = new EventRecorder();
  const group = new ReplicaGroup(rank, TASKS);
  const first = transport(rank);
  const second = transport(rank);
  group.attach(first);
  const reports: string[] = [];
  const steps: string[] = [];
  const connectOptions: unknown[] = [];
  // The task's events, as its runtime would stamp and put them on `events$`.
  const emitted: RuntimeEventBody[] = [];
  const client = {
    generation: 1,
    connect: (options?: unknown) => {
      steps.push("connect");
      connectOptions.push(options);
      const next = connects.shift();
      return next === undefined ? new Promise<void>(() => undefined) : next();
    },
    reportErrorToCluster: async (e: Error) => {
      steps.push("report");
      reports.push(e.message);
    },
  } as unknown as CoordinationClient;
  const rejoin = new GroupRejoin({
    client,
    group,
    name: rank === 0 ? "chief:0" : `worker:${rank - 1}`,
    isChief: rank === 0,
    maxWaitSecs: 60,
    unreachableTimeoutMs: 5000,
    startBarrier: async () => {
      steps.push("barrier");
    },
    join: async () => {
      steps.push("join");
      return second;
    },
    clock,
    logger: events.logger(() => clock.now()),
    emit: (e) => void emitted.push(e),
  });
  group.rejoinWith(rejoin.rejoin);
  return { clock, events, group, first, second, rejoin, reports, steps, connectOptions, emitted };
};

/** A loss as the coordination service declares it: the tasks it declared failed. */
const declared = (...tasks: string[]) => ({ failure: { kind: "declaredFailed", tasks } }) as const;

/** The embedded coordination service gone, as its transports say it. */
const embeddedGone = { failure: { kind: "serviceGone", backend: "embedded" } } as const;

/** Runs the virtual clock's due timers and the microtasks they start, `times` times. */
const settle = async (clock: VirtualClock, times = 10): Promise<void> => {
  for (let i = 0; i < times; i++) {
    await flush();
    await clock.advance(0);
  }
};

describe("a data-parallel group that loses a worker", () => {
  it("waits for it, re-forms its ring, and raises CollectiveReformedError for the call that applied nothing", async () => {
    const old = new UnavailableError(`task ${W1} declared failed: no heartbeat within the heartbeat timeout`, declared(W1));
    const { clock, events, group, first, second, steps, rejoin, emitted } = setup(1, [() => Promise.reject(old), () => Promise.resolve()]);
    expect(rejoin.waiting).toBe(false);
    const call = group.allReduce(new Float32Array(4), "mean");
    const outcome = call.then(
      () => "applied",
      (e: unknown) => e,
    );
    await flush();
    group.onPeerFailed(W1, old);
    await settle(clock);
    expect(rejoin.waiting).toBe(true);
    // The old generation had failed: the worker registers again after a backoff.
    await clock.advance(100);
    await settle(clock);
    const e = await outcome;
    expect(rejoin.waiting).toBe(false);
    expect(e).toBeInstanceOf(CollectiveReformedError);
    expect(group.state).toBe("ready");
    expect(first.closed).toBe(true);
    expect(steps).toEqual(["connect", "connect", "join", "barrier"]);
    const warnings = events.messages("warn");
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(`worker:0 lost ${W1}`);
    expect(warnings[0]).toContain("waiting up to 60 s (maxWaitSecs)");
    expect(events.messages("info").some((m) => m.includes("re-formed its ring"))).toBe(true);
    // Beside each line, its event (the data a goodput log or a UI reads).
    expect(emitted).toEqual([
      { type: "replicaRankLost", task: "worker:0", lost: W1, maxWaitSecs: 60 },
      { type: "replicaGroupReformed", task: "worker:0", generation: 1, rejoined: W1 },
    ]);

    // The next call runs on the new ring.
    const next = group.allReduce(new Float32Array(4), "mean");
    await flush();
    expect(second.calls).toBe(1);
    second.finishAll();
    await expect(next).resolves.toBeInstanceOf(Float32Array);
  });

  it("the chief names the lost worker to the others before it opens the next generation", async () => {
    const { clock, group, reports, steps } = setup(0, [() => Promise.resolve()]);
    const reformed = group.reform(new UnavailableError(`rank 2 (${W1}) closed its connection to rank 0`, { failure: { kind: "peerLost", task: W1 } }));
    await settle(clock);
    await reformed;
    expect(steps).toEqual(["report", "connect", "join", "barrier"]);
    expect(reports).toHaveLength(1);
    expect(reports[0]).toContain(`${W1} left the replica group`);
  });

  it("a worker that never comes back fails the group after maxWaitSecs, in one line naming it", async () => {
    const { clock, group } = setup(1, []);
    const call = group.allReduce(new Float32Array(4), "mean");
    const outcome = call.then(
      () => "applied",
      (e: unknown) => e,
    );
    group.onPeerFailed(W1);
    await settle(clock);
    await clock.advance(60_000);
    await settle(clock);
    const e = await outcome;
    expect(e).toBeInstanceOf(ReplicaGroupError);
    const cause = (e as ReplicaGroupError).cause;
    expect(cause).toBeInstanceOf(DeadlineExceededError);
    expect(cause.message).toContain(`worker:0 lost ${W1}, which did not rejoin the replica group within 60 s (maxWaitSecs)`);
    expect(cause.message).not.toContain("\n");
    expect(group.state).toBe("failed");
    await expect(group.allReduce(new Float32Array(1), "sum")).rejects.toBe(e);
  });

  it("does not wait for a lost chief: the group fails at once, as before", async () => {
    const { clock, group, events, steps, emitted } = setup(2, []);
    const reformed = group.reform(new UnavailableError(`task ${CHIEF} declared failed: no heartbeat`, declared(CHIEF)));
    await settle(clock);
    await expect(reformed).rejects.toBeInstanceOf(ReplicaGroupError);
    expect(steps).toEqual([]);
    expect(events.messages("warn")).toEqual([]);
    expect(emitted).toEqual([]);
  });

  it("the chief goes while the group waits: registration gives up after the heartbeat timeout of silence, and the group fails with it", async () => {
    // The service stops answering: the transport tries for `unreachableTimeoutMs`, then fails
    // naming the chief's address (scripted here as that failure).
    const gone = new UnavailableError("the coordination service at grpc://127.0.0.1:1 is unreachable (ECONNREFUSED); its host (the chief) stopped or has not started", embeddedGone);
    const { clock, group, connectOptions } = setup(1, [() => Promise.reject(gone)]);
    const start = clock.now();
    const reformed = group.reform(new UnavailableError(`task ${W1} declared failed: no heartbeat`, declared(W1)));
    await settle(clock);
    const e = await reformed.then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(ReplicaGroupError);
    expect((e as Error).message).toContain("the coordination service at grpc://127.0.0.1:1 is unreachable");
    expect(connectOptions).toEqual([{ unreachableTimeoutMs: 5000 }]);
    // Failed at once: no virtual time passed toward maxWaitSecs.
    expect(clock.now()).toBe(start);
  });

  it("tells a loss it waits for from the chief's loss and from other failures", () => {
    const { rejoin } = setup(2, []);
    // Waited for: a worker declared failed or gone from the ring, the chief's report naming it, a new generation.
    expect(rejoin.isLoss(new UnavailableError("a", declared(W0)))).toBe(true);
    expect(rejoin.isLoss(new UnavailableError("b", { failure: { kind: "peerLost", task: CHIEF } }))).toBe(true);
    expect(rejoin.isLoss(new UnavailableError(`${W1} left the replica group (UnavailableError: task ${W1} declared failed); the group waits for it (reported by task ${CHIEF})`, { failure: { kind: "peerLost", task: W1 } }))).toBe(true);
    expect(rejoin.isLoss(new AbortedError("generation 1 ended: the chief started a new generation; connect again"))).toBe(true);
    // Not waited for: the chief gone, a reported failure, a collective's other errors.
    expect(rejoin.isLoss(new UnavailableError("c", declared(CHIEF)))).toBe(false);
    expect(rejoin.isLoss(new UnavailableError("d", declared(W1, CHIEF)))).toBe(false);
    expect(rejoin.isLoss(new UnavailableError("e", embeddedGone))).toBe(false);
    expect(rejoin.isLoss(new UnknownError("f", { failure: { kind: "reported", reporter: W0, errorName: "UnknownError" } }))).toBe(false);
    expect(rejoin.isLoss(new UnavailableError("g", { failure: { kind: "reported", reporter: W0, errorName: "UnavailableError" } }))).toBe(false);
    expect(rejoin.isLoss(new DeadlineExceededError(`the collective timed out waiting for rank 2 (${W1})`))).toBe(false);
  });

  it("a termination notice ends the wait at once with the notice", async () => {
    const { clock, group, rejoin } = setup(1, []);
    const reformed = group.reform(new AbortedError("generation 1 ended: the chief started a new generation; connect again"));
    await settle(clock);
    const notice = new CancelledError("cluster preemption: task worker:1 got a termination notice (SIGTERM)");
    rejoin.cancel(notice);
    await settle(clock);
    const e = await reformed.then(
      () => undefined,
      (f: unknown) => f,
    );
    expect((e as ReplicaGroupError).cause).toBe(notice);
    expect(group.state).toBe("failed");
  });

  it("a termination notice goes out on the transport it has, and again on the ring re-formed after it; notices heard on any ring reach the listeners once per task", async () => {
    const announcing = (rank: number) => {
      const listeners: ((task: string, rank: number) => void)[] = [];
      return Object.assign(transport(rank), {
        announced: 0,
        announceNotice(this: { announced: number }) {
          this.announced++;
        },
        onNoticeHeard: (f: (task: string, rank: number) => void) => void listeners.push(f),
        hear: (task: string) => listeners.forEach((f) => f(task, TASKS.indexOf(task))),
      });
    };
    const group = new ReplicaGroup(1, TASKS);
    const first = announcing(1);
    const second = announcing(1);
    const heard: string[] = [];
    group.onNoticeHeard((t, r) => heard.push(`${r} ${t}`));
    // Before any transport: announced as soon as one is attached.
    group.announceNotice();
    group.attach(first);
    expect(first.announced).toBe(1);
    first.hear(W1);
    first.hear(W1);
    let next!: (c: Collective) => void;
    group.rejoinWith(() => new Promise<Collective>((ok) => (next = ok)));
    const reforming = group.reform(new UnavailableError("lost", declared(CHIEF)));
    await flush();
    next(second);
    await reforming;
    expect(second.announced).toBe(1);
    second.hear(W1);
    second.hear(CHIEF);
    expect(heard).toEqual([`2 ${W1}`, `0 ${CHIEF}`]);
  });

  it("without a rejoin (under launch) a failed call fails the group for good", async () => {
    const group = new ReplicaGroup(1, TASKS);
    group.attach(transport(1));
    const call = group.allReduce(new Float32Array(4), "mean");
    await flush();
    group.onPeerFailed(W1);
    const e = await call.then(
      () => undefined,
      (f: unknown) => f,
    );
    expect(e).toBeInstanceOf(ReplicaGroupError);
    expect((e as ReplicaGroupError).cause).toBeInstanceOf(UnavailableError);
    await expect(group.allReduce(new Float32Array(1), "sum")).rejects.toBe(e);
  });
});

describe("a failure while a preemption is under way (GroupRejoin.underPreemption), and a cancelled wait", () => {
  it("a loss the group waits for (a lost worker, the chief's new generation, a dropped link to the chief as it re-forms): every rank is told; the chief declared failed or anything else: the step fails with it as it is", () => {
    const { rejoin } = setup(1, []);
    const lostWorker = new UnavailableError(`task ${W1} declared failed`, declared(W1));
    const lostChief = new UnavailableError(`task ${CHIEF} declared failed`, declared(CHIEF));
    const peerChief = new UnavailableError("rank 0 closed its connection", { failure: { kind: "peerLost", task: CHIEF } });
    expect(rejoin.underPreemption(lostWorker)).toBe("tell");
    expect(rejoin.underPreemption(new AbortedError("generation 1 ended"))).toBe("tell");
    // The chief closes its ring to re-form it: a live chief, not a loss of it.
    expect(rejoin.underPreemption(peerChief)).toBe("tell");
    // Nobody can save: the agreement exits 43.
    expect(rejoin.underPreemption(lostChief)).toBe("fail");
    expect(rejoin.underPreemption(new UnknownError("a bug"))).toBe("fail");
  });

  it("cancel ends the wait at once, though its registration goes on until its next turn", async () => {
    const { rejoin, group } = setup(1, []);
    expect(rejoin.waiting).toBe(false);
    const lostWorker = new UnavailableError(`task ${W1} declared failed`, declared(W1));
    const reform = group.reform(lostWorker);
    await flush();
    expect(rejoin.waiting).toBe(true);
    rejoin.cancel(lostWorker);
    expect(rejoin.waiting).toBe(false);
    await expect(reform).rejects.toBeInstanceOf(ReplicaGroupError);
  });
});
