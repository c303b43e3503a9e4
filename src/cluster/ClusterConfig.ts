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
import { type Fields, NonEmptyString, optional, PositiveNumber, refined, required, struct, type StructOf, type StructType } from "../codec.js";
import { type CoordinationBackendDefinition, coordinationBackendNames, coordinationBackends, coordinationBackendsVersion, DEFAULT_COORDINATION_BACKEND, SPEC_KEYS } from "./coordination/backends.js";
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

/** A bind address: `host` or `host:port`. */
export const BindAddress = refined(
  "host or host:port",
  (u): u is string => typeof u === "string" && (parseAddress(u) !== undefined || /^(\[[^\]]+\]|[^:\s[\]]+)$/.test(u)),
);

/** TLS from PEM files. */
export const ClusterTls = struct("ClusterTls", "TLS for the cluster's servers and clients, from PEM files.", {
  certFile: required(NonEmptyString, "This task's certificate chain (PEM)."),
  keyFile: required(NonEmptyString, "The certificate's private key (PEM)."),
  caFile: optional(NonEmptyString, "The CA that signs every task's certificate; with it, TLS is mutual.", "no client certificates"),
});

/** The section's keys every backend reads (each backend adds its own: `settings` in its registration). */
const coreFields = {
  backend: optional(
    refined("the name of a registered coordination backend", (u): u is string => typeof u === "string" && coordinationBackendNames().includes(u)),
    "Where the coordination state lives: embedded (in the chief's server), etcd (in an etcd cluster), memory (in this process), or a backend a plugin registered (registerCoordinationBackend).",
    DEFAULT_COORDINATION_BACKEND,
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
};

/** The rules of a section: the backend is registered, other backends' settings are absent, the backend's own rules, the heartbeat. */
const sectionChecks = (v: Readonly<Record<string, unknown>>): readonly { key?: string; message: string }[] => {
  const out: { key?: string; message: string }[] = [];
  const name = typeof v["backend"] === "string" ? v["backend"] : DEFAULT_COORDINATION_BACKEND;
  // An unregistered name is the field's own problem (see `sectionStruct`).
  const backend: CoordinationBackendDefinition | undefined = coordinationBackends().find((b) => b.name === name);
  for (const other of coordinationBackends()) {
    if (other === backend) continue;
    for (const key of Object.keys(other.settings ?? {})) {
      if (v[key] !== undefined) out.push({ key, message: `is only used with backend: ${other.name} (the backend is ${name}); remove it or set backend: ${other.name}` });
    }
  }
  if (backend !== undefined) out.push(...(backend.check?.(v) ?? []));
  const timeouts = v["timeouts"] as Record<string, unknown> | undefined;
  const timeout = timeouts?.["heartbeatTimeoutSecs"];
  const interval = timeouts?.["heartbeatIntervalSecs"];
  if (typeof timeout === "number" && typeof interval === "number" && interval >= timeout) {
    out.push({ key: "timeouts.heartbeatIntervalSecs", message: `${interval} must be less than heartbeatTimeoutSecs (${timeout}); use at most half of it` });
  }
  const floor = backend?.heartbeat;
  if (floor !== undefined && typeof timeout === "number" && timeout * 1000 < floor.minHeartbeatTimeoutMs) {
    const min = floor.minHeartbeatTimeoutMs / 1000;
    out.push({ key: "timeouts.heartbeatTimeoutSecs", message: `${timeout} is below the ${name} backend's minimum of ${min} (${floor.why}); set ${min} or more` });
  }
  return out;
};

/** The section's struct for the backends registered now: the core keys and every backend's settings. */
const sectionStruct = (): StructType<Fields> => {
  const names = coordinationBackendNames();
  // The expectation names the backends registered now: `expected "embedded", "etcd" or "memory", got "zookeeper"`.
  const backend = { ...coreFields.backend, codec: refined(`${names.slice(0, -1).map((n) => JSON.stringify(n)).join(", ")}${names.length > 1 ? " or " : ""}${JSON.stringify(names.at(-1))}`, coreFields.backend.codec.is) };
  return struct(
    "ClusterConfig",
    "How the tasks of a cluster coordinate and secure their calls. The cluster itself (jobs and addresses) comes from TF_CONFIG.",
    { ...coreFields, backend, ...Object.assign({}, ...coordinationBackends().map((b) => b.settings ?? {})) } as Fields,
    (v) => sectionChecks(v as Readonly<Record<string, unknown>>),
  );
};

/** {@link sectionStruct}, rebuilt when a backend registers. */
let built: { readonly version: number; readonly struct: StructType<Fields> } | undefined;
const currentStruct = (): StructType<Fields> => {
  if (built?.version !== coordinationBackendsVersion()) built = { version: coordinationBackendsVersion(), struct: sectionStruct() };
  return built.struct;
};

/**
 * The decoded `cluster:` section: the keys every backend reads, typed, and the chosen backend's
 * own settings (e.g. `etcdEndpoints`), which only that backend reads (`backendSettings`).
 */
export type ClusterConfig = StructOf<typeof coreFields> & { readonly [backendSetting: string]: unknown };


/**
 * The `cluster:` section's codec: {@link ClusterSectionStruct}'s fields and rules, and a cluster
 * spec given here (`cluster`, `jobs`, `task`, ...) is an error that says to use TF_CONFIG.
 */
export const ClusterConfigCodec = new t.Type<ClusterConfig, ClusterConfig, unknown>(
  "ClusterConfig",
  (u): u is ClusterConfig => currentStruct().is(u),
  (u, c) => {
    const ClusterSectionStruct = currentStruct();
    if (typeof u !== "object" || u === null || Array.isArray(u)) return ClusterSectionStruct.validate(u, c) as t.Validation<ClusterConfig>;
    const given = SPEC_KEYS.filter((k) => Object.hasOwn(u, k));
    const rest = Object.fromEntries(Object.entries(u).filter(([k]) => !given.includes(k as (typeof SPEC_KEYS)[number])));
    const specErrors: t.ValidationError[] = given.map((key) => ({
      value: (u as Record<string, unknown>)[key],
      context: [...c, { key, type: t.never, actual: (u as Record<string, unknown>)[key] }],
      message: "the cluster spec comes from TF_CONFIG only; remove it here and set TF_CONFIG on each task",
    }));
    const r = ClusterSectionStruct.validate(rest, c) as t.Validation<ClusterConfig>;
    if (specErrors.length === 0) return r;
    return t.failures([...specErrors, ...(isLeft(r) ? r.left : [])]);
  },
  (a) => a,
);

/** The section's documented struct (fields and defaults) with the built-in backends' settings, for the configuration reference. */
export const ClusterConfigReference: StructType<Fields> = currentStruct();
