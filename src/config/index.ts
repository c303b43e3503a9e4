/**
 * Declarative configuration: codecs of a training configuration file (JSON or YAML), the hook
 * registry, the job contract, and the mapping to `monitoredTrainingSession` options. See
 * docs/configuration.md.
 *
 * @module
 */

/* Codec building blocks (the project's one io-ts kit, src/codec.ts) */
export {
  atMostOneOf,
  Bool,
  Cadence,
  decode,
  decodeOptions,
  defaulted,
  exactlyOneOf,
  ExitCode,
  FileName,
  formatIssue,
  NonEmptyString,
  NonNegativeInt,
  NonNegativeNumber,
  oneOf,
  optional,
  PositiveInt,
  PositiveNumber,
  refined,
  required,
  StepCadence,
  struct,
  StructType,
  toIssues,
  type Issue,
  /** The name configuration code has always used for an {@link Issue}. */
  type Issue as ConfigIssue,
  type DefaultedField,
  type FieldSpec,
  type Fields,
  type StructCheck,
  type StructOf,
  type WithDefaults,
} from "../codec.js";

/* Configuration */
export {
  CheckpointConfigCodec,
  decodeConfig,
  PreemptionConfigCodec,
  SummariesConfigCodec,
  TfjsConfigCodec,
  trainingConfigCodec,
  TrainingConfigCodec,
  type CheckpointConfig,
  type PreemptionConfig,
  type SummariesConfig,
  type TfjsConfig,
  type TrainingConfig,
} from "./TrainingConfig.js";
export { loadConfig, MAX_ALIAS_COUNT, parseConfigText, type LoadedConfig, type RegistryFor } from "./loadConfig.js";

/* Hooks */
export {
  builtinHookTypes,
  CheckpointSaverHookConfig,
  FetchesCodec,
  GlobalStepWaiterHookConfig,
  HookRegistry,
  LoggingTensorHookConfig,
  namesIn,
  NanTensorHookConfig,
  StepCounterHookConfig,
  StopAtStepHookConfig,
  SummarySaverHookConfig,
  TensorNames,
  type HookConfig,
  type HookFactoryContext,
  type HookType,
  type RetentionConfig,
  type RetentionType,
} from "./HookRegistry.js";

/* Plugins */
export { applyPlugins, decodePlugin, definePlugin, type Plugin } from "./Plugin.js";

/* Names */
export { checkNames, namesUsed, type NameUse } from "./checkNames.js";

/* Jobs */
export { decodeJob, defineJob, JobCodec, type Job, type JobContext, type ReplicaContext, type StepInfo } from "./Job.js";

/* Mapping */
export {
  checkpointDirOf,
  ConfigError,
  lastStepOf,
  toMonitoredTrainingSessionOptions,
  type SessionRole,
  type ToOptionsOptions,
} from "./toMonitoredTrainingSessionOptions.js";
