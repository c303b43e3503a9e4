/**
 * Validation of generated manifests without a cluster: `kubernetes-models` for the core,
 * batch and networking objects (each JobSet's embedded Job templates too), JobSet's published
 * CRD schema (a fixture, see fixtures/README.md) with Ajv for the JobSet, and our own checks for
 * what those validators miss: unknown fields, the cross-field rules of the API server and of
 * JobSet's webhook, our security defaults, and that a NetworkPolicy guards the manifest's pods
 * and lets them reach each other.
 */

import { Ajv } from "ajv";
import { readFileSync } from "node:fs";
import { Job } from "kubernetes-models/batch/v1/Job";
import { NetworkPolicy } from "kubernetes-models/networking.k8s.io/v1/NetworkPolicy";
import { ConfigMap } from "kubernetes-models/v1/ConfigMap";
import { Service } from "kubernetes-models/v1/Service";

import { admits, selects } from "./networkPolicy.js";

type Json = Record<string, unknown>;
type Schema = {
  readonly properties?: Record<string, Schema>;
  readonly items?: Schema;
  readonly additionalProperties?: Schema | boolean;
  readonly "x-kubernetes-preserve-unknown-fields"?: boolean;
};

/** The openAPIV3Schema of JobSet v1alpha2 (kubernetes-sigs/jobset v0.12.0). */
export const jobSetSchema = JSON.parse(readFileSync(new URL("./fixtures/jobset-v0.12.0.schema.json", import.meta.url), "utf8")) as Json & Schema;

const ajv = new Ajv({ allErrors: true, strict: false, formats: { int32: true, int64: true, "date-time": true } });
const validateJobSetSchema = ajv.compile(jobSetSchema);

/** The Job spec's schema as the JobSet CRD embeds it (the whole JobSpec and PodTemplateSpec). */
const jobSpecSchema = (jobSetSchema.properties?.["spec"]?.properties?.["replicatedJobs"]?.items?.properties?.["template"]?.properties?.["spec"] ?? {}) as Schema;

const METADATA_FIELDS = ["name", "namespace", "labels", "annotations"];
const SERVICE_SPEC_FIELDS = [
  "allocateLoadBalancerNodePorts", "clusterIP", "clusterIPs", "externalIPs", "externalName", "externalTrafficPolicy", "healthCheckNodePort",
  "internalTrafficPolicy", "ipFamilies", "ipFamilyPolicy", "loadBalancerClass", "loadBalancerIP", "loadBalancerSourceRanges", "ports",
  "publishNotReadyAddresses", "selector", "sessionAffinity", "sessionAffinityConfig", "trafficDistribution", "type",
];
const SERVICE_PORT_FIELDS = ["appProtocol", "name", "nodePort", "port", "protocol", "targetPort"];
const NETWORK_POLICY_FIELDS = {
  spec: ["podSelector", "policyTypes", "ingress", "egress"],
  ingress: ["from", "ports"],
  egress: ["to", "ports"],
  peer: ["podSelector", "namespaceSelector", "ipBlock"],
  selector: ["matchLabels", "matchExpressions"],
  port: ["protocol", "port", "endPort"],
} as const;
const JOBSET_FAILURE_REASONS = ["BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes", "MaxFailedIndexesExceeded", "PodFailurePolicy"];

/** Every problem of one object of a manifest (an empty list: valid). */
export const checkObject = (obj: Json, walkUnknown = true): string[] => {
  const kind = String(obj["kind"]);
  const out = [...checkMetadata(obj)];
  try {
    if (kind === "ConfigMap") new ConfigMap(obj as never).validate();
    else if (kind === "Service") new Service(obj as never).validate();
    else if (kind === "Job") new Job(obj as never).validate();
    else if (kind === "NetworkPolicy") new NetworkPolicy(obj as never).validate();
  } catch (e) {
    out.push(`${kind}: kubernetes-models: ${(e as Error).message}`);
  }
  if (kind === "ConfigMap") out.push(...unknownKeys(obj, ["apiVersion", "kind", "metadata", "data"], "ConfigMap"));
  else if (kind === "Service") {
    out.push(...unknownKeys(obj, ["apiVersion", "kind", "metadata", "spec"], "Service"));
    const spec = obj["spec"] as Json;
    out.push(...unknownKeys(spec, SERVICE_SPEC_FIELDS, "Service.spec"));
    for (const [i, p] of ((spec["ports"] as Json[] | undefined) ?? []).entries()) out.push(...unknownKeys(p, SERVICE_PORT_FIELDS, `Service.spec.ports[${i}]`));
  } else if (kind === "Job") {
    out.push(...unknownKeys(obj, ["apiVersion", "kind", "metadata", "spec"], "Job"));
    if (walkUnknown) out.push(...unknownFields(obj["spec"], jobSpecSchema, "Job.spec"));
    out.push(...checkJobSpec(obj["spec"] as Json, "Job.spec"));
  } else if (kind === "JobSet") {
    if (obj["apiVersion"] !== "jobset.x-k8s.io/v1alpha2") out.push(`JobSet: apiVersion ${String(obj["apiVersion"])}`);
    if (!validateJobSetSchema(obj)) out.push(...(validateJobSetSchema.errors ?? []).map((e) => `JobSet: CRD schema: ${e.instancePath} ${e.message ?? ""}`));
    out.push(...unknownFields({ ...obj, metadata: undefined }, jobSetSchema, "JobSet"), ...checkJobSet(obj));
  } else if (kind === "NetworkPolicy") {
    out.push(...unknownKeys(obj, ["apiVersion", "kind", "metadata", "spec"], "NetworkPolicy"), ...unknownNetworkPolicyFields(obj["spec"] as Json));
  } else out.push(`unexpected kind ${kind}`);
  return out;
};

/** Every problem of a whole manifest's objects, and of its NetworkPolicies against its pods. */
export const checkManifest = (objects: readonly Json[]): string[] => [...objects.flatMap((o) => checkObject(o)), ...checkNetworkPolicies(objects)];

/** A pod template of a manifest (a JobSet's replicated job's, a Job's). */
export interface PodTemplate {
  /** Where it is: `JobSet.spec.replicatedJobs[1].template.spec.template`. */
  readonly at: string;
  readonly namespace: string;
  readonly labels: Record<string, string>;
  readonly spec: Json;
}

/** The pod templates of a manifest's JobSets and Jobs. */
export const podTemplates = (objects: readonly Json[]): PodTemplate[] =>
  objects.flatMap((o): PodTemplate[] => {
    const namespace = (o["metadata"] as Json)["namespace"] as string;
    const of = (at: string, template: Json): PodTemplate => ({ at, namespace, labels: ((template["metadata"] as Json | undefined)?.["labels"] as Record<string, string> | undefined) ?? {}, spec: template["spec"] as Json });
    if (o["kind"] === "Job") return [of("Job.spec.template", (o["spec"] as Json)["template"] as Json)];
    if (o["kind"] !== "JobSet") return [];
    return ((o["spec"] as Json)["replicatedJobs"] as Json[]).map((rj, i) => of(`JobSet.spec.replicatedJobs[${i}].template.spec.template`, ((rj["template"] as Json)["spec"] as Json)["template"] as Json));
  });

/**
 * The QoS class Kubernetes gives a pod spec (https://kubernetes.io/docs/concepts/workloads/pods/pod-qos/):
 * Guaranteed when every container has CPU and memory limits equal to its requests, BestEffort when
 * none has a request or limit, Burstable otherwise.
 */
export const qosClass = (pod: Json): "Guaranteed" | "Burstable" | "BestEffort" => {
  const resources = ((pod["containers"] as Json[] | undefined) ?? []).map((c) => (c["resources"] as Json | undefined) ?? {});
  const of = (r: Json, kind: "requests" | "limits"): Record<string, string> => (r[kind] as Record<string, string> | undefined) ?? {};
  if (resources.every((r) => Object.keys(of(r, "requests")).length === 0 && Object.keys(of(r, "limits")).length === 0)) return "BestEffort";
  // A request left out defaults to its limit.
  const guaranteed = resources.every((r) => (["cpu", "memory"] as const).every((k) => of(r, "limits")[k] !== undefined && (of(r, "requests")[k] ?? of(r, "limits")[k]) === of(r, "limits")[k]));
  return guaranteed ? "Guaranteed" : "Burstable";
};

// ---------------------------------------------------------------------------------------------
// our own checks
// ---------------------------------------------------------------------------------------------

/**
 * The ports the pods must reach each other on besides the containers' own: a data-parallel
 * group's ring listens on a port each task picks at start (port 0, src/runtime/clusterRuntime.ts),
 * which Linux takes from `net.ipv4.ip_local_port_range`, 32768-60999 by default.
 */
const RING_PORTS = [32768, 60999];

/**
 * A manifest's NetworkPolicies must select every pod of it (a policy that selects none guards
 * nothing, silently), and admit its pods to each other on the server's port and the ring's (or
 * the tasks never meet).
 */
const checkNetworkPolicies = (objects: readonly Json[]): string[] => {
  const policies = objects.filter((o) => o["kind"] === "NetworkPolicy");
  if (policies.length === 0) return [];
  const templates = podTemplates(objects);
  const unguarded = templates
    .filter((t) => !policies.some((p) => selects((p["spec"] as Json)["podSelector"] as Json, t.labels)))
    .map((t) => `NetworkPolicy: no policy selects ${t.at} (labels ${JSON.stringify(t.labels)}): its pods are not guarded`);
  const blocked = templates.flatMap((from) =>
    templates.flatMap((to) => {
      const ports = [...(((to.spec["containers"] as Json[])[0] as Json)["ports"] as Json[]).map((p) => p["containerPort"] as number), ...RING_PORTS];
      return ports.filter((port) => !admits(policies, from, to, port)).map((port) => `NetworkPolicy: the pods of ${from.at} cannot reach port ${port} of ${to.at}`);
    }),
  );
  return [...unguarded, ...blocked];
};

const DNS_1035 = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;

const checkMetadata = (obj: Json): string[] => {
  const m = obj["metadata"] as Json | undefined;
  if (m === undefined) return [`${String(obj["kind"])}: no metadata`];
  const out = unknownKeys(m, METADATA_FIELDS, `${String(obj["kind"])}.metadata`);
  const name = m["name"];
  if (typeof name !== "string" || !DNS_1035.test(name) || name.length > 63) out.push(`${String(obj["kind"])}: name ${JSON.stringify(name)} is not a DNS-1035 label of at most 63`);
  return out;
};

/** JobSet's webhook and controller rules that its CRD schema does not carry. */
const checkJobSet = (obj: Json): string[] => {
  const out: string[] = [];
  const name = (obj["metadata"] as Json)["name"] as string;
  const spec = obj["spec"] as Json;
  const policy = spec["failurePolicy"] as Json | undefined;
  for (const [i, rule] of ((policy?.["rules"] as Json[] | undefined) ?? []).entries()) {
    if (!/^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$/.test(String(rule["name"]))) out.push(`JobSet: failurePolicy.rules[${i}].name ${String(rule["name"])} does not match the webhook's pattern`);
    for (const r of (rule["onJobFailureReasons"] as string[] | undefined) ?? []) if (!JOBSET_FAILURE_REASONS.includes(r)) out.push(`JobSet: failurePolicy.rules[${i}]: unknown reason ${r}`);
  }
  const network = spec["network"] as Json | undefined;
  const subdomain = (network?.["subdomain"] as string | undefined) ?? name;
  for (const [i, rj] of ((spec["replicatedJobs"] as Json[] | undefined) ?? []).entries()) {
    const at = `JobSet.spec.replicatedJobs[${i}]`;
    const template = rj["template"] as Json;
    const jobSpec = template["spec"] as Json;
    const replicas = (rj["replicas"] as number | undefined) ?? 1;
    const pods = (jobSpec["completions"] as number | undefined) ?? 1;
    // The names JobSet derives: Job <js>-<rj>-<jobIdx>, pod hostname <js>-<rj>-<jobIdx>-<podIdx>.
    const hostname = `${name}-${String(rj["name"])}-${replicas - 1}-${pods - 1}`;
    if (!DNS_1035.test(hostname) || hostname.length > 63) out.push(`${at}: the pod hostname ${hostname} is not a DNS-1035 label of at most 63`);
    if (`${hostname}.${subdomain}`.length > 253) out.push(`${at}: ${hostname}.${subdomain} is longer than a DNS name may be`);
    // The embedded Job, as JobSet creates it, through kubernetes-models (its unknown fields were
    // walked with the JobSet's).
    const job = { apiVersion: "batch/v1", kind: "Job", metadata: { name: `${name}-${String(rj["name"])}-0`, namespace: (obj["metadata"] as Json)["namespace"], labels: (template["metadata"] as Json | undefined)?.["labels"] ?? {} }, spec: jobSpec };
    out.push(...checkObject(job, false).map((p) => `${at}.template: ${p}`));
  }
  return out;
};

/** The API server's cross-field rules for a Job spec, and our security defaults. */
const checkJobSpec = (spec: Json, at: string): string[] => {
  const out: string[] = [];
  const pod = (spec["template"] as Json)["spec"] as Json;
  const pfp = spec["podFailurePolicy"] as Json | undefined;
  if (spec["completionMode"] !== "Indexed") out.push(`${at}.completionMode: expected Indexed (the task index is the completion index)`);
  if (pfp !== undefined) {
    if (pod["restartPolicy"] !== "Never") out.push(`${at}: a podFailurePolicy needs template.spec.restartPolicy Never (got ${String(pod["restartPolicy"])})`);
    const rules = (pfp["rules"] as Json[] | undefined) ?? [];
    if (rules.length > 20) out.push(`${at}.podFailurePolicy: more than 20 rules`);
    const containers = ((pod["containers"] as Json[] | undefined) ?? []).map((c) => c["name"]);
    for (const [i, r] of rules.entries()) {
      const codes = r["onExitCodes"] as Json | undefined;
      const conditions = r["onPodConditions"] as Json[] | undefined;
      if ((codes === undefined) === (conditions === undefined)) out.push(`${at}.podFailurePolicy.rules[${i}]: exactly one of onExitCodes and onPodConditions`);
      if (r["action"] === "FailIndex" && spec["backoffLimitPerIndex"] === undefined) out.push(`${at}.podFailurePolicy.rules[${i}]: FailIndex needs backoffLimitPerIndex`);
      if (codes !== undefined) {
        const values = codes["values"] as number[];
        if (values.some((v) => !Number.isInteger(v) || v < 0 || v > 255) || [...values].sort((a, b) => a - b).join() !== values.join() || new Set(values).size !== values.length) {
          out.push(`${at}.podFailurePolicy.rules[${i}].onExitCodes.values: expected sorted, distinct codes 0-255`);
        }
        if (codes["operator"] === "In" && values.includes(0)) out.push(`${at}.podFailurePolicy.rules[${i}]: In may not list 0`);
        if (codes["containerName"] !== undefined && !containers.includes(codes["containerName"])) out.push(`${at}.podFailurePolicy.rules[${i}]: no container ${String(codes["containerName"])}`);
      }
    }
  }
  out.push(...checkPodSpec(pod, `${at}.template.spec`));
  return out;
};

const checkPodSpec = (pod: Json, at: string): string[] => {
  const out: string[] = [];
  const volumes = (pod["volumes"] as Json[] | undefined) ?? [];
  const names = volumes.map((v) => v["name"]);
  if (new Set(names).size !== names.length) out.push(`${at}.volumes: duplicate names`);
  if (pod["automountServiceAccountToken"] !== false) out.push(`${at}: automountServiceAccountToken must be false`);
  const psc = (pod["securityContext"] as Json | undefined) ?? {};
  if (psc["runAsNonRoot"] !== true || typeof psc["runAsUser"] !== "number" || psc["runAsUser"] === 0) out.push(`${at}.securityContext: expected runAsNonRoot with a numeric non-zero runAsUser`);
  if ((psc["seccompProfile"] as Json | undefined)?.["type"] !== "RuntimeDefault") out.push(`${at}.securityContext.seccompProfile: expected RuntimeDefault`);
  for (const [i, c] of ((pod["containers"] as Json[] | undefined) ?? []).entries()) {
    const sc = (c["securityContext"] as Json | undefined) ?? {};
    if (sc["privileged"] === true || sc["allowPrivilegeEscalation"] !== false || sc["readOnlyRootFilesystem"] !== true) {
      out.push(`${at}.containers[${i}].securityContext: expected not privileged, no privilege escalation, a read-only root filesystem`);
    }
    if (JSON.stringify((sc["capabilities"] as Json | undefined)?.["drop"]) !== JSON.stringify(["ALL"])) out.push(`${at}.containers[${i}].securityContext.capabilities: expected drop [ALL]`);
    const mounts = (c["volumeMounts"] as Json[] | undefined) ?? [];
    for (const m of mounts) if (!names.includes(m["name"])) out.push(`${at}.containers[${i}]: volumeMount ${String(m["name"])} names no volume`);
    const paths = mounts.map((m) => m["mountPath"]);
    if (new Set(paths).size !== paths.length) out.push(`${at}.containers[${i}].volumeMounts: duplicate mountPath`);
    const env = ((c["env"] as Json[] | undefined) ?? []).map((e) => e["name"]);
    if (new Set(env).size !== env.length) out.push(`${at}.containers[${i}].env: duplicate names`);
  }
  return out;
};

// ---------------------------------------------------------------------------------------------
// unknown fields
// ---------------------------------------------------------------------------------------------

/** Fields of `value` that `schema` does not declare (the API server drops them silently). */
export const unknownFields = (value: unknown, schema: Schema, at: string): string[] => {
  if (schema["x-kubernetes-preserve-unknown-fields"] === true || value === null || value === undefined) return [];
  if (Array.isArray(value)) return schema.items === undefined ? [] : value.flatMap((v, i) => unknownFields(v, schema.items as Schema, `${at}[${i}]`));
  if (typeof value !== "object") return [];
  const entries = Object.entries(value as Json).filter(([, v]) => v !== undefined);
  if (schema.properties !== undefined) {
    const props = schema.properties;
    return entries.flatMap(([k, v]) => (props[k] === undefined ? [`${at}.${k}: unknown field`] : unknownFields(v, props[k], `${at}.${k}`)));
  }
  if (typeof schema.additionalProperties === "object") return entries.flatMap(([k, v]) => unknownFields(v, schema.additionalProperties as Schema, `${at}.${k}`));
  return [];
};

/** The NetworkPolicy's fields that kubernetes-models lets through (its schemas allow any extra key). */
const unknownNetworkPolicyFields = (spec: Json): string[] => {
  const F = NETWORK_POLICY_FIELDS;
  const selector = (s: unknown, at: string): string[] => (s === undefined ? [] : unknownKeys(s as Json, F.selector, at));
  const rules = (kind: "ingress" | "egress"): string[] =>
    ((spec[kind] as Json[] | undefined) ?? []).flatMap((rule, i) => {
      const at = `NetworkPolicy.spec.${kind}[${i}]`;
      const peers = kind === "ingress" ? "from" : "to";
      return [
        ...unknownKeys(rule, F[kind], at),
        ...((rule[peers] as Json[] | undefined) ?? []).flatMap((peer, j) => [
          ...unknownKeys(peer, F.peer, `${at}.${peers}[${j}]`),
          ...selector(peer["podSelector"], `${at}.${peers}[${j}].podSelector`),
          ...selector(peer["namespaceSelector"], `${at}.${peers}[${j}].namespaceSelector`),
        ]),
        ...((rule["ports"] as Json[] | undefined) ?? []).flatMap((p, j) => unknownKeys(p, F.port, `${at}.ports[${j}]`)),
      ];
    });
  return [...unknownKeys(spec, F.spec, "NetworkPolicy.spec"), ...selector(spec["podSelector"], "NetworkPolicy.spec.podSelector"), ...rules("ingress"), ...rules("egress")];
};

const unknownKeys = (obj: Json, known: readonly string[], at: string): string[] =>
  Object.keys(obj)
    .filter((k) => obj[k] !== undefined && !known.includes(k))
    .map((k) => `${at}.${k}: unknown field`);
