/**
 * `monitored-session/runtime`: what a task of a cluster starts, for a program of your own as for
 * `monitored-session run`: its gRPC server, on the chief the embedded coordination service, the
 * coordination client with registration and heartbeats, the failure watch, the chief's model
 * publisher and, for synchronous data-parallel training, the replica group with its stop vote.
 *
 * @module
 */

/* The task */
export { startTask, type StartTaskOptions, type TaskRuntime } from "./startTask.js";
export type { RuntimeEvent } from "./events.js";
export { ClusterStartError, startClusterTask, type ClusterRuntime, type StartClusterOptions } from "./clusterRuntime.js";
export { clusterTaskOf, readTfConfig, type ClusterTask } from "./clusterTask.js";

/* Data-parallel training */
export { ReplicaGroup, ReplicaGroupError } from "./replicaGroup.js";

/* Settings and launch */
export { CLUSTER_SETTINGS_ENV, clusterSettingsEnv, clusterSettingsFromEnv, withAbsolutePaths } from "./clusterSettings.js";
export { LAUNCH_READY_ENV, LAUNCH_READY_LINE } from "./launchReady.js";
