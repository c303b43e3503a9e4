/**
 * What Kubernetes does with each exit code of a task, as the generated manifests say it: the
 * Job's `podFailurePolicy` and, for a JobSet, its `failurePolicy`. A preemption (42, or the
 * configuration's `preemption.exitCode`), a chief lost during one (43) and a pod disrupted by
 * the cluster restart the set without using up a restart: none is the job's fault, and each
 * resumes from a checkpoint. Exit 2 (a configuration error) fails it at once; any other failure
 * is counted against `maxRestarts`.
 *
 * A Job that a `podFailurePolicy` rule fails has the reason `PodFailurePolicy` whichever rule
 * matched, so the JobSet tells 42 from 2 by the Job's failure message (`... failed with exit
 * code 42 matching FailJob rule at index 1`): that field, `onJobFailureMessagePatterns`, came
 * with JobSet v0.10.0. See docs/kubernetes.md for the table.
 *
 * @module
 */

import { ExitCodes } from "../runtime/exitCodes.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The trainer's container name: the `podFailurePolicy` rules name it. */
export const TRAINER_CONTAINER = "trainer";

/** The first JobSet release with `onJobFailureMessagePatterns` (kubernetes-sigs/jobset PR #1033). */
export const MIN_JOBSET_VERSION = "v0.10.0";

/** The first Kubernetes release where `podFailurePolicy` and the `DisruptionTarget` condition are GA. */
export const MIN_KUBERNETES_VERSION = "1.31";

/** The pod condition Kubernetes adds to a pod it disrupts (eviction, preemption, node shutdown). */
const DISRUPTION_TARGET = "DisruptionTarget";

/** A rule of a Job's `podFailurePolicy`. */
export interface PodFailurePolicyRule {
  readonly action: "FailJob" | "Ignore" | "Count";
  readonly onExitCodes?: { readonly containerName: string; readonly operator: "In"; readonly values: readonly number[] };
  readonly onPodConditions?: readonly { readonly type: string; readonly status: "True" }[];
}

/** A rule of a JobSet's `failurePolicy`. */
export interface JobSetFailureRule {
  readonly name: string;
  readonly action: "FailJobSet" | "RestartJobSet" | "RestartJobSetAndIgnoreMaxRestarts";
  readonly onJobFailureReasons: readonly string[];
  readonly onJobFailureMessagePatterns: readonly string[];
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * The `podFailurePolicy` of a JobSet's Jobs (`backoffLimit: 0`): the three cases fail the Job
 * with messages the JobSet's rules tell apart; anything else exceeds the backoff limit.
 * `preemptionExitCode` is the configuration's `preemption.exitCode` (42 by default).
 */
export const jobSetPodFailurePolicy = (preemptionExitCode: number): { readonly rules: readonly PodFailurePolicyRule[] } => ({
  rules: [
    { action: "FailJob", onPodConditions: [{ type: DISRUPTION_TARGET, status: "True" }] },
    { action: "FailJob", onExitCodes: exitCodeIn(...preemptionExitCodes(preemptionExitCode)) },
    { action: "FailJob", onExitCodes: exitCodeIn(ExitCodes.usage) },
  ],
});

/**
 * The JobSet's `failurePolicy`: a preemption, a chief lost during one, and a disruption restart
 * the set without counting, a configuration error fails it, the rest falls to JobSet's default
 * action (a counted restart). The patterns keep the words around the code, so that `2` never
 * matches `42`.
 */
export const jobSetFailurePolicy = (
  maxRestarts: number,
  preemptionExitCode: number,
): { readonly maxRestarts: number; readonly restartStrategy: "BlockingRecreate"; readonly rules: readonly JobSetFailureRule[] } => ({
  maxRestarts,
  // Every old pod is gone before the new ones start: the restarted chief finds its port free
  // and its predecessor's process ended (its lease may still run: see CheckpointDirLock).
  restartStrategy: "BlockingRecreate",
  rules: [
    {
      name: "preemptedOrDisrupted",
      action: "RestartJobSetAndIgnoreMaxRestarts",
      onJobFailureReasons: ["PodFailurePolicy"],
      onJobFailureMessagePatterns: [...preemptionExitCodes(preemptionExitCode).map((code) => `with exit code ${code} matching`), `has condition ${DISRUPTION_TARGET}`],
    },
    {
      name: "configurationError",
      action: "FailJobSet",
      onJobFailureReasons: ["PodFailurePolicy"],
      onJobFailureMessagePatterns: [`with exit code ${ExitCodes.usage} matching`],
    },
  ],
});

/**
 * The `podFailurePolicy` of the indexed Job: a preempted, chief-lost or disrupted pod is
 * replaced and not counted, a configuration error fails the Job, and the rest count against
 * `backoffLimit`.
 */
export const indexedJobPodFailurePolicy = (preemptionExitCode: number): { readonly rules: readonly PodFailurePolicyRule[] } => ({
  rules: [
    { action: "Ignore", onPodConditions: [{ type: DISRUPTION_TARGET, status: "True" }] },
    { action: "Ignore", onExitCodes: exitCodeIn(...preemptionExitCodes(preemptionExitCode)) },
    { action: "FailJob", onExitCodes: exitCodeIn(ExitCodes.usage) },
  ],
});

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const exitCodeIn = (...codes: readonly number[]): NonNullable<PodFailurePolicyRule["onExitCodes"]> => ({ containerName: TRAINER_CONTAINER, operator: "In", values: codes });

/**
 * The codes that end a task without its fault and resume from a checkpoint: the preemption's
 * (`preemption.exitCode`, 42 by default) and the chief-lost code (43), in order (as
 * `onExitCodes.values` must be).
 */
const preemptionExitCodes = (preemptionExitCode: number): readonly number[] =>
  [...new Set([preemptionExitCode, ExitCodes.chiefLost])].sort((a, b) => a - b);
