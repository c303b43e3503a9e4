/** What grpcCoordination.realtime.test.ts and grpcCoordination.process.test.ts share: quiet, chief, hosts, clients, grpcClients. */
import * as grpc from "@grpc/grpc-js";
import { afterEach } from "vitest";
import { type CoordinationClient, type HostedCoordinationService, taskName } from "../../../src/cluster/coordination/index.js";
import type { Logger } from "../../../src/Logger.js";

export const quiet: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };
export const chief = taskName("chief", 0);

export const hosts: HostedCoordinationService[] = [];
export const clients: CoordinationClient[] = [];
export const grpcClients: grpc.Client[] = [];
afterEach(async () => {
  for (const c of grpcClients.splice(0)) c.close();
  await Promise.all(clients.splice(0).map((c) => c.close()));
  await Promise.all(hosts.splice(0).map((h) => h.stop()));
});
