/** The classifier session the TensorFlow.js adapter tests train, and a loop that trains it. */
import * as tf from "@tensorflow/tfjs";

import { accuracy, buildModel, classifierLoss, makeDataset } from "../../examples/tfjs-classifier-data.js";
import type { Session } from "../../src/session/Session.js";
import { InMemoryDataSource, tfjsSession, type TfjsSession, type TfjsSessionOptions } from "../../src/tfjs/index.js";

/** 180 points of the example's blobs. */
export const dataset = makeDataset(42, 60);

/** The example's 2 → 16 → 3 classifier (seeded) with Adam, batches of 16 shuffled with seed 7. */
export const makeSession = (overrides: Partial<TfjsSessionOptions> = {}): Promise<TfjsSession> =>
  tfjsSession({
    model: buildModel(1),
    optimizer: tf.train.adam(0.02),
    data: new InMemoryDataSource({ xs: dataset.xs, ys: dataset.ys, batchSize: 16, seed: 7 }),
    lossFn: classifierLoss,
    metrics: { accuracy },
    ...overrides,
  });

/** {@link makeSession}, initialized. */
export const initialized = async (overrides: Partial<TfjsSessionOptions> = {}): Promise<TfjsSession> => {
  const s = await makeSession(overrides);
  await s.variables.initialize();
  return s;
};

/** Runs `steps` `train` ops on `s`; returns each step's loss. */
export const train = async (s: Session, steps: number): Promise<number[]> => {
  const losses: number[] = [];
  for (let i = 0; i < steps; i++) losses.push((await s.run("train")) as number);
  return losses;
};
