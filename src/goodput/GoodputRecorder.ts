/**
 * {@link GoodputRecorder}: one process's side of the goodput log. It appends a record when
 * something rare happens (the process's start, a phase it measured, training ready, a save, a
 * step rate or a summary, a recoverable failure, a termination notice, the end), never per run:
 * as a session's log observer it hears no per-run event, so training pays nothing for it.
 *
 * @example
 * ```ts
 * import { GoodputRecorder, MonitoredSession, consoleLogger, logObserver, type Graph } from "monitored-session";
 *
 * declare const graph: Graph;
 * const goodput = GoodputRecorder.open({ logDir: "runs/1", task: "local", chief: true });
 * const session = await MonitoredSession.create({ graph, logObserver: [logObserver(consoleLogger("info")), goodput.listener] });
 * goodput.ready(0);
 * while (!session.shouldStop()) await session.run("train");
 * await session.close();
 * goodput.end(null, 0);
 * ```
 *
 * @module
 */

import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";

import type { SessionEventListener } from "../events/logObserver.js";
import { defaultLogger, type Logger } from "../Logger.js";
import { systemClock, type Clock } from "../time/Clock.js";
import { shortTaskName } from "../util/taskNames.js";
import { GoodputLogWriter, type GoodputRecord, type PhaseBucket } from "./goodputLog.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link GoodputRecorder.open}. */
export interface GoodputRecorderOptions {
  /** The log directory: the log is `<logDir>/goodput/<task>.jsonl`. */
  readonly logDir: string;
  /** The task (`chief:0`, `worker:1`; `local` for a run without a cluster). */
  readonly task: string;
  /** Whether this task's figures are the group's (the chief, or a run without a cluster). */
  readonly chief: boolean;
  /** The wall clock of the records (default the system clock). */
  readonly clock?: Clock | undefined;
  /** When this process started, Unix epoch ms (default Node's `performance.timeOrigin`). */
  readonly processStartMs?: number | undefined;
  /** Where a log that cannot be written is reported, once (default the default logger). */
  readonly logger?: Logger | undefined;
}

/** Marks closer than this are not written (a checkpoint's always is): the log stays a few records a minute. */
const MARK_INTERVAL_MS = 10_000;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** Appends this process's goodput records (see the module doc). */
export class GoodputRecorder {
  private lastMarkMs = Number.NEGATIVE_INFINITY;
  /** This process's name in the log (its `start` and `end`): random, since a pid repeats across restarts in containers. */
  readonly proc: string = randomBytes(8).toString("hex");
  private noticed = false;
  private ended = false;

  private constructor(
    private readonly writer: GoodputLogWriter,
    private readonly clock: Clock,
  ) {}

  /**
   * Opens the task's log for appending and writes this process's `start` record.
   *
   * @throws Error when the log directory cannot be made or the file opened (a path the user fixes).
   */
  static open(options: GoodputRecorderOptions): GoodputRecorder {
    const clock = options.clock ?? systemClock;
    const logger = options.logger ?? defaultLogger;
    const writer = GoodputLogWriter.open(options.logDir, options.task, (m) => logger.warn(m));
    const recorder = new GoodputRecorder(writer, clock);
    const processStartMs = Math.round(options.processStartMs ?? performance.timeOrigin);
    recorder.write({ v: 1, type: "start", t: clock.now(), task: options.task, proc: recorder.proc, pid: process.pid, chief: options.chief, processStartMs });
    return recorder;
  }

  /** The log's path. */
  get path(): string {
    return this.writer.path;
  }

  // -------------------------------------------------------------------------------------------
  // operations
  // -------------------------------------------------------------------------------------------

  /** The process spent `ms` in `bucket` (joining the cluster, restoring, the blocking part of a save), ending now. */
  phase(bucket: PhaseBucket, ms: number): void {
    if (Number.isFinite(ms) && ms >= 0) this.write({ v: 1, type: "phase", t: this.clock.now(), bucket, ms });
  }

  /** Runs `work` and records its time as `bucket`, whether it resolves or rejects. */
  async timed<T>(bucket: PhaseBucket, work: () => Promise<T>): Promise<T> {
    const start = this.clock.now();
    try {
      return await work();
    } finally {
      this.phase(bucket, this.clock.now() - start);
    }
  }

  /** Training begins (or begins again) at global step `step` (`null`: not known). */
  ready(step: number | null): void {
    this.write({ v: 1, type: "ready", t: this.clock.now(), step: validStep(step) });
  }

  /**
   * Training goes on with the state it had, nothing restored: a data-parallel group re-formed its
   * ring around `rejoined` (a task's coordination name, `/job:worker/replica:0/task:1`, or
   * `launch`'s `worker:1`; `null` when not known). Its step is the one training had.
   */
  kept(rejoined: string | null): void {
    const name = rejoined === null ? undefined : shortTaskName(rejoined);
    // A name no record holds (empty, or past 64 characters) is left out: the reader would refuse the record.
    const fits = name !== undefined && name.length > 0 && name.length <= 64;
    this.write({ v: 1, type: "ready", t: this.clock.now(), step: null, kept: true, ...(fits ? { rejoined: name } : {}) });
  }

  /** The global step is `step` now (at most one every 10 s is written, unless `force`). */
  mark(step: number, force = false): void {
    const now = this.clock.now();
    if ((!force && now - this.lastMarkMs < MARK_INTERVAL_MS) || validStep(step) === null) return;
    this.lastMarkMs = now;
    this.write({ v: 1, type: "mark", t: now, step });
  }

  /** A checkpoint of global step `step` was made durable now (a mark with `checkpoint: true`, always written). */
  saved(step: number): void {
    if (validStep(step) === null) return;
    const now = this.clock.now();
    this.lastMarkMs = now;
    this.write({ v: 1, type: "mark", t: now, step, checkpoint: true });
  }

  /** A termination notice (the first one counts): from now on, the time is preemption's. */
  notice(): void {
    if (this.noticed) return;
    this.noticed = true;
    this.write({ v: 1, type: "notice", t: this.clock.now() });
  }

  /** The process ends with `exitCode` at global step `step`; closes the log. Once. */
  end(step: number | null, exitCode: number | null): void {
    if (this.ended) return;
    this.ended = true;
    this.write({ v: 1, type: "end", t: this.clock.now(), proc: this.proc, step: validStep(step), exitCode });
    this.writer.close();
  }

  /**
   * A session's log observer (`MonitoredSessionOptions.logObserver`, beside the printing one):
   * saves are `checkpointSave` phases (their blocking part) and marks, step rates and summaries
   * are marks, a recoverable failure is `aborted`, and a session re-created after one is `ready`;
   * so are a replica group's wait for a lost rank (`replicaRankLost`: `aborted`) and its ring's
   * re-forming (`replicaGroupReformed`: a `ready` that kept its state, {@link kept}), when the
   * session forwards its task's events.
   */
  readonly listener: SessionEventListener = (e) => {
    switch (e.type) {
      case "checkpointSaved":
      case "checkpointFailed":
        this.phase("checkpointSave", e.blockingMs ?? e.durationMs);
        if (e.type === "checkpointSaved") this.saved(e.globalStep);
        return;
      case "stepRate":
      case "summaryWritten":
        this.mark(e.globalStep);
        return;
      case "sessionAborted":
      // A data-parallel group waits for a lost rank: training is down until the ring re-forms (the session stays).
      case "replicaRankLost":
        this.write({ v: 1, type: "aborted", t: e.time });
        return;
      case "replicaGroupReformed":
        this.kept(e.rejoined);
        return;
      case "sessionCreated":
        if (e.recovery > 0) this.ready(null);
        return;
      default:
        return;
    }
  };

  // -------------------------------------------------------------------------------------------
  // internals
  // -------------------------------------------------------------------------------------------

  private write(record: GoodputRecord): void {
    if (!this.ended || record.type === "end") this.writer.write(record);
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const validStep = (step: number | null): number | null => (step !== null && Number.isSafeInteger(step) && step >= 0 ? step : null);
