import { describe, expect, it } from "vitest";

import { BundleSaver, type Saver } from "../../src/checkpoint/index.js";
import { RuntimeError } from "../../src/errors.js";
import { Graph } from "../../src/session/Graph.js";
import { runScaffoldOp, Scaffold, type ScaffoldOp } from "../../src/creation/Scaffold.js";
import type { Session } from "../../src/session/Session.js";
import { FakeSession } from "../../src/testing/index.js";

/** A graph with one global and one local variable, as in TensorFlow's ScaffoldTest. */
const graphWithVariables = (): Graph => {
  const g = new Graph();
  g.variable("my_var", 1);
  g.variable("my_local_var", { initialValue: 2, collection: "local" });
  return g;
};

const run = (session: Session, op: ScaffoldOp | undefined): Promise<unknown> => {
  if (op === undefined) throw new Error("op is undefined");
  return runScaffoldOp(session, op);
};

describe("Scaffold", () => {
  it("ScaffoldTest.test_nothing_created_before_finalize: every piece is undefined before finalize", () => {
    const s = new Scaffold();
    expect(s.initOp).toBeUndefined();
    expect(s.initFeedDict).toBeUndefined();
    expect(s.initFn).toBeUndefined();
    expect(s.readyOp).toBeUndefined();
    expect(s.readyForLocalInitOp).toBeUndefined();
    expect(s.localInitOp).toBeUndefined();
    expect(s.localInitFeedDict).toBeUndefined();
    expect(s.summaryOp).toBeUndefined();
    expect(s.saver).toBeUndefined();
  });

  it("ScaffoldTest.test_defaults_empty_graph: readyOp lists all variables, readyForLocalInitOp the global ones; init ops clear them", async () => {
    const g = graphWithVariables();
    const s = new Scaffold({ graph: g }).finalize();
    expect(typeof s.initOp).toBe("function");
    expect(typeof s.readyOp).toBe("function");
    expect(typeof s.readyForLocalInitOp).toBe("function");
    expect(typeof s.localInitOp).toBe("function");
    expect(s.saver).toBeInstanceOf(BundleSaver);
    expect(s.summaryOp).toBeUndefined();
    const sess = g.session();
    expect(await run(sess, s.readyOp)).toEqual(["my_var", "my_local_var"]);
    expect(await run(sess, s.readyForLocalInitOp)).toEqual(["my_var"]);
    await run(sess, s.initOp);
    expect(await run(sess, s.readyForLocalInitOp)).toEqual([]);
    expect(await run(sess, s.readyOp)).toEqual(["my_local_var"]);
    await run(sess, s.localInitOp);
    expect(await run(sess, s.readyOp)).toEqual([]);
    expect(await sess.run(["my_var", "my_local_var"])).toEqual([1, 2]);
  });

  it("ScaffoldTest.test_defaults_no_variables: defaults are made and report ready, even for a session without a variable store", async () => {
    const s = new Scaffold({ graph: new Graph() }).finalize();
    const bare: Session = { run: () => Promise.resolve(null) as never };
    for (const sess of [new Graph().session(), bare]) {
      expect(await run(sess, s.readyOp)).toEqual([]);
      expect(await run(sess, s.readyForLocalInitOp)).toEqual([]);
      await run(sess, s.initOp);
      await run(sess, s.localInitOp);
    }
    expect(s.saver).toBeInstanceOf(BundleSaver);
  });

  it("ScaffoldTest.test_caches_values: scaffolds of one graph share the default saver and ops; another graph gets its own saver", () => {
    const g = graphWithVariables();
    const a = new Scaffold({ graph: g }).finalize();
    g.unfinalize();
    const b = new Scaffold({ graph: g }).finalize();
    expect(b.saver).toBe(a.saver);
    expect(b.initOp).toBe(a.initOp);
    expect(b.readyOp).toBe(a.readyOp);
    expect(b.readyForLocalInitOp).toBe(a.readyForLocalInitOp);
    expect(b.localInitOp).toBe(a.localInitOp);
    expect(new Scaffold({ graph: new Graph() }).finalize().saver).not.toBe(a.saver);
  });

  it("ScaffoldTest.test_uses_passed_values: explicit pieces are kept by finalize", () => {
    const saver: Saver = new BundleSaver();
    const s = new Scaffold({
      initOp: "init2",
      initFeedDict: { x: 3 },
      initFn: () => 4,
      readyOp: "ready5",
      readyForLocalInitOp: "ready6",
      localInitOp: "local7",
      localInitFeedDict: { y: 8 },
      summaryOp: "summary9",
      saver,
    }).finalize();
    expect(s.initOp).toBe("init2");
    expect(s.initFeedDict).toEqual({ x: 3 });
    expect(s.initFn?.(new FakeSession())).toBe(4);
    expect(s.readyOp).toBe("ready5");
    expect(s.readyForLocalInitOp).toBe("ready6");
    expect(s.localInitOp).toBe("local7");
    expect(s.localInitFeedDict).toEqual({ y: 8 });
    expect(s.summaryOp).toBe("summary9");
    expect(s.saver).toBe(saver);
  });

  it("ScaffoldTest.test_graph_is_finalized: adding to the graph after finalize raises", () => {
    const g = new Graph();
    new Scaffold({ graph: g }).finalize();
    expect(g.finalized).toBe(true);
    expect(() => g.variable("late", 0)).toThrow(RuntimeError);
    expect(() => g.op("late_op", () => 0)).toThrow(/Graph is finalized/);
  });

  it("ScaffoldTest.test_new_scaffold_from_default_scaffold: explicit arguments win over the copied defaults", () => {
    const g = new Graph();
    const old = new Scaffold({ graph: g }).finalize();
    const saver = new BundleSaver();
    const s = new Scaffold({
      initOp: "init2",
      initFeedDict: { x: 3 },
      initFn: () => 4,
      readyOp: "ready5",
      readyForLocalInitOp: "ready6",
      localInitOp: "local7",
      localInitFeedDict: { y: 8 },
      saver,
      copyFromScaffold: old,
    }).finalize();
    expect(s.initOp).toBe("init2");
    expect(s.initFeedDict).toEqual({ x: 3 });
    expect(s.initFn?.(new FakeSession())).toBe(4);
    expect(s.readyOp).toBe("ready5");
    expect(s.readyForLocalInitOp).toBe("ready6");
    expect(s.localInitOp).toBe("local7");
    expect(s.localInitFeedDict).toEqual({ y: 8 });
    expect(s.saver).toBe(saver);
    expect(s.graph).toBe(g);
  });

  it("ScaffoldTest.test_new_scaffold_from_existing_scaffold: overrides win; the rest (including initFn) is copied", () => {
    const seen: Scaffold[] = [];
    const saver = new BundleSaver();
    const old = new Scaffold({
      initOp: "init2",
      initFeedDict: { x: 3 },
      initFn: (scaffold) => {
        seen.push(scaffold);
        return 4;
      },
      readyOp: "ready5",
      readyForLocalInitOp: "ready6",
      localInitOp: "local7",
      localInitFeedDict: { y: 8 },
      saver,
    }).finalize();
    const overridden = new Scaffold({
      initOp: "init4",
      initFeedDict: { x: 6 },
      initFn: () => 8,
      readyOp: "ready10",
      readyForLocalInitOp: "ready12",
      localInitOp: "local14",
      localInitFeedDict: { y: 15 },
      copyFromScaffold: old,
    }).finalize();
    expect(overridden.initOp).toBe("init4");
    expect(overridden.initFeedDict).toEqual({ x: 6 });
    expect(overridden.initFn?.(new FakeSession())).toBe(8);
    expect(overridden.readyOp).toBe("ready10");
    expect(overridden.readyForLocalInitOp).toBe("ready12");
    expect(overridden.localInitOp).toBe("local14");
    expect(overridden.localInitFeedDict).toEqual({ y: 15 });
    expect(overridden.saver).toBe(saver);

    const copied = new Scaffold({ copyFromScaffold: old });
    expect(copied.initOp).toBe("init2");
    expect(copied.localInitFeedDict).toEqual({ y: 8 });
    // The user's function is copied and bound to the new scaffold, not the old one's wrapper.
    expect(copied.initFn).not.toBe(old.initFn);
    expect(copied.initFn?.(new FakeSession())).toBe(4);
    expect(seen).toEqual([copied]);
  });

  it("ScaffoldTest.test_copy_from_scaffold_is_scaffold: anything else is a TypeError", () => {
    expect(() => new Scaffold({ copyFromScaffold: { initOp: "x" } as unknown as Scaffold })).toThrow(
      new TypeError("copyFromScaffold is not a Scaffold instance."),
    );
  });

  it("copying coalesces on undefined, not truthiness: an explicit empty feed dict or empty op name is kept", () => {
    const old = new Scaffold({ initFeedDict: { x: 1 }, localInitFeedDict: { y: 2 }, initOp: "init" });
    const s = new Scaffold({ initFeedDict: {}, localInitFeedDict: {}, initOp: "", copyFromScaffold: old });
    expect(s.initFeedDict).toEqual({});
    expect(s.localInitFeedDict).toEqual({});
    expect(s.initOp).toBe("");
  });

  it("initFn is called as initFn(scaffold, session) through a (session) wrapper", () => {
    const calls: [Scaffold, Session][] = [];
    const s = new Scaffold({ initFn: (scaffold, session) => calls.push([scaffold, session]) });
    const sess = new FakeSession();
    s.initFn?.(sess);
    expect(calls).toEqual([[s, sess]]);
  });

  it("Scaffold.defaultLocalInitOp initializes local variables only; finalize uses it", async () => {
    const g = graphWithVariables();
    const sess = g.session();
    await run(sess, Scaffold.defaultLocalInitOp());
    expect(sess.variables.reportUninitialized("all")).toEqual(["my_var"]);
    expect(new Scaffold().finalize().localInitOp).toBe(Scaffold.defaultLocalInitOp());
  });

  it("runScaffoldOp runs a named op with its feeds and a function op with the session", async () => {
    const sess = new FakeSession({ ops: { echo: (c) => c.feeds["x"] } });
    expect(await runScaffoldOp(sess, "echo", { x: 5 })).toBe(5);
    expect(await runScaffoldOp(sess, (s) => s === sess)).toBe(true);
  });
});
