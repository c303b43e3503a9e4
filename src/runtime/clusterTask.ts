/**
 * Which task of a cluster `run` is: TF_CONFIG (the cluster spec and this task, from the
 * environment only) joined with the configuration's `cluster:` section (how tasks coordinate and
 * secure their calls). Without TF_CONFIG, `run` is one process and this is `undefined`.
 *
 * A bad TF_CONFIG is every problem with its path; with TF_CONFIG set, the configuration may not
 * say `isChief` or `master` (the task decides them). Either exits 2 before anything is created.
 *
 * @module
 */

import { left, right, type Either } from "fp-ts/lib/Either.js";

import type { ClusterConfig } from "../cluster/ClusterConfig.js";
import { withAbsolutePaths } from "./clusterSettings.js";
import { resolveTfConfig, type ResolvedCluster } from "../cluster/ClusterResolver.js";
import { TfConfigError, tfConfigFromEnv, type TfConfig } from "../cluster/TfConfig.js";
import type { ConfigIssue, TrainingConfig } from "../config/index.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** This process's task, and the cluster options its session and coordination use. */
export interface ClusterTask extends ResolvedCluster {
  /** `<type>:<index>` (`worker:1`). */
  readonly name: string;
  /** This task's address in TF_CONFIG. */
  readonly address: string;
  /** The task's session target, TensorFlow's `master`: `grpc://<address>`. */
  readonly master: string;
  /** The `cluster:` section (`{}` when absent), its file paths made absolute. */
  readonly options: ClusterConfig;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * TF_CONFIG from `env`: `right(undefined)` when it is unset or blank (one process), `left` with
 * every problem (each with its path) when it is invalid.
 */
export const readTfConfig = (env: NodeJS.ProcessEnv): Either<readonly ConfigIssue[], TfConfig | undefined> => {
  try {
    return right(tfConfigFromEnv(env));
  } catch (e) {
    if (e instanceof TfConfigError) return left(e.issues);
    throw e;
  }
};

/**
 * The task `tfConfig` names, with `config`'s `cluster:` section (relative paths resolved against
 * `baseDir`). `left` lists the configuration's keys that TF_CONFIG decides (`isChief`, `master`).
 */
export const clusterTaskOf = (tfConfig: TfConfig, config: Pick<TrainingConfig, "isChief" | "master" | "cluster">, baseDir: string): Either<readonly ConfigIssue[], ClusterTask> => {
  const fromTask = (["isChief", "master"] as const)
    .filter((key) => config[key] !== undefined)
    .map((key) => ({ path: key, message: "comes from TF_CONFIG's task when TF_CONFIG is set; remove it from the configuration (the same file runs on every task)" }));
  if (fromTask.length > 0) return left(fromTask);
  return right(clusterTaskFrom(resolveTfConfig(tfConfig), withAbsolutePaths(config.cluster ?? {}, baseDir)));
};

/** The task `resolved` names, with the `cluster:` settings `options` (file paths already absolute). */
export const clusterTaskFrom = (resolved: ResolvedCluster, options: ClusterConfig): ClusterTask => {
  const address = resolved.clusterSpec.taskAddress(resolved.taskType, resolved.taskIndex);
  return { ...resolved, name: `${resolved.taskType}:${resolved.taskIndex}`, address, master: `grpc://${address}`, options };
};
