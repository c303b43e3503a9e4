import { describe, expect, it } from "vitest";

import { manifestInProcess } from "../kubernetes/manifestInProcess.js";
import { cliInProcess } from "../util/cli.js";

const image = ["--image", "registry.example.com/ml/trainer:1.2"];

describe("manifest kubernetes: bad options exit 2 with one line naming the problem", () => {
  it.each([
    ["0 workers", ["examples/tfjs-classifier.yaml", "--workers", "0", ...image], /^error: option '--workers <n>' argument '0' is invalid\. expected an integer >= 1\n$/],
    ["a bad image name", ["examples/tfjs-classifier.yaml", "--workers", "2", "--image", "Registry/Trainer:latest"], /^monitored-session manifest kubernetes: --image "Registry\/Trainer:latest": expected an image reference .*\n$/],
    ["an unknown flag", ["examples/tfjs-classifier.yaml", "--workers", "2", ...image, "--replicas", "3"], /^error: unknown option '--replicas'\n$/],
    ["no image", ["examples/tfjs-classifier.yaml", "--workers", "2"], /^error: required option '--image <image>' not specified\n$/],
    ["both kinds", ["examples/tfjs-classifier.yaml", "--workers", "2", ...image, "--jobset", "--indexed-job"], /^error: option '--jobset' cannot be used with option '--indexed-job'\n$/],
    ["neither a file nor a command", ["--workers", "2", ...image], /^monitored-session manifest kubernetes: give a configuration file, or -- <command> \[args\.\.\.\]\n$/],
    ["a file and a command", ["examples/tfjs-classifier.yaml", "--workers", "2", ...image, "--", "node", "x.mjs"], /give either <config> or -- <command> \[args\.\.\.\], not both/],
    ["a missing file", ["examples/nope.yaml", "--workers", "2", ...image], /^monitored-session manifest kubernetes: cannot read examples\/nope\.yaml \(ENOENT\); .*\n$/],
    ["a file outside the project", ["/etc/hostname", "--workers", "2", ...image], /is outside the working directory .*; run the command from the project directory/],
    ["a claim without a checkpoint directory", ["--workers", "2", ...image, "--checkpoint-dir", "/ckpt", "--", "node", "x.mjs"], /--checkpoint-dir \/ckpt: it is where --checkpoint-pvc is mounted; give --checkpoint-pvc <claim> too\n$/],
    ["a name Kubernetes refuses", ["examples/tfjs-classifier.yaml", "--workers", "2", ...image, "--name", "My_Job"], /--name "My_Job": expected a DNS-1035 label/],
    ["a bad etcd endpoint", ["examples/tfjs-classifier.yaml", "--workers", "2", ...image, "--etcd", "etcd:2379"], /^monitored-session manifest kubernetes: --etcd: etcdEndpoints\[0\]: .*\n$/],
    ["a bad memory quantity", ["examples/tfjs-classifier.yaml", "--workers", "2", ...image, "--memory", "4 GB"], /--memory "4 GB": expected a quantity such as 4Gi/],
    ["--best-effort with --cpu", ["examples/tfjs-classifier.yaml", "--workers", "2", ...image, "--best-effort", "--cpu", "2"], /^monitored-session manifest kubernetes: --best-effort requests no resources: give either it or --cpu, not both\n$/],
    ["a bad configuration section", ["test/kubernetes/fixtures/README.md", "--workers", "2", ...image], /^monitored-session manifest kubernetes: test\/kubernetes\/fixtures\/README\.md: (not valid YAML|expected a configuration object)/],
    [
      "a backend whose tasks share one process",
      ["test/fixtures/cli/memory-backend.yaml", "--workers", "2", ...image],
      /^monitored-session manifest kubernetes: test\/fixtures\/cli\/memory-backend\.yaml: cluster\.backend memory keeps the coordination state in this process, and a Kubernetes manifest starts each of the 2 tasks in a process of its own: use embedded or etcd/,
    ],
    [
      "--etcd over a section with another backend's setting (what each pod's run would refuse)",
      ["test/fixtures/cli/memory-backend.yaml", "--workers", "2", ...image, "--etcd", "http://etcd:2379"],
      /^monitored-session manifest kubernetes: test\/fixtures\/cli\/memory-backend\.yaml: the pods' cluster: section \(the file's, with the flags' settings over it\): memoryCluster: is only used with backend: memory \(the backend is etcd\); remove it or set backend: memory\n$/,
    ],
  ])("%s", async (_, args, line) => {
    const r = await cliInProcess(["manifest", "kubernetes", ...args]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(line);
    expect(r.stderr.trimEnd().split("\n")).toHaveLength(1);
  });
});

it("manifest without a platform is a usage error: its help on stderr, exit 2", async () => {
  const r = await cliInProcess(["manifest"]);
  expect(r.code).toBe(2);
  expect(r.stdout).toBe("");
  expect(r.stderr).toMatch(/^Usage: monitored-session manifest .*\n[\s\S]*kubernetes \[options\] \[config\]/);
});

describe("manifest kubernetes from the installed entry point", () => {

  it("without a checkpoint claim, a warning says the checkpoints do not outlive the pods", async () => {
    const r = await cliInProcess(["manifest", "kubernetes", "examples/tfjs-classifier.yaml", "--workers", "2", ...image, "--token-secret", "tok"]);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/^warning: no --checkpoint-pvc: the checkpoints in \/app\/runs\/tfjs-classifier live on an emptyDir .*give --checkpoint-pvc <claim>\n$/);
  });
});

describe("manifest kubernetes: what it cannot make safe, it says (one warning line each, on stderr)", () => {
  const base = { workers: 2, image: "trainer:1", checkpointPvc: "ckpt" } as const;
  const kinds = (objects: readonly Record<string, unknown>[]): unknown[] => objects.map((o) => o["kind"]);
  const resourcesOf = (objects: readonly Record<string, unknown>[]): unknown[] =>
    objects
      .filter((o) => o["kind"] === "JobSet")
      .flatMap((js) => ((js["spec"] as { replicatedJobs: { template: { spec: { template: { spec: { containers: { resources?: unknown }[] } } } } }[] }).replicatedJobs))
      .map((rj) => rj.template.spec.template.spec.containers[0]?.resources);

  it("no --token-secret (nor --tls-secret): the tasks accept any caller; the warning names --token-secret, and the NetworkPolicy is there", async () => {
    const r = await manifestInProcess("examples/tfjs-classifier.yaml", base);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe("warning: no --token-secret: the tasks accept any connection (no token, no TLS); the NetworkPolicy admits only this job's pods, and only where the cluster's network plugin enforces NetworkPolicies; give --token-secret <secret>\n");
    expect(kinds(r.objects)).toEqual(["NetworkPolicy", "ConfigMap", "JobSet"]);
    // Mutual TLS (the manifest always names the CA) authenticates the callers as a token does.
    expect((await manifestInProcess("examples/tfjs-classifier.yaml", { ...base, tlsSecret: "tls" })).stderr).toBe("");
    expect((await manifestInProcess("examples/tfjs-classifier.yaml", { ...base, tokenSecret: "tok" })).stderr).toBe("");
  });

  it("--no-network-policy leaves the policy out; without a token it is the stronger warning, with one none", async () => {
    const open = await manifestInProcess("examples/tfjs-classifier.yaml", { ...base, networkPolicy: false, port: 2345 });
    expect(open.code).toBe(0);
    expect(kinds(open.objects)).toEqual(["ConfigMap", "JobSet"]);
    expect(open.stdout).not.toContain("NetworkPolicy");
    expect(open.stderr).toBe("warning: no --token-secret and --no-network-policy: anything that reaches a pod's port 2345 can join or disrupt the training (no token, no TLS); give --token-secret <secret>\n");
    const tokened = await manifestInProcess("examples/tfjs-classifier.yaml", { ...base, networkPolicy: false, tokenSecret: "tok" });
    expect({ code: tokened.code, stderr: tokened.stderr, kinds: kinds(tokened.objects) }).toEqual({ code: 0, stderr: "", kinds: ["ConfigMap", "JobSet"] });
  });

  it("--best-effort: no requests, and a warning that evictions restart the set uncounted", async () => {
    const r = await manifestInProcess("examples/tfjs-classifier.yaml", { ...base, tokenSecret: "tok", bestEffort: true });
    expect(r.code).toBe(0);
    expect(resourcesOf(r.objects)).toEqual([undefined, undefined]);
    expect(r.stdout).toContain("# No resources requested (--best-effort): QoS class BestEffort, the first pods evicted under node pressure.\n");
    expect(r.stderr).toBe(
      "warning: --best-effort: the pods request no CPU or memory (QoS class BestEffort), so under node pressure the kubelet evicts them first, and each eviction restarts the set without counting toward --max-restarts, possibly forever; drop it for the default requests (cpu 1, memory 2Gi)\n",
    );
    // Without it: the default requests.
    expect(resourcesOf((await manifestInProcess("examples/tfjs-classifier.yaml", { ...base, tokenSecret: "tok" })).objects)).toEqual([
      { requests: { cpu: "1", memory: "2Gi" }, limits: { memory: "2Gi" } },
      { requests: { cpu: "1", memory: "2Gi" }, limits: { memory: "2Gi" } },
    ]);
  });

  it.each([
    ["--cpu", { cpu: "2" }, "--cpu"],
    ["--memory", { memory: "4Gi" }, "--memory"],
    ["both", { cpu: "2", memory: "4Gi" }, "--cpu and --memory"],
  ] as const)("--best-effort with %s: exit 2, one line, nothing printed", async (_, sizes, named) => {
    const r = await manifestInProcess("examples/tfjs-classifier.yaml", { ...base, bestEffort: true, ...sizes });
    expect({ code: r.code, stdout: r.stdout }).toEqual({ code: 2, stdout: "" });
    expect(r.stderr).toBe(`monitored-session manifest kubernetes: --best-effort requests no resources: give either it or ${named}, not both\n`);
  });
});

