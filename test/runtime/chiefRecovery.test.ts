/**
 * A worker's recovery from the loss of its chief (src/runtime/chiefRecovery.ts), on a virtual clock
 * with a scripted coordination client: which errors are a loss of the chief, the deadline
 * (`maxWaitSecs`, named in one line), cancellation by a termination notice, and the session's
 * side (the hook raises UnavailableError until the session starts from the chief's new values).
 * The real-process scenarios are in test/cli/workerRecovery.process.test.ts.
 */
import { describe, expect, it } from "vitest";

import { ChiefRecovery, MODEL_READY_KEY } from "../../src/runtime/chiefRecovery.js";
import type { ChiefModel, ChiefModelState } from "../../src/session/ChiefModel.js";
import type { CoordinationClient } from "../../src/cluster/coordination/CoordinationClient.js";
import { AbortedError, CancelledError, DeadlineExceededError, OpError, UnauthenticatedError, UnavailableError, UnknownError } from "../../src/errors.js";
import { silentLogger, type Logger } from "../../src/Logger.js";
import type { Session } from "../../src/session/Session.js";
import type { HookEnv, SessionRunContext } from "../../src/hook/SessionRunHook.js";
import type { Coordinator } from "../../src/coordinator/Coordinator.js";
import type { RuntimeEventBody } from "../../src/runtime/events.js";
import { flush, VirtualClock } from "../../src/testing/VirtualClock.js";
import { ChiefLostError } from "../../src/preemption/PreemptionCluster.js";

const CHIEF = "/job:chief/replica:0/task:0";
const TASKS = [CHIEF, "/job:worker/replica:0/task:0", "/job:worker/replica:0/task:1"];

/** A client whose generation and model-ready key the test sets; `connect` is scripted per test. */
const setup = (connect: (timeoutMs: number) => Promise<void>, clock = new VirtualClock({ autoAdvance: true }), logger: Logger = silentLogger) => {
  const state = { generation: 1 as number | undefined, ready: true, barriers: 0 };
  const emitted: RuntimeEventBody[] = [];
  const client = {
    get generation() {
      return state.generation;
    },
    get: (key: string) => (key === MODEL_READY_KEY && state.ready ? Promise.resolve("1") : Promise.reject(new DeadlineExceededError(`get of ${key} timed out`))),
  } as unknown as CoordinationClient;
  const recovery = new ChiefRecovery({
    client,
    name: "worker:0",
    chief: CHIEF,
    tasks: TASKS,
    maxWaitSecs: 60,
    connect,
    startBarrier: async () => {
      state.barriers += 1;
    },
    clock,
    logger,
    emit: (e) => void emitted.push(e),
  });
  return { state, recovery, clock, emitted };
};

const chiefModel = (): ChiefModel & { pulls: number } => {
  const m = {
    address: "grpc://127.0.0.1:1",
    pulls: 0,
    pull: async (): Promise<ChiefModelState> => {
      m.pulls += 1;
      return { ready: true, values: new Map(), globalStep: 3, origin: "the chief" };
    },
  };
  return m;
};

const createSession = async (recovery: ChiefRecovery): Promise<void> => {
  await recovery.hook.afterCreateSession?.({} as Session, {} as Coordinator);
};
const beforeRun = (recovery: ChiefRecovery): unknown => recovery.hook.beforeRun?.({} as SessionRunContext);
/** A monitored session of the task begins: its hooks run (the recovery's among them). */
const begin = (recovery: ChiefRecovery): unknown => recovery.hook.begin?.({} as HookEnv);

/** The embedded service gone, as its transports say it. */
const EMBEDDED_GONE = { failure: { kind: "serviceGone", backend: "embedded" } } as const;

describe("ChiefRecovery", () => {
  it("a loss of the chief is a new generation, the embedded service gone, or the chief alone declared failed; nothing else (decided on the failure, never the words)", () => {
    const { recovery } = setup(() => Promise.resolve());
    const loss = (e: OpError): boolean => recovery.isChiefLoss(e);
    const embeddedGone = { failure: { kind: "serviceGone", backend: "embedded" } } as const;
    expect(loss(new AbortedError("generation 1 ended: the chief restarted and started a new generation; task x must connect again"))).toBe(true);
    expect(loss(new UnavailableError("the coordination service at grpc://127.0.0.1:7001 is unreachable (ECONNREFUSED); its host (the chief) stopped", embeddedGone))).toBe(true);
    expect(loss(new UnavailableError("xyzzy", embeddedGone))).toBe(true);
    expect(loss(new UnavailableError("plugh", { failure: { kind: "declaredFailed", tasks: [CHIEF] } }))).toBe(true);
    // The same words without the failure: not a loss (nothing reads the message).
    expect(loss(new UnavailableError("the coordination service's port closed (its host stopped)"))).toBe(false);
    expect(loss(new UnavailableError(`task ${CHIEF} declared failed: its liveness lease expired`))).toBe(false);
    // Another task, or the chief with another task: the cluster failed.
    expect(loss(new UnavailableError("a", { failure: { kind: "declaredFailed", tasks: ["/job:worker/replica:0/task:1"] } }))).toBe(false);
    expect(loss(new UnavailableError("b", { failure: { kind: "declaredFailed", tasks: [CHIEF, "/job:worker/replica:0/task:1"] } }))).toBe(false);
    // etcd gone, a reported error, a preemption, a lost peer.
    expect(loss(new UnavailableError("c", { failure: { kind: "serviceGone", backend: "etcd" } }))).toBe(false);
    expect(loss(new UnknownError("d", { failure: { kind: "reported", reporter: CHIEF, errorName: "UnknownError" } }))).toBe(false);
    expect(loss(new CancelledError("e", { failure: { kind: "preemption", reporter: CHIEF, notice: "SIGTERM" } }))).toBe(false);
    expect(loss(new UnavailableError("f", { failure: { kind: "peerLost", task: CHIEF } }))).toBe(false);
  });

  it("a task name that only starts like the chief's is not the chief", () => {
    const client = { generation: 1 } as unknown as CoordinationClient;
    const worker1 = "/job:worker/replica:0/task:1";
    const recovery = new ChiefRecovery({
      client,
      name: "worker:0",
      chief: worker1,
      tasks: [...TASKS, "/job:worker/replica:0/task:10"],
      maxWaitSecs: 60,
      connect: () => Promise.resolve(),
      startBarrier: () => Promise.resolve(),
      clock: new VirtualClock(),
      logger: silentLogger,
    });
    expect(recovery.isChiefLoss(new UnavailableError("task /job:worker/replica:0/task:10 declared failed", { failure: { kind: "declaredFailed", tasks: ["/job:worker/replica:0/task:10"] } }))).toBe(false);
    expect(recovery.isChiefLoss(new UnavailableError(`task ${worker1} declared failed`, { failure: { kind: "declaredFailed", tasks: [worker1] } }))).toBe(true);
  });

  it("after a loss the session is re-created from the chief's new values: beforeRun raises UnavailableError until then; the start barrier is passed again in the new generation", async () => {
    const { state, recovery, emitted } = setup(async () => {
      state.generation = 2;
    });
    const model = recovery.chiefModel(chiefModel());
    expect((await model.pull()).ready).toBe(true);
    await createSession(recovery);
    expect(state.barriers).toBe(1);
    expect(beforeRun(recovery)).toBeUndefined();

    state.ready = false;
    const cause = new UnavailableError("the coordination service at grpc://127.0.0.1:7001 is unreachable (ECONNRESET)");
    const back = recovery.recover(cause, 1);
    expect(() => beforeRun(recovery)).toThrow(new UnavailableError(`lost the chief ${CHIEF}: the session is re-created from its values once it is back`));
    // A second report of the same loss joins the recovery under way.
    expect(recovery.recover(cause, 1)).toBe(back);
    state.ready = true;
    await back;
    await model.pull();
    await createSession(recovery);
    expect(state.barriers).toBe(2);
    expect(beforeRun(recovery)).toBeUndefined();
    // The loss and the return are the task's events (one each: the second report joined the first).
    expect(emitted).toEqual([
      { type: "chiefLost", task: "worker:0", chief: CHIEF, waiting: true, maxWaitSecs: 60 },
      { type: "chiefReturned", task: "worker:0", generation: 2 },
    ]);
    // A loss seen by a call of generation 1, after the task registered in generation 2, is over.
    await recovery.recover(cause, 1);
    expect(beforeRun(recovery)).toBeUndefined();
  });

  it("a chief that does not come back within maxWaitSecs: DeadlineExceededError naming the chief and the setting, for the recovery and the session's wait", async () => {
    const clock = new VirtualClock();
    let attempts = 0;
    const { recovery } = setup(async () => {
      attempts += 1;
      await clock.sleep(10_000);
      throw new UnavailableError("the coordination service at grpc://127.0.0.1:7001 is unreachable (ECONNREFUSED); its host (the chief) stopped or has not started", EMBEDDED_GONE);
    }, clock);
    begin(recovery);
    const back = recovery.recover(new UnavailableError(`task ${CHIEF} declared failed`, { failure: { kind: "declaredFailed", tasks: [CHIEF] } }), 1);
    const failed = back.catch((e: unknown) => e);
    await clock.advanceSecs(59);
    await clock.advanceSecs(2);
    const e = await failed;
    expect(e).toBeInstanceOf(DeadlineExceededError);
    expect((e as Error).message).toMatch(
      new RegExp(`^worker:0 lost the chief ${CHIEF}, which did not come back within 60 s \\(maxWaitSecs\\): UnavailableError: the coordination service at grpc://127.0.0.1:7001 is unreachable`),
    );
    expect(attempts).toBeGreaterThan(1);
    await expect(recovery.chiefModel(chiefModel()).pull()).rejects.toBe(e);
  });

  it("a task whose training runs in no session of the task (its own loop, its own session) is not recovered: the loss fails it at once, saying why", async () => {
    const clock = new VirtualClock();
    const lines: string[] = [];
    const { recovery, emitted } = setup(() => clock.sleep(3_600_000), clock, { ...silentLogger, warn: (m: string) => void lines.push(m) });
    const cause = new UnavailableError("the coordination service at grpc://127.0.0.1:7001 is unreachable", EMBEDDED_GONE);
    await expect(recovery.recover(cause, 1)).rejects.toBe(cause);
    expect(lines).toEqual([expect.stringMatching(/^worker:0 lost the chief \/job:chief\/replica:0\/task:0 \(UnavailableError: .*\): no session of this task is made from its session targets and hooks .*; the task fails with the loss\.$/)]);
    expect(lines.join("\n")).not.toContain("waiting up to");
    expect(emitted).toEqual([{ type: "chiefLost", task: "worker:0", chief: CHIEF, waiting: false, maxWaitSecs: 60 }]);
    // And it stays failed: a later loss raises the same.
    await expect(recovery.recover(new AbortedError("generation 2 ended"), 1)).rejects.toBe(cause);
  });

  it("an error that waiting cannot fix (a wrong token at the restarted chief) ends the recovery at once", async () => {
    const { recovery } = setup(() => Promise.reject(new UnauthenticatedError("grpc://127.0.0.1:7001: bad token")));
    begin(recovery);
    await expect(recovery.recover(new AbortedError("generation 1 ended"), 1)).rejects.toBeInstanceOf(UnauthenticatedError);
  });

  it("a termination notice cancels the recovery: the recovery and the session's wait raise it", async () => {
    const clock = new VirtualClock();
    const { recovery } = setup(() => clock.sleep(3_600_000), clock);
    begin(recovery);
    const back = recovery.recover(new AbortedError("generation 1 ended"), 1).catch((e: unknown) => e);
    const pulled = recovery.chiefModel(chiefModel()).pull().catch((e: unknown) => e);
    const notice = new CancelledError("cluster preemption: task worker:0 got a termination notice (SIGTERM)");
    expect(recovery.cancel(notice)).toBe(true);
    expect(await back).toBe(notice);
    expect(await pulled).toBe(notice);
    // Nothing under way any more: a later loss fails at once with the notice.
    expect(recovery.cancel(notice)).toBe(false);
    await expect(recovery.recover(new AbortedError("generation 2 ended"), undefined)).rejects.toBe(notice);
  });

  it("registered() resolves once the task registered in the chief's next generation, before the chief's model is published; the recovery itself still waits for the model", async () => {
    const clock = new VirtualClock();
    const { state, recovery } = setup(async () => {
      state.generation = 2;
    }, clock);
    begin(recovery);
    state.ready = false;
    const cause = new AbortedError("generation 1 ended");
    let recovered = false;
    const back = recovery.recover(cause, 1).then(() => void (recovered = true));
    await recovery.registered(cause, 1);
    expect(state.generation).toBe(2);
    expect(recovered).toBe(false);
    expect(recovery.recovering).toBe(true);
    // The chief publishes its model: the recovery's next look finds it.
    state.ready = true;
    await clock.advanceSecs(1);
    await back;
    expect(recovery.recovering).toBe(false);
    // Nothing under way, and the loss was seen in generation 1: over at once.
    await recovery.registered(cause, 1);
  });

  it("noticed() during a recovery ends it with ChiefLostError naming the task, the chief and the loss; the session's wait raises the same", async () => {
    const clock = new VirtualClock();
    const { recovery } = setup(() => clock.sleep(3_600_000), clock);
    begin(recovery);
    const back = recovery.recover(new AbortedError("generation 1 ended"), 1).catch((e: unknown) => e);
    const pulled = recovery.chiefModel(chiefModel()).pull().catch((e: unknown) => e);
    const lost = recovery.noticed("its termination notice");
    expect(lost).toBeInstanceOf(ChiefLostError);
    expect(lost).toBeInstanceOf(CancelledError);
    expect(lost?.message).toBe(`worker:0 stops for its termination notice while its chief ${CHIEF} is lost (AbortedError: generation 1 ended): nobody can write the checkpoint`);
    expect(await back).toBe(lost);
    expect(await pulled).toBe(lost);
    // Said once: a second notice finds nothing under way.
    expect(recovery.noticed("its termination notice")).toBeUndefined();
  });

  it("noticed() with no recovery under way changes nothing now (the session's wait for the chief's model goes on); a later loss is not waited out but ends at once with ChiefLostError", async () => {
    const clock = new VirtualClock();
    const lines: string[] = [];
    const { recovery, emitted } = setup(() => clock.sleep(3_600_000), clock, { ...silentLogger, warn: (m: string) => void lines.push(m) });
    begin(recovery);
    expect(recovery.noticed("its termination notice")).toBeUndefined();
    // The chief is alive: its model is pulled as before.
    expect((await recovery.chiefModel(chiefModel()).pull()).ready).toBe(true);
    await createSession(recovery);
    const e = await recovery.recover(new UnavailableError("gone", EMBEDDED_GONE), 1).catch((f: unknown) => f);
    expect(e).toBeInstanceOf(ChiefLostError);
    expect((e as Error).message).toBe(`worker:0 stops for its termination notice while its chief ${CHIEF} is lost (UnavailableError: gone): nobody can write the checkpoint`);
    // No wait began: the session is not re-created (its next step is not refused), and no line says it waits.
    expect(beforeRun(recovery)).toBeUndefined();
    expect(lines.join("\n")).not.toContain("waiting up to");
    // The loss is the task's event all the same: not waited for.
    expect(emitted).toEqual([{ type: "chiefLost", task: "worker:0", chief: CHIEF, waiting: false, maxWaitSecs: 60 }]);
  });

  it("noticed()'s onChiefLost is told of the ChiefLostError before any wait raises it: during a recovery under way, and at a loss that comes later", async () => {
    const clock = new VirtualClock();
    const order: string[] = [];
    const { recovery } = setup(() => clock.sleep(3_600_000), clock);
    begin(recovery);
    const back = recovery.recover(new AbortedError("generation 1 ended"), 1).catch((e: unknown) => void order.push(`wait raised ${(e as Error).name}`));
    const told: ChiefLostError[] = [];
    const lost = recovery.noticed("its termination notice", (e) => {
      told.push(e);
      order.push("told");
    });
    expect(told).toEqual([lost]);
    await back;
    expect(order).toEqual(["told", "wait raised ChiefLostError"]);

    const later = setup(() => clock.sleep(3_600_000), clock).recovery;
    begin(later);
    const tellings: ChiefLostError[] = [];
    expect(later.noticed("its termination notice", (e) => void tellings.push(e))).toBeUndefined();
    // A second caller's listener is not kept: the first one owns the exit.
    later.noticed("worker:1's termination notice", () => void tellings.push(new ChiefLostError("not this one")));
    expect(tellings).toEqual([]);
    const e = await later.recover(new UnavailableError("gone", EMBEDDED_GONE), 1).catch((f: unknown) => f);
    expect(tellings).toEqual([e]);
  });

  it("onRegistered listeners are told at each registration in the chief's next generation, whoever waits on the recovery, until unsubscribed", async () => {
    const clock = new VirtualClock({ autoAdvance: true });
    const { state, recovery } = setup(async () => {
      state.generation = (state.generation ?? 0) + 1;
    }, clock);
    begin(recovery);
    const seen: (number | undefined)[] = [];
    const stop = recovery.onRegistered(() => void seen.push(state.generation));
    await recovery.recover(new AbortedError("generation 1 ended"), 1);
    await flush();
    await recovery.recover(new AbortedError("generation 2 ended"), 2);
    await flush();
    expect(seen).toEqual([2, 3]);
    stop();
    await recovery.recover(new AbortedError("generation 3 ended"), 3);
    expect(seen).toEqual([2, 3]);
  });

  it("a listener that throws is one warning naming the task, the generation and the error; the recovery goes on and the other listeners are told", async () => {
    const clock = new VirtualClock({ autoAdvance: true });
    const lines: string[] = [];
    const { state, recovery } = setup(async () => {
      state.generation = 2;
    }, clock, { ...silentLogger, warn: (m: string) => void lines.push(m) });
    begin(recovery);
    const told: string[] = [];
    recovery.onRegistered(() => {
      throw new TypeError("the listener broke");
    });
    recovery.onRegistered(() => void told.push("second"));
    await recovery.recover(new AbortedError("generation 1 ended"), 1);
    expect(told).toEqual(["second"]);
    expect(lines.filter((l) => l.includes("a listener"))).toEqual(["worker:0: a listener of the registration in generation 2 failed: TypeError: the listener broke"]);
  });
});

describe("ChiefRecovery: a chief that stops answering after it published its model", () => {
  const unreachable = (): ChiefModel => ({ address: "grpc://127.0.0.1:1", pull: async () => ({ ready: false, reason: "not reachable: read ECONNRESET" }) });

  it("with the coordination service gone too (the embedded backend): the pull waits on the recovery, which fails naming the chief and maxWaitSecs", async () => {
    const clock = new VirtualClock();
    const { recovery } = setup(async () => {
      await clock.sleep(10_000);
      throw new UnavailableError("the coordination service at grpc://127.0.0.1:7001 is unreachable (ECONNREFUSED); its host (the chief) stopped", EMBEDDED_GONE);
    }, clock);
    const gone = new UnavailableError("the coordination service at grpc://127.0.0.1:7001 is unreachable (http/2 stream closed with error code CANCEL (0x8)); its host (the chief) stopped", EMBEDDED_GONE);
    // The ready key was seen (the chief published), then the service is unreachable.
    const client = (recovery as unknown as { o: { client: CoordinationClient } }).o.client as unknown as Record<string, unknown>;
    client["tryGet"] = () => Promise.reject(gone);
    const pulled = recovery.chiefModel(unreachable()).pull().catch((e: unknown) => e);
    await clock.advanceSecs(61);
    expect(String(await pulled)).toMatch(/worker:0 lost the chief \/job:chief\/replica:0\/task:0, which did not come back within 60 s \(maxWaitSecs\)/);
  });

  it("with the coordination service answering (etcd, or a chief only slow to answer): not ready, as before, for the session manager to ask again", async () => {
    const { recovery } = setup(() => Promise.resolve());
    const client = (recovery as unknown as { o: { client: CoordinationClient } }).o.client as unknown as Record<string, unknown>;
    client["tryGet"] = () => Promise.resolve("1");
    expect(await recovery.chiefModel(unreachable()).pull()).toEqual({ ready: false, reason: "not reachable: read ECONNRESET" });
  });
});
