/**
 * The Server on loopback, called by an independent gRPC client: @grpc/grpc-js with
 * @grpc/proto-loader loading our .proto at run time (the server is connect-node), so what we
 * serve is gRPC that any implementation speaks.
 */
import * as http2 from "node:http2";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { describe, expect, it } from "vitest";
import { ClusterSpec } from "../../src/cluster/ClusterSpec.js";
import { ServerDefSchema } from "../../src/cluster/proto/gen/monitored_session/v1/cluster_pb.js";
import { getServerStatus } from "../../src/cluster/clusterClient.js";
import { loadClusterToken } from "../../src/cluster/security.js";
import { makeServerDef, processIncarnation, Server, serverVersion } from "../../src/cluster/Server.js";
import {
  InternalError,
  InvalidArgumentError,
  NotFoundError,
  UnauthenticatedError,
  UnavailableError,
  UnknownError,
  ValueError,
} from "../../src/errors.js";
import { EventRecorder, flush, VirtualClock } from "../../src/testing/index.js";
import { opensslVersion } from "../util/tlsCertificates.js";
import { CALL_DEADLINE_MS, clientFor, getStatus, local, quiet, recordingLogger, servers } from "./Server.testHelpers.js";

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// tests
// ---------------------------------------------------------------------------------------------

describe("makeServerDef (server_lib_test: ServerDefTest)", () => {
  it("infers the only job and the only task; protocol defaults to grpc", () => {
    const def = makeServerDef({ local: ["localhost:2222"] }, {});
    expect([def.jobName, def.taskIndex, def.protocol]).toEqual(["local", 0, "grpc"]);
    expect(new ClusterSpec(def.cluster ?? { job: [] }).asDict()).toEqual({ local: ["localhost:2222"] });
  });

  it("several jobs or tasks: TensorFlow's ValueErrors", () => {
    const cluster = { ps: ["p:1"], worker: ["w:1", "w:2"] };
    expect(() => makeServerDef(cluster, {})).toThrow(new ValueError("Must specify an explicit `job_name`."));
    expect(() => makeServerDef(cluster, { jobName: "worker" })).toThrow(new ValueError("Must specify an explicit `task_index`."));
    expect(() => makeServerDef(cluster, { jobName: "other" })).toThrow(new ValueError("No such job in cluster: 'other'"));
    expect(makeServerDef(cluster, { jobName: "worker", taskIndex: 1 }).taskIndex).toBe(1);
  });

  it("a ServerDef is copied with the overrides applied", () => {
    const given = makeServerDef({ worker: ["w:1", "w:2"] }, { taskIndex: 0 });
    const copy = makeServerDef(given, { taskIndex: 1, protocol: "grpc" });
    expect(copy.taskIndex).toBe(1);
    expect(given.taskIndex).toBe(0);
  });

  it("something that is not a cluster: TypeError, TensorFlow's message", () => {
    for (const bad of [["a:1"], "localhost:1", 7]) {
      expect(() => makeServerDef(bad as never, {})).toThrow(
        new TypeError("Could not convert `server_or_cluster_def` to a `tf.train.ServerDef` or `tf.train.ClusterSpec`."),
      );
    }
  });
});

describe("Server construction errors (server_lib_test)", () => {
  it("a job that the cluster does not define, with a task index: InternalError", () => {
    expect(() => new Server({ local: ["localhost:0"] }, { jobName: "other", taskIndex: 0, start: false })).toThrow(
      new InternalError('Job "other" was not defined in cluster'),
    );
  });

  it("a task that the job does not define: InvalidArgumentError", () => {
    expect(() => new Server({ local: ["localhost:0"] }, { jobName: "local", taskIndex: 1, start: false })).toThrow(
      new InvalidArgumentError('Task 1 was not defined in job "local"'),
    );
  });

  it("an address without a port: InvalidArgumentError mentioning the port", () => {
    expect(() => new Server({ local: ["localhost"] }, { start: false })).toThrow(InvalidArgumentError);
    expect(() => new Server({ local: ["localhost"] }, { start: false })).toThrow(/Could not parse port for local server from "localhost"/);
  });

  it("a ServerDef without a cluster: the job is not defined (InternalError)", () => {
    expect(() => new Server(create(ServerDefSchema, { jobName: "job", taskIndex: 0, protocol: "grpc" }), { start: false })).toThrow(
      new InternalError('Job "job" was not defined in cluster'),
    );
  });

  it("a protocol other than grpc: NotFoundError", () => {
    expect(() => new Server({ local: ["localhost:0"] }, { protocol: "grpc+verbs", start: false })).toThrow(NotFoundError);
  });

  it("a bad bindAddress: one line naming it", () => {
    expect(() => new Server({ local: ["localhost:0"] }, { bindAddress: "a:b:c", start: false })).toThrow(
      new InvalidArgumentError('bindAddress "a:b:c" is neither host nor host:port'),
    );
  });
});

describe("Server on loopback, called by grpc-js", () => {
  it("createLocalServer: loopback, port 0 resolved in target; GetStatus answers task, incarnation and version", async () => {
    const server = await local();
    expect(server.target).toMatch(/^grpc:\/\/localhost:\d+$/);
    const port = Number(server.target.split(":").pop());
    expect(port).toBeGreaterThan(0);
    expect(server.boundAddress).toBe(`127.0.0.1:${port}`);
    expect(server.serverDef.jobName).toBe("localhost");
    const status = await getStatus(clientFor(server.target));
    expect(status).toEqual({
      taskName: "/job:localhost/replica:0/task:0",
      jobName: "localhost",
      taskIndex: 0,
      incarnation: processIncarnation.toString(),
      serverVersion,
    });
    expect(serverVersion).toBe((JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }).version);
  });

  it("a task of a larger cluster serves its own name; serverDef is a copy", async () => {
    const server = new Server({ chief: ["localhost:0"], worker: ["localhost:1", "localhost:2"] }, { jobName: "chief", logger: quiet() });
    servers.push(server);
    await server.start();
    expect((await getStatus(clientFor(server.target))).taskName).toBe("/job:chief/replica:0/task:0");
    const def = server.serverDef;
    def.jobName = "worker";
    expect(server.serverDef.jobName).toBe("chief");
  });

  it("start: false does not bind until start(); target needs the bound port", async () => {
    const server = await local({ start: false });
    expect(server.boundAddress).toBeUndefined();
    expect(() => server.target).toThrow(ValueError);
    await server.start();
    await server.start(); // idempotent
    expect((await getStatus(clientFor(server.target))).taskIndex).toBe(0);
  });

  it("join() resolves when the server stops; stop() is idempotent; a stopped server refuses calls", async () => {
    const server = await local();
    const client = clientFor(server.target);
    await getStatus(client);
    let joined = false;
    const join = server.join().then(() => {
      joined = true;
    });
    await Promise.resolve();
    expect(joined).toBe(false);
    await Promise.all([server.stop(), server.stop()]);
    await join;
    expect(joined).toBe(true);
    const again = clientFor(server.target, undefined, { "grpc.initial_reconnect_backoff_ms": 100 });
    await expect(
      new Promise((resolve, reject) =>
        again.getStatus({}, new grpc.Metadata(), { deadline: Date.now() + 2_000 }, (e, r) => (e === null ? resolve(r) : reject(e))),
      ),
    ).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
  });

  it("stop() lets a call in flight run for stopGraceMs, then closes its connection (virtual clock)", async () => {
    const clock = new VirtualClock();
    const server = await local({ clock, stopGraceMs: 5_000 });
    // A raw HTTP/2 gRPC call whose request never ends: the server waits for its message.
    const session = http2.connect(`http://${server.boundAddress}`);
    await new Promise<void>((resolve) => session.once("connect", () => resolve()));
    const stream = session.request({
      ":method": "POST",
      ":path": "/monitored_session.v1.StatusService/GetStatus",
      "content-type": "application/grpc+proto",
      te: "trailers",
    });
    stream.on("error", () => undefined);
    session.on("error", () => undefined);
    stream.write(Buffer.from([0, 0, 0, 0, 10])); // a frame header announcing 10 bytes that never come
    // A PING is answered after the frames before it: the server has the call in flight.
    await new Promise<void>((resolve, reject) => session.ping((e) => (e === null ? resolve() : reject(e))));
    let stopped = false;
    const stopping = server.stop().then(() => {
      stopped = true;
    });
    for (let i = 0; i < 5; i++) await flush();
    expect(stopped).toBe(false);
    await clock.advance(4_999);
    for (let i = 0; i < 5; i++) await flush();
    expect(stopped).toBe(false);
    await clock.advance(1);
    await stopping;
    expect(stopped).toBe(true);
    session.destroy();
  });

  it("await using stops the server at the end of the scope", async () => {
    let outer: Server | undefined;
    {
      await using server = await Server.createLocalServer({ logger: quiet() });
      outer = server;
      await getStatus(clientFor(server.target));
    }
    await outer.join(); // resolves: it stopped
  });

  it("a port already in use: UnknownError in one line; the first server keeps serving", async () => {
    const first = await local();
    const port = Number(first.target.split(":").pop());
    const logger = recordingLogger();
    const second = new Server({ local: [`localhost:${port}`] }, { start: false, logger });
    const error = await second.start().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(UnknownError);
    expect((error as Error).message).toBe(
      `Could not start gRPC server for /job:local/replica:0/task:0: 127.0.0.1:${port} is already in use; stop the process that holds the port or give the task another address`,
    );
    await expect(second.join()).rejects.toBe(error);
    expect((await getStatus(clientFor(first.target))).taskName).toBe("/job:localhost/replica:0/task:0");
  });

  it("start: true (the default) reports a failed start through join() and one logged line", async () => {
    const first = await local();
    const logger = recordingLogger();
    const second = new Server({ local: [`localhost:${first.target.split(":").pop()}`] }, { logger });
    await expect(second.join()).rejects.toBeInstanceOf(UnknownError);
    expect(logger.lines.filter((l) => l.startsWith("error"))).toHaveLength(1);
    expect(logger.lines[0]).toMatch(/^error \/job:local\/replica:0\/task:0: Could not start gRPC server .* already in use/);
  });

  it("bindAddress: listens there while target keeps the task's cluster address (NAT, Kubernetes)", async () => {
    const server = new Server({ worker: ["worker-0.training.svc.example:7000"] }, { bindAddress: "127.0.0.1:0", logger: quiet() });
    servers.push(server);
    await server.start();
    expect(server.target).toBe("grpc://worker-0.training.svc.example:7000");
    const bound = server.boundAddress as string;
    expect(bound).toMatch(/^127\.0\.0\.1:\d+$/);
    expect((await getStatus(clientFor(`grpc://${bound}`))).taskName).toBe("/job:worker/replica:0/task:0");
  });

  it("a ServerDef message is served as given", async () => {
    const def = create(ServerDefSchema, { cluster: new ClusterSpec({ ps: ["localhost:0"] }).asClusterDef(), jobName: "ps", taskIndex: 0, protocol: "grpc" });
    const server = new Server(def, { logger: quiet() });
    servers.push(server);
    await server.start();
    expect((await getStatus(clientFor(server.target))).jobName).toBe("ps");
  });
});

describe("cluster token", () => {
  it("a call without the token or with a wrong one gets UNAUTHENTICATED (16); the server emits one warning event each (printed by its logger) and keeps serving", async () => {
    const logger = recordingLogger();
    const server = await local({ token: "s3cret-token", logger });
    const heard = new EventRecorder();
    heard.record(server.events$);
    const client = clientFor(server.target);
    await expect(getStatus(client)).rejects.toMatchObject({
      code: grpc.status.UNAUTHENTICATED,
      details: "this cluster requires its token on every call but the call had no cluster token (set the same token on every task)",
    });
    await expect(getStatus(client, "wrong")).rejects.toMatchObject({ code: 16 });
    const warnings = heard.lines("warn");
    expect(warnings.map((e) => e.source)).toEqual(["server", "server"]);
    expect(warnings[0]?.message).toMatch(/^\/job:localhost\/replica:0\/task:0: rejected GetStatus from 127\.0\.0\.1:\d+: no cluster token$/);
    expect(warnings[1]?.message).toMatch(/: a wrong cluster token$/);
    expect(heard.messages().join("\n")).not.toContain("s3cret");
    // No session adopted the server's events: its logger printed each line, once.
    expect(logger.lines.filter((l) => l.startsWith("warn"))).toEqual(warnings.map((e) => `warn ${e.message}`));
    expect((await getStatus(client, "s3cret-token")).taskIndex).toBe(0);
  });

  it("loadClusterToken: the file's first line, else the environment variable; empty ones are errors", () => {
    const dir = mkdtempSync(join(tmpdir(), "ms-token-"));
    try {
      const file = join(dir, "token");
      writeFileSync(file, "from-file\n");
      expect(loadClusterToken({ tokenFile: file, env: { MONITORED_SESSION_CLUSTER_TOKEN: "from-env" } })).toBe("from-file");
      expect(loadClusterToken({ env: { MONITORED_SESSION_CLUSTER_TOKEN: "from-env" } })).toBe("from-env");
      expect(loadClusterToken({ env: {} })).toBeUndefined();
      writeFileSync(file, "\n");
      expect(() => loadClusterToken({ tokenFile: file })).toThrow(`the cluster token file ${file} is empty; write the token on its first line`);
      expect(() => loadClusterToken({ tokenFile: join(dir, "missing") })).toThrow(/^cannot read the cluster token file .*missing: ENOENT$/);
      expect(() => loadClusterToken({ env: { MONITORED_SESSION_CLUSTER_TOKEN: " " } })).toThrow(InvalidArgumentError);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("getServerStatus (our connect-node client)", () => {
  it("reads a server's status; a wrong token is UnauthenticatedError; nobody listening is UnavailableError", async () => {
    const server = await local({ token: "tok" });
    const status = await getServerStatus(server.target, { token: "tok", timeoutMs: CALL_DEADLINE_MS });
    expect(status.taskName).toBe("/job:localhost/replica:0/task:0");
    expect(status.incarnation).toBe(processIncarnation);
    const wrong = await getServerStatus(server.target, { token: "nope", timeoutMs: CALL_DEADLINE_MS }).catch((e: unknown) => e);
    expect(wrong).toBeInstanceOf(UnauthenticatedError);
    expect((wrong as Error).message).toBe(`${server.target}: this cluster requires its token on every call but the call had a wrong cluster token (set the same token on every task)`);
    await server.stop();
    await expect(getServerStatus(server.target, { token: "tok", timeoutMs: CALL_DEADLINE_MS })).rejects.toBeInstanceOf(UnavailableError);
  });

  it("a target that is not grpc://host:port: TypeError", async () => {
    await expect(getServerStatus("grpc://localhost")).rejects.toThrow(new TypeError('target "grpc://localhost" is not grpc://host:port'));
  });
});

// ---------------------------------------------------------------------------------------------
// TLS, with certificates made at test time by openssl
// ---------------------------------------------------------------------------------------------

if (opensslVersion === undefined) console.warn("SKIP TLS tests of test/cluster/Server.test.ts: no openssl on PATH (apt-get install openssl)");

