/**
 * monitored-session: TensorFlow's hook-based training-session machinery for TypeScript.
 *
 * `.` is the core a training loop needs: sessions and their creators, the hook contract, the
 * event stream, the coordinator, tensors, clocks, loggers, errors and the
 * `monitoredTrainingSession` factory. Each separable area has its own subpath:
 *
 * - `monitored-session/hooks`: the built-in hooks;
 * - `monitored-session/checkpoint`: the checkpoint format, savers, `CheckpointManager`;
 * - `monitored-session/summary`: TensorBoard summaries and event files;
 * - `monitored-session/preemption`: saving and exiting on a termination notice;
 * - `monitored-session/testing`: the test kit (`FakeSession`, `VirtualClock`, `HookRecorder`);
 * - `monitored-session/config`: configuration files, the hook registry, jobs and plugins;
 * - `monitored-session/tfjs`: the TensorFlow.js adapter (loads TensorFlow.js);
 * - `monitored-session/compat/v1`: TensorFlow 1's `Supervisor`;
 * - `monitored-session/cluster`: TF_CONFIG, the cluster spec and resolvers, the gRPC `Server`,
 *   the coordination backends and their registry, the collective;
 * - `monitored-session/runtime`: `startTask` (a task of a cluster started from your own
 *   program), its exit codes and events.
 *
 * Nothing else can be imported: `monitored-session/internal/*` is closed in package.json.
 *
 * See "Layers and public API" in docs/architecture.md.
 *
 * @module
 */

// The checkpointer's session events (`checkpointSkipped`, `checkpointCoalesced`,
// `checkpointStarted`) are declared beside it by augmentation of `SessionEventMap`: importing it
// here makes them part of `SessionEvent` for whoever imports this entry point.
import "./checkpoint/AsyncCheckpointer.js";

/* Sessions */

export {
  MonitoredSession,
  SingularMonitoredSession,
  withSession,
  type DefaultCreatorOptions,
  type MonitoredSessionOptions,
  type SessionRuntimeOptions,
  type SessionServicesOptions,
  type StepContext,
} from "./pipeline/MonitoredSession.js";
export {
  fetchOf,
  GLOBAL_STEP_NAME,
  type Feeds,
  type Fetch,
  type FetchResult,
  type Fetches,
  type FetchValue,
  type ObjectPaths,
  type RunMetadata,
  type RunOptions,
  type Session,
  type VariableCollection,
  type VariableRestoreOptions,
  type VariableStore,
} from "./session/Session.js";
export { Graph, GraphSession, Variable, type OpContext, type OpFn, type VariableOptions } from "./session/Graph.js";

/* Session creation */
export { Scaffold, type ScaffoldInitFn, type ScaffoldOp, type ScaffoldOptions } from "./creation/Scaffold.js";
export {
  SessionManager,
  type PrepareSessionOptions,
  type RestoreOptions,
  type SessionFactory,
  type SessionManagerOptions,
  type WaitForSessionOptions,
} from "./creation/SessionManager.js";
export {
  ChiefSessionCreator,
  WorkerSessionCreator,
  type ChiefSessionCreatorOptions,
  type SessionCreationContext,
  type SessionCreator,
  type SessionCreatorOptions,
  type WorkerSessionCreatorOptions,
} from "./creation/SessionCreators.js";

/* MonitoredTrainingSession */
export {
  monitoredTrainingSession,
  type Cadence,
  type CheckpointingOptions,
  type MonitoredTrainingSessionOptions,
  type SummaryOptions,
  type TrainingClusterOptions,
} from "./training/monitoredTrainingSession.js";
export { USE_DEFAULT, type Defaultable } from "./util/useDefault.js";

/* Hooks */
export {
  SessionRunArgs,
  SessionRunContext,
  SessionRunHook,
  hook,
  isSessionRunHook,
  type HookEnv,
  type MaybePromise,
  type SessionRunValues,
} from "./hook/SessionRunHook.js";

/* Events */
export { describeCause, type HookTimingSpan, type SessionEvent, type SessionEventMap, type SessionEventOf } from "./events/SessionEvent.js";
export { eventLogger, logObserver, type SessionEventListener } from "./events/logObserver.js";
export { ComponentEvents, type EventSource } from "./events/componentEvents.js";
export { hookEnv, type HookEnvOptions } from "./hook/hookEnv.js";

/* Goodput */
export { GoodputRecorder, type GoodputRecorderOptions } from "./goodput/GoodputRecorder.js";
export {
  BADPUT_BUCKETS,
  GoodputRecordCodec,
  goodputLogName,
  parseGoodputLog,
  readGoodputLogs,
  type BadputBucket,
  type GoodputLog,
  type GoodputRecord,
  type PhaseBucket,
} from "./goodput/goodputLog.js";
export { computeGoodput, describeGoodput, type Badput, type GoodputFigures, type RunGoodput, type TaskGoodput } from "./goodput/computeGoodput.js";
export { badputTag, GOODPUT_TAG, goodputSummaries, type GoodputSummariesOptions } from "./goodput/goodputSummaries.js";

/* Session targets */
export {
  defaultSessionTargets,
  inProcessTarget,
  SessionTargetRegistry,
  type SessionTarget,
  type SessionTargetResolver,
  type SessionTask,
} from "./pipeline/SessionTarget.js";
export type { ChiefModel, ChiefModelState } from "./session/ChiefModel.js";

/* Coordination */
export { Coordinator, defaultCoordinatorFactory, task, type CoordinatedTask, type CoordinatorFactory, type CoordinatorOptions, type ErrorClass, type JoinOptions } from "./coordinator/Coordinator.js";
export { Looper, type LooperOptions } from "./coordinator/Looper.js";
export { fairSession } from "./pipeline/EventLoopYield.js";

/* Resumable state */
export { ResumableState, type Json, type RegisterOptions, type ResumableEntry } from "./creation/ResumableState.js";

/* Tensors */
export {
  DTYPES,
  fromTensorValue,
  isTensorValue,
  numElements,
  scalar,
  tensor,
  toTensorValue,
  type DType,
  type TensorData,
  type TensorDataMap,
  type TensorValue,
  type VariableValue,
} from "./session/Tensor.js";

/* Time and logging */
export { systemClock, secs, type Clock, type TimerHandle } from "./time/Clock.js";
export { ClockScheduler } from "./time/ClockScheduler.js";
export { consoleLogger, defaultLogger, silentLogger, type LogLevel, type Logger } from "./Logger.js";

/* Errors */
export {
  AbortedError,
  AlreadyExistsError,
  BackendNotInstalledError,
  CancelledError,
  type ClusterFailure,
  clusterFailureOf,
  DataLossError,
  DeadlineExceededError,
  ErrorCode,
  FailedPreconditionError,
  InternalError,
  InvalidArgumentError,
  ModelMismatchError,
  NanLossDuringTrainingError,
  NotFoundError,
  OpError,
  type OpErrorOptions,
  OutOfRangeError,
  ResourceExhaustedError,
  RuntimeError,
  StopIteration,
  UnauthenticatedError,
  UnavailableError,
  UnimplementedError,
  UnknownError,
  ValueError,
  isCleanExit,
  isPreemptionError,
} from "./errors.js";
