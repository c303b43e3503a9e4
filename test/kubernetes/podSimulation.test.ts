/**
 * A local simulation of the generated JobSet's chief pod: the task runs as a real child process
 * with exactly the environment the manifest gives the pod (the Downward API's values filled in
 * as JobSet labels its pods), the manifest's command and working directory, the ConfigMap's
 * text at its mount path, the pod's hostname (a private UTS namespace) and its DNS name
 * resolving to loopback (a hosts file bind-mounted in a private mount namespace). A small driver
 * applies the manifest's own failure policy to the exit codes, as the Job and JobSet
 * controllers would. The pod has a network namespace of its own (loopback only).
 *
 * One pod only: pods on one machine would need their network namespaces joined (veth pairs on a
 * bridge), which this test does not build (docs/kubernetes.md says so). Skipped, with a
 * message, where `unshare` may not make network, mount and UTS namespaces.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join, posix } from "node:path";
import { describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";

import { cliInProcess, root } from "../util/cli.js";
import { useTempDirs } from "../util/tempDirs.js";

type Json = Record<string, unknown>;

// A pod: private network (loopback only, so its port cannot meet another process's), mount
// (its hosts file) and UTS (its hostname) namespaces.
const UNSHARE = ["-n", "-m", "-u"];
const probe = spawnSync("unshare", [...UNSHARE, "sh", "-c", "ip link set lo up && hostname sim-probe && mount --bind /etc/hostname /etc/hostname"], { encoding: "utf8" });
const canUnshare = probe.status === 0;
if (!canUnshare) console.warn(`[skip] pod simulation: unshare ${UNSHARE.join(" ")} (with ip) is not permitted here (${(probe.stderr ?? probe.error?.message ?? "").trim()})`);

const tempDir = useTempDirs("ms-pod-sim-");

/** The pod as the manifest describes it, laid out in `image` (the image's working directory). */
interface Pod {
  readonly hostname: string;
  readonly dnsName: string;
  readonly command: readonly string[];
  readonly workingDir: string;
  readonly env: NodeJS.ProcessEnv;
  readonly graceSecs: number;
  readonly podFailurePolicy: readonly Json[];
  readonly jobSetRules: readonly Json[];
  readonly maxRestarts: number;
  readonly configPath: string;
  readonly checkpointDir: string;
}

/** `manifest kubernetes` for the simulation's job, and the chief pod it describes, laid out under a fresh "image". */
const chiefPod = async (): Promise<Pod> => {
  const image = tempDir();
  const r = await cliInProcess(["manifest", "kubernetes", "test/kubernetes/fixtures/sim-job.yaml", "--workers", "1", "--image", "sim:1", "--name", "sim", "--workdir", image, "--cli", join(root, "src/cli/main.ts"), "--checkpoint-pvc", "sim-ckpt", "--max-restarts", "1"]);
  expect(r.code).toBe(0);
  const objects = parseAllDocuments(r.stdout).map((d) => d.toJS() as Json);
  const configMap = objects.find((o) => o["kind"] === "ConfigMap") as Json;
  const jobset = objects.find((o) => o["kind"] === "JobSet") as Json;
  const spec = jobset["spec"] as Json;
  const rj = (spec["replicatedJobs"] as Json[])[0] as Json;
  const jobSpec = (rj["template"] as Json)["spec"] as Json;
  const podSpec = (jobSpec["template"] as Json)["spec"] as Json;
  const container = (podSpec["containers"] as Json[])[0] as Json;
  const mounts = container["volumeMounts"] as Json[];
  // The image: the project's files the job needs, and the volumes at their mount paths.
  symlinkSync(join(root, "node_modules"), join(image, "node_modules"));
  symlinkSync(join(root, "examples"), join(image, "examples"));
  const configMount = mounts.find((m) => m["name"] === "config") as Json;
  const configPath = configMount["mountPath"] as string;
  mkdirSync(posix.dirname(configPath), { recursive: true });
  writeFileSync(configPath, (configMap["data"] as Record<string, string>)[configMount["subPath"] as string] as string);
  const checkpointDir = (mounts.find((m) => m["name"] === "checkpoints") as Json)["mountPath"] as string;
  mkdirSync(checkpointDir, { recursive: true });
  // The Downward API's values, as JobSet labels its pods.
  const name = (jobset["metadata"] as Json)["name"] as string;
  const labels: Record<string, string> = { "jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": rj["name"] as string, "jobset.sigs.k8s.io/job-index": "0", "jobset.sigs.k8s.io/restart-attempt": "0" };
  const env: NodeJS.ProcessEnv = { PATH: process.env["PATH"], JOB_COMPLETION_INDEX: "0", CI: "true" };
  for (const e of container["env"] as Json[]) {
    const field = ((e["valueFrom"] as Json | undefined)?.["fieldRef"] as Json | undefined)?.["fieldPath"] as string | undefined;
    env[e["name"] as string] = field === undefined ? (e["value"] as string) : field === "metadata.namespace" ? ((jobset["metadata"] as Json)["namespace"] as string) : labels[/\['(.+)'\]/.exec(field)?.[1] as string];
  }
  const hostname = `${name}-${rj["name"] as string}-0-0`;
  const network = spec["network"] as Json;
  return {
    hostname,
    dnsName: `${hostname}.${network["subdomain"] as string}.${env["MONITORED_SESSION_POD_NAMESPACE"] as string}.svc`,
    command: container["command"] as string[],
    workingDir: container["workingDir"] as string,
    env,
    graceSecs: podSpec["terminationGracePeriodSeconds"] as number,
    podFailurePolicy: (jobSpec["podFailurePolicy"] as Json)["rules"] as Json[],
    jobSetRules: (spec["failurePolicy"] as Json)["rules"] as Json[],
    maxRestarts: (spec["failurePolicy"] as Json)["maxRestarts"] as number,
    configPath,
    checkpointDir,
  };
};

/** A started pod: its process, its output so far, and its exit code. */
interface Running {
  readonly child: ChildProcess;
  output(): string;
  readonly exited: Promise<number>;
}

const startPod = (pod: Pod): Running => {
  const hosts = join(posix.dirname(pod.configPath), "hosts");
  writeFileSync(hosts, `127.0.0.1 localhost\n127.0.0.1 ${pod.dnsName} ${pod.hostname}\n`);
  const script = 'ip link set lo up && hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"';
  const child = spawn("unshare", [...UNSHARE, "sh", "-c", script, "sh", pod.hostname, hosts, ...pod.command], { cwd: pod.workingDir, env: pod.env, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout?.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr?.on("data", (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number>((done) => child.on("close", (code, signal) => done(code ?? 128 + (signal === "SIGKILL" ? 9 : signal === "SIGTERM" ? 15 : 1))));
  return { child, output: () => out, exited };
};

/** What the Job and JobSet controllers do with a pod's exit code, by the manifest's own rules. */
const decide = (pod: Pod, code: number, podName: string): "succeeded" | "restartUncounted" | "restartCounted" | "failed" => {
  if (code === 0) return "succeeded";
  const index = pod.podFailurePolicy.findIndex((r) => {
    const codes = r["onExitCodes"] as Json | undefined;
    return codes !== undefined && codes["operator"] === "In" && (codes["values"] as number[]).includes(code);
  });
  // backoffLimit 0: a failure no rule matches exceeds it, a reason no JobSet rule names.
  if (index < 0 || pod.podFailurePolicy[index]?.["action"] !== "FailJob") return "restartCounted";
  const message = `Container trainer for pod default/${podName} failed with exit code ${code} matching FailJob rule at index ${index}`;
  const rule = pod.jobSetRules.find((r) => (r["onJobFailureReasons"] as string[]).includes("PodFailurePolicy") && (r["onJobFailureMessagePatterns"] as string[]).some((p) => new RegExp(p).test(message)));
  const action = (rule?.["action"] as string | undefined) ?? "RestartJobSet";
  return action === "FailJobSet" ? "failed" : action === "RestartJobSetAndIgnoreMaxRestarts" ? "restartUncounted" : "restartCounted";
};

/** Waits until the pod's output matches `re` (the pod's own progress, not a clock). */
const until = async (running: Running, re: RegExp): Promise<void> => {
  while (!re.test(running.output())) {
    const exited = await Promise.race([running.exited.then(() => true), new Promise<false>((r) => setTimeout(() => r(false), 25))]);
    if (exited && !re.test(running.output())) throw new Error(`the pod exited before ${String(re)}:\n${running.output()}`);
  }
};

/** SIGTERM, then SIGKILL after the pod's grace period, as the kubelet does. */
const terminate = async (running: Running, graceSecs: number): Promise<number> => {
  running.child.kill("SIGTERM");
  const kill = setTimeout(() => running.child.kill("SIGKILL"), graceSecs * 1000);
  const code = await running.exited;
  clearTimeout(kill);
  return code;
};

describe.runIf(canUnshare)("the generated JobSet's chief pod, simulated", () => {
  it("trains to the end: the set succeeds", { timeout: 120_000 }, async () => {
    const pod = await chiefPod();
    const running = startPod(pod);
    const code = await running.exited;
    expect(code, running.output()).toBe(0);
    expect(decide(pod, code, pod.hostname)).toBe("succeeded");
    // The task found itself in the pod's environment, at its DNS name.
    expect(running.output()).toContain(`task chief:0 (chief)`);
    expect(running.output()).toMatch(/Done at global step 3000\./);
  });

  it("SIGTERM: saved and exit 42, restarted without counting, resumed at that step; SIGKILL: a counted restart from the last checkpoint", { timeout: 240_000 }, async () => {
    const pod = await chiefPod();
    let restarts = 0;
    let counted = 0;
    const first = startPod(pod);
    await until(first, /Checkpoint saved: .*\(global step 500,/);
    const code = await terminate(first, pod.graceSecs);
    expect(code, first.output()).toBe(42);
    const saved = Number(/Preemption checkpoint for step (\d+) saved/.exec(first.output())?.[1]);
    expect(saved).toBeGreaterThanOrEqual(500);
    const action = decide(pod, code, pod.hostname);
    expect(action).toBe("restartUncounted");
    restarts += 1;

    const second = startPod(pod);
    expect(second.child.pid).toBeDefined();
    await until(second, /Starting at global step/);
    expect(second.output()).toMatch(new RegExp(`Starting at global step ${saved} \\(restored from .*model\\.ckpt-${saved}\\)`));
    const afterStart = /Starting at global step[\s\S]*Checkpoint saved: .*\(global step (\d+),/;
    await until(second, afterStart);
    const periodic = Number(afterStart.exec(second.output())?.[1]);
    second.child.kill("SIGKILL");
    const killed = await second.exited;
    expect(killed).toBe(137);
    expect(decide(pod, killed, pod.hostname)).toBe("restartCounted");
    restarts += 1;
    counted += 1;
    expect(counted).toBeLessThanOrEqual(pod.maxRestarts);

    const third = startPod(pod);
    const last = await third.exited;
    expect(last, third.output()).toBe(0);
    const resumed = Number(/Starting at global step (\d+)/.exec(third.output())?.[1]);
    // From the last checkpoint the killed pod wrote (a later one may have landed before the kill).
    expect(resumed).toBeGreaterThanOrEqual(periodic);
    expect(resumed).toBeGreaterThan(saved);
    expect({ restarts, counted }).toEqual({ restarts: 2, counted: 1 });
  });

  it("a configuration error: exit 2, the set fails at once", { timeout: 120_000 }, async () => {
    const pod = await chiefPod();
    writeFileSync(pod.configPath, "module: ../../../examples/tfjs-classifier.job.ts\nlastStep: -3\n");
    const running = startPod(pod);
    const code = await running.exited;
    expect(code, running.output()).toBe(2);
    expect(decide(pod, code, pod.hostname)).toBe("failed");
  });
});
