/**
 * The etcd key prefix of a cluster without `cluster.etcdPrefix`: one per cluster spec, so jobs
 * sharing an etcd keep apart and a restarted job finds its own keys.
 */
import { describe, expect, it } from "vitest";

import { ClusterSpec } from "../../src/cluster/ClusterSpec.js";
import { defaultEtcdPrefix } from "../../src/cluster/coordination/etcdBackend.js";

describe("defaultEtcdPrefix", () => {
  const a = { chief: ["10.0.0.1:2222"], worker: ["10.0.0.2:2222", "10.0.0.3:2222"] };

  it("is monitored-session/ and 16 hex digits, the same for the same jobs and addresses in any job order", () => {
    const prefix = defaultEtcdPrefix(new ClusterSpec(a));
    expect(prefix).toMatch(/^monitored-session\/[0-9a-f]{16}\/$/);
    expect(defaultEtcdPrefix(new ClusterSpec({ worker: a.worker, chief: a.chief }))).toBe(prefix);
  });

  it("differs when an address, a task's index or a job's name differs", () => {
    const prefix = defaultEtcdPrefix(new ClusterSpec(a));
    const others = [
      { ...a, worker: ["10.0.0.2:2222", "10.0.0.4:2222"] },
      { ...a, worker: ["10.0.0.3:2222", "10.0.0.2:2222"] },
      { chief: a.chief, ps: a.worker },
      { chief: a.chief },
    ];
    const prefixes = others.map((o) => defaultEtcdPrefix(new ClusterSpec(o)));
    expect(new Set([prefix, ...prefixes]).size).toBe(others.length + 1);
  });
});
