/**
 * The etcd heartbeat thread against a real etcd: when its lease is gone (it expired while the
 * task was frozen, or was revoked), the thread's own error says the task was declared failed,
 * naming it, in the words the task's peers use. After a SIGCONT the thread may tell the task
 * before the peers' verdict reaches it through its watch.
 */

import { Etcd3 } from "etcd3";
import { describe, expect, it } from "vitest";
import { HeartbeatWorker } from "../../../src/cluster/coordination/HeartbeatWorker.js";
import { type OpError, UnavailableError } from "../../../src/errors.js";
import { within, worker1 } from "./conformance.js";
import { etcdBinary, etcdForFile } from "./etcdHarness.js";

const etcd = etcdForFile();
const timeoutMs = 2_000;

describe.skipIf(etcdBinary === undefined)("the etcd heartbeat thread", () => {
  it("its lease revoked: the thread's error names the task as declared failed", async () => {
    let onError: (e: OpError) => void = () => undefined;
    const failed = new Promise<OpError>((resolve) => (onError = resolve));
    const thread = await HeartbeatWorker.etcd(
      { task: worker1, hosts: [etcd().endpoint], ttlSecs: 2, incarnation: "1", intervalMs: timeoutMs / 4, timeoutMs },
      (e) => onError(e),
    );
    const admin = new Etcd3({ hosts: [etcd().endpoint] });
    try {
      // This file's etcd holds no lease but the thread's.
      const { leases } = await admin.leaseClient.leaseLeases();
      expect(leases).toHaveLength(1);
      await admin.leaseClient.leaseRevoke({ ID: (leases[0] as { ID: string }).ID });
      const e = await within(failed, 3 * timeoutMs, "the thread noticing its lease is gone");
      expect(e).toBeInstanceOf(UnavailableError);
      expect(e.message).toContain(`task ${worker1} declared failed`);
    } finally {
      admin.close();
      await thread.stop();
    }
  });
});
