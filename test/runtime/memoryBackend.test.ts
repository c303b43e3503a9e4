/**
 * The task runtime on the in-process `memory` coordination backend: two tasks of one program,
 * started as a program starts them (`startTask`), on a virtual clock. The backend is a
 * registration like `embedded` and `etcd`: nothing in the runtime names it.
 */

import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { resolveCluster } from "../../src/cluster/ClusterResolver.js";
import { coordinationBackend, processPerTaskProblem } from "../../src/cluster/coordination/backends.js";
import { joinMemoryCluster } from "../../src/cluster/coordination/memory/memoryConnect.js";
import { UnavailableError } from "../../src/errors.js";
import { silentLogger } from "../../src/Logger.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { startTask, type TaskRuntime } from "../../src/runtime/index.js";
import { freePorts } from "../util/cliChild.js";

/** Starts the chief and one worker of a fresh in-process cluster, on `clock`; `heard` hears both tasks' events. */
const startPair = async (clock: VirtualClock, heard = new EventRecorder()): Promise<readonly [TaskRuntime, TaskRuntime]> => {
  const [a, b] = (await freePorts(2)) as [number, number];
  const cluster = { chief: [`127.0.0.1:${a}`], worker: [`127.0.0.1:${b}`] };
  const settings = { backend: "memory", memoryCluster: randomUUID(), timeouts: { heartbeatTimeoutSecs: 4 } };
  const start = (type: string): Promise<TaskRuntime> =>
    startTask({ env: {}, resolver: resolveCluster({ TF_CONFIG: JSON.stringify({ cluster, task: { type, index: 0 } }) }), settings, clock, logger: silentLogger, observer: heard.listener, exit: () => undefined });
  const [chief, worker] = await Promise.all([start("chief"), start("worker")]);
  return [chief, worker];
};

describe("the task runtime on the memory backend", () => {
  it("two tasks of one program register, share the coordination service's keys, and leave through the shutdown barrier", async () => {
    const clock = new VirtualClock();
    const heard = new EventRecorder();
    const [chief, worker] = await startPair(clock, heard);
    expect(heard.lines("info").filter((e) => e.message.includes("registering with the coordination service (in this process (memory cluster ")).map((e) => e.source)).toEqual(["runtime", "runtime"]);
    expect(chief.coordination.generation).toBe(worker.coordination.generation);
    await chief.coordination.insert("greeting", "hello");
    expect(await worker.coordination.get("greeting")).toBe("hello");
    const closed = await Promise.all([chief.close(), worker.close()]);
    expect(closed).toEqual([undefined, undefined]);
  });

  it("a worker gone silent is declared failed after the heartbeat timeout of virtual time: the chief's runtime fails naming it", async () => {
    const clock = new VirtualClock();
    const [chief, worker] = await startPair(clock);
    try {
      let failure: unknown;
      void chief.failed.then((e) => (failure = e));
      // As a killed process: no leave, no more heartbeats.
      await worker.coordination.close();
      await clock.advanceSecs(3);
      expect(failure).toBeUndefined();
      await clock.advanceSecs(3);
      expect(failure).toBeInstanceOf(UnavailableError);
      expect((failure as UnavailableError).failure).toEqual({ kind: "declaredFailed", tasks: ["/job:worker/replica:0/task:0"] });
    } finally {
      await Promise.all([chief.finish(false), worker.finish(false)]);
    }
  });

  it("is refused where each task runs in a process of its own, with the fix", () => {
    expect(coordinationBackend("memory").singleProcess).toBe(true);
    expect(processPerTaskProblem("memory", 3, "launch")).toBe(
      "cluster.backend memory keeps the coordination state in this process, and launch starts each of the 3 tasks in a process of its own: use embedded or etcd, or start the tasks with startTask() in one program",
    );
    // One task needs nobody else's process.
    expect(processPerTaskProblem("memory", 1, "monitored-session run")).toBeUndefined();
    expect(processPerTaskProblem(undefined, 3, "launch")).toBeUndefined();
    expect(processPerTaskProblem("etcd", 3, "launch")).toBeUndefined();
  });
});

describe("the memory backend's in-process clusters", () => {
  it("refuses a task that names a cluster in use with other tasks, another clock or another heartbeat timeout; a lost service names the memory backend, not the chief's", async () => {
    const name = randomUUID();
    const clock = new VirtualClock();
    const tasks = ["/job:chief/replica:0/task:0", "/job:worker/replica:0/task:0"];
    const member = joinMemoryCluster(name, { task: tasks[0] as string, tasks, isChief: true }, clock);
    try {
      expect(() => joinMemoryCluster(name, { task: "/job:chief/replica:0/task:0", tasks: ["/job:chief/replica:0/task:0"], isChief: true }, clock)).toThrow(
        `memory cluster ${name} is in use in this process, and its tasks are ["/job:chief/replica:0/task:0","/job:worker/replica:0/task:0"], not ["/job:chief/replica:0/task:0"]: give each cluster its own cluster.memoryCluster, and every task of one cluster the same settings and clock`,
      );
      expect(() => joinMemoryCluster(name, { task: tasks[1] as string, tasks, isChief: false }, new VirtualClock())).toThrow(/and its tasks run on another clock: /);
      expect(() => joinMemoryCluster(name, { task: tasks[1] as string, tasks, isChief: false, timeouts: { heartbeatTimeoutMs: 4000 } }, clock)).toThrow(
        /and its heartbeat timeout is the default, not 4000 ms: /,
      );
      // The last member gone, the service is: a call of a client kept meanwhile says which backend's service went.
      const worker = joinMemoryCluster(name, { task: tasks[1] as string, tasks, isChief: false }, clock);
      await Promise.all([member.client.connect(), worker.client.connect()]);
      member.leave();
      worker.leave();
      const e = await worker.client.tryGet("x").catch((x: unknown) => x);
      expect(e).toBeInstanceOf(UnavailableError);
      expect((e as UnavailableError).failure).toEqual({ kind: "serviceGone", backend: "memory" });
      await Promise.all([member.client.close(), worker.client.close()]);
    } finally {
      member.leave();
    }
  });
});
