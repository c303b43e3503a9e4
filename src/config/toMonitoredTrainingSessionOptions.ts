/**
 * `toMonitoredTrainingSessionOptions`: maps a decoded configuration and a job to the options of
 * `monitoredTrainingSession`, instantiating the configured hooks from a {@link HookRegistry}.
 * It creates nothing on disk (hooks open their files when the session begins).
 *
 * @example
 * ```ts
 * import { monitoredTrainingSession, withSession } from "monitored-session";
 * import { toMonitoredTrainingSessionOptions, type Job, type TrainingConfig } from "monitored-session/config";
 *
 * declare const config: TrainingConfig; // decoded from the YAML
 * declare const job: Job; // the module's default export
 * declare const baseDir: string; // the YAML file's directory
 * const options = toMonitoredTrainingSessionOptions(config, job, { baseDir });
 * await withSession(monitoredTrainingSession(options), async (sess) => { while (!sess.shouldStop()) await sess.run("train"); });
 * ```
 *
 * @module
 */

import { isAbsolute, resolve } from "node:path";

import { CheckpointSaverHook } from "../../hooks/CheckpointSaverHook.js";
import type { CheckpointManager } from "../checkpoint/CheckpointManager.js";
import { StopAtStepHook } from "../../hooks/StopAtStepHook.js";
import type { Clock } from "../time/Clock.js";
import type { Logger } from "../Logger.js";
import { resolveCadences, type MonitoredTrainingSessionOptions } from "../training/monitoredTrainingSession.js";
import { Scaffold } from "../creation/Scaffold.js";
import type { Fetches } from "../session/Session.js";
import type { SessionRunHook } from "../hook/SessionRunHook.js";
import { HookRegistry, type HookFactoryContext } from "./HookRegistry.js";
import type { Job } from "./Job.js";
import { formatIssue, type Issue } from "../codec.js";
import type { TrainingConfig } from "./TrainingConfig.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A configuration that decoded but cannot be used (a hook rejected its options). Lists every problem. */
export class ConfigError extends Error {
  override readonly name = "ConfigError";
  constructor(readonly issues: readonly Issue[]) {
    super(`invalid configuration:\n  ${issues.map(formatIssue).join("\n  ")}`);
  }
}

/** Options of {@link toMonitoredTrainingSessionOptions}. */
export interface ToOptionsOptions {
  /** Relative paths of the configuration are resolved against this (default: the current directory). */
  readonly baseDir?: string;
  /** The registry the configuration was decoded with (default: the built-ins). */
  readonly registry?: HookRegistry;
  readonly clock?: Clock;
  readonly logger?: Logger;
  /**
   * The checkpoint directory's manager (made from the `checkpoint` section, holding the
   * directory's lock): the checkpoint hook saves and the chief restores through it. Without it
   * the hook makes its own at its first save.
   */
  readonly checkpointManager?: CheckpointManager;
  /**
   * This process's place in a cluster, from TF_CONFIG: it replaces the configuration's `isChief`
   * and `master` (which a configuration run with TF_CONFIG leaves out).
   */
  readonly role?: SessionRole;
}

/**
 * How often a configuration's step counter measures, in seconds, when the file gives neither
 * `logStepCountSecs` nor `logStepCountSteps` (`monitoredTrainingSession` itself keeps
 * TensorFlow's 100 steps).
 */
const DEFAULT_LOG_STEP_COUNT_SECS = 10;

/** Whether this process is the chief, and its session target (TensorFlow's `is_chief` and `master`). */
export interface SessionRole {
  readonly isChief: boolean;
  readonly master: string;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** The directory a configuration's checkpoints go to (absolute), if it has one. */
export const checkpointDirOf = (config: TrainingConfig, baseDir: string = process.cwd()): string | undefined =>
  config.checkpoint === undefined ? undefined : resolvePath(baseDir, config.checkpoint.dir);

/** The last step of a run: the configuration's `lastStep`, else the job's, else `undefined`. */
export const lastStepOf = <F extends Fetches>(config: TrainingConfig, job: Job<F>): number | undefined => config.lastStep ?? job.lastStep;

/**
 * Maps `config` and `job` to `monitoredTrainingSession` options. On the chief the hooks are, in
 * order: the factory's step counter and summary hooks, the checkpoint hook of `checkpoint`
 * (TensorFlow's position), a `StopAtStepHook` for `lastStep`, the configured `hooks`, then the
 * job's `hooks`. A worker gets the last three only. Throws {@link ConfigError} listing every
 * hook whose options its constructor rejects.
 */
export const toMonitoredTrainingSessionOptions = <F extends Fetches>(
  config: TrainingConfig,
  job: Job<F>,
  options: ToOptionsOptions = {},
): MonitoredTrainingSessionOptions => {
  const baseDir = options.baseDir ?? process.cwd();
  const registry = options.registry ?? HookRegistry.builtins;
  const isChief = options.role?.isChief ?? config.isChief ?? true;
  const master = options.role?.master ?? config.master;
  const scaffold = job.scaffold ?? new Scaffold(job.graph === undefined ? {} : { graph: job.graph });
  const context: HookFactoryContext = { resolvePath: (p) => resolvePath(baseDir, p), scaffold };
  const issues: Issue[] = [];
  const attempt = <H>(path: string, make: () => H): H | undefined => {
    try {
      return make();
    } catch (e) {
      issues.push({ path, message: e instanceof Error ? e.message : String(e) });
      return undefined;
    }
  };

  const checkpointDir = checkpointDirOf(config, baseDir);
  const ckpt = config.checkpoint;
  // One policy value for the hook and the directory's manager (a plugin's retention type).
  const retention = ckpt?.retention;
  const retentionPolicy = retention === undefined ? undefined : attempt("checkpoint.retention", () => registry.createRetention(retention));
  const hooks: SessionRunHook[] = [];
  if (isChief && ckpt !== undefined && checkpointDir !== undefined) {
    // Built here rather than by the factory because the factory has no basename option; the
    // factory's own checkpoint hook is disabled below, so this one takes its place in the order.
    const cadence = resolveCadences({
      ...(ckpt.saveSecs === undefined ? {} : { saveCheckpointSecs: ckpt.saveSecs }),
      ...(ckpt.saveSteps === undefined ? {} : { saveCheckpointSteps: ckpt.saveSteps }),
    });
    if (cadence.saveCheckpointSecs !== undefined || cadence.saveCheckpointSteps !== undefined) {
      const manager = options.checkpointManager;
      const hook = attempt("checkpoint", () =>
        new CheckpointSaverHook({
          checkpointDir,
          ...(cadence.saveCheckpointSecs === undefined ? {} : { saveSecs: cadence.saveCheckpointSecs }),
          ...(cadence.saveCheckpointSteps === undefined ? {} : { saveSteps: cadence.saveCheckpointSteps }),
          ...(ckpt.async === undefined ? {} : { async: ckpt.async }),
          // The manager carries the name, retention and saver; without it the hook gets them.
          ...(manager !== undefined
            ? { checkpointManager: manager }
            : {
                scaffold,
                ...(ckpt.basename === undefined ? {} : { checkpointBasename: ckpt.basename }),
                ...(ckpt.maxToKeep === undefined ? {} : { maxToKeep: ckpt.maxToKeep }),
                ...(ckpt.keepCheckpointEveryNHours === undefined ? {} : { keepCheckpointEveryNHours: ckpt.keepCheckpointEveryNHours }),
                ...(retentionPolicy === undefined ? {} : { retentionPolicy }),
              }),
        }),
      );
      if (hook !== undefined) hooks.push(hook);
    }
  }
  const lastStep = config.lastStep;
  if (lastStep !== undefined) {
    const h = attempt("lastStep", () => new StopAtStepHook({ lastStep }));
    if (h !== undefined) hooks.push(h);
  } else if (job.lastStep !== undefined) {
    const jobLastStep = job.lastStep;
    const h = attempt("default.lastStep", () => new StopAtStepHook({ lastStep: jobLastStep }));
    if (h !== undefined) hooks.push(h);
  }
  (config.hooks ?? []).forEach((entry, i) => {
    const h = attempt(`hooks[${i}]`, () => registry.create(entry, context));
    if (h !== undefined) hooks.push(h);
  });
  hooks.push(...(job.hooks ?? []));
  if (issues.length > 0) throw new ConfigError(issues);

  const sums = config.summaries;
  return {
    isChief,
    scaffold,
    hooks,
    ...(master === undefined ? {} : { master }),
    ...(job.graph === undefined ? {} : { graph: job.graph }),
    ...(job.sessionFactory === undefined ? {} : { sessionFactory: job.sessionFactory }),
    ...(checkpointDir === undefined ? {} : { checkpointDir }),
    ...(options.checkpointManager === undefined || !isChief ? {} : { checkpointManager: options.checkpointManager }),
    // The policy the directory's manager applies when the caller opens it (`run` does; the manager's retention then applies).
    ...(retentionPolicy === undefined || options.checkpointManager !== undefined ? {} : { retentionPolicy }),
    // The checkpoint hook is built above.
    saveCheckpointSecs: null,
    saveCheckpointSteps: null,
    ...(sums?.dir === undefined ? {} : { summaryDir: resolvePath(baseDir, sums.dir) }),
    ...(sums?.saveSecs === undefined ? {} : { saveSummariesSecs: sums.saveSecs }),
    ...(sums?.saveSteps === undefined ? {} : { saveSummariesSteps: sums.saveSteps }),
    // The step rate counts seconds unless the file counts steps (the factory's default is TensorFlow's 100 steps).
    ...(config.logStepCountSteps === undefined
      ? { logStepCountSecs: config.logStepCountSecs === undefined ? DEFAULT_LOG_STEP_COUNT_SECS : config.logStepCountSecs }
      : { logStepCountSteps: config.logStepCountSteps }),
    ...(config.stopGracePeriodSecs === undefined ? {} : { stopGracePeriodSecs: config.stopGracePeriodSecs }),
    ...(config.maxWaitSecs === undefined ? {} : { maxWaitSecs: config.maxWaitSecs }),
    ...(options.clock === undefined ? {} : { clock: options.clock }),
    ...(options.logger === undefined ? {} : { logger: options.logger }),
  };
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const resolvePath = (baseDir: string, p: string): string => (isAbsolute(p) ? p : resolve(baseDir, p));
