/**
 * The configuration file as the pods get it (the ConfigMap's text): the user's file with the
 * settings the manifest decides written into it: the `cluster:` section's `bindAddress` (every
 * interface, on the task's port), the token file and TLS files where the Secrets are mounted,
 * the etcd backend, and `preemption.platform: kubernetes` (SIGTERM's deadline from the pod's
 * grace period) unless the file names a platform. A YAML file keeps its comments and order; a
 * JSON file stays JSON (its extension decides how `run` reads it).
 *
 * @module
 */

import { parseDocument } from "yaml";

import type { ClusterConfig } from "../cluster/ClusterConfig.js";
import { TLS_DIR, TOKEN_FILE } from "./KubernetesManifest.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What the manifest's flags put into the pods' cluster settings. */
export interface PodClusterFlags {
  readonly etcdEndpoints?: readonly string[] | undefined;
  readonly tokenSecret?: string | undefined;
  readonly tlsSecret?: string | undefined;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** The `cluster:` keys the flags set (merged over the file's own section, which they override). */
export const podClusterSettings = (flags: PodClusterFlags): ClusterConfig => ({
  bindAddress: "0.0.0.0",
  ...(flags.etcdEndpoints === undefined ? {} : { backend: "etcd" as const, etcdEndpoints: [...flags.etcdEndpoints] }),
  ...(flags.tokenSecret === undefined ? {} : { tokenFile: TOKEN_FILE }),
  ...(flags.tlsSecret === undefined ? {} : { tls: { certFile: `${TLS_DIR}/tls.crt`, keyFile: `${TLS_DIR}/tls.key`, caFile: `${TLS_DIR}/ca.crt` } }),
});

/**
 * `text` (the configuration file, `json` or `yaml`) with `settings` written into its `cluster:`
 * section and `preemption.platform: kubernetes` when it names no platform.
 */
export const podConfigText = (text: string, format: "json" | "yaml", settings: ClusterConfig): string => {
  if (format === "json") {
    const json = JSON.parse(text) as Record<string, unknown>;
    const cluster = { ...((json["cluster"] as Record<string, unknown> | undefined) ?? {}), ...settings };
    const preemption = (json["preemption"] as Record<string, unknown> | undefined) ?? {};
    const out = { ...json, cluster, preemption: { ...preemption, platform: preemption["platform"] ?? "kubernetes" } };
    return `${JSON.stringify(out, null, 2)}\n`;
  }
  const doc = parseDocument(text);
  for (const [key, value] of Object.entries(settings)) doc.setIn(["cluster", key], doc.createNode(value));
  if (!doc.hasIn(["preemption", "platform"])) doc.setIn(["preemption", "platform"], "kubernetes");
  return doc.toString({ lineWidth: 0 });
};
