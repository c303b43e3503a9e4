/**
 * The cluster from a Kubernetes pod's own environment, with no call to the Kubernetes API (so no
 * RBAC and no service-account token): the pod's completion index (`JOB_COMPLETION_INDEX`, set by
 * the Job controller), JobSet's labels passed in through the Downward API (JobSet sets no
 * environment variable of its own), and the replica count, subdomain and port that
 * `monitored-session manifest kubernetes` writes into the pod spec. The tasks' addresses are the
 * pods' stable DNS names. TF_CONFIG, when set, wins.
 *
 * The manifest generator (src/kubernetes/) sets exactly the variables of {@link POD_ENV}: both
 * sides use these constants.
 *
 * @example
 * ```ts
 * import { podTfConfig } from "monitored-session/cluster";
 *
 * // In a pod of the generated JobSet: worker 1 of 3 training tasks.
 * const tfConfig = podTfConfig({
 *   MONITORED_SESSION_POD_MODE: "jobset",
 *   MONITORED_SESSION_POD_SET: "mnist",
 *   MONITORED_SESSION_POD_REPLICATED_JOB: "worker",
 *   MONITORED_SESSION_POD_JOB_INDEX: "0",
 *   JOB_COMPLETION_INDEX: "1",
 *   MONITORED_SESSION_POD_SUBDOMAIN: "mnist",
 *   MONITORED_SESSION_POD_NAMESPACE: "default",
 *   MONITORED_SESSION_POD_WORKERS: "3",
 *   MONITORED_SESSION_POD_PORT: "2222",
 * });
 * // { cluster: { chief: ["mnist-chief-0-0.mnist.default.svc:2222"], worker: [...] },
 * //   task: { type: "worker", index: 1 } }
 * ```
 *
 * @module
 */

import { isLeft, left, right, type Either } from "fp-ts/lib/Either.js";
import * as t from "io-ts";
import { lookup as dnsLookup } from "node:dns/promises";

import { systemClock, type Clock } from "../time/Clock.js";
import { formatIssue, toIssues, type Issue } from "../codec.js";
import { ValueError } from "../errors.js";
import { resolveTfConfig, type ResolvedCluster } from "./ClusterResolver.js";
import { TF_CONFIG, tfConfigFromEnv, type TfConfig } from "./TfConfig.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The environment variables a pod of a generated manifest has, and where each comes from. */
export const POD_ENV = {
  /** `jobset` or `indexed-job`: which manifest made the pod (a literal in the pod spec). Its presence turns the resolver on. */
  mode: "MONITORED_SESSION_POD_MODE",
  /** The JobSet's name (Downward API: label `jobset.sigs.k8s.io/jobset-name`), or the indexed Job's name (a literal). */
  setName: "MONITORED_SESSION_POD_SET",
  /** JobSet only: the replicated job, `chief` or `worker` (Downward API: label `jobset.sigs.k8s.io/replicatedjob-name`). */
  replicatedJob: "MONITORED_SESSION_POD_REPLICATED_JOB",
  /** JobSet only: the Job's index within its replicated job (Downward API: label `jobset.sigs.k8s.io/job-index`; always 0 here). */
  jobIndex: "MONITORED_SESSION_POD_JOB_INDEX",
  /** JobSet only, informational: how many times the set was restarted (Downward API: label `jobset.sigs.k8s.io/restart-attempt`). */
  restartAttempt: "MONITORED_SESSION_POD_RESTART_ATTEMPT",
  /** The pod's index in its indexed Job, set by the Job controller. */
  completionIndex: "JOB_COMPLETION_INDEX",
  /** The headless Service the pods' DNS names live under (a literal: the JobSet's `network.subdomain`, or the Service of the indexed Job). */
  subdomain: "MONITORED_SESSION_POD_SUBDOMAIN",
  /** The pod's namespace (Downward API: `metadata.namespace`). */
  namespace: "MONITORED_SESSION_POD_NAMESPACE",
  /** The training tasks, the chief counted (a literal, `--workers`). */
  workers: "MONITORED_SESSION_POD_WORKERS",
  /** The port every task's server listens on (a literal). */
  port: "MONITORED_SESSION_POD_PORT",
  /** Optional: how long a task waits for its peers' DNS names (default 600 s). */
  dnsTimeoutSecs: "MONITORED_SESSION_POD_DNS_TIMEOUT_SECS",
} as const;

/** The manifests' kinds, as {@link POD_ENV.mode} names them. */
export type PodMode = "jobset" | "indexed-job";

/** The replicated jobs of a generated JobSet (and the task types of TF_CONFIG). */
export const CHIEF_JOB = "chief";
export const WORKER_JOB = "worker";

/** Where the tasks of a generated manifest live. */
export interface PodLayout {
  readonly mode: PodMode;
  readonly setName: string;
  readonly subdomain: string;
  readonly namespace: string;
  /** Training tasks, the chief counted. */
  readonly workers: number;
  readonly port: number;
}

/** This pod's decoded environment: the layout and this task's place in it. */
export interface PodEnvironment extends PodLayout {
  readonly taskType: typeof CHIEF_JOB | typeof WORKER_JOB;
  readonly taskIndex: number;
  /** JobSet's restart attempt, when the label is passed in. */
  readonly restartAttempt: number | undefined;
}

/** Options of {@link resolvePodCluster}. */
export interface PodResolverOptions {
  readonly env?: NodeJS.ProcessEnv | undefined;
  /** Resolves a DNS name; rejects while it does not resolve (default: `dns.promises.lookup`). */
  readonly lookup?: ((hostname: string) => Promise<unknown>) | undefined;
  /** How long to wait for every peer's name (default: {@link POD_ENV.dnsTimeoutSecs}, else 600). */
  readonly dnsTimeoutSecs?: number | undefined;
  /** Where the one line per name waited for goes (default stderr). */
  readonly log?: ((line: string) => void) | undefined;
  readonly clock?: Clock | undefined;
}

/** A peer's DNS name did not resolve before the deadline. The message names it. */
export class PeerNotResolvedError extends Error {
  override readonly name = "PeerNotResolvedError";
  constructor(
    /** The name that did not resolve. */
    readonly hostname: string,
    readonly waitedSecs: number,
  ) {
    super(
      `the DNS name ${hostname} of a peer task did not resolve within ${waitedSecs} s; check that its pod was scheduled (kubectl get pods) and that the headless Service exists (kubectl get service)`,
    );
  }
}

const DEFAULT_DNS_TIMEOUT_SECS = 600;
const DNS_POLL_MS = 1000;

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * This pod's environment: `right(undefined)` when {@link POD_ENV.mode} is unset (not a pod of a
 * generated manifest), `left` with every problem (each naming its variable) when it is invalid.
 */
export const decodePodEnvironment = (env: NodeJS.ProcessEnv): Either<Issue[], PodEnvironment | undefined> => {
  const mode = env[POD_ENV.mode];
  if (mode === undefined || mode.trim() === "") return right(undefined);
  if (mode !== "jobset" && mode !== "indexed-job") return left([{ path: POD_ENV.mode, message: `expected "jobset" or "indexed-job", got ${JSON.stringify(mode)}` }]);
  const jobset = mode === "jobset";
  const codec = jobset ? JobSetEnvCodec : IndexedJobEnvCodec;
  const picked = Object.fromEntries(Object.values(POD_ENV).flatMap((k) => (env[k] === undefined ? [] : [[k, env[k]]])));
  const r = codec.decode(picked);
  if (isLeft(r)) return left(toIssues(r.left));
  const v = r.right as Record<string, string | number | undefined>;
  const workers = v[POD_ENV.workers] as number;
  const completion = v[POD_ENV.completionIndex] as number;
  const layout: PodLayout = {
    mode: jobset ? "jobset" : "indexed-job",
    setName: v[POD_ENV.setName] as string,
    subdomain: v[POD_ENV.subdomain] as string,
    namespace: v[POD_ENV.namespace] as string,
    workers,
    port: v[POD_ENV.port] as number,
  };
  const issues: Issue[] = [];
  let taskType: PodEnvironment["taskType"];
  let taskIndex: number;
  if (jobset) {
    const rj = v[POD_ENV.replicatedJob] as string;
    if (rj !== CHIEF_JOB && rj !== WORKER_JOB) issues.push({ path: POD_ENV.replicatedJob, message: `expected "${CHIEF_JOB}" or "${WORKER_JOB}", got ${JSON.stringify(rj)}` });
    if (v[POD_ENV.jobIndex] !== 0) issues.push({ path: POD_ENV.jobIndex, message: `expected 0 (each replicated job of the generated JobSet has one Job), got ${String(v[POD_ENV.jobIndex])}` });
    taskType = rj === CHIEF_JOB ? CHIEF_JOB : WORKER_JOB;
    taskIndex = completion;
    const count = taskType === CHIEF_JOB ? 1 : workers - 1;
    if (completion >= count) issues.push({ path: POD_ENV.completionIndex, message: `${completion} is not a task of job "${taskType}" (it has ${count})` });
  } else {
    // One Job of `workers` completions: index 0 is the chief, index i the worker i-1.
    taskType = completion === 0 ? CHIEF_JOB : WORKER_JOB;
    taskIndex = completion === 0 ? 0 : completion - 1;
    if (completion >= workers) issues.push({ path: POD_ENV.completionIndex, message: `${completion} is not below ${POD_ENV.workers} (${workers})` });
  }
  if (issues.length > 0) return left(issues);
  return right({ ...layout, taskType, taskIndex, restartAttempt: jobset ? restartAttemptOf(env) : undefined });
};

/** The pod hostname (DNS label) of each training task of `layout`, the chief first. */
export const podHostnames = (layout: Pick<PodLayout, "mode" | "setName" | "workers">): { readonly chief: string; readonly workers: readonly string[] } => {
  const { mode, setName, workers } = layout;
  if (mode === "jobset") {
    // JobSet: <jobset>-<replicatedJob>-<jobIndex>-<podIndex>.
    return { chief: `${setName}-${CHIEF_JOB}-0-0`, workers: range(workers - 1).map((i) => `${setName}-${WORKER_JOB}-0-${i}`) };
  }
  // An indexed Job: <job>-<index>.
  return { chief: `${setName}-0`, workers: range(workers - 1).map((i) => `${setName}-${i + 1}`) };
};

/** A pod's DNS name within the cluster: `<hostname>.<subdomain>.<namespace>.svc`. */
export const podDnsName = (hostname: string, layout: Pick<PodLayout, "subdomain" | "namespace">): string => `${hostname}.${layout.subdomain}.${layout.namespace}.svc`;

/** The TF_CONFIG of the pod `pod` describes: every training task at its DNS name and the port. */
export const podTfConfigOf = (pod: PodEnvironment): TfConfig => {
  const names = podHostnames(pod);
  const at = (h: string): string => `${podDnsName(h, pod)}:${pod.port}`;
  return {
    cluster: { [CHIEF_JOB]: [at(names.chief)], ...(names.workers.length === 0 ? {} : { [WORKER_JOB]: names.workers.map(at) }) },
    task: { type: pod.taskType, index: pod.taskIndex },
    environment: "cloud",
  };
};

/**
 * TF_CONFIG from `env`: TF_CONFIG itself when set (it wins), else the one the pod's environment
 * describes, else `undefined`. Synchronous: it waits for no DNS name (see {@link resolvePodCluster}).
 * @throws ValueError (one line, every problem with its variable) when either is invalid.
 */
export const podTfConfig = (env: NodeJS.ProcessEnv = process.env): TfConfig | undefined => {
  const own = tfConfigFromEnv(env);
  if (own !== undefined) return own;
  const pod = decodePodEnvironment(env);
  if (isLeft(pod)) throw new ValueError(`invalid pod environment: ${pod.left.map(formatIssue).join("; ")}`);
  return pod.right === undefined ? undefined : podTfConfigOf(pod.right);
};

/**
 * This process's task: from TF_CONFIG when it is set; else, in a pod of a generated manifest,
 * from the pod's environment, once every peer's DNS name resolves (one line per name waited
 * for); else `undefined`.
 *
 * @throws ValueError when TF_CONFIG or the pod's environment is invalid;
 *   {@link PeerNotResolvedError} when a peer's name does not resolve by the deadline.
 */
export const resolvePodCluster = async (options: PodResolverOptions = {}): Promise<ResolvedCluster | undefined> => {
  const tfConfig = await waitForPodTfConfig(options);
  return tfConfig === undefined ? undefined : resolveTfConfig(tfConfig);
};

/** {@link resolvePodCluster}'s TF_CONFIG (for callers that join it with a configuration, as `run` does). */
export const waitForPodTfConfig = async (options: PodResolverOptions = {}): Promise<TfConfig | undefined> => {
  const env = options.env ?? process.env;
  const own = tfConfigFromEnv(env);
  if (own !== undefined) return own;
  const decoded = decodePodEnvironment(env);
  if (isLeft(decoded)) throw new ValueError(`invalid pod environment: ${decoded.left.map(formatIssue).join("; ")} (set by the manifest; or set ${TF_CONFIG} instead)`);
  const pod = decoded.right;
  if (pod === undefined) return undefined;
  const timeoutSecs = options.dnsTimeoutSecs ?? dnsTimeoutOf(env);
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  log(
    `This pod is task ${pod.taskType}:${pod.taskIndex} of ${pod.workers} in ${pod.mode === "jobset" ? "JobSet" : "Job"} ${pod.setName}${pod.restartAttempt === undefined ? "" : ` (restart attempt ${pod.restartAttempt})`}, from the pod's environment.`,
  );
  const names = podHostnames(pod);
  const self = pod.taskType === CHIEF_JOB ? names.chief : (names.workers[pod.taskIndex] as string);
  const peers = [names.chief, ...names.workers].filter((h) => h !== self).map((h) => podDnsName(h, pod));
  await waitForNames(peers, {
    lookup: options.lookup ?? dnsLookup,
    clock: options.clock ?? systemClock,
    log,
    timeoutSecs,
  });
  return podTfConfigOf(pod);
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** Waits until every name resolves, in order, within one deadline; one line per name that had to be waited for. */
const waitForNames = async (
  names: readonly string[],
  o: { lookup: (h: string) => Promise<unknown>; clock: Clock; log: (line: string) => void; timeoutSecs: number },
): Promise<void> => {
  const now = (): number => o.clock.monotonic?.() ?? o.clock.now();
  const deadline = now() + o.timeoutSecs * 1000;
  for (const name of names) {
    let said = false;
    for (;;) {
      const ok = await o.lookup(name).then(
        () => true,
        () => false,
      );
      if (ok) break;
      const left = deadline - now();
      if (left <= 0) throw new PeerNotResolvedError(name, o.timeoutSecs);
      if (!said) {
        o.log(`Waiting for the peer task's DNS name ${name} to resolve (its pod may not be scheduled yet; up to ${Math.ceil(left / 1000)} s more).`);
        said = true;
      }
      await o.clock.sleep(Math.min(DNS_POLL_MS, left));
    }
  }
};

const dnsTimeoutOf = (env: NodeJS.ProcessEnv): number => {
  const raw = env[POD_ENV.dnsTimeoutSecs];
  if (raw === undefined || raw.trim() === "") return DEFAULT_DNS_TIMEOUT_SECS;
  const n = Number(raw);
  if (!(Number.isFinite(n) && n > 0)) throw new ValueError(`invalid pod environment: ${POD_ENV.dnsTimeoutSecs}: expected a positive number of seconds, got ${JSON.stringify(raw)}`);
  return n;
};

const range = (n: number): number[] => Array.from({ length: Math.max(0, n) }, (_, i) => i);

/** A decimal integer in a string, within [min, max]. */
const intString = (min: number, max: number): t.Type<number, string, unknown> =>
  new t.Type<number, string, unknown>(
    `an integer from ${min} to ${max}`,
    (u): u is number => typeof u === "number" && Number.isSafeInteger(u) && u >= min && u <= max,
    (u, c) => {
      if (typeof u === "string" && /^\d{1,9}$/.test(u)) {
        const n = Number(u);
        if (n >= min && n <= max) return t.success(n);
      }
      return t.failure(u, c, `expected an integer from ${min} to ${max}, got ${JSON.stringify(u)}`);
    },
    String,
  );

/** A DNS label (RFC 1123): what pod hostnames, subdomains and namespaces are. */
const DnsLabel = new t.Type<string, string, unknown>(
  "a DNS label",
  (u): u is string => typeof u === "string" && /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(u),
  (u, c) =>
    typeof u === "string" && /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(u)
      ? t.success(u)
      : t.failure(u, c, `expected a DNS label (lower-case letters, digits and '-', at most 63), got ${JSON.stringify(u)}`),
  (a) => a,
);

const commonEnv = {
  [POD_ENV.setName]: DnsLabel,
  [POD_ENV.completionIndex]: intString(0, 1_000_000),
  [POD_ENV.subdomain]: DnsLabel,
  [POD_ENV.namespace]: DnsLabel,
  [POD_ENV.workers]: intString(1, 1_000_000),
  [POD_ENV.port]: intString(1, 65535),
};

const JobSetEnvCodec = t.type({ ...commonEnv, [POD_ENV.replicatedJob]: DnsLabel, [POD_ENV.jobIndex]: intString(0, 1_000_000) });

/** Optional: only informational, so a missing or odd label is no error. */
const restartAttemptOf = (env: NodeJS.ProcessEnv): number | undefined => {
  const r = intString(0, 999_999_999).decode(env[POD_ENV.restartAttempt]);
  return isLeft(r) ? undefined : r.right;
};

const IndexedJobEnvCodec = t.type(commonEnv);
