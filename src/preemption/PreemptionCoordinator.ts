/**
 * `PreemptionCoordinator`: the decision "at which run do we save, and do we exit after it",
 * behind an interface. {@link LocalPreemptionCoordinator} is TensorFlow's local (single-worker)
 * mode; a multi-worker implementation agrees on the run with its peers behind the same methods.
 *
 * @module
 */

import type { Clock } from "../time/Clock.js";
import type { Logger } from "../Logger.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What to do before a step. */
export type PreemptionDecision =
  | {
      readonly save: false;
      /**
       * Exit now without saving: with 43 (`CHIEF_LOST_EXIT_CODE`) when a multi-worker
       * agreement lost its chief (nobody can write the checkpoint), or with the preemption code
       * when the chief saves for this task (`"chiefSaves"`).
       */
      readonly exitWithoutSave?: { readonly code: number; readonly reason: string } | undefined;
    }
  | {
      readonly save: true;
      /** Exit (call `exitFn`) after this save. */
      readonly exit: boolean;
      /** The clock time (ms) by which the save must be durable, if the grace period bounds it. */
      readonly deadlineMs: number | undefined;
    };

/**
 * Decides when every worker saves. Called by the handler: `notifyTermination` when this process
 * learns it will be terminated (from a signal handler or a watcher: synchronous and cheap), and
 * `beforeStep` before each step.
 */
export interface PreemptionCoordinator {
  /**
   * Records that this process received a termination notice at `nowMs`; `deadlineMs` is when
   * the platform kills it, when the notice says (it bounds the grace period); `source` says
   * what it was (`SIGTERM`, a platform's notice), for what the coordinator tells others.
   */
  notifyTermination(nowMs: number, deadlineMs?: number, source?: string): void;
  /** `true` once a notice was received (by this process, or for a multi-worker one, any peer). */
  readonly terminationReceived: boolean;
  /**
   * Whether a notice of this process's own would change nothing now (default
   * {@link terminationReceived}): the handler then drops it. A coordinator that still acts on this
   * process's own notice after hearing a peer's (its deadline, say) says `false` until it had one.
   */
  readonly ignoresNotices?: boolean;
  /** Multi-worker: what the tasks do on this task's notice, for its line (`the tasks agree on the run to save at`). */
  readonly onNotice?: string;
  /** Multi-worker: the task whose termination notice reached this one without a notice of its own (its claim, its proposal, or its notice over the group's links). */
  readonly claimHeardFrom?: string | undefined;
  /**
   * Before each step, with the number of completed runs and the mean run time: whether to save
   * now and whether to exit after. Should return a plain value when nothing happened, so the
   * step pays no microtask.
   */
  beforeStep(runCounter: number, estimatedRunTimeMs: number): PreemptionDecision | Promise<PreemptionDecision>;
  /** Reports an error of a step to the peers (multi-worker); a no-op locally. */
  reportError?(error: unknown): void | Promise<void>;
  /** A failure of the cluster that the next step raises (another task's reported error, a lost task); read before each step. */
  readonly pendingFailure?: Error | undefined;
  /** A save took `ms` (the deadline budget counts it). */
  saved?(ms: number): void;
  /** Called after the last save, before the exit (the chief waits for the others' acknowledgements). */
  beforeExit?(): Promise<void>;
  /**
   * A step failed with `error` at `runCounter` (runs completed before it): a decision when the
   * failure is the loss of a peer while a preemption is under way (a data-parallel group whose
   * stop vote could not complete), `undefined` when the step's error stands.
   */
  afterStepFailure?(error: unknown, runCounter: number): PreemptionDecision | undefined;
  /**
   * Called once this task restored (or initialized), before its first step: a cluster waits for
   * every task. Resolves with the run counter this task takes when it must take the group's (a
   * data-parallel rank takes the chief's: the ranks step together, also when one returns to a
   * group that trained on without it), else `undefined`.
   */
  restored?(): Promise<number | undefined>;
  /** Stops watching peers. */
  close(): void | Promise<void>;
}

/** Options of {@link LocalPreemptionCoordinator}. */
export interface LocalPreemptionCoordinatorOptions {
  /** See `TerminationConfig.gracePeriodSecs` (default 0). */
  readonly gracePeriodSecs?: number;
  /**
   * Save at the step boundary where the notice is first seen (default `false`: TensorFlow's
   * `runCounter + 1`, one more step first). A single process can: it has no peer to agree with.
   */
  readonly saveAtNextBoundary?: boolean;
  readonly clock: Clock;
  readonly logger: Logger;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

const CONTINUE: PreemptionDecision = Object.freeze({ save: false });

/**
 * The single-process decision, after TensorFlow's local mode of
 * `PreemptionCheckpointHandler._check_preemption_and_maybe_checkpoint`:
 * - at the first step boundary after the notice the handler saves; with no grace period it
 *   then exits;
 * - with a grace period it trains on until `notice + grace - 6 × mean run time`, then saves a
 *   second time and exits.
 *
 * A notice with a deadline (a platform's: AWS's `time`, Azure's `NotBefore`, a pod's grace
 * period) ends the grace period at that deadline if it comes first, and is the deadline of the
 * save when there is no grace period (a save still running then is reported).
 *
 * By default, as in TensorFlow, the run to save at is `runCounter + 1`, so one more step runs
 * before the save. That rule lets workers of a cluster agree on a run while they are one step
 * apart; a single process has nobody to agree with, so with `saveAtNextBoundary` the step is
 * skipped and the save is at the very boundary where the notice is seen (what
 * `monitored-session run` does: preemption within one step).
 */
export class LocalPreemptionCoordinator implements PreemptionCoordinator {
  private readonly graceMs: number;
  private readonly saveAtNextBoundary: boolean;
  private readonly clock: Clock;
  private readonly logger: Logger;
  private noticeAtMs: number | undefined;
  private platformDeadlineMs: number | undefined;
  private stepToCheckpoint: number | undefined;
  private countdown = false;
  private targetTimeMs = 0;
  /** A later notice brought a deadline ({@link tightenDeadline}): the countdown's target is recomputed. */
  private deadlineTightened = false;

  constructor(options: LocalPreemptionCoordinatorOptions) {
    this.graceMs = (options.gracePeriodSecs ?? 0) * 1000;
    this.saveAtNextBoundary = options.saveAtNextBoundary ?? false;
    this.clock = options.clock;
    this.logger = options.logger;
  }

  get terminationReceived(): boolean {
    return this.noticeAtMs !== undefined;
  }

  notifyTermination(nowMs: number, deadlineMs?: number): void {
    if (this.noticeAtMs !== undefined) return;
    this.noticeAtMs = nowMs;
    this.platformDeadlineMs = deadlineMs;
  }

  /**
   * A later notice's deadline (a platform's), after the first notice had none or a later one:
   * the grace period, and the save, end by it if it comes first.
   */
  tightenDeadline(deadlineMs: number | undefined): void {
    if (deadlineMs === undefined || this.noticeAtMs === undefined) return;
    this.platformDeadlineMs = this.platformDeadlineMs === undefined ? deadlineMs : Math.min(this.platformDeadlineMs, deadlineMs);
    this.deadlineTightened = true;
  }

  /** When the grace period ends (`undefined` without one): the configured end or the platform's deadline, whichever is first. */
  private graceEndMs(): number | undefined {
    if (this.graceMs <= 0) return undefined;
    const end = (this.noticeAtMs as number) + this.graceMs;
    return this.platformDeadlineMs === undefined ? end : Math.min(end, this.platformDeadlineMs);
  }

  beforeStep(runCounter: number, estimatedRunTimeMs: number): PreemptionDecision {
    if (this.stepToCheckpoint !== undefined) {
      if (this.stepToCheckpoint !== runCounter) return CONTINUE;
      this.stepToCheckpoint = undefined;
      const exit = this.graceMs <= 0 || this.countdown;
      if (!exit) {
        this.logger.info("PreemptionCheckpointHandler: continue training for the grace period.");
        this.countdown = true;
      }
      const deadlineMs = this.graceEndMs() ?? this.platformDeadlineMs;
      return { save: true, exit, deadlineMs };
    }
    if (this.noticeAtMs === undefined) return CONTINUE;
    if (this.countdown) {
      const end = this.deadlineTightened ? this.graceEndMs() : undefined;
      if (end !== undefined) this.targetTimeMs = Math.min(this.targetTimeMs, end - 3 * estimatedRunTimeMs * 2);
      if (this.targetTimeMs >= this.clock.now()) return CONTINUE;
      this.logger.info("PreemptionCheckpointHandler: grace period almost ended. Final call to save a checkpoint!");
    } else {
      this.logger.debug(`PreemptionCheckpointHandler: termination notice caught; saving a checkpoint ${this.saveAtNextBoundary ? "at this step boundary" : "after the next step"}.`);
      const end = this.graceEndMs();
      if (end !== undefined) this.targetTimeMs = end - 3 * estimatedRunTimeMs * 2;
    }
    if (!this.saveAtNextBoundary) {
      this.stepToCheckpoint = runCounter + 1;
      return CONTINUE;
    }
    // No peer to agree with: the save is at this boundary (see the class comment).
    this.stepToCheckpoint = runCounter;
    return this.beforeStep(runCounter, estimatedRunTimeMs);
  }

  close(): void {}
}
