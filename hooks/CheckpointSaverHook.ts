/**
 * `CheckpointSaverHook` and `CheckpointSaverListener`: save the session's variables every N
 * seconds or steps, at session creation (after every recovery too) and at the end
 * (TensorFlow's `tf.estimator.CheckpointSaverHook`), optionally in the background.
 *
 * The hook publishes `checkpointSaved` and `checkpointFailed` on the session's `events$` (see
 * `SessionEventMap`), with the global step, the path and how long the save took.
 *
 * @module
 */

import { resolve as resolvePath } from "node:path";

import * as t from "io-ts";

import type { Clock } from "../src/time/Clock.js";
import {
  AsyncCheckpointer,
  BundleSaver,
  CheckpointManager,
  CheckpointDefaults,
  describePolicy,
  openCheckpointDirectory,
  Retention,
  type AsyncSavePolicy,
  type CheckpointOutcome,
  type RetentionPolicy,
  type Saver,
} from "../src/checkpoint/index.js";
import { assertOneRetention } from "../src/checkpoint/retentionPlan.js";
import {
  Bool,
  decodeOptions,
  defaulted,
  exactlyOneOf,
  FileName,
  NonEmptyString,
  NonNegativeNumber,
  oneOf,
  optional,
  PositiveInt,
  PositiveNumber,
  struct,
} from "../src/codec.js";
import { DeadlineExceededError, RuntimeError, ValueError } from "../src/errors.js";
import type { Logger } from "../src/Logger.js";
import type { Scaffold } from "../src/creation/Scaffold.js";
import type { Session, VariableStore } from "../src/session/Session.js";
import {
  SessionRunArgs,
  SessionRunHook,
  type HookEnv,
  type MaybePromise,
  type SessionRunContext,
  type SessionRunValues,
} from "../src/hook/SessionRunHook.js";
import { fileWriterCache, type SessionLogOptions, type SessionLogStatus } from "../src/summary/index.js";
import { globalStepNameOf, readGlobalStep, stepValue } from "./internal/globalStep.js";
import { hookServices, type OwnServices } from "./internal/services.js";
import { SecondOrStepTimer } from "./SecondOrStepTimer.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/**
 * Called around each save of a {@link CheckpointSaverHook} (TensorFlow's
 * `CheckpointSaverListener`). All methods are optional and may be async. A truthy result of
 * `afterSave` asks training to stop (ignored for the saves at session creation and at the end).
 *
 * @example
 * ```ts
 * import type { CheckpointSaverListener } from "monitored-session/hooks";
 *
 * declare function evaluate(step: number): Promise<number>; // your evaluation: an accuracy
 *
 * const evaluateAfterSave: CheckpointSaverListener = {
 *   afterSave: async (_session, step) => (await evaluate(step)) > 0.99, // stop when good enough
 * };
 * ```
 */
export interface CheckpointSaverListener {
  /** Called once, in the hook's `begin`. */
  begin?(): MaybePromise<void>;
  /** Called before each save, with the global step being saved. */
  beforeSave?(session: Session, globalStep: number): MaybePromise<void>;
  /** Called after each save is durable. A truthy result requests a stop. */
  afterSave?(session: Session, globalStep: number): MaybePromise<unknown>;
  /** Called at the end, after the final save, with the last global step. */
  end?(session: Session, globalStep: number): MaybePromise<void>;
}

/** Base class for listeners, for TensorFlow's `class MyListener(CheckpointSaverListener)`. */
export class CheckpointSaverListener {}

/** Where the hook records `SessionLog(CHECKPOINT)` events (a `SummaryWriter`, or anything like it). */
export interface SessionLogWriter {
  addSessionLog(status: SessionLogStatus, step: number, options?: SessionLogOptions): void;
}

/**
 * Options of {@link CheckpointSaverHook}: exactly one of `saveSecs` and `saveSteps`, and a
 * `checkpointDir` or a `checkpointManager`.
 */
export interface CheckpointSaverHookOptions {
  /** Where checkpoints (`<checkpointBasename>-<step>`) and the `checkpoint` state file go. */
  readonly checkpointDir?: string | undefined;
  /**
   * Save through this manager: the directory's one writer, shared with the session creator and
   * a preemption handler (`monitoredTrainingSession` passes its own). Its name, retention and
   * saver apply, so `saver`, `checkpointBasename`, `maxToKeep` and `keepCheckpointEveryNHours`
   * cannot be given with it. The caller owns it and closes it. Without it, the hook saves
   * through the session's manager (`HookEnv.checkpointManager`) if that one manages
   * `checkpointDir` (its settings must then equal the hook's: `ValueError` in `begin`
   * otherwise); else it creates a manager at its first save (taking the directory's lock then)
   * and closes it in `end`.
   */
  readonly checkpointManager?: CheckpointManager | undefined;
  /** Save every this many seconds. */
  readonly saveSecs?: number | undefined;
  /** Save every this many global steps. */
  readonly saveSteps?: number | undefined;
  /** The storage format (default: the scaffold's saver, else a {@link BundleSaver}). */
  readonly saver?: Saver | undefined;
  /** Takes the saver from this scaffold (after it is finalized). Not with `saver`. */
  readonly scaffold?: Scaffold | undefined;
  /** The checkpoint base name (default `model.ckpt`). */
  readonly checkpointBasename?: string | undefined;
  /** Called around every save. */
  readonly listeners?: readonly CheckpointSaverListener[] | undefined;
  /** How many checkpoints to keep (default 5, TensorFlow's `Saver`; `null` keeps all). */
  readonly maxToKeep?: number | null | undefined;
  /** Also keep one checkpoint every this many hours, beyond `maxToKeep` (default: none). */
  readonly keepCheckpointEveryNHours?: number | null | undefined;
  /**
   * Which checkpoints stay after each save, as a value (`Retention` of
   * `monitored-session/checkpoint`, or your own), instead of `maxToKeep` and
   * `keepCheckpointEveryNHours`.
   */
  readonly retentionPolicy?: RetentionPolicy | undefined;
  /**
   * Save in the background: the step pays for the snapshot only. `true` means the `skip`
   * policy (TensorFlow's async hook skips a save while one runs); or give the policy.
   * Default `false`.
   */
  readonly async?: boolean | AsyncSavePolicy | undefined;
  /**
   * How long `end` waits for background saves (default: the session's stop grace period, 120 s
   * unless set); then `DeadlineExceededError`.
   */
  readonly endGracePeriodSecs?: number | undefined;
  /** Receives `SessionLog(CHECKPOINT)` (default: the cached writer of `checkpointDir`). */
  readonly summaryWriter?: SessionLogWriter | undefined;
  /** Time source (default: the session's clock). */
  readonly clock?: Clock | undefined;
  /** Where saves and failures are logged (default: the session's logger). */
  readonly logger?: Logger | undefined;
  /**
   * @internal How many global steps one run may advance (TensorFlow's `_steps_per_run`,
   * default 1,000,000: with `saveSteps` the true global step is read after every run).
   */
  readonly stepsPerRun?: number | undefined;
}

/** How many checkpoints to keep: a positive integer, or `null` for all. */
export const MaxToKeepCodec = oneOf("a positive integer or null (keep all)", [PositiveInt, t.null] as const);
/** Whether and how to save in the background: a boolean or an {@link AsyncSavePolicy}. */
export const AsyncSavePolicyCodec = oneOf('true, false, "block", "skip" or "coalesce"', [Bool, t.keyof({ block: null, skip: null, coalesce: null })] as const);

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Saves checkpoints every `saveSecs` seconds or `saveSteps` steps, named
 * `<checkpointDir>/<checkpointBasename>-<global step>`.
 *
 * - It saves once the session is created (the step 0 or restored checkpoint), again after
 *   every recovery, and at the end if the last step was not saved.
 * - Listeners' `beforeSave` and `afterSave` are all called around each save; any truthy
 *   `afterSave` requests a stop (except for the creation and end saves).
 * - Each save writes `SessionLog(CHECKPOINT)` with the checkpoint's path at its step, and emits
 *   `checkpointSaved` (or `checkpointFailed`) on `events$`.
 * - With `async`, `afterRun` only snapshots the variables; the write runs in the background.
 *   A background failure is raised by the next run's `beforeRun`/`afterRun` or by `end`,
 *   never lost; `end` waits (at most `endGracePeriodSecs`) for saves in flight.
 *
 * @example
 * ```ts
 * import { CheckpointSaverHook } from "monitored-session/hooks";
 *
 * const hooks = [new CheckpointSaverHook({ checkpointDir: "/runs/exp1", saveSteps: 1000, async: true })];
 * ```
 */
export class CheckpointSaverHook extends SessionRunHook {
  /** The codec of the data options, shared with the configuration registry (which requires `checkpointDir`). */
  static readonly optionsCodec = struct(
    "CheckpointSaverHook",
    "Saves checkpoints every N seconds or steps (in addition to the one `checkpoint` configures).",
    {
      checkpointDir: optional(NonEmptyString, "Where checkpoints go (relative to the file)."),
      saveSecs: optional(PositiveNumber, "Save every this many seconds."),
      saveSteps: optional(PositiveInt, "Save every this many steps."),
      checkpointBasename: defaulted(FileName, "The checkpoint base name: a plain file name.", CheckpointDefaults.saver.checkpointName),
      maxToKeep: defaulted(MaxToKeepCodec, "How many checkpoints to keep.", CheckpointDefaults.saver.maxToKeep),
      keepCheckpointEveryNHours: optional(oneOf("a positive number or null", [PositiveNumber, t.null] as const), "Also keep one checkpoint every this many hours, beyond maxToKeep.", "none"),
      async: defaulted(AsyncSavePolicyCodec, "Save in the background (`true` is the `skip` policy).", false),
      endGracePeriodSecs: optional(NonNegativeNumber, "How long the end waits for background saves.", "the session's stop grace period"),
    },
    exactlyOneOf("saveSecs", "saveSteps"),
  );

  private readonly checkpointDir: string;
  private readonly basename: string;
  private readonly everySecs: number | undefined;
  private readonly everySteps: number | undefined;
  private readonly explicitSaver: Saver | undefined;
  private readonly scaffold: Scaffold | undefined;
  private readonly listeners: readonly CheckpointSaverListener[];
  private readonly maxToKeep: number | null;
  private readonly keepCheckpointEveryNHours: number | null;
  private readonly retentionPolicy: RetentionPolicy | undefined;
  private readonly policy: AsyncSavePolicy | undefined;
  private readonly ownEndGraceMs: number | undefined;
  private endGraceMs = 120_000;
  private readonly ownWriter: SessionLogWriter | undefined;
  private readonly own: OwnServices;
  private readonly stepsPerRun: number;
  private readonly sharedManager: CheckpointManager | undefined;
  private clock: Clock;
  private logger: Logger;
  private env: HookEnv | undefined;
  private timer: SecondOrStepTimer;
  private writer: SessionLogWriter | undefined;
  private manager: CheckpointManager | undefined;
  /** The session's manager, when the hook saves through it (its owner closes it). */
  private borrowed: CheckpointManager | undefined;
  private checkpointer: AsyncCheckpointer | undefined;
  private globalStepName: string | undefined;
  private args: SessionRunArgs | undefined;
  /** Background work: saves' completions and their listeners. */
  private readonly inFlight = new Set<Promise<void>>();
  /** The newest step whose save was made or handed to the checkpointer (a skipped one is not). */
  private lastRequestedStep: number | undefined;
  private backgroundErrors: unknown[] = [];
  private checkpointerFailed = false;
  private pendingStop = false;
  /** Set when `end` stopped waiting for background saves: later outcomes can only be logged. */
  private abandoned = false;

  /**
   * Throws `ValueError` if both `saver` and `scaffold` are given, or listing every problem of
   * the data options ({@link CheckpointSaverHook.optionsCodec}: not exactly one of `saveSecs`
   * and `saveSteps`, a bad value).
   */
  constructor(options: CheckpointSaverHookOptions) {
    super();
    if (options.saver !== undefined && options.scaffold !== undefined) {
      throw new ValueError("You cannot provide both saver and scaffold.");
    }
    const o = decodeOptions(CheckpointSaverHook.optionsCodec, options, "CheckpointSaverHook");
    const shared = options.checkpointManager;
    if (shared === undefined && o.checkpointDir === undefined) {
      throw new ValueError("CheckpointSaverHook: checkpointDir must be a non-empty path (or give a checkpointManager)");
    }
    if (shared !== undefined) {
      const conflicting = (["saver", "checkpointBasename", "maxToKeep", "keepCheckpointEveryNHours", "retentionPolicy"] as const).filter((k) => options[k] !== undefined);
      if (conflicting.length > 0) {
        throw new ValueError(`CheckpointSaverHook: ${conflicting.join(", ")} cannot be given with checkpointManager (the manager's apply)`);
      }
      if (o.checkpointDir !== undefined && resolvePath(o.checkpointDir) !== shared.directory) {
        throw new ValueError(`CheckpointSaverHook: checkpointDir ${o.checkpointDir} is not the checkpointManager's directory ${shared.directory}`);
      }
    }
    assertOneRetention("CheckpointSaverHook", options);
    this.retentionPolicy = options.retentionPolicy;
    this.sharedManager = shared;
    this.checkpointDir = shared?.directory ?? (o.checkpointDir as string);
    this.basename = shared?.checkpointName ?? o.checkpointBasename;
    this.everySecs = o.saveSecs;
    this.everySteps = o.saveSteps;
    this.explicitSaver = options.saver;
    this.scaffold = options.scaffold;
    this.listeners = options.listeners ?? [];
    this.maxToKeep = o.maxToKeep;
    this.keepCheckpointEveryNHours = o.keepCheckpointEveryNHours ?? null;
    const a = o.async;
    this.policy = a === false ? undefined : a === true ? "skip" : a;
    this.ownEndGraceMs = o.endGracePeriodSecs === undefined ? undefined : o.endGracePeriodSecs * 1000;
    this.ownWriter = options.summaryWriter;
    this.own = { clock: options.clock, logger: options.logger };
    this.stepsPerRun = options.stepsPerRun ?? 1_000_000;
    ({ clock: this.clock, logger: this.logger } = hookServices(this.own));
    this.timer = this.makeTimer();
  }

  /** The save path prefix, `<checkpointDir>/<checkpointBasename>` (TensorFlow's `_save_path`). */
  get savePath(): string {
    return `${this.checkpointDir.replace(/\/+$/, "")}/${this.basename}`;
  }

  override async begin(env?: HookEnv): Promise<void> {
    this.env = env;
    ({ clock: this.clock, logger: this.logger } = hookServices(this.own, env));
    this.endGraceMs = this.ownEndGraceMs ?? (env?.stopGracePeriodSecs ?? 120) * 1000;
    this.timer = this.makeTimer();
    this.writer = this.ownWriter ?? (env?.writerCache ?? fileWriterCache).getWriter(this.checkpointDir);
    this.borrowed = this.sessionManager(env);
    this.manager = this.sharedManager ?? this.borrowed;
    this.checkpointer = undefined;
    this.backgroundErrors = [];
    this.checkpointerFailed = false;
    this.pendingStop = false;
    this.abandoned = false;
    this.lastRequestedStep = undefined;
    for (const l of this.listeners) await l.begin?.();
  }

  override async afterCreateSession(session: Session): Promise<void> {
    this.resolve(session);
    const step = await readGlobalStep(session, this.globalStepName as string);
    // Saved again after each recovery (TensorFlow's behaviour); a listener's stop is ignored.
    await this.saveNow(session, step);
    this.timer.updateLastTriggeredStep(step);
  }

  override beforeRun(ctx: SessionRunContext): SessionRunArgs | Promise<SessionRunArgs> {
    const args = this.args ?? this.resolve(ctx.session);
    if (this.backgroundErrors.length > 0 || this.checkpointerFailed) return this.raiseBackgroundErrors().then(() => args);
    return args;
  }

  override afterRun(ctx: SessionRunContext, values: SessionRunValues): void | Promise<void> {
    if (this.backgroundErrors.length > 0 || this.checkpointerFailed) return this.raiseBackgroundErrors();
    if (this.pendingStop) {
      this.pendingStop = false;
      ctx.requestStop();
    }
    const stale = stepValue(values.results);
    if (!this.timer.shouldTriggerForStep(stale + this.stepsPerRun)) return;
    return readGlobalStep(ctx.session, this.globalStepName as string).then(async (step) => {
      if (!this.timer.shouldTriggerForStep(step)) return;
      this.timer.updateLastTriggeredStep(step);
      const stop = this.policy === undefined ? await this.saveNow(ctx.session, step) : await this.saveInBackground(ctx.session, step);
      if (stop) ctx.requestStop();
    });
  }

  override async end(session: Session): Promise<void> {
    this.resolve(session);
    const lastStep = await readGlobalStep(session, this.globalStepName as string);
    const errors: unknown[] = [];
    // Background saves land first, so the final save below is the newest in the state file.
    try {
      await this.drain();
    } catch (e) {
      errors.push(e);
    }
    try {
      // A save at the last step that the asynchronous checkpointer skipped (one was still being
      // written) is made here: the final step is always durable when the session ends.
      if (lastStep !== this.lastRequestedStep) {
        this.timer.updateLastTriggeredStep(lastStep);
        if (this.abandoned) {
          // It would record after the saves that did not finish (the order of the state file),
          // so it would wait for them past the grace period too.
          this.logger.error(`CheckpointSaverHook.end: no checkpoint is made at the last step ${lastStep}: the background saves before it did not finish within ${this.endGraceMs / 1000} s.`);
        } else {
          await this.saveNow(session, lastStep); // a listener's stop is ignored at the end
        }
      }
    } catch (e) {
      errors.push(e);
    }
    for (const l of this.listeners) await l.end?.(session, lastStep);
    // A manager the hook made is closed here (releasing the directory's lock); a shared one is its owner's.
    if (this.manager !== undefined && this.manager !== this.sharedManager && this.manager !== this.borrowed) {
      const own = this.manager;
      this.manager = undefined;
      // After `drain` gave up waiting, the late save still lands; the lock is released after it.
      if (this.abandoned) void own.close();
      else await own.close();
    }
    if (errors.length > 0) throw errors[0];
  }

  // -------------------------------------------------------------------------------------------
  // internals
  // -------------------------------------------------------------------------------------------

  /** Saves synchronously (TensorFlow's `_save`); resolves `true` if a listener asked to stop. */
  private async saveNow(session: Session, step: number): Promise<boolean> {
    const store = storeOf(session);
    for (const l of this.listeners) await l.beforeSave?.(session, step);
    const manager = await this.getManager();
    this.logger.info(`Saving checkpoints for ${step} into ${this.savePath}.`, { step });
    let path: string;
    this.lastRequestedStep = step;
    const startMs = this.clock.now();
    try {
      path = (await manager.save(store, { checkpointNumber: step, step, checkInterval: false })) as string;
    } catch (error) {
      this.reportFailure(step, error, startMs);
      throw error;
    }
    this.reportSaved(step, path, startMs);
    return this.callAfterSave(session, step);
  }

  /**
   * Snapshots now and writes in the background. `afterSave` listeners run when the write is
   * durable; a stop they request is applied at the next `afterRun`.
   */
  private async saveInBackground(session: Session, step: number): Promise<boolean> {
    const store = storeOf(session);
    for (const l of this.listeners) await l.beforeSave?.(session, step);
    const checkpointer = await this.getCheckpointer();
    const startMs = this.clock.now();
    const result = await checkpointer.save(store, { checkpointNumber: step, step, checkInterval: false });
    /** What training waited for: the snapshot. */
    const blockingMs = this.clock.now() - startMs;
    if (result.status !== "started" && result.status !== "queued") return false;
    this.lastRequestedStep = step;
    this.logger.info(`Saving checkpoints for ${step} into ${this.savePath} (in the background${result.status === "queued" ? ", queued" : ""}).`, { step });
    const done = result.done.then(async (outcome: CheckpointOutcome) => {
      try {
        if (outcome.status === "saved") {
          this.reportSaved(step, outcome.path, startMs, blockingMs);
          if (await this.callAfterSave(session, step)) this.pendingStop = true;
        } else if (outcome.status === "failed") {
          this.checkpointerFailed = true;
          this.reportFailure(step, outcome.error, startMs, this.abandoned, blockingMs);
        }
      } catch (e) {
        // After `end` gave up waiting, nobody is left to raise it to: log it. What failed is what
        // came after the write (a listener); the write's own failure has its line above.
        if (this.abandoned) {
          const write = outcome.status === "saved" ? "the checkpoint is saved" : "the save failed too";
          this.logger.error(`After the session ended, a listener of the checkpoint of step ${step} failed (${write}): ${messageOf(e)}`, { step });
        } else this.backgroundErrors.push(e);
      }
    });
    this.inFlight.add(done);
    // Until it lands, every run gives the event loop a turn so that a write made of
    // asynchronous steps makes progress. A save written on the writer thread needs none: its
    // one reply arrives at the next timed turn.
    this.env?.trackBackground?.(done, { offThread: result.onWriterThread });
    void done.finally(() => this.inFlight.delete(done));
    return false;
  }

  private async callAfterSave(session: Session, step: number): Promise<boolean> {
    let stop = false;
    // Every listener is called, even after one asked to stop.
    for (const l of this.listeners) if (await l.afterSave?.(session, step)) stop = true;
    return stop;
  }

  /** `startMs`: when the save began (for a background save, its snapshot), on the hook's clock; `blockingMs`: what training waited (default all of it). */
  private reportSaved(step: number, path: string, startMs: number, blockingMs?: number): void {
    // A background save may finish after the writer was closed (the session ended): the
    // checkpoint is durable, only its TensorBoard marker is lost, which is worth a warning.
    try {
      this.writer?.addSessionLog("CHECKPOINT", step, { checkpointPath: path });
    } catch (e) {
      this.logger.warn(`Could not record SessionLog CHECKPOINT for step ${step} (${path}): ${messageOf(e)}`, { step });
    }
    const time = this.clock.now();
    this.env?.emit({ type: "checkpointSaved", time, globalStep: step, path, durationMs: time - startMs, blockingMs: blockingMs ?? time - startMs });
  }

  private reportFailure(step: number, error: unknown, startMs: number, log = true, blockingMs?: number): void {
    if (log) this.logger.error(`Saving the checkpoint for step ${step} into ${this.savePath} failed: ${messageOf(error)}`, { step });
    const time = this.clock.now();
    this.env?.emit({ type: "checkpointFailed", time, globalStep: step, error, durationMs: time - startMs, blockingMs: blockingMs ?? time - startMs });
  }

  /** Throws the first background failure (a listener's error, or the checkpointer's). */
  private async raiseBackgroundErrors(): Promise<void> {
    const errors = this.backgroundErrors;
    this.backgroundErrors = [];
    if (errors.length > 0) throw errors.length === 1 ? errors[0] : new AggregateError(errors, "CheckpointSaverHook: listeners failed after background saves");
    this.checkpointerFailed = false;
    // Throws the CheckpointSaveError (unless a save() call already raised it).
    await this.checkpointer?.waitForPending();
  }

  /** Waits, at most `endGracePeriodSecs`, for background saves and their listeners. */
  private async drain(): Promise<void> {
    const checkpointer = this.checkpointer;
    if (checkpointer === undefined) return;
    this.checkpointer = undefined;
    let timer: { cancel(): void } | undefined;
    const expired = await Promise.race([
      checkpointer.close().then(
        () => Promise.all([...this.inFlight]).then(() => false),
        (e: unknown) => Promise.all([...this.inFlight]).then(() => Promise.reject(e)),
      ),
      new Promise<boolean>((resolve) => {
        timer = this.clock.setTimer(this.endGraceMs, () => resolve(true));
      }),
    ]).finally(() => timer?.cancel());
    if (expired) {
      this.abandoned = true;
      const message = `CheckpointSaverHook.end: background checkpoint saves did not finish within ${this.endGraceMs / 1000} s (${checkpointer.pending} pending); the newest checkpoint may be missing.`;
      this.logger.error(message);
      throw new DeadlineExceededError(message);
    }
    if (this.backgroundErrors.length > 0) await this.raiseBackgroundErrors();
  }

  /**
   * The session's checkpoint manager if it manages this hook's directory; `ValueError` if it
   * does but with other settings (a second manager could not take the directory's lock).
   */
  private sessionManager(env: HookEnv | undefined): CheckpointManager | undefined {
    const m = env?.checkpointManager;
    if (this.sharedManager !== undefined || m === undefined || m.directory !== resolvePath(this.checkpointDir)) return undefined;
    const own = this.retentionPolicy;
    // The manager keeps TensorFlow's pair of its options, or a policy it was given.
    const managerPair = describePolicy(m.retentionPolicy) === describePolicy(Retention.tensorflow({ maxToKeep: m.maxToKeep, keepCheckpointEveryNHours: m.keepEveryNHours }));
    const differences = [
      this.basename === m.checkpointName ? undefined : `checkpointBasename ${this.basename} (the manager's: ${m.checkpointName})`,
      ...(own !== undefined
        ? [own === m.retentionPolicy ? undefined : `retentionPolicy ${describePolicy(own)} (the manager's: ${describePolicy(m.retentionPolicy)})`]
        : !managerPair
          ? [`maxToKeep ${String(this.maxToKeep)} (the manager's retentionPolicy: ${describePolicy(m.retentionPolicy)})`]
          : [
              this.maxToKeep === m.maxToKeep ? undefined : `maxToKeep ${String(this.maxToKeep)} (the manager's: ${String(m.maxToKeep)})`,
              this.keepCheckpointEveryNHours === m.keepEveryNHours
                ? undefined
                : `keepCheckpointEveryNHours ${String(this.keepCheckpointEveryNHours)} (the manager's: ${String(m.keepEveryNHours)})`,
            ]),
      this.explicitSaver === undefined || this.explicitSaver === m.saver ? undefined : "saver (not the manager's)",
    ].filter((d): d is string => d !== undefined);
    if (differences.length > 0) {
      throw new ValueError(
        `CheckpointSaverHook: the session's checkpoint manager of ${m.directory} has other settings: ${differences.join(", ")}; give the hook the manager's settings, or give it its own checkpointManager`,
      );
    }
    return m;
  }

  private async getManager(): Promise<CheckpointManager> {
    // The scaffold's saver exists only once the scaffold is finalized (at session creation).
    this.manager ??= await openCheckpointDirectory({
      directory: this.checkpointDir,
      checkpointName: this.basename,
      // A policy replaces the two (the manager refuses them together).
      ...(this.retentionPolicy === undefined ? { maxToKeep: this.maxToKeep, keepCheckpointEveryNHours: this.keepCheckpointEveryNHours } : { retentionPolicy: this.retentionPolicy }),
      saver: this.explicitSaver ?? this.scaffold?.saver ?? new BundleSaver({ clock: this.clock, tempFiles: this.env?.tempFiles }),
      clock: this.clock,
      logger: this.logger,
      tempFiles: this.env?.tempFiles,
    }, "saver");
    return this.manager;
  }

  private async getCheckpointer(): Promise<AsyncCheckpointer> {
    const manager = await this.getManager();
    if (this.checkpointer === undefined) {
      this.checkpointer = new AsyncCheckpointer(manager, { policy: this.policy ?? "skip", clock: this.clock, logger: this.logger });
      // The saves the checkpointer does not make are the session's events too (its saves and
      // failures the hook reports itself, after its TensorBoard marker and listeners).
      this.checkpointer.events$.subscribe((e) => {
        if (e.type === "checkpointSkipped" || e.type === "checkpointCoalesced") this.env?.emit(e);
      });
    }
    return this.checkpointer;
  }

  private resolve(session: Session): SessionRunArgs {
    const name = globalStepNameOf(session, "CheckpointSaverHook");
    if (name !== this.globalStepName || this.args === undefined) {
      this.globalStepName = name;
      this.args = SessionRunArgs(name);
    }
    return this.args;
  }

  private makeTimer(): SecondOrStepTimer {
    return new SecondOrStepTimer({ everySecs: this.everySecs, everySteps: this.everySteps, clock: this.clock });
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const storeOf = (session: Session): VariableStore => {
  const store = session.variables;
  if (store === undefined) throw new RuntimeError("CheckpointSaverHook: the session exposes no variables to save (session.variables is undefined)");
  return store;
};

const messageOf = (e: unknown): string => (e instanceof Error ? e.message : String(e));
