/**
 * What a network plugin that enforces NetworkPolicies (`networking.k8s.io/v1`) decides, for the
 * tests of the printed policies: which pods a label selector selects, and whether a connection
 * from one pod to another is admitted. The API's rules
 * (https://kubernetes.io/docs/concepts/services-networking/network-policies/): a pod selected by
 * no policy of type Ingress admits everything; a pod selected by one admits only what one of
 * those policies' ingress rules allows (a peer in `from` and a port in `ports`; an absent list
 * allows any). Peers by namespace or IP block and named ports are not modelled: they throw.
 */

type Json = Record<string, unknown>;

/** A pod as a policy sees it. */
export interface PolicyPod {
  readonly namespace: string;
  readonly labels: Readonly<Record<string, string>>;
}

/** Whether the label selector `selector` selects `labels` (an empty selector selects every pod). */
export const selects = (selector: Json, labels: Readonly<Record<string, string>>): boolean => {
  const matchLabels = (selector["matchLabels"] as Record<string, string> | undefined) ?? {};
  const expressions = (selector["matchExpressions"] as { key: string; operator: string; values?: string[] }[] | undefined) ?? [];
  return (
    Object.entries(matchLabels).every(([k, v]) => labels[k] === v) &&
    expressions.every(({ key, operator, values = [] }) => {
      const value = labels[key];
      if (operator === "In") return value !== undefined && values.includes(value);
      if (operator === "NotIn") return value === undefined || !values.includes(value);
      if (operator === "Exists") return value !== undefined;
      if (operator === "DoesNotExist") return value === undefined;
      throw new Error(`matchExpressions: unknown operator ${operator}`);
    })
  );
};

/** Whether `policies` admit a connection from `from` to port `port` (`protocol`, TCP by default) of `to`. */
export const admits = (policies: readonly Json[], from: PolicyPod, to: PolicyPod, port: number, protocol = "TCP"): boolean => {
  const guarding = policies.filter((p) => {
    const spec = p["spec"] as Json;
    const types = (spec["policyTypes"] as string[] | undefined) ?? ["Ingress"];
    return (p["metadata"] as Json)["namespace"] === to.namespace && types.includes("Ingress") && selects(spec["podSelector"] as Json, to.labels);
  });
  if (guarding.length === 0) return true;
  return guarding.some((p) =>
    (((p["spec"] as Json)["ingress"] as Json[] | undefined) ?? []).some((rule) => {
      const peers = rule["from"] as Json[] | undefined;
      const ports = rule["ports"] as Json[] | undefined;
      const peerOk = peers === undefined || peers.length === 0 || peers.some((peer) => admitsPeer(peer, from, to.namespace));
      const portOk = ports === undefined || ports.length === 0 || ports.some((p) => admitsPort(p, port, protocol));
      return peerOk && portOk;
    }),
  );
};

const admitsPeer = (peer: Json, from: PolicyPod, policyNamespace: string): boolean => {
  if (peer["namespaceSelector"] !== undefined || peer["ipBlock"] !== undefined) throw new Error("NetworkPolicy peers by namespace or IP block are not modelled");
  // A podSelector alone selects pods of the policy's own namespace.
  return from.namespace === policyNamespace && selects(peer["podSelector"] as Json, from.labels);
};

const admitsPort = (entry: Json, port: number, protocol: string): boolean => {
  if (((entry["protocol"] as string | undefined) ?? "TCP") !== protocol) return false;
  const first = entry["port"];
  if (first === undefined) return true;
  if (typeof first !== "number") throw new Error(`named port ${String(first)}: not modelled`);
  const last = (entry["endPort"] as number | undefined) ?? first;
  return port >= first && port <= last;
};
