/**
 * The pod's `terminationGracePeriodSeconds`: how long Kubernetes waits between SIGTERM and
 * SIGKILL. Every task must agree on a step, reach it and save within it, so it is the sum of
 *
 * - the save time, with a margin ({@link SAVE_MARGIN}): a measured figure (`--save-secs`: the
 *   `Checkpoint saved: ... (global step N, T ms)` line of a run), else {@link DEFAULT_SAVE_SECS};
 * - the agreement's allowance: the coordination's heartbeat timeout (`cluster.timeouts.
 *   heartbeatTimeoutSecs`, default 10 s), the longest the agreement waits for a silent peer
 *   before the others save where they are;
 * - the configuration's `preemption.gracePeriodSecs` (training on after the notice);
 *
 * and never less than Kubernetes' own default of 30 s. `--grace-secs` replaces the sum.
 *
 * @module
 */

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The save time assumed when none is measured, in seconds. */
export const DEFAULT_SAVE_SECS = 10;

/** The save time is multiplied by this (50% more: a save under a loaded node or a slower disk). */
export const SAVE_MARGIN = 1.5;

/** The coordination service's default heartbeat timeout (docs/distributed.md). */
const DEFAULT_HEARTBEAT_TIMEOUT_SECS = 10;

/** Kubernetes' default `terminationGracePeriodSeconds`, the least the rule gives. */
export const KUBERNETES_DEFAULT_GRACE_SECS = 30;

/** What the grace period is made of. */
export interface GracePeriodInputs {
  /** The measured save time (default {@link DEFAULT_SAVE_SECS}). */
  readonly saveSecs?: number | undefined;
  /** `cluster.timeouts.heartbeatTimeoutSecs` (default 10). */
  readonly heartbeatTimeoutSecs?: number | undefined;
  /** `preemption.gracePeriodSecs` (default 0). */
  readonly preemptionGracePeriodSecs?: number | undefined;
}

/** The grace period and its parts, for the manifest's comment. */
export interface GracePeriod {
  readonly seconds: number;
  /** One line: how the figure was reached. */
  readonly explanation: string;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** The grace period the rule gives for `inputs` (see the module's comment). */
export const terminationGracePeriod = (inputs: GracePeriodInputs): GracePeriod => {
  const save = inputs.saveSecs ?? DEFAULT_SAVE_SECS;
  const allowance = inputs.heartbeatTimeoutSecs ?? DEFAULT_HEARTBEAT_TIMEOUT_SECS;
  const grace = inputs.preemptionGracePeriodSecs ?? 0;
  const sum = Math.ceil(save * SAVE_MARGIN + allowance + grace);
  const seconds = Math.max(KUBERNETES_DEFAULT_GRACE_SECS, sum);
  const saveSource = inputs.saveSecs === undefined ? `assumed ${save} s save (measure it: --save-secs)` : `${save} s measured save`;
  return {
    seconds,
    explanation:
      `${saveSource} × ${SAVE_MARGIN} + ${allowance} s agreement allowance (heartbeat timeout) + ${grace} s preemption.gracePeriodSecs = ${sum} s` +
      (sum < KUBERNETES_DEFAULT_GRACE_SECS ? `, raised to Kubernetes' default of ${KUBERNETES_DEFAULT_GRACE_SECS} s` : ""),
  };
};
