import { describe, expect, it } from "vitest";
import { FailedPreconditionError, InvalidArgumentError, RuntimeError, ValueError } from "../../src/errors.js";
import { Graph } from "../../src/session/Graph.js";

const counterGraph = () => {
  const g = new Graph();
  const step = g.globalStep();
  const w = g.variable("w", new Float32Array([1, 2]));
  const acc = g.variable("acc", { initialValue: 0, collection: "local" });
  g.op("train", (ctx) => {
    const v = ctx.read(w).map((x) => x * 2);
    ctx.assign(w, v);
    return ctx.assignAdd(step, 1);
  });
  g.op("double_step", (ctx) => (ctx.run("train") as number) * 2);
  g.op("async_op", async (ctx) => ctx.feed<number>("x") + 1);
  return { g, step, w, acc };
};

describe("Graph", () => {
  it("a session's names() are the variables and ops (every fetchable name but feeds), before initialization", () => {
    const { g } = counterGraph();
    expect(g.opNames()).toEqual(["train", "double_step", "async_op"]);
    expect(g.session().names()).toEqual(["global_step", "w", "acc", "train", "double_step", "async_op"]);
  });

  it("variable fetches read the value at the start of the run; ops run once per run", async () => {
    const { g } = counterGraph();
    const s = g.session();
    await s.variables.initialize();
    expect(await s.run({ before: "global_step", t: "train", again: "double_step" })).toEqual({ before: 0, t: 1, again: 2 });
    expect(await s.run(["global_step", "w"])).toEqual([1, new Float32Array([2, 4])]);
  });

  it("feeds, async ops and nested fetch structures", async () => {
    const { g } = counterGraph();
    const s = g.session();
    await s.variables.initialize();
    expect(await s.run({ a: ["async_op", { x: "x" }] }, { x: 41 })).toEqual({ a: [42, { x: 41 }] });
    await expect(s.run("async_op")).rejects.toThrow(new InvalidArgumentError('You must feed a value for "x".'));
    expect(await s.run(null)).toBeNull();
  });

  it("reports uninitialized variables by collection and refuses to read them", async () => {
    const { g } = counterGraph();
    const s = g.session();
    expect(s.variables.reportUninitialized()).toEqual(["global_step", "w", "acc"]);
    expect(s.variables.reportUninitialized("local")).toEqual(["acc"]);
    await s.variables.initialize("global");
    expect(s.variables.reportUninitialized()).toEqual(["acc"]);
    await expect(s.run("acc")).rejects.toThrow(new FailedPreconditionError("Attempting to use uninitialized value acc"));
  });

  it("each session holds its own values", async () => {
    const { g } = counterGraph();
    const a = g.session();
    const b = g.session();
    await a.variables.initialize();
    await b.variables.initialize();
    await a.run("train");
    expect(await b.run("global_step")).toBe(0);
  });

  it("snapshot is a deep copy of the global variables; restore is all or nothing", async () => {
    const { g } = counterGraph();
    const s = g.session();
    await s.variables.initialize();
    const snap = s.variables.snapshot();
    expect([...snap.keys()]).toEqual(["global_step", "w"]);
    expect(snap.get("global_step")).toEqual({ dtype: "int64", shape: [], data: BigInt64Array.of(0n) });
    await s.run("train");
    expect(snap.get("w")?.data).toEqual(new Float32Array([1, 2]));
    await s.variables.restore(snap);
    expect(await s.run(["global_step", "w"])).toEqual([0, new Float32Array([1, 2])]);
    const bad = new Map(snap);
    bad.set("w", { dtype: "float64", shape: [2], data: new Float64Array(2) });
    bad.set("global_step", { dtype: "int64", shape: [], data: BigInt64Array.of(9n) });
    expect(() => s.variables.restore(bad)).toThrow(/Variable "w" is float32 but the checkpoint holds float64/);
    expect(await s.run("global_step")).toBe(0);
    expect(() => s.variables.restore(new Map([["nope", snap.get("w")!]]))).toThrow(/"nope"/);
  });

  it("snapshots share memory with immutable values; readForUpdate copies only when shared", async () => {
    const g = new Graph();
    const big = g.variable("big", new Float32Array([1, 2, 3]));
    g.op("scale_in_place", (ctx) => {
      const a = ctx.readForUpdate(big);
      for (let i = 0; i < a.length; i++) a[i] = (a[i] as number) * 10;
    });
    g.op("update_twice_same_array", (ctx) => ctx.readForUpdate(big) === ctx.readForUpdate(big));
    const s = g.session();
    await s.variables.initialize();
    const snap = s.variables.snapshot();
    const [before] = (await s.run(["big"])) as [Float32Array];
    await s.run("scale_in_place");
    // Neither the snapshot nor the earlier fetch saw the in-place update.
    expect(snap.get("big")?.data).toEqual(new Float32Array([1, 2, 3]));
    expect(before).toEqual(new Float32Array([1, 2, 3]));
    expect(await s.run("big")).toEqual(new Float32Array([10, 20, 30]));
    // Owned after the copy: a second readForUpdate in the same op returns the same array.
    expect(await s.run("update_twice_same_array")).toBe(true);
    await s.run("scale_in_place");
    expect(await s.run("big")).toEqual(new Float32Array([100, 200, 300]));
  });

  it("rejects duplicate names, empty names, unknown fetches and changes after finalize", async () => {
    const { g } = counterGraph();
    expect(() => g.variable("w", 1)).toThrow(ValueError);
    expect(() => g.op("", () => 1)).toThrow(ValueError);
    expect(() => g.globalStep("other")).toThrow(/already has a global step/);
    const s = g.session();
    await expect(s.run("missing")).rejects.toThrow(/Fetch "missing" is not a variable, op or feed/);
    g.finalize();
    expect(() => g.op("late", () => 1)).toThrow(new RuntimeError('Graph is finalized and cannot be modified: cannot add op "late".'));
    s.close();
    await expect(s.run("train")).rejects.toThrow("Attempted to use a closed Session.");
  });

  it("assignAdd checks its variable like assign: another graph's variable or a non-number is InvalidArgumentError", async () => {
    const { g } = counterGraph();
    const other = new Graph();
    const foreignStep = other.globalStep();
    const name = g.variable("name", "abc");
    g.op("foreign_add", (ctx) => ctx.assignAdd(foreignStep, 1));
    g.op("string_add", (ctx) => ctx.assignAdd(name as never, 1));
    const s = g.session();
    await s.variables?.initialize();
    await expect(s.run("foreign_add")).rejects.toThrow(InvalidArgumentError);
    await expect(s.run("string_add")).rejects.toThrow(InvalidArgumentError);
    // Neither variable was touched.
    expect(await s.run(["global_step", "name"])).toEqual([0, "abc"]);
  });

  it("runMaybeSync answers synchronously until an op answers with a promise, and throws what run rejects with", async () => {
    const { g } = counterGraph();
    const s = g.session();
    await s.variables.initialize();
    // All synchronous ops: the results themselves, in the fetches' structure.
    expect(s.runMaybeSync({ before: "global_step", t: "train" })).toEqual({ before: 0, t: 1 });
    // An asynchronous op: the rest of the run waits for it, and a promise comes back.
    const pending = s.runMaybeSync(["async_op", "train", { x: "x" }], { x: 1 });
    expect(pending).toBeInstanceOf(Promise);
    expect(await pending).toEqual([2, 2, { x: 1 }]);
    // Both paths agree with run.
    expect(await s.run(["global_step", "async_op"], { x: 5 })).toEqual([2, 6]);
    expect(() => s.runMaybeSync("nope")).toThrow(new InvalidArgumentError('Fetch "nope" is not a variable, op or feed of the graph.'));
    await expect(s.runMaybeSync("async_op") as Promise<unknown>).rejects.toThrow(new InvalidArgumentError('You must feed a value for "x".'));
    s.close();
    expect(() => s.runMaybeSync("train")).toThrow(new RuntimeError("Attempted to use a closed Session."));
    await expect(s.run("train")).rejects.toThrow(new RuntimeError("Attempted to use a closed Session."));
  });
});
