import { join } from "node:path";
import { describe, expect, it } from "vitest";

import { StopAtStepHook } from "../../hooks/StopAtStepHook.js";
import { BundleSaver, CheckpointManager, latestCheckpoint } from "../../src/checkpoint/index.js";
import { AbortedError, DeadlineExceededError, UnavailableError, ValueError } from "../../src/errors.js";
import { Graph, type GraphSession, type Variable } from "../../src/session/Graph.js";
import { silentLogger } from "../../src/Logger.js";
import { MonitoredSession, SingularMonitoredSession, withSession } from "../../src/pipeline/MonitoredSession.js";
import { Scaffold } from "../../src/creation/Scaffold.js";
import type { Session, VariableStore } from "../../src/session/Session.js";
import { ChiefSessionCreator, WorkerSessionCreator } from "../../src/creation/SessionCreators.js";
import { SessionRunHook } from "../../src/hook/SessionRunHook.js";
import type { TensorValue } from "../../src/session/Tensor.js";
import { HookRecorder, VirtualClock } from "../../src/testing/index.js";
import { useTempDirs } from "../util/tempDirs.js";

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

const tempDir = useTempDirs("ms-creators-");

const env = () => ({ clock: new VirtualClock({ autoAdvance: true }), logger: silentLogger });

/** TensorFlow's test graph: a global step and `do_step = assign_add(gstep, 1)`. */
const stepGraph = (): { g: Graph; gstep: Variable<number> } => {
  const g = new Graph();
  const gstep = g.globalStep();
  g.op("do_step", (ctx) => ctx.assignAdd(gstep, 1));
  return { g, gstep };
};

const storeOf = (s: Session | undefined): VariableStore => {
  const store = s?.variables;
  if (store === undefined) throw new Error("the session has no variable store");
  return store;
};

/**
 * Saves a checkpoint through a {@link CheckpointManager} at each session creation and after
 * every run (TensorFlow's `CheckpointSaverHook(save_steps=1)`).
 */
class SaveEveryStepHook extends SessionRunHook {
  private manager: CheckpointManager | undefined;
  readonly saved: string[] = [];
  constructor(private readonly dir: string) {
    super();
  }
  override async afterCreateSession(session: Session): Promise<void> {
    this.manager ??= await CheckpointManager.create({ directory: this.dir, checkpointName: "model.ckpt", clock: new VirtualClock(), logger: silentLogger });
    await this.save(session);
  }
  override async afterRun(ctx: { session: Session }): Promise<void> {
    await this.save(ctx.session);
  }
  private async save(session: Session): Promise<void> {
    const store = storeOf(session);
    const step = Number(((await store.snapshot("global")).get("global_step") as TensorValue).data[0]);
    const path = await (this.manager as CheckpointManager).save(store, { checkpointNumber: step, step });
    if (path !== null) this.saved.push(path);
  }
}

/** A graph whose sessions share global values set by a chief, like TensorFlow's distributed sessions. */
const sharedGlobals = (g: Graph) => {
  let globals: Map<string, TensorValue> | undefined;
  return {
    chiefInitializes: async () => {
      const chief = g.session();
      await chief.variables.initialize("global");
      globals = chief.variables.snapshot("global");
    },
    factory: (): GraphSession => {
      const s = g.session();
      if (globals !== undefined) void s.variables.restore(globals);
      return s;
    },
  };
};

// ---------------------------------------------------------------------------------------------
// ChiefSessionCreator
// ---------------------------------------------------------------------------------------------

describe("ChiefSessionCreator", () => {
  it("new ChiefSessionCreator({ graph, checkpointDir }) initializes when there is no checkpoint and finalizes scaffold and graph", async () => {
    const dir = tempDir();
    const g = new Graph();
    g.variable("v", 3);
    g.variable("w", { initialValue: 4, collection: "local" });
    const creator = new ChiefSessionCreator({ graph: g, checkpointDir: dir, ...env() });
    expect(creator.scaffold.initOp).toBeUndefined();
    const sess = await creator.createSession();
    expect(await sess.run(["v", "w"])).toEqual([3, 4]);
    expect(creator.scaffold.saver).toBeInstanceOf(BundleSaver);
    expect(g.finalized).toBe(true);
  });

  it("restores the latest checkpoint and skips initOp and initFn", async () => {
    const dir = tempDir();
    const { g } = stepGraph();
    const writer = g.session();
    await writer.variables.initialize();
    for (let i = 0; i < 5; i++) await writer.run("do_step");
    const m = await CheckpointManager.create({ directory: dir, clock: new VirtualClock(), logger: silentLogger });
    await m.save(writer.variables);
    const calls: string[] = [];
    const scaffold = new Scaffold({
      graph: g,
      initOp: (s) => {
        calls.push("initOp");
        return s.variables?.initialize("global");
      },
      initFn: () => void calls.push("initFn"),
    });
    const sess = await new ChiefSessionCreator({ scaffold, checkpointDir: dir, ...env() }).createSession();
    expect(await sess.run("global_step")).toBe(5);
    expect(calls).toEqual([]);
  });

  it("each createSession() makes a new session with the cached manager; finalize again is harmless", async () => {
    const g = new Graph();
    g.variable("v", 1);
    const creator = new ChiefSessionCreator({ graph: g, ...env() });
    const a = await creator.createSession();
    const b = await creator.createSession();
    expect(a).not.toBe(b);
    expect(await b.run("v")).toBe(1);
  });

  it("uses a sessionFactory or the scaffold's graph; without either it is a ValueError", async () => {
    const g = new Graph();
    g.variable("v", 2);
    const viaScaffold = await new ChiefSessionCreator({ scaffold: new Scaffold({ graph: g }), ...env() }).createSession();
    expect(await viaScaffold.run("v")).toBe(2);
    g.unfinalize();
    const made: GraphSession[] = [];
    const viaFactory = new ChiefSessionCreator({
      sessionFactory: () => {
        const s = g.session();
        made.push(s);
        return s;
      },
      ...env(),
    });
    expect(await (await viaFactory.createSession()).run("v")).toBe(2);
    expect(made).toHaveLength(1);
    expect(() => new ChiefSessionCreator({})).toThrow(
      new ValueError("ChiefSessionCreator needs a sessionFactory, a graph, or a scaffold with a graph to create sessions"),
    );
  });

  it("both checkpointDir and checkpointFilenameWithPath is a ValueError", () => {
    expect(() => new ChiefSessionCreator({ graph: new Graph(), checkpointDir: "/a", checkpointFilenameWithPath: "/a/b" })).toThrow(
      new ValueError("Can not provide both checkpoint_dir and checkpoint_filename_with_path."),
    );
  });
});

// ---------------------------------------------------------------------------------------------
// WorkerSessionCreator
// ---------------------------------------------------------------------------------------------

describe("WorkerSessionCreator", () => {
  it("waits for the chief, polling every 30 s of the clock, and never initializes or restores", async () => {
    const g = new Graph();
    g.variable("v", 9);
    g.variable("w", { initialValue: 1, collection: "local" });
    const ps = sharedGlobals(g);
    const clock = new VirtualClock({ autoAdvance: true });
    const sleep = clock.sleep.bind(clock);
    clock.sleep = async (ms, signal) => {
      await sleep(ms, signal);
      if (clock.sleeps.length === 2) await ps.chiefInitializes();
    };
    const initOp = (): never => {
      throw new Error("a worker must not run the init op");
    };
    const creator = new WorkerSessionCreator({ scaffold: new Scaffold({ initOp }), sessionFactory: ps.factory, clock, logger: silentLogger });
    const sess = await creator.createSession();
    expect(await sess.run(["v", "w"])).toEqual([9, 1]);
    expect(clock.sleeps).toEqual([30_000, 30_000]);
  });

  it("gives DeadlineExceeded after maxWaitSecs (default 30 minutes)", async () => {
    const g = new Graph();
    g.variable("v", 1);
    const clock = new VirtualClock({ autoAdvance: true });
    const start = clock.now();
    const creator = new WorkerSessionCreator({ graph: g, clock, logger: silentLogger });
    await expect(creator.createSession()).rejects.toThrow(new DeadlineExceededError("Session was not ready after waiting 1800 secs."));
    expect(clock.now() - start).toBe(1_800_000);
    expect(clock.sleeps.every((ms) => ms === 30_000)).toBe(true);

    const short = new WorkerSessionCreator({ graph: g, maxWaitSecs: 90, clock, logger: silentLogger });
    await expect(short.createSession()).rejects.toThrow("Session was not ready after waiting 90 secs.");
  });

  it("with a chiefModel it polls the chief every recoveryWaitSecs and each session starts from the chief's values", async () => {
    const g = new Graph();
    g.variable("v", 0);
    const clock = new VirtualClock({ autoAdvance: true });
    let pulls = 0;
    const chiefModel = {
      address: "grpc://chief:2222",
      pull: () => {
        pulls += 1;
        return Promise.resolve(
          pulls < 3
            ? ({ ready: false, reason: "not ready: it has not created its session yet" } as const)
            : ({ ready: true, values: new Map<string, TensorValue>([["v", { dtype: "float64", shape: [], data: new Float64Array([pulls]) }]]), globalStep: -1, origin: "chief" } as const),
        );
      },
    };
    const creator = new WorkerSessionCreator({ graph: g, chiefModel, recoveryWaitSecs: 5, clock, logger: silentLogger });
    expect(await (await creator.createSession()).run("v")).toBe(3);
    expect(clock.sleeps).toEqual([5000, 5000]);
    expect(await (await creator.createSession()).run("v")).toBe(4); // a re-created session asks again
    expect(() => new WorkerSessionCreator({ graph: g, recoveryWaitSecs: 0 })).toThrow(
      new ValueError("WorkerSessionCreator: recoveryWaitSecs must be a positive number of seconds, got 0"),
    );
  });
});

// ---------------------------------------------------------------------------------------------
// MonitoredSession recovery through the creators
// ---------------------------------------------------------------------------------------------

describe("MonitoredSession with session creators", () => {
  it("MonitoredSessionTest.test_last_step: stop at step 3, save; restore through initFn and stop at 5", async () => {
    const dir = tempDir();
    const { g } = stepGraph();
    const savePath = join(dir, "step-3");
    await withSession({ graph: g, hooks: [new StopAtStepHook({ lastStep: 3 })], ...env() }, async (session) => {
      expect(await session.run("global_step")).toBe(0);
      expect(session.shouldStop()).toBe(false);
      expect(await session.run("do_step")).toBe(1);
      expect(session.shouldStop()).toBe(false);
      expect(await session.run("do_step")).toBe(2);
      expect(session.shouldStop()).toBe(false);
      expect(await session.run("do_step")).toBe(3);
      expect(session.shouldStop()).toBe(true);
      await new BundleSaver().save(storeOf(session.rawSession), savePath);
    });
    const loadCkpt = async (scaffold: Scaffold, sess: Session): Promise<void> => {
      const contents = await (scaffold.saver as BundleSaver).restore(savePath);
      await storeOf(sess).restore(contents.values);
    };
    const sessionCreator = new ChiefSessionCreator({ scaffold: new Scaffold({ initFn: loadCkpt }), graph: g, ...env() });
    await withSession({ sessionCreator, graph: g, hooks: [new StopAtStepHook({ lastStep: 5 })], ...env() }, async (session) => {
      expect(await session.run("global_step")).toBe(3);
      expect(session.shouldStop()).toBe(false);
      expect(await session.run("do_step")).toBe(4);
      expect(session.shouldStop()).toBe(false);
      expect(await session.run("do_step")).toBe(5);
      expect(session.shouldStop()).toBe(true);
    });
  });

  it("MonitoredSessionTest.test_num_steps: 3 steps, save; restore through initFn and do 4 more", async () => {
    const dir = tempDir();
    const { g } = stepGraph();
    const savePath = join(dir, "step-3");
    await withSession({ graph: g, hooks: [new StopAtStepHook({ numSteps: 3 })], ...env() }, async (session) => {
      for (const expected of [1, 2]) {
        expect(await session.run("do_step")).toBe(expected);
        expect(session.shouldStop()).toBe(false);
      }
      expect(await session.run("do_step")).toBe(3);
      expect(session.shouldStop()).toBe(true);
      await new BundleSaver().save(storeOf(session.rawSession), savePath);
    });
    const scaffold = new Scaffold({
      initFn: async (sc, sess) => storeOf(sess).restore((await (sc.saver as BundleSaver).restore(savePath)).values),
    });
    const sessionCreator = new ChiefSessionCreator({ scaffold, graph: g, ...env() });
    await withSession({ sessionCreator, graph: g, hooks: [new StopAtStepHook({ numSteps: 4 })], ...env() }, async (session) => {
      for (const expected of [4, 5, 6]) {
        expect(await session.run("do_step")).toBe(expected);
        expect(session.shouldStop()).toBe(false);
      }
      expect(await session.run("do_step")).toBe(7);
      expect(session.shouldStop()).toBe(true);
    });
  });

  it("MonitoredSessionTest.test_recovery: a restart resumes from the CheckpointManager's checkpoint, via checkpointDir and checkpointFilenameWithPath", async () => {
    const dir = tempDir();
    const { g } = stepGraph();
    const scaffold = new Scaffold({ graph: g });
    const saver = new SaveEveryStepHook(dir);
    await withSession(
      { sessionCreator: new ChiefSessionCreator({ scaffold, checkpointDir: dir, ...env() }), hooks: [saver], graph: g, ...env() },
      async (session) => {
        expect(await session.run("global_step")).toBe(0);
        expect(await session.run("do_step")).toBe(1);
        expect(await session.run("do_step")).toBe(2);
      },
    );
    expect(saver.saved.at(-1)).toBe(join(dir, "model.ckpt-2"));
    let initRan = 0;
    const counting = new Scaffold({ graph: g, initFn: () => void initRan++ });
    await withSession(
      { sessionCreator: new ChiefSessionCreator({ scaffold: counting, checkpointDir: dir, ...env() }), graph: g, ...env() },
      async (session) => expect(await session.run("global_step")).toBe(2),
    );
    const latest = (await latestCheckpoint(dir)) as string;
    await withSession(
      { sessionCreator: new ChiefSessionCreator({ scaffold: counting, checkpointFilenameWithPath: latest, ...env() }), graph: g, ...env() },
      async (session) => expect(await session.run("global_step")).toBe(2),
    );
    expect(initRan).toBe(0);
  });

  it("MonitoredSessionTest.test_recover_and_retry_on_aborted_error: after an Aborted error the latest checkpoint is restored and gs continues at 3", async () => {
    const dir = tempDir();
    const { g } = stepGraph();
    const scaffold = new Scaffold({ graph: g });
    const abortHook = new HookRecorder("abort", { throwIn: { method: "beforeRun", error: new AbortedError("Abort"), at: 4 } });
    const ckptHook = new SaveEveryStepHook(dir);
    const sessionCreator = new ChiefSessionCreator({ scaffold, checkpointDir: dir, ...env() });
    await withSession({ sessionCreator, hooks: [abortHook, ckptHook], graph: g, ...env() }, async (session) => {
      expect(await session.run("global_step")).toBe(0);
      expect(await session.run("do_step")).toBe(1);
      expect(await session.run("do_step")).toBe(2);
      expect(session.shouldStop()).toBe(false);
      const before = session.rawSession;
      // The 4th beforeRun raises Aborted: the session is re-created from the checkpoint and the run retried.
      expect(await session.run("do_step")).toBe(3);
      expect(abortHook.counts.beforeRun).toBe(5);
      expect(abortHook.counts.afterCreateSession).toBe(2);
      expect(session.rawSession).not.toBe(before);
      expect(session.shouldStop()).toBe(false);
      expect(await session.run("do_step")).toBe(4);
      expect(session.shouldStop()).toBe(false);
    });
  });

  it("MonitoredSessionTest.test_retry_on_unavailable_error: without a checkpoint the recovered session is initialized afresh (gs restarts)", async () => {
    const { g } = stepGraph();
    const hook = new HookRecorder("unavailable", { throwIn: { method: "beforeRun", error: new UnavailableError("Unavailable"), at: 4 } });
    await withSession({ hooks: [hook], graph: g, ...env() }, async (session) => {
      expect(await session.run("global_step")).toBe(0);
      expect(await session.run("do_step")).toBe(1);
      expect(await session.run("do_step")).toBe(2);
      expect(await session.run("do_step")).toBe(1);
    });
  });

  it("MonitoredSessionTest.test_retry_initialization_on_aborted_error: initFn aborts once, the creation is retried silently", async () => {
    const { g } = stepGraph();
    const made: GraphSession[] = [];
    let raised = false;
    const scaffold = new Scaffold({
      initFn: () => {
        if (!raised) {
          raised = true;
          throw new AbortedError("Abort");
        }
      },
    });
    const sessionFactory = (): GraphSession => {
      const s = g.session();
      made.push(s);
      return s;
    };
    const sessionCreator = new ChiefSessionCreator({ scaffold, sessionFactory, ...env() });
    await withSession({ sessionCreator, graph: g, ...env() }, async (session) => {
      expect(session.shouldStop()).toBe(false);
      expect(await session.run("global_step")).toBe(0);
    });
    expect(raised).toBe(true);
    expect(made).toHaveLength(2);
    // The session whose init aborted was closed, not leaked.
    await expect(made[0]?.run("global_step")).rejects.toThrow(/closed Session/);
  });

  it("local init runs on every (re)created session, even without a checkpoint", async () => {
    const g = new Graph();
    const gstep = g.globalStep();
    const counter = g.variable("counter", { initialValue: 100, collection: "local" });
    g.op("do_step", (ctx) => {
      ctx.assign(counter, ctx.read(counter) + 1);
      return ctx.assignAdd(gstep, 1);
    });
    const hook = new HookRecorder("abort", { throwIn: { method: "beforeRun", error: new AbortedError("Abort"), at: 2 } });
    await withSession({ hooks: [hook], graph: g, checkpointDir: tempDir(), ...env() }, async (session) => {
      await session.run("do_step");
      expect(await session.run("counter")).toBe(100); // recovered: locals re-initialized
      expect(hook.counts.afterCreateSession).toBe(2);
    });
  });
});

describe("SingularMonitoredSession with TensorFlow's signature", () => {
  it("SingularMonitoredSessionTest.test_handles_initialization: variables are initialized without a session creator", async () => {
    const g = new Graph();
    g.variable("a_var", 0);
    const session = await SingularMonitoredSession.create({ graph: g, ...env() });
    expect(await session.run("a_var")).toBe(0);
    await session.close();
    expect(g.finalized).toBe(false);
  });

  it("restores from checkpointDir and checkpointFilenameWithPath, with a scaffold's graph", async () => {
    const dir = tempDir();
    const { g } = stepGraph();
    const writer = g.session();
    await writer.variables.initialize();
    await writer.run("do_step");
    await writer.run("do_step");
    await (await CheckpointManager.create({ directory: dir, clock: new VirtualClock(), logger: silentLogger })).save(writer.variables);
    const latest = (await latestCheckpoint(dir)) as string;
    for (const where of [{ checkpointDir: dir }, { checkpointFilenameWithPath: latest }]) {
      const session = await SingularMonitoredSession.create({ scaffold: new Scaffold({ graph: g }), ...where, ...env() });
      expect(session.graph).toBe(g);
      expect(await session.run("do_step")).toBe(3);
      await session.close();
      expect(g.finalized).toBe(false);
    }
  });

  it("a clear ValueError when nothing can make sessions, or when creator options are given with a sessionCreator", async () => {
    await expect(SingularMonitoredSession.create({ ...env() })).rejects.toThrow(
      new ValueError("MonitoredSession needs a sessionCreator, or a graph, a scaffold with a graph or a sessionFactory to create sessions"),
    );
    await expect(SingularMonitoredSession.create({ scaffold: new Scaffold(), ...env() })).rejects.toThrow(ValueError);
    const g = new Graph();
    await expect(
      MonitoredSession.create({ sessionCreator: new ChiefSessionCreator({ graph: g }), checkpointDir: "/x", ...env() }),
    ).rejects.toThrow(/checkpointDir cannot be given with sessionCreator/);
  });
});
