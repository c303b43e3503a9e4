/**
 * `monitoredTrainingSession`: TensorFlow's `MonitoredTrainingSession` factory. It resolves the
 * cadence defaults, builds the chief's default hooks (step counter, summaries, checkpoints) in
 * TensorFlow's order, and returns a `MonitoredSession`. A worker gets no default hooks and
 * waits for the chief.
 *
 * This is the one module of `src/` that imports from `hooks/`: it assembles the default set.
 *
 * @example
 * ```ts
 * // @prelude docs/preludes/session.ts
 * import { monitoredTrainingSession, withSession } from "monitored-session";
 * import { StopAtStepHook } from "monitored-session/hooks";
 *
 * await withSession(
 *   monitoredTrainingSession({ graph, checkpointDir: "runs/1", hooks: [new StopAtStepHook({ lastStep: 10_000 })] }),
 *   async (sess) => { while (!sess.shouldStop()) await sess.run("train"); },
 * );
 * ```
 *
 * @module
 */

import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { from } from "rxjs";

import { CheckpointSaverHook, type CheckpointSaverHookOptions } from "../../hooks/CheckpointSaverHook.js";
import { StepCounterHook } from "../../hooks/StepCounterHook.js";
import { SummarySaverHook } from "../../hooks/SummarySaverHook.js";
import type { CheckpointManager, RetentionPolicy } from "../checkpoint/CheckpointManager.js";
import { assertOneRetention } from "../checkpoint/retentionPlan.js";
import { openCheckpointDirectory } from "../checkpoint/checkpointDirectory.js";
import { BundleSaver } from "../checkpoint/Saver.js";
import { systemClock } from "../time/Clock.js";
import { ValueError } from "../errors.js";
import type { Graph } from "../session/Graph.js";
import { defaultLogger } from "../Logger.js";
import { MonitoredSession, type MonitoredSessionOptions, type SessionRuntimeOptions } from "../pipeline/MonitoredSession.js";
import { Scaffold } from "../creation/Scaffold.js";
import { ChiefSessionCreator, WorkerSessionCreator } from "../creation/SessionCreators.js";
import type { SessionFactory } from "../creation/SessionManager.js";
import type { SessionRunHook } from "../hook/SessionRunHook.js";
import { logObserver, type SessionEventListener } from "../events/logObserver.js";
import type { SessionEvent } from "../events/SessionEvent.js";
import { ComponentEvents, type EventSource } from "../events/componentEvents.js";
import { GoodputRecorder } from "../goodput/GoodputRecorder.js";
import { defaultSessionTargets, fromTask, sessionsCreatedHook, type SessionTargetRegistry, type SessionTask } from "../pipeline/SessionTarget.js";
import { USE_DEFAULT } from "../util/useDefault.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A cadence: a positive number enables, `0` or `null` disables, absent (or `USE_DEFAULT`) takes the default. */
export type Cadence = number | null | typeof USE_DEFAULT | undefined;

/**
 * Where the session sits in a cluster (TensorFlow's `master` and `is_chief`, and the waits of a
 * worker), or, with `task`, the started task that says it all.
 */
export interface TrainingClusterOptions {
  /**
   * This process's task of a cluster, as `startTask()` from `monitored-session/runtime` returns
   * it: the preferred way to train in a cluster. It sets `master`, `sessionTargets` and
   * `isChief` (giving one of them too, with another value, is a `ValueError`); its hooks (a
   * worker's recovery from the loss of its chief) run before `chiefOnlyHooks`, the default hooks
   * and `hooks`; once the first session exists, the session passes the cluster's start barrier
   * (`task.sessionsCreated()`: do not call it yourself). The chief initializes or restores and
   * publishes its model; a worker waits up to `maxWaitSecs` for it, starts from its values and,
   * after a loss of its chief, re-creates its session from the restarted chief's values.
   *
   * @example
   * ```ts
   * // @prelude docs/preludes/session.ts
   * import { monitoredTrainingSession, withSession } from "monitored-session";
   * import { startTask } from "monitored-session/runtime";
   *
   * const task = await startTask(); // TF_CONFIG from the environment
   * await withSession(monitoredTrainingSession({ task, graph, checkpointDir: "/runs/exp1" }), async (s) => {
   *   while (!s.shouldStop()) await s.run("train");
   * });
   * await task.close();
   * ```
   */
  readonly task?: SessionTask;
  /**
   * The session target (TensorFlow's `master`), resolved through `sessionTargets`: `""` (the
   * default) is in-process; `grpc://host:port` (this task's server's `target`) needs the
   * cluster's registry (`clusterSessionTargets` from `monitored-session/cluster`): the graph runs
   * here, the chief publishes its model, a worker waits for it and starts from its values. With
   * a `task` (preferred), the task's.
   */
  readonly master?: string;
  /** Resolves `master` (default {@link defaultSessionTargets}: the in-process target only; with a `task`, the task's). */
  readonly sessionTargets?: SessionTargetRegistry;
  /** Whether this process is the chief (default `true`; with a `task`, the task's): it initializes, restores and saves. */
  readonly isChief?: boolean;
  /** How long a worker waits for the chief (default 7200). */
  readonly maxWaitSecs?: number;
  /** How often a worker asks whether the chief is ready (default 30). */
  readonly recoveryWaitSecs?: number;
}

/**
 * Where and how often the chief saves checkpoints, and which it keeps (TensorFlow's
 * `checkpoint_dir` and `save_checkpoint_*`, with its `Saver`'s `max_to_keep` and
 * `keep_checkpoint_every_n_hours`; the manager, the policy value and background saves are ours).
 */
export interface CheckpointingOptions {
  /** Where checkpoints are saved and restored from. */
  readonly checkpointDir?: string | null;
  /**
   * The checkpoint directory's manager, shared by the chief's restore, the checkpoint hook and
   * whatever else saves there (a preemption handler): one retention state and one writer of the
   * state file. The caller owns it (it holds the directory's lock) and closes it. Without it,
   * the chief makes one when it saves checkpoints, before anything is restored, and the session
   * closes it (releasing the lock) however it ends.
   */
  readonly checkpointManager?: CheckpointManager;
  /** Checkpoint every this many seconds (default 600 when neither cadence is given). */
  readonly saveCheckpointSecs?: Cadence;
  /** Checkpoint every this many steps. */
  readonly saveCheckpointSteps?: Cadence;
  /** Checkpoints to keep (default 5; `null` keeps all). */
  readonly maxToKeep?: number | null;
  /** Also keep one checkpoint per this many hours, beyond `maxToKeep` (TensorFlow's `Saver` option; default none). */
  readonly keepCheckpointEveryNHours?: number | null;
  /**
   * Which checkpoints stay after each save, as a value (`Retention` of
   * `monitored-session/checkpoint`, or your own), instead of `maxToKeep` and
   * `keepCheckpointEveryNHours`.
   */
  readonly retentionPolicy?: RetentionPolicy;
  /** Persist checkpoints in the background (default `false`). */
  readonly asyncCheckpoints?: CheckpointSaverHookOptions["async"];
}

/**
 * Where and how often the chief writes summaries and logs its step rate (TensorFlow's
 * `summary_dir`, `save_summaries_*` and `log_step_count_steps`).
 */
export interface SummaryOptions {
  /** Where summaries go (default `checkpointDir`). */
  readonly summaryDir?: string | null;
  /** Write summaries every this many steps (default 100 when neither cadence is given). */
  readonly saveSummariesSteps?: Cadence;
  /** Write summaries every this many seconds. */
  readonly saveSummariesSecs?: Cadence;
  /** Log the step rate every this many steps (default 100 when `logStepCountSecs` is absent; `0`/`null` disables). */
  readonly logStepCountSteps?: number | null;
  /**
   * Log the step rate every this many seconds instead (not in TensorFlow, whose factory counts by
   * steps only; `0`/`null` disables). Giving both is a `ValueError`. A configuration file's
   * default: a rate measured over 100 steps of a fast job spans a millisecond or two.
   */
  readonly logStepCountSecs?: Cadence;
  /** The examples one global step consumes (the global batch): the chief's StepCounterHook then also reports `examples/sec`. */
  readonly examplesPerStep?: number | undefined;
}

/** Options of {@link monitoredTrainingSession}, TensorFlow's parameters in camelCase. */
export interface MonitoredTrainingSessionOptions extends TrainingClusterOptions, CheckpointingOptions, SummaryOptions, SessionRuntimeOptions {
  /** The graph to run (used to build a default `Scaffold`). */
  readonly graph?: Graph;
  /** Makes raw sessions (default `graph.session()`). */
  readonly sessionFactory?: SessionFactory;
  readonly scaffold?: Scaffold;
  /** The user's hooks; on the chief they run after the default hooks. */
  readonly hooks?: readonly SessionRunHook[];
  /** Hooks that only the chief runs, before the default hooks. */
  readonly chiefOnlyHooks?: readonly SessionRunHook[];
  /** Grace period for tasks when the session closes (default 120). */
  readonly stopGracePeriodSecs?: number;
  /**
   * Account for this task's time in a goodput log, `<summaryDir or checkpointDir>/goodput/<task>.jsonl`
   * (docs/goodput.md; not in TensorFlow): the process's start, joining, restoring, saves, recoveries,
   * training ready at its global step, and the session's close. The task is `task`'s name (a
   * `startTask()` runtime's), else `local`. The chief opens it once it took the checkpoint
   * directory; a worker writes one only into a directory that is there (the chief's, shared),
   * never making it. Default `false` (`monitored-session run` writes one always). A `task` that
   * names a goodput directory (`launch --chaos`, for the recovery report) writes there in any case.
   */
  readonly goodput?: boolean;
}

/** The cadences after TensorFlow's default resolution (`undefined` = disabled). */
export interface ResolvedCadences {
  readonly saveCheckpointSecs: number | undefined;
  readonly saveCheckpointSteps: number | undefined;
  readonly saveSummariesSecs: number | undefined;
  readonly saveSummariesSteps: number | undefined;
  readonly logStepCountSteps: number | undefined;
  readonly logStepCountSecs: number | undefined;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Creates a `MonitoredSession` configured like TensorFlow's `MonitoredTrainingSession`.
 * On the chief the hooks are, in order: `chiefOnlyHooks`, `StepCounterHook`,
 * `SummarySaverHook`, `CheckpointSaverHook`, then `hooks`; a worker runs only `hooks`. A
 * `task`'s hooks run before all of them (after a `grpc://` chief's model service).
 */
export const monitoredTrainingSession = async (
  options: MonitoredTrainingSessionOptions = {},
): Promise<MonitoredSession> => {
  const task = options.task;
  const isChief = fromTask(task, "isChief", options.isChief) ?? true;
  const target = (fromTask(task, "sessionTargets", options.sessionTargets) ?? defaultSessionTargets).resolve(fromTask(task, "master", options.master) ?? "");
  // The task's hooks run first; its start barrier once every other hook saw the new session.
  const taskHooks = task?.hooks ?? [];
  const started = task === undefined ? undefined : sessionsCreatedHook(task);
  const last = started === undefined ? [] : [started];
  const sessionFactory = target.sessionFactory(options.sessionFactory);
  const cadences = resolveCadences(options);
  const scaffold =
    options.scaffold ?? new Scaffold(options.graph === undefined ? {} : { graph: options.graph });
  const common = {
    scaffold,
    ...(sessionFactory === undefined ? {} : { sessionFactory }),
    ...(options.graph === undefined ? {} : { graph: options.graph }),
    ...(options.clock === undefined ? {} : { clock: options.clock }),
    ...(options.logger === undefined ? {} : { logger: options.logger }),
  };
  const stopGracePeriodSecs = options.stopGracePeriodSecs ?? 120;
  const base = {
    stopGracePeriodSecs,
    ...(options.observer === undefined ? {} : { observer: options.observer }),
    ...(options.logObserver === undefined ? {} : { logObserver: options.logObserver }),
    ...(options.yieldIntervalMs === undefined ? {} : { yieldIntervalMs: options.yieldIntervalMs }),
    ...(options.clock === undefined ? {} : { clock: options.clock }),
    ...(options.logger === undefined ? {} : { logger: options.logger }),
  };
  /** A started task's events and lines are the session's while it lives (`forwardEvents`). */
  const taskEvents: readonly EventSource[] = task?.events$ === undefined ? [] : [task as EventSource];
  /** The goodput log's directory, when asked for one. */
  const goodputDir = task?.goodputDir ?? (options.goodput === true ? (options.summaryDir ?? options.checkpointDir ?? options.checkpointManager?.directory ?? undefined) : undefined);
  if (!isChief) {
    const { accounting, said } = goodputDir !== undefined && existsSync(goodputDir) ? openGoodput(goodputDir, task, false, options) : NO_GOODPUT;
    return accounted(
      accounting,
      MonitoredSession.create({
        ...base,
        ...withGoodput(accounting, options),
        sessionCreator: new WorkerSessionCreator({
          ...common,
          maxWaitSecs: options.maxWaitSecs ?? 7200,
          recoveryWaitSecs: options.recoveryWaitSecs,
          chiefModel: target.chiefModel,
        }),
        hooks: [...taskHooks, ...(options.hooks ?? []), ...last],
        eventSources: [...said, ...taskEvents],
      }),
    );
  }
  const shared = options.checkpointManager;
  assertOneRetention("monitoredTrainingSession", options);
  if (shared !== undefined && (["maxToKeep", "keepCheckpointEveryNHours", "retentionPolicy"] as const).some((k) => options[k] !== undefined)) {
    throw new ValueError("monitoredTrainingSession: the checkpointManager's retention applies: give maxToKeep, keepCheckpointEveryNHours or retentionPolicy to the manager, not beside it");
  }
  if (shared !== undefined && options.checkpointDir != null && resolve(options.checkpointDir) !== shared.directory) {
    throw new ValueError(`checkpointDir ${options.checkpointDir} is not the checkpointManager's directory ${shared.directory}`);
  }
  const checkpointDir = options.checkpointDir ?? shared?.directory;
  const summaryDir = options.summaryDir ?? checkpointDir;
  const saving = checkpointDir !== undefined && (cadences.saveCheckpointSteps !== undefined || cadences.saveCheckpointSecs !== undefined);
  // The directory's one manager, made (taking the directory's lock) before anything is restored.
  // Its lines are events of its own until the session forwards them (`eventSources`).
  const managerEvents = shared === undefined && saving ? new ComponentEvents(options.logger ?? defaultLogger, () => (options.clock ?? systemClock).now(), "checkpoint") : undefined;
  const owned =
    shared === undefined && saving
      ? await openCheckpointDirectory({
          directory: checkpointDir,
          maxToKeep: options.maxToKeep,
          keepCheckpointEveryNHours: options.keepCheckpointEveryNHours,
          retentionPolicy: options.retentionPolicy,
          saver: scaffold.saver ?? new BundleSaver(options.clock === undefined ? {} : { clock: options.clock }),
          ...(options.clock === undefined ? {} : { clock: options.clock }),
          ...(managerEvents === undefined ? {} : { logger: managerEvents.logger }),
        }, "saver")
      : undefined;
  const manager = shared ?? owned;
  // The chief's goodput log, once it holds the directory (a second run on it appends nothing).
  const { accounting, said } = goodputDir === undefined ? NO_GOODPUT : openGoodput(goodputDir, task, true, options);
  // The target's hooks (a grpc:// chief's model service) come first: they see every step
  // boundary, and the model is published before anything waits on the cluster. Then the task's.
  const hooks: SessionRunHook[] = [...(target.chiefHooks ?? []), ...taskHooks, ...(options.chiefOnlyHooks ?? [])];
  if (summaryDir !== undefined && cadences.logStepCountSteps !== undefined) {
    hooks.push(new StepCounterHook({ outputDir: summaryDir, everyNSteps: cadences.logStepCountSteps, examplesPerStep: options.examplesPerStep }));
  } else if (summaryDir !== undefined && cadences.logStepCountSecs !== undefined) {
    hooks.push(new StepCounterHook({ outputDir: summaryDir, everyNSteps: null, everyNSecs: cadences.logStepCountSecs, examplesPerStep: options.examplesPerStep }));
  }
  if (summaryDir !== undefined && (cadences.saveSummariesSteps !== undefined || cadences.saveSummariesSecs !== undefined)) {
    hooks.push(
      new SummarySaverHook({
        scaffold,
        saveSteps: cadences.saveSummariesSteps,
        saveSecs: cadences.saveSummariesSecs,
        outputDir: summaryDir,
      }),
    );
  }
  try {
    if (saving && manager !== undefined) {
      hooks.push(
        new CheckpointSaverHook({
          checkpointManager: manager,
          saveSteps: cadences.saveCheckpointSteps,
          saveSecs: cadences.saveCheckpointSecs,
          ...(options.asyncCheckpoints === undefined ? {} : { async: options.asyncCheckpoints }),
        }),
      );
    }
    hooks.push(...(options.hooks ?? []), ...last);
    return await accounted(accounting, MonitoredSession.create({
      ...base,
      ...withGoodput(accounting, options),
      sessionCreator: new ChiefSessionCreator({
        ...common,
        ...(checkpointDir === undefined ? {} : { checkpointDir }),
        ...(manager === undefined ? {} : { checkpointManager: manager }),
      }),
      hooks,
      // Hooks of the checkpoint directory (a configuration's checkpoint hook) save through it.
      ...(manager === undefined ? {} : { checkpointManager: manager }),
      // However the session ends (an error skips hooks' end), the lock it took is released.
      ...(owned === undefined ? {} : { ownedResources: [owned] }),
      // From now on, the task's and the manager's lines are the session's events.
      eventSources: [...said, ...taskEvents, ...(managerEvents === undefined ? [] : [managerEvents])],
    }));
  } catch (e) {
    await owned?.close();
    throw e;
  }
};

/** The task's goodput log, and what opening it had to say (forwarded by the session it is for). */
interface OpenedGoodput {
  readonly accounting: GoodputRecorder | undefined;
  readonly said: readonly EventSource[];
}

const NO_GOODPUT: OpenedGoodput = { accounting: undefined, said: [] };

/**
 * Opens the task's goodput log in `dir`. A log that cannot be opened is a warning, never the end
 * of training: a line and a `warning` event that the session puts on its stream when it is
 * created (its log observers print the line then), as it does with its other sources' events.
 */
const openGoodput = (dir: string, task: SessionTask | undefined, chief: boolean, options: MonitoredTrainingSessionOptions): OpenedGoodput => {
  const name = (task as { readonly name?: unknown } | undefined)?.name;
  try {
    return { accounting: GoodputRecorder.open({ logDir: dir, task: typeof name === "string" ? name : "local", chief, clock: options.clock, logger: options.logger ?? defaultLogger }), said: [] };
  } catch (e) {
    const time = (options.clock ?? systemClock).now();
    const message = `No goodput log for this session: ${e instanceof Error ? e.message : String(e)}`;
    const events: SessionEvent[] = [
      { type: "log", time, level: "warn", message, source: "goodput" },
      { type: "warning", time, message, error: e },
    ];
    return { accounting: undefined, said: [{ events$: from(events) }] };
  }
};

/** The session's log observers with the goodput log's listener beside them (it hears no run), and its end at close. */
const withGoodput = (accounting: GoodputRecorder | undefined, options: MonitoredTrainingSessionOptions): Pick<MonitoredSessionOptions, "logObserver"> => {
  if (accounting === undefined) return options.logObserver === undefined ? {} : { logObserver: options.logObserver };
  const printing = options.logObserver === undefined ? [logObserver(options.logger ?? defaultLogger)] : options.logObserver === null ? [] : [options.logObserver].flat();
  const end: SessionEventListener = (e) => {
    if (e.type === "closed") accounting.end(null, null);
  };
  return { logObserver: [...printing, accounting.listener, end] };
};

/** The session once created, its training marked ready in the goodput log at its global step; a failed creation ends the log. */
const accounted = async (accounting: GoodputRecorder | undefined, creating: Promise<MonitoredSession>): Promise<MonitoredSession> => {
  if (accounting === undefined) return creating;
  let sess: MonitoredSession;
  try {
    sess = await creating;
  } catch (e) {
    accounting.end(null, null);
    throw e;
  }
  accounting.ready((await readStep(sess).catch(() => undefined)) ?? null);
  return sess;
};

/** The global step of `sess`'s current raw session, or `undefined` if it has none (read outside the hooks). */
export const readStep = async (sess: MonitoredSession): Promise<number | undefined> => {
  const raw = sess.rawSession;
  if (raw === undefined) return undefined;
  const name = raw.globalStepName;
  if (name === undefined) return undefined;
  const v = await raw.run(name);
  return typeof v === "number" || typeof v === "bigint" ? Number(v) : undefined;
};

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * TensorFlow's default resolution of the cadences. Summaries and the step rate: both absent →
 * every 100 steps; checkpoints: both absent → every 600 seconds; otherwise an absent one is disabled. `0` and
 * `null` disable. Giving both secs and steps (two numbers, even if one is 0) for one feature is
 * a `ValueError` (TensorFlow's docstring says secs wins, but its code raises; we raise, naming
 * both options).
 */
export const resolveCadences = (options: MonitoredTrainingSessionOptions): ResolvedCadences => {
  const isDefault = (c: Cadence): boolean => c === undefined || c === USE_DEFAULT;
  const check = (name: string, c: Cadence): number | undefined => {
    if (isDefault(c) || c === null) return undefined;
    if (typeof c !== "number" || !(c >= 0)) throw new ValueError(`${name} must be a number >= 0 or null, got ${String(c)}`);
    return c > 0 ? c : undefined;
  };
  const pair = (secsName: string, secs: Cadence, stepsName: string, steps: Cadence, defaults: { secs?: number; steps?: number }) => {
    // As in TensorFlow, two numbers are an error even if one is 0 (`steps: 100, secs: 0`);
    // `null` is "not given".
    if (typeof secs === "number" && typeof steps === "number") {
      throw new ValueError(`give only one of ${secsName} and ${stepsName} (got ${secs} and ${steps})`);
    }
    const both = isDefault(secs) && isDefault(steps);
    return { secs: both ? defaults.secs : check(secsName, secs), steps: both ? defaults.steps : check(stepsName, steps) };
  };
  const ckpt = pair("saveCheckpointSecs", options.saveCheckpointSecs, "saveCheckpointSteps", options.saveCheckpointSteps, { secs: 600 });
  const sums = pair("saveSummariesSecs", options.saveSummariesSecs, "saveSummariesSteps", options.saveSummariesSteps, { steps: 100 });
  const log = pair("logStepCountSecs", options.logStepCountSecs, "logStepCountSteps", options.logStepCountSteps, { steps: 100 });
  return {
    saveCheckpointSecs: ckpt.secs,
    saveCheckpointSteps: ckpt.steps,
    saveSummariesSecs: sums.secs,
    saveSummariesSteps: sums.steps,
    logStepCountSteps: log.steps,
    logStepCountSecs: log.secs,
  };
};

