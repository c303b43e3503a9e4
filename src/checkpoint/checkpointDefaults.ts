/**
 * TensorFlow's defaults for a checkpoint directory, by the API that opens it, written once:
 * each API keeps the original's own. See `openCheckpointDirectory` (checkpointDirectory.ts).
 *
 * @module
 */

/** The defaults of each API that opens a checkpoint directory. */
export const CheckpointDefaults = {
  /** `tf.train.CheckpointManager`: `ckpt-<n>`, the 5 newest. */
  manager: { checkpointName: "ckpt", maxToKeep: 5 },
  /** The preemption handler's own manager (TensorFlow's `PreemptionCheckpointHandler` makes one with `max_to_keep=1`): `ckpt-<n>`, the newest only. */
  preemption: { checkpointName: "ckpt", maxToKeep: 1 },
  /** `tf.compat.v1.train.Saver`: the hooks, `MonitoredTrainingSession`, `Supervisor` and `monitored-session run`: `model.ckpt-<step>`, the 5 newest. */
  saver: { checkpointName: "model.ckpt", maxToKeep: 5 },
} as const;

/** Which API's defaults a directory opens with (see {@link CheckpointDefaults}). */
export type CheckpointApi = keyof typeof CheckpointDefaults;
