/**
 * `manifest kubernetes` and the configuration's `preemption.exitCode`: the failure rules name the
 * configured code (and 43, a chief lost during a preemption) wherever they would name 42, and a
 * reserved code is a configuration error (exit 2, one line).
 */
import { isLeft } from "fp-ts/lib/Either.js";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";

import { kubernetesManifest, type KubernetesManifestOptions } from "../../src/kubernetes/KubernetesManifest.js";
import { checkManifest } from "./manifestChecks.js";
import { manifestInProcess, type ManifestRun } from "./manifestInProcess.js";

type Json = Record<string, unknown>;

let project: string;
beforeEach(async () => {
  project = await mkdtemp(join(tmpdir(), "ms-manifest-exit-"));
});
afterEach(async () => {
  await rm(project, { recursive: true, force: true });
});

/** `manifest kubernetes job.yaml` in a project whose job.yaml has `preemption.exitCode: exitCode`. */
const manifestFor = async (exitCode: number, mode: "jobset" | "indexed-job"): Promise<ManifestRun> => {
  await writeFile(join(project, "job.yaml"), `module: ./job.ts\ncheckpoint:\n  dir: ./runs/job\npreemption:\n  exitCode: ${exitCode}\n`);
  return manifestInProcess("job.yaml", { workers: 3, image: "trainer:1", maxRestarts: 2, checkpointPvc: "ckpt", ...(mode === "indexed-job" ? { indexedJob: true } : {}) }, { cwd: project });
};

const byKind = (objects: readonly Json[], kind: string): Json[] => objects.filter((o) => o["kind"] === kind);
const at = (o: unknown, ...keys: (string | number)[]): unknown => keys.reduce<unknown>((v, k) => (v as Record<string | number, unknown> | undefined)?.[k], o);

/** The JobSet's action on a Job failure message, as its controller matches the rules (first match, else the counted default). */
const jobSetAction = (jobset: Json, message: string): string => {
  const rules = at(jobset, "spec", "failurePolicy", "rules") as Json[];
  const rule = rules.find((r) => (r["onJobFailureReasons"] as string[]).includes("PodFailurePolicy") && (r["onJobFailureMessagePatterns"] as string[]).some((p) => new RegExp(p).test(message)));
  return (rule?.["action"] as string | undefined) ?? "RestartJobSet";
};
const exitMessage = (code: number, index: number): string => `Container trainer for pod default/job-worker-0-1-x7k2p failed with exit code ${code} matching FailJob rule at index ${index}`;

describe("manifest kubernetes with preemption.exitCode 50", () => {
  it("JobSet: the Jobs fail on [43, 50] and the set restarts on both uncounted; 42 is now an ordinary failure", async () => {
    const { code, stderr, objects } = await manifestFor(50, "jobset");
    expect(code, stderr).toBe(0);
    expect(checkManifest(objects)).toEqual([]);
    const jobset = byKind(objects, "JobSet")[0] as Json;
    for (const rj of at(jobset, "spec", "replicatedJobs") as Json[]) {
      expect(at(rj, "template", "spec", "podFailurePolicy", "rules")).toEqual([
        { action: "FailJob", onPodConditions: [{ type: "DisruptionTarget", status: "True" }] },
        { action: "FailJob", onExitCodes: { containerName: "trainer", operator: "In", values: [43, 50] } },
        { action: "FailJob", onExitCodes: { containerName: "trainer", operator: "In", values: [2] } },
      ]);
    }
    expect(jobSetAction(jobset, exitMessage(50, 1))).toBe("RestartJobSetAndIgnoreMaxRestarts");
    expect(jobSetAction(jobset, exitMessage(43, 1))).toBe("RestartJobSetAndIgnoreMaxRestarts");
    expect(jobSetAction(jobset, exitMessage(2, 2))).toBe("FailJobSet");
    // 42 is in no rule: with backoffLimit 0 it exceeds the limit, a counted restart.
    expect(JSON.stringify(at(jobset, "spec", "failurePolicy"))).not.toContain("42");
    // The pods' configuration keeps the code the rules name.
    const text = Object.values(at(byKind(objects, "ConfigMap")[0], "data") as Record<string, string>)[0] as string;
    expect(at(parseYaml(text), "preemption", "exitCode")).toBe(50);
  });

  it("indexed Job: Ignore on [43, 50]", async () => {
    const { code, stderr, objects } = await manifestFor(50, "indexed-job");
    expect(code, stderr).toBe(0);
    expect(checkManifest(objects)).toEqual([]);
    expect(at(byKind(objects, "Job")[0], "spec", "podFailurePolicy", "rules")).toEqual([
      { action: "Ignore", onPodConditions: [{ type: "DisruptionTarget", status: "True" }] },
      { action: "Ignore", onExitCodes: { containerName: "trainer", operator: "In", values: [43, 50] } },
      { action: "FailJob", onExitCodes: { containerName: "trainer", operator: "In", values: [2] } },
    ]);
  });
});

describe("a reserved preemption.exitCode is a configuration error", () => {
  it.each([43, 0, 2, 143])("manifest kubernetes with preemption.exitCode %i: exit 2, one line naming why and the fix, nothing printed", async (exitCode) => {
    const { code, stdout, stderr } = await manifestFor(exitCode, "jobset");
    expect({ code, stdout }).toEqual({ code: 2, stdout: "" });
    expect(stderr.trimEnd().split("\n")).toHaveLength(1);
    expect(stderr).toMatch(new RegExp(`^monitored-session manifest kubernetes: job\\.yaml: preemption\\.exitCode: ${exitCode} is the code .*; pick another code from 3 to 127, such as the default 42\\n$`));
  });

  it("kubernetesManifest refuses one too", () => {
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
    const r = kubernetesManifest({ ...base, preemptionExitCode: 43 });
    expect(isLeft(r) ? r.left : []).toEqual([expect.stringMatching(/^preemption\.exitCode: 43 is the code for a lost chief \(/)]);
    // Without one, the rules name the default, 42, beside 43.
    const plain = kubernetesManifest(base);
    if (isLeft(plain)) throw new Error(plain.left.join("; "));
    expect(at(byKind(plain.right, "JobSet")[0], "spec", "failurePolicy", "rules", 0, "onJobFailureMessagePatterns")).toEqual(["with exit code 42 matching", "with exit code 43 matching", "has condition DisruptionTarget"]);
  });
});
