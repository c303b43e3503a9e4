/**
 * The `embedded` backend's connection (embeddedBackend.ts): the chief hosts the service on its
 * own server and reaches it in-process; every other task serves its own server and calls the
 * chief's over gRPC.
 *
 * @module
 */

import type { BackendTask, CoordinationConnection } from "./backend.js";
import { serveTask } from "./backendSupport.js";
import { hostCoordinationService } from "./coordinationServer.js";
import { connectCoordinationService } from "./grpcCoordinationTransport.js";
import { chiefAddressOf } from "./identity.js";

/** Hosts the service (the chief) or connects to the chief's. */
export const connectEmbedded = async (task: BackendTask): Promise<CoordinationConnection> => {
  const { spec, clientOptions, serverOptions, clock } = task;
  const chief = `grpc://${chiefAddressOf(spec)}`;
  const where = `embedded, hosted by the chief at ${chief}`;
  if (!clientOptions.isChief) {
    return serveTask(task, () => connectCoordinationService(chief, clientOptions, { token: serverOptions.token, tls: serverOptions.tls, clock }), where);
  }
  const heartbeatTimeoutMs = clientOptions.timeouts?.heartbeatTimeoutMs;
  const host = await hostCoordinationService(spec, { ...serverOptions, coordination: { clock, ...(heartbeatTimeoutMs === undefined ? {} : { heartbeatTimeoutMs }) } });
  let client;
  try {
    client = host.client(clientOptions);
  } catch (e) {
    await host.stop().catch(() => undefined);
    throw e;
  }
  const { service } = host;
  return {
    client,
    where,
    host: {
      report: (error, options) => service.reportHostError(error, options),
      waitUntilTold: (tasks, timeoutMs) => service.waitUntilTold(tasks, timeoutMs),
      hasFinalReport: () => service.hasFinalReport,
      waitUntilAllLeft: (timeoutMs) => service.waitUntilAllLeft(timeoutMs),
    },
    stop: () => host.stop(),
  };
};
