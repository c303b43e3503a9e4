/**
 * A data-parallel group that loses a rank while it stops for a preemption
 * (ClusterPreemptionCoordinator.afterStepFailure): the stop vote writes the claim too, every rank
 * hears it, and a step that then fails for a lost rank ends in the chief's save of its last
 * completed run and exit 42 on every live rank; with the chief lost, 43 without a save; anything
 * else stands as the step's error. In-process, on the virtual clock.
 */
import { describe, expect, it } from "vitest";

import { AlreadyExistsError, DeadlineExceededError, ResourceExhaustedError, UnavailableError } from "../../src/errors.js";
import type { PreemptionKeyValueStore, ReplicaStop } from "../../src/preemption/PreemptionCluster.js";
import { ClusterPreemptionCoordinator } from "../../src/preemption/ClusterPreemptionCoordinator.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { flush, VirtualClock } from "../../src/testing/VirtualClock.js";

const CHIEF = "/job:chief/replica:0/task:0";
const W0 = "/job:worker/replica:0/task:0";

/** One key-value store shared by the tasks: a blocking get, an insert-if-absent. */
const sharedStore = (clock: VirtualClock): (() => PreemptionKeyValueStore) => {
  const values = new Map<string, string>();
  const waiters = new Map<string, ((v: string) => void)[]>();
  return () => ({
    generation: 1,
    insert: async (key, value) => {
      if (values.has(key)) throw new AlreadyExistsError(key);
      values.set(key, value);
      for (const w of waiters.get(key) ?? []) w(value);
      waiters.delete(key);
    },
    get: (key, options) =>
      new Promise<string>((resolve, reject) => {
        const v = values.get(key);
        if (v !== undefined) return resolve(v);
        waiters.set(key, [...(waiters.get(key) ?? []), resolve]);
        clock.setTimer(options?.timeoutMs ?? 60_000, () => reject(new DeadlineExceededError(`no ${key}`)));
      }),
    reportErrorToCluster: async () => undefined,
  });
};

const vote = (): ReplicaStop & { requested: boolean } => {
  const v = {
    requested: false,
    stopAgreed: false,
    votes: true,
    requestStop: () => {
      v.requested = true;
    },
  };
  return v;
};

/** A coordination service that stopped answering (its host, the chief, is frozen): every call stays pending. */
const frozenStore = (): PreemptionKeyValueStore => ({
  generation: 1,
  insert: () => new Promise<void>(() => undefined),
  get: () => new Promise<string>(() => undefined),
  reportErrorToCluster: () => new Promise<void>(() => undefined),
});

const TASKS = ["chief:0", "worker:0", "worker:1"];

/** The ranks' votes joined as the group's links join them: a rank's announced notice reaches every other rank once. */
const linkedVotes = (): (ReplicaStop & { requested: boolean; announced: number })[] => {
  const listeners: ((task: string, rank: number) => void)[][] = TASKS.map(() => []);
  return TASKS.map((task, rank) => {
    const v = {
      requested: false,
      stopAgreed: false,
      votes: true,
      requestStop: () => void (v.requested = true),
      announced: 0,
      announceNotice: () => {
        v.announced++;
        listeners.forEach((ls, other) => (other === rank ? undefined : ls.forEach((f) => f(`/job:${task.replace(":", "/replica:0/task:")}`, rank))));
      },
      onNoticeHeard: (f: (t: string, r: number) => void) => void listeners[rank]?.push(f),
    };
    return v;
  });
};

const coordinator = (store: PreemptionKeyValueStore, id: number, clock: VirtualClock, logger = new EventRecorder().logger(() => clock.now()), replicaStop: ReplicaStop = vote()) =>
  new ClusterPreemptionCoordinator({
    store,
    id,
    workers: TASKS,
    isChief: id === 0,
    replicaStop,
    chiefTask: CHIEF,
    isChiefLoss: (e) => e instanceof UnavailableError && e.failure?.kind === "declaredFailed" && e.failure.tasks.includes(CHIEF),
    clock,
    logger,
  });

const lostRank = (task: string): Error => new Error("the replica group failed", { cause: new UnavailableError(`task ${task} declared failed`, { failure: { kind: "declaredFailed", tasks: [task] } }) });

describe("a data-parallel group that loses a rank while it stops for a preemption", () => {
  it("the stop vote writes the claim; the chief, which heard it, saves its last completed run and exits; the noticed worker exits too", async () => {
    const clock = new VirtualClock();
    const store = sharedStore(clock);
    const events = new EventRecorder();
    const chief = coordinator(store(), 0, clock, events.logger(() => clock.now()));
    const noticed = coordinator(store(), 2, clock);
    noticed.notifyTermination(clock.now());
    await flush();
    expect(chief.afterStepFailure(lostRank(W0), 17)).toEqual({ save: true, exit: true, deadlineMs: undefined });
    expect(events.messages("warn").join("\n")).toMatch(/chief:0 saves at run 17, its last completed step, and exits/);
    expect(noticed.afterStepFailure(lostRank(W0), 17)).toMatchObject({ save: true, exit: true });
    await Promise.all([chief.close(), noticed.close()]);
  });

  it("the chief lost: a worker exits 43 without a save", async () => {
    const clock = new VirtualClock();
    const store = sharedStore(clock);
    const noticed = coordinator(store(), 2, clock);
    noticed.notifyTermination(clock.now());
    expect(noticed.afterStepFailure(lostRank(CHIEF), 5)).toMatchObject({ save: false, exitWithoutSave: { code: 43 } });
    const peer = new Error("x", { cause: new UnavailableError("link closed", { failure: { kind: "peerLost", task: CHIEF } }) });
    expect(noticed.afterStepFailure(peer, 5)).toMatchObject({ save: false, exitWithoutSave: { code: 43 } });
    await noticed.close();
  });

  it("the chief frozen with the service it hosts: the notice heard over the group's links alone makes the worker without one exit 43 too", async () => {
    const clock = new VirtualClock();
    const votes = linkedVotes();
    const events = new EventRecorder();
    const unnoticed = coordinator(frozenStore(), 1, clock, events.logger(() => clock.now()), votes[1]);
    const noticed = coordinator(frozenStore(), 2, clock, undefined, votes[2]);
    noticed.notifyTermination(clock.now());
    expect(votes[2]?.announced).toBe(1);
    expect(votes[2]?.requested).toBe(true);
    expect(events.messages("info").join("\n")).toContain("PreemptionCheckpointHandler: worker:1 got a termination notice; worker:0 stops where the tasks agree.");
    // The rank's name in the group is the claim's name for the task; a task with its own notice heard nobody.
    expect(unnoticed.claimHeardFrom).toBe("worker:1");
    expect(noticed.claimHeardFrom).toBeUndefined();
    expect(unnoticed.afterStepFailure(lostRank(CHIEF), 9)).toMatchObject({ save: false, exitWithoutSave: { code: 43 } });
    expect(noticed.afterStepFailure(lostRank(CHIEF), 9)).toMatchObject({ save: false, exitWithoutSave: { code: 43 } });
    // Without the notice over the links, the same failure would stand as the step's error (the claim never comes).
    const deaf = coordinator(frozenStore(), 1, clock, undefined, vote());
    expect(deaf.afterStepFailure(lostRank(CHIEF), 9)).toBeUndefined();
    // close() is bounded on a service that never answers (twice the liveness deadline).
    const closing = Promise.all([unnoticed.close(), noticed.close(), deaf.close()]);
    await clock.advanceSecs(21);
    await closing;
  });

  it("without a notice or a claim, or for a reported error, the step's error stands", async () => {
    const clock = new VirtualClock();
    const store = sharedStore(clock);
    const chief = coordinator(store(), 0, clock);
    expect(chief.afterStepFailure(lostRank(W0), 3)).toBeUndefined();
    const other = coordinator(store(), 1, clock);
    other.notifyTermination(clock.now());
    await flush();
    const reported = new ResourceExhaustedError("oom", { failure: { kind: "reported", reporter: W0, errorName: "ResourceExhaustedError" } });
    expect(chief.afterStepFailure(reported, 3)).toBeUndefined();
    expect(chief.afterStepFailure(new Error("plain"), 3)).toBeUndefined();
    await Promise.all([chief.close(), other.close()]);
  });
});
