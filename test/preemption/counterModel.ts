/** The preemption tests' model: a global step and a variable `v` that the `train` op counts up with it. */
import { Graph } from "../../src/session/Graph.js";

export const counterModel = () => {
  const g = new Graph();
  const step = g.globalStep();
  const v = g.variable("v", 0);
  g.op("train", (ctx) => {
    ctx.assign(v, (ctx.read(v) as number) + 1);
    return ctx.assignAdd(step, 1);
  });
  return g.session();
};
