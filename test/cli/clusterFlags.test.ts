/**
 * `launch`'s cluster flags are declared without loading the cluster's modules (start-up time),
 * so `--backend`'s help names the built-in backends in text: this keeps it true to the registry.
 */
import { describe, expect, it } from "vitest";

import { CLUSTER_FLAGS } from "../../src/cli/clusterFlags.js";
import { coordinationBackends } from "../../src/cluster/coordination/backends.js";

describe("CLUSTER_FLAGS", () => {
  it("--backend's help names every built-in backend and the default", () => {
    const help = CLUSTER_FLAGS.find((f) => f.name === "backend")?.help ?? "";
    for (const backend of coordinationBackends()) expect(help).toContain(backend.name);
    expect(help).toContain("embedded (the default");
  });

  it("every flag sets a distinct key of the cluster: section", () => {
    const keys = CLUSTER_FLAGS.map((f) => f.key);
    expect(new Set(keys).size).toBe(keys.length);
  });
});
