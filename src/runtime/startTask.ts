/**
 * `startTask()`: a program of your own joins its cluster as `monitored-session run` does. It reads
 * this task's place from TF_CONFIG (or, without it, from the environment of a pod that
 * `monitored-session manifest kubernetes` describes) and the cluster settings from
 * `MONITORED_SESSION_CLUSTER` (set by `monitored-session launch -- <command>` and by the
 * manifest, or by hand on each machine), starts the
 * task's server, on the chief the embedded coordination service, registers with heartbeats, and
 * watches the cluster for failures; with `dataParallel` it joins the replica group, whose
 * collective (with its stop vote) goes to `tfjsSession({ collective: task.collective })`.
 *
 * @example
 * ```ts
 * import { PreemptionCheckpointHandler } from "monitored-session/preemption";
 * import { startTask } from "monitored-session/runtime";
 * import type { VariableStore } from "monitored-session";
 *
 * declare const store: VariableStore;
 * declare function trainStep(): Promise<void>;
 * const task = await startTask(); // TF_CONFIG from the environment
 * const handler = await PreemptionCheckpointHandler.create({ clusterResolver: task, checkpointDir: "/runs/exp1", store });
 * while (handler.totalRunCalls < 1000) await handler.run(trainStep);
 * await handler.close();
 * await task.close();
 * ```
 *
 * @module
 */

import { systemClock, type Clock } from "../time/Clock.js";
import type { ClusterConfig } from "../cluster/ClusterConfig.js";
import { resolveTfConfig, type ResolvedCluster } from "../cluster/ClusterResolver.js";
import { waitForPodTfConfig } from "../cluster/PodClusterResolver.js";
import { TF_CONFIG } from "../cluster/TfConfig.js";
import { ValueError } from "../errors.js";
import { defaultLogger, type Logger } from "../Logger.js";
import { startClusterTask, type ClusterRuntime } from "./clusterRuntime.js";
import { clusterSettingsFromEnv, withAbsolutePaths } from "./clusterSettings.js";
import { clusterTaskFrom } from "./clusterTask.js";
import { LAUNCH_READY_ENV, LAUNCH_READY_LINE } from "./launchReady.js";
import { ReplicaGroup } from "./replicaGroup.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A started task of a cluster: see {@link ClusterRuntime}. */
export type TaskRuntime = ClusterRuntime;

/** Options of {@link startTask}. */
export interface StartTaskOptions {
  /** Where TF_CONFIG (or a pod's variables, `POD_ENV` of `monitored-session/cluster`) and `MONITORED_SESSION_CLUSTER` are read (default `process.env`). */
  readonly env?: NodeJS.ProcessEnv | undefined;
  /**
   * This task's place in the cluster, from a cluster resolver (`resolveCluster()` of
   * `monitored-session/cluster`, or your own); default: resolved from TF_CONFIG in `env`.
   */
  readonly resolver?: ResolvedCluster | undefined;
  /** The `cluster:` settings (default: `MONITORED_SESSION_CLUSTER`, else the defaults: embedded backend, no token, plaintext). */
  readonly settings?: ClusterConfig | undefined;
  /**
   * Join the replica group of synchronous data-parallel training (every training task, the
   * chief rank 0): {@link ClusterRuntime.collective} is then its collective (default: the
   * settings' `dataParallel`, else `false`).
   */
  readonly dataParallel?: boolean | undefined;
  /** How long a worker without a replica group waits for a lost chief (default 7200 s). */
  readonly maxWaitSecs?: number | undefined;
  readonly logger?: Logger | undefined;
  readonly clock?: Clock | undefined;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Starts this process's task of the cluster TF_CONFIG describes and resolves once every task
 * registered (and, with `dataParallel`, the replica group is joined). Under `launch`, it prints
 * the line that tells `launch` the task started.
 *
 * @throws ValueError when TF_CONFIG is unset (and this is no pod of a generated manifest), or
 *   TF_CONFIG, the pod's variables or `MONITORED_SESSION_CLUSTER` is invalid (one line, every
 *   problem with its path); `PeerNotResolvedError` when a peer pod's DNS name does not resolve
 *   by the deadline; `ClusterStartError` for what the user fixes
 *   (a port in use, an unreadable token or TLS file, a token the chief rejects).
 */
export const startTask = async (options: StartTaskOptions = {}): Promise<TaskRuntime> => {
  const env = options.env ?? process.env;
  // TF_CONFIG wins; without it, a pod of a generated manifest finds its cluster in its own
  // environment once its peers' DNS names resolve (docs/kubernetes.md).
  const tfConfig = options.resolver === undefined ? await waitForPodTfConfig({ env, clock: options.clock, log: (line) => (options.logger ?? defaultLogger).info(line) }) : undefined;
  if (options.resolver === undefined && tfConfig === undefined) {
    throw new ValueError(
      `startTask: ${TF_CONFIG} is not set, so this process is not a task of a cluster; run it under \`monitored-session launch --workers N -- <command>\`, set ${TF_CONFIG} on each task (docs/distributed.md), or start it from \`monitored-session manifest kubernetes\` (docs/kubernetes.md)`,
    );
  }
  const settings = options.settings === undefined ? (clusterSettingsFromEnv(env) ?? {}) : withAbsolutePaths(options.settings, process.cwd());
  const resolved = options.resolver ?? resolveTfConfig(tfConfig as NonNullable<typeof tfConfig>);
  const task = clusterTaskFrom(resolved, settings);
  const dataParallel = options.dataParallel ?? settings.dataParallel ?? false;
  const group = dataParallel ? ReplicaGroup.of(resolved) : undefined;
  const logger = options.logger ?? defaultLogger;
  const launched = env[LAUNCH_READY_ENV] === "1";
  // Under launch: no orphan trains on if launch is killed.
  const runtime = await startClusterTask(task, { env, group, maxWaitSecs: options.maxWaitSecs, logger, clock: options.clock ?? systemClock, watchParent: launched });
  if (launched) process.stderr.write(`${LAUNCH_READY_LINE}\n`);
  return runtime;
};
