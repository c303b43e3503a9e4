/** What Server.test.ts and Server.process.test.ts share: PROTO_ROOT, CALL_DEADLINE_MS, Status, StatusClient, StatusServiceClient, clients, clientFor, getStatus, recordingLogger, quiet, servers, local. */
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { afterEach } from "vitest";
import { bearer } from "../../src/cluster/security.js";
import { Server } from "../../src/cluster/Server.js";
import type { Logger } from "../../src/Logger.js";

export const PROTO_ROOT = fileURLToPath(new URL("../../src/cluster/proto", import.meta.url));
export const CALL_DEADLINE_MS = 10_000;

export interface Status {
  taskName: string;
  jobName: string;
  taskIndex: number;
  incarnation: string;
  serverVersion: string;
}

export type StatusClient = grpc.Client & {
  getStatus(req: object, md: grpc.Metadata, opts: grpc.CallOptions, cb: (e: grpc.ServiceError | null, r?: Status) => void): void;
};

export const StatusServiceClient = (() => {
  const def = protoLoader.loadSync("monitored_session/v1/status.proto", { includeDirs: [PROTO_ROOT], longs: String, defaults: true });
  const pkg = grpc.loadPackageDefinition(def) as unknown as { monitored_session: { v1: { StatusService: grpc.ServiceClientConstructor } } };
  return pkg.monitored_session.v1.StatusService;
})();

export const clients: grpc.Client[] = [];
afterEach(() => {
  for (const c of clients.splice(0)) c.close();
});

/** A grpc-js client for `target` (`grpc://host:port`). */
export const clientFor = (target: string, credentials = grpc.credentials.createInsecure(), options: grpc.ChannelOptions = {}): StatusClient => {
  const client = new StatusServiceClient(target.replace(/^grpc:\/\//, ""), credentials, options) as unknown as StatusClient;
  clients.push(client);
  return client;
};

export const getStatus = (client: StatusClient, token?: string): Promise<Status> =>
  new Promise((resolve, reject) => {
    const md = new grpc.Metadata();
    if (token !== undefined) md.set("authorization", bearer(token));
    client.getStatus({}, md, { deadline: Date.now() + CALL_DEADLINE_MS }, (e, r) => (e === null ? resolve(r as Status) : reject(e)));
  });

export const recordingLogger = (): Logger & { readonly lines: string[] } => {
  const lines: string[] = [];
  const log = (level: string) => (m: string) => void lines.push(`${level} ${m}`);
  return { lines, debug: log("debug"), info: log("info"), warn: log("warn"), error: log("error") };
};

/** A logger that keeps its lines to itself (a test reads them if it wants). */
export const quiet = (): ReturnType<typeof recordingLogger> => recordingLogger();

export const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.stop()));
});
export const local = async (options: Parameters<typeof Server.createLocalServer>[0] = {}): Promise<Server> => {
  const s = await Server.createLocalServer({ logger: quiet(), ...options });
  servers.push(s);
  return s;
};
