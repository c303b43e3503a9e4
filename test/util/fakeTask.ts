/**
 * A stand-in for the task object of `startTask()` (a `SessionTask`), in one process: its master
 * is `fake://task0`, resolved by a registry whose target gives the chief a model-publishing hook
 * and a worker the chief's values; its hook and start barrier write to a shared transcript
 * (`publisher.afterCreateSession`, `task.<method>`, `sessionsCreated`).
 */
import type { ChiefModel } from "../../src/session/ChiefModel.js";
import type { Graph } from "../../src/session/Graph.js";
import { hook } from "../../src/hook/SessionRunHook.js";
import { defaultSessionTargets, type SessionTask } from "../../src/pipeline/SessionTarget.js";
import { HookRecorder, type HookRecorderOptions } from "../../src/testing/index.js";

/** A fake task and what it recorded. */
export interface FakeTask extends SessionTask {
  readonly hooks: readonly [HookRecorder];
  /** How many times the worker's session creator asked for the chief's values. */
  readonly pulls: () => number;
}

/**
 * A chief, or a worker whose chief's values are those of a `chiefGraph` session trained
 * `chiefSteps` times. `barrier` runs inside `sessionsCreated` (a failing one fails it).
 */
export const fakeTask = (o: {
  readonly isChief: boolean;
  readonly log: string[];
  readonly chiefGraph?: () => Graph;
  readonly chiefSteps?: number;
  readonly hook?: Omit<HookRecorderOptions, "log">;
  readonly barrier?: () => Promise<void>;
}): FakeTask => {
  let pulls = 0;
  const chiefModel: ChiefModel | undefined =
    o.chiefGraph === undefined
      ? undefined
      : {
          address: "fake://chief0",
          pull: async () => {
            pulls += 1;
            const s = (o.chiefGraph as () => Graph)().session();
            await s.variables.initialize();
            for (let i = 0; i < (o.chiefSteps ?? 0); i++) await s.run("train");
            return { ready: true, values: s.variables.snapshot(), globalStep: Number(await s.run("global_step")), origin: "the fake chief" };
          },
        };
  const publisher = hook("publisher", { afterCreateSession: () => void o.log.push("publisher.afterCreateSession") });
  return {
    master: "fake://task0",
    sessionTargets: defaultSessionTargets.with({
      scheme: "fake",
      resolve: (master) => ({ master, sessionFactory: (local) => local, chiefModel, chiefHooks: o.isChief ? [publisher] : [] }),
    }),
    isChief: o.isChief,
    hooks: [new HookRecorder("task", { ...o.hook, log: o.log })],
    sessionsCreated: async () => {
      o.log.push("sessionsCreated");
      await o.barrier?.();
    },
    pulls: () => pulls,
  };
};
