import { describe, expect, it } from "vitest";

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
    ["a bad configuration section", ["test/kubernetes/fixtures/README.md", "--workers", "2", ...image], /^monitored-session manifest kubernetes: test\/kubernetes\/fixtures\/README\.md: (not valid YAML|expected a configuration object)/],
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
    const r = await cliInProcess(["manifest", "kubernetes", "examples/tfjs-classifier.yaml", "--workers", "2", ...image]);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/^warning: no --checkpoint-pvc: the checkpoints in \/app\/runs\/tfjs-classifier live on an emptyDir .*give --checkpoint-pvc <claim>\n$/);
  });
});

