import { readFile, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

import { BundleSaver, CheckpointManager, dataPath, latestCheckpoint } from "../../src/checkpoint/index.js";
import type { ChiefModel, ChiefModelState } from "../../src/session/ChiefModel.js";
import { DeadlineExceededError, FailedPreconditionError, RuntimeError, UnauthenticatedError, ValueError } from "../../src/errors.js";
import { Graph, type GraphSession, type Variable } from "../../src/session/Graph.js";
import { silentLogger } from "../../src/Logger.js";
import { flush } from "../../src/testing/VirtualClock.js";
import { Scaffold } from "../../src/creation/Scaffold.js";
import type { Session } from "../../src/session/Session.js";
import { SessionManager, type SessionManagerOptions } from "../../src/creation/SessionManager.js";
import { scalar, tensor, type TensorValue } from "../../src/session/Tensor.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { FakeSession, VirtualClock } from "../../src/testing/index.js";
import { useTempDirs } from "../util/tempDirs.js";

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

const tempDir = useTempDirs("ms-sm-");

/** The default readiness ops of a scaffold (TensorFlow's `report_uninitialized_variables`). */
const defaults = new Scaffold().finalize();
const reportUninitialized = defaults.readyOp;
const reportUninitializedGlobal = defaults.readyForLocalInitOp;
const initGlobal = defaults.initOp;

/** A session manager over sessions of `graph` that records each session it made. */
const manager = (
  graph: Graph,
  options: Omit<SessionManagerOptions, "graph" | "sessionFactory"> = {},
  factory: () => GraphSession = () => graph.session(),
) => {
  const made: GraphSession[] = [];
  const clock = new VirtualClock({ autoAdvance: true });
  const sm = new SessionManager({
    clock,
    logger: silentLogger,
    ...options,
    sessionFactory: () => {
      const s = factory();
      made.push(s);
      return s;
    },
  });
  return { sm, made, clock };
};

/** Writes a checkpoint of `session`'s global variables into `dir` (with a state file). */
const saveCheckpoint = async (session: Session, dir: string): Promise<string> => {
  const m = await CheckpointManager.create({ directory: dir, clock: new VirtualClock(), logger: silentLogger });
  const path = await m.save(session.variables as NonNullable<Session["variables"]>);
  if (path === null) throw new Error("the checkpoint was not saved");
  return path;
};

/** A graph with `v` (global) and a local `w` whose init op copies `v` (TensorFlow's `w = Variable(v)`). */
const graphVW = (vInit: number): { g: Graph; v: Variable<number>; w: Variable<number> } => {
  const g = new Graph();
  const v = g.variable("v", vInit);
  const w = g.variable("w", { initialValue: 0, collection: "local" });
  g.op("w_init", (ctx) => ctx.assign(w, ctx.read(v)));
  return { g, v, w };
};

const initialized = (s: GraphSession, name: string): boolean => !s.variables.reportUninitialized().includes(name);

/** Saves v=1 into a fresh checkpoint dir, as the first half of TensorFlow's recover tests do. */
const checkpointWithV1 = async (): Promise<string> => {
  const dir = tempDir();
  const g = new Graph();
  g.variable("v", 1);
  const { sm } = manager(g);
  const [sess, ok] = await sm.recoverSession({ saver: new BundleSaver(), checkpointDir: dir });
  expect(ok).toBe(false);
  await sess.variables?.initialize("global");
  await saveCheckpoint(sess, dir);
  return dir;
};

/**
 * A "parameter server" shared by the sessions of a graph: global values set by the chief are
 * seen by every new session (TensorFlow's distributed sessions share variables this way).
 */
const sharedGlobals = (g: Graph) => {
  let globals: Map<string, TensorValue> | undefined;
  return {
    chiefInitializes: (s: GraphSession) => {
      globals = s.variables.snapshot("global");
    },
    factory: (): GraphSession => {
      const s = g.session();
      if (globals !== undefined) void s.variables.restore(globals);
      return s;
    },
  };
};

// ---------------------------------------------------------------------------------------------
// tests
// ---------------------------------------------------------------------------------------------

describe("SessionManager.prepareSession", () => {
  it("session_manager_test.testPrepareSessionSucceeds: the init op initializes the model", async () => {
    const g = new Graph();
    g.variable("v", new Float64Array([1, 2, 3]));
    const { sm } = manager(g, { readyOp: reportUninitialized });
    const sess = await sm.prepareSession({ initOp: initGlobal });
    expect(await sess.run("v")).toEqual(new Float64Array([1, 2, 3]));
  });

  it("session_manager_test.testPrepareSessionSucceedsWithInitFeedDict: the init op gets initFeedDict", async () => {
    const g = new Graph();
    const v = g.variable("v", 0);
    g.op("init", (ctx) => ctx.assign(v, ctx.feed<number>("p")));
    const { sm } = manager(g, { readyOp: reportUninitialized });
    const sess = await sm.prepareSession({ initOp: "init", initFeedDict: { p: 125 } });
    expect(await sess.run("v")).toBe(125);
  });

  it("session_manager_test.testPrepareSessionSucceedsWithInitFn: initFn initializes the model", async () => {
    const g = new Graph();
    g.variable("v", 125);
    const { sm } = manager(g, { readyOp: reportUninitialized });
    const sess = await sm.prepareSession({ initFn: (s) => s.variables?.initialize() });
    expect(await sess.run("v")).toBe(125);
  });

  it("session_manager_test.testPrepareSessionSucceedsWithLocalInitFeedDict: the local init op gets localInitFeedDict", async () => {
    const g = new Graph();
    const w = g.variable("w", { initialValue: 0, collection: "local" });
    g.op("w_init", (ctx) => ctx.assign(w, ctx.feed<number>("p")));
    const { sm } = manager(g, { readyOp: reportUninitialized, localInitOp: "w_init", localInitFeedDict: { p: 125 } });
    const sess = await sm.prepareSession();
    expect(await sess.run("w")).toBe(125);
  });

  it("session_manager_test.testPrepareSessionFails: no checkpoint within maxWaitSecs and no init is a RuntimeError; once the checkpoint is back it is restored", async () => {
    const dir = tempDir();
    const first = new Graph();
    first.variable("v", 1);
    const a = manager(first, { readyOp: reportUninitialized });
    const s1 = await a.sm.prepareSession({ initOp: initGlobal, saver: new BundleSaver(), checkpointDir: dir });
    expect(await s1.run("v")).toBe(1);
    await saveCheckpoint(s1, dir);

    const moved = join(tempDir(), "moved");
    await rename(dir, moved);
    const second = new Graph();
    second.variable("v", 6);
    const b = manager(second, { readyOp: reportUninitialized });
    const saver = new BundleSaver();
    await expect(
      b.sm.prepareSession({ saver, checkpointDir: dir, waitForCheckpoint: true, maxWaitSecs: 2 }),
    ).rejects.toThrow(new RuntimeError("Model is not initialized and no init_op or init_fn or local_init_op was given"));
    // It waited one recoveryWaitSecs (30 s) of the clock, then gave up and closed the session.
    expect(b.clock.sleeps).toEqual([30_000]);
    expect(b.made).toHaveLength(1);
    await expect(b.made[0]?.run("v")).rejects.toThrow(/closed Session/);

    await rename(moved, dir);
    let initRan = false;
    const sess = await b.sm.prepareSession({
      saver,
      checkpointDir: dir,
      waitForCheckpoint: true,
      maxWaitSecs: 2,
      initFn: () => {
        initRan = true;
      },
    });
    expect(await sess.run("v")).toBe(1);
    expect(initRan).toBe(false);
  });

  it("session_manager_test.testPrepareSessionWithReadyForLocalInitOp: local init runs after the init op made globals ready", async () => {
    const { g } = graphVW(1);
    const x = g.variable("x", { initialValue: 0, collection: "local" });
    g.op("local_init", (ctx) => {
      ctx.run("w_init");
      ctx.assign(x, ctx.read<number>("v"));
    });
    const { sm } = manager(g, {
      readyOp: reportUninitialized,
      readyForLocalInitOp: reportUninitializedGlobal,
      localInitOp: "local_init",
    });
    const sess = (await sm.prepareSession({ initOp: initGlobal })) as GraphSession;
    expect(sess.variables.reportUninitialized()).toEqual([]);
    expect(await sess.run(["v", "w", "x"])).toEqual([1, 1, 1]);
  });

  it("session_manager_test.testPrepareSessionDidNotInitLocalVariable: an uninitialized local variable is 'did not make model ready'", async () => {
    const g = new Graph();
    g.variable("v", 1);
    g.variable("w", { initialValue: 1, collection: "local" });
    const { sm, made } = manager(g, { readyOp: reportUninitialized });
    await expect(sm.prepareSession({ initOp: initGlobal })).rejects.toThrow(
      /^Init operations did not make model ready\.  Init op: defaultInitOp, init fn: None, local_init_op: None, error: Variables not initialized: w$/,
    );
    expect(made[0]?.variables.reportUninitialized()).toEqual(["w"]);
  });

  it("session_manager_test.testPrepareSessionWithReadyNotReadyForLocal: globals not ready for local init is a RuntimeError", async () => {
    const { g } = graphVW(1);
    const { sm } = manager(g, {
      readyOp: reportUninitialized,
      readyForLocalInitOp: reportUninitializedGlobal,
      localInitOp: "w_init",
    });
    await expect(sm.prepareSession()).rejects.toThrow(
      new RuntimeError(
        "Init operations did not make model ready for local_init.  Init op: None, init fn: None, error: Variables not initialized: v",
      ),
    );
  });

  it("session_manager_test.testPrepareSessionWithInsufficientReadyForLocalInitCheck: the local init op's FailedPrecondition propagates", async () => {
    const { g } = graphVW(1);
    const { sm } = manager(g, { readyOp: reportUninitialized, localInitOp: "w_init" });
    await expect(sm.prepareSession()).rejects.toThrow(new FailedPreconditionError("Attempting to use uninitialized value v"));
  });

  it("prepareSession without initOp, initFn or localInitOp and no checkpoint is TensorFlow's RuntimeError", async () => {
    const g = new Graph();
    g.variable("v", 1);
    const { sm, made } = manager(g, { readyOp: reportUninitialized });
    await expect(sm.prepareSession()).rejects.toThrow(
      "Model is not initialized and no init_op or init_fn or local_init_op was given",
    );
    await expect(made[0]?.run("v")).rejects.toThrow(/closed Session/);
  });

  it("restores the previous checkpoint when the latest is corrupt (the checkpoint module's fallback)", async () => {
    const dir = tempDir();
    const g = new Graph();
    const v = g.variable("v", 0);
    g.op("set", (ctx) => ctx.assign(v, ctx.feed<number>("x")));
    const writer = g.session();
    await writer.variables.initialize();
    const m = await CheckpointManager.create({ directory: dir, clock: new VirtualClock(), logger: silentLogger });
    await writer.run("set", { x: 10 });
    await m.save(writer.variables);
    await writer.run("set", { x: 20 });
    const latest = (await m.save(writer.variables)) as string;
    await writeFile(dataPath(latest), "garbage");

    const events = new EventRecorder();
    const { sm } = manager(g, { readyOp: reportUninitialized, logger: events.logger() });
    const sess = await sm.prepareSession({ initOp: initGlobal, saver: new BundleSaver(), checkpointDir: dir });
    expect(await sess.run("v")).toBe(10);
    expect(events.messages("warn").join("\n")).toContain(latest);
  });

  it("falls back to a model.ckpt-<n> checkpoint on disk that the state file no longer lists (maxToKeep 1, power cut)", async () => {
    const dir = tempDir();
    const g = new Graph();
    const v = g.variable("v", 0);
    g.op("set", (ctx) => ctx.assign(v, ctx.feed<number>("x")));
    const writer = g.session();
    await writer.variables.initialize();
    const m = await CheckpointManager.create({ directory: dir, checkpointName: "model.ckpt", maxToKeep: 1, clock: new VirtualClock(), logger: silentLogger });
    await writer.run("set", { x: 10 });
    await m.save(writer.variables, { checkpointNumber: 1 });
    // The next save's state rename survived a power cut, its checkpoint's renames did not.
    await writeFile(join(dir, "checkpoint"), 'model_checkpoint_path: "model.ckpt-2"\nall_model_checkpoint_paths: "model.ckpt-2"\n');
    // Another process's save between its data and index renames: restoring must not delete it.
    await writeFile(dataPath(join(dir, "model.ckpt-3")), "in flight");

    const { sm } = manager(g, { readyOp: reportUninitialized });
    const sess = await sm.prepareSession({ initOp: initGlobal, saver: new BundleSaver(), checkpointDir: dir });
    expect(await sess.run("v")).toBe(10);
    expect(sm.lastRestored).toBe(join(dir, "model.ckpt-1"));
    expect(await readFile(dataPath(join(dir, "model.ckpt-3")), "utf8")).toBe("in flight");
  });

  it("waitForCheckpoint polls every recoveryWaitSecs until the state file appears, saying so as TensorFlow does", async () => {
    const dir = tempDir();
    const g = new Graph();
    const v = g.variable("v", 0);
    const writer = g.session();
    await writer.variables.restore(new Map([["v", scalar(42)]]));
    const events = new EventRecorder();
    const { sm, clock } = manager(g, { readyOp: reportUninitialized, recoveryWaitSecs: 5, logger: events.logger() });
    const sleep = clock.sleep.bind(clock);
    clock.sleep = async (ms, signal) => {
      await sleep(ms, signal);
      if (clock.sleeps.length === 3) await saveCheckpoint(writer, dir);
    };
    const sess = await sm.prepareSession({ saver: new BundleSaver(), checkpointDir: dir, waitForCheckpoint: true, maxWaitSecs: 60 });
    expect(await sess.run(v.name)).toBe(42);
    expect(clock.sleeps).toEqual([5000, 5000, 5000]);
    // TensorFlow's line (session_manager.py), once per wait.
    expect(events.messages("info")).toEqual(["Waiting for checkpoint to be available.", "Waiting for checkpoint to be available.", "Waiting for checkpoint to be available."]);
  });
});

describe("SessionManager and a bad state file", () => {
  it("an invalid state file does not make the chief start over: the newest checkpoint on disk that verifies is restored, read-only", async () => {
    const dir = tempDir();
    const g = new Graph();
    const v = g.variable("v", 0);
    g.op("inc", (ctx) => ctx.assignAdd(v, 1));
    const writer = await CheckpointManager.create({ directory: dir, checkpointName: "model.ckpt", clock: new VirtualClock(), logger: silentLogger });
    const s = g.session();
    await s.variables.initialize();
    for (const n of [1, 2]) {
      await s.run("inc");
      await writer.save(s.variables, { checkpointNumber: n });
    }
    await writer.close();
    await writeFile(join(dir, "checkpoint"), "garbage {");
    const events = new EventRecorder();
    const { sm } = manager(g, { logger: events.logger() });
    const sess = await sm.prepareSession({ saver: new BundleSaver(), checkpointDir: dir, initOp: initGlobal });
    expect(await sess.run("v")).toBe(2);
    expect(sm.lastRestored).toBe(join(dir, "model.ckpt-2"));
    expect(events.messages("warn")[0]).toMatch(/invalid checkpoint state; restoring the newest model\.ckpt-<n> checkpoint on disk that verifies/);
    expect(await readFile(join(dir, "checkpoint"), "utf8")).toBe("garbage {"); // a reader rewrites nothing
  });
});

describe("SessionManager.recoverSession", () => {
  it("session_manager_test.testRecoverSession: restores from checkpointDir or checkpointFilenameWithPath; both is a ValueError", async () => {
    const dir = await checkpointWithV1();
    const file = (await latestCheckpoint(dir)) as string;
    for (const where of [{ checkpointDir: dir }, { checkpointFilenameWithPath: file }]) {
      const g = new Graph();
      g.variable("v", 2);
      const { sm } = manager(g, { readyOp: reportUninitialized });
      const [sess, ok] = await sm.recoverSession({ saver: new BundleSaver(), ...where });
      expect(ok).toBe(true);
      expect(await sess.run("v")).toBe(1);
    }
    const g = new Graph();
    g.variable("v", 2);
    const { sm, made } = manager(g, { readyOp: reportUninitialized });
    await expect(
      sm.recoverSession({ saver: new BundleSaver(), checkpointDir: dir, checkpointFilenameWithPath: file }),
    ).rejects.toThrow(new ValueError("Can not provide both checkpoint_dir and checkpoint_filename_with_path."));
    await expect(made[0]?.run("v")).rejects.toThrow(/closed Session/);
  });

  it("session_manager_test.testRecoverSessionWithReadyForLocalInitOp: restored globals, then local init reads them", async () => {
    const dir = await checkpointWithV1();
    const { g } = graphVW(2);
    const events = new EventRecorder();
    const { sm } = manager(g, {
      readyOp: reportUninitialized,
      readyForLocalInitOp: reportUninitializedGlobal,
      localInitOp: "w_init",
      logger: events.logger(),
    });
    const [sess, ok] = await sm.recoverSession({ saver: new BundleSaver(), checkpointDir: dir });
    expect(ok).toBe(true);
    expect(await sess.run(["v", "w"])).toEqual([1, 1]);
    // TensorFlow's lines (session_manager.py): the local init op, then where the model came from.
    expect(events.messages("info")).toEqual(["Running local_init_op.", "Done running local_init_op.", `Restored model from ${dir}`]);
  });

  it("session_manager_test.testRecoverSessionWithReadyForLocalInitOpFailsToReadyLocal: not ready for local init gives initialized=false", async () => {
    const dir = await checkpointWithV1();
    const { g } = graphVW(2);
    const events = new EventRecorder();
    const { sm } = manager(g, {
      readyOp: reportUninitialized,
      readyForLocalInitOp: reportUninitialized, // w is never initialized before local init: never ready
      localInitOp: "w_init",
      logger: events.logger(),
    });
    const [sess, ok] = await sm.recoverSession({ saver: new BundleSaver(), checkpointDir: dir });
    expect(ok).toBe(false);
    expect(events.messages("info").at(-1)).toMatch(new RegExp(`^Restoring model from ${dir} did not make model ready for local init: `));
    const s = sess as GraphSession;
    expect(initialized(s, "v")).toBe(true);
    expect(initialized(s, "w")).toBe(false);
    expect(await s.run("v")).toBe(1);
  });

  it("session_manager_test.testRecoverSessionNoChkptStillRunsLocalInitOp: local init runs without a saver or checkpoint", async () => {
    const g = new Graph();
    g.variable("w", { initialValue: 1, collection: "local" });
    const { sm } = manager(g, { readyOp: reportUninitialized, localInitOp: Scaffold.defaultLocalInitOp() });
    const [sess, ok] = await sm.recoverSession();
    expect(ok).toBe(false);
    expect(await sess.run("w")).toBe(1);
  });

  it("session_manager_test.testRecoverSessionFailsStillRunsLocalInitOp: an empty checkpoint dir still runs local init", async () => {
    const dir = tempDir();
    const g = new Graph();
    g.variable("v", new Float64Array([1, 2, 3]));
    g.variable("w", { initialValue: 1, collection: "local" });
    const { sm } = manager(g, { readyOp: reportUninitialized, localInitOp: Scaffold.defaultLocalInitOp() });
    const [sess, ok] = await sm.recoverSession({ saver: new BundleSaver(), checkpointDir: dir, waitForCheckpoint: false });
    expect(ok).toBe(false);
    const s = sess as GraphSession;
    expect(initialized(s, "v")).toBe(false);
    expect(await s.run("w")).toBe(1);
  });

  it("a restored model that is still not ready gives initialized=false (and a log line)", async () => {
    const dir = await checkpointWithV1();
    const g = new Graph();
    g.variable("v", 2);
    g.variable("u", 3); // not in the checkpoint
    const events = new EventRecorder();
    const { sm } = manager(g, { readyOp: reportUninitialized, logger: events.logger() });
    const [, ok] = await sm.recoverSession({ saver: new BundleSaver(), checkpointDir: dir });
    expect(ok).toBe(false);
    expect(events.messages("info")).toContain(`Restoring model from ${dir} did not make model ready: Variables not initialized: u`);
  });
});

describe("SessionManager.waitForSession", () => {
  it("session_manager_test.testWaitForSessionReturnsNoneAfterTimeout: DeadlineExceeded after maxWaitSecs, polling every recoveryWaitSecs", async () => {
    const g = new Graph();
    g.variable("v", 1);
    const { sm, made, clock } = manager(g, { readyOp: reportUninitialized, recoveryWaitSecs: 1 });
    const start = clock.now();
    await expect(sm.waitForSession({ maxWaitSecs: 3 })).rejects.toThrow(
      new DeadlineExceededError("Session was not ready after waiting 3 secs."),
    );
    expect(clock.sleeps).toEqual([1000, 1000, 1000]);
    expect(clock.now() - start).toBe(3000);
    // A new session per attempt; every failed one is closed.
    expect(made).toHaveLength(4);
    for (const s of made) await expect(s.run("v")).rejects.toThrow(/closed Session/);
  });

  it("session_manager_test.testWaitForSessionLocalInit: once the chief initialized the globals, local init runs and the session is returned", async () => {
    const { g } = graphVW(1);
    const ps = sharedGlobals(g);
    const chief = g.session();
    await chief.variables.initialize("global");
    ps.chiefInitializes(chief);
    const { sm } = manager(
      g,
      { readyOp: reportUninitialized, readyForLocalInitOp: reportUninitializedGlobal, localInitOp: "w_init" },
      ps.factory,
    );
    const sess = await sm.waitForSession({ maxWaitSecs: 3 });
    expect(await sess.run(["v", "w"])).toEqual([1, 1]);
  });

  it("a worker waits for the chief: it polls every recoveryWaitSecs and returns once the chief initialized", async () => {
    const { g } = graphVW(7);
    const ps = sharedGlobals(g);
    const { sm, made, clock } = manager(
      g,
      { readyOp: reportUninitialized, readyForLocalInitOp: reportUninitializedGlobal, localInitOp: "w_init" },
      ps.factory,
    );
    const sleep = clock.sleep.bind(clock);
    clock.sleep = async (ms, signal) => {
      await sleep(ms, signal);
      if (clock.sleeps.length === 4) {
        const chief = g.session();
        await chief.variables.initialize("global");
        ps.chiefInitializes(chief);
      }
    };
    const sess = await sm.waitForSession({ maxWaitSecs: 3600 });
    expect(await sess.run("w")).toBe(7);
    expect(clock.sleeps).toEqual([30_000, 30_000, 30_000, 30_000]);
    expect(made).toHaveLength(5);
    expect(made.slice(0, 4).every((s) => initialized(s, "w") === false)).toBe(true);
  });

  it("session_manager_test.testWaitForSessionWithReadyForLocalInitOpFailsToReadyLocal: never ready for local init → DeadlineExceeded", async () => {
    const { g } = graphVW(1);
    const ps = sharedGlobals(g);
    const chief = g.session();
    await chief.variables.initialize("global");
    ps.chiefInitializes(chief);
    const { sm } = manager(
      g,
      { readyOp: reportUninitialized, readyForLocalInitOp: reportUninitialized, localInitOp: "w_init" },
      ps.factory,
    );
    await expect(sm.waitForSession({ maxWaitSecs: 3 })).rejects.toThrow(DeadlineExceededError);
  });

  it("never initializes or restores: a worker's session never runs the init op", async () => {
    const g = new Graph();
    g.variable("v", 1);
    const { sm, made } = manager(g, { readyOp: reportUninitialized, recoveryWaitSecs: 10 });
    await expect(sm.waitForSession({ maxWaitSecs: 25 })).rejects.toThrow("Session was not ready after waiting 25 secs.");
    expect(made).toHaveLength(3);
    expect(made.every((s) => !initialized(s, "v"))).toBe(true);
  });
});

/** A chief in another process, as a worker sees it: not ready for `notReadyPulls` pulls, then `values`. */
const fakeChief = (values: ReadonlyMap<string, TensorValue>, notReadyPulls: number, address = "grpc://chief0:2222") => {
  let pulls = 0;
  const chief: ChiefModel & { readonly pulls: () => number } = {
    address,
    pulls: () => pulls,
    pull: () => {
      pulls += 1;
      return Promise.resolve<ChiefModelState>(
        pulls <= notReadyPulls
          ? { ready: false, reason: "not reachable: connect ECONNREFUSED" }
          : { ready: true, values, globalStep: 7, origin: "the fake chief" },
      );
    },
  };
  return chief;
};

describe("SessionManager.waitForSession with the chief's model (a grpc:// worker)", () => {
  const chiefValues = (): Map<string, TensorValue> =>
    new Map<string, TensorValue>([
      ["v", tensor("float64", [], new Float64Array([Math.PI]))],
      ["global_step", tensor("int64", [], new BigInt64Array([7n]))],
    ]);
  const workerGraph = (): Graph => {
    const g = new Graph();
    g.variable("v", 1);
    g.globalStep();
    return g;
  };

  it("polls the chief every recoveryWaitSecs, makes a session only once it is ready, and starts from its values", async () => {
    const g = workerGraph();
    const { sm, made, clock } = manager(g, { readyOp: reportUninitialized, recoveryWaitSecs: 2 });
    const chief = fakeChief(chiefValues(), 3);
    const sess = await sm.waitForSession({ maxWaitSecs: 60, chiefModel: chief });
    expect(clock.sleeps).toEqual([2000, 2000, 2000]);
    expect(chief.pulls()).toBe(4);
    expect(made).toHaveLength(1);
    expect(await sess.run(["v", "global_step"])).toEqual([Math.PI, 7]);
  });

  it("a chief model that can say when the chief published (waitForChange) is asked again at once, not recoveryWaitSecs later", async () => {
    const g = workerGraph();
    const { sm, made, clock } = manager(g, { readyOp: reportUninitialized, recoveryWaitSecs: 30 });
    const polled = fakeChief(chiefValues(), 1);
    const waits: number[] = [];
    let publish: (() => void) | undefined;
    const chief: ChiefModel = {
      address: polled.address,
      pull: () => polled.pull(),
      waitForChange: (timeoutMs) => {
        waits.push(timeoutMs);
        return new Promise<void>((ok) => (publish = ok));
      },
    };
    const start = clock.now();
    const waiting = sm.waitForSession({ maxWaitSecs: 60, chiefModel: chief });
    for (let i = 0; i < 10 && publish === undefined; i++) await flush();
    expect(waits).toEqual([30_000]);
    publish?.();
    const sess = await waiting;
    expect(clock.sleeps).toEqual([]);
    expect(clock.now()).toBe(start);
    expect(polled.pulls()).toBe(2);
    expect(made).toHaveLength(1);
    expect(await sess.run("v")).toBe(Math.PI);
  });

  it("raises DeadlineExceededError after maxWaitSecs, in one line naming the chief's address and why", async () => {
    const g = workerGraph();
    const { sm, made, clock } = manager(g, { readyOp: reportUninitialized, recoveryWaitSecs: 1 });
    const start = clock.now();
    const e = await sm.waitForSession({ maxWaitSecs: 3, chiefModel: fakeChief(chiefValues(), Infinity) }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(DeadlineExceededError);
    expect((e as Error).message).toBe(
      "Session was not ready after waiting 3 secs. The chief at grpc://chief0:2222: not reachable: connect ECONNREFUSED",
    );
    expect((e as Error).message).not.toContain("\n");
    expect(clock.now() - start).toBe(3000);
    expect(made).toHaveLength(0);
  });

  it("the chief's values must make the worker's model ready: a variable the chief lacks keeps it waiting", async () => {
    const g = workerGraph();
    g.variable("extra", 2);
    const { sm, made } = manager(g, { readyOp: reportUninitialized, recoveryWaitSecs: 10 });
    await expect(sm.waitForSession({ maxWaitSecs: 25, chiefModel: fakeChief(chiefValues(), 0) })).rejects.toThrow(
      "Session was not ready after waiting 25 secs. The chief at grpc://chief0:2222: Variables not initialized: extra",
    );
    expect(made).toHaveLength(3);
    for (const s of made) await expect(s.run("v")).rejects.toThrow(/closed Session/);
  });

  it("an error that waiting cannot fix (a wrong token) is thrown at once", async () => {
    const g = workerGraph();
    const { sm, clock } = manager(g, { readyOp: reportUninitialized });
    const chief: ChiefModel = { address: "grpc://chief0:2222", pull: () => Promise.reject(new UnauthenticatedError("grpc://chief0:2222: wrong token")) };
    await expect(sm.waitForSession({ maxWaitSecs: 60, chiefModel: chief })).rejects.toThrow(UnauthenticatedError);
    expect(clock.sleeps).toEqual([]);
  });

  it("a worker session without variables cannot take the chief's values: a one-line ValueError", async () => {
    const { sm } = manager(new Graph(), {}, () => ({ run: () => Promise.resolve(null) }) as unknown as GraphSession);
    await expect(sm.waitForSession({ maxWaitSecs: 60, chiefModel: fakeChief(chiefValues(), 0) })).rejects.toThrow(
      /^The chief at grpc:\/\/chief0:2222 is ready, but this worker's session exposes no variables/,
    );
  });
});

describe("SessionManager construction and readiness", () => {
  it("session_manager_test.testInitWithNoneLocalInitOpError: readyForLocalInitOp without localInitOp is a ValueError", () => {
    expect(() => new SessionManager({ graph: new Graph(), readyForLocalInitOp: reportUninitializedGlobal })).toThrow(
      /^If you pass a readyForLocalInitOp you must also pass a localInitOp /,
    );
  });

  it("needs a way to make sessions and a positive recoveryWaitSecs", () => {
    expect(() => new SessionManager({})).toThrow(new ValueError("SessionManager needs a sessionFactory or a graph to create sessions"));
    expect(() => new SessionManager({ graph: new Graph(), recoveryWaitSecs: 0 })).toThrow(/recoveryWaitSecs must be a positive/);
  });

  it("_ready: a named op yielding names lists them; an int32 tensor, an empty tensor or nothing means ready", async () => {
    const results: unknown[] = [
      tensor("string", [2], ["a", "b"]),
      ["a", "b"],
      tensor("int32", [1], new Int32Array([5])),
      tensor("string", [0], []),
      undefined,
      [],
    ];
    const outcomes: string[] = [];
    for (const r of results) {
      const sess = new FakeSession({ globalStep: false, ops: { ready: () => r } });
      const sm = new SessionManager({ sessionFactory: () => sess, readyOp: "ready", clock: new VirtualClock(), logger: silentLogger });
      outcomes.push(await sm.prepareSession({ initOp: (s) => s.run(null) }).then(() => "ready", (e: Error) => e.message.split("error: ")[1] ?? e.message));
    }
    expect(outcomes).toEqual([
      "Variables not initialized: a, b",
      "Variables not initialized: a, b",
      "ready",
      "ready",
      "ready",
      "ready",
    ]);
  });

  it("_ready: FailedPrecondition about an uninitialized value means not ready; any other FailedPrecondition is rethrown", async () => {
    const notReady = new FakeSession({
      ops: { ready: () => Promise.reject(new FailedPreconditionError("Attempting to use uninitialized value q")) },
    });
    const sm1 = new SessionManager({ sessionFactory: () => notReady, readyOp: "ready", clock: new VirtualClock(), logger: silentLogger });
    await expect(sm1.prepareSession({ initOp: initGlobal })).rejects.toThrow(/error: Attempting to use uninitialized value q$/);

    const other = new FailedPreconditionError("the device is gone");
    const broken = new FakeSession({ ops: { ready: () => Promise.reject(other) } });
    const events = new EventRecorder();
    const sm2 = new SessionManager({ sessionFactory: () => broken, readyOp: "ready", clock: new VirtualClock(), logger: events.logger() });
    await expect(sm2.prepareSession({ initOp: initGlobal })).rejects.toBe(other);
    expect(events.messages("warn")).toEqual(["Model not ready : error [the device is gone]"]);
  });
});
