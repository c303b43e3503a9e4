/**
 * The `"chiefSaves"` agreement of a worker that outlives its chief (a `run` worker started by
 * hand, `ChiefLossRecovery`): a loss of the chief outside any preemption is waited out with the
 * task's recovery, and the agreement moves to the chief's next generation (the restarted chief's
 * handler waits for this task's `restored/<id>` there, and a claim written there is heard); a
 * termination notice while the chief is lost ends the wait and exits 43 without a claim or a
 * save; a recovery that fails is the next step's error. In-process, on the virtual clock, with a
 * scripted store and recovery. The real processes: test/cli/workerRecovery.process.test.ts.
 */
import { describe, expect, it } from "vitest";

import { AbortedError, CancelledError, DeadlineExceededError, UnavailableError } from "../../src/errors.js";
import { CHIEF_LOST_EXIT_CODE, ChiefLostError, type ChiefLossRecovery } from "../../src/preemption/PreemptionCluster.js";
import { ClusterPreemptionCoordinator, type PreemptionAgreement } from "../../src/preemption/ClusterPreemptionCoordinator.js";
import type { PreemptionDecision } from "../../src/preemption/PreemptionCoordinator.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { flush, VirtualClock } from "../../src/testing/VirtualClock.js";
import { scriptedStore } from "./scriptedStore.js";

const PREFIX = "monitored-session/preemption";
const TASKS = ["chief:0", "worker:0", "worker:1"];

/** A recovery the test drives: `follow` joins the one wait under way; `noticed` ends it. */
const scriptedRecovery = () => {
  let waiting: { ok: () => void; fail: (e: unknown) => void }[] = [];
  const settle = (f: (w: { ok: () => void; fail: (e: unknown) => void }) => void): boolean => {
    const all = waiting;
    waiting = [];
    all.forEach(f);
    return all.length > 0;
  };
  const r = {
    follows: [] as { error: unknown; generation: number | undefined }[],
    notices: [] as string[],
    follow: (error: unknown, generation: number | undefined): Promise<void> | undefined => {
      if (!(error instanceof AbortedError)) return undefined;
      r.follows.push({ error, generation });
      return new Promise<void>((ok, fail) => void waiting.push({ ok, fail }));
    },
    noticed: (why: string): ChiefLostError | undefined => {
      r.notices.push(why);
      const lost = new ChiefLostError("worker:0 stops for its termination notice while its chief /job:chief/replica:0/task:0 is lost (AbortedError: generation 1 ended): nobody can write the checkpoint");
      return settle((w) => w.fail(lost)) ? lost : undefined;
    },
    listeners: new Set<() => void>(),
    onRegistered: (listener: () => void): (() => void) => {
      r.listeners.add(listener);
      return () => r.listeners.delete(listener);
    },
    /** The chief is back: the task registered in its next generation (every listener told), and the wait under way resolves. */
    back: (): void => {
      settle((w) => w.ok());
      for (const listener of r.listeners) listener();
    },
    failed: (e: unknown): void => void settle((w) => w.fail(e)),
  };
  return r satisfies ChiefLossRecovery;
};

/** worker:0 (id 1) under `agreement` (default `"chiefSaves"`), in generation 1, before its handler's restore. */
const setup = (agreement: PreemptionAgreement = "chiefSaves") => {
  const clock = new VirtualClock();
  const store = scriptedStore(clock);
  const recovery = scriptedRecovery();
  const events = new EventRecorder();
  const logger = events.logger(() => clock.now());
  const coordinator = new ClusterPreemptionCoordinator({
    store,
    id: 1,
    workers: TASKS,
    isChief: false,
    agreement,
    chiefRecovery: recovery,
    isChiefLoss: (e) => e instanceof AbortedError,
    chiefTask: "/job:chief/replica:0/task:0",
    clock,
    logger,
  });
  return { clock, store, recovery, events, logger, coordinator };
};

/** {@link setup}, restored (the handler's creation done). */
const worker = async () => {
  const t = setup();
  await t.coordinator.restored();
  await flush();
  return t;
};

/**
 * After the chief came back in generation 2: the worker's restored key is there and its watch
 * waits on `key` there; `value`, written there by worker:1's notice, is heard, and the worker's
 * recovery is told (a later loss is not waited out).
 */
const hearsInGeneration2 = async (t: Pick<ReturnType<typeof setup>, "store" | "recovery" | "coordinator">, key: string, value: string): Promise<void> => {
  expect(t.store.inserted).toContain(`${PREFIX}/2/restored/1`);
  expect(t.store.pending()).toEqual([`${PREFIX}/2/${key}`]);
  await t.store.insert(`${PREFIX}/2/${key}`, value);
  await flush();
  expect(t.coordinator.terminationReceived).toBe(true);
  expect(t.coordinator.claimHeardFrom).toBe("worker:1");
  expect(t.recovery.notices).toEqual(["worker:1's termination notice"]);
};

/** The chief lost (a watch's call fails), then this task's notice: its recovery is told at once, and no claim is written anywhere. */
const noticeWhileWaiting = async (t: Pick<ReturnType<typeof setup>, "store" | "recovery" | "coordinator">): Promise<void> => {
  t.store.failPending(new AbortedError("generation 1 ended"));
  await flush();
  t.coordinator.notifyTermination(0);
  await flush();
  expect(t.recovery.notices).toEqual(["its termination notice"]);
  expect(t.store.inserted.filter((k) => k.endsWith("/claim"))).toEqual([]);
  // The ended wait is no failure of its own: the next check exits with 43.
  expect(t.coordinator.pendingFailure).toBeUndefined();
};

const decide = async (d: PreemptionDecision | Promise<PreemptionDecision>): Promise<PreemptionDecision> => d;

describe('"chiefSaves": a worker that outlives its chief', () => {
  it("follows the chief into its next generation: its restored key is inserted there, and a claim written there is heard", async () => {
    const { store, recovery, coordinator } = await worker();
    expect(store.pending()).toEqual([`${PREFIX}/1/claim`]);
    const loss = new AbortedError("generation 1 ended");
    store.failPending(loss);
    await flush();
    expect(recovery.follows).toEqual([{ error: loss, generation: 1 }]);
    // Waiting for the chief: no failure for the next step, and nothing stops.
    expect(coordinator.pendingFailure).toBeUndefined();
    expect(await decide(coordinator.beforeStep(7, 10))).toEqual({ save: false });
    store.generation = 2;
    recovery.back();
    await flush();
    // worker:1 got a notice in the new generation: this worker hears it, and its recovery no longer waits out a loss.
    await hearsInGeneration2({ store, recovery, coordinator }, "claim", "worker:1");
    await coordinator.close();
  });

  it("a notice while it waits for the chief ends the wait: no claim anywhere, and 43 without a save, at the next boundary or from the step the wait was in", async () => {
    const { store, recovery, coordinator, events } = await worker();
    await noticeWhileWaiting({ store, recovery, coordinator });
    expect(coordinator.terminationReceived).toBe(true);
    const reason = `worker:0 stops for its termination notice while its chief /job:chief/replica:0/task:0 is lost (AbortedError: generation 1 ended): nobody can write the checkpoint: exiting with ${CHIEF_LOST_EXIT_CODE} without saving (the restart resumes from the last checkpoint)`;
    // The step that waited for the chief raises the recovery's ChiefLostError.
    expect(coordinator.afterStepFailure(new ChiefLostError("from the step"), 7)).toEqual({ save: false, exitWithoutSave: { code: CHIEF_LOST_EXIT_CODE, reason } });
    expect(await decide(coordinator.beforeStep(7, 10))).toEqual({ save: false, exitWithoutSave: { code: CHIEF_LOST_EXIT_CODE, reason } });
    // Nothing is waited for before the exit: no acknowledgement, no warning.
    await coordinator.beforeExit();
    expect(events.messages("warn")).toEqual([]);
    await coordinator.close();
  });

  it("a recovery that fails (the chief did not come back within maxWaitSecs) is the next step's error", async () => {
    const { store, recovery, coordinator } = await worker();
    store.failPending(new AbortedError("generation 1 ended"));
    await flush();
    const gaveUp = new DeadlineExceededError("worker:0 lost the chief /job:chief/replica:0/task:0, which did not come back within 10 s (maxWaitSecs)");
    recovery.failed(gaveUp);
    await flush();
    expect(coordinator.pendingFailure).toBe(gaveUp);
    expect(() => coordinator.beforeStep(7, 10)).toThrow(gaveUp);
    await coordinator.close();
  });

  it("a failure that is not a loss of the chief (another worker declared failed) is not waited out: the next step raises it", async () => {
    const { store, recovery, coordinator } = await worker();
    const declared = new UnavailableError("task worker:1 declared failed", { failure: { kind: "declaredFailed", tasks: ["/job:worker/replica:0/task:1"] } });
    store.failPending(declared);
    await flush();
    expect(recovery.follows).toEqual([]);
    expect(coordinator.pendingFailure).toBe(declared);
    await coordinator.close();
  });

  it("a worker's restored() waits for nobody (it never saves); a loss of the chief while it inserts its key is followed, and the key inserted in the next generation", async () => {
    const t = setup();
    const insert = t.store.insert;
    let lose = true;
    t.store.insert = async (key: string, value: string): Promise<void> => {
      if (lose && key === `${PREFIX}/1/restored/1`) {
        lose = false;
        throw new AbortedError("generation 1 ended");
      }
      return insert(key, value);
    };
    let done = false;
    const restored = t.coordinator.restored().then(() => void (done = true));
    await flush();
    expect(t.recovery.follows).toHaveLength(1);
    expect(done).toBe(false);
    t.store.generation = 2;
    t.recovery.back();
    await restored;
    // No other task restored, in either generation: the worker did not wait for them.
    expect(t.store.inserted).toEqual([`${PREFIX}/2/restored/1`]);
    await t.coordinator.close();
  });

  it("a closed handler whose task goes on (an evaluation) answers in the chief's next generation: its restored key and its closed acknowledgement are there, so the restarted chief waits for neither", async () => {
    const { store, recovery, coordinator } = await worker();
    await coordinator.close();
    expect(store.inserted).toEqual([`${PREFIX}/1/restored/1`, `${PREFIX}/1/round0/ack/1`]);
    // The task's own recovery (its runtime's watch) registered it in generation 2.
    store.generation = 2;
    recovery.back();
    await flush();
    expect(store.inserted.slice(2).sort()).toEqual([`${PREFIX}/2/restored/1`, `${PREFIX}/2/round0/ack/1`]);
    // And in each generation after that.
    store.generation = 3;
    recovery.back();
    await flush();
    expect(store.inserted.slice(4).sort()).toEqual([`${PREFIX}/3/restored/1`, `${PREFIX}/3/round0/ack/1`]);
  });

  it("a handler closed while its watch follows the chief answers in the generation the chief comes back in, not only in the one it left", async () => {
    const { store, recovery, coordinator } = await worker();
    store.failPending(new AbortedError("generation 1 ended"));
    await flush();
    expect(recovery.follows).toHaveLength(1);
    await coordinator.close();
    store.generation = 2;
    recovery.back();
    await flush();
    expect(store.inserted.filter((k) => k.startsWith(`${PREFIX}/2/`)).sort()).toEqual([`${PREFIX}/2/restored/1`, `${PREFIX}/2/round0/ack/1`]);
    // The watch ended with the close: nothing of this task waits in generation 2.
    expect(store.pending()).toEqual([]);
  });

  it("a handler closed after its task registered in the chief's next generation, before its own follower moved its keys there: it answers there", async () => {
    const { store, recovery, coordinator } = await worker();
    store.failPending(new AbortedError("generation 1 ended"));
    await flush();
    store.generation = 2;
    // Registered: the wait resolves, but the follower's continuation has not run yet when the program closes the handler.
    recovery.back();
    const closing = coordinator.close();
    await flush();
    await closing;
    expect(store.inserted.filter((k) => k.startsWith(`${PREFIX}/2/`)).sort()).toEqual([`${PREFIX}/2/restored/1`, `${PREFIX}/2/round0/ack/1`]);
  });

  it("a closed handler no longer answers for its task once a newer handler was created on it (that one answers for itself)", async () => {
    const first = await worker();
    await first.coordinator.close();
    const newer = new ClusterPreemptionCoordinator({
      store: first.store,
      id: 1,
      workers: TASKS,
      isChief: false,
      agreement: "chiefSaves",
      chiefRecovery: first.recovery,
      isChiefLoss: (e) => e instanceof AbortedError,
      clock: first.clock,
      logger: first.logger,
    });
    first.store.generation = 2;
    first.recovery.back();
    await flush();
    expect(first.store.inserted.filter((k) => k.startsWith(`${PREFIX}/2/`))).toEqual([]);
    // And its listener is gone.
    expect(first.recovery.listeners.size).toBe(0);
    await newer.close();
  });

  it("a step error that is not ChiefLostError, with no notice, is left to the step (no decision)", async () => {
    const { coordinator } = await worker();
    expect(coordinator.afterStepFailure(new CancelledError("something else"), 3)).toBeUndefined();
    await coordinator.close();
  });
});

describe('the default agreement ("agreedRun"): a worker that outlives its chief', () => {
  /** worker:0 under "agreedRun", restored in generation 1 (it waits for the others' restores: they are there). */
  const agreedWorker = async () => {
    const t = setup("agreedRun");
    await t.store.insert(`${PREFIX}/1/restored/0`, "1");
    await t.store.insert(`${PREFIX}/1/restored/2`, "1");
    await t.coordinator.restored();
    await flush();
    return t;
  };

  it("its watch follows the chief into the next generation: a proposal written there is heard, and a later loss is not waited out", async () => {
    const { store, recovery, coordinator } = await agreedWorker();
    expect(store.pending()).toEqual([`${PREFIX}/1/round0/proposal/1`]);
    store.failPending(new AbortedError("generation 1 ended"));
    await flush();
    expect(recovery.follows).toHaveLength(1);
    expect(coordinator.pendingFailure).toBeUndefined();
    store.generation = 2;
    recovery.back();
    await flush();
    await hearsInGeneration2({ store, recovery, coordinator }, "round0/proposal/1", JSON.stringify({ step: 9, exit: true, by: "worker:1" }));
    await coordinator.close();
  });

  it("a chief loss while its handler waits for the others' restores is followed: it restores again in the next generation, and waits for the others there", async () => {
    const t = setup("agreedRun");
    let done = false;
    const restored = t.coordinator.restored().then(() => void (done = true));
    await flush();
    expect(t.store.inserted).toEqual([`${PREFIX}/1/restored/1`]);
    t.store.failPending(new AbortedError("generation 1 ended"));
    await flush();
    t.store.generation = 2;
    t.recovery.back();
    await flush();
    expect(t.store.inserted).toEqual([`${PREFIX}/1/restored/1`, `${PREFIX}/2/restored/1`]);
    expect(done).toBe(false);
    await t.store.insert(`${PREFIX}/2/restored/0`, "1");
    await t.store.insert(`${PREFIX}/2/restored/2`, "1");
    await restored;
    await t.coordinator.close();
  });

  it("a closed handler answers in the chief's next generation with every mark of its round and its restored key (the restarted chief leads rounds and waits for restores)", async () => {
    const { store, recovery, coordinator } = await agreedWorker();
    await coordinator.close();
    const before = store.inserted.length;
    store.generation = 2;
    recovery.back();
    await flush();
    expect(store.inserted.slice(before).sort()).toEqual([`${PREFIX}/2/restored/1`, ...["ack", "hold", "proposal", "step"].map((k) => `${PREFIX}/2/round0/${k}/1`)]);
  });

  it("a notice while it waits for the chief: 43 without a claim or a save", async () => {
    const { store, recovery, coordinator } = await agreedWorker();
    await noticeWhileWaiting({ store, recovery, coordinator });
    const exit43 = { save: false, exitWithoutSave: expect.objectContaining({ code: CHIEF_LOST_EXIT_CODE }) as unknown };
    expect(await decide(coordinator.beforeStep(7, 10))).toEqual(exit43);
    expect(coordinator.afterStepFailure(new ChiefLostError("from the step"), 7)).toEqual(exit43);
    await coordinator.close();
  });
});
