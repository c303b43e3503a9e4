import { describe, expect, it } from "vitest";
import { RuntimeError } from "../../src/errors.js";
import { FeedFnHook } from "../../hooks/FeedFnHook.js";
import { driveHooks, trainingGraph } from "../util/driveHooks.js";

const plusOne = () => trainingGraph({ ops: { y: (ctx) => ctx.feed<number>("x") + 1 } });

describe("FeedFnHook", () => {
  it("FeedFnHookTest.test_feeding_placeholder: the fed x = 1 makes y = x + 1 evaluate to 2", async () => {
    const hook = new FeedFnHook({ feedFn: () => ({ x: 1 }) });
    const { sess } = await driveHooks({ hooks: [hook], graph: plusOne() });
    expect(await sess.run("y")).toBe(2);
    await sess.close();
  });

  it("calls feedFn once per run, so each run gets fresh feeds", async () => {
    let calls = 0;
    const hook = new FeedFnHook({ feedFn: () => ({ x: 10 * ++calls }) });
    const { sess } = await driveHooks({ hooks: [hook], graph: plusOne() });
    expect([await sess.run("y"), await sess.run("y"), await sess.run("y")]).toEqual([11, 21, 31]);
    expect(calls).toBe(3);
    await sess.close();
  });

  it("feeding an input the caller also feeds is a RuntimeError", async () => {
    const hook = new FeedFnHook({ feedFn: () => ({ x: 1 }) });
    const { sess } = await driveHooks({ hooks: [hook], graph: plusOne() });
    await expect(sess.run("y", { x: 5 })).rejects.toThrow(RuntimeError);
    await sess.close();
  });
});

describe("FeedFnHook options", () => {
  it("rejects a feedFn that is not a function, naming the option", () => {
    expect(() => new FeedFnHook({ feedFn: { x: 1 } as never })).toThrow(/feedFn must be a function/);
  });
});
