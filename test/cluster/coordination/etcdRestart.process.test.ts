import { describe, expect, it } from "vitest";
import { type CoordinationClient, EtcdCoordinationClient } from "../../../src/cluster/coordination/index.js";
import { UnavailableError } from "../../../src/errors.js";
import { chief, connectAll, tasks, untilRejected, within } from "./conformance.js";
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

  it("etcd SIGKILLed: calls made while it is down wait for it, and complete once it is back within the heartbeat timeout", async () => {
    const clients = await connectAll(cluster());
    const [c, w1] = clients as [CoordinationClient, CoordinationClient];
    try {
      await etcd().kill();
      const during = c.insert("during", "1");
      const read = w1.get("during", { timeoutMs: 5_000 });
      // Settled below; not unhandled meanwhile.
      for (const p of [during, read]) p.catch(() => undefined);
      await etcd().resume();
      await within(during, 3 * heartbeatTimeoutMs, "the insert made while etcd was down");
      expect(await within(read, 3 * heartbeatTimeoutMs, "the get made while etcd was down")).toBe("1");
      for (const client of clients) expect(await client.tryGet("during")).toBe("1");
    } finally {
      await Promise.all(clients.map((x) => x.close()));
    }
  });

  it("etcd gone for longer than the heartbeat timeout: every task raises UnavailableError naming etcd's endpoint and the fix", async () => {
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
        expect(e.message).toContain(`etcd (${etcd().endpoint}) unreachable`);
        expect(e.message).toContain("start etcd again");
      }
      expect(clients[0]?.task).toBe(chief);
    } finally {
      await etcd().resume();
      await Promise.all(clients.map((x) => x.close()));
    }
  });
});
