import { describe, expect, it } from "vitest";
import { AbortedError, FailedPreconditionError, OutOfRangeError } from "../../src/errors.js";
import { silentLogger } from "../../src/Logger.js";
import { MonitoredSession } from "../../src/pipeline/MonitoredSession.js";
import { FakeSession, FakeSessionCreator, VirtualClock } from "../../src/testing/index.js";

describe("FakeSession", () => {
  it("has a global step and a default train op; records calls", async () => {
    const s = new FakeSession({ ops: { loss: (ctx) => ctx.call * 10 } });
    expect(await s.run({ t: "train", l: "loss", gs: "global_step" }, { f: 1 })).toEqual({ t: 1, l: 10, gs: 0 });
    expect(s.globalStep).toBe(1);
    expect(s.calls).toEqual([{ fetches: { t: "train", l: "loss", gs: "global_step" }, feeds: { f: 1 }, options: undefined }]);
  });

  it("sync: true gives runMaybeSync: plain-valued ops complete within the call, a promised op makes the rest wait; errors are thrown; without it there is none", async () => {
    expect(new FakeSession().runMaybeSync).toBeUndefined();
    const order: string[] = [];
    const s = new FakeSession({
      sync: true,
      ops: {
        a: () => (order.push("a"), 1),
        later: async () => (order.push("later"), 2),
        b: () => (order.push("b"), 3),
        bad: () => {
          throw new AbortedError("bad op");
        },
      },
    });
    const run = s.runMaybeSync as NonNullable<FakeSession["runMaybeSync"]>;
    // Plain values: the results themselves, the step applied at once.
    expect(run({ t: "train", a: "a", gs: "global_step" })).toEqual({ t: 1, a: 1, gs: 0 });
    expect(s.globalStep).toBe(1);
    // A promised op: a promise; the ops before it ran in the call, the ones after it wait.
    const pending = run(["a", "later", "b"]);
    expect(pending).toBeInstanceOf(Promise);
    expect(order).toEqual(["a", "a", "later"]);
    expect(await pending).toEqual([1, 2, 3]);
    expect(order).toEqual(["a", "a", "later", "b"]);
    // What run rejects with, runMaybeSync throws; run is unchanged.
    expect(() => run("bad")).toThrow(AbortedError);
    s.injectError(new OutOfRangeError("injected"), { atCall: 4 });
    expect(() => run("a")).toThrow(OutOfRangeError);
    await expect(s.run("bad")).rejects.toThrow("bad op");
    expect(await s.run({ a: "a", b: "b" })).toEqual({ a: 1, b: 3 });
    expect(s.calls).toHaveLength(6);
  });

  it("a monitored session over a sync FakeSession completes a run within the call when its hooks answer synchronously", async () => {
    const creator = new FakeSessionCreator(() => new FakeSession({ sync: true, ops: { first: () => 0 } }));
    const sess = await MonitoredSession.create({ sessionCreator: creator, hooks: [], logger: silentLogger, clock: new VirtualClock() });
    const result = sess.run(["first", "train"]);
    // No microtask has run yet, but both ops did (without runMaybeSync, "train" would wait for
    // one after "first").
    expect((creator.created[0] as FakeSession | undefined)?.globalStep).toBe(1);
    expect(await result).toEqual([0, 1]);
    await sess.close();
  });

  it("names() lists its variables and ops, as the Session contract's optional names()", () => {
    const s = new FakeSession({ ops: { loss: () => 0 }, variables: { w: 1 } }).setOp("eval", () => 1);
    expect(s.names()).toEqual(["global_step", "w", "loss", "train", "eval"]);
  });

  it("injects errors at a call, at a step, on a fetch, a number of times", async () => {
    const s = new FakeSession()
      .injectError(new AbortedError("call 2"), { atCall: 2 })
      .injectError(new OutOfRangeError("step 3"), { atStep: 3 })
      .injectError(new Error("on loss"), { onFetch: "loss", times: 2 });
    s.setOp("loss", () => 0);
    await s.run("train");
    await expect(s.run("train")).rejects.toThrow("call 2");
    await s.run("train");
    await s.run("train");
    await expect(s.run("train")).rejects.toThrow("step 3");
    await expect(s.run("loss")).rejects.toThrow("on loss");
    await expect(s.run("loss")).rejects.toThrow("on loss");
    expect(await s.run("loss")).toBe(0);
  });

  it("variables: uninitialized reporting, snapshot and restore", async () => {
    const s = new FakeSession({ variables: { w: new Float32Array([1]) }, localVariables: { acc: 0 }, initialized: false });
    expect(s.variables.reportUninitialized()).toEqual(["global_step", "w", "acc"]);
    await expect(s.run("w")).rejects.toThrow(FailedPreconditionError);
    await s.variables.initialize();
    await s.run("train");
    const snap = s.variables.snapshot();
    expect([...snap.keys()]).toEqual(["global_step", "w"]);
    const t = new FakeSession({ variables: { w: new Float32Array([0]) } });
    await t.variables.restore(snap);
    expect(t.globalStep).toBe(1);
    expect(t.get("w")).toEqual(new Float32Array([1]));
  });

  it("FakeSessionCreator follows its script, then its factory", async () => {
    const scripted = new FakeSession();
    const creator = new FakeSessionCreator(() => new FakeSession(), [new AbortedError("first"), scripted]);
    await expect(creator.createSession()).rejects.toThrow("first");
    expect(await creator.createSession()).toBe(scripted);
    expect(await creator.createSession()).not.toBe(scripted);
    expect(creator.created).toHaveLength(2);
  });
});
