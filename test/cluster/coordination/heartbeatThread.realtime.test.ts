import { MessageChannel } from "node:worker_threads";
import { describe, expect, it } from "vitest";
import {
  EmbeddedCoordinationClient,
  EmbeddedCoordinationService,
  inProcessTransport,
} from "../../../src/cluster/coordination/index.js";
import { ErrorCode, UnavailableError } from "../../../src/errors.js";
import { chief, connectAll, tasks, untilRejected, worker1 } from "./conformance.js";
import { startServiceThread } from "./serviceThread.js";

// Real time (a `.realtime` test, run by the integration project): a service on a worker thread,
// heartbeat threads, and a heartbeat timeout that must really pass.
const heartbeatTimeoutMs = 1_000;

// The control of the conformance test "heartbeats run off the main thread": the same block
// with heartbeats on the main thread gets the tasks declared failed, so that test can fail.
describe("heartbeats on the main thread (the control)", () => {
  it("a task blocked synchronously for 3 heartbeat intervals with inline heartbeats is declared failed", async () => {
    const thread = startServiceThread(heartbeatTimeoutMs);
    const cluster = {
      client: (spec: { task: string; isChief: boolean }) =>
        new EmbeddedCoordinationClient(thread.transport, {
          ...spec,
          tasks,
          heartbeats: "inline",
          timeouts: { heartbeatTimeoutMs },
        }),
    };
    const clients = await connectAll(cluster);
    try {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 3 * (heartbeatTimeoutMs / 2));
      const e = await untilRejected(() => clients[1]!.tryGet("x"), 3 * (heartbeatTimeoutMs + 1000), "failure detection");
      expect(e).toBeInstanceOf(UnavailableError);
      expect(e.message).toContain(worker1);
    } finally {
      await Promise.all(clients.map((c) => c.close()));
      await thread.stop();
    }
  });
});

describe("the heartbeat thread, started before the task registers", () => {
  it("an error of its path before registration (a channel that could not start) is raised by the task's first call after connect()", async () => {
    const service = new EmbeddedCoordinationService();
    const pair = [chief, worker1];
    const { port1, port2 } = new MessageChannel();
    port1.postMessage({ id: -1, status: { code: ErrorCode.UNAVAILABLE, message: "the heartbeat channel could not start: no route" } });
    const broken = { ...inProcessTransport(service), openPort: () => Promise.resolve(port2) };
    const c = new EmbeddedCoordinationClient(inProcessTransport(service), { task: chief, tasks: pair, isChief: true, heartbeats: "inline" });
    const w = new EmbeddedCoordinationClient(broken, { task: worker1, tasks: pair, isChief: false });
    try {
      await Promise.all([c.connect(), w.connect()]);
      const e = await untilRejected(() => w.tryGet("k"), 10_000, "the thread's error");
      expect(e).toBeInstanceOf(UnavailableError);
      expect(e.message).toContain("could not start: no route");
    } finally {
      await Promise.all([w.close(), c.close()]);
      port1.close();
      service.close();
    }
  });
});
