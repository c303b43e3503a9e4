/**
 * The built-in session run hooks, imported as `monitored-session/hooks`. Each is TensorFlow's
 * hook of the same name, with options in camelCase.
 *
 * @example
 * ```ts
 * import { StopAtStepHook, StepCounterHook, NanTensorHook } from "monitored-session/hooks";
 * const hooks = [new StopAtStepHook({ lastStep: 1000 }), new NanTensorHook({ lossTensor: "loss" })];
 * ```
 *
 * @module
 */

/* Timers */

// The checkpointer's session events (`checkpointSkipped`, `checkpointCoalesced`,
// `checkpointStarted`) are declared beside it by augmentation of `SessionEventMap`: importing it
// here makes them part of `SessionEvent` for whoever imports this entry point.
import "../src/checkpoint/AsyncCheckpointer.js";

export {
  NeverTriggerTimer,
  SecondOrStepTimer,
  type ElapsedSinceTrigger,
  type HookTimer,
  type SecondOrStepTimerOptions,
} from "./SecondOrStepTimer.js";

/* Stopping */
export { StopAtStepHook, type StopAtStepHookOptions } from "./StopAtStepHook.js";
export { NanTensorHook, type NanTensorHookOptions } from "./NanTensorHook.js";

/* Logging and metrics */
export {
  LoggingTensorHook,
  type LoggedValues,
  type LoggingTensorHookOptions,
} from "./LoggingTensorHook.js";
export {
  StepCounterHook,
  type ScalarSummaryWriter,
  type StepCounterHookOptions,
} from "./StepCounterHook.js";

/* Checkpoints */
export {
  CheckpointSaverHook,
  CheckpointSaverListener,
  type CheckpointSaverHookOptions,
  type SessionLogWriter,
} from "./CheckpointSaverHook.js";

/* TensorBoard */
export { SummarySaverHook, type SummaryOp, type SummarySaverHookOptions, type SummarySink } from "./SummarySaverHook.js";

/* Inputs and final ops */
export { FeedFnHook, type FeedFnHookOptions } from "./FeedFnHook.js";
export { FinalOpsHook, type FinalOpsHookOptions } from "./FinalOpsHook.js";

/* Profiling */
export { ProfilerHook, type ChromeTrace, type ProfilerHookOptions, type RunMetadataSink, type TraceEvent } from "./ProfilerHook.js";

/* RxJS */
export { operatorHook, type HookRun, type OperatorHookOptions, type OperatorHookTools } from "./operatorHook.js";

/* Distributed start */
export { GlobalStepWaiterHook, type GlobalStepWaiterHookOptions } from "./GlobalStepWaiterHook.js";
