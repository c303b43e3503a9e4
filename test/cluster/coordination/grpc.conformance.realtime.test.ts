import { connectCoordinationService } from "../../../src/cluster/coordination/index.js";
import { describeConformance } from "./conformance.js";
import { startServerThread, type ServerThread } from "./serverThread.js";

const heartbeatTimeoutMs = 2_000; // as for the other backends: margin for a loaded 2-core machine

// The embedded service reached over gRPC on loopback: the chief's Server runs on its own thread
// (as in the chief's process) and every task is a gRPC client with its own heartbeat channel.
describeConformance("embedded over gRPC", () => {
  const threads: ServerThread[] = [];
  return {
    heartbeatTimeoutMs,
    cluster: async (tasks) => {
      const thread = await startServerThread(heartbeatTimeoutMs);
      threads.push(thread);
      return {
        client: (spec) =>
          connectCoordinationService(thread.target, { ...spec, tasks, timeouts: { heartbeatTimeoutMs, ...spec.timeouts } }),
      };
    },
    dispose: async () => {
      await Promise.all(threads.map((t) => t.stop()));
    },
  };
});
