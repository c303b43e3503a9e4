/**
 * `startTask()` and the cluster settings a task reads from its environment: the errors a user
 * sees for a missing or bad TF_CONFIG and MONITORED_SESSION_CLUSTER, and a one-task cluster
 * started from a resolver, joined, and closed (its process would exit: nothing left behind).
 */
import { randomUUID } from "node:crypto";
import { EventEmitter } from "node:events";

import { describe, expect, it } from "vitest";

import { resolveCluster } from "../../src/cluster/ClusterResolver.js";
import { clusterFailureOf, ValueError } from "../../src/errors.js";
import { silentLogger } from "../../src/Logger.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { PreemptionCheckpointHandler } from "../../src/preemption/index.js";
import { CLUSTER_SETTINGS_ENV, clusterSettingsEnv, clusterSettingsFromEnv, startTask } from "../../src/runtime/index.js";
import { Graph } from "../../src/session/Graph.js";
import { freePorts } from "../util/cliChild.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-start-task-");

describe("startTask", () => {
  it("without TF_CONFIG: a ValueError of one line that says how to start the task", async () => {
    const e = await startTask({ env: {}, logger: silentLogger }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(ValueError);
    expect((e as Error).message).toMatch(/^startTask: TF_CONFIG is not set, so this process is not a task of a cluster; run it under `monitored-session launch --workers N -- <command>`/);
    expect((e as Error).message).not.toContain("\n");
  });

  it("a bad MONITORED_SESSION_CLUSTER is refused before anything starts, every problem with its path", async () => {
    const tfConfig = JSON.stringify({ cluster: { chief: ["127.0.0.1:1"] }, task: { type: "chief", index: 0 } });
    await expect(startTask({ env: { TF_CONFIG: tfConfig, [CLUSTER_SETTINGS_ENV]: "{nope" }, logger: silentLogger })).rejects.toThrow(
      /^invalid MONITORED_SESSION_CLUSTER: not valid JSON \(.*\); set it to the cluster: section as JSON/,
    );
    await expect(
      startTask({ env: { TF_CONFIG: tfConfig, [CLUSTER_SETTINGS_ENV]: JSON.stringify({ backend: "zookeeper", timeouts: { heartbeatTimeoutSecs: -1 } }) }, logger: silentLogger }),
    ).rejects.toThrow(/^invalid MONITORED_SESSION_CLUSTER: backend: .*; timeouts\.heartbeatTimeoutSecs: /);
  });

  it("settings given in code are checked as a file's are: a misspelled backend setting is a ValueError naming it, before anything starts", async () => {
    const tfConfig = JSON.stringify({ cluster: { chief: ["127.0.0.1:1"] }, task: { type: "chief", index: 0 } });
    const e = await startTask({ env: { TF_CONFIG: tfConfig }, settings: { backend: "memory", memoryClustr: "a" }, logger: silentLogger }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(ValueError);
    expect((e as Error).message).toMatch(/^invalid startTask settings: memoryClustr: unknown field "memoryClustr" \(did you mean "memoryCluster"\?\)/);
  });

  it("the settings round-trip through the environment, their file paths made absolute", () => {
    const env = clusterSettingsEnv({ backend: "etcd", etcdEndpoints: ["http://127.0.0.1:2379"], tokenFile: "secrets/token" });
    expect(clusterSettingsFromEnv(env, "/base")).toEqual({ backend: "etcd", etcdEndpoints: ["http://127.0.0.1:2379"], tokenFile: "/base/secrets/token" });
    expect(clusterSettingsFromEnv({}, "/base")).toBeUndefined();
    expect(clusterSettingsFromEnv({ [CLUSTER_SETTINGS_ENV]: "  " }, "/base")).toBeUndefined();
  });

  it("a one-task cluster from a resolver: the task joins, is the handler's cluster resolver, and closes", async () => {
    const [port] = await freePorts(1);
    const resolver = resolveCluster({ TF_CONFIG: JSON.stringify({ cluster: { chief: [`127.0.0.1:${port as number}`] }, task: { type: "chief", index: 0 } }) });
    const task = await startTask({ env: {}, resolver, logger: silentLogger });
    try {
      expect([task.name, task.isChief, task.idInCluster, task.numWorkers, task.master]).toEqual(["chief:0", true, 0, 1, `grpc://127.0.0.1:${port as number}`]);
      expect(task.coordination.generation).toBeGreaterThan(0);
      expect(task.collective).toBeUndefined();
      const g = new Graph();
      g.globalStep();
      const session = g.session();
      const handler = await PreemptionCheckpointHandler.create({ clusterResolver: task, checkpointDir: tempDir(), store: session.variables, initFn: () => session.variables.initialize() });
      await handler.run(() => undefined);
      expect(handler.totalRunCalls).toBe(1);
      await handler.close();
    } finally {
      expect(await task.close()).toBeUndefined();
    }
  });

  it("the notices are taken over when the handler subscribes, not when it asks: a notice in between is held by the task (its line), then delivered to the subscriber", async () => {
    const [port] = await freePorts(1);
    const resolver = resolveCluster({ TF_CONFIG: JSON.stringify({ cluster: { chief: [`127.0.0.1:${port as number}`] }, task: { type: "chief", index: 0 } }) });
    const proc = Object.assign(new EventEmitter(), { ppid: process.ppid });
    const recorder = new EventRecorder();
    const exits: number[] = [];
    const task = await startTask({ env: {}, resolver, logger: silentLogger, observer: recorder.listener, noticeProcess: proc, exit: (code) => void exits.push(code) });
    try {
      const taken = task.takeOverNotices();
      // The handler asked, but restores before it subscribes: the task still holds this notice
      // (the task's own line, not its notices' part's).
      proc.emit("SIGTERM");
      expect(recorder.lines("info").filter((e) => e.message.includes("held for the PreemptionCheckpointHandler")).map((e) => e.source)).toEqual(["runtime"]);
      const heard: string[] = [];
      const subscription = taken.subscribe((n) => void heard.push(n.source));
      expect(heard).toEqual(["SIGTERM"]);
      // From now on the handler's: a second notice is not the task's (no exit).
      proc.emit("SIGTERM");
      expect(exits).toEqual([]);
      subscription.unsubscribe();
    } finally {
      expect(await task.close()).toBeUndefined();
    }
  });
  it("a notice taken over says what it is as people say it (the handler's line names it)", async () => {
    const [port] = await freePorts(1);
    const resolver = resolveCluster({ TF_CONFIG: JSON.stringify({ cluster: { chief: [`127.0.0.1:${port as number}`] }, task: { type: "chief", index: 0 } }) });
    const proc = Object.assign(new EventEmitter(), { ppid: process.ppid });
    const task = await startTask({ env: {}, resolver, logger: silentLogger, noticeProcess: proc, exit: () => undefined });
    try {
      const heard: (string | undefined)[] = [];
      const subscription = task.takeOverNotices().subscribe((n) => void heard.push(n.description));
      proc.emit("SIGHUP");
      expect(heard).toEqual(["SIGHUP"]);
      subscription.unsubscribe();
    } finally {
      expect(await task.close()).toBeUndefined();
    }
  });

  it("once the handler let go (it closed), the task's first notice tells the tasks still training; a notice the handler had is not told again", async () => {
    const [p0, p1] = (await freePorts(2)) as [number, number];
    const cluster = { chief: [`127.0.0.1:${p0}`], worker: [`127.0.0.1:${p1}`] };
    const resolverOf = (type: string) => resolveCluster({ TF_CONFIG: JSON.stringify({ cluster, task: { type, index: 0 } }) });
    const chiefProc = Object.assign(new EventEmitter(), { ppid: process.ppid });
    const workerProc = Object.assign(new EventEmitter(), { ppid: process.ppid });
    const heard = new EventRecorder();
    const workerHeard = new EventRecorder();
    const exits: number[] = [];
    const exit = (code: number): void => void exits.push(code);
    const [chief, worker] = await Promise.all([
      startTask({ env: {}, resolver: resolverOf("chief"), logger: silentLogger, observer: heard.listener, noticeProcess: chiefProc, exit }),
      startTask({ env: {}, resolver: resolverOf("worker"), logger: silentLogger, observer: workerHeard.listener, noticeProcess: workerProc, exit }),
    ]);
    try {
      // The worker's handler had its notice, then closed: nothing more is told.
      const workerHandler = worker.takeOverNotices().subscribe(() => undefined);
      workerProc.emit("SIGTERM");
      workerHandler.unsubscribe();
      workerProc.emit("SIGINT");
      expect(workerHeard.messages().filter((m) => m.includes("after its training ended"))).toEqual([]);
      // The chief's handler closed (its training ended) before any notice; it still serves the worker.
      chief.takeOverNotices().subscribe(() => undefined).unsubscribe();
      chiefProc.emit("SIGTERM");
      expect(heard.lines("info").filter((e) => e.message.includes("after its training ended: telling the tasks still training")).map((e) => e.source)).toEqual(["runtime"]);
      const told = await worker.failed;
      expect(clusterFailureOf(told)).toEqual(expect.objectContaining({ kind: "preemption", notice: "SIGTERM" }));
      expect(clusterFailureOf(told)?.kind === "preemption" && clusterFailureOf(told)).toHaveProperty("reporter", expect.stringContaining("chief"));
      expect(exits).toEqual([]);
    } finally {
      await worker.finish(false);
      await chief.finish(false);
    }
  });
  it.each([
    ["after its handler closed", true],
    ["with no handler ever", false],
  ])("a program's task that waits at the shutdown barrier %s: its first notice is told to the others, a second one exits with the preemption code at once", async (_, handler) => {
    // On the memory backend and a virtual clock: the barrier's timeout never runs out under load.
    const [p0, p1] = (await freePorts(2)) as [number, number];
    const cluster = { chief: [`127.0.0.1:${p0}`], worker: [`127.0.0.1:${p1}`] };
    const resolverOf = (type: string) => resolveCluster({ TF_CONFIG: JSON.stringify({ cluster, task: { type, index: 0 } }) });
    const settings = { backend: "memory", memoryCluster: randomUUID() };
    const clock = new VirtualClock();
    const chiefProc = Object.assign(new EventEmitter(), { ppid: process.ppid });
    const heard = new EventRecorder();
    const exits: number[] = [];
    const [chief, worker] = await Promise.all([
      startTask({ env: {}, resolver: resolverOf("chief"), settings, clock, logger: silentLogger, observer: heard.listener, noticeProcess: chiefProc, exit: (code) => void exits.push(code) }),
      startTask({ env: {}, resolver: resolverOf("worker"), settings, clock, logger: silentLogger, noticeProcess: Object.assign(new EventEmitter(), { ppid: process.ppid }), exit: () => undefined }),
    ]);
    try {
      if (handler) chief.takeOverNotices().subscribe(() => undefined).unsubscribe();
      // The chief leaves through the shutdown barrier, where it waits for the worker still training.
      const closing = chief.close();
      chiefProc.emit("SIGTERM");
      expect(clusterFailureOf(await worker.failed)?.kind).toBe("preemption");
      expect(exits).toEqual([]);
      chiefProc.emit("SIGINT");
      expect(exits).toEqual([42]);
      expect(heard.lines("info").filter((e) => e.message.includes("while it leaves the cluster: exiting with 42 at once")).map((e) => e.source)).toEqual(["runtime"]);
      expect(heard.ofType("taskExiting")).toEqual([{ type: "taskExiting", time: clock.now(), task: "chief:0", code: 42, reason: "termination notice while the task left the cluster" }]);
      await worker.finish(false);
      await closing;
    } finally {
      await worker.finish(false);
      await chief.finish(false);
    }
  });
});
