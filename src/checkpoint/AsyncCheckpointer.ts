/**
 * `AsyncCheckpointer`: saves checkpoints in the background so the training loop only pays for
 * the snapshot. `save()` snapshots the variables synchronously (the step's values are
 * consistent) and returns; the write, fsync, state update and sweep run while training goes
 * on. At most `maxInFlight` saves run at once; a save requested while they run follows the
 * {@link AsyncSavePolicy}.
 *
 * Background failures are never lost: each is emitted on {@link AsyncCheckpointer.events$},
 * logged, and re-raised by the next `save()`, by {@link AsyncCheckpointer.waitForPending} and
 * by {@link AsyncCheckpointer.close}.
 *
 * @example
 * ```ts
 * // @prelude docs/preludes/session.ts
 * import { AsyncCheckpointer, CheckpointManager } from "monitored-session/checkpoint";
 *
 * const manager = await CheckpointManager.create({ directory: "/tmp/run" });
 * const ckpt = new AsyncCheckpointer(manager, { policy: "coalesce" });
 * ckpt.events$.subscribe((e) => console.log(e.type, e.globalStep));
 * for (let step = 1; step <= 1000; step++) {
 *   await session.run("train");
 *   if (step % 100 === 0) await ckpt.save(session.variables, { checkpointNumber: step });
 * }
 * await ckpt.close(30_000); // waits up to 30 s for the last save
 * ```
 *
 * @module
 */

import { Subject, type Observable } from "rxjs";

import { systemClock, type Clock } from "../time/Clock.js";
import { DeadlineExceededError, InvalidArgumentError, RuntimeError } from "../errors.js";
import { isPromiseLike } from "../util/promise.js";
import { defaultLogger, type Logger } from "../Logger.js";
import { copyTensor, type TensorValue } from "../session/Tensor.js";
import type { CheckpointManager, CheckpointSaveOptions, PreparedSave } from "./CheckpointManager.js";
import { isVariableStore, type SaveSource } from "./Saver.js";
import type { SessionEventOf } from "../events/SessionEvent.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/**
 * What to do with a save requested while `maxInFlight` saves run:
 * - `block`: snapshot now, then wait for a slot (the caller's `await` blocks);
 * - `skip`: drop the request (logged, and emitted as `checkpointSkipped`);
 * - `coalesce`: snapshot now and keep it as the single pending save, replacing (and
 *   reporting as `checkpointCoalesced`) an older pending one.
 */
export type AsyncSavePolicy = "block" | "skip" | "coalesce";

/** Options of {@link AsyncCheckpointer}. */
export interface AsyncCheckpointerOptions {
  /** Saves allowed to run at once (default 1). */
  readonly maxInFlight?: number;
  /** What to do when they all run (default `block`). */
  readonly policy?: AsyncSavePolicy;
  /** Time source for event times and the `close` grace period. */
  readonly clock?: Clock;
  /** Where skipped and failed saves are logged. */
  readonly logger?: Logger;
}

// The checkpointer's own events, as session events (beside `checkpointSaved` and
// `checkpointFailed`, which the core declares): declared here, where they are emitted.
// `CheckpointSaverHook` with `async` forwards `checkpointSkipped` and `checkpointCoalesced` to its
// session.
declare module "../events/SessionEvent.js" {
  interface SessionEventMap {
    /** A background save of `globalStep` to `path` began writing (its snapshot was taken before). */
    checkpointStarted: { readonly globalStep: number; readonly path: string };
    /**
     * The `skip` policy: a save was not made, since every save slot was busy (TensorFlow's
     * asynchronous hook skips a save while one runs). `globalStep` is `null` when the save was
     * skipped before its snapshot and the caller gave no `step`.
     */
    checkpointSkipped: { readonly globalStep: number | null };
    /**
     * The `coalesce` policy: the pending save of `globalStep` (to `path`) was replaced by a
     * newer one before it began, so it is not made.
     */
    checkpointCoalesced: { readonly globalStep: number; readonly path: string };
  }
}

/**
 * An event of {@link AsyncCheckpointer.events$}: session events, the same types a
 * `MonitoredSession`'s `events$` carries (`time` is the clock's epoch milliseconds; a
 * `durationMs` counts from the save's start of writing).
 */
export type CheckpointEvent = SessionEventOf<"checkpointStarted" | "checkpointSaved" | "checkpointFailed" | "checkpointSkipped" | "checkpointCoalesced">;

/** How a background save ended. */
export type CheckpointOutcome =
  | { readonly status: "saved"; readonly path: string }
  | { readonly status: "failed"; readonly error: unknown }
  | { readonly status: "superseded" };

/** What {@link AsyncCheckpointer.save} resolves with. */
export type AsyncSaveResult =
  /** Interval gating decided not to save. */
  | { readonly status: "gated" }
  /** Dropped by the `skip` policy. */
  | { readonly status: "skipped" }
  /** Snapshot taken; writing (`started`) or waiting for a slot (`queued`, `coalesce` policy). */
  | {
      readonly status: "started" | "queued";
      readonly step: number;
      readonly path: string;
      /** Settles when the save ends; never rejects (failures are also re-raised later). */
      readonly done: Promise<CheckpointOutcome>;
      /**
       * Its files are written on the process's checkpoint writer thread, so it needs no
       * event-loop turn between training steps to make progress (`false`: it does; see
       * `CheckpointManager.writesOnThread`).
       */
      readonly onWriterThread: boolean;
    };

/** A background save failed. Carries every failure since the last report. */
export class CheckpointSaveError extends Error {
  override readonly name: string = "CheckpointSaveError";
  constructor(readonly failures: readonly { readonly step: number; readonly path: string; readonly error: unknown }[]) {
    super(
      `${failures.length === 1 ? "A background checkpoint save" : `${failures.length} background checkpoint saves`} failed: ${failures
        .map((f) => `step ${f.step} (${f.path}): ${f.error instanceof Error ? f.error.message : String(f.error)}`)
        .join("; ")}`,
      { cause: failures[0]?.error },
    );
  }
}

interface Job {
  readonly prepared: PreparedSave;
  readonly settle: (o: CheckpointOutcome) => void;
  readonly done: Promise<CheckpointOutcome>;
  /** Resolves when the job starts writing (for the `block` policy). */
  readonly started: () => void;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** Background checkpoint saving on top of a {@link CheckpointManager}. */
export class AsyncCheckpointer {
  /** Every save's start, success, failure, skip and coalescing. Completes after `close()` once all saves settle. */
  readonly events$: Observable<CheckpointEvent>;
  private readonly subject = new Subject<CheckpointEvent>();
  private readonly maxInFlight: number;
  private readonly policy: AsyncSavePolicy;
  private readonly clock: Clock;
  private readonly logger: Logger;
  private readonly running = new Set<Job>();
  private readonly queue: Job[] = [];
  private failures: { step: number; path: string; error: unknown }[] = [];
  private closed = false;

  constructor(
    readonly manager: CheckpointManager,
    options: AsyncCheckpointerOptions = {},
  ) {
    const max = options.maxInFlight ?? 1;
    if (!Number.isInteger(max) || max < 1) {
      throw new InvalidArgumentError(`AsyncCheckpointer: maxInFlight must be a positive integer, got ${max}`);
    }
    this.maxInFlight = max;
    this.policy = options.policy ?? "block";
    if (!["block", "skip", "coalesce"].includes(this.policy)) {
      throw new InvalidArgumentError(`AsyncCheckpointer: unknown policy ${JSON.stringify(this.policy)}`);
    }
    this.clock = options.clock ?? systemClock;
    this.logger = options.logger ?? defaultLogger;
    this.events$ = this.subject.asObservable();
  }

  /** Saves in flight plus saves waiting for a slot. */
  get pending(): number {
    return this.running.size + this.queue.length;
  }

  /**
   * Requests a checkpoint. The snapshot is taken now (a snapshot map is deep-copied; an
   * asynchronous store's snapshot is awaited before this resolves), so later training steps
   * cannot leak into it as long as the caller awaits this before the next step. Throws {@link CheckpointSaveError} if an
   * earlier background save failed (the failure is then cleared), `RuntimeError` after
   * `close()`.
   */
  async save(values: SaveSource, options: CheckpointSaveOptions = {}): Promise<AsyncSaveResult> {
    if (this.closed) throw new RuntimeError("AsyncCheckpointer is closed.");
    this.throwFailures();
    let full = this.running.size >= this.maxInFlight;
    if (full && this.policy === "skip") return this.skip(options.step ?? null);
    const preparing = this.manager.prepareSave(isVariableStore(values) ? values : deepCopy(values), options);
    let prepared: PreparedSave | null;
    if (isPromiseLike(preparing)) {
      // An asynchronous snapshot: the slots may have filled up while it was fetched.
      prepared = await preparing;
      full = this.running.size >= this.maxInFlight;
      if (prepared !== null && full && this.policy === "skip") {
        this.manager.abandonSave(prepared);
        return this.skip(prepared.step);
      }
    } else {
      prepared = preparing;
    }
    if (prepared === null) return { status: "gated" };
    const job = makeJob(prepared);
    const onWriterThread = this.manager.writesOnThread(prepared);
    if (!full) {
      this.start(job);
      return { status: "started", step: prepared.step, path: prepared.path, done: job.done, onWriterThread };
    }
    if (this.policy === "coalesce") {
      for (const old of this.queue.splice(0)) {
        this.manager.abandonSave(old.prepared);
        this.emit({ type: "checkpointCoalesced", time: this.clock.now(), globalStep: old.prepared.step, path: old.prepared.path });
        old.settle({ status: "superseded" });
        old.started();
      }
      this.queue.push(job);
      return { status: "queued", step: prepared.step, path: prepared.path, done: job.done, onWriterThread };
    }
    // block: wait until this job gets a slot.
    const started = new Promise<void>((resolve) => {
      this.queue.push({ ...job, started: resolve });
    });
    await started;
    return { status: "started", step: prepared.step, path: prepared.path, done: job.done, onWriterThread };
  }

  /**
   * Waits for every running and queued save. Throws {@link CheckpointSaveError} if any
   * background save failed since the last report.
   */
  async waitForPending(): Promise<void> {
    await this.idle();
    this.throwFailures();
  }

  /**
   * Stops accepting saves and waits for running and queued ones, at most `graceMs`
   * milliseconds (default: no limit). If the grace period expires, throws
   * `DeadlineExceededError` naming each unfinished step and path (those saves go on in the
   * background and still report on `events$`, which completes when they settle). Throws
   * {@link CheckpointSaveError} if a background save failed.
   */
  async close(graceMs: number = Number.POSITIVE_INFINITY): Promise<void> {
    this.closed = true;
    const idle = this.idle().then(() => this.subject.complete());
    if (Number.isFinite(graceMs)) {
      let timer: { cancel(): void } | undefined;
      const expired = await Promise.race([
        idle.then(() => false),
        new Promise<boolean>((resolve) => {
          timer = this.clock.setTimer(Math.max(0, graceMs), () => resolve(true));
        }),
      ]);
      timer?.cancel();
      if (expired) {
        const unfinished = [...this.running, ...this.queue].map((j) => `step ${j.prepared.step} (${j.prepared.path})`);
        const message = `AsyncCheckpointer.close: grace period of ${graceMs} ms expired with ${unfinished.length} checkpoint save(s) unfinished: ${unfinished.join(", ")}. They continue in the background; the checkpoint may not be on disk if the process exits now.`;
        this.logger.error(message);
        throw new DeadlineExceededError(message);
      }
    } else {
      await idle;
    }
    this.throwFailures();
  }

  // -------------------------------------------------------------------------------------------
  // internals
  // -------------------------------------------------------------------------------------------

  private skip(step: number | null): AsyncSaveResult {
    this.logger.info(`Checkpoint save skipped: ${this.running.size} save(s) still running (policy "skip").`, { step });
    this.emit({ type: "checkpointSkipped", time: this.clock.now(), globalStep: step });
    return { status: "skipped" };
  }

  private start(job: Job): void {
    this.running.add(job);
    job.started();
    const { step, path } = job.prepared;
    const startMs = this.clock.now();
    this.emit({ type: "checkpointStarted", time: startMs, globalStep: step, path });
    this.manager.commitSave(job.prepared).then(
      (p) => {
        const time = this.clock.now();
        this.emit({ type: "checkpointSaved", time, globalStep: step, path: p, durationMs: time - startMs });
        this.finish(job, { status: "saved", path: p });
      },
      (error: unknown) => {
        this.failures.push({ step, path, error });
        this.logger.error(`Background checkpoint save of step ${step} to ${path} failed: ${(error as Error)?.message ?? String(error)}`, {
          step,
          path,
        });
        const time = this.clock.now();
        this.emit({ type: "checkpointFailed", time, globalStep: step, error, durationMs: time - startMs });
        this.finish(job, { status: "failed", error });
      },
    );
  }

  private finish(job: Job, outcome: CheckpointOutcome): void {
    this.running.delete(job);
    job.settle(outcome);
    while (this.running.size < this.maxInFlight && this.queue.length > 0) this.start(this.queue.shift() as Job);
  }

  private async idle(): Promise<void> {
    while (this.running.size > 0 || this.queue.length > 0) {
      await Promise.all([...this.running, ...this.queue].map((j) => j.done));
    }
  }

  private throwFailures(): void {
    if (this.failures.length === 0) return;
    const failures = this.failures;
    this.failures = [];
    throw new CheckpointSaveError(failures);
  }

  private emit(e: CheckpointEvent): void {
    this.subject.next(e);
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const makeJob = (prepared: PreparedSave): Job => {
  let settle!: (o: CheckpointOutcome) => void;
  const done = new Promise<CheckpointOutcome>((r) => {
    settle = r;
  });
  return { prepared, settle, done, started: () => undefined };
};

const deepCopy = (values: ReadonlyMap<string, TensorValue>): Map<string, TensorValue> => {
  const out = new Map<string, TensorValue>();
  for (const [k, v] of values) out.set(k, copyTensor(v));
  return out;
};
