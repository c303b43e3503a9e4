/**
 * Crash-safe checkpoints: the on-disk format, the `Saver` seam, the `checkpoint` state file,
 * `CheckpointManager` (retention, interval gating, restore with fallback) and
 * `AsyncCheckpointer` (background saves). See docs/checkpoints.md.
 *
 * @module
 */

/* Format */
export {
  BUNDLE_FORMAT,
  DATA_SUFFIX,
  INDEX_SUFFIX,
  dataPath,
  indexPath,
  readBundle,
  readManifest,
  writeBundle,
  type BundleMetadata,
  type CheckpointContents,
  type Manifest,
  type TensorEntry,
} from "./BundleFormat.js";

/* Saver */
export { BundleSaver, type BundleSaverOptions, type SaveSource, type Saver, type SaverSaveOptions } from "./Saver.js";

/* State file */
export {
  CHECKPOINT_STATE_FILENAME,
  generateCheckpointState,
  getCheckpointState,
  latestCheckpoint,
  readCheckpointState,
  updateCheckpointState,
  type CheckpointState,
  type CheckpointStateOptions,
  type CheckpointStateRead,
} from "./CheckpointState.js";

/* Files being written */
export { processTempFiles, TempFileRegistry } from "./TempFileRegistry.js";

/* Manager */
export {
  CheckpointManager,
  type CheckpointManagerLockOptions,
  type CheckpointManagerOptions,
  type CheckpointSaveOptions,
  type ManagedCheckpoint,
  type PreparedSave,
  type RetentionContext,
  type RetentionDecision,
  type RetentionPolicy,
} from "./CheckpointManager.js";

/* Directory lock */
export {
  CheckpointDirInUseError,
  CheckpointDirLock,
  LOCK_FILENAME,
  type CheckpointDirLockOptions,
  type LockHolder,
  type ProcessIdentity,
} from "./CheckpointDirLock.js";

/* Async saving */
export {
  AsyncCheckpointer,
  CheckpointSaveError,
  type AsyncCheckpointerOptions,
  type AsyncSavePolicy,
  type AsyncSaveResult,
  type CheckpointEvent,
  type CheckpointOutcome,
} from "./AsyncCheckpointer.js";

/* Files */
export { writeFileAtomic } from "./writeFileAtomic.js";
