/**
 * The `embedded` backend (the default): the chief's server hosts the coordination service, and
 * every other task reaches it over gRPC at the chief's address (TensorFlow's layout). The service
 * goes with the chief, so its loss is the chief's. Implementation: embeddedConnect.ts, loaded
 * when a task connects.
 *
 * @module
 */

import type { CoordinationBackendDefinition } from "./backend.js";

/** The embedded backend's registration. */
export const embeddedBackend: CoordinationBackendDefinition = {
  name: "embedded",
  doc: "in the chief's server, which every other task calls over gRPC",
  servedByChief: true,
  connect: async (task) => (await import("./embeddedConnect.js")).connectEmbedded(task),
};
