/**
 * The coordination service over gRPC, in one process on loopback: what the wire carries (an
 * independent grpc-js client with our .proto loaded at run time), and how the client side maps
 * what it gets (a server's status, or no answer at all).
 *
 * Real time (a `.realtime` test, run by the integration project): real sockets, gRPC's
 * wall-clock deadlines, and connect() timeouts that must elapse (1 s, 500 ms).
 */

import * as http2 from "node:http2";
import { type AddressInfo, createServer } from "node:net";
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { describe, expect, it } from "vitest";
import { connectCoordinationService, type HostedCoordinationService, hostCoordinationService, taskName } from "../../../src/cluster/coordination/index.js";
import { InvalidArgumentError, UnavailableError } from "../../../src/errors.js";
import { opensslVersion } from "../../util/tlsCertificates.js";
import { rejection, within } from "./conformance.js";
import { chief, clients, grpcClients, hosts, quiet } from "./grpcCoordination.testHelpers.js";

const PROTO_ROOT = fileURLToPath(new URL("../../../src/cluster/proto", import.meta.url));

const host = async (): Promise<HostedCoordinationService> => {
  const h = await hostCoordinationService({ chief: ["127.0.0.1:0"] }, { logger: quiet, stopGraceMs: 100 });
  hosts.push(h);
  return h;
};

/** A loopback port where nobody listens. */
const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });

type Callback<T> = (e: grpc.ServiceError | null, r?: T) => void;
type Unary<T> = (req: object, md: grpc.Metadata, opts: grpc.CallOptions, cb: Callback<T>) => void;
type CoordinationGrpcJsClient = grpc.Client & {
  registerTask: Unary<{ generation: number; serviceId: string }>;
  insertKey: Unary<object>;
  tryGetKey: Unary<{ value?: string }>;
  getKey: Unary<{ value: string }>;
};

const grpcJsClient = (target: string): CoordinationGrpcJsClient => {
  const def = protoLoader.loadSync("monitored_session/v1/coordination.proto", { includeDirs: [PROTO_ROOT], longs: String, defaults: true });
  const pkg = grpc.loadPackageDefinition(def) as unknown as { monitored_session: { v1: { CoordinationService: grpc.ServiceClientConstructor } } };
  const client = new pkg.monitored_session.v1.CoordinationService(target.replace(/^grpc:\/\//, ""), grpc.credentials.createInsecure());
  grpcClients.push(client);
  return client as unknown as CoordinationGrpcJsClient;
};

const unary = <T>(call: Unary<T>, client: grpc.Client, req: object, deadlineMs = 10_000): Promise<T> =>
  new Promise((resolve, reject) => {
    call.call(client, req, new grpc.Metadata(), { deadline: Date.now() + deadlineMs }, (e, r) => (e === null ? resolve(r as T) : reject(e)));
  });

describe("the coordination service over gRPC", () => {
  it("is gRPC: a grpc-js client with the .proto loaded at run time registers, inserts and reads; errors are status codes", async () => {
    const h = await host();
    const client = grpcJsClient(h.server.target);
    const registered = await unary(client.registerTask, client, { task: chief, incarnation: "7", isChief: true, clusterTasks: [chief], timeoutMs: 5_000 });
    expect(registered.generation).toBe(1);
    expect(registered.serviceId).toBe(h.service.serviceId);
    const caller = { task: chief, incarnation: "7", generation: 1, serviceId: registered.serviceId };
    await unary(client.insertKey, client, { caller, key: "ready", value: "yes" });
    expect((await unary(client.tryGetKey, client, { caller, key: "ready" })).value).toBe("yes");
    expect((await unary(client.tryGetKey, client, { caller, key: "absent" })).value).toBeUndefined();
    const dup = (await rejection(unary(client.insertKey, client, { caller, key: "ready", value: "no" }))) as grpc.ServiceError;
    expect(dup.code).toBe(grpc.status.ALREADY_EXISTS);
    expect(dup.details).toContain("ready");
    const late = (await rejection(unary(client.getKey, client, { caller, key: "later", timeoutMs: 200 }))) as grpc.ServiceError;
    expect(late.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    expect(late.details).toContain("later");
  });

  it("connect() retries while nobody serves, up to the registration timeout; then UnavailableError naming the target", async () => {
    const target = `grpc://127.0.0.1:${await freePort()}`;
    const client = connectCoordinationService(target, { task: chief, tasks: [chief], isChief: true, timeouts: { registrationTimeoutMs: 1_000 } });
    clients.push(client);
    const e = await within(rejection(client.connect()), 10_000, "connect");
    expect(e).toBeInstanceOf(UnavailableError);
    expect(e.message).toContain(target);
  });

  it("connect({ unreachableTimeoutMs }) gives up after that much silence, long before the registration timeout", async () => {
    const target = `grpc://127.0.0.1:${await freePort()}`;
    const worker = taskName("worker", 0);
    // The default registration timeout is an hour: only the option can end this in time.
    const client = connectCoordinationService(target, { task: worker, tasks: [chief, worker], isChief: false, heartbeats: "inline" });
    clients.push(client);
    const e = await within(rejection(client.connect({ unreachableTimeoutMs: 500 })), 60_000, "connect");
    expect(e).toBeInstanceOf(UnavailableError);
    expect(e.message).toContain(`the coordination service at ${target} is unreachable`);
  });

  it("connect({ unreachableTimeoutMs }) to a chief that keeps its connection open and never answers (frozen: SIGSTOP) gives up after that much silence, naming it", async () => {
    // A frozen process's kernel still accepts connections and reads requests: nothing answers.
    const frozen = http2.createServer();
    const sessions = new Set<http2.ServerHttp2Session>();
    frozen.on("session", (session) => sessions.add(session));
    frozen.on("stream", () => undefined);
    await new Promise<void>((resolve) => frozen.listen(0, "127.0.0.1", resolve));
    try {
      const target = `grpc://127.0.0.1:${(frozen.address() as AddressInfo).port}`;
      const worker = taskName("worker", 0);
      // The default registration timeout is an hour, and the registration call's own deadline with it.
      const client = connectCoordinationService(target, { task: worker, tasks: [chief, worker], isChief: false, heartbeats: "inline" });
      clients.push(client);
      const e = await within(rejection(client.connect({ unreachableTimeoutMs: 800 })), 60_000, "connect");
      expect(e).toBeInstanceOf(UnavailableError);
      expect(e.message).toMatch(new RegExp(`^the coordination service at ${target} has not answered for \\d+ ms \\(the heartbeat timeout is 800 ms\\): its host \\(the chief\\) is frozen or unreachable$`));
      expect((e as UnavailableError).failure).toEqual({ kind: "serviceGone", backend: "embedded" });
    } finally {
      for (const session of sessions) session.destroy();
      await new Promise((resolve) => frozen.close(resolve));
    }
  });

  it("connect({ unreachableTimeoutMs }) waits past that time for a registration the chief's service holds while it answers (a task that registers late)", async () => {
    const h = await host();
    const worker = taskName("worker", 0);
    const tasks = [chief, worker];
    const w = connectCoordinationService(h.server.target, { task: worker, tasks, isChief: false, heartbeats: "inline" });
    clients.push(w);
    let settled = false;
    const connecting = w.connect({ unreachableTimeoutMs: 1_000 }).finally(() => void (settled = true));
    // Three times the silence allowed: the registration itself is unanswered all along, the probes are not.
    await new Promise((r) => setTimeout(r, 3_000));
    expect(settled).toBe(false);
    const c = h.client({ task: chief, tasks, isChief: true, heartbeats: "inline" });
    clients.push(c);
    await within(Promise.all([connecting, c.connect()]), 20_000, "registration");
    expect(w.generation).toBe(1);
  });

  it("connect() waits for a chief whose server starts later", async () => {
    const port = await freePort();
    const target = `grpc://127.0.0.1:${port}`;
    const worker = taskName("worker", 0);
    const tasks = [chief, worker];
    const w = connectCoordinationService(target, { task: worker, tasks, isChief: false, heartbeats: "inline" });
    clients.push(w);
    const connecting = w.connect();
    await new Promise((r) => setTimeout(r, 300));
    const h = await hostCoordinationService({ chief: [`127.0.0.1:${port}`] }, { logger: quiet, stopGraceMs: 100 });
    hosts.push(h);
    const c = h.client({ task: chief, tasks, isChief: true, heartbeats: "inline" });
    clients.push(c);
    await within(Promise.all([connecting, c.connect()]), 20_000, "registration");
    expect(w.generation).toBe(1);
  });

  it("a status the server sent keeps its class and is not retried", async () => {
    const h = await host();
    const client = connectCoordinationService(h.server.target, { task: chief, tasks: [chief], isChief: true, heartbeats: "inline" });
    clients.push(client);
    const outsider = connectCoordinationService(h.server.target, { task: taskName("worker", 5), tasks: [chief], isChief: false });
    clients.push(outsider);
    const bad = await within(rejection(outsider.connect()), 10_000, "the outsider's connect");
    expect(bad).toBeInstanceOf(InvalidArgumentError);
    expect(bad.message).toContain(taskName("worker", 5));
    h.service.close(); // the server still answers, with the service's UnavailableError
    const e = await within(rejection(client.connect()), 10_000, "connect to a closed service");
    expect(e).toBeInstanceOf(UnavailableError);
    expect(e.message).toContain("stopped");
    expect(e.message).not.toContain("unreachable");
  });

  it("a target that is not grpc://host:port is a TypeError", () => {
    expect(() => connectCoordinationService("localhost", { task: chief, tasks: [chief], isChief: true })).toThrow(/grpc:\/\/host:port/);
  });
});

if (opensslVersion === undefined) console.warn("SKIP TLS test of test/cluster/coordination/grpcCoordination.realtime.test.ts: no openssl on PATH (apt-get install openssl)");

