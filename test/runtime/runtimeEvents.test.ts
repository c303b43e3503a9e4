/**
 * A started task's events (src/runtime/events.ts): its lines are `log` events of source
 * `runtime` from its first one, printed by its own logger until a session adopts them; a
 * `monitoredTrainingSession({ task })` adopts them while it lives; the stream completes once the
 * task finished. On the in-process memory backend and a virtual clock.
 */

import { randomUUID } from "node:crypto";
import { EventEmitter } from "node:events";

import { describe, expect, it } from "vitest";

import { resolveCluster } from "../../src/cluster/ClusterResolver.js";
import { EventRecorder, flush, RecordingLogger, VirtualClock } from "../../src/testing/index.js";
import { startTask, type TaskRuntime } from "../../src/runtime/index.js";
import { Graph } from "../../src/session/Graph.js";
import { monitoredTrainingSession } from "../../src/training/monitoredTrainingSession.js";
import { freePorts } from "../util/cliChild.js";

/** A fresh two-task cluster's TF_CONFIG resolvers and settings (memory backend). */
const twoTasks = async () => {
  const [a, b] = (await freePorts(2)) as [number, number];
  const cluster = { chief: [`127.0.0.1:${a}`], worker: [`127.0.0.1:${b}`] };
  return {
    resolverOf: (type: string) => resolveCluster({ TF_CONFIG: JSON.stringify({ cluster, task: { type, index: 0 } }) }),
    settings: { backend: "memory", memoryCluster: randomUUID() },
  };
};

/** A notice source of a test (`emit("SIGTERM")`). */
const fakeProcess = () => Object.assign(new EventEmitter(), { ppid: process.ppid });

describe("a started task's events", () => {
  it("its start's lines and registration are events of source runtime from the first line; its logger prints them until a session adopts them; the stream completes once the task finished", async () => {
    const { resolverOf, settings } = await twoTasks();
    const clock = new VirtualClock();
    const logger = new RecordingLogger();
    const heard = new EventRecorder();
    let completed = false;
    const chiefProc = fakeProcess();
    const [chief, worker] = await Promise.all([
      startTask({ env: {}, resolver: resolverOf("chief"), settings, clock, logger, noticeProcess: chiefProc, exit: () => undefined, observer: heard.listener }),
      startTask({ env: {}, resolver: resolverOf("worker"), settings, clock, logger: new RecordingLogger(), exit: () => undefined }),
    ]);
    chief.events$.subscribe({ complete: () => void (completed = true) });
    try {
      expect(heard.ofType("taskRegistered")).toEqual([{ type: "taskRegistered", time: clock.now(), task: "chief:0", tasks: 2, generation: chief.coordination.generation ?? null }]);
      // Every line is a log event of the runtime or of a part it started (the server keeps its
      // own source), and (no session yet) printed by the task's logger, once.
      const lines = heard.lines();
      expect(lines.length).toBeGreaterThanOrEqual(2);
      expect(lines.every((e) => e.source === "runtime" || e.source === "server")).toBe(true);
      expect(lines.filter((e) => e.source === "server").map((e) => e.message)).toEqual([expect.stringMatching(/^\/job:chief\/replica:0\/task:0 serving grpc:\/\/127\.0\.0\.1:\d+ \(bound /)]);
      expect(heard.messages().some((m) => m.startsWith("Server of chief:0 serving grpc://127.0.0.1:"))).toBe(true);
      expect(heard.messages()).toContain(`Every task of the cluster registered (generation ${chief.coordination.generation ?? "?"}).`);
      expect(logger.messages("info")).toEqual(heard.messages("info"));

      // Adopted (as a session's forwardEvents does): the line is an event, and the task's logger is silent.
      const release = chief.adopt();
      chiefProc.emit("SIGTERM");
      const held = heard.messages().filter((m) => m.includes("termination notice (SIGTERM) held for"));
      expect(held).toHaveLength(1);
      expect(logger.messages("info").filter((m) => m.includes("held for"))).toEqual([]);
      release();
      expect(completed).toBe(false);
    } finally {
      await Promise.all([chief.finish(false), worker.finish(false)]);
    }
    expect(completed).toBe(true);
  });

  it("a notice while the task joins: the line and taskExiting are events before the task exits with the preemption code", async () => {
    const { resolverOf, settings } = await twoTasks();
    const clock = new VirtualClock();
    const heard = new EventRecorder();
    const exits: number[] = [];
    const proc = fakeProcess();
    // The worker never starts: the chief waits for it at the registration.
    void startTask({ env: {}, resolver: resolverOf("chief"), settings, clock, logger: new RecordingLogger(), noticeProcess: proc, exit: (code) => void exits.push(code), observer: heard.listener });
    for (let i = 0; i < 50 && !heard.messages().some((m) => m.includes("waiting for 2 tasks")); i++) await flush();
    expect(heard.messages().some((m) => m.includes("waiting for 2 tasks"))).toBe(true);
    proc.emit("SIGTERM");
    for (let i = 0; i < 200 && exits.length === 0; i++) {
      await flush();
      await clock.advance(0);
    }
    expect(exits).toEqual([42]);
    expect(heard.messages().filter((m) => m.includes("termination notice (SIGTERM) while it joined the cluster: leaving the cluster and exiting with 42"))).toHaveLength(1);
    expect(heard.ofType("taskExiting")).toEqual([
      { type: "taskExiting", time: clock.now(), task: "chief:0", code: 42, reason: "termination notice while it joined the cluster" },
    ]);
  });

  it("a second notice before a handler took them over: its line, then taskExiting, and the task exits with the preemption code", async () => {
    const [port] = (await freePorts(1)) as [number];
    const resolver = resolveCluster({ TF_CONFIG: JSON.stringify({ cluster: { chief: [`127.0.0.1:${port}`] }, task: { type: "chief", index: 0 } }) });
    const clock = new VirtualClock();
    const heard = new EventRecorder();
    const exits: number[] = [];
    const proc = fakeProcess();
    const task = await startTask({ env: {}, resolver, settings: { backend: "memory", memoryCluster: randomUUID() }, clock, logger: new RecordingLogger(), noticeProcess: proc, exit: (code) => void exits.push(code), observer: heard.listener });
    try {
      proc.emit("SIGTERM");
      expect(heard.ofType("taskExiting")).toEqual([]);
      proc.emit("SIGINT");
      for (let i = 0; i < 200 && exits.length === 0; i++) {
        await flush();
        await clock.advance(0);
      }
      expect(exits).toEqual([42]);
      expect(heard.messages("info").filter((m) => m.includes("termination notice (SIGINT) again, before a preemption handler took the notices over"))).toHaveLength(1);
      expect(heard.ofType("taskExiting")).toEqual([
        { type: "taskExiting", time: clock.now(), task: "chief:0", code: 42, reason: "termination notice again, before a preemption handler took the notices over" },
      ]);
      // The stream ended with the exit: the types, in order, end with it.
      expect(heard.types().at(-1)).toBe("taskExiting");
    } finally {
      await task.finish(false);
    }
  });

  it("a data-parallel pair: each rank's replicaGroupJoined, after the registration", async () => {
    const { resolverOf, settings } = await twoTasks();
    const clock = new VirtualClock();
    const chiefHeard = new EventRecorder();
    const workerHeard = new EventRecorder();
    const [chief, worker] = await Promise.all([
      startTask({ env: {}, resolver: resolverOf("chief"), settings, dataParallel: true, clock, logger: new RecordingLogger(), exit: () => undefined, observer: chiefHeard.listener }),
      startTask({ env: {}, resolver: resolverOf("worker"), settings, dataParallel: true, clock, logger: new RecordingLogger(), exit: () => undefined, observer: workerHeard.listener }),
    ]);
    try {
      expect(chiefHeard.ofType("replicaGroupJoined")).toEqual([{ type: "replicaGroupJoined", time: clock.now(), task: "chief:0", rank: 0, size: 2 }]);
      expect(workerHeard.ofType("replicaGroupJoined")).toEqual([{ type: "replicaGroupJoined", time: clock.now(), task: "worker:0", rank: 1, size: 2 }]);
      const order = chiefHeard.types().filter((t) => t !== "log");
      expect(order).toEqual(["taskRegistered", "replicaGroupJoined"]);
      expect(chiefHeard.messages("info").some((m) => m.startsWith("Joined the replica group: rank 0 of 2"))).toBe(true);
    } finally {
      await Promise.all([chief.finish(false), worker.finish(false)]);
    }
  });

  it("monitoredTrainingSession({ task }) forwards the task's events while it lives: its log observers print the task's lines, the task's logger again after it closed", async () => {
    const [port] = (await freePorts(1)) as [number];
    const resolver = resolveCluster({ TF_CONFIG: JSON.stringify({ cluster: { chief: [`127.0.0.1:${port}`] }, task: { type: "chief", index: 0 } }) });
    const clock = new VirtualClock();
    const taskLogger = new RecordingLogger();
    const sessionLogger = new RecordingLogger();
    const proc = fakeProcess();
    const task: TaskRuntime = await startTask({ env: {}, resolver, settings: { backend: "memory", memoryCluster: randomUUID() }, clock, logger: taskLogger, noticeProcess: proc, exit: () => undefined });
    try {
      const g = new Graph();
      g.globalStep();
      const session = await monitoredTrainingSession({ task, graph: g, clock, logger: sessionLogger });
      const onStream = new EventRecorder();
      onStream.record(session.events$);
      proc.emit("SIGTERM");
      const line = (l: RecordingLogger) => l.messages("info").filter((m) => m.includes("termination notice (SIGTERM) held for"));
      expect(line(sessionLogger)).toHaveLength(1);
      expect(line(taskLogger)).toEqual([]);
      expect(onStream.lines("info").filter((e) => e.source === "runtime" && e.message.includes("held for"))).toHaveLength(1);
      await session.close();
      // The session is gone: the task prints its own lines again (a second notice exits: its line).
      proc.emit("SIGINT");
      expect(taskLogger.messages("info").filter((m) => m.includes("termination notice (SIGINT) again"))).toHaveLength(1);
      expect(sessionLogger.messages("info").filter((m) => m.includes("(SIGINT)"))).toEqual([]);
    } finally {
      await task.finish(false);
    }
  });
});
