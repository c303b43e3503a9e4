/**
 * `TerminationConfig`: how a {@link PreemptionCheckpointHandler} learns that the process will be
 * terminated, how long it may keep training, how it saves and how it exits (TensorFlow's
 * `tf.distribute.experimental.TerminationConfig`, with the defaults of its default platform).
 *
 * @module
 */

import type { CheckpointSaveOptions } from "../checkpoint/index.js";
import { ValueError } from "../errors.js";
import type { PlatformWatcher } from "./platforms/PlatformWatcher.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/**
 * The exit code of the default `exitFn`: 42, TensorFlow's default. It means "preempted after a
 * checkpoint: restart me". Treat it as a restart request in a Kubernetes restart policy, a
 * systemd `RestartForceExitStatus=42`, or a shell loop (`until node train.js; [ $? -ne 42 ]; do :; done`).
 */
export const PREEMPTION_EXIT_CODE = 42;

/** Options of {@link TerminationConfig}. Each one left out takes the default platform's value. */
export interface TerminationConfigOptions {
  /**
   * Returns `true` once the process is about to be terminated (a maintenance event, a file
   * appearing...). Polled every `watcherPollSecs` on the handler's clock. Without it, the
   * handler listens for SIGTERM.
   */
  readonly terminationWatcherFn?: (() => boolean | Promise<boolean>) | undefined;
  /**
   * Called after the preemption checkpoint is saved, with the exit code: 42
   * ({@link PREEMPTION_EXIT_CODE}), or in a cluster 43 (`CHIEF_LOST_EXIT_CODE`) when the chief was
   * lost during the agreement and nothing was saved. Default: `process.exit(code)`.
   */
  readonly exitFn?: ((code: number) => unknown) | undefined;
  /**
   * Seconds between the termination notice and the kill (default 0). With 0 the handler saves
   * at the next step boundary and exits; with more it saves, trains on, and saves again just
   * before the period ends, then exits. A save still running when it ends is logged as an error
   * naming the run.
   */
  readonly gracePeriodSecs?: number | undefined;
  /** Saves instead of the handler's checkpoint manager (receives the save options). */
  readonly saveFn?: ((options: CheckpointSaveOptions | undefined) => unknown) | undefined;
  /** How often `terminationWatcherFn` and the platform are polled (default 1 s, as TensorFlow). */
  readonly watcherPollSecs?: number | undefined;
  /**
   * A cloud platform's notice channel, watched besides the signals (or the watcher function):
   * e.g. `createPlatformWatcher("auto")` or `awsWatcher()`. Its notice's deadline bounds the
   * grace period, and the notice is acknowledged once the last save is done (Azure). TensorFlow
   * detects its platforms by itself; here detection is opt-in.
   */
  readonly platform?: PlatformWatcher | undefined;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** The default exit: `process.exit(PREEMPTION_EXIT_CODE)`. */
export const defaultExitFn = (code: number = PREEMPTION_EXIT_CODE): never => process.exit(code);

/** A termination configuration, with the default platform's values filled in. */
export class TerminationConfig {
  readonly terminationWatcherFn: (() => boolean | Promise<boolean>) | undefined;
  readonly exitFn: (code: number) => unknown;
  readonly gracePeriodSecs: number;
  readonly saveFn: ((options: CheckpointSaveOptions | undefined) => unknown) | undefined;
  readonly watcherPollSecs: number;
  readonly platform: PlatformWatcher | undefined;

  /** Throws `ValueError` for a negative or non-finite grace period or poll interval. */
  constructor(options: TerminationConfigOptions = {}) {
    const grace = options.gracePeriodSecs ?? 0;
    if (!Number.isFinite(grace) || grace < 0) {
      throw new ValueError(`TerminationConfig: gracePeriodSecs must be a finite number >= 0, got ${grace}`);
    }
    const poll = options.watcherPollSecs ?? 1;
    if (!Number.isFinite(poll) || poll <= 0) {
      throw new ValueError(`TerminationConfig: watcherPollSecs must be a positive number, got ${poll}`);
    }
    this.terminationWatcherFn = options.terminationWatcherFn;
    this.exitFn = options.exitFn ?? defaultExitFn;
    this.gracePeriodSecs = grace;
    this.saveFn = options.saveFn;
    this.watcherPollSecs = poll;
    this.platform = options.platform;
  }
}
