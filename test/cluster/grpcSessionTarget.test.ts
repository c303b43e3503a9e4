/**
 * The grpc:// session target in one process: a chief's Server with a ModelPublisher on
 * loopback, and workers whose sessions start from the chief's values, bit for bit (TensorFlow.js
 * weights, Adam's slots, the global step and the data position; every dtype). The snapshot is
 * taken at a step boundary; a wrong token, a corrupt or cut stream and a chief that is not up
 * each give the error or the wait the docs promise.
 */
import { fileURLToPath } from "node:url";

import { create } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { createRouterTransport } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";

import { Supervisor } from "../../src/compat/v1/index.js";
import { clusterSessionTargets, GrpcChiefModel, grpcSessionTargetResolver } from "../../src/cluster/grpcSessionTarget.js";
import { ModelPublisher } from "../../src/cluster/ModelPublisher.js";
import { GetVariablesResponseSchema, ModelService, type GetVariablesResponse } from "../../src/cluster/proto/gen/monitored_session/v1/model_pb.js";
import { processIncarnation, Server } from "../../src/cluster/Server.js";
import type { ChiefModelState } from "../../src/session/ChiefModel.js";
import { AbortedError, DataLossError, UnauthenticatedError, UnavailableError, ValueError } from "../../src/errors.js";
import { Graph } from "../../src/session/Graph.js";
import { silentLogger } from "../../src/Logger.js";
import type { LocalVariableStore, Session } from "../../src/session/Session.js";
import { WorkerSessionCreator } from "../../src/creation/SessionCreators.js";
import { MonitoredSession } from "../../src/pipeline/MonitoredSession.js";
import { defaultSessionTargets } from "../../src/pipeline/SessionTarget.js";
import { tensor, type TensorValue } from "../../src/session/Tensor.js";
import { EventRecorder, FakeSession, FakeSessionCreator, flush, RecordingLogger, VirtualClock } from "../../src/testing/index.js";
import { monitoredTrainingSession } from "../../src/training/monitoredTrainingSession.js";
import type { TfjsSession } from "../../src/tfjs/index.js";
import { bits } from "../util/tensorBits.js";
import { makeSession, train } from "../util/tfjsSessions.js";

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

const PROTO_ROOT = fileURLToPath(new URL("../../src/cluster/proto", import.meta.url));

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A chief's server on loopback serving `publisher`. */
const chiefServer = async (publisher: ModelPublisher, token?: string): Promise<Server> => {
  const server = await Server.createLocalServer({ services: [publisher.registration], logger: silentLogger, ...(token === undefined ? {} : { token }) });
  cleanups.push(() => server.stop());
  return server;
};

/** A session whose only state is `values` (any dtype), as a chief's session of another framework. */
const storeSession = (values: Map<string, TensorValue>): Session & { variables: LocalVariableStore } => {
  let current = values;
  const variables: LocalVariableStore = {
    names: () => [...current.keys()],
    reportUninitialized: () => [],
    initialize: () => undefined,
    snapshot: () => new Map(current),
    restore: (v) => {
      current = new Map(v);
    },
  };
  return { run: () => Promise.resolve(null as never), variables };
};

/** Every dtype, with the values that only a bit-exact copy keeps: -0, a NaN payload, int64 extremes, odd Unicode. */
const everyDType = (): Map<string, TensorValue> => {
  const f32 = new Float32Array(3);
  new Uint32Array(f32.buffer).set([0x7fc00123, 0x80000000, 0x3f800001]);
  const f64 = new Float64Array(2);
  new BigUint64Array(f64.buffer).set([0x7ff8000000000abcn, 0x8000000000000000n]);
  return new Map<string, TensorValue>([
    ["f32", tensor("float32", [3], f32)],
    ["f64", tensor("float64", [2, 1], f64)],
    ["i32", tensor("int32", [2], new Int32Array([-2147483648, 2147483647]))],
    ["i64", tensor("int64", [], new BigInt64Array([-(2n ** 63n)]))],
    ["b", tensor("bool", [2], new Uint8Array([1, 0]))],
    ["s", tensor("string", [3], ["", "é", "🙂 long"])],
    ["empty", tensor("float32", [0, 4], new Float32Array(0))],
  ]);
};

const mtsQuiet = { saveCheckpointSecs: null, saveSummariesSteps: null, logStepCountSteps: null, logger: silentLogger } as const;

// ---------------------------------------------------------------------------------------------
// tests
// ---------------------------------------------------------------------------------------------

describe("grpc:// sessions: a worker starts from the chief's values", () => {
  it("TensorFlow.js: a worker's monitoredTrainingSession starts from the trained chief's weights, Adam slots, global step and data position, bit for bit; then the replicas diverge", async () => {
    const publisher = new ModelPublisher({ logger: silentLogger, maxChunkBytes: 1024 }); // many chunks per variable
    const server = await chiefServer(publisher, "s3cret");
    const chief = await monitoredTrainingSession({
      ...mtsQuiet,
      master: server.target,
      isChief: true,
      sessionTargets: clusterSessionTargets({ publisher }),
      sessionFactory: () => makeSession(),
    });
    cleanups.push(() => chief.close());
    await train(chief, 5);
    const chiefRaw = chief.rawSession as TfjsSession;
    const chiefValues = chiefRaw.variables.snapshot();
    expect([...chiefValues.keys()].some((k) => k.startsWith("optimizer/"))).toBe(true);

    const worker = await monitoredTrainingSession({
      ...mtsQuiet,
      master: "grpc://localhost:1", // the worker's own server; the chief is found through `chief`
      isChief: false,
      sessionTargets: clusterSessionTargets({ chief: server.target, token: "s3cret" }),
      sessionFactory: () => makeSession(),
      clock: new VirtualClock({ autoAdvance: true }),
    });
    cleanups.push(() => worker.close());
    const workerRaw = worker.rawSession as TfjsSession;
    expect(bits(workerRaw.variables.snapshot())).toEqual(bits(chiefValues));
    expect(await worker.run("global_step")).toBe(5);

    // Each replica trains with its own global step from here on (no data parallelism yet).
    await train(worker, 2);
    expect(await worker.run("global_step")).toBe(7);
    expect(await chief.run("global_step")).toBe(5);
    expect(bits(chiefRaw.variables.snapshot())).toEqual(bits(chiefValues));
  });

  it("every dtype crosses bit for bit (NaN payloads, -0, int64 extremes, strings, empty tensors), with the cluster's chief found in the cluster spec", async () => {
    const publisher = new ModelPublisher({ logger: silentLogger, maxChunkBytes: 1024 });
    const server = await chiefServer(publisher);
    const values = everyDType();
    publisher.publish(storeSession(values));
    const address = server.target.replace("grpc://", "");
    const resolver = grpcSessionTargetResolver({ cluster: { chief: [address], worker: ["localhost:1"] } });
    const target = resolver.resolve("grpc://localhost:1");
    expect(target.chiefModel?.address).toBe(server.target);
    const state = (await target.chiefModel?.pull()) as Extract<ChiefModelState, { ready: true }>;
    expect(state.ready).toBe(true);
    expect(bits(state.values)).toEqual(bits(values));
    expect(state.globalStep).toBe(-1);
    expect(state.origin).toContain(`incarnation ${processIncarnation.toString(16)}`);
  });

  it("a snapshot asked for during a step is taken at its end, never half-way", async () => {
    const publisher = new ModelPublisher({ logger: silentLogger });
    const session = storeSession(new Map([["v", tensor("float64", [], new Float64Array([1]))]]));
    publisher.publish(session);
    const model = new GrpcChiefModel("grpc://chief:1", { transport: createRouterTransport(publisher.registration) });
    const set = (x: number): void => void session.variables.restore(new Map([["v", tensor("float64", [], new Float64Array([x]))]]));

    publisher.beforeRun(); // step 1 starts
    set(1.5); // half-way
    let got: ChiefModelState | undefined;
    const pulled = model.pull().then((s) => (got = s));
    for (let i = 0; i < 20; i++) await flush();
    expect(got).toBeUndefined(); // the request waits for the step boundary
    set(2);
    await publisher.afterRun(); // step 1 ends: the waiting request gets this boundary's values
    publisher.beforeRun(); // step 2 starts at once
    set(2.5);
    await pulled;
    const state = got as Extract<ChiefModelState, { ready: true }>;
    expect(state.values.get("v")?.data).toEqual(new Float64Array([2]));
    publisher.afterRun();
  });

  it("a chief that has not published, has ended, or is not up is 'not ready' with the reason; a worker keeps waiting", async () => {
    const publisher = new ModelPublisher({ logger: silentLogger });
    const server = await chiefServer(publisher);
    const model = new GrpcChiefModel(server.target);
    expect(await model.pull()).toEqual({ ready: false, reason: "not ready: it has not created its session yet" });
    publisher.publish(storeSession(new Map()));
    expect((await model.pull()).ready).toBe(true);
    publisher.end();
    expect(await model.pull()).toEqual({ ready: false, reason: "not ready: it has ended its session" });
    const target = server.target;
    await server.stop();
    const gone = await new GrpcChiefModel(target, { timeoutMs: 5_000 }).pull();
    expect(gone.ready).toBe(false);
    expect((gone as { reason: string }).reason).toMatch(/^not reachable: /);
  });

  it("a wrong token: the worker fails at once with UnauthenticatedError, in one line", async () => {
    const publisher = new ModelPublisher({ logger: silentLogger });
    const server = await chiefServer(publisher, "right");
    publisher.publish(storeSession(new Map()));
    const creator = new WorkerSessionCreator({
      graph: new Graph(),
      chiefModel: new GrpcChiefModel(server.target, { token: "wrong" }),
      clock: new VirtualClock({ autoAdvance: true }),
      logger: silentLogger,
    });
    const e = await creator.createSession().catch((x: unknown) => x);
    expect(e).toBeInstanceOf(UnauthenticatedError);
    expect((e as Error).message).toMatch(new RegExp(`^${server.target}: .*wrong cluster token`));
    expect((e as Error).message).not.toContain("\n");
  });

  it("bytes that do not match their CRC-32C are a DataLossError; a stream cut before its trailer is 'not ready' (the chief died mid-transfer)", async () => {
    const good = (): GetVariablesResponse[] => [
      create(GetVariablesResponseSchema, { part: { case: "header", value: { variableCount: 1, totalBytes: 8n } } }),
      create(GetVariablesResponseSchema, { part: { case: "variable", value: { name: "v", dtype: "float64", shape: [], byteLength: 8n, crc32c: 0 } } }),
      create(GetVariablesResponseSchema, { part: { case: "data", value: new Uint8Array(8) } }),
    ];
    const chiefSending = (parts: GetVariablesResponse[]) =>
      new GrpcChiefModel("grpc://chief:1", {
        transport: createRouterTransport((router) =>
          router.service(ModelService, {
            getReadiness: () => ({ ready: true }),
            async *getVariables() {
              yield* parts;
            },
          }),
        ),
      });
    await expect(
      chiefSending([...good(), create(GetVariablesResponseSchema, { part: { case: "trailer", value: { variableCount: 1, totalBytes: 8n } } })]).pull(),
    ).rejects.toThrow(new DataLossError('the snapshot from the chief at grpc://chief:1 is corrupt: variable "v" does not match its CRC-32C'));
    expect(await chiefSending(good()).pull()).toEqual({ ready: false, reason: "not reachable: the snapshot stream from grpc://chief:1 ended before its trailer" });
    expect(await chiefSending(good().slice(0, 2)).pull()).toEqual({
      ready: false,
      reason: 'not reachable: the snapshot stream from grpc://chief:1 ended inside variable "v"',
    });
  });

  it("an UnavailableError during training is recovered: the worker's session is re-created from the chief's current values", async () => {
    const publisher = new ModelPublisher({ logger: silentLogger });
    const server = await chiefServer(publisher);
    const chiefSession = storeSession(new Map([["v", tensor("float64", [], new Float64Array([10]))]]));
    publisher.publish(chiefSession);
    const grpc = new GrpcChiefModel(server.target);
    let pulls = 0;
    const counting = { address: grpc.address, pull: () => ((pulls += 1), grpc.pull()) };
    const g = new Graph();
    g.variable("v", 0);
    let failures = 1;
    g.op("step", () => {
      if (failures-- > 0) throw new UnavailableError("the coordination service lost the chief");
      return null;
    });
    const worker = await monitoredTrainingSession({
      ...mtsQuiet,
      graph: g,
      master: "grpc://localhost:1",
      isChief: false,
      sessionTargets: defaultSessionTargets.with({ scheme: "grpc", resolve: (master) => ({ master, sessionFactory: (l) => l, chiefModel: counting }) }),
      clock: new VirtualClock({ autoAdvance: true }),
    });
    cleanups.push(() => worker.close());
    expect(await worker.run("v")).toBe(10);
    chiefSession.variables.restore(new Map([["v", tensor("float64", [], new Float64Array([20]))]])); // the (restarted) chief moved on
    await worker.run("step");
    expect(pulls).toBe(2);
    expect(await worker.run("v")).toBe(20);
  });

  it("the non-chief Supervisor waits for the chief through its master and starts from its values", async () => {
    const publisher = new ModelPublisher({ logger: silentLogger });
    const server = await chiefServer(publisher);
    publisher.publish(storeSession(new Map([["v", tensor("float64", [], new Float64Array([Math.E]))]])));
    const g = new Graph();
    g.variable("v", 0);
    const sv = new Supervisor({ graph: g, isChief: false, recoveryWaitSecs: 1, clock: new VirtualClock({ autoAdvance: true }), logger: silentLogger });
    const sess = await sv.prepareOrWaitForSession({ master: "grpc://localhost:1", sessionTargets: clusterSessionTargets({ chief: server.target }), maxWaitSecs: 10 });
    expect(await sess.run("v")).toBe(Math.E);
    await sess.close?.();
  });

  it("bad addresses are one-line ValueErrors naming the fix", () => {
    const resolver = grpcSessionTargetResolver();
    expect(() => resolver.resolve("grpc://nohost")).toThrow(new ValueError('master "grpc://nohost" is not a gRPC target: write it as grpc://host:port'));
    expect(() => grpcSessionTargetResolver({ cluster: { ps: ["localhost:1"] } })).toThrow(
      new ValueError('the cluster has no chief: it needs a "chief" job or task 0 of a "worker" job (jobs: ps)'),
    );
    expect(() => new ModelPublisher({ maxChunkBytes: 10 })).toThrow(/maxChunkBytes must be an integer from 1024 to 4194304, got 10/);
  });
});

describe("grpc:// sessions: the chief's side", () => {
  it("a variable larger than gRPC's usual 4 MiB message limit crosses in 1 MiB chunks, bit for bit", async () => {
    const publisher = new ModelPublisher({ logger: silentLogger });
    const server = await chiefServer(publisher);
    const big = new Float32Array(1_500_000); // 6 MB
    for (let i = 0; i < big.length; i++) big[i] = Math.fround(Math.sin(i) * 1e3);
    const values = new Map<string, TensorValue>([["big", tensor("float32", [1500, 1000], big)]]);
    publisher.publish(storeSession(values));
    const state = (await new GrpcChiefModel(server.target).pull()) as Extract<ChiefModelState, { ready: true }>;
    expect(state.ready).toBe(true);
    expect(Buffer.from((state.values.get("big")?.data as Float32Array).buffer).equals(Buffer.from(big.buffer))).toBe(true);
    expect(state.values.get("big")?.shape).toEqual([1500, 1000]);
  });

  it("what it serves is gRPC: @grpc/grpc-js with our model.proto loaded at run time reads readiness", async () => {
    const publisher = new ModelPublisher({ logger: silentLogger, taskName: "/job:chief/replica:0/task:0" });
    const server = await chiefServer(publisher);
    publisher.publish(storeSession(new Map()));
    const def = protoLoader.loadSync("monitored_session/v1/model.proto", { includeDirs: [PROTO_ROOT], longs: String, defaults: true });
    const pkg = grpc.loadPackageDefinition(def) as unknown as { monitored_session: { v1: { ModelService: grpc.ServiceClientConstructor } } };
    const client = new pkg.monitored_session.v1.ModelService(server.target.replace("grpc://", ""), grpc.credentials.createInsecure()) as unknown as grpc.Client & {
      getReadiness(req: object, opts: grpc.CallOptions, cb: (e: grpc.ServiceError | null, r?: { ready: boolean; taskName: string; generation: string }) => void): void;
    };
    cleanups.push(() => client.close());
    const r = await new Promise<{ ready: boolean; taskName: string; generation: string }>((ok, fail) =>
      client.getReadiness({}, { deadline: Date.now() + 10_000 }, (e, res) => (e === null && res !== undefined ? ok(res) : fail(e))),
    );
    expect(r).toMatchObject({ ready: true, taskName: "/job:chief/replica:0/task:0", generation: "1" });
  });

  it("the Supervisor's chief publishes its prepared session (no hooks run there)", async () => {
    const publisher = new ModelPublisher({ logger: silentLogger });
    const g = new Graph();
    g.variable("v", 5);
    const sv = new Supervisor({ graph: g, isChief: true, logdir: null, clock: new VirtualClock(), logger: silentLogger });
    expect(publisher.readiness().ready).toBe(false);
    const sess = await sv.prepareOrWaitForSession({ master: "grpc://localhost:1", sessionTargets: clusterSessionTargets({ publisher }), startStandardServices: false });
    cleanups.push(() => sess.close?.());
    expect(publisher.readiness().ready).toBe(true);
    const state = (await new GrpcChiefModel("grpc://chief:1", { transport: createRouterTransport(publisher.registration) }).pull()) as Extract<ChiefModelState, { ready: true }>;
    expect(state.values.get("v")?.data).toEqual(new Float64Array([5]));
  });

  it("as a hook, it says each publish on the session's events$ (a line of the session, as every hook's), with the chief's task name and the generation: the first session, then the one re-created after a preemption", async () => {
    const ownLogger = new RecordingLogger();
    const publisher = new ModelPublisher({ logger: ownLogger, taskName: "/job:chief/replica:0/task:3" });
    const first = new FakeSession().injectError(new AbortedError("ps:0 preempted"), { atCall: 1 });
    const heard = new EventRecorder();
    const sess = await MonitoredSession.create({ sessionCreator: new FakeSessionCreator(undefined, [first]), hooks: [publisher], clock: new VirtualClock(), logger: silentLogger, observer: heard.listener });
    const published = (): string[] => heard.messages("info").filter((m) => m.includes("model published"));
    expect(published()).toEqual(["/job:chief/replica:0/task:3: model published to the workers (session 1)"]);
    await sess.run("train"); // aborted: the session is re-created and published again
    expect(published()).toEqual([
      "/job:chief/replica:0/task:3: model published to the workers (session 1)",
      "/job:chief/replica:0/task:3: model published to the workers (session 2)",
    ]);
    expect(publisher.readiness().generation).toBe(2n);
    // Its own logger prints only what it says outside a session (the Supervisor's chief calls publish itself).
    expect(ownLogger.entries).toEqual([]);
    await sess.close();
  });

  it("readiness reports the incarnation, a new generation per session, and the global step of the last snapshot", async () => {
    const publisher = new ModelPublisher({ logger: silentLogger, taskName: "/job:chief/replica:0/task:0" });
    expect(publisher.readiness().ready).toBe(false);
    const s1 = storeSession(new Map([["global_step", tensor("int64", [], new BigInt64Array([42n]))]]));
    const withStep: Session = { ...s1, globalStepName: "global_step" };
    publisher.publish(withStep);
    publisher.publish(withStep);
    const model = new GrpcChiefModel("grpc://chief:1", { transport: createRouterTransport(publisher.registration) });
    const state = (await model.pull()) as Extract<ChiefModelState, { ready: true }>;
    expect(state.globalStep).toBe(42);
    const r = publisher.readiness();
    expect({ ready: r.ready, generation: r.generation, globalStep: r.globalStep, incarnation: r.incarnation, taskName: r.taskName }).toEqual({
      ready: true,
      generation: 2n,
      globalStep: 42n,
      incarnation: processIncarnation,
      taskName: "/job:chief/replica:0/task:0",
    });
  });

  it("a worker's monitoredTrainingSession writes nothing under checkpointDir: only the chief writes", async () => {
    const { mkdtempSync, readdirSync, rmSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const { join } = await import("node:path");
    const dir = mkdtempSync(join(tmpdir(), "ms-worker-"));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const publisher = new ModelPublisher({ logger: silentLogger });
    const server = await chiefServer(publisher);
    publisher.publish(storeSession(new Map([["v", tensor("float64", [], new Float64Array([3]))]])));
    const g = new Graph();
    g.variable("v", 0);
    const worker = await monitoredTrainingSession({
      graph: g,
      master: "grpc://localhost:1",
      isChief: false,
      checkpointDir: dir,
      saveCheckpointSteps: 1,
      sessionTargets: clusterSessionTargets({ chief: server.target }),
      clock: new VirtualClock({ autoAdvance: true }),
      logger: silentLogger,
    });
    await worker.run("v");
    await worker.close();
    expect(readdirSync(dir)).toEqual([]);
  });
});
