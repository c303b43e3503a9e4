/**
 * Crash-safe checkpoints in TensorFlow's V2 format (which TensorFlow reads and writes), the `Saver` seam, the `checkpoint` state file,
 * `CheckpointManager` (retention, interval gating, restore with fallback) and
 * `AsyncCheckpointer` (background saves). See docs/checkpoints.md.
 *
 * @module
 */

/* Format */
export {
  CREATED_AT_TENSOR,
  DATA_SUFFIX,
  INDEX_SUFFIX,
  OBJECT_GRAPH_TENSOR,
  RESERVED_TENSOR_PREFIX,
  STEP_TENSOR,
  dataPath,
  indexPath,
  readBundle,
  readCheckpointInfo,
  writeBundle,
  type BundleMetadata,
  type CheckpointContents,
  type CheckpointFormat,
  type CheckpointInfo,
  type CheckpointTensorInfo,
} from "./checkpointFormat.js";

/* TensorFlow 2's object graph: restore by object path */
export { ObjectGraph, restoreInto, VARIABLE_VALUE_SUFFIX, type ObjectGraphContents } from "./objectGraph.js";

/* TensorFlow's V2 bundle, tensor by tensor */
export { TensorBundleReader, type BundleIndex, type TensorBundleEntry } from "./tensorBundle/TensorBundleReader.js";
export { TensorBundleWriter, type BundleTensor, type TensorBundleWriterOptions } from "./tensorBundle/TensorBundleWriter.js";
export type { BundleHeader, VersionDef } from "./tensorBundle/bundleProtos.js";

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

/* Opening a directory */
export { CheckpointDefaults, openCheckpointDirectory, type CheckpointApi, type CheckpointDirectoryOptions } from "./checkpointDirectory.js";

/* Manager */
export {
  CheckpointManager,
  type CheckpointManagerLockOptions,
  type CheckpointManagerOptions,
  type CheckpointSaveOptions,
  type ManagedCheckpoint,
  type PreparedSave,
  Retention,
  describePolicy,
  type DescribedRetentionPolicy,
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
