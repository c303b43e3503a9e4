import { randomUUID } from "node:crypto";
import { joinMemoryCluster, type MemoryMember } from "../../../src/cluster/coordination/memory/memoryConnect.js";
import { systemClock } from "../../../src/time/Clock.js";
import { describeConformance } from "./conformance.js";

const heartbeatTimeoutMs = 2_000; // as on the other backends: margin for a loaded 2-core CI machine

// The memory backend's clients, as its registration makes them: one in-process cluster per
// conformance cluster, heartbeats inline on the system clock, the service on this thread too.
describeConformance("memory", () => {
  const members: MemoryMember[] = [];
  return {
    heartbeatTimeoutMs,
    cluster: async (tasks) => {
      const name = `conformance-${randomUUID()}`;
      return {
        client: (spec) => {
          const member = joinMemoryCluster(name, { ...spec, tasks, timeouts: { heartbeatTimeoutMs, ...spec.timeouts } }, systemClock);
          members.push(member);
          return member.client;
        },
      };
    },
    dispose: async () => {
      await Promise.all(members.map((m) => m.client.close().catch(() => undefined)));
      for (const m of members) m.leave();
    },
  };
});
