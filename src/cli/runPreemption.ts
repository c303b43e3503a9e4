/**
 * How `run` (src/cli/run.ts) leaves on a termination notice: {@link PreemptedExit}, which unwinds
 * the training loop to the preemption exit code, and the task's `PreemptionCheckpointHandler`
 * (the chief's alone, or under `launch` every task's, agreeing through the task), whose save writes `<basename>-<global step>` through the checkpoint directory's
 * manager on the chief; with the global step readers they share.
 *
 * @module
 */

import type { CheckpointManager } from "../checkpoint/index.js";
import type { Clock } from "../time/Clock.js";
import type { toMonitoredTrainingSessionOptions } from "../config/index.js";
import type { MonitoredSession } from "../pipeline/MonitoredSession.js";
import { PreemptionCheckpointHandler } from "../preemption/PreemptionCheckpointHandler.js";
import { LocalPreemptionCoordinator } from "../preemption/PreemptionCoordinator.js";
import { PREEMPTION_EXIT_CODE, TerminationConfig } from "../preemption/TerminationConfig.js";
import type { PreemptionClusterResolver } from "../preemption/PreemptionCluster.js";
import type { PreemptionAgreement } from "../preemption/ClusterPreemptionCoordinator.js";
import type { VariableStore } from "../session/Session.js";
import { readStep } from "../training/monitoredTrainingSession.js";
import { isPromiseLike } from "../util/promise.js";
import type { createProgress } from "./progress.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Thrown by the preemption handler's exit function: unwinds the loop, then the command exits. */
export class PreemptedExit extends Error {
  override readonly name = "PreemptedExit";
  constructor(
    readonly exitCode: number,
    /** Whether a preemption checkpoint was saved first. */
    readonly saved = true,
  ) {
    super(`preempted: exiting with ${exitCode}`);
  }
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * The task's `PreemptionCheckpointHandler`. Alone (no cluster): the chief's, when preemption is
 * enabled (by default when there is a checkpoint directory), saving at the next step boundary.
 * In a cluster (`cluster`: the task's runtime, and the agreement its tasks stop by): every task's,
 * since every task takes part in the agreement on where the tasks stop (the multi-worker protocol
 * of a program's own handler, `ClusterPreemptionCoordinator`: an agreed run for a data-parallel
 * group, `"chiefSaves"` for tasks that share no step); only the chief saves, when preemption is
 * enabled.
 * A save writes `<basename>-<global step>` through the directory's manager, the one the
 * checkpoint hook saves with; the exit unwinds the loop with {@link PreemptedExit}.
 */
export const createPreemptionHandler = async (
  sess: MonitoredSession,
  config: Parameters<typeof toMonitoredTrainingSessionOptions>[0],
  manager: CheckpointManager | undefined,
  logger: ReturnType<typeof createProgress>["logger"],
  clock: Clock,
  cluster?: { readonly resolver: PreemptionClusterResolver; readonly agreement: PreemptionAgreement },
): Promise<PreemptionCheckpointHandler | undefined> => {
  const p = config.preemption;
  const enabled = p?.enabled ?? config.checkpoint !== undefined;
  // A task of a cluster agrees with the others even when it saves nothing.
  if (cluster === undefined && (!enabled || manager === undefined)) return undefined;
  const saves = enabled && manager !== undefined;
  const exitCode = exitCodeOf(config);
  const store = (): VariableStore => {
    const v = sess.rawSession?.variables;
    if (v === undefined) throw new Error("the session has no variables to checkpoint");
    return v;
  };
  return PreemptionCheckpointHandler.create({
    // A handler that saves nothing says so, instead of "checkpoint saved".
    checkpointManager: saves ? manager : undefined,
    store,
    // The chief session creator restored the session already; a worker starts from the chief's values.
    restoreOnCreate: false,
    // The command's TerminationNotices watch signals, the file and the parent: one process tells
    // the handler; a task of a cluster hands them over (the task's, as with `startTask()`).
    ...(cluster === undefined ? { signals: [] } : {}),
    clock,
    logger,
    globalStep: () => globalStepNow(sess),
    // The monitored session inside `run` already gives the event loop its turns.
    yieldIntervalMs: Number.POSITIVE_INFINITY,
    ...(cluster === undefined
      ? // One process, no peer to agree with: save where the notice is seen, not a step later.
        { coordinator: new LocalPreemptionCoordinator({ gracePeriodSecs: p?.gracePeriodSecs ?? 0, saveAtNextBoundary: true, clock, logger }) }
      : // `run` reports a failure to the cluster itself (naming the task, a mismatch of models apart).
        { clusterResolver: cluster.resolver, agreement: cluster.agreement, reportErrors: false }),
    terminationConfig: new TerminationConfig({
      gracePeriodSecs: p?.gracePeriodSecs ?? 0,
      saveFn: async () => {
        // A worker (or a chief without a checkpoint directory) writes nothing: only the chief's checkpoint is kept.
        if (!saves) return;
        const step = (await readStep(sess)) ?? 0;
        const path = await manager.save(store(), { checkpointNumber: step, step, checkInterval: false });
        logger.info(`Preemption checkpoint for step ${step} saved: ${path ?? "(skipped)"}.`);
      },
      // 42 after the save (the configured code), or 43 (the chief lost) without one.
      exitFn: (code) => {
        const preempted = code === PREEMPTION_EXIT_CODE;
        throw new PreemptedExit(preempted ? exitCode : code, preempted && saves);
      },
    }),
  });
};

/** The configured preemption exit code (default 42). */
export const exitCodeOf = (config: Parameters<typeof toMonitoredTrainingSessionOptions>[0]): number => config.preemption?.exitCode ?? PREEMPTION_EXIT_CODE;


/** The global step read synchronously (from a snapshot of the variables), for log messages. */
const globalStepNow = (sess: MonitoredSession): number | undefined => {
  const raw = sess.rawSession;
  const name = raw?.globalStepName;
  if (raw?.variables === undefined || name === undefined) return undefined;
  const snapshot = raw.variables.snapshot("global");
  if (isPromiseLike(snapshot)) {
    // A remote store: the message says "at run N" instead; a failed fetch is not this message's concern.
    snapshot.then(undefined, () => undefined);
    return undefined;
  }
  const v = snapshot.get(name);
  const x = v?.data[0];
  return typeof x === "number" || typeof x === "bigint" ? Number(x) : undefined;
};
