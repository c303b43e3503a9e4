/**
 * The training configuration: the codecs of a configuration file (JSON or YAML) that
 * describes a `monitoredTrainingSession`, and {@link decodeConfig}, which reports every problem
 * of an input with its path. The TypeScript types are derived from the codecs.
 *
 * @example
 * ```ts
 * import { isLeft } from "fp-ts/lib/Either.js";
 * import { decodeConfig, formatIssue } from "monitored-session/config";
 *
 * const r = decodeConfig({ module: "./train.ts", checkpoint: { dir: "runs/1", saveSteps: 100 }, lastStep: 1000 });
 * if (isLeft(r)) for (const issue of r.left) console.error(formatIssue(issue));
 * ```
 *
 * @module
 */

import type { Either } from "fp-ts/lib/Either.js";
import * as t from "io-ts";

import { AsyncSavePolicyCodec, MaxToKeepCodec } from "../../hooks/CheckpointSaverHook.js";
import { ClusterConfigCodec } from "../cluster/ClusterConfig.js";
import { CHIEF_LOST_EXIT_CODE } from "../preemption/PreemptionCluster.js";
import { PREEMPTION_EXIT_CODE } from "../preemption/TerminationConfig.js";
import type { TfjsBackendName } from "../tfjs/backend.js";
import { HookRegistry, type HookConfig, type RetentionConfig } from "./HookRegistry.js";
import { CheckpointDefaults } from "../checkpoint/checkpointDefaults.js";
import {
  atMostOneOf,
  Bool,
  Cadence,
  FileName,
  NonEmptyString,
  NonNegativeInt,
  NonNegativeNumber,
  optional,
  show,
  PositiveNumber,
  required,
  StepCadence,
  struct,
  decode,
  type Issue,
} from "../codec.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------


/** The `checkpoint` section, its `retention` decoded with `retention` (a registry's: see `HookRegistry.registerRetention`). */
const checkpointConfigCodec = (retention: t.Type<RetentionConfig, RetentionConfig, unknown>) => struct(
  "checkpoint",
  "Checkpoints: where they go, how often, how many are kept. The chief restores the latest one from `dir` at start.",
  {
    dir: required(NonEmptyString, "The checkpoint directory (relative to the file). Created at start by the chief, which locks it (one writer per directory)."),
    saveSecs: optional(Cadence, "Save every this many seconds; `0` or `null` disables.", "600 when saveSteps is absent"),
    saveSteps: optional(StepCadence, "Save every this many global steps; `0` or `null` disables.", "absent"),
    maxToKeep: optional(MaxToKeepCodec, "How many recent checkpoints to keep.", String(CheckpointDefaults.saver.maxToKeep)),
    keepCheckpointEveryNHours: optional(PositiveNumber, "Also keep one checkpoint per this many hours, beyond maxToKeep (TensorFlow's keep_checkpoint_every_n_hours).", "absent (none)"),
    retention: optional(
      retention,
      "A retention policy a plugin registered (`registry.registerRetention`), as `{ type: <name>, ...options }`: it decides which checkpoints stay after each save, instead of maxToKeep and keepCheckpointEveryNHours.",
      "maxToKeep and keepCheckpointEveryNHours",
    ),
    basename: optional(FileName, "The checkpoint file prefix: a plain file name (no `/`, `..`), inside `dir`.", CheckpointDefaults.saver.checkpointName),
    async: optional(AsyncSavePolicyCodec, "Write checkpoints in the background (`true` is the `skip` policy).", "false"),
    lockTimeoutSecs: optional(
      PositiveNumber,
      "The directory is locked by its one writer. A lock held from another host (a shared filesystem, a replaced pod) that was not refreshed for this long is taken over, with a warning; a lock of this host is taken over only once its process is gone.",
      "60",
    ),
  },
  atMostOneOf("saveSecs", "saveSteps"),
  (v) =>
    v.retention !== undefined && (v.maxToKeep !== undefined || v.keepCheckpointEveryNHours !== undefined)
      ? [{ key: "retention", message: "replaces maxToKeep and keepCheckpointEveryNHours: give retention, or those two, not both" }]
      : [],
);

/** The `checkpoint` section with the built-in registry (no retention types). */
export const CheckpointConfigCodec = checkpointConfigCodec(HookRegistry.builtins.retentionEntryCodec());

/** The `summaries` section. */
export const SummariesConfigCodec = struct(
  "summaries",
  "TensorBoard summaries (the scaffold's summary op) and the step rate.",
  {
    dir: optional(NonEmptyString, "The log directory (relative to the file).", "checkpoint.dir"),
    saveSteps: optional(StepCadence, "Write every this many global steps; `0` or `null` disables.", "100 when saveSecs is absent"),
    saveSecs: optional(Cadence, "Write every this many seconds; `0` or `null` disables.", "absent"),
  },
  atMostOneOf("saveSecs", "saveSteps"),
);

/**
 * The codes a preemption must not exit with, and what each already means to whoever reads it:
 * the codes of src/runtime/exitCodes.ts, a layer above (a test keeps the two equal).
 */
const RESERVED_EXIT_CODES: ReadonlyMap<number, { readonly name: string; readonly short: string }> = new Map([
  [0, { name: "done", short: "done" }],
  [1, { name: "any other failure", short: "failure" }],
  [2, { name: "bad usage or configuration", short: "bad usage" }],
  [CHIEF_LOST_EXIT_CODE, { name: "a lost chief", short: "chief lost" }],
]);

/** Why, and the fix: the end of every message of {@link PreemptionExitCode}. */
const RESERVED_EXIT_CODES_NOTE =
  `(${[...RESERVED_EXIT_CODES].map(([code, r]) => `${code} ${r.short}`).join(", ")} and ≥ 128 a signal are reserved); ` +
  `pick another code from 3 to 127, such as the default ${PREEMPTION_EXIT_CODE}`;

/**
 * `preemption.exitCode`: an exit code from 3 to 127 that no other outcome uses, so that a
 * supervisor (`launch`, Kubernetes' failure rules) can tell a preemption from everything else.
 */
export const PreemptionExitCode = new t.Type<number, number, unknown>(
  `an exit code from 3 to 127 other than ${CHIEF_LOST_EXIT_CODE}`,
  (u): u is number => typeof u === "number" && Number.isInteger(u) && u >= 3 && u <= 127 && !RESERVED_EXIT_CODES.has(u),
  (u, c) => {
    if (typeof u !== "number" || !Number.isInteger(u) || u < 0 || u > 255) return t.failure(u, c, `expected an exit code from 3 to 127, got ${show(u)} ${RESERVED_EXIT_CODES_NOTE}`);
    const reserved = RESERVED_EXIT_CODES.get(u);
    if (reserved !== undefined) return t.failure(u, c, `${u} is the code for ${reserved.name} ${RESERVED_EXIT_CODES_NOTE}`);
    if (u >= 128) return t.failure(u, c, `${u} is the code of a death by a signal (128 + its number) ${RESERVED_EXIT_CODES_NOTE}`);
    return t.success(u);
  },
  (a) => a,
);

/** The `preemption` section. */
export const PreemptionConfigCodec = struct(
  "preemption",
  "What SIGTERM/SIGINT (or the watched file) does: save a checkpoint at the next step boundary, then exit with `exitCode` so a supervisor restarts the job, which resumes at that step.",
  {
    enabled: optional(Bool, "Handle termination notices.", "true when checkpoint.dir is set"),
    gracePeriodSecs: optional(NonNegativeNumber, "Seconds between the notice and the kill: with more than 0, train on and save again just before it ends.", "0"),
    exitCode: optional(
      PreemptionExitCode,
      `The exit code after the preemption checkpoint (or a notice before training started). 0, 1, 2, ${CHIEF_LOST_EXIT_CODE} (a lost chief) and 128 or more (a signal) are reserved. \`manifest kubernetes\` puts it in its failure rules.`,
      "42",
    ),
    watchFile: optional(NonEmptyString, "Also treat the appearance of this file (relative to the file) as a termination notice (polled every second)."),
    platform: optional(
      t.keyof({ signals: null, auto: null, gce: null, aws: null, azure: null, kubernetes: null }, '"signals", "auto", "gce", "aws", "azure" or "kubernetes"'),
      "Also watch a cloud platform's notices: `gce` (metadata preempted / maintenance-event), `aws` (spot instance-action, IMDSv2), `azure` (Scheduled Events Preempt/Terminate, acknowledged after the save), `kubernetes` (SIGTERM with `TERMINATION_GRACE_PERIOD_SECONDS` as the deadline), or `auto` (picked from local evidence, never from a network probe). See docs/preemption.md.",
      '"signals"',
    ),
  },
);

/** The TensorFlow.js backends a configuration can select (the type comes from the adapter; type-only, so it loads no TensorFlow.js). */
const TfjsBackendCodec = t.keyof<Record<TfjsBackendName, null>>({ cpu: null, wasm: null }, '"cpu" or "wasm"');

/** The `tfjs` section. */
export const TfjsConfigCodec = struct(
  "tfjs",
  "The TensorFlow.js adapter. `run` selects the backend before it imports the job module, so the job's model is built on it.",
  {
    backend: optional(
      TfjsBackendCodec,
      "The backend that runs the kernels: `cpu` (pure JavaScript, always there) or `wasm` (WebAssembly with SIMD, one thread; needs the `@tensorflow/tfjs-backend-wasm` package of the same version as `@tensorflow/tfjs`). See docs/tfjs.md.",
      '"cpu"',
    ),
  },
);

const topLevelFields = {
  module: required(
    NonEmptyString,
    "The training module (relative to the file): JavaScript (`.js`, `.mjs`, `.cjs`) or TypeScript (`.ts`, `.mts`, `.cts`, loaded with tsx when it is installed); its default export is a job made with `defineJob`.",
  ),
  plugins: optional(
    t.array(NonEmptyString),
    "Modules (relative to the file, or package names) that register hook types for `hooks`: each default-exports a function, made with `definePlugin`, that receives the hook registry. Loaded before `hooks` is decoded.",
    "[]",
  ),
  isChief: optional(
    Bool,
    "Whether this process is the chief: it initializes, restores, saves and writes summaries. With TF_CONFIG set, the task decides (the `chief` task, else `worker` 0) and this key is an error.",
    "true; with TF_CONFIG, from its task",
  ),
  master: optional(
    t.string,
    "The session target: `\"\"` is in-process; other schemes (`grpc://...`) are rejected in one line until cluster support registers them. With TF_CONFIG set, it is the task's own server (`grpc://<its address>`) and this key is an error.",
    '""; with TF_CONFIG, grpc://<the task\'s address>',
  ),
  cluster: optional(
    ClusterConfigCodec,
    "How the tasks of a cluster coordinate and secure their calls (see `cluster` below). Read only when TF_CONFIG is set; the cluster itself (jobs, addresses, this task) comes from TF_CONFIG alone.",
    "the embedded backend, no token, plaintext",
  ),
  checkpoint: optional(CheckpointConfigCodec, "Checkpoints (see below).", "no checkpoints"),
  summaries: optional(SummariesConfigCodec, "Summaries (see below).", "every 100 steps into checkpoint.dir"),
  logStepCountSteps: optional(StepCadence, "Log (and write to the summaries) the step rate every this many steps; `0` or `null` disables.", "absent: every 10 seconds instead"),
  logStepCountSecs: optional(
    Cadence,
    "Log (and write to the summaries) the step rate every this many seconds; `0` or `null` disables. Counted in seconds by default because a rate over 100 steps of a fast job spans a millisecond or two (`global_step/sec: 100000`).",
    "10 when logStepCountSteps is absent",
  ),
  stopGracePeriodSecs: optional(NonNegativeNumber, "How long background tasks get to finish when the session closes.", "120"),
  maxWaitSecs: optional(NonNegativeNumber, "How long a worker waits for the chief's session; in a cluster without data parallelism, also for a lost chief to come back (counted from the loss).", "7200"),
  lastStep: optional(NonNegativeInt, "Stop at this global step (adds a `StopAtStepHook`).", "the job's lastStep, else none"),
  hooks: optional(t.array(t.unknown), "More hooks, each `{ type: <hook type>, ...options }` (see Hooks).", "[]"),
  preemption: optional(PreemptionConfigCodec, "Preemption handling (see below).", "enabled when checkpoint.dir is set"),
  tfjs: optional(TfjsConfigCodec, "The TensorFlow.js backend (see below).", "TensorFlow.js untouched (its own default, `cpu` in Node)"),
} as const;

/** The codec of a whole configuration whose hooks are decoded with `registry`. */
export const trainingConfigCodec = (registry: HookRegistry = HookRegistry.builtins) =>
  struct(
    "TrainingConfig",
    "A training run: the job module, checkpoints, summaries, hooks and preemption.",
    {
      ...topLevelFields,
      checkpoint: optional(checkpointConfigCodec(registry.retentionEntryCodec()), topLevelFields.checkpoint.doc, topLevelFields.checkpoint.defaultValue),
      hooks: optional(t.array(registry.entryCodec()), topLevelFields.hooks.doc, topLevelFields.hooks.defaultValue),
    },
    (v) =>
      v.preemption?.enabled === true && v.checkpoint === undefined
        ? [{ key: "preemption", message: "preemption.enabled needs a checkpoint section (the preemption checkpoint is saved in checkpoint.dir)" }]
        : [],
    atMostOneOf("logStepCountSecs", "logStepCountSteps"),
  );

/** The codec of a configuration with the built-in hook types. */
export const TrainingConfigCodec = trainingConfigCodec();

/** A decoded configuration. */
export type TrainingConfig = t.TypeOf<typeof TrainingConfigCodec>;
/**
 * What of a configuration decoded, for the checks that follow decoding even when it failed (the
 * output directories, the module, the names): each top-level field whose value decoded, and
 * `hooks` entry by entry, `undefined` where an entry did not (so paths keep their index).
 */
export type PartialConfig = Omit<Partial<TrainingConfig>, "hooks"> & { readonly hooks?: readonly (HookConfig | undefined)[] };
/** The decoded `checkpoint` section. */
export type CheckpointConfig = t.TypeOf<typeof CheckpointConfigCodec>;
/** The decoded `summaries` section. */
export type SummariesConfig = t.TypeOf<typeof SummariesConfigCodec>;
/** The decoded `preemption` section. */
export type PreemptionConfig = t.TypeOf<typeof PreemptionConfigCodec>;
/** The decoded `tfjs` section. */
export type TfjsConfig = t.TypeOf<typeof TfjsConfigCodec>;

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * The parts of `input` that decode on their own (see {@link PartialConfig}); the problems are
 * {@link decodeConfig}'s to report. Cross-field rules are not applied: a section counts if its
 * own codec accepts it.
 */
export const decodeConfigParts = (input: unknown, registry: HookRegistry = HookRegistry.builtins): PartialConfig => {
  if (typeof input !== "object" || input === null || Array.isArray(input)) return {};
  const given = input as Record<string, unknown>;
  const fields: Record<string, { readonly codec: t.Mixed }> = registry === HookRegistry.builtins ? TrainingConfigCodec.fields : trainingConfigCodec(registry).fields;
  const entry = registry.entryCodec();
  const parts: Record<string, unknown> = {};
  for (const [key, field] of Object.entries(fields)) {
    const value = given[key];
    if (value === undefined) continue;
    if (key === "hooks" && Array.isArray(value)) {
      parts[key] = value.map((h: unknown) => {
        const r = entry.decode(h);
        return r._tag === "Right" ? r.right : undefined;
      });
      continue;
    }
    const r = field.codec.decode(value);
    if (r._tag === "Right") parts[key] = r.right;
  }
  return parts as PartialConfig;
};

/**
 * Decodes a configuration (already parsed from JSON or YAML). `Left` lists every problem, each
 * with its path (`hooks[1].everyNSecs: expected a positive number, got -1`); unknown keys are
 * problems that name them. Hooks' `type` must be registered in `registry` (default: the
 * built-ins).
 */
export const decodeConfig = (input: unknown, registry: HookRegistry = HookRegistry.builtins): Either<Issue[], TrainingConfig> => {
  const codec: t.Decoder<unknown, TrainingConfig> = registry === HookRegistry.builtins ? TrainingConfigCodec : trainingConfigCodec(registry);
  return decode(codec, input);
};
