/**
 * The preemption benchmark's copy of test/fixtures/preemption/customLoop.ts (the custom
 * TensorFlow.js loop of examples/preemption-custom-loop.ts), run by each task under
 * `monitored-session launch --workers N -- node --import tsx bench/preemptionLoop.ts` for
 * `agreementSteps` (bench/clusterPreemption.ts). The same model, data, handler and loop, with
 * three additions for the measurement:
 *
 * - each handler event line carries `hostTimeMs`, this process's `performance.timeOrigin +
 *   performance.now()` when the event was emitted (the clock the benchmark's `kill()` is timed
 *   with), and `atRun`, the handler's run counter then;
 * - the preemption save is timed: `saveFn` calls `handler.save()`, which is what the handler's
 *   own save does (its manager, the same wrapped store), and prints `<task>: save {"ms": …}`;
 * - at exit (the handler's `exitFn` calls `process.exit`), `<task>: steps {…}` ({@link LoopSteps})
 *   is written synchronously from `process.on("exit")`.
 *
 * Environment: STEPS, CHECKPOINT_DIR, DATA_PARALLEL ("1": one replica group; else independent
 * replicas that agree over the coordination service), GRACE_PERIOD_SECS, as in the fixture; and
 * AGREEMENT_PATH: "coordination" hides the replica group's stop vote from the handler (its
 * cluster resolver forwards every member of the task but `replicaStop`), so that a data-parallel
 * group, whose all-reduce keeps the ranks in lockstep, agrees over the coordination service as
 * TensorFlow's MultiWorkerMirroredStrategy does; unset (the default), the handler gets the task
 * itself, and a plain stop of a data-parallel group takes the vote.
 *
 * Lines: `<task>: starting at run N`, `<task>: training` (after its first step), `<task>: event
 * <json>`, `<task>: save <json>`, `<task>: steps <json>`, `<task>: done at run N`.
 */
import { writeSync } from "node:fs";
import * as tf from "@tensorflow/tfjs";

import { PreemptionCheckpointHandler, TerminationConfig, type PreemptionClusterResolver } from "../src/preemption/index.js";
import { startTask } from "../src/runtime/index.js";
import { InMemoryDataSource, tfjsSession, useBackend } from "../src/tfjs/index.js";
import { accuracy, buildDeepModel, buildOptimizer, classifierLoss, makeSpirals } from "../examples/tfjs-classifier-data.js";
import { median } from "./stats.js";

/** The `<task>: steps <json>` line, written at exit. */
export interface LoopSteps {
  /** Steps this process ran (`handler.run` calls completed), the first one (the warm-up) included. */
  readonly steps: number;
  /** Median time of one `await handler.run(step)`, the first step left out, in ms. */
  readonly medianStepMs: number;
}

tf.enableProdMode();
await useBackend("wasm");

const env = process.env;
const steps = Number(env["STEPS"] ?? 100_000);
const checkpointDir = env["CHECKPOINT_DIR"] as string;
const dataParallel = env["DATA_PARALLEL"] === "1";
const agreementPath = env["AGREEMENT_PATH"] ?? "default";
if (agreementPath !== "default" && agreementPath !== "coordination") throw new Error(`AGREEMENT_PATH: expected "coordination" or unset, got "${agreementPath}"`);
const hostNow = (): number => performance.timeOrigin + performance.now();

const task = await startTask({ dataParallel });
const say = (line: string): void => void process.stdout.write(`${task.name}: ${line}\n`);
const rank = task.idInCluster ?? 0;
const data = makeSpirals(42);
const session = await tfjsSession({
  model: buildDeepModel(1),
  optimizer: buildOptimizer(0.01),
  data: new InMemoryDataSource({ xs: data.xs, ys: data.ys, batchSize: 64, seed: 7, ...(dataParallel ? { shard: { index: rank, count: task.numWorkers } } : {}) }),
  lossFn: classifierLoss,
  metrics: { accuracy },
  ...(task.collective === undefined ? {} : { collective: task.collective }),
});
/** The task without its group's stop vote: the agreement goes through the coordination service. */
const withoutVote: PreemptionClusterResolver = {
  clusterSpec: task.clusterSpec,
  taskType: task.taskType,
  taskIndex: task.taskIndex,
  isChief: task.isChief,
  numWorkers: task.numWorkers,
  idInCluster: task.idInCluster,
  coordination: task.coordination,
  livenessTimeoutMs: task.livenessTimeoutMs,
  isChiefLoss: (e) => task.isChiefLoss(e),
  untilErrorHeard: async () => task.untilErrorHeard?.(),
  replicaStop: undefined,
};
const handler: PreemptionCheckpointHandler = await PreemptionCheckpointHandler.create({
  clusterResolver: agreementPath === "coordination" ? withoutVote : task,
  checkpointDir,
  store: session.variables,
  initFn: () => session.variables.initialize(),
  terminationConfig: new TerminationConfig({
    gracePeriodSecs: Number(env["GRACE_PERIOD_SECS"] ?? 0),
    saveFn: async (options) => {
      const t0 = performance.now();
      await handler.save(options);
      say(`save ${JSON.stringify({ ms: performance.now() - t0 })}`);
    },
  }),
});
// Its typed events (its lines, `log` events, are printed by its logger already).
handler.events$.subscribe((e) => e.type !== "log" && say(`event ${JSON.stringify({ ...e, hostTimeMs: hostNow(), atRun: handler.totalRunCalls })}`));
say(`starting at run ${handler.totalRunCalls}`);

/** Each completed step's duration (ms), the first one included. */
const stepMs: number[] = [];
process.on("exit", () => {
  const summary: LoopSteps = { steps: stepMs.length, medianStepMs: median(stepMs.slice(1)) };
  // Synchronously: the exit that follows the preemption save is `process.exit` (exitFn).
  writeSync(1, `${task.name}: steps ${JSON.stringify(summary)}\n`);
});

while (handler.totalRunCalls < steps) {
  const t0 = performance.now();
  await handler.run(() => session.run("train"));
  stepMs.push(performance.now() - t0);
  if (stepMs.length === 1) say("training");
}
say(`done at run ${handler.totalRunCalls}`);
await handler.save();
await handler.close();
await task.close();
