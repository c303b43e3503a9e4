/**
 * Preemption handling: save a checkpoint at a step boundary when the process is about to be
 * terminated, exit with a "restart me" code, and resume at exactly that step. See the
 * "Preemption" section of docs/checkpoints.md.
 *
 * @module
 */

/* Configuration */
export { PREEMPTION_EXIT_CODE, TerminationConfig, defaultExitFn, type TerminationConfigOptions } from "./TerminationConfig.js";

/* Decision */
export {
  LocalPreemptionCoordinator,
  type LocalPreemptionCoordinatorOptions,
  type PreemptionCoordinator,
  type PreemptionDecision,
} from "./PreemptionCoordinator.js";

/* Multi-worker agreement */
export { ClusterPreemptionCoordinator, type AgreementEvent, type ClusterPreemptionCoordinatorOptions, type PreemptionAgreement } from "./ClusterPreemptionCoordinator.js";
export { CHIEF_LOST_EXIT_CODE, ChiefLostError, type ChiefLossRecovery, type PreemptionClusterResolver, type PreemptionKeyValueStore, type ReplicaStop, type TakenNotice } from "./PreemptionCluster.js";

/* Handler */
export {
  CHECKPOINTED_RUNS,
  PreemptionCheckpointHandler,
  type PreemptionCheckpointHandlerOptions,
  type PreemptionEvent,
  type SignalTarget,
} from "./PreemptionCheckpointHandler.js";

/* Notices */
export {
  DEFAULT_NOTICE_SIGNALS,
  TerminationNotices,
  type NoticeProcess,
  type TerminationNotice,
  type TerminationNoticesOptions,
  type TerminationSource,
} from "./TerminationNotices.js";

/* Platform notices */
export {
  awsWatcher,
  azureWatcher,
  createPlatformWatcher,
  detectPlatform,
  gceWatcher,
  kubernetesWatcher,
  AWS_METADATA_URL,
  AZURE_METADATA_URL,
  GCE_MAINTENANCE_NOTICE_SECS,
  GCE_METADATA_URL,
  GCE_PREEMPTION_NOTICE_SECS,
  PLATFORM_EVIDENCE_FILES,
  PREEMPTION_PLATFORMS,
  TERMINATION_GRACE_PERIOD_ENV,
  type AwsWatcherOptions,
  type AzureWatcherOptions,
  type CreatePlatformWatcherOptions,
  type DetectedPlatform,
  type DetectPlatformOptions,
  type FetchFn,
  type GceWatcherOptions,
  type KubernetesWatcherOptions,
  type MetadataServiceOptions,
  type PlatformName,
  type PlatformNotice,
  type PlatformWatcher,
  type PreemptionPlatform,
} from "./platforms/index.js";
