/**
 * A scenario across modules (the checkpoint hook, the manager, the session creators).
 *
 * The asynchronous `VariableStore` seam: a store whose `snapshot()` and `reportUninitialized()`
 * answer with promises (as a store in another process would) works with the checkpoint hook,
 * the checkpoint manager and the session creators, and the next run waits for a snapshot.
 */
import { describe, expect, it } from "vitest";

import { CheckpointSaverHook } from "../../hooks/CheckpointSaverHook.js";
import { readBundle } from "../../src/checkpoint/checkpointFormat.js";
import { CheckpointManager } from "../../src/checkpoint/CheckpointManager.js";
import { Graph, type GraphSession } from "../../src/session/Graph.js";
import { silentLogger } from "../../src/Logger.js";
import { MonitoredSession } from "../../src/pipeline/MonitoredSession.js";
import type { Fetches, FetchResult, Feeds, Session, VariableStore } from "../../src/session/Session.js";
import { SessionManager } from "../../src/creation/SessionManager.js";
import { ResumableState } from "../../src/creation/ResumableState.js";
import { defaultReadyOp } from "../../src/creation/Scaffold.js";
import type { TensorValue } from "../../src/session/Tensor.js";
import { flush, VirtualClock } from "../../src/testing/VirtualClock.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("async-store-");

/**
 * A session whose store answers later: each snapshot is taken when asked (so it reflects that
 * step) but delivered only when the test calls `release()`.
 */
class LateStoreSession implements Session {
  readonly globalStepName = "global_step";
  readonly variables: VariableStore;
  private readonly waiting: (() => void)[] = [];
  runs = 0;

  constructor(readonly inner: GraphSession) {
    const store = inner.variables;
    this.variables = {
      names: (c) => store.names(c),
      initialize: (c) => store.initialize(c),
      restore: (v) => store.restore(v),
      reportUninitialized: (c) => this.later(store.reportUninitialized(c)),
      snapshot: (c) => this.later(store.snapshot(c)),
    };
  }

  /** Snapshots and reports asked for and not yet delivered. */
  get pending(): number {
    return this.waiting.length;
  }

  /** Delivers every pending answer. */
  release(): void {
    for (const deliver of this.waiting.splice(0)) deliver();
  }

  run<F extends Fetches>(fetches: F, feeds?: Feeds): Promise<FetchResult<F>> {
    this.runs++;
    return this.inner.run(fetches, feeds);
  }

  private later<T>(value: T): Promise<T> {
    return new Promise<T>((resolve) => this.waiting.push(() => resolve(value)));
  }
}

const graph = (): Graph => {
  const g = new Graph();
  const step = g.globalStep();
  const w = g.variable("w", { initialValue: 1 });
  g.op("train", (ctx) => {
    ctx.assignAdd(w, 1);
    return ctx.assignAdd(step, 1);
  });
  return g;
};

/** Waits for `p` while answering the store's requests as they come. */
const releasing = async <T>(session: () => LateStoreSession | undefined, p: Promise<T>): Promise<T> => {
  let settled = false;
  void p.then(
    () => (settled = true),
    () => (settled = true),
  );
  // Macrotask turns let file I/O progress; the bound is a deadline, not a timing assumption.
  for (let i = 0; i < 100_000 && !settled; i++) {
    session()?.release();
    await flush();
  }
  if (!settled) throw new Error("still pending after 100000 event-loop turns");
  return p;
};

describe("an asynchronous VariableStore", () => {
  it.each([false, true])("the next run starts only after the snapshot resolved (async save: %s)", async (asyncSave) => {
    const dir = tempDir();
    const g = graph();
    let raw: LateStoreSession | undefined;
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, async: asyncSave });
    const sess = await releasing(
      () => raw,
      MonitoredSession.create({
        graph: g,
        sessionFactory: () => (raw = new LateStoreSession(g.session())),
        hooks: [hook],
        clock: new VirtualClock(),
        logger: silentLogger,
      }),
    );
    const session = raw as LateStoreSession;
    const runsBefore = session.runs;

    let resolved = false;
    const first = sess.run("train").then(() => (resolved = true));
    for (let i = 0; i < 20; i++) await flush();
    // The hook asked for the snapshot of step 1 and is waiting for it: the run has not resolved.
    expect(session.pending).toBe(1);
    expect(resolved).toBe(false);
    session.release();
    await releasing(() => session, first);
    expect(resolved).toBe(true);

    await releasing(() => session, sess.run("train"));
    await releasing(() => session, sess.close());
    // Each checkpoint holds exactly its step: w = step + 1.
    for (const step of [1, 2]) {
      const { values } = await readBundle(`${dir}/model.ckpt-${step}`);
      expect((values.get("global_step") as TensorValue).data[0]).toBe(BigInt(step));
      expect((values.get("w") as TensorValue).data[0]).toBe(step + 1);
    }
    // The raw runs: the trains and the hook's global-step reads, none while a snapshot was pending.
    expect(session.runs).toBeGreaterThan(runsBefore);
  });

  it("CheckpointManager.save orders saves by request even when snapshots resolve out of order", async () => {
    const dir = tempDir();
    const g = graph();
    const a = new LateStoreSession(g.session());
    await a.variables.initialize();
    const manager = await CheckpointManager.create({ directory: dir, clock: new VirtualClock(), logger: silentLogger });
    const first = manager.save(a.variables, { checkpointNumber: 1 });
    const second = manager.save(a.inner.variables, { checkpointNumber: 2 });
    for (let i = 0; i < 5; i++) await flush();
    // The second save (a synchronous store) waits for the first to be recorded.
    expect(manager.latestCheckpoint).toBeNull();
    a.release();
    expect(await first).toBe(`${dir}/ckpt-1`);
    expect(await second).toBe(`${dir}/ckpt-2`);
    expect(manager.checkpoints).toEqual([`${dir}/ckpt-1`, `${dir}/ckpt-2`]);
    await manager.close();
  });

  it("a failed asynchronous snapshot fails its save and gives up its turn", async () => {
    const dir = tempDir();
    const g = graph();
    const s = g.session();
    await s.variables.initialize();
    const failing: VariableStore = { ...s.variables, snapshot: () => Promise.reject(new Error("remote store unreachable")) };
    const manager = await CheckpointManager.create({ directory: dir, clock: new VirtualClock(), logger: silentLogger });
    await expect(manager.save(failing)).rejects.toThrow("remote store unreachable");
    expect(await manager.save(s.variables, { checkpointNumber: 7 })).toBe(`${dir}/ckpt-7`);
    await manager.close();
  });

  it("ResumableState.wrap captures the registered state when the snapshot is asked for, not when it resolves", async () => {
    const g = graph();
    const late = new LateStoreSession(g.session());
    await late.variables.initialize();
    let cursor = 3;
    const store = new ResumableState().register("cursor", { save: () => cursor, restore: (v) => void (cursor = v) }).wrap(late.variables);
    const pending = store.snapshot("global");
    cursor = 4; // the next step moves the data cursor before the remote snapshot arrives
    late.release();
    const snapshot = await pending;
    expect((snapshot.get("cursor") as TensorValue).data[0]).toBe("3");
    expect([...snapshot.keys()].sort()).toEqual(["cursor", "global_step", "w"]);
  });

  it("readiness: an asynchronous reportUninitialized is awaited by the session manager", async () => {
    const g = graph();
    let late: LateStoreSession | undefined;
    const sm = new SessionManager({
      sessionFactory: () => (late = new LateStoreSession(g.session())),
      readyOp: defaultReadyOp,
      clock: new VirtualClock(),
      logger: silentLogger,
    });
    // An init op that initializes nothing: the late report names both variables.
    const failing = sm.prepareSession({ initOp: () => undefined });
    await expect(releasing(() => late, failing)).rejects.toThrow("error: Variables not initialized: global_step, w");
    const ready = sm.prepareSession({ initOp: (s) => s.variables?.initialize() });
    expect(await releasing(() => late, ready)).toBe(late);
  });
});
