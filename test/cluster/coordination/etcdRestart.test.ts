import { describe, expect, it } from "vitest";
import { type CoordinationClient, EtcdCoordinationClient } from "../../../src/cluster/coordination/index.js";
import { UnavailableError } from "../../../src/errors.js";
import { chief, connectAll, tasks, untilRejected } from "./conformance.js";
import { etcdBinary, etcdForFile } from "./etcdHarness.js";

const heartbeatTimeoutMs = 5_000;
const etcd = etcdForFile();
let n = 0;

const cluster = () => {
  const prefix = `restart-${process.pid}-${n++}/`;
  return {
    client: (spec: { task: string; isChief: boolean }) =>
      new EtcdCoordinationClient({
        ...spec,
        tasks,
        hosts: [etcd().endpoint],
        prefix,
        timeouts: { heartbeatTimeoutMs },
      }),
  };
};

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe.skipIf(etcdBinary === undefined)("etcd backend: etcd restarts", () => {
  it("etcd back within the heartbeat timeout with the same data dir: nobody is declared failed", async () => {
    const clients = await connectAll(cluster());
    const [c, w1] = clients as [CoordinationClient, CoordinationClient];
    try {
      await c.insert("before", "1");
      await etcd().restart();
      await sleep(heartbeatTimeoutMs + 1000);
      for (const client of clients) expect(await client.tryGet("before")).toBe("1");
      await w1.insert("after", "2");
      expect(await c.get("after", { timeoutMs: 5_000 })).toBe("2");
    } finally {
      await Promise.all(clients.map((x) => x.close()));
    }
  });

  it("etcd gone for longer than the heartbeat timeout: every task raises UnavailableError naming etcd", async () => {
    const clients = await connectAll(cluster());
    try {
      await etcd().pause();
      for (const client of clients) {
        const e = await untilRejected(
          () => client.tryGet("x"),
          3 * (heartbeatTimeoutMs + 1000),
          `${client.task} noticing etcd is gone`,
        );
        expect(e).toBeInstanceOf(UnavailableError);
        expect(e.message).toContain("etcd");
      }
      expect(clients[0]?.task).toBe(chief);
    } finally {
      await etcd().resume();
      await Promise.all(clients.map((x) => x.close()));
    }
  });
});
