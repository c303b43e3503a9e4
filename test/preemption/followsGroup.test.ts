/**
 * The agreement of a data-parallel group that outlives a lost rank (tasks started by hand: the
 * runtime's `GroupRejoin`), through `ReplicaStop.follow` and `ReplicaStop.preempted`: outside any
 * preemption, a re-form is waited out and the agreement's keys move to the group's next
 * generation (a claim written there is heard); a notice, or a claim heard, tells the group (the
 * runtime then ends a wait for a lost rank and tells every rank through the coordination
 * service); that report, raised by a step or heard by the watch between steps, makes the chief
 * save its last completed run and every rank exit; a re-form that fails is the next step's error.
 * In-process, on the virtual clock, with a scripted store and group. The real processes:
 * test/runtime/groupRejoinProcesses.process.test.ts.
 */
import { describe, expect, it } from "vitest";

import { AbortedError, CancelledError, DeadlineExceededError } from "../../src/errors.js";
import type { ReplicaStop } from "../../src/preemption/PreemptionCluster.js";
import { ClusterPreemptionCoordinator } from "../../src/preemption/ClusterPreemptionCoordinator.js";
import type { PreemptionDecision } from "../../src/preemption/PreemptionCoordinator.js";
import { ReplicaGroupError } from "../../src/runtime/replicaGroup.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { flush, VirtualClock } from "../../src/testing/VirtualClock.js";
import { scriptedStore } from "./scriptedStore.js";

const PREFIX = "monitored-session/preemption";
const TASKS = ["chief:0", "worker:0", "worker:1"];

/** A group the test drives: `follow` joins the one re-form under way (an AbortedError starts it); `back` ends it, telling every `onReformed` listener. */
const scriptedGroup = () => {
  let waiting: { ok: () => void; fail: (e: unknown) => void }[] = [];
  const reformed = new Set<() => void>();
  const g = {
    requested: false,
    stopAgreed: false,
    votes: true,
    requestStop: (): void => void (g.requested = true),
    follows: [] as { error: unknown; generation: number | undefined }[],
    preemptions: [] as { why: string; claimant: string | undefined }[],
    follow: (error: unknown, generation: number | undefined): Promise<void> | undefined => {
      if (!(error instanceof AbortedError)) return undefined;
      g.follows.push({ error, generation });
      return new Promise<void>((ok, fail) => void waiting.push({ ok, fail }));
    },
    preempted: (why: string, claimant?: string): void => void g.preemptions.push({ why, claimant }),
    onReformed: (f: () => void): (() => void) => {
      reformed.add(f);
      return () => void reformed.delete(f);
    },
    /** The lost rank is back: the group trains in its next generation. */
    back: (): void => {
      for (const f of reformed) f();
      for (const w of waiting.splice(0)) w.ok();
    },
    failed: (e: unknown): void => {
      const all = waiting;
      waiting = [];
      for (const w of all) w.fail(e);
    },
  };
  return g satisfies ReplicaStop;
};

/** Task `id` of the group in generation 1 (the chief is 0), whose handler completed `position.runCounter` runs. */
const setup = (id = 1, position = { runCounter: 0, inStep: false }) => {
  const clock = new VirtualClock();
  const store = scriptedStore(clock);
  const group = scriptedGroup();
  const events = new EventRecorder();
  const coordinator = new ClusterPreemptionCoordinator({ store, id, workers: TASKS, isChief: id === 0, replicaStop: group, chiefTask: "/job:chief/replica:0/task:0", position: () => position, clock, logger: events.logger(() => clock.now()) });
  return { clock, store, group, events, coordinator, position };
};

/** worker:1's report, as the coordination service returns it (typed: a `preemption` failure naming the reporter). */
const report = (): CancelledError =>
  new CancelledError("cluster preemption: task worker:1 got a termination notice (SIGTERM): every task exits with the preemption code", {
    failure: { kind: "preemption", reporter: "/job:worker/replica:0/task:1", notice: "SIGTERM" },
  });

const decide = async (d: PreemptionDecision | Promise<PreemptionDecision>): Promise<PreemptionDecision> => d;

describe("a data-parallel group that outlives a lost rank: the agreement follows it", () => {
  it("waits out a re-form outside any preemption and moves to the next generation, where a claim is heard and told to the group", async () => {
    const { store, group, coordinator } = setup();
    await store.insert(`${PREFIX}/1/restored/0`, "1");
    await store.insert(`${PREFIX}/1/restored/2`, "1");
    await coordinator.restored();
    await flush();
    expect(store.pending().sort()).toEqual([`${PREFIX}/1/claim`, `${PREFIX}/1/round0/proposal/1`]);
    const loss = new AbortedError("generation 1 ended: the chief opened generation 2");
    store.failPending(loss);
    await flush();
    // Both watches wait for the same re-form; nothing fails, nothing stops.
    expect(group.follows).toEqual([
      { error: loss, generation: 1 },
      { error: loss, generation: 1 },
    ]);
    expect(coordinator.pendingFailure).toBeUndefined();
    expect(await decide(coordinator.beforeStep(7, 10))).toEqual({ save: false });
    store.generation = 2;
    group.back();
    await flush();
    expect(store.pending().sort()).toEqual([`${PREFIX}/2/claim`, `${PREFIX}/2/round0/proposal/1`]);
    // The restarted rank's handler waits for this task's restore in the new generation.
    expect(store.inserted).toContain(`${PREFIX}/2/restored/1`);
    await store.insert(`${PREFIX}/2/claim`, "worker:1");
    await flush();
    expect(coordinator.claimHeardFrom).toBe("worker:1");
    // The runtime ends any later wait for a lost rank, and tells the others through the service.
    expect(group.preemptions).toEqual([{ why: "worker:1's termination notice", claimant: "worker:1" }]);
    await coordinator.close();
  });

  it("follows a re-form that its own calls never saw (etcd: the old generation's gets just wait): a claim in the old generation is not heard", async () => {
    const { store, group, coordinator } = setup();
    await flush();
    store.generation = 2;
    group.back();
    await flush();
    expect(store.pending().sort()).toEqual([`${PREFIX}/1/claim`, `${PREFIX}/1/round0/proposal/1`, `${PREFIX}/2/claim`, `${PREFIX}/2/round0/proposal/1`]);
    await store.insert(`${PREFIX}/1/claim`, "worker:1");
    await flush();
    expect(coordinator.claimHeardFrom).toBeUndefined();
    await store.insert(`${PREFIX}/2/claim`, "worker:1");
    await flush();
    expect(coordinator.claimHeardFrom).toBe("worker:1");
    await coordinator.close();
  });

  it("a notice votes, claims and tells the group (a wait for a lost rank ends there)", async () => {
    const { store, group, coordinator } = setup();
    coordinator.notifyTermination(0, undefined, "SIGTERM");
    await flush();
    expect(group.requested).toBe(true);
    expect(group.preemptions).toEqual([{ why: "SIGTERM", claimant: undefined }]);
    expect(store.inserted).toEqual([`${PREFIX}/1/claim`]);
    await coordinator.close();
  });

  it("the report raised by a step: the chief saves its last completed run, a worker stops there too; both exit", async () => {
    const chief = setup(0);
    expect(chief.coordinator.afterStepFailure(new ReplicaGroupError(report()), 17)).toMatchObject({ save: true, exit: true });
    expect(chief.events.messages("warn").join("\n")).toContain(
      "PreemptionCheckpointHandler: the replica group stopped for a termination notice (SIGTERM), told through the coordination service by worker:1 while the group could not step together; chief:0 saves at run 17, its last completed step, and exits.",
    );
    expect(chief.coordinator.claimHeardFrom).toBe("worker:1");
    // Once: the save that follows is not a second stop.
    expect(chief.coordinator.afterStepFailure(new ReplicaGroupError(report()), 17)).toBeUndefined();
    const worker = setup(1);
    expect(worker.coordinator.afterStepFailure(new ReplicaGroupError(report()), 17)).toMatchObject({ save: true, exit: true });
    await Promise.all([chief.coordinator.close(), worker.coordinator.close()]);
  });

  it("the report heard by the watch between steps: the next check saves at the boundary the task is at", async () => {
    const { store, group, coordinator, events } = setup(0);
    await flush();
    store.failPending(report());
    await flush();
    expect(group.follows).toEqual([]);
    expect(coordinator.pendingFailure).toBeUndefined();
    expect(await decide(coordinator.beforeStep(9, 10))).toMatchObject({ save: true, exit: true });
    expect(events.messages("warn").join("\n")).toContain("chief:0 saves at run 9, its last completed step, and exits.");
    await coordinator.close();
  });

  it("a re-form ended by the report (a notice elsewhere while the group waited) saves the same way", async () => {
    const { store, group, coordinator } = setup(0);
    await flush();
    store.failPending(new AbortedError("generation 1 ended"));
    await flush();
    group.failed(new ReplicaGroupError(report()));
    await flush();
    expect(await decide(coordinator.beforeStep(4, 10))).toMatchObject({ save: true, exit: true });
    await coordinator.close();
  });

  it("a re-form that fails (the rank did not come back within maxWaitSecs) is the next step's error", async () => {
    const { store, group, coordinator } = setup();
    await flush();
    store.failPending(new AbortedError("generation 1 ended"));
    await flush();
    const gaveUp = new DeadlineExceededError("worker:0 lost /job:worker/replica:0/task:1, which did not rejoin the replica group within 10 s (maxWaitSecs)");
    group.failed(gaveUp);
    await flush();
    expect(coordinator.pendingFailure).toBe(gaveUp);
    expect(() => coordinator.beforeStep(7, 10)).toThrow(gaveUp);
    await coordinator.close();
  });
  it("the run counter: each rank's restored key holds its runs, stored again after a re-form with the runs completed since; a worker takes the chief's (a rank that returns restored an older checkpoint)", async () => {
    // A survivor, the chief: restored at run 40, trained to 57 when the group re-formed.
    const chief = setup(0, { runCounter: 40, inStep: false });
    await chief.store.insert(`${PREFIX}/1/restored/1`, "40");
    await chief.store.insert(`${PREFIX}/1/restored/2`, "40");
    expect(await chief.coordinator.restored()).toBeUndefined();
    expect(await chief.store.get(`${PREFIX}/1/restored/0`)).toBe("40");
    chief.store.failPending(new AbortedError("generation 1 ended"));
    await flush();
    chief.position.runCounter = 57;
    chief.position.inStep = true;
    chief.store.generation = 2;
    chief.group.back();
    await flush();
    expect(await chief.store.get(`${PREFIX}/2/restored/0`)).toBe("57");
    await chief.coordinator.close();
    // The returning rank restored the chief's last checkpoint, at run 40: it counts the chief's 57.
    const back = setup(2, { runCounter: 40, inStep: false });
    await back.store.insert(`${PREFIX}/1/restored/0`, "57");
    await back.store.insert(`${PREFIX}/1/restored/1`, "57");
    expect(await back.coordinator.restored()).toBe(57);
    expect(await back.store.get(`${PREFIX}/1/restored/2`)).toBe("40");
    await back.coordinator.close();
    // A value that is no count is not taken.
    const odd = setup(1);
    await odd.store.insert(`${PREFIX}/1/restored/0`, "many");
    await odd.store.insert(`${PREFIX}/1/restored/2`, "3");
    expect(await odd.coordinator.restored()).toBeUndefined();
    await odd.coordinator.close();
  });
});
