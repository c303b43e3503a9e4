/**
 * The cluster settings a task reads from its environment: the `cluster:` section of a
 * configuration (backend, etcd endpoints, token file, TLS, bind address, timeouts) as JSON in
 * {@link CLUSTER_SETTINGS_ENV}, beside TF_CONFIG. `monitored-session launch -- <command>` sets it
 * for every task it starts, so that a program of the user's own runs on either backend without a
 * configuration file; `startTask()` reads it when no settings are passed.
 *
 * @example
 * ```ts
 * import { clusterSettingsFromEnv } from "monitored-session/runtime";
 *
 * const settings = clusterSettingsFromEnv({
 *   MONITORED_SESSION_CLUSTER: JSON.stringify({ backend: "etcd", etcdEndpoints: ["http://127.0.0.1:2379"] }),
 * });
 * settings?.backend; // "etcd"
 * ```
 *
 * @module
 */

import * as E from "fp-ts/lib/Either.js";
import { pipe } from "fp-ts/lib/function.js";
import { isAbsolute, resolve } from "node:path";

import { ClusterConfigCodec, type ClusterConfig } from "../cluster/ClusterConfig.js";
import { decode, formatIssue } from "../codec.js";
import { ValueError } from "../errors.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The environment variable that carries the `cluster:` section as JSON. */
export const CLUSTER_SETTINGS_ENV = "MONITORED_SESSION_CLUSTER";

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * The `cluster:` section from {@link CLUSTER_SETTINGS_ENV}: `undefined` when it is unset or
 * blank. Relative file paths (token, TLS) are taken against `baseDir` (default the working
 * directory). @throws ValueError (one line, every problem with its path) when it is invalid.
 */
export const clusterSettingsFromEnv = (env: NodeJS.ProcessEnv = process.env, baseDir: string = process.cwd()): ClusterConfig | undefined => {
  const text = env[CLUSTER_SETTINGS_ENV];
  if (text === undefined || text.trim() === "") return undefined;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new ValueError(`invalid ${CLUSTER_SETTINGS_ENV}: not valid JSON (${(e as Error).message}); set it to the cluster: section as JSON, e.g. {"backend":"embedded"}`);
  }
  return withAbsolutePaths(checkedClusterSettings(json, CLUSTER_SETTINGS_ENV), baseDir);
};

/**
 * `section` checked as a `cluster:` section (each key's codec, the chosen backend's rules, no
 * other backend's settings), as a configuration file's is.
 *
 * @throws ValueError `invalid <what>: ` and every problem with its path, on one line.
 */
export const checkedClusterSettings = (section: unknown, what: string): ClusterConfig =>
  pipe(
    decode(ClusterConfigCodec, section),
    E.match(
      (issues) => {
        throw new ValueError(`invalid ${what}: ${issues.map(formatIssue).join("; ")}`);
      },
      (settings) => settings,
    ),
  );

/** The environment a task needs to read `settings` back (see {@link clusterSettingsFromEnv}). */
export const clusterSettingsEnv = (settings: ClusterConfig): Record<string, string> => ({ [CLUSTER_SETTINGS_ENV]: JSON.stringify(settings) });

/** The section with `tokenFile` and the TLS files relative to `baseDir`, as every path of a configuration is. */
export const withAbsolutePaths = (section: ClusterConfig, baseDir: string): ClusterConfig => {
  const abs = (p: string): string => (isAbsolute(p) ? p : resolve(baseDir, p));
  const { tokenFile, tls } = section;
  return {
    ...section,
    ...(tokenFile === undefined ? {} : { tokenFile: abs(tokenFile) }),
    ...(tls === undefined
      ? {}
      : { tls: { ...tls, certFile: abs(tls.certFile), keyFile: abs(tls.keyFile), ...(tls.caFile === undefined ? {} : { caFile: abs(tls.caFile) }) } }),
  };
};
