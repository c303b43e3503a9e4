/**
 * The `memory` backend: the coordination service lives in this process, shared by every task of
 * the process that names the same in-process cluster. For tests and for simulations that run a
 * whole cluster in one process (each task still serves its own gRPC server for the chief's
 * model); tasks of other processes cannot reach it. Heartbeats run inline on each task's clock,
 * so a virtual clock drives the whole cluster. Implementation: memoryConnect.ts, loaded when a
 * task connects.
 *
 * It is also the proof that a backend is one folder and one registration: nothing outside this
 * folder names it, except the line in ../backends.ts that registers it.
 *
 * @module
 */

import { NonEmptyString, optional } from "../../../codec.js";
import { backendSettings, type CoordinationBackendDefinition } from "../backend.js";

/** The memory backend's registration. */
export const memoryBackend: CoordinationBackendDefinition = {
  name: "memory",
  doc: "in this process, shared by the tasks of the process that name the same memoryCluster (tests, simulations)",
  settings: {
    memoryCluster: optional(
      NonEmptyString,
      "The in-process cluster's name (backend: memory only): the tasks of one process with the same name share one coordination service.",
      "a hash of TF_CONFIG's cluster",
    ),
  },
  servedByChief: false,
  singleProcess: true,
  connect: async (task) => (await import("./memoryConnect.js")).connectMemory(task, backendSettings(memoryBackend, task.settings)["memoryCluster"] as string | undefined),
};
