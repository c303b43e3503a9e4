/**
 * A local stand-in for a Kubernetes cluster running the JobSet that `manifest kubernetes` prints,
 * for the pod simulations (podSimulation.process.test.ts: the chief alone;
 * multiPodSimulation.process.test.ts: a chief and two workers). Everything a pod gets comes from
 * the printed manifest, never from a second copy:
 *
 * - each pod is a real child process with exactly the pod's environment (the manifest's `env`,
 *   the Downward API's values filled in as JobSet and the Job controller label the pods,
 *   `JOB_COMPLETION_INDEX`, `HOSTNAME`, and the image's own `ENV` from
 *   examples/kubernetes/Dockerfile), the container's command and working directory;
 * - its own network namespace (a new one per pod, as Kubernetes gives), joined by a veth pair to
 *   a bridge in a namespace of its own, so that every pod listens on its port (the manifest's
 *   `bindAddress: 0.0.0.0`) on an address of its own, and reaches the others; nothing is routed
 *   anywhere else;
 * - its own hostname (UTS namespace) and a hosts file, bind-mounted on /etc/hosts in a private
 *   mount namespace, in which every pod's DNS name resolves to that pod's address;
 * - its volumes where the pod spec mounts them: a fresh directory per pod for each emptyDir, the
 *   ConfigMap's text at its `subPath`, one shared directory for the checkpoint claim, each
 *   read-only where the spec says so; the image's working directory itself read-only
 *   (`readOnlyRootFilesystem`), so the trainer can write only where the manifest put a volume.
 *
 * {@link JobSetDriver} applies the manifest's own failure policy to the pods' exit codes, as the
 * Job and JobSet controllers would: the Job's `podFailurePolicy` (with `backoffLimit: 0`) makes
 * the Job's failure reason and message; the JobSet's `failurePolicy.rules` pick the action;
 * a restart deletes every pod (SIGTERM, SIGKILL after the grace period) and, once all are gone
 * (`BlockingRecreate`), starts new ones.
 *
 * Not simulated: the non-root user and the rest of the pod's security context, a read-only root
 * filesystem beyond the working directory, cluster DNS itself (a hosts file answers instead),
 * Secrets, the pod's PID namespace, the NetworkPolicy (nothing enforces it; the bridge holds only
 * the set's pods, which it admits on every port), resource requests, and the controllers' own
 * delays.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { constants } from "node:os";
import { join, posix } from "node:path";
import { afterAll, afterEach, beforeAll, expect } from "vitest";
import { parseAllDocuments } from "yaml";

import { cliInProcess, root } from "../util/cli.js";
import { jobSetPodLabels } from "./podLabels.js";

type Json = Record<string, unknown>;

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A pod of the JobSet, as the manifest describes it. */
export interface SimPod {
  /** `chief:0`, `worker:1`: the task it should find itself to be. */
  readonly task: string;
  readonly replicatedJob: string;
  readonly completionIndex: number;
  readonly hostname: string;
  /** `<hostname>.<subdomain>.<namespace>.svc`. */
  readonly dnsName: string;
  /** Its slot on the bridge: its address is {@link podAddress}(slot). */
  readonly slot: number;
  readonly jobSpec: Json;
  readonly podSpec: Json;
  readonly container: Json;
}

/** The JobSet the command printed, and what the simulation lays out for it. */
export interface SimJobSet {
  readonly name: string;
  readonly namespace: string;
  readonly pods: readonly SimPod[];
  /** The ConfigMaps' data by name (a test may change it, as `kubectl apply` of an edited file would). */
  readonly configMaps: Map<string, Record<string, string>>;
  readonly failurePolicy: { readonly maxRestarts: number; readonly rules: readonly Json[] };
  /** `terminationGracePeriodSeconds` of the chief's pod (every pod has the same). */
  readonly graceSecs: number;
  /** The image's working directory on this machine (`--workdir`). */
  readonly workdir: string;
  /** The checkpoint claim's mount path on the chief (the chief's checkpoint directory). */
  readonly checkpointDir: string;
  /** Where this machine keeps each claim's data. */
  readonly claims: ReadonlyMap<string, string>;
  /** Where this machine keeps each pod's emptyDirs and files: `<podsDir>/<pod name>/`. */
  readonly podsDir: string;
}

/** A pod started by the driver. */
export interface RunningPod {
  readonly pod: SimPod;
  /** The pod's name (`<hostname>-<suffix>`, as the Job controller names it). */
  readonly name: string;
  readonly child: ChildProcess;
  output(): string;
  /** The exit code, as Kubernetes reports it (128 + the signal for a killed process). */
  readonly exited: Promise<number>;
}

/** One run of the set (the pods of one restart attempt). */
export interface RunningSet {
  readonly restartAttempt: number;
  readonly pods: readonly RunningPod[];
  /** The pod of `task` (`chief:0`, `worker:1`). */
  pod(task: string): RunningPod;
}

/** What the JobSet controller does after a run of the set. */
export type SetAction = "succeeded" | "restartUncounted" | "restartCounted" | "failed";

/** How a run of the set ended. */
export interface SetOutcome {
  readonly action: SetAction;
  /** The pod whose failure decided, and the Job failure it caused (absent when the set succeeded). */
  readonly failed?: { readonly pod: RunningPod; readonly code: number; readonly reason: string; readonly message: string };
  /** Every pod's exit code by task, the ones the restart deleted included. */
  readonly codes: ReadonlyMap<string, number>;
}

/** The pods' subnet on the bridge (private to the simulation's namespaces: nothing routes out). */
const SUBNET = "10.244.0";

/** The address of the pod in `slot`. */
const podAddress = (slot: number): string => `${SUBNET}.${10 + slot}`;

/**
 * Where a simulation's directory goes (the image, the volumes): not under /tmp, on which every
 * pod mounts an emptyDir of its own.
 */
export const SIM_BASE = "/var/tmp";

/** How long `settle` and `until` wait unless told otherwise. */
const DEFAULT_DEADLINE_MS = 300_000;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** A prefix for every namespace name of this process's simulations. */
const PREFIX = `mssim-${process.pid}-${randomBytes(3).toString("hex")}`;

const ip = (...args: string[]): void => {
  const r = spawnSync("ip", args, { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`ip ${args.join(" ")}: ${(r.stderr ?? r.error?.message ?? "").trim()}`);
};

/**
 * Why pods cannot be simulated here (`undefined`: they can): making network namespaces, a bridge
 * and a private mount and UTS namespace needs root (or the capabilities) and iproute2.
 */
export const simulationUnavailable = ((): string | undefined => {
  const probe = `${PREFIX}-probe`;
  try {
    ip("netns", "add", probe);
    ip("-n", probe, "link", "add", "br0", "type", "bridge");
    const r = spawnSync("ip", ["netns", "exec", probe, "unshare", "-m", "-u", "sh", "-c", "hostname sim-probe && mount --bind /etc/hostname /etc/hostname"], { encoding: "utf8" });
    if (r.status !== 0) return `unshare -m -u in a network namespace: ${(r.stderr ?? r.error?.message ?? "").trim()}`;
    return undefined;
  } catch (e) {
    return (e as Error).message;
  } finally {
    spawnSync("ip", ["netns", "del", probe]);
  }
})();

/** The network: a bridge in a namespace of its own, to which each pod's namespace is joined. */
export class PodNetwork {
  readonly #bridgeNs = `${PREFIX}-switch`;
  /** Each pod namespace's veth end on the bridge, by namespace. */
  readonly #pods = new Map<string, string>();
  #count = 0;

  private constructor() {
    ip("netns", "add", this.#bridgeNs);
    ip("-n", this.#bridgeNs, "link", "add", "br0", "type", "bridge");
    ip("-n", this.#bridgeNs, "link", "set", "br0", "up");
  }

  /** The bridge's namespace, made now (delete it with {@link destroy}). */
  static create(): PodNetwork {
    return new PodNetwork();
  }

  /** A new network namespace for a pod at `address`, joined to the bridge; its name. */
  attach(address: string): string {
    this.#count += 1;
    const ns = `${PREFIX}-pod${this.#count}`;
    ip("netns", "add", ns);
    // Made inside the bridge's namespace: no interface ever appears in the machine's own.
    const veth = `v${this.#count}`;
    this.#pods.set(ns, veth);
    ip("-n", this.#bridgeNs, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns);
    ip("-n", this.#bridgeNs, "link", "set", veth, "master", "br0", "up");
    ip("-n", ns, "addr", "add", `${address}/24`, "dev", "eth0");
    ip("-n", ns, "link", "set", "eth0", "up");
    ip("-n", ns, "link", "set", "lo", "up");
    return ns;
  }

  /**
   * Deletes a pod's namespace, its veth pair first. The kernel tears a deleted namespace down in
   * the background, and until it has, its end stays on the bridge with the pod's address: a pod
   * of the next set at the same address then shares it, and the old namespace answers some of
   * the new pod's traffic with resets. Deleting the bridge's end takes both ends off at once.
   */
  detach(ns: string): void {
    const veth = this.#pods.get(ns);
    if (veth === undefined) return;
    this.#pods.delete(ns);
    spawnSync("ip", ["-n", this.#bridgeNs, "link", "del", veth]);
    ip("netns", "del", ns);
  }

  /** Deletes every namespace this network made. */
  destroy(): void {
    for (const ns of [...this.#pods.keys()]) this.detach(ns);
    spawnSync("ip", ["netns", "del", this.#bridgeNs]);
  }

  /** The namespaces of this process's simulations that still exist (none, after {@link destroy}). */
  static leftovers(): string[] {
    const r = spawnSync("ip", ["netns", "list"], { encoding: "utf8" });
    return (r.stdout ?? "").split("\n").map((l) => l.split(" ")[0] ?? "").filter((n) => n.startsWith(PREFIX));
  }
}

/** Options of {@link jobSetOfManifest}. */
export interface SimManifestOptions {
  /** The configuration file, relative to the repository's root (the command's working directory). */
  readonly config: string;
  readonly workers: number;
  readonly maxRestarts: number;
  /** The directory that plays the image's working directory and holds the pods' volumes. */
  readonly dir: string;
}

/**
 * Runs `manifest kubernetes` for `options` (a JobSet named `sim`, a checkpoint claim) and lays
 * out the image it describes under `options.dir`: the project's files the job needs, and every
 * mount point.
 */
export const jobSetOfManifest = async (options: SimManifestOptions): Promise<SimJobSet> => {
  const workdir = join(options.dir, "image");
  mkdirSync(workdir);
  const args = ["manifest", "kubernetes", options.config, "--workers", String(options.workers), "--image", "sim:1", "--name", "sim"];
  args.push("--workdir", workdir, "--cli", "src/cli/main.ts", "--checkpoint-pvc", "sim-ckpt", "--max-restarts", String(options.maxRestarts));
  const r = await cliInProcess(args);
  if (r.code !== 0) throw new Error(`manifest kubernetes exited ${String(r.code)}: ${r.stderr}`);
  const objects = parseAllDocuments(r.stdout).map((d) => d.toJS() as Json);
  const jobset = objects.find((o) => o["kind"] === "JobSet");
  if (jobset === undefined) throw new Error(`no JobSet in the manifest:\n${r.stdout}`);
  const meta = jobset["metadata"] as Json;
  const spec = jobset["spec"] as Json;
  const network = spec["network"] as Json;
  const configMaps = new Map(objects.filter((o) => o["kind"] === "ConfigMap").map((o) => [(o["metadata"] as Json)["name"] as string, { ...(o["data"] as Record<string, string>) }]));
  const pods: SimPod[] = [];
  for (const rj of spec["replicatedJobs"] as Json[]) {
    if (rj["replicas"] !== 1) throw new Error(`replicated job ${String(rj["name"])}: the simulation runs one Job per replicated job, not ${String(rj["replicas"])}`);
    const jobSpec = (rj["template"] as Json)["spec"] as Json;
    if (jobSpec["backoffLimit"] !== 0) throw new Error(`backoffLimit ${String(jobSpec["backoffLimit"])}: the simulation replaces no single pod (it expects 0)`);
    const podSpec = (jobSpec["template"] as Json)["spec"] as Json;
    const containers = podSpec["containers"] as Json[];
    if (containers.length !== 1) throw new Error(`${containers.length} containers: the simulation runs one`);
    for (let index = 0; index < (jobSpec["completions"] as number); index++) {
      const hostname = `${meta["name"] as string}-${rj["name"] as string}-0-${index}`;
      pods.push({
        task: `${rj["name"] as string}:${index}`,
        replicatedJob: rj["name"] as string,
        completionIndex: index,
        hostname,
        dnsName: `${hostname}.${network["subdomain"] as string}.${meta["namespace"] as string}.svc`,
        slot: pods.length,
        jobSpec,
        podSpec,
        container: containers[0] as Json,
      });
    }
  }
  // The image: the project's files the job needs, bind-mounted into each pod over these empty
  // directories (IMAGE_FILES). Not symlinks: a clone under /tmp would vanish behind the pod's
  // own /tmp (an emptyDir), and a bind mount made before it keeps pointing at the files.
  for (const entry of IMAGE_FILES) {
    if (entry.endsWith(".json")) writeFileSync(join(workdir, entry), "");
    else mkdirSync(join(workdir, entry));
  }
  const claims = new Map<string, string>();
  let checkpointDir: string | undefined;
  for (const pod of pods) {
    for (const m of pod.container["volumeMounts"] as Json[]) {
      const volume = volumeOf(pod, m["name"] as string);
      const mountPath = m["mountPath"] as string;
      // The mount point, as the container runtime makes it: a file for a subPath of a ConfigMap.
      if (volume["configMap"] !== undefined && m["subPath"] !== undefined) {
        mkdirSync(posix.dirname(mountPath), { recursive: true });
        if (!existsSync(mountPath)) writeFileSync(mountPath, "");
      } else mkdirSync(mountPath, { recursive: true });
      const claim = (volume["persistentVolumeClaim"] as Json | undefined)?.["claimName"] as string | undefined;
      if (claim !== undefined && !claims.has(claim)) {
        claims.set(claim, join(options.dir, "claims", claim));
        mkdirSync(join(options.dir, "claims", claim), { recursive: true });
      }
      if (claim !== undefined && pod.replicatedJob === "chief") checkpointDir = mountPath;
    }
  }
  if (checkpointDir === undefined) throw new Error("the chief mounts no checkpoint claim");
  const chief = pods.find((p) => p.replicatedJob === "chief") as SimPod;
  const failurePolicy = spec["failurePolicy"] as Json;
  return {
    name: meta["name"] as string,
    namespace: meta["namespace"] as string,
    pods,
    configMaps,
    failurePolicy: { maxRestarts: failurePolicy["maxRestarts"] as number, rules: (failurePolicy["rules"] as Json[] | undefined) ?? [] },
    graceSecs: chief.podSpec["terminationGracePeriodSeconds"] as number,
    workdir,
    checkpointDir,
    claims,
    podsDir: join(options.dir, "pods"),
  };
};

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * The JobSet controller, for one {@link SimJobSet}: starts the set's pods, waits for a Job to
 * fail or every pod to succeed, and applies the manifest's failure policy; counts restarts as
 * JobSet's status does (`restarts`, `restartsCountTowardsMax`).
 */
export class JobSetDriver {
  /** `status.restarts`: every restart (and the `restart-attempt` label of new pods). */
  restarts = 0;
  /** `status.restartsCountTowardsMax`. */
  countedRestarts = 0;
  readonly #running = new Set<RunningPod>();
  readonly #namespaces = new Map<RunningPod, string>();
  /** The pods evicted: they carry the `DisruptionTarget` condition. */
  readonly #disrupted = new Set<RunningPod>();

  constructor(
    readonly set: SimJobSet,
    readonly network: PodNetwork,
  ) {}

  /** Starts every pod of the set, as the Jobs of restart attempt {@link restarts} are created. */
  start(): RunningSet {
    const pods = this.set.pods.map((p) => this.#startPod(p));
    return {
      restartAttempt: this.restarts,
      pods,
      pod: (task) => {
        const found = pods.find((p) => p.pod.task === task);
        if (found === undefined) throw new Error(`no pod for task ${task} (the set has ${pods.map((p) => p.pod.task).join(", ")})`);
        return found;
      },
    };
  }

  /**
   * Waits until every pod succeeded (the set succeeds) or one failed: then the Job and JobSet
   * controllers' decision from the manifest's rules, and for a restart or a failure every other
   * pod deleted (SIGTERM, SIGKILL after the grace period) and waited for, as `BlockingRecreate`
   * does. Throws, after killing every pod, if nothing decided within `deadlineMs`.
   */
  async settle(running: RunningSet, deadlineMs = DEFAULT_DEADLINE_MS): Promise<SetOutcome> {
    const codes = new Map<string, number>();
    const pending = new Set(running.pods);
    const ended = new Map(running.pods.map((p) => [p, p.exited.then((code) => ({ pod: p, code }))]));
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<undefined>((done) => (timer = setTimeout(() => done(undefined), deadlineMs)));
    try {
      while (pending.size > 0) {
        const next = await Promise.race([deadline, ...[...pending].map((p) => ended.get(p) as Promise<{ pod: RunningPod; code: number }>)]);
        if (next === undefined) {
          await Promise.all(running.pods.map((p) => this.#kill(p)));
          throw new Error(`the set decided nothing within ${deadlineMs / 1000} s:\n${outputs(running)}`);
        }
        pending.delete(next.pod);
        codes.set(next.pod.pod.task, next.code);
        this.#gone(next.pod);
        if (next.code === 0) continue;
        const failure = jobFailure(this.set, next.pod, next.code, this.#disrupted.has(next.pod));
        const action = jobSetAction(this.set, next.pod.pod.replicatedJob, failure, this.countedRestarts);
        // The restart (or the failure) deletes every Job: their pods get the grace period.
        const rest = [...pending];
        const restCodes = await Promise.all(rest.map((p) => this.delete(p)));
        rest.forEach((p, i) => codes.set(p.pod.task, restCodes[i] as number));
        if (action !== "failed") this.restarts += 1;
        if (action === "restartCounted") this.countedRestarts += 1;
        return { action, failed: { pod: next.pod, code: next.code, ...failure }, codes };
      }
      return { action: "succeeded", codes };
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Evicts a pod (a node drain, the scheduler's preemption): deleted as {@link delete} does, and
   * the pod carries the `DisruptionTarget` condition, which the Job's `podFailurePolicy` sees
   * when the pod fails. Resolves with its exit code.
   */
  async evict(running: RunningPod): Promise<number> {
    this.#disrupted.add(running);
    return this.delete(running);
  }

  /** Deletes a pod as the kubelet does (SIGTERM, SIGKILL after the grace period); resolves with its exit code. */
  async delete(running: RunningPod): Promise<number> {
    running.child.kill("SIGTERM");
    const kill = setTimeout(() => running.child.kill("SIGKILL"), this.set.graceSecs * 1000);
    try {
      return await running.exited;
    } finally {
      clearTimeout(kill);
      this.#gone(running);
    }
  }

  /** Kills every pod still running and deletes their namespaces (a test's cleanup, on failure too). */
  async close(): Promise<void> {
    await Promise.all([...this.#running].map((p) => this.#kill(p)));
    for (const p of [...this.#namespaces.keys()]) this.#gone(p);
  }

  async #kill(running: RunningPod): Promise<void> {
    running.child.kill("SIGKILL");
    await running.exited;
    this.#gone(running);
  }

  /** The pod ended: its network namespace goes with it. */
  #gone(running: RunningPod): void {
    this.#running.delete(running);
    const ns = this.#namespaces.get(running);
    this.#namespaces.delete(running);
    if (ns !== undefined) this.network.detach(ns);
  }

  #startPod(pod: SimPod): RunningPod {
    const set = this.set;
    const name = `${pod.hostname}-${randomBytes(3).toString("hex").slice(0, 5)}`;
    const podDir = join(set.podsDir, name);
    mkdirSync(podDir, { recursive: true });
    const mounts: string[] = IMAGE_FILES.flatMap((dir) => [join(root, dir), join(set.workdir, dir), "ro"]);
    for (const m of pod.container["volumeMounts"] as Json[]) {
      const volume = volumeOf(pod, m["name"] as string);
      let source: string;
      let readOnly = m["readOnly"] === true;
      if (volume["emptyDir"] !== undefined) {
        source = join(podDir, m["name"] as string);
        mkdirSync(source);
      } else if (volume["configMap"] !== undefined) {
        // The kubelet's copy of the ConfigMap: one file per key.
        const cmName = (volume["configMap"] as Json)["name"] as string;
        const data = set.configMaps.get(cmName);
        if (data === undefined) throw new Error(`the pod mounts ConfigMap ${cmName}, which the manifest does not define`);
        const dir = join(podDir, m["name"] as string);
        mkdirSync(dir);
        for (const [key, text] of Object.entries(data)) writeFileSync(join(dir, key), text);
        source = m["subPath"] === undefined ? dir : join(dir, m["subPath"] as string);
      } else if (volume["persistentVolumeClaim"] !== undefined) {
        const claim = volume["persistentVolumeClaim"] as Json;
        source = set.claims.get(claim["claimName"] as string) as string;
        readOnly ||= claim["readOnly"] === true;
      } else {
        throw new Error(`volume ${String(m["name"])}: the simulation mounts emptyDirs, ConfigMaps and claims only (${Object.keys(volume).join(", ")})`);
      }
      mounts.push(source, m["mountPath"] as string, readOnly ? "ro" : "rw");
    }
    // Every pod's DNS name at its address, as the cluster's DNS answers for the headless Service.
    const hosts = join(podDir, "hosts");
    writeFileSync(hosts, ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback", ...set.pods.map((p) => `${podAddress(p.slot)} ${p.dnsName} ${p.hostname}`), ""].join("\n"));
    const ns = this.network.attach(podAddress(pod.slot));
    const container = pod.container;
    const child = spawn(
      "ip",
      ["netns", "exec", ns, "unshare", "-m", "-u", "sh", "-c", POD_SCRIPT, "sh", pod.hostname, hosts, set.workdir, container["workingDir"] as string, ...mounts, "--", ...(container["command"] as string[])],
      { cwd: set.workdir, env: podEnv(set, pod, name, this.restarts), stdio: ["ignore", "pipe", "pipe"] },
    );
    let out = "";
    child.stdout?.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr?.on("data", (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number>((done) =>
      child.on("close", (code, signal) => done(code ?? 128 + (signal === null ? 0 : (constants.signals[signal] ?? 0)))),
    );
    const running: RunningPod = { pod, name, child, output: () => out, exited };
    this.#running.add(running);
    this.#namespaces.set(running, ns);
    return running;
  }
}

/**
 * The Job's failure when a pod of it ends with `code` (not 0), by the Job's `podFailurePolicy`
 * (first matching rule) and `backoffLimit: 0`: the reason and the message Kubernetes writes in
 * the Job's `Failed` condition (kubernetes/kubernetes `pkg/controller/job/pod_failure_policy.go`).
 * `disrupted`: the pod has the `DisruptionTarget` condition (an eviction, not a plain delete).
 */
const jobFailure = (set: SimJobSet, running: RunningPod, code: number, disrupted = false): { readonly reason: string; readonly message: string } => {
  const rules = ((running.pod.jobSpec["podFailurePolicy"] as Json | undefined)?.["rules"] as Json[] | undefined) ?? [];
  const container = running.pod.container["name"] as string;
  const pod = `${set.namespace}/${running.name}`;
  for (const [i, rule] of rules.entries()) {
    const conditions = rule["onPodConditions"] as Json[] | undefined;
    const exitCodes = rule["onExitCodes"] as Json | undefined;
    let message: string | undefined;
    if (conditions !== undefined && disrupted && conditions.some((c) => c["type"] === "DisruptionTarget" && (c["status"] ?? "True") === "True")) {
      message = `Pod ${pod} has condition DisruptionTarget matching ${String(rule["action"])} rule at index ${i}`;
    } else if (exitCodes !== undefined && (exitCodes["containerName"] ?? container) === container) {
      const listed = (exitCodes["values"] as number[]).includes(code);
      if (exitCodes["operator"] === "In" ? listed : !listed) message = `Container ${container} for pod ${pod} failed with exit code ${code} matching ${String(rule["action"])} rule at index ${i}`;
    }
    if (message === undefined) continue;
    if (rule["action"] === "FailJob") return { reason: "PodFailurePolicy", message };
    if (rule["action"] === "Count") break;
    throw new Error(`podFailurePolicy rule ${i}: action ${String(rule["action"])} replaces one pod, which the simulation does not do`);
  }
  // Counted; with backoffLimit 0 the first counted failure fails the Job.
  return { reason: "BackoffLimitExceeded", message: "Job has reached the specified backoff limit" };
};

/**
 * The JobSet's action on a failed Job of `replicatedJob`: the first rule of `failurePolicy.rules`
 * whose reasons, message patterns and target replicated jobs match (an empty list matches any),
 * else `RestartJobSet`; a counted restart past `maxRestarts` fails the set (`ReachedMaxRestarts`).
 */
const jobSetAction = (set: SimJobSet, replicatedJob: string, failure: { readonly reason: string; readonly message: string }, countedRestarts: number): SetAction => {
  const anyOrIncludes = (list: unknown, v: string): boolean => !Array.isArray(list) || list.length === 0 || list.includes(v);
  const rule = set.failurePolicy.rules.find((r) => {
    const patterns = (r["onJobFailureMessagePatterns"] as string[] | undefined) ?? [];
    return (
      anyOrIncludes(r["onJobFailureReasons"], failure.reason) &&
      anyOrIncludes(r["targetReplicatedJobs"], replicatedJob) &&
      (patterns.length === 0 || patterns.some((p) => new RegExp(p).test(failure.message)))
    );
  });
  const action = (rule?.["action"] as string | undefined) ?? "RestartJobSet";
  if (action === "FailJobSet") return "failed";
  if (action === "RestartJobSetAndIgnoreMaxRestarts") return "restartUncounted";
  if (action === "RestartJobSet") return countedRestarts >= set.failurePolicy.maxRestarts ? "failed" : "restartCounted";
  throw new Error(`JobSet action ${action}: not simulated`);
};

/**
 * Waits until the pod's output matches `re` (the pod's own progress, not a clock); resolves with
 * the match; rejects if the pod exits first or at the deadline. A function instead of `re`
 * answers `undefined` until it finds what it waits for.
 */
export function until(running: RunningPod, re: RegExp, deadlineMs?: number): Promise<RegExpExecArray>;
export function until<T>(running: RunningPod, find: (output: string) => T | undefined, deadlineMs?: number): Promise<T>;
export function until<T>(running: RunningPod, what: RegExp | ((output: string) => T | undefined), deadlineMs = DEFAULT_DEADLINE_MS): Promise<T | RegExpExecArray> {
  const find = typeof what === "function" ? what : (out: string) => what.exec(out) ?? undefined;
  return new Promise((done, fail) => {
    const check = (): boolean => {
      const found = find(running.output());
      if (found === undefined) return false;
      cleanup();
      done(found);
      return true;
    };
    const onData = (): void => void check();
    const timer = setTimeout(() => {
      cleanup();
      fail(new Error(`${running.pod.task}: not found within ${deadlineMs / 1000} s (${String(what)}):\n${running.output()}`));
    }, deadlineMs);
    const cleanup = (): void => {
      clearTimeout(timer);
      running.child.stdout?.off("data", onData);
      running.child.stderr?.off("data", onData);
    };
    // After the output's own listeners (registered first), so the text is already appended.
    running.child.stdout?.on("data", onData);
    running.child.stderr?.on("data", onData);
    if (check()) return;
    void running.exited.then((code) => {
      if (check()) return;
      cleanup();
      fail(new Error(`${running.pod.task} exited (${code}) before ${String(what)}:\n${running.output()}`));
    });
  });
}

/** The first step above `after` at which the chief's output says a checkpoint was saved, once there is one. */
export const checkpointAfter =
  (after: number) =>
  (output: string): number | undefined =>
    [...output.matchAll(/Checkpoint saved: .*\(global step (\d+),/g)].map((m) => Number(m[1])).find((s) => s > after);

/** Every pod's output, for a failed assertion's message. */
export const outputs = (running: RunningSet): string => running.pods.map((p) => `----- ${p.pod.task} (${p.name})\n${p.output()}`).join("\n");

/** The checkpoint the claim's state file names (`model_checkpoint_path`), or `undefined`. */
export const latestCheckpoint = (set: SimJobSet): string | undefined => {
  const claimDir = [...set.claims.values()][0] as string;
  const state = join(claimDir, "checkpoint");
  if (!existsSync(state)) return undefined;
  return /^model_checkpoint_path: "([^"]+)"/m.exec(readFileSync(state, "utf8"))?.[1];
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/**
 * What the image holds of the project (examples/kubernetes/Dockerfile copies the project into
 * its working directory), bind-mounted read-only into each pod's copy of the image: the CLI's
 * sources and the bundled job with what they import, and package.json (`"type": "module"`).
 */
const IMAGE_FILES = ["node_modules", "src", "hooks", "examples", "package.json"] as const;

/**
 * Run in the pod's network namespace, in new mount and UTS namespaces: the hostname, the hosts
 * file, the image's directory read-only, then each volume (`source target ro|rw` triples, parents
 * first, as the manifest lists them), then the command in the working directory.
 */
const POD_SCRIPT = [
  "set -e",
  'hostname "$1"',
  'mount --bind "$2" /etc/hosts',
  'mount --bind "$3" "$3"',
  'mount -o remount,bind,ro "$3"',
  'workdir="$4"',
  "shift 4",
  // A mount point missing inside a volume mounted before (the claim inside its parent's emptyDir) is made, as the runtime does.
  'while [ "$1" != "--" ]; do',
  '  if [ ! -e "$2" ]; then if [ -d "$1" ]; then mkdir -p "$2"; else touch "$2"; fi; fi',
  '  mount --bind "$1" "$2"',
  '  if [ "$3" = ro ]; then mount -o remount,bind,ro "$2"; fi',
  "  shift 3",
  "done",
  "shift",
  'cd "$workdir"',
  'exec "$@"',
].join("\n");

const volumeOf = (pod: SimPod, name: string): Json => {
  const v = (pod.podSpec["volumes"] as Json[]).find((x) => x["name"] === name);
  if (v === undefined) throw new Error(`${pod.task}: volumeMount ${name} names no volume`);
  return v;
};

/** The image's own `ENV` (the last stage of examples/kubernetes/Dockerfile) and this machine's PATH (the image's node is this one). */
const imageEnv = (): Record<string, string> => {
  const dockerfile = readFileSync(join(root, "examples/kubernetes/Dockerfile"), "utf8");
  const lastStage = dockerfile.slice(dockerfile.lastIndexOf("\nFROM "));
  const env: Record<string, string> = { PATH: process.env["PATH"] ?? "/usr/local/bin:/usr/bin:/bin" };
  for (const m of lastStage.matchAll(/^ENV\s+([A-Za-z_][A-Za-z0-9_]*)=(\S+)\s*$/gm)) env[m[1] as string] = m[2] as string;
  return env;
};

/**
 * The pod's environment: the image's, `HOSTNAME` (the container runtime's), `JOB_COMPLETION_INDEX`
 * (the Job controller's), and the container's `env` with the Downward API's fields as JobSet
 * labels and annotates its pods (kubernetes-sigs/jobset, `jobset.sigs.k8s.io/*`).
 */
const podEnv = (set: SimJobSet, pod: SimPod, podName: string, restartAttempt: number): NodeJS.ProcessEnv => {
  const replicas = set.pods.filter((p) => p.replicatedJob === pod.replicatedJob).length;
  const templateLabels = ((pod.jobSpec["template"] as Json)["metadata"] as Json | undefined)?.["labels"] as Record<string, string> | undefined;
  const labels = jobSetPodLabels({ jobSet: set.name, replicatedJob: pod.replicatedJob, templateLabels, completionIndex: pod.completionIndex, restartAttempt });
  const annotations: Record<string, string> = { ...labels, "batch.kubernetes.io/job-completion-index": String(pod.completionIndex) };
  const field = (path: string): string => {
    const keyed = /^metadata\.(labels|annotations)\['(.+)'\]$/.exec(path);
    const value =
      keyed !== null
        ? (keyed[1] === "labels" ? labels : annotations)[keyed[2] as string]
        : ({ "metadata.name": podName, "metadata.namespace": set.namespace, "spec.nodeName": "sim-node", "status.podIP": podAddress(pod.slot) } as Record<string, string>)[path];
    if (value === undefined) throw new Error(`${pod.task}: the Downward API field ${path} is not simulated (replicas ${replicas})`);
    return value;
  };
  const env: NodeJS.ProcessEnv = { ...imageEnv(), HOSTNAME: pod.hostname, JOB_COMPLETION_INDEX: String(pod.completionIndex) };
  for (const e of pod.container["env"] as Json[]) {
    const fieldPath = ((e["valueFrom"] as Json | undefined)?.["fieldRef"] as Json | undefined)?.["fieldPath"] as string | undefined;
    if (fieldPath === undefined && e["valueFrom"] !== undefined) throw new Error(`${pod.task}: env ${String(e["name"])}: only fieldRef is simulated`);
    env[e["name"] as string] = fieldPath === undefined ? (e["value"] as string) : field(fieldPath);
  }
  return env;
};

/**
 * The hooks of a simulation file: one bridge network for the file (where namespaces can be
 * made), every driver closed after its test, and nothing of the simulation left behind (checked
 * after the file). Returns the constructor of a test's driver on that network.
 */
export const useJobSetDrivers = (): ((set: SimJobSet) => JobSetDriver) => {
  let network: PodNetwork | undefined;
  const drivers: JobSetDriver[] = [];
  beforeAll(() => {
    if (simulationUnavailable === undefined) network = PodNetwork.create();
  });
  afterEach(async () => {
    for (const d of drivers.splice(0)) await d.close();
  });
  afterAll(() => {
    network?.destroy();
    expect(PodNetwork.leftovers()).toEqual([]);
  });
  return (set) => {
    if (network === undefined) throw new Error("no pod network: the simulation is not available here");
    const driver = new JobSetDriver(set, network);
    drivers.push(driver);
    return driver;
  };
};
