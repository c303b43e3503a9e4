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

import { AbortedError, AlreadyExistsError, CancelledError, DeadlineExceededError, UnavailableError } from "../../src/errors.js";
import { CHIEF_LOST_EXIT_CODE, ChiefLostError, type ChiefLossRecovery } from "../../src/preemption/PreemptionCluster.js";
import { ClusterPreemptionCoordinator } from "../../src/preemption/ClusterPreemptionCoordinator.js";
import type { PreemptionDecision } from "../../src/preemption/PreemptionCoordinator.js";
import { RecordingLogger } from "../../src/testing/RecordingLogger.js";
import { flush, VirtualClock } from "../../src/testing/VirtualClock.js";

const PREFIX = "monitored-session/preemption";
const TASKS = ["chief:0", "worker:0", "worker:1"];

/** A store whose generation the test sets, and whose pending gets it fails (the chief lost). */
const scriptedStore = (clock: VirtualClock) => {
  const values = new Map<string, string>();
  const waiters = new Map<string, { ok: (v: string) => void; fail: (e: unknown) => void }[]>();
  const store = {
    generation: 1 as number | undefined,
    inserted: [] as string[],
    insert: async (key: string, value: string): Promise<void> => {
      if (values.has(key)) throw new AlreadyExistsError(key);
      values.set(key, value);
      store.inserted.push(key);
      for (const w of waiters.get(key) ?? []) w.ok(value);
      waiters.delete(key);
    },
    get: (key: string, options?: { readonly timeoutMs?: number }): Promise<string> =>
      new Promise<string>((ok, fail) => {
        const v = values.get(key);
        if (v !== undefined) return ok(v);
        waiters.set(key, [...(waiters.get(key) ?? []), { ok, fail }]);
        clock.setTimer(options?.timeoutMs ?? 60_000, () => fail(new DeadlineExceededError(`no ${key}`)));
      }),
    reportErrorToCluster: async (): Promise<void> => undefined,
    /** Every pending get fails with `e`, as a client's calls do when the cluster fails. */
    failPending: (e: unknown): void => {
      for (const ws of waiters.values()) for (const w of ws) w.fail(e);
      waiters.clear();
    },
    pending: (): string[] => [...waiters.keys()],
  };
  return store;
};

/** A recovery the test drives: `follow` hands out one promise per loss; `noticed` ends the one under way. */
const scriptedRecovery = () => {
  let settle: { ok: () => void; fail: (e: unknown) => void } | undefined;
  const r = {
    follows: [] as { error: unknown; generation: number | undefined }[],
    notices: 0,
    follow: (error: unknown, generation: number | undefined): Promise<void> | undefined => {
      if (!(error instanceof AbortedError)) return undefined;
      r.follows.push({ error, generation });
      return new Promise<void>((ok, fail) => (settle = { ok, fail }));
    },
    noticed: (): ChiefLostError | undefined => {
      r.notices += 1;
      if (settle === undefined) return undefined;
      const lost = new ChiefLostError("worker:0 stops for a termination notice while its chief /job:chief/replica:0/task:0 is lost (AbortedError: generation 1 ended): nobody can write the checkpoint");
      settle.fail(lost);
      settle = undefined;
      return lost;
    },
    back: (): void => {
      settle?.ok();
      settle = undefined;
    },
    failed: (e: unknown): void => {
      settle?.fail(e);
      settle = undefined;
    },
  };
  return r satisfies ChiefLossRecovery;
};

/** worker:0 (id 1) under `"chiefSaves"`, restored in generation 1 (the others' restored keys are there). */
const worker = async () => {
  const clock = new VirtualClock();
  const store = scriptedStore(clock);
  const recovery = scriptedRecovery();
  const logger = new RecordingLogger();
  const coordinator = new ClusterPreemptionCoordinator({
    store,
    id: 1,
    workers: TASKS,
    isChief: false,
    agreement: "chiefSaves",
    chiefRecovery: recovery,
    isChiefLoss: (e) => e instanceof AbortedError,
    chiefTask: "/job:chief/replica:0/task:0",
    clock,
    logger,
  });
  await store.insert(`${PREFIX}/1/restored/0`, "1");
  await store.insert(`${PREFIX}/1/restored/2`, "1");
  await coordinator.restored();
  await flush();
  return { clock, store, recovery, logger, coordinator };
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
    expect(store.inserted).toContain(`${PREFIX}/2/restored/1`);
    expect(store.pending()).toEqual([`${PREFIX}/2/claim`]);
    // worker:1 got a notice in the new generation: this worker hears it, and its recovery no longer waits out a loss.
    await store.insert(`${PREFIX}/2/claim`, "worker:1");
    await flush();
    expect(coordinator.terminationReceived).toBe(true);
    expect(coordinator.claimHeardFrom).toBe("worker:1");
    expect(recovery.notices).toBe(1);
    await coordinator.close();
  });

  it("a notice while it waits for the chief ends the wait: no claim anywhere, and 43 without a save, at the next boundary or from the step the wait was in", async () => {
    const { store, recovery, coordinator, logger } = await worker();
    store.failPending(new AbortedError("generation 1 ended"));
    await flush();
    coordinator.notifyTermination(0);
    await flush();
    expect(recovery.notices).toBe(1);
    expect(store.inserted.filter((k) => k.endsWith("/claim"))).toEqual([]);
    expect(coordinator.terminationReceived).toBe(true);
    const reason = `worker:0 stops for a termination notice while its chief /job:chief/replica:0/task:0 is lost (AbortedError: generation 1 ended): nobody can write the checkpoint: exiting with ${CHIEF_LOST_EXIT_CODE} without saving (the restart resumes from the last checkpoint)`;
    // The step that waited for the chief raises the recovery's ChiefLostError.
    expect(coordinator.afterStepFailure(new ChiefLostError("from the step"), 7)).toEqual({ save: false, exitWithoutSave: { code: CHIEF_LOST_EXIT_CODE, reason } });
    expect(await decide(coordinator.beforeStep(7, 10))).toEqual({ save: false, exitWithoutSave: { code: CHIEF_LOST_EXIT_CODE, reason } });
    // Nothing is waited for before the exit: no acknowledgement, no warning.
    await coordinator.beforeExit();
    expect(logger.messages().filter((l) => l.startsWith("WARN"))).toEqual([]);
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

  it("a step error that is not ChiefLostError, with no notice, is left to the step (no decision)", async () => {
    const { coordinator } = await worker();
    expect(coordinator.afterStepFailure(new CancelledError("something else"), 3)).toBeUndefined();
    await coordinator.close();
  });
});
