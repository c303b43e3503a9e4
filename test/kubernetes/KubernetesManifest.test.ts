import { isLeft, isRight } from "fp-ts/lib/Either.js";
import { describe, expect, it } from "vitest";
import { parseAllDocuments, parse as parseYaml } from "yaml";

import { decodePodEnvironment, POD_ENV, podTfConfigOf } from "../../src/cluster/PodClusterResolver.js";
import { kubernetesManifest, type KubernetesManifestOptions } from "../../src/kubernetes/KubernetesManifest.js";
import { DEFAULT_RESOURCES } from "../../src/kubernetes/manifestDefaults.js";
import { CLUSTER_SETTINGS_ENV } from "../../src/runtime/index.js";
import { cliInProcess } from "../util/cli.js";
import { checkManifest, jobSetSchema, podTemplates, qosClass, unknownFields } from "./manifestChecks.js";
import { admits, selects } from "./networkPolicy.js";
import { indexedJobPodLabels, jobSetPodLabels } from "./podLabels.js";

type Json = Record<string, unknown>;

/** `manifest kubernetes` in this process: its exit code, stderr and the printed objects. */
const manifest = async (args: readonly string[]): Promise<{ code: number; stderr: string; objects: Json[] }> => {
  const r = await cliInProcess(["manifest", "kubernetes", ...args]);
  const objects = r.code === 0 ? parseAllDocuments(r.stdout).map((d) => d.toJS() as Json) : [];
  return { code: r.code ?? -1, stderr: r.stderr, objects };
};

const byKind = (objects: readonly Json[], kind: string): Json[] => objects.filter((o) => o["kind"] === kind);
const podSpecs = (objects: readonly Json[]): { job: string | undefined; pods: number; spec: Json }[] => [
  ...byKind(objects, "JobSet").flatMap((js) =>
    ((js["spec"] as Json)["replicatedJobs"] as Json[]).map((rj) => {
      const jobSpec = (rj["template"] as Json)["spec"] as Json;
      return { job: rj["name"] as string, pods: jobSpec["completions"] as number, spec: (jobSpec["template"] as Json)["spec"] as Json };
    }),
  ),
  ...byKind(objects, "Job").map((j) => ({ job: undefined, pods: (j["spec"] as Json)["completions"] as number, spec: ((j["spec"] as Json)["template"] as Json)["spec"] as Json })),
];
const container = (spec: Json): Json => (spec["containers"] as Json[])[0] as Json;

// Every manifest the command prints: JobSet and indexed Job, with and without TLS, etcd and a
// token, for a YAML configuration, a JSON one and a custom command.
const modes = [[], ["--indexed-job"]] as const;
const security = [[], ["--tls-secret", "ms-tls", "--token-secret", "ms-token"]] as const;
const coordination = [[], ["--etcd", "http://etcd-0.etcd:2379,http://etcd-1.etcd:2379"]] as const;
const programs = [
  ["examples/tfjs-classifier.yaml", "--checkpoint-pvc", "ckpt", "--cli", "src/cli/main.ts"],
  ["test/kubernetes/fixtures/job.json", "--checkpoint-pvc", "ckpt", "--cpu", "500m", "--memory", "2Gi"],
  ["--checkpoint-pvc", "ckpt", "--checkpoint-pvc-on-workers", "--", "node", "train.mjs", "--epochs", "3"],
] as const;
const variants = modes.flatMap((m) => security.flatMap((s) => coordination.flatMap((c) => programs.map((p) => [...m, ...s, ...c, ...p]))));

describe("manifest kubernetes: every variant validates", () => {
  it.each(variants.map((v) => [v.join(" "), v] as const))("%s", async (_, v) => {
    const { code, stderr, objects } = await manifest(["--workers", "3", "--image", "registry.example.com/ml/trainer:1.2", ...v]);
    // The one warning left: a cluster that accepts any caller.
    expect({ code, stderr }).toEqual({ code: 0, stderr: v.includes("--token-secret") ? "" : expect.stringMatching(/^warning: no --token-secret: [^\n]*\n$/) });
    expect(checkManifest(objects)).toEqual([]);
    // Guarded and sized by default, whatever else the flags say.
    expect(byKind(objects, "NetworkPolicy")).toHaveLength(1);
    for (const { spec } of podSpecs(objects)) expect(qosClass(spec)).toBe("Burstable");
    // Secrets are named, never made or printed.
    expect(byKind(objects, "Secret")).toEqual([]);
    for (const { spec } of podSpecs(objects)) {
      const env = container(spec)["env"] as Json[];
      const names = env.map((e) => e["name"]);
      // What the pod resolver reads, the manifest sets (JOB_COMPLETION_INDEX comes from the Job controller).
      for (const name of Object.values(POD_ENV).filter((n) => n !== POD_ENV.completionIndex && n !== POD_ENV.dnsTimeoutSecs && n !== POD_ENV.replicatedJob && n !== POD_ENV.jobIndex && n !== POD_ENV.restartAttempt)) {
        expect(names).toContain(name);
      }
      const settings = env.find((e) => e["name"] === CLUSTER_SETTINGS_ENV);
      const command = v.includes("--");
      expect(settings !== undefined).toBe(command);
      const cluster = command ? (JSON.parse(settings?.["value"] as string) as Json) : ((parseYaml(Object.values(byKind(objects, "ConfigMap")[0]?.["data"] as Json)[0] as string) as Json)["cluster"] as Json);
      expect(cluster["bindAddress"]).toBe("0.0.0.0");
      expect(cluster["backend"]).toBe(v.includes("--etcd") ? "etcd" : undefined);
      expect(cluster["tokenFile"] !== undefined).toBe(v.includes("--token-secret"));
      expect(cluster["tls"] !== undefined).toBe(v.includes("--tls-secret"));
    }
  });
});

describe("the pods find their cluster from what Kubernetes gives them", () => {
  /** The environment Kubernetes gives pod `index` of `job`: the manifest's values, the Downward API's labels, the completion index. */
  const podEnv = (spec: Json, labels: Record<string, string>, namespace: string, index: number): NodeJS.ProcessEnv => {
    const out: NodeJS.ProcessEnv = { JOB_COMPLETION_INDEX: String(index) };
    for (const e of container(spec)["env"] as Json[]) {
      const from = (e["valueFrom"] as Json | undefined)?.["fieldRef"] as Json | undefined;
      if (from === undefined) out[e["name"] as string] = e["value"] as string;
      else if (from["fieldPath"] === "metadata.namespace") out[e["name"] as string] = namespace;
      else {
        const label = /^metadata\.labels\['(.+)'\]$/.exec(from["fieldPath"] as string)?.[1] as string;
        expect(labels[label], `label ${label}`).toBeDefined();
        out[e["name"] as string] = labels[label];
      }
    }
    return out;
  };

  it("JobSet: every pod's TF_CONFIG names the pods by JobSet's hostnames, and its own task", async () => {
    const { objects } = await manifest(["examples/tfjs-classifier.yaml", "--workers", "4", "--image", "trainer:1", "--name", "spirals", "--namespace", "ml", "--port", "2345"]);
    const jobset = byKind(objects, "JobSet")[0] as Json;
    const subdomain = ((jobset["spec"] as Json)["network"] as Json)["subdomain"] as string;
    const seen: string[] = [];
    for (const { job, pods, spec } of podSpecs(objects)) {
      for (let i = 0; i < pods; i++) {
        // The labels JobSet puts on its pods (kubernetes-sigs/jobset: label = annotation, prefix jobset.sigs.k8s.io/).
        const labels = jobSetPodLabels({ jobSet: "spirals", replicatedJob: job as string, templateLabels: undefined, completionIndex: i, restartAttempt: 2 });
        const pod = decodePodEnvironment(podEnv(spec, labels, "ml", i));
        if (isLeft(pod)) throw new Error(pod.left.map((p) => p.message).join("; "));
        const tf = podTfConfigOf(pod.right as NonNullable<typeof pod.right>);
        const hostname = `spirals-${job as string}-0-${i}`;
        expect(tf.task).toEqual({ type: job, index: i });
        expect(pod.right?.restartAttempt).toBe(2);
        expect((tf.cluster as Record<string, string[]>)[job as string]?.[i]).toBe(`${hostname}.${subdomain}.ml.svc:${String(((container(spec)["ports"] as Json[])[0] as Json)["containerPort"])}`);
        seen.push(`${tf.task.type}:${tf.task.index}`);
      }
    }
    expect(seen).toEqual(["chief:0", "worker:0", "worker:1", "worker:2"]);
  });

  it("indexed Job: index 0 is the chief; the Service is the pods' subdomain and selects them", async () => {
    const { objects } = await manifest(["examples/tfjs-classifier.yaml", "--workers", "3", "--image", "trainer:1", "--indexed-job", "--name", "spirals"]);
    const service = byKind(objects, "Service")[0] as Json;
    const [{ spec, pods }] = podSpecs(objects) as [ReturnType<typeof podSpecs>[number]];
    const template = ((byKind(objects, "Job")[0] as Json)["spec"] as Json)["template"] as Json;
    expect(spec["subdomain"]).toBe((service["metadata"] as Json)["name"]);
    expect(((service["spec"] as Json)["selector"] as Record<string, string>)).toEqual(expect.objectContaining({}));
    for (const [k, val] of Object.entries((service["spec"] as Json)["selector"] as Record<string, string>)) expect(((template["metadata"] as Json)["labels"] as Json)[k]).toBe(val);
    const tasks = Array.from({ length: pods }, (_, i) => {
      const pod = decodePodEnvironment(podEnv(spec, {}, "default", i));
      if (!isRight(pod) || pod.right === undefined) throw new Error("no pod environment");
      const tf = podTfConfigOf(pod.right);
      return { task: tf.task, chief: (tf.cluster as Record<string, string[]>)["chief"]?.[0] };
    });
    expect(tasks.map((t) => t.task)).toEqual([{ type: "chief", index: 0 }, { type: "worker", index: 0 }, { type: "worker", index: 1 }]);
    // The Job controller's hostname of index 0 is <job>-0.
    expect(new Set(tasks.map((t) => t.chief))).toEqual(new Set(["spirals-0.spirals.default.svc:2222"]));
  });
});

describe("what the manifest decides", () => {
  it("JobSet: one chief job and one worker job; 42, 43 and disruption restart uncounted, 2 fails, the rest counts", async () => {
    const { objects } = await manifest(["examples/tfjs-classifier.yaml", "--workers", "3", "--image", "trainer:1", "--max-restarts", "5"]);
    const spec = (byKind(objects, "JobSet")[0] as Json)["spec"] as Json;
    expect((spec["replicatedJobs"] as Json[]).map((rj) => [rj["name"], rj["replicas"], ((rj["template"] as Json)["spec"] as Json)["completions"]])).toEqual([
      ["chief", 1, 1],
      ["worker", 1, 2],
    ]);
    expect(spec["network"]).toEqual({ enableDNSHostnames: true, subdomain: "tfjs-classifier", publishNotReadyAddresses: true });
    const policy = spec["failurePolicy"] as Json;
    expect(policy["maxRestarts"]).toBe(5);
    const rules = policy["rules"] as Json[];
    // Which rule a Job's failure message meets first, as the JobSet controller matches it (RE2 ⊂ JS here).
    const actionFor = (message: string): string =>
      (rules.find((r) => (r["onJobFailureReasons"] as string[]).includes("PodFailurePolicy") && (r["onJobFailureMessagePatterns"] as string[]).some((p) => new RegExp(p).test(message)))?.["action"] as string | undefined) ?? "RestartJobSet";
    const exitMessage = (code: number, index: number): string => `Container trainer for pod default/tfjs-classifier-worker-0-1-x7k2p failed with exit code ${code} matching FailJob rule at index ${index}`;
    expect(actionFor(exitMessage(42, 1))).toBe("RestartJobSetAndIgnoreMaxRestarts");
    // A chief lost during a preemption: nothing the job did, and it resumes from the last checkpoint.
    expect(actionFor(exitMessage(43, 1))).toBe("RestartJobSetAndIgnoreMaxRestarts");
    expect(actionFor("Pod default/tfjs-classifier-chief-0-0-abcde has condition DisruptionTarget matching FailJob rule at index 0")).toBe("RestartJobSetAndIgnoreMaxRestarts");
    expect(actionFor(exitMessage(2, 2))).toBe("FailJobSet");
    // The code is in the pattern with its surrounding words: 2 never matches 42, nor 42 a 142.
    expect(actionFor(exitMessage(142, 2))).toBe("RestartJobSet");
    expect(actionFor(exitMessage(143, 2))).toBe("RestartJobSet");
    expect(actionFor(exitMessage(12, 2))).toBe("RestartJobSet");
    for (const { spec: pod } of podSpecs(objects)) expect(pod["restartPolicy"]).toBe("Never");
    const jobSpec = (((spec["replicatedJobs"] as Json[])[0] as Json)["template"] as Json)["spec"] as Json;
    expect(jobSpec["backoffLimit"]).toBe(0);
    // The Job fails with those messages only through these rules, in this order.
    expect((jobSpec["podFailurePolicy"] as Json)["rules"]).toEqual([
      { action: "FailJob", onPodConditions: [{ type: "DisruptionTarget", status: "True" }] },
      { action: "FailJob", onExitCodes: { containerName: "trainer", operator: "In", values: [42, 43] } },
      { action: "FailJob", onExitCodes: { containerName: "trainer", operator: "In", values: [2] } },
    ]);
  });

  it("indexed Job: Ignore 42, 43 and disruption, FailJob on 2, the rest against backoffLimit", async () => {
    const { objects } = await manifest(["examples/tfjs-classifier.yaml", "--workers", "2", "--image", "trainer:1", "--indexed-job", "--max-restarts", "4"]);
    const spec = (byKind(objects, "Job")[0] as Json)["spec"] as Json;
    expect(spec["backoffLimit"]).toBe(4);
    expect((spec["podFailurePolicy"] as Json)["rules"]).toEqual([
      { action: "Ignore", onPodConditions: [{ type: "DisruptionTarget", status: "True" }] },
      { action: "Ignore", onExitCodes: { containerName: "trainer", operator: "In", values: [42, 43] } },
      { action: "FailJob", onExitCodes: { containerName: "trainer", operator: "In", values: [2] } },
    ]);
    expect((byKind(objects, "Service")[0] as Json)["spec"]).toEqual(expect.objectContaining({ clusterIP: "None", publishNotReadyAddresses: true }));
  });

  it("the checkpoint claim is on the chief only, read-only on the workers when asked; scratch emptyDirs where the trainer writes", async () => {
    const volumesOf = (spec: Json): Record<string, Json> => Object.fromEntries((spec["volumes"] as Json[]).map((v) => [v["name"], v]));
    const mountsOf = (spec: Json): Record<string, Json> => Object.fromEntries((container(spec)["volumeMounts"] as Json[]).map((m) => [m["name"], m]));
    const plain = podSpecs((await manifest(["test/kubernetes/fixtures/job.json", "--workers", "2", "--image", "trainer:1", "--checkpoint-pvc", "ckpt"])).objects);
    const [chief, worker] = plain as [ReturnType<typeof podSpecs>[number], ReturnType<typeof podSpecs>[number]];
    expect(volumesOf(chief.spec)["checkpoints"]).toEqual({ name: "checkpoints", persistentVolumeClaim: { claimName: "ckpt" } });
    expect(mountsOf(chief.spec)["checkpoints"]?.["mountPath"]).toBe("/app/test/kubernetes/fixtures/runs/linear");
    expect(volumesOf(worker.spec)["checkpoints"]).toBeUndefined();
    // The summaries (outside the checkpoint directory) on an emptyDir of the chief; /tmp writable everywhere.
    expect(Object.values(mountsOf(chief.spec)).map((m) => m["mountPath"])).toEqual(expect.arrayContaining(["/tmp", "/app/test/kubernetes/fixtures/logs/linear", "/app/test/kubernetes/fixtures/runs"]));
    expect(Object.values(mountsOf(worker.spec)).map((m) => m["mountPath"])).not.toContain("/app/test/kubernetes/fixtures/logs/linear");
    const rwx = podSpecs((await manifest(["--workers", "2", "--image", "trainer:1", "--checkpoint-pvc", "ckpt", "--checkpoint-pvc-on-workers", "--checkpoint-dir", "/ckpt/run", "--", "node", "loop.mjs"])).objects);
    expect(volumesOf((rwx[1] as { spec: Json }).spec)["checkpoints"]).toEqual({ name: "checkpoints", persistentVolumeClaim: { claimName: "ckpt", readOnly: true } });
    expect(mountsOf((rwx[1] as { spec: Json }).spec)["checkpoints"]).toEqual({ name: "checkpoints", mountPath: "/ckpt/run", readOnly: true });
    // The parent of the checkpoint directory is writable on every pod (a custom loop's workertemp_<id>).
    expect(mountsOf((rwx[1] as { spec: Json }).spec)["scratch-0"]?.["mountPath"]).toBe("/ckpt");
  });

  it("the configuration reaches the pods as a ConfigMap at its path in the image, with the platform and settings written in", async () => {
    const { objects } = await manifest(["test/kubernetes/fixtures/job.json", "--workers", "2", "--image", "trainer:1", "--token-secret", "tok", "--workdir", "/srv/app"]);
    const configMap = byKind(objects, "ConfigMap")[0] as Json;
    const text = (configMap["data"] as Record<string, string>)["job.json"] as string;
    const config = JSON.parse(text) as Json;
    expect(config["cluster"]).toEqual({ timeouts: { heartbeatTimeoutSecs: 15 }, bindAddress: "0.0.0.0", tokenFile: "/etc/monitored-session/token/token" });
    expect(config["preemption"]).toEqual({ gracePeriodSecs: 20, platform: "kubernetes" });
    const { spec } = podSpecs(objects)[0] as { spec: Json };
    expect((container(spec)["volumeMounts"] as Json[]).find((m) => m["name"] === "config")).toEqual({ name: "config", mountPath: "/srv/app/test/kubernetes/fixtures/job.json", subPath: "job.json", readOnly: true });
    expect(container(spec)["command"]).toEqual(["node", "node_modules/monitored-session/dist/src/cli/main.js", "run", "test/kubernetes/fixtures/job.json"]);
    // The token Secret is mounted as a file readable by the pod's group, never as an environment variable.
    expect((spec["volumes"] as Json[]).find((v) => v["name"] === "cluster-token")).toEqual({ name: "cluster-token", secret: { secretName: "tok", defaultMode: 0o440, items: [{ key: "token", path: "token" }] } });
    expect(JSON.stringify(container(spec)["env"])).not.toContain("secretKeyRef");
  });

  it("terminationGracePeriodSeconds: save time × 1.5 + heartbeat timeout + preemption.gracePeriodSecs, at least 30; --grace-secs overrides", async () => {
    const grace = async (args: readonly string[]): Promise<unknown[]> =>
      podSpecs((await manifest(["--workers", "2", "--image", "trainer:1", ...args])).objects).map(({ spec }) => [
        spec["terminationGracePeriodSeconds"],
        (container(spec)["env"] as Json[]).find((e) => e["name"] === "TERMINATION_GRACE_PERIOD_SECONDS")?.["value"],
      ]);
    // job.json: heartbeat timeout 15 s, preemption.gracePeriodSecs 20: 10 × 1.5 + 15 + 20 = 50.
    expect(await grace(["test/kubernetes/fixtures/job.json"])).toEqual([[50, "50"], [50, "50"]]);
    expect(await grace(["test/kubernetes/fixtures/job.json", "--save-secs", "40"])).toEqual([[95, "95"], [95, "95"]]);
    expect(await grace(["examples/tfjs-classifier.yaml"])).toEqual([[30, "30"], [30, "30"]]);
    expect(await grace(["examples/tfjs-classifier.yaml", "--grace-secs", "240"])).toEqual([[240, "240"], [240, "240"]]);
  });
});

describe("safe by default: a NetworkPolicy guards the pods, and they request CPU and memory", () => {
  const policyOf = (objects: readonly Json[]): Json => {
    const policies = byKind(objects, "NetworkPolicy");
    expect(policies).toHaveLength(1);
    return policies[0] as Json;
  };

  it.each([
    ["JobSet", []],
    ["indexed Job", ["--indexed-job"]],
  ] as const)("%s, with and without --token-secret: the policy comes first and selects exactly the pod template's labels, from the same pods", async (_, mode) => {
    for (const token of [[], ["--token-secret", "tok"]]) {
      const { code, stderr, objects } = await manifest(["examples/tfjs-classifier.yaml", "--workers", "3", "--image", "trainer:1", "--checkpoint-pvc", "ckpt", ...mode, ...token]);
      expect(code).toBe(0);
      expect(stderr).toBe(token.length === 0 ? "warning: no --token-secret: the tasks accept any connection (no token, no TLS); the NetworkPolicy admits only this job's pods, and only where the cluster's network plugin enforces NetworkPolicies; give --token-secret <secret>\n" : "");
      // Created before the pods it guards.
      expect(objects[0]?.["kind"]).toBe("NetworkPolicy");
      const policy = policyOf(objects);
      expect(policy["apiVersion"]).toBe("networking.k8s.io/v1");
      const spec = policy["spec"] as Json;
      const templates = podTemplates(objects);
      expect(templates.length).toBeGreaterThan(0);
      for (const t of templates) {
        expect(spec["podSelector"]).toEqual({ matchLabels: t.labels });
        expect(spec["ingress"]).toEqual([{ from: [{ podSelector: { matchLabels: t.labels } }] }]);
      }
      expect(spec["policyTypes"]).toEqual(["Ingress"]);
    }
  });

  it("JobSet: of the pods JobSet creates, the policy admits this job's own to each other on the cluster port and the ring's, and nothing else", async () => {
    const { objects } = await manifest(["examples/tfjs-classifier.yaml", "--workers", "4", "--image", "trainer:1", "--name", "spirals", "--namespace", "ml", "--port", "2345", "--token-secret", "tok"]);
    const other = (await manifest(["examples/tfjs-classifier.yaml", "--workers", "2", "--image", "trainer:1", "--name", "spirals-2", "--namespace", "ml"])).objects;
    const policies = byKind(objects, "NetworkPolicy");
    // The pods as JobSet labels them: the template's labels, and JobSet's and the Job controller's.
    const podsOf = (objs: readonly Json[], namespace: string): { namespace: string; labels: Record<string, string> }[] =>
      byKind(objs, "JobSet").flatMap((js) =>
        ((js["spec"] as Json)["replicatedJobs"] as Json[]).flatMap((rj) => {
          const jobSpec = (rj["template"] as Json)["spec"] as Json;
          const templateLabels = ((jobSpec["template"] as Json)["metadata"] as Json)["labels"] as Record<string, string>;
          return Array.from({ length: jobSpec["completions"] as number }, (_, i) => ({ namespace, labels: jobSetPodLabels({ jobSet: (js["metadata"] as Json)["name"] as string, replicatedJob: rj["name"] as string, templateLabels, completionIndex: i, restartAttempt: 0 }) }));
        }),
      );
    const pods = podsOf(objects, "ml");
    expect(pods).toHaveLength(4);
    // Compared as objects: the selector against each pod's labels.
    for (const pod of pods) expect(selects(((policies[0] as Json)["spec"] as Json)["podSelector"] as Json, pod.labels)).toBe(true);
    const port = ((container((podSpecs(objects)[0] as { spec: Json }).spec)["ports"] as Json[])[0] as Json)["containerPort"] as number;
    expect(port).toBe(2345);
    for (const from of pods) {
      for (const to of pods) {
        expect(admits(policies, from, to, port)).toBe(true);
        // A data-parallel group's ring: a port each task picks at start.
        expect(admits(policies, from, to, 45_000)).toBe(true);
      }
    }
    const outsiders = [
      ...podsOf(other, "ml"), // another job's pods in the same namespace
      { namespace: "ml", labels: {} }, // any other pod of the namespace
      { namespace: "ml", labels: { "app.kubernetes.io/instance": "spirals" } }, // one of our two labels only
      ...pods.map((p) => ({ ...p, namespace: "default" })), // the same labels in another namespace
    ];
    for (const from of outsiders) for (const to of pods) expect(admits(policies, from, to, port), JSON.stringify(from)).toBe(false);
  });

  it("indexed Job: the same, for the pods the Job controller creates", async () => {
    const { objects } = await manifest(["examples/tfjs-classifier.yaml", "--workers", "3", "--image", "trainer:1", "--indexed-job", "--name", "spirals"]);
    const policies = byKind(objects, "NetworkPolicy");
    const [template] = podTemplates(objects) as [ReturnType<typeof podTemplates>[number]];
    const pods = [0, 1, 2].map((i) => ({ namespace: "default", labels: indexedJobPodLabels("spirals", template.labels, i) }));
    for (const from of pods) for (const to of pods) expect(admits(policies, from, to, 2222)).toBe(true);
    const stranger = { namespace: "default", labels: indexedJobPodLabels("spirals-2", { ...template.labels, "app.kubernetes.io/instance": "spirals-2" }, 0) };
    for (const to of pods) expect(admits(policies, stranger, to, 2222)).toBe(false);
  });

  it(`every pod requests cpu ${DEFAULT_RESOURCES.cpu} and memory ${DEFAULT_RESOURCES.memory} (its memory limit too, no CPU limit: Burstable); --cpu and --memory override each alone`, async () => {
    const resources = async (args: readonly string[]): Promise<{ header: string; resources: unknown[] }> => {
      const r = await cliInProcess(["manifest", "kubernetes", "examples/tfjs-classifier.yaml", "--workers", "3", "--image", "trainer:1", ...args]);
      const objects = parseAllDocuments(r.stdout).map((d) => d.toJS() as Json);
      for (const { spec } of podSpecs(objects)) expect(qosClass(spec)).toBe("Burstable");
      return { header: r.stdout.split("\napiVersion")[0] as string, resources: podSpecs(objects).map(({ spec }) => container(spec)["resources"]) };
    };
    const plain = await resources([]);
    expect(plain.resources).toEqual([
      { requests: { cpu: "1", memory: "2Gi" }, limits: { memory: "2Gi" } },
      { requests: { cpu: "1", memory: "2Gi" }, limits: { memory: "2Gi" } },
    ]);
    expect(plain.header).toContain("# Each pod requests cpu 1 and memory 2Gi (the memory limit too): QoS class Burstable.");
    expect((await resources(["--cpu", "4"])).resources[0]).toEqual({ requests: { cpu: "4", memory: "2Gi" }, limits: { memory: "2Gi" } });
    expect((await resources(["--memory", "8Gi", "--indexed-job"])).resources).toEqual([{ requests: { cpu: "1", memory: "8Gi" }, limits: { memory: "8Gi" } }]);
  });

  it("kubernetesManifest: bestEffort requests nothing (BestEffort), and not beside cpu or memory; networkPolicy false leaves the policy out", () => {
    const base: KubernetesManifestOptions = { name: "demo", namespace: "default", mode: "jobset", workers: 2, image: "trainer:1", workdir: "/app", program: { kind: "command", command: ["node", "x.mjs"], clusterSettings: {} }, port: 2222, maxRestarts: 1, terminationGracePeriodSeconds: 30 };
    const objects = (o: Partial<KubernetesManifestOptions>): Json[] => {
      const r = kubernetesManifest({ ...base, ...o });
      if (isLeft(r)) throw new Error(r.left.join("; "));
      return JSON.parse(JSON.stringify(r.right)) as Json[];
    };
    for (const { spec } of podSpecs(objects({ bestEffort: true }))) {
      expect(container(spec)["resources"]).toBeUndefined();
      expect(qosClass(spec)).toBe("BestEffort");
    }
    expect(objects({}).map((o) => o["kind"])).toEqual(["NetworkPolicy", "JobSet"]);
    expect(objects({ networkPolicy: false }).map((o) => o["kind"])).toEqual(["JobSet"]);
    const problems = (o: Partial<KubernetesManifestOptions>): readonly string[] => {
      const r = kubernetesManifest({ ...base, ...o });
      return isLeft(r) ? r.left : [];
    };
    expect(problems({ bestEffort: true, cpu: "2" })).toEqual(["--best-effort requests no resources: give either it or --cpu, not both"]);
    expect(problems({ bestEffort: true, cpu: "2", memory: "4Gi" })).toEqual(["--best-effort requests no resources: give either it or --cpu and --memory, not both"]);
  });
});

describe("own checks catch what the schema validators miss", () => {
  const base: KubernetesManifestOptions = {
    name: "demo",
    namespace: "default",
    mode: "jobset",
    workers: 2,
    image: "trainer:1",
    workdir: "/app",
    program: { kind: "command", command: ["node", "x.mjs"], clusterSettings: {} },
    port: 2222,
    maxRestarts: 1,
    terminationGracePeriodSeconds: 30,
  };
  const objectsOf = (o: KubernetesManifestOptions): Json[] => {
    const r = kubernetesManifest(o);
    if (isLeft(r)) throw new Error(r.left.join("; "));
    return JSON.parse(JSON.stringify(r.right)) as Json[];
  };

  it("the generated objects pass; each corruption is reported", () => {
    for (const mode of ["jobset", "indexed-job"] as const) {
      for (const variant of [{}, { bestEffort: true, networkPolicy: false }, { cpu: "4", memory: "16Gi" }]) expect(checkManifest(objectsOf({ ...base, mode, ...variant }))).toEqual([]);
    }
    const jobset = objectsOf({ ...base, networkPolicy: false });
    const firstJob = (objs: Json[]): Json => (((((objs[0] as Json)["spec"] as Json)["replicatedJobs"] as Json[])[0] as Json)["template"] as Json)["spec"] as Json;
    const pod = (objs: Json[]): Json => (firstJob(objs)["template"] as Json)["spec"] as Json;
    const corrupt = (edit: (objs: Json[]) => void): string[] => {
      const objs = structuredClone(jobset);
      edit(objs);
      return checkManifest(objs);
    };
    // JobSet's default restartPolicy, rejected with a podFailurePolicy: not a schema error.
    expect(corrupt((o) => delete pod(o)["restartPolicy"])).toEqual([expect.stringContaining("needs template.spec.restartPolicy Never")]);
    expect(corrupt((o) => (pod(o)["restartPolicy"] = "OnFailure"))).toEqual([expect.stringContaining("needs template.spec.restartPolicy Never")]);
    // A misspelt field is dropped by the API server: the schemas accept it.
    expect(corrupt((o) => (pod(o)["terminationGracePeriod"] = 30))).toEqual([expect.stringContaining("terminationGracePeriod: unknown field")]);
    expect(corrupt((o) => (((o[0] as Json)["spec"] as Json)["failurePolicy"] as Json)["maxRestart"] = 3)).toEqual([expect.stringContaining("failurePolicy.maxRestart: unknown field")]);
    expect(corrupt((o) => (((firstJob(o)["podFailurePolicy"] as Json)["rules"] as Json[])[1] as Json)["onExitCodes"] = { containerName: "trainer", operator: "In", values: [0, 42] })).toEqual([
      expect.stringContaining("In may not list 0"),
    ]);
    expect(corrupt((o) => (((((o[0] as Json)["spec"] as Json)["failurePolicy"] as Json)["rules"] as Json[])[0] as Json)["name"] = "restart on 42")).toEqual([
      expect.stringContaining("does not match the webhook's pattern"),
    ]);
    // What the schemas do check, through them: a wrong type in the embedded Job, a bad enum in the JobSet.
    expect(corrupt((o) => (firstJob(o)["completions"] = "1"))).toEqual([
      "JobSet: CRD schema: /spec/replicatedJobs/0/template/spec/completions must be integer",
      "JobSet.spec.replicatedJobs[0].template: Job: kubernetes-models: data/spec/completions must be integer",
    ]);
    expect(corrupt((o) => ((((o[0] as Json)["spec"] as Json)["failurePolicy"] as Json)["restartStrategy"] = "Sometimes"))).toEqual([expect.stringContaining("CRD schema: /spec/failurePolicy/restartStrategy")]);
    expect(corrupt((o) => (((pod(o)["containers"] as Json[])[0] as Json)["securityContext"] as Json)["allowPrivilegeEscalation"] = true)).toEqual([expect.stringContaining("no privilege escalation")]);
    expect(corrupt((o) => delete pod(o)["automountServiceAccountToken"])).toEqual([expect.stringContaining("automountServiceAccountToken")]);
  });

  it("indexed Job: the Service and the Job go through kubernetes-models and our checks too", () => {
    const objs = objectsOf({ ...base, mode: "indexed-job", networkPolicy: false });
    const [service, job] = objs as [Json, Json];
    const corrupt = (edit: () => void, undo: () => void): string[] => {
      edit();
      const problems = checkManifest(objs);
      undo();
      return problems;
    };
    const ports = (service["spec"] as Json)["ports"] as Json[];
    expect(corrupt(() => ((ports[0] as Json)["port"] = "grpc"), () => ((ports[0] as Json)["port"] = 2222))).toEqual([expect.stringContaining("Service: kubernetes-models: data/spec/ports/0/port must be integer")]);
    expect(corrupt(() => ((service["spec"] as Json)["headless"] = true), () => delete (service["spec"] as Json)["headless"])).toEqual(["Service.spec.headless: unknown field"]);
    const spec = job["spec"] as Json;
    expect(corrupt(() => (spec["backoffLimit"] = -1.5), () => (spec["backoffLimit"] = 1))).toEqual([expect.stringContaining("Job: kubernetes-models: data/spec/backoffLimit must be integer")]);
    expect(corrupt(() => (spec["podFailurePolicy"] = { rules: [{ action: "Ignore", onExitCodes: { operator: "In", values: [42, 2] } }] }), () => undefined)).toEqual([
      "Job.spec.podFailurePolicy.rules[0].onExitCodes.values: expected sorted, distinct codes 0-255",
    ]);
  });

  it("the NetworkPolicy goes through kubernetes-models and our checks: it must guard every pod and let them reach each other", () => {
    for (const mode of ["jobset", "indexed-job"] as const) {
      const objs = objectsOf({ ...base, mode });
      const spec = (byKind(objs, "NetworkPolicy")[0] as Json)["spec"] as Json;
      const corrupt = (edit: (spec: Json) => void): string[] => {
        const saved = structuredClone(spec);
        edit(spec);
        const problems = checkManifest(objs);
        for (const k of Object.keys(spec)) delete spec[k];
        Object.assign(spec, saved);
        return problems;
      };
      expect(corrupt((s) => (((s["podSelector"] as Json)["matchLabels"] as Json)["app.kubernetes.io/instance"] = 7))).toEqual(
        expect.arrayContaining([expect.stringContaining("NetworkPolicy: kubernetes-models: data/spec/podSelector/matchLabels/app.kubernetes.io~1instance must be string")]),
      );
      expect(corrupt((s) => (s["podSelecter"] = s["podSelector"]))).toEqual(["NetworkPolicy.spec.podSelecter: unknown field"]);
      expect(corrupt((s) => ((((s["ingress"] as Json[])[0] as Json)["from"] as Json[])[0] as Json)["podSelector"] = { matchLabels: { app: "x" } })).toEqual(
        expect.arrayContaining([expect.stringMatching(/^NetworkPolicy: the pods of .* cannot reach port 2222 of /)]),
      );
      // A selector the pods do not carry guards nothing, and nothing says so but this check.
      expect(corrupt((s) => (s["podSelector"] = { matchLabels: { "jobset.sigs.k8s.io/jobset-name": "other" } }))).toEqual(
        expect.arrayContaining([expect.stringMatching(/^NetworkPolicy: no policy selects .*: its pods are not guarded$/)]),
      );
      // Only the server's port: a data-parallel group's ring (on a port picked at start) is cut off.
      expect(corrupt((s) => (((s["ingress"] as Json[])[0] as Json)["ports"] = [{ protocol: "TCP", port: 2222 }]))).toEqual(
        expect.arrayContaining([expect.stringMatching(/cannot reach port 32768 of /), expect.stringMatching(/cannot reach port 60999 of /)]),
      );
    }
  });

  it("the unknown-field walk follows the CRD schema into the pod template", () => {
    expect(unknownFields({ spec: { replicatedJobs: [{ name: "a", template: { spec: { template: { spec: { containers: [{ name: "c", imagePullPolicyy: "x" }] } } } } }] } }, jobSetSchema, "JobSet")).toEqual([
      "JobSet.spec.replicatedJobs[0].template.spec.template.spec.containers[0].imagePullPolicyy: unknown field",
    ]);
  });

  it("options Kubernetes would reject are refused, each with the fix", () => {
    const problems = (o: Partial<KubernetesManifestOptions>): readonly string[] => {
      const r = kubernetesManifest({ ...base, ...o });
      return isLeft(r) ? r.left : [];
    };
    expect(problems({ workers: 0 })).toEqual([expect.stringContaining("--workers 0: expected an integer >= 1")]);
    expect(problems({ name: "a".repeat(60) })).toEqual([expect.stringMatching(/the pod hostname a+-worker-0-0 is longer than 63 characters; use a name of at most 52/)]);
    expect(problems({ name: "9lives" })).toEqual([expect.stringContaining("DNS-1035")]);
    expect(problems({ image: "Trainer:latest" })).toEqual([expect.stringContaining("--image")]);
    expect(problems({ image: "registry.example.com:5000/a/b@sha256:" + "a".repeat(64) })).toEqual([]);
    expect(problems({ memory: "4 GB" })).toEqual([expect.stringContaining("--memory")]);
    expect(problems({ tokenSecret: "My_Secret" })).toEqual([expect.stringContaining("--token-secret")]);
  });
});
