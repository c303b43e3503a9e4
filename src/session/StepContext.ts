/**
 * `StepContext`: what `MonitoredSession.runStepFn` passes a step function (TensorFlow's
 * `MonitoredSession.StepContext`), the raw session and a run through the hooks.
 *
 * @module
 */

import type { Session } from "./Session.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What a step function receives (TensorFlow's `StepContext`). */
export interface StepContext {
  /** The raw session: runs through it bypass hooks. */
  readonly session: Session;
  /** Runs through the hooks, like `MonitoredSession.run` (the arguments of `Session.run`). */
  readonly runWithHooks: Session["run"];
  /**
   * Stops the iterations: throws `StopIteration`, which `withSession` treats as a clean
   * exit (outside it, the error reaches the caller and `shouldStop()` stays `false`).
   */
  requestStop(): never;
}
