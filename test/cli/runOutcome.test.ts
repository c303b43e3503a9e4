/**
 * `run`'s failure path (src/cli/runOutcome.ts) on fakes: the exit code of training that ended
 * with an error and the line that says why, from the run's state. The process tests
 * (faults, signals, clusterRun, dataParallel) cover the same path on real tasks.
 */
import { describe, expect, it } from "vitest";

import type { TrainingConfig } from "../../src/config/index.js";
import { InvalidArgumentError, ModelMismatchError, UnavailableError } from "../../src/errors.js";
import { exitCodeOfFailure, initialRunState, preempting, whyPreempted, type RunParts, type RunState } from "../../src/cli/runOutcome.js";
import { PreemptedExit } from "../../src/cli/runPreemption.js";
import type { TerminationNotices } from "../../src/preemption/TerminationNotices.js";
import type { TaskRuntime } from "../../src/runtime/index.js";
import { RecordingLogger } from "../../src/testing/RecordingLogger.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";

/** Notices with none received (or the one given). */
const noticesOf = (first?: string): TerminationNotices =>
  ({
    first: first === undefined ? undefined : { source: first, count: 1 },
    describe: (n: { source: string }) => n.source,
    acknowledge: async () => undefined,
  }) as unknown as TerminationNotices;

const partsOf = (extra: Partial<RunParts> = {}) => {
  const err: string[] = [];
  const logger = new RecordingLogger();
  let wheres = 0;
  const parts: RunParts = {
    io: { err: { write: (s: string) => void err.push(s) } as unknown as NodeJS.WritableStream },
    progress: { stop: () => undefined },
    verbose: false,
    config: {} as TrainingConfig,
    task: undefined,
    isChief: true,
    group: undefined,
    cluster: undefined,
    notices: noticesOf(),
    logger,
    clock: new VirtualClock(),
    where: () => void wheres++,
    ...extra,
  };
  return { parts, err, logger, wheres: () => wheres };
};

describe("exitCodeOfFailure", () => {
  it("a saved preemption exits with its code and says the checkpoint is saved, then where the files are", async () => {
    const { parts, logger, wheres } = partsOf();
    const code = await exitCodeOfFailure(new PreemptedExit(42, true), initialRunState(), parts);
    expect(code).toBe(42);
    expect(logger.messages("info")).toEqual(["Preempted: checkpoint saved; exiting with 42 (run the same command again to resume)."]);
    expect(wheres()).toBe(1);
  });

  it("a notice before the first step of a run with a handler says nothing was trained since its checkpoint", async () => {
    const { parts, logger } = partsOf({ notices: noticesOf("SIGTERM") });
    const state: RunState = { ...initialRunState(), handler: {} as RunState["handler"] };
    expect(await exitCodeOfFailure(new PreemptedExit(42, false), state, parts)).toBe(42);
    expect(logger.messages("info")).toEqual([
      "Preempted (SIGTERM) before the first step: exiting with 42 without saving (nothing was trained since the checkpoint this run started from; run the same command again to resume).",
    ]);
  });

  it("any other error exits 1 with its one line, and a task of a cluster reports it to the others; a failure that came from the cluster is not reported back", async () => {
    const reported: unknown[] = [];
    const cluster = { reportFailure: async (e: unknown) => void reported.push(e), failed: new Promise(() => undefined) } as unknown as TaskRuntime;
    const { parts, err } = partsOf({ cluster });
    const boom = new Error("the step failed");
    expect(await exitCodeOfFailure(boom, initialRunState(), parts)).toBe(1);
    expect(err.join("")).toContain("the step failed");
    expect(reported).toEqual([boom]);

    const fromCluster = new UnavailableError("task /job:worker/replica:0/task:1 was declared failed");
    const state: RunState = { ...initialRunState(), clusterFailure: fromCluster };
    const second = partsOf({ cluster });
    expect(await exitCodeOfFailure(fromCluster, state, second.parts)).toBe(1);
    expect(second.err.join("")).toContain("was declared failed");
    // A step's own error after the cluster failed (the step saw the lost peer) is not reported either.
    expect(await exitCodeOfFailure(new Error("the collective was cancelled"), state, partsOf({ cluster }).parts)).toBe(1);
    expect(reported).toEqual([boom]);
  });

  it("a model mismatch of a data-parallel group is a configuration to fix: exit 2, one line, reported once", async () => {
    const reported: unknown[] = [];
    const cluster = { reportFailure: async (e: unknown) => void reported.push(e), failed: new Promise(() => undefined) } as unknown as TaskRuntime;
    const group = { rank: 1, stopAgreed: false } as unknown as RunParts["group"];
    const { parts, err } = partsOf({ cluster, group, isChief: false, task: { name: "worker:0" } as RunParts["task"] });
    const code = await exitCodeOfFailure(new InvalidArgumentError("shape mismatch for dense/kernel"), initialRunState(), parts);
    expect(code).toBe(2);
    expect(err.join("")).toBe(
      "worker:0: The replicas' models differ: worker:0 (rank 1) cannot take the chief's values: shape mismatch for dense/kernel. Every worker must build the same model (same layers, shapes and dtypes).\n",
    );
    expect(reported).toHaveLength(1);
    expect(reported[0]).toBeInstanceOf(ModelMismatchError);
  });
});

describe("preempting and whyPreempted", () => {
  it("say whose notice stops this task: its own, another task's told by the cluster, or the group's agreed stop", () => {
    const state = initialRunState();
    expect(preempting(state, noticesOf(), undefined)).toBe(false);
    expect(preempting(state, noticesOf("SIGTERM"), undefined)).toBe(true);
    expect(whyPreempted(state, noticesOf("SIGTERM"), undefined)).toBe("SIGTERM");
    const told: RunState = { ...state, clusterPreemption: new Error("task worker:1 got a termination notice (SIGTERM)") };
    expect(preempting(told, noticesOf(), undefined)).toBe(true);
    expect(whyPreempted(told, noticesOf(), undefined)).toBe("task worker:1 got a termination notice (SIGTERM)");
    const group = { stopAgreed: true } as unknown as RunParts["group"];
    expect(preempting(state, noticesOf(), group)).toBe(true);
    expect(whyPreempted(state, noticesOf(), group)).toBe("a stop the replica group agreed on (another rank's termination notice)");
    expect(whyPreempted(state, noticesOf(), undefined)).toBe("another task's termination notice, agreed through the coordination service");
  });
});
