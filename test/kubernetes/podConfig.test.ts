import { describe, expect, it } from "vitest";
import { parse } from "yaml";

import { podClusterSettings, podConfigText } from "../../src/kubernetes/podConfig.js";

describe("the configuration as the pods get it", () => {
  const yaml = ["# the job", "module: ./job.ts   # trains", "cluster:", "  tokenFile: ./local-token", "  timeouts: { heartbeatTimeoutSecs: 4 }", "preemption:", "  platform: gce", ""].join("\n");

  it("YAML: comments kept, the flags' settings override the file's, a named platform kept", () => {
    const text = podConfigText(yaml, "yaml", podClusterSettings({ tokenSecret: "tok", etcdEndpoints: ["http://etcd:2379"] }));
    expect(text).toContain("# the job");
    expect(text).toContain("# trains");
    expect(parse(text)).toEqual({
      module: "./job.ts",
      cluster: { tokenFile: "/etc/monitored-session/token/token", timeouts: { heartbeatTimeoutSecs: 4 }, bindAddress: "0.0.0.0", backend: "etcd", etcdEndpoints: ["http://etcd:2379"] },
      preemption: { platform: "gce" },
    });
  });

  it("no platform named: kubernetes (SIGTERM's deadline from TERMINATION_GRACE_PERIOD_SECONDS)", () => {
    expect(parse(podConfigText("module: ./job.ts\n", "yaml", podClusterSettings({})))).toEqual({ module: "./job.ts", cluster: { bindAddress: "0.0.0.0" }, preemption: { platform: "kubernetes" } });
    expect(JSON.parse(podConfigText('{"module":"./job.ts"}', "json", podClusterSettings({ tlsSecret: "tls" })))).toEqual({
      module: "./job.ts",
      cluster: { bindAddress: "0.0.0.0", tls: { certFile: "/etc/monitored-session/tls/tls.crt", keyFile: "/etc/monitored-session/tls/tls.key", caFile: "/etc/monitored-session/tls/ca.crt" } },
      preemption: { platform: "kubernetes" },
    });
  });
});
