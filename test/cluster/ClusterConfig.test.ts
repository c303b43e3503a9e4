import { isLeft, isRight } from "fp-ts/lib/Either.js";
import { describe, expect, it } from "vitest";
import { ClusterConfigCodec } from "../../src/cluster/ClusterConfig.js";
import { formatIssue, toIssues } from "../../src/codec.js";

const problems = (u: unknown): string[] => {
  const r = ClusterConfigCodec.decode(u);
  return isLeft(r) ? toIssues(r.left).map(formatIssue) : [];
};

describe("the cluster: configuration section", () => {
  it("accepts an empty section (embedded backend, defaults) and a full etcd one", () => {
    expect(isRight(ClusterConfigCodec.decode({}))).toBe(true);
    const full = {
      backend: "etcd",
      etcdEndpoints: ["http://10.0.0.5:2379", "https://etcd.example:2379"],
      tokenFile: "/run/secrets/token",
      tls: { certFile: "a.pem", keyFile: "a.key", caFile: "ca.pem" },
      bindAddress: "0.0.0.0",
      timeouts: { heartbeatTimeoutSecs: 4, heartbeatIntervalSecs: 1, barrierTimeoutSecs: 30, serverStopGraceSecs: 1 },
      collectiveTimeoutSecs: 120,
    };
    const r = ClusterConfigCodec.decode(full);
    expect(isRight(r) && r.right).toEqual(full);
  });

  it("a cluster spec here is an error pointing to TF_CONFIG (one problem per key, no 'unknown field')", () => {
    expect(problems({ cluster: { worker: ["h:1"] }, task: { type: "worker", index: 0 } })).toEqual([
      "cluster: the cluster spec comes from TF_CONFIG only; remove it here and set TF_CONFIG on each task",
      "task: the cluster spec comes from TF_CONFIG only; remove it here and set TF_CONFIG on each task",
    ]);
  });

  it("lists every problem with its path", () => {
    expect(
      problems({
        backend: "zookeeper",
        tokenFile: "",
        tls: { certFile: "a.pem" },
        bindAddress: "a:b:c",
        timeouts: { heartbeatTimeoutSecs: -1, heartbeatTimeotSecs: 3 },
      }),
    ).toEqual([
      'backend: expected "embedded", "etcd" or "memory", got "zookeeper"',
      'tokenFile: expected a non-empty string, got ""',
      "tls.keyFile: is required (a non-empty string)",
      'bindAddress: expected host or host:port, got "a:b:c"',
      'timeouts.heartbeatTimeotSecs: unknown field "heartbeatTimeotSecs" (did you mean "heartbeatTimeoutSecs"?); ClusterTimeouts accepts heartbeatIntervalSecs, heartbeatTimeoutSecs, registrationTimeoutSecs, barrierTimeoutSecs, getTimeoutSecs, shutdownTimeoutSecs, drainTimeoutSecs, serverStartTimeoutSecs, serverStopGraceSecs',
      "timeouts.heartbeatTimeoutSecs: expected a positive number, got -1",
    ]);
  });

  it("etcd rules: endpoints required with etcd and only with etcd; heartbeat timeout of at least 2 s; interval below timeout", () => {
    expect(problems({ backend: "etcd" })).toEqual(["etcdEndpoints: backend etcd needs at least one endpoint (etcdEndpoints: [http://host:2379])"]);
    expect(problems({ etcdEndpoints: ["http://h:2379"] })).toEqual([
      "etcdEndpoints: is only used with backend: etcd (the backend is embedded); remove it or set backend: etcd",
    ]);
    expect(problems({ etcdPrefix: "jobs/a/" })).toEqual(["etcdPrefix: is only used with backend: etcd (the backend is embedded); remove it or set backend: etcd"]);
    expect(problems({ backend: "etcd", etcdEndpoints: ["http://h:2379"], etcdPrefix: "jobs/a/" })).toEqual([]);
    for (const bad of ["jobs/a", "jobs /a/", ""]) {
      expect(problems({ backend: "etcd", etcdEndpoints: ["http://h:2379"], etcdPrefix: bad })).toEqual([
        `etcdPrefix: expected an etcd key prefix ending with "/" (e.g. "jobs/mnist-1/"), printable, without spaces, got ${JSON.stringify(bad)}`,
      ]);
    }
    expect(problems({ backend: "etcd", etcdEndpoints: ["h:2379"] })).toEqual([
      'etcdEndpoints[0]: expected an http:// or https:// URL (http://host:2379), got "h:2379"',
    ]);
    expect(problems({ backend: "etcd", etcdEndpoints: ["http://h:2379"], timeouts: { heartbeatTimeoutSecs: 1 } })).toEqual([
      "timeouts.heartbeatTimeoutSecs: 1 is below the etcd backend's minimum of 2 (etcd leases are whole seconds); set 2 or more",
    ]);
    expect(problems({ timeouts: { heartbeatTimeoutSecs: 1 } })).toEqual([]);
    expect(problems({ timeouts: { heartbeatTimeoutSecs: 4, heartbeatIntervalSecs: 4 } })).toEqual([
      "timeouts.heartbeatIntervalSecs: 4 must be less than heartbeatTimeoutSecs (4); use at most half of it",
    ]);
  });
});
