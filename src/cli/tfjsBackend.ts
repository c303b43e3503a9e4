/**
 * The `tfjs` section of a configuration, applied by `run` before it imports the job module, so
 * that the module builds its model on the selected TensorFlow.js backend. Without a `tfjs`
 * section nothing here runs and TensorFlow.js is not loaded (a job without it needs no tfjs).
 *
 * @module
 */

import type { ConfigIssue, TrainingConfig } from "../config/index.js";
import { BackendNotInstalledError } from "../errors.js";
import { isModuleNotFound } from "../util/moduleNotFound.js";

const TFJS_PACKAGE = "@tensorflow/tfjs";

/** The backend applied, as a log line; or the problem that stops the command (exit 2). */
export type AppliedBackend = { readonly note: string } | { readonly issue: ConfigIssue } | undefined;

/**
 * Selects `config.tfjs.backend` (default `cpu`) with `useBackend`. A missing backend package is
 * a configuration problem at `tfjs.backend` whose message carries the install command.
 */
export const applyTfjsBackend = async (config: Pick<TrainingConfig, "tfjs">): Promise<AppliedBackend> => {
  if (config.tfjs === undefined) return undefined;
  const name = config.tfjs.backend ?? "cpu";
  // Loaded only here: the CLI must run jobs that do not use TensorFlow.js without it installed.
  let useBackend: typeof import("../tfjs/backend.js").useBackend;
  try {
    ({ useBackend } = await import("../tfjs/backend.js"));
  } catch (e) {
    if (!isModuleNotFound(e, TFJS_PACKAGE)) throw e;
    return { issue: { path: "tfjs", message: `The tfjs section needs ${TFJS_PACKAGE}, which is not installed: run \`npm install ${TFJS_PACKAGE}\`.` } };
  }
  try {
    const info = await useBackend(name);
    return { note: `TensorFlow.js backend: ${info.name} (${info.threadsCount} thread${info.threadsCount === 1 ? "" : "s"}).` };
  } catch (e) {
    if (e instanceof BackendNotInstalledError) return { issue: { path: "tfjs.backend", message: e.message } };
    throw e;
  }
};
