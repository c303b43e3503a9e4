/** The README's example, run as a test so that it stays true. */
import { describe, expect, it } from "vitest";
import { NanTensorHook, StepCounterHook, StopAtStepHook } from "../hooks/index.js";
import { Graph, silentLogger, withSession } from "../src/index.js";

describe("README example", () => {
  it("trains w towards 3 and stops at step 100", async () => {
    const graph = new Graph();
    const step = graph.globalStep();
    const w = graph.variable("w", 0);
    graph.op("loss", (ctx) => (ctx.read(w) - 3) ** 2);
    graph.op("train", (ctx) => {
      ctx.assign(w, ctx.read(w) - 0.1 * 2 * (ctx.read(w) - 3)); // one gradient step
      return ctx.assignAdd(step, 1);
    });

    const hooks = [new StopAtStepHook({ lastStep: 100 }), new NanTensorHook({ lossTensor: "loss" }), new StepCounterHook()];

    const final = await withSession({ graph, hooks, logger: silentLogger }, async (sess) => {
      while (!sess.shouldStop()) await sess.run("train");
      return sess.rawSession?.run({ w: "w", step: "global_step" });
    });
    expect(final?.step).toBe(100);
    expect(final?.w as number).toBeCloseTo(3, 6);
  });
});
