/**
 * The `etcd` backend: the coordination state lives in an etcd cluster, under one key prefix per
 * job, so no task hosts it and a lost chief takes nothing with it. Its settings
 * (`etcdEndpoints`, `etcdPrefix`) and rules are declared here; the client
 * (EtcdCoordinationClient.ts, which loads etcd3) only when a task connects.
 *
 * @module
 */

import * as t from "io-ts";
import { optional, refined } from "../../codec.js";
import type { ClusterSpec } from "../ClusterSpec.js";
import { clusterFingerprint } from "./identity.js";
import { backendSettings, type CoordinationBackendDefinition } from "./backend.js";
import { ETCD_HEARTBEAT_FLOOR } from "./etcdLease.js";

export { ETCD_MIN_HEARTBEAT_TIMEOUT_MS } from "./etcdLease.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** An etcd endpoint: an `http://` or `https://` URL with a host. */
export const EtcdEndpoint = refined("an http:// or https:// URL (http://host:2379)", (u): u is string => {
  if (typeof u !== "string") return false;
  try {
    const url = new URL(u);
    return (url.protocol === "http:" || url.protocol === "https:") && url.hostname !== "";
  } catch {
    return false;
  }
});

/** An etcd key prefix: printable, no spaces, ending with `/`. */
const EtcdPrefix = refined(
  'an etcd key prefix ending with "/" (e.g. "jobs/mnist-1/"), printable, without spaces',
  (u): u is string => typeof u === "string" && /^[!-~]+\/$/.test(u),
);

/** The `cluster:` keys of the etcd backend. */
const etcdSettings = {
  etcdEndpoints: optional(t.array(EtcdEndpoint, "a list of etcd URLs"), "The etcd cluster's client URLs (backend: etcd only)."),
  etcdPrefix: optional(
    EtcdPrefix,
    "The key prefix of this job's coordination state in etcd (backend: etcd only): one per job sharing an etcd, the same for every task and across restarts.",
    "monitored-session/<a hash of TF_CONFIG's cluster>/",
  ),
};

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * The etcd key prefix of a cluster without `cluster.etcdPrefix`: `monitored-session/` and a hash
 * of its jobs and addresses. Two jobs on one etcd get their own keys; a task or a whole group
 * restarted with the same TF_CONFIG finds its job's generation counter again.
 */
export const defaultEtcdPrefix = (spec: ClusterSpec): string => `monitored-session/${clusterFingerprint(spec)}/`;

/** The etcd backend's registration. */
export const etcdBackend: CoordinationBackendDefinition = {
  name: "etcd",
  doc: "in an etcd cluster (etcdEndpoints), under one key prefix per job",
  settings: etcdSettings,
  heartbeat: ETCD_HEARTBEAT_FLOOR,
  servedByChief: false,
  check: (section) => {
    const endpoints = section["etcdEndpoints"];
    return endpoints === undefined || (Array.isArray(endpoints) && endpoints.length === 0)
      ? [{ key: "etcdEndpoints", message: "backend etcd needs at least one endpoint (etcdEndpoints: [http://host:2379])" }]
      : [];
  },
  connect: async (task) => {
    const [{ EtcdCoordinationClient }, { serveTask }] = await Promise.all([import("./EtcdCoordinationClient.js"), import("./backendSupport.js")]);
    const settings = backendSettings(etcdBackend, task.settings);
    const hosts = (settings["etcdEndpoints"] as readonly string[] | undefined) ?? [];
    const prefix = (settings["etcdPrefix"] as string | undefined) ?? defaultEtcdPrefix(task.spec);
    return serveTask(task, () => new EtcdCoordinationClient({ ...task.clientOptions, hosts: [...hosts], prefix }), `etcd at ${hosts.join(", ")}, keys under ${prefix}`);
  },
};
