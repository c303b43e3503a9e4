/**
 * How a task tells a preemption report from the cluster's other failures: by the failure the
 * coordination service returns with it (its kind and reporter), never by its words. Apart from
 * the runtime, so that `run` reads them without loading the cluster's modules.
 *
 * @module
 */

import { CancelledError } from "../errors.js";

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Whether `e` is another task's (or this task's) preemption report, as the coordination service returns it (its failure says so). */
export const isPreemptionReport = (e: unknown): e is CancelledError => e instanceof CancelledError && e.failure?.kind === "preemption";

/** Whether preemption report `e` is of `task`'s own notice (see {@link isPreemptionReport}). */
export const reportsNoticeOf = (e: CancelledError, task: string): boolean => e.failure?.kind === "preemption" && e.failure.reporter === task;
