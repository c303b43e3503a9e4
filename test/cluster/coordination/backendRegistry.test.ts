/**
 * The coordination backend registry: a backend is a registration (its name, its settings in the
 * `cluster:` section and their rules, its heartbeat floor, its connection), and the section's
 * codec asks the registry. A plugin's backend registered here reaches the codec like a built-in.
 */

import { isLeft } from "fp-ts/lib/Either.js";
import * as t from "io-ts";
import { describe, expect, it } from "vitest";
import { ClusterConfigCodec, ClusterConfigReference } from "../../../src/cluster/ClusterConfig.js";
import {
  backendSettings,
  type CoordinationBackendDefinition,
  coordinationBackend,
  coordinationBackendNames,
  coordinationBackends,
  registerCoordinationBackend,
  RESERVED_SECTION_KEYS,
  servedByChief,
} from "../../../src/cluster/coordination/backends.js";
import { decode, formatIssue, optional } from "../../../src/codec.js";
import { InvalidArgumentError } from "../../../src/errors.js";

const problems = (section: unknown): readonly string[] => {
  const r = decode(ClusterConfigCodec, section);
  return isLeft(r) ? r.left.map(formatIssue) : [];
};

const toy: CoordinationBackendDefinition = {
  name: "toy",
  doc: "in a toy store",
  settings: { toyUrl: optional(t.string, "The toy store (backend: toy only).") },
  heartbeat: { minHeartbeatTimeoutMs: 5_000, why: "toys are slow" },
  servedByChief: false,
  check: (section) => (section["toyUrl"] === undefined ? [{ key: "toyUrl", message: "backend toy needs toyUrl" }] : []),
  connect: () => Promise.reject(new Error("not in this test")),
};

describe("the coordination backend registry", () => {
  it("has the built-in backends, embedded first (the default); the embedded service is the chief's, etcd's and memory's are not", () => {
    expect(coordinationBackendNames().slice(0, 3)).toEqual(["embedded", "etcd", "memory"]);
    expect(coordinationBackend().name).toBe("embedded");
    expect([servedByChief("embedded"), servedByChief("etcd"), servedByChief("memory"), servedByChief("nosuch")]).toEqual([true, false, false, false]);
  });

  it("an unknown name is one InvalidArgumentError naming the registered ones, with the likely one for a typo", () => {
    expect(() => coordinationBackend("etdc")).toThrow(new InvalidArgumentError('unknown coordination backend "etdc" (did you mean etcd?); the registered ones are embedded, etcd, memory'));
  });

  it("refuses a bad name, a name taken, and a setting another backend owns", () => {
    expect(() => registerCoordinationBackend({ ...toy, name: "Toy Store" })).toThrow(/name "Toy Store" must be 1-32 lowercase letters/);
    expect(() => registerCoordinationBackend({ ...toy, name: "etcd" })).toThrow("registerCoordinationBackend: a backend named etcd is registered already; choose another name");
    expect(() => registerCoordinationBackend({ ...toy, name: "toy2", settings: { etcdPrefix: optional(t.string, "x") } })).toThrow(
      "registerCoordinationBackend: setting etcdPrefix of backend toy2 is backend etcd's already; prefix it with the backend's name",
    );
    expect(() => registerCoordinationBackend({ ...toy, name: "toy3", settings: { tls: optional(t.string, "x") } })).toThrow(
      "registerCoordinationBackend: setting tls of backend toy3 is a key of the cluster: section itself; prefix it with the backend's name",
    );
    expect(() => registerCoordinationBackend({ ...toy, name: "toy4", settings: { jobs: optional(t.string, "x") } })).toThrow(/setting jobs of backend toy4 is a key of the cluster: section itself/);
    expect(coordinationBackendNames()).not.toContain("toy2");
    expect(coordinationBackendNames()).not.toContain("toy3");
  });

  it("every key of the section that no backend declared is reserved (a backend cannot take it over)", () => {
    const settings = new Set(coordinationBackends().flatMap((b) => Object.keys(b.settings ?? {})));
    const own = Object.keys(ClusterConfigReference.fields).filter((k) => !settings.has(k));
    expect(own.length).toBeGreaterThan(5);
    for (const key of own) expect(RESERVED_SECTION_KEYS).toContain(key);
  });

  it("a backend's settings belong to it: another backend's section that gives one names the backend to set", () => {
    expect(problems({ etcdEndpoints: ["http://127.0.0.1:2379"] })).toEqual([
      "etcdEndpoints: is only used with backend: etcd (the backend is embedded); remove it or set backend: etcd",
    ]);
    expect(problems({ backend: "memory", etcdPrefix: "jobs/a/" })).toEqual(["etcdPrefix: is only used with backend: etcd (the backend is memory); remove it or set backend: etcd"]);
    expect(problems({ backend: "etcd", memoryCluster: "a" })).toEqual([
      "memoryCluster: is only used with backend: memory (the backend is etcd); remove it or set backend: memory",
      "etcdEndpoints: backend etcd needs at least one endpoint (etcdEndpoints: [http://host:2379])",
    ]);
    expect(problems({ backend: "memory", memoryCluster: "a" })).toEqual([]);
    expect(problems({ backend: "etcd", etcdEndpoints: ["http://127.0.0.1:2379"], timeouts: { heartbeatTimeoutSecs: 1 } })).toEqual([
      "timeouts.heartbeatTimeoutSecs: 1 is below the etcd backend's minimum of 2 (etcd leases are whole seconds); set 2 or more",
    ]);
  });

  it("a plugin's backend, once registered, is a backend of the section like a built-in: its name, its settings, its rules and its heartbeat floor", () => {
    const before = problems({ backend: "toy", toyUrl: "x" });
    expect(before).toHaveLength(2);
    expect(before[0]).toMatch(/^toyUrl: unknown field "toyUrl"; ClusterConfig accepts backend, .*, etcdEndpoints, etcdPrefix, memoryCluster$/);
    expect(before[1]).toBe('backend: expected "embedded", "etcd" or "memory", got "toy"');
    registerCoordinationBackend(toy);
    expect(coordinationBackend("toy")).toBe(toy);
    expect(problems({ backend: "toy", toyUrl: "x" })).toEqual([]);
    expect(problems({ backend: "toy" })).toEqual(["toyUrl: backend toy needs toyUrl"]);
    expect(problems({ backend: "toy", toyUrl: "x", timeouts: { heartbeatTimeoutSecs: 4 } })).toEqual([
      "timeouts.heartbeatTimeoutSecs: 4 is below the toy backend's minimum of 5 (toys are slow); set 5 or more",
    ]);
    expect(problems({ toyUrl: "x" })).toEqual(["toyUrl: is only used with backend: toy (the backend is embedded); remove it or set backend: toy"]);
    expect(problems({ backend: "zookeeper" })).toEqual(['backend: expected "embedded", "etcd", "memory" or "toy", got "zookeeper"']);
  });

  it("backendSettings reads a backend's own settings and checks each with its codec", () => {
    expect(backendSettings(coordinationBackend("etcd"), { backend: "etcd", etcdPrefix: "jobs/a/", tokenFile: "t" })).toEqual({ etcdPrefix: "jobs/a/" });
    expect(() => backendSettings(coordinationBackend("etcd"), { etcdPrefix: "no slash" })).toThrow(InvalidArgumentError);
    expect(() => backendSettings(coordinationBackend("etcd"), { etcdPrefix: "no slash" })).toThrow(/^cluster\.etcdPrefix: expected an etcd key prefix ending with "\/"/);
  });
});
