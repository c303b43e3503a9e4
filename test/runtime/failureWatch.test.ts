/**
 * The failure-watch and collective-join steps of a task's start (src/runtime/failureWatch.ts,
 * src/runtime/collectiveJoin.ts), each on its own, on the in-process `memory` coordination
 * backend and a virtual clock.
 */

import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { resolveCluster, type ResolvedCluster } from "../../src/cluster/ClusterResolver.js";
import { joinMemoryCluster, type MemoryMember } from "../../src/cluster/coordination/memory/memoryConnect.js";
import { CancelledError, OpError, UnavailableError } from "../../src/errors.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { joinCollective } from "../../src/runtime/collectiveJoin.js";
import { lostOf, watchCluster } from "../../src/runtime/failureWatch.js";
import { ReplicaGroup } from "../../src/runtime/replicaGroup.js";
import { freePorts } from "../util/cliChild.js";

const chief = "/job:chief/replica:0/task:0";
const worker = "/job:worker/replica:0/task:0";

/** The chief and a worker of a fresh in-process cluster, registered, heartbeating on `clock`. */
const registered = async (clock: VirtualClock): Promise<readonly [MemoryMember, MemoryMember]> => {
  const name = randomUUID();
  const tasks = [chief, worker];
  const options = { tasks, timeouts: { heartbeatTimeoutMs: 4000 } };
  const c = joinMemoryCluster(name, { ...options, task: chief, isChief: true }, clock);
  const w = joinMemoryCluster(name, { ...options, task: worker, isChief: false }, clock);
  await Promise.all([c.client.connect(), w.client.connect()]);
  return [c, w];
};

const leaveAll = async (members: readonly MemoryMember[]): Promise<void> => {
  await Promise.all(members.map((m) => m.client.close().catch(() => undefined)));
  for (const m of members) m.leave();
};

describe("the failure watch", () => {
  it("ends as soon as the cluster fails: a worker gone silent, declared failed after the heartbeat timeout of virtual time", async () => {
    const clock = new VirtualClock();
    const [c, w] = await registered(clock);
    try {
      let failure: OpError | undefined;
      void watchCluster(c.client, () => false, undefined, undefined).then((e) => (failure = e));
      await w.client.close();
      await clock.advanceSecs(3);
      expect(failure).toBeUndefined();
      await clock.advanceSecs(3);
      expect(failure).toBeInstanceOf(UnavailableError);
      expect(failure?.failure).toEqual({ kind: "declaredFailed", tasks: [worker] });
      expect(lostOf(failure as OpError, undefined)).toEqual([worker]);
    } finally {
      await leaveAll([c, w]);
    }
  });

  it("says nothing once the task is finishing, and gives a re-forming group's failure to `lost` first: what `lost` rejects with is the failure", async () => {
    const clock = new VirtualClock();
    const [c, w] = await registered(clock);
    try {
      let finishing = false;
      let quiet: OpError | undefined;
      void watchCluster(c.client, () => finishing, undefined, undefined).then((e) => (quiet = e));
      const given: OpError[] = [];
      const cause = new CancelledError("the group stopped waiting");
      const viaLost = watchCluster(c.client, () => false, undefined, (e) => {
        given.push(e);
        return Promise.reject(cause);
      });
      finishing = true;
      await w.client.close();
      await clock.advanceSecs(6);
      expect(await viaLost).toBe(cause);
      expect(given.map((e) => e.failure)).toEqual([{ kind: "declaredFailed", tasks: [worker] }]);
      expect(quiet).toBeUndefined();
    } finally {
      await leaveAll([c, w]);
    }
  });

  it("finds the chief lost when a service it hosted is gone, not when another backend's service is", () => {
    const gone = (backend: string): OpError => new UnavailableError("gone", { failure: { kind: "serviceGone", backend } });
    expect(lostOf(gone("embedded"), chief)).toEqual([chief]);
    expect(lostOf(gone("embedded"), undefined)).toEqual([]);
    expect(lostOf(gone("etcd"), chief)).toEqual([]);
    expect(lostOf(gone("memory"), chief)).toEqual([]);
  });
});

describe("the collective join", () => {
  it("two ranks publish their data-plane addresses under the generation's keys, connect the ring, and reduce", async () => {
    const clock = new VirtualClock();
    const [c, w] = await registered(clock);
    const [a, b] = (await freePorts(2)) as [number, number];
    const cluster = { chief: [`127.0.0.1:${a}`], worker: [`127.0.0.1:${b}`] };
    const groupOf = (type: string): ReplicaGroup => ReplicaGroup.of(resolveCluster({ TF_CONFIG: JSON.stringify({ cluster, task: { type, index: 0 } }) }) as ResolvedCluster) as ReplicaGroup;
    const events = new EventRecorder();
    const options = (address: string) => ({ address, token: undefined, tls: undefined, timeoutSecs: 30, clock, logger: events.logger(() => clock.now()) });
    const joined = await Promise.all([joinCollective(c.client, groupOf("chief"), options(`127.0.0.1:${a}`)), joinCollective(w.client, groupOf("worker"), options(`127.0.0.1:${b}`))]).catch(async (e: unknown) => {
      await leaveAll([c, w]);
      throw e;
    });
    const [r0, r1] = joined;
    try {
      const [x, y] = await Promise.all([r0.allReduce(new Float32Array([1, 2]), "sum"), r1.allReduce(new Float32Array([10, 20]), "sum")]);
      expect([...x]).toEqual([11, 22]);
      expect([...y]).toEqual([11, 22]);
      expect(events.messages("info").filter((m) => m.startsWith("Joined the replica group: rank "))).toHaveLength(2);
      expect(await c.client.tryGet(`monitored-session/run/collective/${c.client.generation ?? 0}/rank1/incarnation`)).toBe(w.client.incarnation);
    } finally {
      await Promise.all([r0.close(), r1.close()]);
      await leaveAll([c, w]);
    }
  });
});
