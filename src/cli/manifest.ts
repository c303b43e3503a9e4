/**
 * `monitored-session manifest kubernetes <config> --workers N --image IMG [options]` (or
 * `... -- <command> [args…]`): prints the YAML that `kubectl apply -f -` takes to run the job as
 * a cluster of pods, a JobSet by default or an indexed Job (src/kubernetes/). It reads the
 * configuration file for what the manifest depends on (the checkpoint and summary directories,
 * the preemption grace period and exit code, the heartbeat timeout) and puts it into a
 * ConfigMap with the cluster settings the flags give; it reads no Secret and makes none. Bad
 * options exit 2 with one line naming the problem and the fix. What the manifest cannot make
 * safe by itself gets a warning line on stderr: checkpoints on an emptyDir, a cluster that
 * accepts any caller (no token and no TLS), BestEffort pods.
 *
 * @module
 */

import { isLeft } from "fp-ts/lib/Either.js";
import * as t from "io-ts";
import { readFile } from "node:fs/promises";
import { extname, isAbsolute, posix, relative, resolve, sep } from "node:path";
import { parse as parseYaml } from "yaml";

import { ClusterConfigCodec } from "../cluster/ClusterConfig.js";
import { processPerTaskProblem } from "../cluster/coordination/backends.js";
import { decode, formatIssue } from "../codec.js";
import { CheckpointConfigCodec, MAX_ALIAS_COUNT, PreemptionConfigCodec, SummariesConfigCodec } from "../config/index.js";
import { kubernetesManifest, renderManifest, type CheckpointVolume, type PodProgram } from "../kubernetes/KubernetesManifest.js";
import { DEFAULT_RESOURCES } from "../kubernetes/manifestDefaults.js";
import { MIN_JOBSET_VERSION, MIN_KUBERNETES_VERSION } from "../kubernetes/failurePolicy.js";
import { terminationGracePeriod } from "../kubernetes/gracePeriod.js";
import { podClusterSettings, podConfigText } from "../kubernetes/podConfig.js";
import { ExitCodes } from "../runtime/exitCodes.js";
import type { CliIo } from "./cliIo.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The options of `manifest kubernetes`, as commander gives them. */
export interface ManifestFlags {
  readonly workers: number;
  readonly image: string;
  readonly name?: string;
  readonly namespace: string;
  readonly jobset?: boolean;
  readonly indexedJob?: boolean;
  readonly etcd?: string;
  readonly maxRestarts: number;
  readonly checkpointPvc?: string;
  readonly checkpointPvcOnWorkers?: boolean;
  readonly checkpointDir?: string;
  readonly cpu?: string;
  readonly memory?: string;
  readonly bestEffort?: boolean;
  /** False with `--no-network-policy`. */
  readonly networkPolicy?: boolean;
  readonly tokenSecret?: string;
  readonly tlsSecret?: string;
  readonly graceSecs?: number;
  readonly saveSecs?: number;
  readonly workdir: string;
  readonly cli: string;
  readonly port: number;
}

/** Where a command's checkpoint volume is mounted unless `--checkpoint-dir` says otherwise. */
const DEFAULT_COMMAND_CHECKPOINT_DIR = "/checkpoints/train";

/** The sections of the configuration the manifest depends on (the pods' `run` checks the whole file). */
const ManifestSections = t.partial({ checkpoint: CheckpointConfigCodec, summaries: SummariesConfigCodec, preemption: PreemptionConfigCodec, cluster: ClusterConfigCodec });

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Prints the manifest for `config` (or, with `config` undefined, for `command`) on `io.out`;
 * resolves with the exit code: 0, or 2 after one line per problem on `io.err`.
 */
export const manifestCommand = async (config: string | undefined, command: readonly string[] | undefined, flags: ManifestFlags, io: CliIo & { readonly cwd?: string }): Promise<number> => {
  const usage = (line: string): number => {
    io.err.write(`monitored-session manifest kubernetes: ${line}\n`);
    return ExitCodes.usage;
  };
  if (config === undefined && command === undefined) return usage("give a configuration file, or -- <command> [args...]");
  if (config !== undefined && command !== undefined) return usage(`give either <config> or -- <command> [args...], not both (${config} is before --)`);
  const cwd = io.cwd ?? process.cwd();
  const workdir = flags.workdir;
  if (!posix.isAbsolute(workdir)) return usage(`--workdir ${workdir}: expected an absolute path in the image (the directory the Dockerfile copies the project to)`);
  const etcdEndpoints = flags.etcd?.split(",").map((u) => u.trim()).filter((u) => u !== "");
  const settings = podClusterSettings({ etcdEndpoints, tokenSecret: flags.tokenSecret, tlsSecret: flags.tlsSecret });
  const settingsCheck = decode(ClusterConfigCodec, settings);
  if (isLeft(settingsCheck)) return usage(`--etcd: ${settingsCheck.left.map(formatIssue).join("; ")}`);

  let program: PodProgram;
  let checkpoint: CheckpointVolume | undefined;
  const scratch: string[] = [];
  const chiefScratch: string[] = [];
  let heartbeatTimeoutSecs: number | undefined;
  let preemptionGracePeriodSecs: number | undefined;
  let preemptionExitCode: number | undefined;
  const warnings: string[] = [];
  let name = flags.name;

  if (config !== undefined) {
    if (flags.checkpointDir !== undefined) return usage(`--checkpoint-dir is for -- <command>; with a configuration file its checkpoint.dir decides (${config})`);
    const file = resolve(cwd, config);
    const rel = relative(cwd, file);
    if (rel.startsWith("..") || isAbsolute(rel)) {
      return usage(`${config} is outside the working directory ${cwd}; run the command from the project directory that the image holds at --workdir (${workdir})`);
    }
    let text: string;
    try {
      text = await readFile(file, "utf8");
    } catch (e) {
      return usage(`cannot read ${config} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}); give the configuration file that \`run\` takes`);
    }
    const ext = extname(file).toLowerCase();
    const format = ext === ".json" || (ext !== ".yaml" && ext !== ".yml" && /^\s*[{[]/.test(text)) ? "json" : "yaml";
    let parsed: unknown;
    try {
      parsed = format === "json" ? JSON.parse(text) : parseYaml(text, { maxAliasCount: MAX_ALIAS_COUNT });
    } catch (e) {
      return usage(`${config}: not valid ${format === "json" ? "JSON" : "YAML"} (${(e as Error).message.split("\n")[0] ?? ""}); \`monitored-session run ${config}\` shows where`);
    }
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return usage(`${config}: expected a configuration object`);
    const sections = decode(ManifestSections, parsed);
    if (isLeft(sections)) return usage(`${config}: ${sections.left.map(formatIssue).join("; ")}`);
    const c = sections.right;
    // The pods run the file's section with the flags' settings written over it (podConfigText):
    // check that section as each pod's `run` will (--etcd makes the backend etcd, whatever the file says).
    const podSection = decode(ClusterConfigCodec, { ...(c.cluster ?? {}), ...settings });
    if (isLeft(podSection)) return usage(`${config}: the pods' cluster: section (the file's, with the flags' settings over it): ${podSection.left.map(formatIssue).join("; ")}`);
    const perPod = processPerTaskProblem(podSection.right.backend, flags.workers, "a Kubernetes manifest");
    if (perPod !== undefined) return usage(`${config}: ${perPod}`);
    heartbeatTimeoutSecs = c.cluster?.timeouts?.heartbeatTimeoutSecs;
    preemptionGracePeriodSecs = c.preemption?.gracePeriodSecs;
    preemptionExitCode = c.preemption?.exitCode;
    const configFile = rel.split(sep).join("/");
    const configDir = posix.join(workdir, posix.dirname(configFile));
    const inPod = (p: string): string => (posix.isAbsolute(p) ? posix.normalize(p) : posix.join(configDir, p.split(sep).join("/")));
    const hides = (dir: string): string | undefined => {
      const under = (a: string, b: string): boolean => a === b || b.startsWith(a.endsWith("/") ? a : `${a}/`);
      return under(dir, workdir) ? `it would hide ${workdir}, the image's working directory` : under(dir, posix.join(workdir, configFile)) ? "it holds the configuration file" : undefined;
    };
    const checkpointDir = c.checkpoint === undefined ? undefined : inPod(c.checkpoint.dir);
    if (checkpointDir !== undefined) {
      const why = hides(checkpointDir);
      if (why !== undefined) return usage(`${config}: checkpoint.dir is ${checkpointDir} in the pod, where a volume cannot be mounted: ${why}; use a directory of its own (./runs/<name>)`);
      const parent = posix.dirname(checkpointDir);
      // A writable parent: a custom loop's workers write workertemp_<id> beside the directory.
      if (hides(parent) === undefined && parent !== "/") scratch.push(parent);
      if (flags.checkpointPvc !== undefined) checkpoint = { claimName: flags.checkpointPvc, mountPath: checkpointDir, onWorkers: flags.checkpointPvcOnWorkers === true };
      else if (hides(parent) !== undefined || parent === "/") chiefScratch.push(checkpointDir);
      if (flags.checkpointPvc === undefined) {
        warnings.push(`warning: no --checkpoint-pvc: the checkpoints in ${checkpointDir} live on an emptyDir and are lost when the pods are recreated, so a restart starts over; give --checkpoint-pvc <claim>`);
      }
    } else if (flags.checkpointPvc !== undefined) {
      return usage(`--checkpoint-pvc ${flags.checkpointPvc}: ${config} has no checkpoint.dir to mount it at; add checkpoint: { dir: ./runs/<name> }`);
    }
    const summaryDir = c.summaries?.dir === undefined ? undefined : inPod(c.summaries.dir);
    if (summaryDir !== undefined && (checkpointDir === undefined || !(summaryDir + "/").startsWith(checkpointDir + "/"))) {
      const why = hides(summaryDir);
      if (why !== undefined) return usage(`${config}: summaries.dir is ${summaryDir} in the pod, where a volume cannot be mounted: ${why}; put the summaries under checkpoint.dir`);
      if (!scratch.some((s) => (summaryDir + "/").startsWith(s + "/"))) chiefScratch.push(summaryDir);
    }
    program = { kind: "config", configFile, configText: podConfigText(text, format, settings), cli: flags.cli };
    name ??= defaultName(posix.basename(configFile, posix.extname(configFile)));
  } else {
    if (flags.checkpointPvc !== undefined) {
      const dir = flags.checkpointDir ?? DEFAULT_COMMAND_CHECKPOINT_DIR;
      if (!posix.isAbsolute(dir) || posix.normalize(dir) === "/") return usage(`--checkpoint-dir ${dir}: expected an absolute directory other than /`);
      checkpoint = { claimName: flags.checkpointPvc, mountPath: posix.normalize(dir), onWorkers: flags.checkpointPvcOnWorkers === true };
      const parent = posix.dirname(checkpoint.mountPath);
      if (parent !== "/") scratch.push(parent);
    } else if (flags.checkpointDir !== undefined) {
      return usage(`--checkpoint-dir ${flags.checkpointDir}: it is where --checkpoint-pvc is mounted; give --checkpoint-pvc <claim> too`);
    }
    program = { kind: "command", command: command ?? [], clusterSettings: settings };
    name ??= "training";
  }
  if (flags.checkpointPvcOnWorkers === true && flags.checkpointPvc === undefined) return usage("--checkpoint-pvc-on-workers mounts the --checkpoint-pvc claim on the workers; give --checkpoint-pvc <claim> too");

  const grace =
    flags.graceSecs === undefined
      ? terminationGracePeriod({ saveSecs: flags.saveSecs, heartbeatTimeoutSecs, preemptionGracePeriodSecs })
      : { seconds: flags.graceSecs, explanation: `--grace-secs ${flags.graceSecs}` };
  const mode = flags.indexedJob === true ? "indexed-job" : "jobset";
  const manifest = kubernetesManifest({
    name,
    namespace: flags.namespace,
    mode,
    workers: flags.workers,
    image: flags.image,
    workdir,
    program,
    port: flags.port,
    maxRestarts: flags.maxRestarts,
    checkpoint,
    scratchDirs: scratch,
    chiefScratchDirs: chiefScratch,
    cpu: flags.cpu,
    memory: flags.memory,
    bestEffort: flags.bestEffort,
    networkPolicy: flags.networkPolicy,
    tokenSecret: flags.tokenSecret,
    tlsSecret: flags.tlsSecret,
    terminationGracePeriodSeconds: grace.seconds,
    preemptionExitCode,
  });
  if (isLeft(manifest)) return usage(manifest.left.join("; "));
  const networkPolicy = flags.networkPolicy !== false;
  // With --tls-secret the TLS is mutual (the manifest always names the CA): a caller needs a certificate.
  if (flags.tokenSecret === undefined && flags.tlsSecret === undefined) {
    warnings.push(
      networkPolicy
        ? `warning: no --token-secret: the tasks accept any connection (no token, no TLS); the NetworkPolicy admits only this job's pods, and only where the cluster's network plugin enforces NetworkPolicies; give --token-secret <secret>`
        : `warning: no --token-secret and --no-network-policy: anything that reaches a pod's port ${flags.port} can join or disrupt the training (no token, no TLS); give --token-secret <secret>`,
    );
  }
  if (flags.bestEffort === true) {
    warnings.push(
      `warning: --best-effort: the pods request no CPU or memory (QoS class BestEffort), so under node pressure the kubelet evicts them first, and each eviction restarts the set without counting toward --max-restarts, possibly forever; drop it for the default requests (cpu ${DEFAULT_RESOURCES.cpu}, memory ${DEFAULT_RESOURCES.memory})`,
    );
  }
  for (const w of warnings) io.err.write(`${w}\n`);
  const prerequisites = [
    ...[flags.tokenSecret, flags.tlsSecret].filter((s): s is string => s !== undefined).map((s) => `secret/${s}`),
    ...(checkpoint === undefined ? [] : [`persistentvolumeclaim/${checkpoint.claimName}${checkpoint.onWorkers || mode === "indexed-job" ? " (ReadWriteMany: more than one pod mounts it)" : ""}`]),
  ];
  const header = [
    `Generated by monitored-session manifest kubernetes: ${flags.workers} training task${flags.workers === 1 ? "" : "s"} (the chief counted), ${mode === "jobset" ? "a JobSet" : "an indexed Job and its headless Service"}. See docs/kubernetes.md.`,
    mode === "jobset"
      ? `Needs JobSet ${MIN_JOBSET_VERSION} or later (onJobFailureMessagePatterns) and Kubernetes ${MIN_KUBERNETES_VERSION} or later (podFailurePolicy, DisruptionTarget).`
      : `Needs Kubernetes ${MIN_KUBERNETES_VERSION} or later (podFailurePolicy, DisruptionTarget). No gang restart: a failed pod is replaced alone.`,
    `terminationGracePeriodSeconds ${grace.seconds}: ${grace.explanation}.`,
    flags.bestEffort === true
      ? "No resources requested (--best-effort): QoS class BestEffort, the first pods evicted under node pressure."
      : `Each pod requests cpu ${flags.cpu ?? DEFAULT_RESOURCES.cpu} and memory ${flags.memory ?? DEFAULT_RESOURCES.memory} (the memory limit too): QoS class Burstable.`,
    ...(networkPolicy
      ? [`NetworkPolicy ${name}: the pods accept connections only from this job's own pods; it needs a network plugin that enforces NetworkPolicies (--no-network-policy omits it).`]
      : []),
    ...(prerequisites.length === 0 ? [] : [`Create first (this command reads and makes none): ${prerequisites.join(", ")}.`]),
  ];
  io.out.write(renderManifest(manifest.right, header));
  return ExitCodes.done;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** A DNS-1035 label from a file's stem (`tfjs-classifier.yaml` → `tfjs-classifier`), or `training`. */
const defaultName = (stem: string): string => {
  const label = stem
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, "-")
    .replace(/^[^a-z]+/, "")
    .replace(/-+$/, "")
    .slice(0, 40)
    .replace(/-+$/, "");
  return label === "" ? "training" : label;
};

