/**
 * Linear regression by mini-batch gradient descent, in plain TypeScript, run by a
 * MonitoredSession with the step hooks: stop at a step, step rate, loss logging, NaN guard and
 * a feed function that supplies batches.
 *
 * Run it with `npx tsx examples/linear-regression.ts` (`npm start` runs the bundled TensorFlow.js
 * classifier, examples/tfjs-classifier.yaml, instead).
 */
import {
  FeedFnHook,
  LoggingTensorHook,
  NanTensorHook,
  StepCounterHook,
  StopAtStepHook,
} from "../hooks/index.js";
import { Graph, withSession } from "../src/index.js";

// A deterministic data set: y = 3x + 2 plus noise, from a seeded generator.
const rng = (seed: number) => () => {
  seed = (seed * 1664525 + 1013904223) >>> 0;
  return seed / 2 ** 32;
};
const random = rng(42);
const N = 10_000;
const xs = Float64Array.from({ length: N }, () => random() * 4 - 2);
const ys = xs.map((x) => 3 * x + 2 + (random() - 0.5) * 0.2);

// The model: two variables, a loss op and a train op that applies one SGD step.
const graph = new Graph();
const globalStep = graph.globalStep();
const w = graph.variable("w", 0);
const b = graph.variable("b", 0);
const learningRate = 0.05;

const batchLoss = (wv: number, bv: number, x: Float64Array, y: Float64Array): number => {
  let sum = 0;
  for (let i = 0; i < x.length; i++) {
    const e = wv * (x[i] as number) + bv - (y[i] as number);
    sum += e * e;
  }
  return sum / x.length;
};

graph.op("loss", (ctx) => batchLoss(ctx.read(w), ctx.read(b), ctx.feed<Float64Array>("x"), ctx.feed<Float64Array>("y")));
graph.op("train", (ctx) => {
  const x = ctx.feed<Float64Array>("x");
  const y = ctx.feed<Float64Array>("y");
  const wv = ctx.read(w);
  const bv = ctx.read(b);
  let gw = 0;
  let gb = 0;
  for (let i = 0; i < x.length; i++) {
    const e = wv * (x[i] as number) + bv - (y[i] as number);
    gw += (2 * e * (x[i] as number)) / x.length;
    gb += (2 * e) / x.length;
  }
  ctx.assign(w, wv - learningRate * gw);
  ctx.assign(b, bv - learningRate * gb);
  return ctx.assignAdd(globalStep, 1);
});

// Batches of 64, cycling through the data.
const batchSize = 64;
let cursor = 0;
const nextBatch = () => {
  if (cursor + batchSize > N) cursor = 0;
  const batch = { x: xs.subarray(cursor, cursor + batchSize), y: ys.subarray(cursor, cursor + batchSize) };
  cursor += batchSize;
  return batch;
};

const lastStep = 2_000;
console.log(`Training y = w*x + b on ${N} points, batch ${batchSize}, learning rate ${learningRate}, up to step ${lastStep}.`);

await withSession(
  {
    graph,
    hooks: [
      new FeedFnHook({ feedFn: nextBatch }),
      new StopAtStepHook({ lastStep }),
      new StepCounterHook({ everyNSteps: 500 }),
      new LoggingTensorHook({ tensors: { step: "global_step", loss: "loss", w: "w", b: "b" }, everyNIter: 250 }),
      new NanTensorHook({ lossTensor: "loss" }),
    ],
  },
  async (sess) => {
    while (!sess.shouldStop()) await sess.run("train");
    // A variable's name is a typed fetch: the results are numbers, no cast needed.
    const final = await sess.rawSession?.run({ w: w.name, b: b.name, step: globalStep.name });
    if (final !== undefined) {
      console.log(`Done at step ${final.step}: w = ${final.w.toFixed(4)} (true 3), b = ${final.b.toFixed(4)} (true 2).`);
    }
  },
);
