import { EmbeddedCoordinationClient } from "../../../src/cluster/coordination/index.js";
import { describeConformance } from "./conformance.js";
import { startServiceThread, type ServiceThread } from "./serviceThread.js";

const heartbeatTimeoutMs = 2_000; // as on etcd: enough margin for a loaded 2-core CI machine

// The service runs on its own thread (as in the chief's process), so blocking this thread
// blocks the tasks but not the service.
describeConformance("embedded", () => {
  const threads: ServiceThread[] = [];
  return {
    heartbeatTimeoutMs,
    cluster: async (tasks) => {
      const thread = startServiceThread(heartbeatTimeoutMs);
      threads.push(thread);
      return {
        client: (spec) =>
          new EmbeddedCoordinationClient(thread.transport, {
            ...spec,
            tasks,
            timeouts: { heartbeatTimeoutMs, ...spec.timeouts },
          }),
      };
    },
    dispose: async () => {
      await Promise.all(threads.map((t) => t.stop()));
    },
  };
});
