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
import { RecordingLogger } from "../../src/testing/RecordingLogger.js";
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

const coordinator = (store: PreemptionKeyValueStore, id: number, clock: VirtualClock, logger = new RecordingLogger()) =>
  new ClusterPreemptionCoordinator({
    store,
    id,
    workers: ["chief:0", "worker:0", "worker:1"],
    isChief: id === 0,
    replicaStop: vote(),
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
    const logger = new RecordingLogger();
    const chief = coordinator(store(), 0, clock, logger);
    const noticed = coordinator(store(), 2, clock);
    noticed.notifyTermination(clock.now());
    await flush();
    expect(chief.afterStepFailure(lostRank(W0), 17)).toEqual({ save: true, exit: true, deadlineMs: undefined });
    expect(logger.messages("warn").join("\n")).toMatch(/chief:0 saves at run 17, its last completed step, and exits/);
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
