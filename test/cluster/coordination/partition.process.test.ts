/**
 * Network partitions of the embedded coordination service across real processes: a chief and
 * two workers, worker 1 reaching the chief only through a TCP proxy of ours (test/util/TcpProxy.ts).
 * A cut-off worker must have the outcome of a killed one: every other task raises
 * UnavailableError naming it, and nobody hangs. The cut-off worker learns it was declared failed
 * when the path heals (the chief's answer to its waiting heartbeats), or, if it never heals, from
 * its own call deadline, naming the unreachable chief.
 */

import { afterEach, describe, expect, it } from "vitest";
import { TcpProxy } from "../../util/TcpProxy.js";
import { EtcdProcess, etcdBinary } from "./etcdHarness.js";
import { expectDeclaredFailed, failBound, start, startBound, type Task, worker1 } from "./taskProcesses.js";

let proxy: TcpProxy | undefined;

afterEach(async () => {
  await proxy?.stop();
  proxy = undefined;
});

/** A chief and two workers, worker 1 through a proxy to the chief; all connected. */
const startPartitionable = async (worker1Args: Record<string, unknown> = {}): Promise<[Task, Task, Task, TcpProxy, string]> => {
  const c = start({ role: "chief", index: 0, scenario: "block" });
  const target = String((await c.next("serving", startBound)).target);
  const { hostname, port } = new URL(target.replace(/^grpc:/, "http:"));
  proxy = await TcpProxy.start({ host: hostname, port: Number(port) });
  const proxied = `grpc://127.0.0.1:${proxy.port}`;
  const w0 = start({ role: "worker", index: 0, target, scenario: "block" });
  const w1 = start({ role: "worker", index: 1, target: proxied, scenario: "block", ...worker1Args });
  await Promise.all([c, w0, w1].map((t) => t.next("connected", startBound)));
  return [c, w0, w1, proxy, proxied];
};

describe("a network partition of the embedded coordination service (userspace proxy)", () => {
  it("blackhole: the others name the cut-off worker; after heal it is told it was declared failed", async () => {
    // Its own calls' deadline is far away, so what it learns comes from the chief after heal.
    const [c, w0, w1, p] = await startPartitionable({ callTimeoutMs: 600_000 });
    p.blackhole();
    await expectDeclaredFailed([c, w0], worker1);
    p.heal();
    const told = await w1.next("error", failBound);
    expect(told.name).toBe("UnavailableError");
    expect(told.message).toContain(worker1);
    expect(told.message).toContain("declared failed");
  });

  it("blackhole that never heals: the cut-off worker's own call deadline names the chief it cannot reach", async () => {
    const callTimeoutMs = 8_000;
    const [c, w0, w1, p, proxied] = await startPartitionable({ callTimeoutMs });
    p.blackhole();
    await expectDeclaredFailed([c, w0], worker1);
    const own = await w1.next("error", 3 * (callTimeoutMs + 1_000));
    expect(["UnavailableError", "DeadlineExceededError"]).toContain(own.name);
    expect(own.message).toContain(proxied);
  });

  it("drop (connections reset): the same outcome for the others; the cut-off worker fails at once, naming the chief", async () => {
    const [c, w0, w1, p, proxied] = await startPartitionable();
    p.drop();
    const own = await w1.next("error", failBound);
    expect(own.name).toBe("UnavailableError");
    expect(own.message).toContain(proxied);
    await expectDeclaredFailed([c, w0], worker1);
  });
});

describe.skipIf(etcdBinary === undefined)("a network partition on the etcd backend (proxy in front of etcd for one worker)", () => {
  let etcd: EtcdProcess | undefined;

  afterEach(async () => {
    await etcd?.stop();
    etcd = undefined;
  });

  it("blackhole: the others name the cut-off worker; it learns from its own heartbeat deadline that etcd is unreachable", async () => {
    etcd = await EtcdProcess.start();
    const { hostname, port } = new URL(etcd.endpoint);
    proxy = await TcpProxy.start({ host: hostname, port: Number(port) });
    const prefix = "partition/";
    const c = start({ role: "chief", index: 0, scenario: "block", etcdHosts: [etcd.endpoint], prefix });
    const w0 = start({ role: "worker", index: 0, scenario: "block", etcdHosts: [etcd.endpoint], prefix });
    const w1 = start({ role: "worker", index: 1, scenario: "block", etcdHosts: [`http://127.0.0.1:${proxy.port}`], prefix });
    await Promise.all([c, w0, w1].map((t) => t.next("connected", startBound)));
    proxy.blackhole();
    await expectDeclaredFailed([c, w0], worker1);
    const own = await w1.next("error", failBound);
    expect(own.name).toBe("UnavailableError");
    expect(own.message).toContain(`127.0.0.1:${proxy.port}`);
  });
});
