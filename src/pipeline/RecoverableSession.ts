/**
 * The recoverable layer (TensorFlow's `_RecoverableSession`, `MonitoredSession` only): on an
 * `AbortedError` or `UnavailableError` (from a run, a step function or `shouldStop()`), close the
 * session, create a new one (hooks' `afterCreateSession` runs again) and retry.
 *
 * @module
 */

import { isPreemptionError } from "../errors.js";
import type { Logger } from "../Logger.js";
import type { Feeds, Fetches, RunMetadata, RunOptions } from "../session/Session.js";
import type { CoordinatedSession } from "./CoordinatedSession.js";
import type { CoordinatedSessionCreator } from "./CoordinatedSessionCreator.js";
import { closeLayer, WrappedSession, type ErrorHandler, type RawGetter, type RunFn, type StepFn } from "./WrappedSession.js";

/** TensorFlow's `_RecoverableSession`. */
export class RecoverableSession extends WrappedSession {
  private pendingClose: Promise<void> | undefined;

  private constructor(
    private readonly creator: CoordinatedSessionCreator,
    private readonly logger: Logger,
  ) {
    super(undefined);
  }

  static async create(creator: CoordinatedSessionCreator, logger: Logger): Promise<RecoverableSession> {
    const s = new RecoverableSession(creator, logger);
    s.inner = await s.createSession();
    return s;
  }

  /** Creates a session, retrying preemption errors for as long as they occur. */
  private async createSession(): Promise<CoordinatedSession> {
    if (this.pendingClose !== undefined) {
      const p = this.pendingClose;
      this.pendingClose = undefined;
      await p;
    }
    for (;;) {
      try {
        return await this.creator.createSession();
      } catch (e) {
        if (!isPreemptionError(e)) throw e;
        this.logger.info(`An error was raised while a session was being created. This may be due to a preemption of a connected worker or parameter server. A new session will be created. This error may also occur due to a gRPC failure caused by high memory or network bandwidth usage in the parameter servers. Error: ${String(e)}`);
      }
    }
  }

  override run(fetches: Fetches, feeds?: Feeds, options?: RunOptions, runMetadata?: RunMetadata): Promise<unknown> {
    const inner = this.inner as CoordinatedSession | undefined;
    if (inner !== undefined && this.pendingClose === undefined) {
      // The coordinated layer hands `onRunError` the root cause and the failed run's request.
      return inner.run(fetches, feeds, options, runMetadata, this.onRunError);
    }
    return this.runLoop(fetches, feeds, options, runMetadata);
  }

  /** One handler for every run (a closure per run over its arguments cost an allocation a step). */
  private readonly onRunError: ErrorHandler = (e, r) =>
    this.recover(e, () => this.runLoop(r.fetches, r.feeds, r.options, r.runMetadata));

  private async runLoop(fetches: Fetches, feeds?: Feeds, options?: RunOptions, runMetadata?: RunMetadata): Promise<unknown> {
    for (;;) {
      try {
        this.inner ??= await this.createSession();
        return await this.inner.run(fetches, feeds, options, runMetadata);
      } catch (e) {
        await this.afterPreemption(e);
      }
    }
  }

  override async runStepFn<T>(stepFn: StepFn<T>, raw: RawGetter, _runWithHooks: RunFn | undefined): Promise<T> {
    for (;;) {
      try {
        this.inner ??= await this.createSession();
        const inner = this.inner as CoordinatedSession;
        // The raw session is read at each attempt, so a retried step sees the new session.
        return await inner.runStepFn(stepFn, raw, (f, d, o, m) => inner.run(f, d, o, m));
      } catch (e) {
        await this.afterPreemption(e);
      }
    }
  }

  private async recover(e: unknown, retry: () => Promise<unknown>): Promise<unknown> {
    await this.afterPreemption(e);
    return retry();
  }

  /** Rethrows non-preemption errors; otherwise closes the session so that it is re-created. */
  private async afterPreemption(e: unknown): Promise<void> {
    if (!isPreemptionError(e)) throw e;
    this.logger.info(`An error was raised. This may be due to a preemption in a connected worker or parameter server. The current session will be closed and a new session will be created. Error: ${String(e)}`);
    this.creator.emitAborted(e);
    await this.close(this.logger);
  }

  override checkStop(): boolean {
    const inner = this.inner;
    if (inner === undefined) return this.pendingClose === undefined;
    try {
      return (inner as CoordinatedSession).checkStop();
    } catch (e) {
      if (isPreemptionError(e)) {
        this.logger.info(`An error was raised while considering whether the session is complete. This may be due to a preemption in a connected worker or parameter server. The current session will be closed and a new session will be created. Error: ${String(e)}`);
        this.creator.emitAborted(e);
        // Closing and re-creating are asynchronous: the close starts now, and the next run()
        // waits for it and creates the new session.
        this.inner = undefined;
        this.pendingClose = closeLayer(inner, this.logger);
        this.pendingClose.catch(() => undefined);
        return false;
      }
      return true;
    }
  }

  override shouldStop(): boolean {
    if (this.checkStop()) return true;
    const inner = this.inner;
    if (inner === undefined) return this.pendingClose === undefined;
    return (inner as CoordinatedSession).shouldStop();
  }

  /**
   * Finishes a recovery that `shouldStop()` started: waits for the old session to close and
   * creates the new one, as TensorFlow's `should_stop()` did before returning. Closing the
   * monitored session calls this before hooks' `end`, so they see the new session, not the
   * one being closed.
   */
  override settle(): Promise<void> | undefined {
    if (this.inner !== undefined || this.pendingClose === undefined) return undefined;
    return this.createSession().then((s) => {
      this.inner = s;
    });
  }

  /** Also waits for a close that `shouldStop()` started, so nothing outlives `close()`. */
  override async close(logger?: Logger): Promise<void> {
    const pending = this.pendingClose;
    this.pendingClose = undefined;
    try {
      await super.close(logger);
    } finally {
      if (pending !== undefined) await pending;
    }
  }
}

