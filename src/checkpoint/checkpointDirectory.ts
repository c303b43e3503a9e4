/**
 * The one way a checkpoint directory is opened: {@link openCheckpointDirectory} makes its
 * `CheckpointManager` from one options value, with the defaults of the API that opens it written
 * once (checkpointDefaults.ts). The hooks, `monitoredTrainingSession`, `Supervisor`,
 * the preemption handler, the session manager's restore and `monitored-session run` go through
 * it, so a retention setting (a {@link RetentionPolicy}, or TensorFlow's `maxToKeep` and
 * `keepCheckpointEveryNHours`) means the same everywhere.
 *
 * @module
 */

import { CheckpointDefaults, type CheckpointApi } from "./checkpointDefaults.js";
import { CheckpointManager, type CheckpointManagerOptions } from "./CheckpointManager.js";

export { CheckpointDefaults, type CheckpointApi } from "./checkpointDefaults.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A manager's options, any of which may be `undefined` (left to the API's default). */
export type CheckpointDirectoryOptions = { readonly directory: string } & { readonly [K in Exclude<keyof CheckpointManagerOptions, "directory">]?: CheckpointManagerOptions[K] | undefined };

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Opens the checkpoint directory `options.directory`: its manager, with `api`'s defaults for
 * what `options` leaves out (`undefined` fields count as left out). Takes the directory's lock
 * unless `lock: false`, as `CheckpointManager.create` does.
 *
 * @example
 * ```ts
 * import { openCheckpointDirectory, Retention } from "monitored-session/checkpoint";
 *
 * const manager = await openCheckpointDirectory({ directory: "/tmp/run", retentionPolicy: Retention.maxToKeep(3) }, "saver");
 * console.log(manager.checkpointName); // model.ckpt
 * await manager.close();
 * ```
 */
export const openCheckpointDirectory = (options: CheckpointDirectoryOptions, api: CheckpointApi = "manager"): Promise<CheckpointManager> => {
  const given = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)) as unknown as CheckpointManagerOptions;
  // A retention policy replaces the default maxToKeep (the manager refuses the two together).
  const { maxToKeep, ...defaults } = CheckpointDefaults[api];
  return CheckpointManager.create({ ...defaults, ...(given.retentionPolicy === undefined ? { maxToKeep } : {}), ...given });
};
