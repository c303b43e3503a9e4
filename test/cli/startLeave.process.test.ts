/**
 * `run` (the bundled job, data-parallel) started by hand with TF_CONFIG, on both coordination
 * backends (etcd skipped with a message without its binary): a worker that gets SIGTERM while it
 * joins the replica group, every task registered, leaves with 42, and the chief hears of it and
 * leaves with 42 too, naming it, rather than wait for the heartbeat timeout to declare the worker
 * failed and then fail with 1. A third task is a bare coordination client that registers and
 * never joins, so that both `run` tasks are in the join when the notice comes, whatever the
 * machine's load. Causes and outcomes only.
 */
import type { ChildProcess } from "node:child_process";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";

import { etcdBinary, EtcdProcess } from "../cluster/coordination/etcdHarness.js";
import { freePorts, startCli, type CliChild } from "../util/cliChild.js";
import { spawnBareWorker } from "../util/bareTask.js";
import { exampleTree } from "../util/exampleTree.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-start-leave-");

const children: ChildProcess[] = [];
const clis: CliChild[] = [];
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  for (const c of clis.splice(0)) if (c.process.exitCode === null && c.process.signalCode === null) c.process.kill("SIGKILL");
});

if (etcdBinary === undefined) console.warn("startLeave: no etcd binary (apt-get install etcd-server): the etcd half of this test is skipped");

let etcd: EtcdProcess | undefined;
const backends = [
  { name: "embedded", skip: false, etcd: false },
  { name: "etcd", skip: etcdBinary === undefined, etcd: true },
] as const;

for (const backend of backends) {
  describe.skipIf(backend.skip)(`run: a termination notice while a task joins its replica group (${backend.name} coordination)`, () => {
    beforeAll(async () => {
      if (backend.etcd) etcd = await EtcdProcess.start();
    }, 60_000);
    afterAll(async () => {
      if (backend.etcd) await etcd?.stop();
    });

    it("SIGTERM to a worker in the join: it exits 42, and the chief, hearing of it, exits 42 naming it (never 1 after the heartbeat timeout)", { timeout: 240_000 }, async () => {
      const root = tempDir();
      const prefix = `start-leave-${Math.random().toString(16).slice(2)}/`;
      const clusterSection = backend.etcd ? `cluster:\n  backend: etcd\n  etcdEndpoints: [${(etcd as EtcdProcess).endpoint}]\n  etcdPrefix: ${prefix}\n` : "";
      const yaml = exampleTree(root, (y) => y + clusterSection);
      const [chiefPort, workerPort, barePort] = await freePorts(3);
      const cluster = { chief: [`127.0.0.1:${chiefPort}`], worker: [`127.0.0.1:${workerPort}`, `127.0.0.1:${barePort}`] };
      const tfConfig = (type: string, index: number): string => JSON.stringify({ cluster, task: { type, index } });
      const chief = startCli(["run", yaml], { env: { TF_CONFIG: tfConfig("chief", 0) }, timeoutMs: 220_000 });
      const worker = startCli(["run", yaml], { env: { TF_CONFIG: tfConfig("worker", 0) }, timeoutMs: 220_000 });
      clis.push(chief, worker);
      // worker:1: registers, heartbeats, and never joins the replica group.
      const bare = spawnBareWorker(1, backend.etcd ? { etcdEndpoints: [(etcd as EtcdProcess).endpoint], etcdPrefix: prefix } : { chiefTarget: `grpc://127.0.0.1:${chiefPort}` });
      children.push(bare);
      await worker.waitFor("Every task of the cluster registered", 180_000);
      await chief.waitFor("Every task of the cluster registered", 180_000);
      expect(worker.output()).not.toContain("Joined the replica group");
      worker.process.kill("SIGTERM");
      const w = await worker.done;
      expect(w.code, worker.output()).toBe(42);
      expect(worker.output()).toContain("worker:0: termination notice (SIGTERM) while it joined the cluster: leaving the cluster and exiting with 42 without saving");
      // The chief had no notice of its own: it leaves on worker:0's.
      const c = await chief.done;
      expect(c.code, chief.output()).toBe(42);
      expect(chief.output()).toMatch(/chief:0: worker:0's termination notice \(SIGTERM\) while it joined the cluster: exiting with 42 without saving/);
      expect(chief.output()).not.toContain("Joined the replica group");
      expect(chief.output()).not.toContain("Training failed");
    });
  });
}
