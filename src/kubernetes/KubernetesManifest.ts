/**
 * The Kubernetes objects that run a training job as a cluster of pods: a JobSet
 * (`jobset.x-k8s.io/v1alpha2`, a chief and a worker replicated job that restart together) or,
 * for clusters without JobSet, an indexed Job with its headless Service; the configuration
 * file as a ConfigMap; a NetworkPolicy that lets only the job's own pods reach them. A pure
 * function of its options: it reads no file and prints nothing (the `manifest kubernetes`
 * command does both).
 *
 * Each pod finds its task from its own environment (src/cluster/PodClusterResolver.ts): the
 * manifest sets exactly the variables of `POD_ENV`. Secrets (the cluster token, TLS) are named,
 * never read. The pods run as a non-root user with no privilege escalation, every capability
 * dropped, a read-only root filesystem (writable emptyDirs where the trainer writes) and no
 * service-account token, and request CPU and memory unless told not to. See docs/kubernetes.md,
 * field by field.
 *
 * @module
 */

import { DEFAULT_RESOURCES } from "./manifestDefaults.js";
import { isLeft, left, right, type Either } from "fp-ts/lib/Either.js";
import { posix } from "node:path";
import { stringify } from "yaml";

import type { ClusterConfig } from "../cluster/ClusterConfig.js";
import { CHIEF_JOB, POD_ENV, podHostnames, WORKER_JOB, type PodMode } from "../cluster/PodClusterResolver.js";
import { decode, formatIssue } from "../codec.js";
import { PreemptionExitCode } from "../config/TrainingConfig.js";
import { TERMINATION_GRACE_PERIOD_ENV } from "../preemption/platforms/kubernetes.js";
import { ExitCodes } from "../runtime/exitCodes.js";
import { CLUSTER_SETTINGS_ENV } from "../runtime/index.js";
import { indexedJobPodFailurePolicy, jobSetFailurePolicy, jobSetPodFailurePolicy, TRAINER_CONTAINER } from "./failurePolicy.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A Kubernetes object as the manifest prints it. */
export interface KubernetesObject {
  readonly apiVersion: string;
  readonly kind: string;
  readonly metadata: { readonly name: string; readonly namespace: string; readonly labels: Readonly<Record<string, string>> };
  readonly [field: string]: unknown;
}

/** What each pod runs. */
export type PodProgram =
  | {
      readonly kind: "config";
      /** The configuration file, relative to `workdir` (POSIX separators), where the ConfigMap is mounted. */
      readonly configFile: string;
      /** Its text, as the ConfigMap holds it (with the cluster settings already in its `cluster:` section). */
      readonly configText: string;
      /** The `monitored-session` CLI in the image, relative to `workdir` or absolute (`.ts`: run through tsx). */
      readonly cli: string;
    }
  | {
      readonly kind: "command";
      /** The command and its arguments (no shell). */
      readonly command: readonly string[];
      /** The cluster settings, passed as JSON in `MONITORED_SESSION_CLUSTER`. */
      readonly clusterSettings: ClusterConfig;
    };

/** The checkpoint volume. */
export interface CheckpointVolume {
  /** An existing PersistentVolumeClaim. */
  readonly claimName: string;
  /** Where it is mounted: the checkpoint directory (absolute). */
  readonly mountPath: string;
  /** Also mount it read-only on the workers (a custom loop whose workers restore): the claim must be ReadWriteMany. */
  readonly onWorkers: boolean;
}

/** Options of {@link kubernetesManifest}. */
export interface KubernetesManifestOptions {
  /** The JobSet's (or Job's) name, a DNS-1035 label; it is also the headless Service's name. */
  readonly name: string;
  readonly namespace: string;
  readonly mode: PodMode;
  /** Training tasks, the chief counted (as `launch --workers`). */
  readonly workers: number;
  readonly image: string;
  /** The image's working directory (absolute). */
  readonly workdir: string;
  readonly program: PodProgram;
  /** The port of every task's server. */
  readonly port: number;
  /** JobSet: counted restarts of the set. Indexed Job: the `backoffLimit`. */
  readonly maxRestarts: number;
  readonly checkpoint?: CheckpointVolume | undefined;
  /** Writable directories of every pod (the checkpoint directory's parent, where a custom loop's workers write `workertemp_<id>`): emptyDirs. */
  readonly scratchDirs?: readonly string[] | undefined;
  /** Directories the chief writes besides the checkpoint volume (summaries elsewhere, the checkpoint directory without a volume): emptyDirs. */
  readonly chiefScratchDirs?: readonly string[] | undefined;
  /** Each pod's CPU request (default {@link DEFAULT_RESOURCES}); no CPU limit. */
  readonly cpu?: string | undefined;
  /** Each pod's memory request, and its limit (default {@link DEFAULT_RESOURCES}). */
  readonly memory?: string | undefined;
  /** Request nothing (QoS class BestEffort: evicted first under node pressure); not with `cpu` or `memory`. */
  readonly bestEffort?: boolean | undefined;
  /** The NetworkPolicy that admits to the pods only the job's own pods (default true). */
  readonly networkPolicy?: boolean | undefined;
  /** A Secret with the cluster token under the key `token`, mounted at {@link TOKEN_FILE}. */
  readonly tokenSecret?: string | undefined;
  /** A Secret with `tls.crt`, `tls.key` and `ca.crt`, mounted under {@link TLS_DIR}. */
  readonly tlsSecret?: string | undefined;
  readonly terminationGracePeriodSeconds: number;
  /**
   * The code a preempted task exits with (the configuration's `preemption.exitCode`; default
   * 42): the failure rules restart the set on it, and on 43 (chief lost), without counting.
   */
  readonly preemptionExitCode?: number | undefined;
  /** One line on how the grace period was reached, printed beside it. */
  readonly gracePeriodExplanation?: string | undefined;
}

/** Where the token Secret is mounted and the file the cluster settings name. */
const TOKEN_DIR = "/etc/monitored-session/token";
export const TOKEN_FILE = `${TOKEN_DIR}/token`;
/** Where the TLS Secret is mounted. */
export const TLS_DIR = "/etc/monitored-session/tls";

/** The user (and group) the containers run as: the `node` user of the official Node.js images, by number (`runAsNonRoot` cannot check a name). */
const RUN_AS_USER = 1000;

/** The label every generated object carries, with the job's name. */
const INSTANCE_LABEL = "app.kubernetes.io/instance";
const NAME_LABEL = "app.kubernetes.io/name";
const JOBSET_LABEL = (key: string): string => `metadata.labels['jobset.sigs.k8s.io/${key}']`;

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * The objects for `options`, in the order `kubectl apply` needs them (ConfigMap and Service
 * before the pods that use them), or every problem with the options (one line each).
 */
export const kubernetesManifest = (options: KubernetesManifestOptions): Either<readonly string[], readonly KubernetesObject[]> => {
  const problems = checkOptions(options);
  if (problems.length > 0) return left(problems);
  const o = options;
  const preempted = o.preemptionExitCode ?? ExitCodes.preempted;
  const labels = { [NAME_LABEL]: "monitored-session", [INSTANCE_LABEL]: o.name };
  const meta = (name: string): KubernetesObject["metadata"] => ({ name, namespace: o.namespace, labels });
  const objects: KubernetesObject[] = [];
  // Before the pods it guards, so that none runs unguarded while the manifest is applied.
  if (o.networkPolicy !== false) objects.push({ apiVersion: "networking.k8s.io/v1", kind: "NetworkPolicy", metadata: meta(o.name), spec: networkPolicySpec(labels) });
  if (o.program.kind === "config") {
    objects.push({ apiVersion: "v1", kind: "ConfigMap", metadata: meta(configMapName(o.name)), data: { [posix.basename(o.program.configFile)]: o.program.configText } });
  }
  if (o.mode === "jobset") {
    const replicatedJob = (job: typeof CHIEF_JOB | typeof WORKER_JOB, pods: number): Record<string, unknown> => ({
      name: job,
      replicas: 1,
      template: {
        metadata: { labels },
        spec: {
          completionMode: "Indexed",
          completions: pods,
          parallelism: pods,
          // Every failure ends the Job at once; the JobSet's rules decide what follows.
          backoffLimit: 0,
          podFailurePolicy: jobSetPodFailurePolicy(preempted),
          template: podTemplate(o, job, labels),
        },
      },
    });
    objects.push({
      apiVersion: "jobset.x-k8s.io/v1alpha2",
      kind: "JobSet",
      metadata: meta(o.name),
      spec: {
        network: { enableDNSHostnames: true, subdomain: o.name, publishNotReadyAddresses: true },
        successPolicy: { operator: "All" },
        failurePolicy: jobSetFailurePolicy(o.maxRestarts, preempted),
        replicatedJobs: [replicatedJob(CHIEF_JOB, 1), ...(o.workers > 1 ? [replicatedJob(WORKER_JOB, o.workers - 1)] : [])],
      },
    });
    return right(objects);
  }
  objects.push({
    apiVersion: "v1",
    kind: "Service",
    metadata: meta(o.name),
    spec: {
      clusterIP: "None",
      // The names resolve before the pods are ready: the tasks find each other while they start.
      publishNotReadyAddresses: true,
      selector: { [INSTANCE_LABEL]: o.name },
      ports: [{ name: "grpc", port: o.port, targetPort: o.port, protocol: "TCP" }],
    },
  });
  objects.push({
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: meta(o.name),
    spec: {
      completionMode: "Indexed",
      completions: o.workers,
      parallelism: o.workers,
      backoffLimit: o.maxRestarts,
      podFailurePolicy: indexedJobPodFailurePolicy(preempted),
      template: podTemplate(o, undefined, labels),
    },
  });
  return right(objects);
};

/** The objects as one YAML stream for `kubectl apply -f -`, after `header` as comment lines. */
export const renderManifest = (objects: readonly KubernetesObject[], header: readonly string[] = []): string => {
  const comments = header.map((l) => `# ${l}\n`).join("");
  return comments + objects.map((obj) => stringify(obj, { lineWidth: 0, aliasDuplicateObjects: false })).join("---\n");
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/**
 * The pod template: `job` is the JobSet's replicated job, or `undefined` for the indexed Job
 * (whose index 0 is the chief, so every pod gets the chief's volumes).
 */
const podTemplate = (o: KubernetesManifestOptions, job: typeof CHIEF_JOB | typeof WORKER_JOB | undefined, labels: Record<string, string>): Record<string, unknown> => {
  const chiefVolumes = job !== WORKER_JOB;
  const volumes: Record<string, unknown>[] = [{ name: "tmp", emptyDir: {} }];
  const mounts: Record<string, unknown>[] = [{ name: "tmp", mountPath: "/tmp" }];
  if (o.program.kind === "config") {
    volumes.push({ name: "config", configMap: { name: configMapName(o.name) } });
    mounts.push({ name: "config", mountPath: posix.join(o.workdir, o.program.configFile), subPath: posix.basename(o.program.configFile), readOnly: true });
  }
  if (o.tokenSecret !== undefined) {
    volumes.push({ name: "cluster-token", secret: { secretName: o.tokenSecret, defaultMode: 0o440, items: [{ key: "token", path: "token" }] } });
    mounts.push({ name: "cluster-token", mountPath: TOKEN_DIR, readOnly: true });
  }
  if (o.tlsSecret !== undefined) {
    volumes.push({ name: "cluster-tls", secret: { secretName: o.tlsSecret, defaultMode: 0o440 } });
    mounts.push({ name: "cluster-tls", mountPath: TLS_DIR, readOnly: true });
  }
  // Parents before what is mounted inside them (the checkpoint volume inside its scratch parent).
  [...(o.scratchDirs ?? []), ...(chiefVolumes ? (o.chiefScratchDirs ?? []) : [])].forEach((dir, i) => {
    volumes.push({ name: `scratch-${i}`, emptyDir: {} });
    mounts.push({ name: `scratch-${i}`, mountPath: dir });
  });
  const ckpt = o.checkpoint;
  if (ckpt !== undefined && (chiefVolumes || ckpt.onWorkers)) {
    const readOnly = !chiefVolumes;
    volumes.push({ name: "checkpoints", persistentVolumeClaim: { claimName: ckpt.claimName, ...(readOnly ? { readOnly: true } : {}) } });
    mounts.push({ name: "checkpoints", mountPath: ckpt.mountPath, ...(readOnly ? { readOnly: true } : {}) });
  }
  return {
    metadata: { labels },
    spec: {
      // A podFailurePolicy needs Never (JobSet's default, OnFailure, is rejected with one).
      restartPolicy: "Never",
      ...(o.mode === "indexed-job" ? { subdomain: o.name } : {}),
      terminationGracePeriodSeconds: o.terminationGracePeriodSeconds,
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      securityContext: { runAsNonRoot: true, runAsUser: RUN_AS_USER, runAsGroup: RUN_AS_USER, fsGroup: RUN_AS_USER, seccompProfile: { type: "RuntimeDefault" } },
      containers: [
        {
          name: TRAINER_CONTAINER,
          image: o.image,
          workingDir: o.workdir,
          ...(o.program.kind === "config" ? { command: cliCommand(o.program.cli, o.program.configFile) } : { command: [...o.program.command] }),
          env: podEnv(o, job),
          ports: [{ name: "grpc", containerPort: o.port, protocol: "TCP" }],
          ...(o.bestEffort === true ? {} : { resources: podResources(o.cpu ?? DEFAULT_RESOURCES.cpu, o.memory ?? DEFAULT_RESOURCES.memory) }),
          securityContext: { privileged: false, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ["ALL"] } },
          volumeMounts: mounts,
        },
      ],
      volumes,
    },
  };
};

/**
 * The job's NetworkPolicy: the pods labelled `labels` (the pod template's own labels, which both
 * kinds of manifest put on every pod) take connections only from pods with the same labels in
 * the same namespace. On every port, not only the server's: the collective ring of a
 * data-parallel group listens on a port each task picks at start (src/runtime/clusterRuntime.ts,
 * `joinCollective`). Ingress only: the pods still reach etcd, DNS and the checkpoint storage.
 */
const networkPolicySpec = (labels: Record<string, string>): Record<string, unknown> => ({
  podSelector: { matchLabels: labels },
  policyTypes: ["Ingress"],
  ingress: [{ from: [{ podSelector: { matchLabels: labels } }] }],
});

/**
 * A pod's requests (QoS class Burstable). The memory limit equals the request: memory is not
 * reclaimable, and a pod above its request is among the first the kubelet evicts under node
 * pressure, each eviction an uncounted restart of the set; held to its request, an overrun is an
 * OOM kill of this container instead (exit 137, a counted restart). No CPU limit: CPU is
 * reclaimable, and a throttled period stalls the event loop, its heartbeats and the preemption
 * agreement with it.
 */
const podResources = (cpu: string, memory: string): Record<string, unknown> => ({ requests: { cpu, memory }, limits: { memory } });

/** The variables the pod resolver reads (POD_ENV), the grace period, and a command's cluster settings. */
const podEnv = (o: KubernetesManifestOptions, job: string | undefined): Record<string, unknown>[] => {
  const literal = (name: string, value: string | number): Record<string, unknown> => ({ name, value: String(value) });
  const field = (name: string, fieldPath: string): Record<string, unknown> => ({ name, valueFrom: { fieldRef: { fieldPath } } });
  const env: Record<string, unknown>[] = [literal(POD_ENV.mode, o.mode)];
  if (job !== undefined) {
    // JobSet sets no variable of its own: its labels come in through the Downward API.
    env.push(field(POD_ENV.setName, JOBSET_LABEL("jobset-name")), field(POD_ENV.replicatedJob, JOBSET_LABEL("replicatedjob-name")), field(POD_ENV.jobIndex, JOBSET_LABEL("job-index")), field(POD_ENV.restartAttempt, JOBSET_LABEL("restart-attempt")));
  } else {
    env.push(literal(POD_ENV.setName, o.name));
  }
  env.push(
    literal(POD_ENV.subdomain, o.name),
    field(POD_ENV.namespace, "metadata.namespace"),
    literal(POD_ENV.workers, o.workers),
    literal(POD_ENV.port, o.port),
    // The pod cannot see its own spec: preemption.platform kubernetes reads the deadline here.
    literal(TERMINATION_GRACE_PERIOD_ENV, o.terminationGracePeriodSeconds),
  );
  if (o.program.kind === "command") env.push(literal(CLUSTER_SETTINGS_ENV, JSON.stringify(o.program.clusterSettings)));
  return env;
};

/** The ConfigMap holding the configuration file. */
const configMapName = (name: string): string => `${name}-config`;

const cliCommand = (cli: string, configFile: string): string[] => (cli.endsWith(".ts") ? ["node", "--import", "tsx", cli, "run", configFile] : ["node", cli, "run", configFile]);

/** A DNS-1035 label: what Job, JobSet, Service and pod names must be. */
const DNS_1035 = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
/** A DNS-1123 label: what namespaces, Secret, ConfigMap and claim names must be (Secrets allow dots too). */
const DNS_1123 = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/**
 * An image reference: `[host[:port]/]path[:tag][@sha256:digest]`, with lower-case path
 * components (the grammar of the distribution reference, simplified to what registries accept).
 */
const IMAGE =
  /^(?:(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::\d+)?|\[[0-9a-fA-F:]+\](?::\d+)?)\/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[\w][\w.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$/;

/** A resource quantity: `500m`, `2`, `4Gi`, `1.5G`. */
const QUANTITY = /^(?:\d+(?:\.\d+)?|\.\d+)(?:m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$/;

const checkOptions = (o: KubernetesManifestOptions): string[] => {
  const out: string[] = [];
  if (!Number.isSafeInteger(o.workers) || o.workers < 1) out.push(`--workers ${o.workers}: expected an integer >= 1 (the chief counts)`);
  // The longest name Kubernetes derives: a pod hostname, at most 63 characters.
  const names = podHostnames({ mode: o.mode, setName: o.name, workers: Math.max(1, o.workers) });
  const longest = [names.chief, ...names.workers].reduce((a, b) => (b.length > a.length ? b : a), "");
  if (!DNS_1035.test(o.name)) out.push(`--name ${JSON.stringify(o.name)}: expected a DNS-1035 label (lower-case letters, digits and '-', starting with a letter)`);
  else if (longest.length > 63) out.push(`--name ${o.name}: the pod hostname ${longest} is longer than 63 characters; use a name of at most ${o.name.length - (longest.length - 63)}`);
  if (!DNS_1123.test(o.namespace) || o.namespace.length > 63) out.push(`--namespace ${JSON.stringify(o.namespace)}: expected a DNS label (lower-case letters, digits and '-', at most 63)`);
  if (!IMAGE.test(o.image) || o.image.length > 4096) out.push(`--image ${JSON.stringify(o.image)}: expected an image reference such as registry.example.com/team/trainer:1.0 (lower-case repository)`);
  if (!Number.isSafeInteger(o.maxRestarts) || o.maxRestarts < 0) out.push(`--max-restarts ${o.maxRestarts}: expected an integer >= 0`);
  if (!Number.isSafeInteger(o.port) || o.port < 1 || o.port > 65535) out.push(`port ${o.port}: expected 1 to 65535`);
  if (!Number.isSafeInteger(o.terminationGracePeriodSeconds) || o.terminationGracePeriodSeconds < 1) out.push(`--grace-secs ${o.terminationGracePeriodSeconds}: expected an integer >= 1`);
  if (o.cpu !== undefined && !QUANTITY.test(o.cpu)) out.push(`--cpu ${JSON.stringify(o.cpu)}: expected a quantity such as 2 or 500m`);
  if (o.memory !== undefined && !QUANTITY.test(o.memory)) out.push(`--memory ${JSON.stringify(o.memory)}: expected a quantity such as 4Gi or 512Mi`);
  const requests = (["cpu", "memory"] as const).filter((k) => o[k] !== undefined).map((k) => `--${k}`);
  if (o.bestEffort === true && requests.length > 0) out.push(`--best-effort requests no resources: give either it or ${requests.join(" and ")}, not both`);
  for (const [flag, v] of [["--token-secret", o.tokenSecret], ["--tls-secret", o.tlsSecret], ["--checkpoint-pvc", o.checkpoint?.claimName]] as const) {
    if (v !== undefined && (!DNS_1123_SUBDOMAIN.test(v) || v.length > 253)) out.push(`${flag} ${JSON.stringify(v)}: expected the name of an existing object (lower-case letters, digits, '-' and '.')`);
  }
  if (!posix.isAbsolute(o.workdir)) out.push(`--workdir ${JSON.stringify(o.workdir)}: expected an absolute path in the image`);
  if (o.checkpoint !== undefined && !posix.isAbsolute(o.checkpoint.mountPath)) out.push(`the checkpoint directory ${o.checkpoint.mountPath} is not absolute`);
  if (o.program.kind === "command" && o.program.command.length === 0) out.push("-- <command>: expected a command after --");
  if (o.preemptionExitCode !== undefined) {
    const code = decode(PreemptionExitCode, o.preemptionExitCode);
    if (isLeft(code)) out.push(...code.left.map((i) => formatIssue({ ...i, path: "preemption.exitCode" })));
  }
  return out;
};
