/**
 * The named first steps of a task's start (src/runtime/taskStart.ts), each on its own, on the
 * in-process `memory` coordination backend and a virtual clock.
 */

import { randomUUID } from "node:crypto";
import { type AddressInfo, createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { resolveCluster, type ResolvedCluster } from "../../src/cluster/ClusterResolver.js";
import type { ClusterConfig } from "../../src/cluster/ClusterConfig.js";
import type { CoordinationConnection } from "../../src/cluster/coordination/backends.js";
import { CancelledError, clusterFailureOf } from "../../src/errors.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { type ClusterTask, clusterTaskFrom } from "../../src/runtime/clusterTask.js";
import { ClusterStartError, connectTask, registerTask, StartLeave, taskPlan, tellWhileStarting } from "../../src/runtime/taskStart.js";
import { freePorts } from "../util/cliChild.js";

/** The chief and one worker of a fresh in-process cluster. */
const pair = async (settings: Partial<ClusterConfig> = {}): Promise<readonly [ClusterTask, ClusterTask]> => {
  const [a, b] = (await freePorts(2)) as [number, number];
  const cluster = { chief: [`127.0.0.1:${a}`], worker: [`127.0.0.1:${b}`] };
  const options: ClusterConfig = { backend: "memory", memoryCluster: randomUUID(), ...settings };
  const of = (type: string): ClusterTask => clusterTaskFrom(resolveCluster({ TF_CONFIG: JSON.stringify({ cluster, task: { type, index: 0 } }) }) as ResolvedCluster, options);
  return [of("chief"), of("worker")];
};

/** `p`, or a failed test naming `what` after 20 s (a broken leave fails fast, not at the test's timeout). */
const within = <T>(p: Promise<T>, what: string): Promise<T> =>
  Promise.race([p, new Promise<never>((_, fail) => setTimeout(() => fail(new Error(`${what}: not settled within 20 s`)), 20_000).unref())]);

/** A report as `run` makes one (clusterRuntime.ts `preemptionReport`). */
const report = (name: string) => (what: string) => new CancelledError(`task ${name} got a termination notice (${what})`, { failure: { kind: "preemption", reporter: name, notice: what } });

/** `connection`, its `stop` counted. */
const counted = (connection: CoordinationConnection): { readonly stop: () => Promise<void>; readonly stops: () => number } => {
  let n = 0;
  return {
    stop: async () => {
      n += 1;
      await connection.stop();
    },
    stops: () => n,
  };
};

describe("a task's start, step by step", () => {
  it("taskPlan: the task's names and its client's and server's options, from its cluster: section and the token's variable", async () => {
    const [chief] = await pair({ timeouts: { heartbeatTimeoutSecs: 4, serverStartTimeoutSecs: 7 }, bindAddress: "0.0.0.0" });
    const plan = taskPlan(chief, { MONITORED_SESSION_CLUSTER_TOKEN: "s3cret" }, new VirtualClock(), new EventRecorder().logger());
    expect(plan.me).toBe("/job:chief/replica:0/task:0");
    expect(plan.tasks).toEqual(["/job:chief/replica:0/task:0", "/job:worker/replica:0/task:0"]);
    expect(plan.others).toEqual(["/job:worker/replica:0/task:0"]);
    expect(plan.token).toBe("s3cret");
    expect(plan.timeouts).toEqual({ heartbeatTimeoutMs: 4000 });
    expect(plan.clientOptions).toMatchObject({ task: plan.me, tasks: plan.tasks, isChief: true, timeouts: { heartbeatTimeoutMs: 4000 } });
    expect(plan.serverOptions).toMatchObject({ jobName: "chief", taskIndex: 0, token: "s3cret", bindAddress: "0.0.0.0", startTimeoutMs: 7000 });
  });

  it("taskPlan: an unreadable token file is a ClusterStartError naming it", async () => {
    const [chief] = await pair({ tokenFile: "/nonexistent/token" });
    expect(() => taskPlan(chief, {}, new VirtualClock(), new EventRecorder().logger())).toThrow(ClusterStartError);
    expect(() => taskPlan(chief, {}, new VirtualClock(), new EventRecorder().logger())).toThrow(/\/nonexistent\/token/);
  });

  it("connectTask: a backend nobody registered, and a port in use, are ClusterStartErrors that say what to fix", async () => {
    const clock = new VirtualClock();
    const events = new EventRecorder();
    const logger = events.logger(() => clock.now());
    const [nope] = await pair({ backend: "zookeeper" });
    const e = await connectTask(nope, taskPlan(nope, {}, clock, logger), [], clock, logger).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(ClusterStartError);
    expect((e as Error).message).toBe('unknown coordination backend "zookeeper"; the registered ones are embedded, etcd, memory');
    // A port this test holds: the task's address is taken before the task starts.
    const taken = createServer();
    await new Promise<void>((ok, fail) => {
      taken.once("error", fail);
      taken.listen(0, "127.0.0.1", ok);
    });
    const port = (taken.address() as AddressInfo).port;
    const chief = clusterTaskFrom(
      resolveCluster({ TF_CONFIG: JSON.stringify({ cluster: { chief: [`127.0.0.1:${port}`] }, task: { type: "chief", index: 0 } }) }) as ResolvedCluster,
      { backend: "memory", memoryCluster: randomUUID() },
    );
    try {
      const busy = await connectTask(chief, taskPlan(chief, {}, clock, logger), [], clock, logger).catch((x: unknown) => x);
      expect(busy).toBeInstanceOf(ClusterStartError);
      expect((busy as Error).message).toContain(String(port));
    } finally {
      taken.close();
    }
  });

  it("registerTask: both tasks register; the line names where the state lives", async () => {
    const clock = new VirtualClock();
    const events = new EventRecorder();
    const logger = events.logger(() => clock.now());
    const tasks = await pair();
    const started = await Promise.all(
      tasks.map(async (task) => {
        const plan = taskPlan(task, {}, clock, logger);
        const connection = await connectTask(task, plan, [], clock, logger);
        const leave = new StartLeave({ leave: undefined, name: task.name, tell: tellWhileStarting(connection.client, connection.host, plan.others, 1000), report: report(task.name) });
        await registerTask(task, connection, plan, leave, () => connection.stop(), clock, logger);
        return connection;
      }),
    );
    try {
      expect(events.messages("info").filter((m) => /^Server of (chief|worker):0 serving grpc:\/\/127\.0\.0\.1:\d+; registering with the coordination service \(in this process \(memory cluster .*\)\): waiting for 2 tasks\.$/.test(m))).toHaveLength(2);
      expect(events.messages("info").filter((m) => m.startsWith("Every task of the cluster registered (generation "))).toHaveLength(2);
      expect(started[0]?.client.generation).toBe(started[1]?.client.generation);
    } finally {
      for (const c of started) {
        await c.client.close();
        await c.stop();
      }
    }
  });

  it("a notice while the task waits for the others to register: the start ends (StartLeftError), nobody is told, and its connection stops", async () => {
    const clock = new VirtualClock();
    const events = new EventRecorder();
    const logger = events.logger(() => clock.now());
    const [chief] = await pair();
    const plan = taskPlan(chief, {}, clock, logger);
    const connection = await connectTask(chief, plan, [], clock, logger);
    const stop = counted(connection);
    let notice: (what: string) => void = () => undefined;
    const told: CancelledError[] = [];
    const leave = new StartLeave({
      leave: new Promise<string>((ok) => (notice = ok)),
      name: chief.name,
      tell: (r) => Promise.resolve(void told.push(r)),
      report: report(chief.name),
    });
    const registering = registerTask(chief, connection, plan, leave, stop.stop, clock, logger).catch((x: unknown) => x);
    notice("SIGTERM");
    const e = await within(registering, "the start's end");
    expect((e as Error).name).toBe("StartLeftError");
    expect((e as Error).message).toBe("chief:0 left the cluster while it started: termination notice (SIGTERM)");
    expect(told).toEqual([]);
    expect(stop.stops()).toBe(1);
  });

  it("a notice once every task registered, before the start is over: the others are told (a final preemption report naming the task), then the start ends", async () => {
    const clock = new VirtualClock();
    const events = new EventRecorder();
    const logger = events.logger(() => clock.now());
    const [chief, worker] = await pair();
    let notice: (what: string) => void = () => undefined;
    const connections = await Promise.all(
      [chief, worker].map(async (task) => {
        const plan = taskPlan(task, {}, clock, logger);
        const connection = await connectTask(task, plan, [], clock, logger);
        const leave = new StartLeave({
          leave: task === worker ? new Promise<string>((ok) => (notice = ok)) : undefined,
          name: task.name,
          tell: tellWhileStarting(connection.client, connection.host, plan.others, 1000),
          report: report(task.name),
        });
        await registerTask(task, connection, plan, leave, () => connection.stop(), clock, logger);
        return { connection, leave };
      }),
    );
    const [c, w] = connections as [(typeof connections)[number], (typeof connections)[number]];
    try {
      // The worker joins its group, say: the notice comes meanwhile.
      const joining = w.leave.unless(new Promise<never>(() => undefined)).catch((x: unknown) => x);
      const waiting = c.connection.client.get("never", { timeoutMs: 60_000 }).catch((x: unknown) => x);
      notice("SIGTERM");
      expect(((await within(joining, "the start's end")) as Error).name).toBe("StartLeftError");
      const heard = await within(waiting, "the chief's blocked get");
      expect(heard).toBeInstanceOf(CancelledError);
      // The service names the sender by its coordination name.
      expect(clusterFailureOf(heard)).toEqual({ kind: "preemption", reporter: "/job:worker/replica:0/task:0", notice: "SIGTERM" });
    } finally {
      for (const { connection } of connections) {
        await connection.client.close();
        await connection.stop();
      }
    }
  });

  it("a notice after the start is over is the caller's: what the start awaits is not cut short", async () => {
    let notice: (what: string) => void = () => undefined;
    const told: CancelledError[] = [];
    const leave = new StartLeave({ leave: new Promise<string>((ok) => (notice = ok)), name: "worker:0", tell: (r) => Promise.resolve(void told.push(r)), report: report("worker:0") });
    leave.registered();
    leave.started();
    let finish: (v: string) => void = () => undefined;
    const awaited = leave.unless(new Promise<string>((ok) => (finish = ok)));
    notice("SIGTERM");
    await Promise.resolve();
    finish("done");
    expect(await awaited).toBe("done");
    expect(told).toEqual([]);
  });
});
