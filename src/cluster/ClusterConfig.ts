/**
 * The `cluster:` section of a training configuration: how the tasks of a cluster coordinate and
 * secure their calls (the backend, etcd's endpoints, the token file, TLS, the bind address and
 * the timeouts). It never describes the cluster itself: the jobs and addresses come from
 * TF_CONFIG only, so the same file runs on every task and a spec here is an error.
 *
 * @example
 * ```yaml
 * cluster:
 *   backend: etcd
 *   etcdEndpoints: ["http://10.0.0.5:2379"]
 *   tokenFile: /run/secrets/cluster-token
 *   timeouts:
 *     heartbeatTimeoutSecs: 10
 * ```
 *
 * @module
 */

import { isLeft } from "fp-ts/lib/Either.js";
import * as t from "io-ts";
import { NonEmptyString, optional, PositiveNumber, refined, required, struct, type StructOf } from "../codec.js";
import { parseAddress } from "./TfConfig.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The coordination timeouts, in seconds. Left out: the coordination service's defaults (docs/distributed.md). */
export const ClusterTimeouts = struct("ClusterTimeouts", "How long the cluster waits for its tasks.", {
  heartbeatIntervalSecs: optional(PositiveNumber, "How often a task proves it is alive.", "heartbeatTimeoutSecs / 2 (5)"),
  heartbeatTimeoutSecs: optional(PositiveNumber, "A task silent this long is declared failed (etcd: at least 2).", "10"),
  registrationTimeoutSecs: optional(PositiveNumber, "How long a task waits for the chief and for every task to register.", "3600"),
  barrierTimeoutSecs: optional(PositiveNumber, "A barrier's timeout when the call gives none.", "600"),
  getTimeoutSecs: optional(PositiveNumber, "A blocking get's timeout when the call gives none.", "3600"),
  shutdownTimeoutSecs: optional(PositiveNumber, "How long the shutdown barrier waits for the other tasks.", "10"),
  drainTimeoutSecs: optional(
    PositiveNumber,
    "How long a chief that hosts the coordination service (embedded backend) keeps serving it after it finished, until every other task has left.",
    "3600",
  ),
  serverStartTimeoutSecs: optional(PositiveNumber, "How long the task's server may take to bind its port.", "10"),
  serverStopGraceSecs: optional(PositiveNumber, "How long a stopping server lets calls in flight finish.", "5"),
});

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

/** A bind address: `host` or `host:port`. */
export const BindAddress = refined(
  "host or host:port",
  (u): u is string => typeof u === "string" && (parseAddress(u) !== undefined || /^(\[[^\]]+\]|[^:\s[\]]+)$/.test(u)),
);

/** An etcd key prefix: printable, no spaces, ending with `/`. */
const EtcdPrefix = refined(
  'an etcd key prefix ending with "/" (e.g. "jobs/mnist-1/"), printable, without spaces',
  (u): u is string => typeof u === "string" && /^[!-~]+\/$/.test(u),
);

/** TLS from PEM files. */
export const ClusterTls = struct("ClusterTls", "TLS for the cluster's servers and clients, from PEM files.", {
  certFile: required(NonEmptyString, "This task's certificate chain (PEM)."),
  keyFile: required(NonEmptyString, "The certificate's private key (PEM)."),
  caFile: optional(NonEmptyString, "The CA that signs every task's certificate; with it, TLS is mutual.", "no client certificates"),
});

const ETCD_MIN_HEARTBEAT_TIMEOUT_SECS = 2;

const ClusterSectionStruct = struct(
  "ClusterConfig",
  "How the tasks of a cluster coordinate and secure their calls. The cluster itself (jobs and addresses) comes from TF_CONFIG.",
  {
    backend: optional(t.keyof({ embedded: null, etcd: null }, '"embedded" or "etcd"'), "Where the coordination state lives: in the chief's server, or in etcd.", "embedded"),
    etcdEndpoints: optional(t.array(EtcdEndpoint, "a list of etcd URLs"), "The etcd cluster's client URLs (backend: etcd only)."),
    etcdPrefix: optional(
      EtcdPrefix,
      "The key prefix of this job's coordination state in etcd (backend: etcd only): one per job sharing an etcd, the same for every task and across restarts.",
      "monitored-session/<a hash of TF_CONFIG's cluster>/",
    ),
    tokenFile: optional(NonEmptyString, "A file whose first line is the shared cluster token every call must carry.", "MONITORED_SESSION_CLUSTER_TOKEN, else no token"),
    tls: optional(ClusterTls, "TLS from PEM files.", "plaintext"),
    bindAddress: optional(BindAddress, "Where this task's server listens, when not its TF_CONFIG address (NAT, Kubernetes).", "the task's address"),
    timeouts: optional(ClusterTimeouts, "The coordination timeouts.", "see the table in docs/distributed.md"),
    dataParallel: optional(
      t.boolean,
      "Synchronous data parallelism: every training task (chief rank 0, workers 1..N in index order) joins one collective, which the job receives (`JobContext.replica`) to average its gradients and shard its data; false trains independent replicas that only start from the chief's values.",
      "true",
    ),
    collectiveTimeoutSecs: optional(PositiveNumber, "The deadline of every collective (all-reduce, broadcast, barrier); at expiry every rank raises DeadlineExceededError naming the slowest rank.", "60"),
  },
  (v) => {
    const out: { key?: string; message: string }[] = [];
    const etcd = v.backend === "etcd";
    const endpoints = v.etcdEndpoints as unknown;
    if (etcd && (endpoints === undefined || (Array.isArray(endpoints) && endpoints.length === 0))) {
      out.push({ key: "etcdEndpoints", message: "backend etcd needs at least one endpoint (etcdEndpoints: [http://host:2379])" });
    }
    if (!etcd && endpoints !== undefined) {
      out.push({ key: "etcdEndpoints", message: `is only used with backend: etcd (the backend is ${v.backend ?? "embedded"}); remove it or set backend: etcd` });
    }
    if (!etcd && v.etcdPrefix !== undefined) {
      out.push({ key: "etcdPrefix", message: `is only used with backend: etcd (the backend is ${v.backend ?? "embedded"}); remove it or set backend: etcd` });
    }
    const timeouts = v.timeouts as Record<string, unknown> | undefined;
    const timeout = timeouts?.["heartbeatTimeoutSecs"];
    const interval = timeouts?.["heartbeatIntervalSecs"];
    if (typeof timeout === "number" && typeof interval === "number" && interval >= timeout) {
      out.push({ key: "timeouts.heartbeatIntervalSecs", message: `${interval} must be less than heartbeatTimeoutSecs (${timeout}); use at most half of it` });
    }
    if (etcd && typeof timeout === "number" && timeout < ETCD_MIN_HEARTBEAT_TIMEOUT_SECS) {
      out.push({
        key: "timeouts.heartbeatTimeoutSecs",
        message: `${timeout} is below the etcd backend's minimum of ${ETCD_MIN_HEARTBEAT_TIMEOUT_SECS} (etcd leases are whole seconds); set 2 or more`,
      });
    }
    return out;
  },
);

/** The decoded `cluster:` section. */
export type ClusterConfig = StructOf<typeof ClusterSectionStruct.fields>;

/** Keys that would describe the cluster itself; they belong in TF_CONFIG. */
const SPEC_KEYS = ["cluster", "clusterSpec", "spec", "jobs", "task", "tfConfig", "TF_CONFIG"] as const;

/**
 * The `cluster:` section's codec: {@link ClusterSectionStruct}'s fields and rules, and a cluster
 * spec given here (`cluster`, `jobs`, `task`, ...) is an error that says to use TF_CONFIG.
 */
export const ClusterConfigCodec = new t.Type<ClusterConfig, ClusterConfig, unknown>(
  "ClusterConfig",
  (u): u is ClusterConfig => ClusterSectionStruct.is(u),
  (u, c) => {
    if (typeof u !== "object" || u === null || Array.isArray(u)) return ClusterSectionStruct.validate(u, c);
    const given = SPEC_KEYS.filter((k) => Object.hasOwn(u, k));
    const rest = Object.fromEntries(Object.entries(u).filter(([k]) => !given.includes(k as (typeof SPEC_KEYS)[number])));
    const specErrors: t.ValidationError[] = given.map((key) => ({
      value: (u as Record<string, unknown>)[key],
      context: [...c, { key, type: t.never, actual: (u as Record<string, unknown>)[key] }],
      message: "the cluster spec comes from TF_CONFIG only; remove it here and set TF_CONFIG on each task",
    }));
    const r = ClusterSectionStruct.validate(rest, c);
    if (specErrors.length === 0) return r;
    return t.failures([...specErrors, ...(isLeft(r) ? r.left : [])]);
  },
  (a) => a,
);

/** The section's documented struct (fields and defaults), for the configuration reference. */
export const ClusterConfigReference = ClusterSectionStruct;
