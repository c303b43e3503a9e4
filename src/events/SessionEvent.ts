/**
 * The events a monitored session publishes on its one merged stream, `events$`. Observers
 * (loggers, progress bars, profilers, UIs) subscribe to it without being hooks.
 *
 * - Every event is `{ type, time, ...payload }`; `time` is the session clock's epoch
 *   milliseconds when the event was emitted (for an event with `durationMs`, the end of the
 *   measured work: it began at `time - durationMs`).
 * - A late subscriber first receives the latest `sessionCreated` (after a recovery, the
 *   re-created session's), then live events.
 * - A run's `beforeRun`, `stopRequested`, `afterRun` and `hookTimings` are delivered
 *   synchronously, before the promise of that `run` resolves.
 * - `globalStep` is the value of the session's global step variable where the emitter knows it
 *   (checkpoint, summary, step-rate and preemption events); `run` counts runs of this monitored
 *   session from 1.
 *
 * The set is open: a module that adds events augments {@link SessionEventMap} by declaration
 * merging, and `SessionEvent` picks them up.
 *
 * @example
 * ```ts
 * import { filter } from "rxjs";
 * import type { MonitoredSession } from "monitored-session";
 *
 * declare const session: MonitoredSession;
 * session.events$
 *   .pipe(filter((e) => e.type === "checkpointSaved"))
 *   .subscribe((e) => console.log(`step ${e.globalStep}: ${e.path} in ${e.durationMs} ms`));
 * ```
 *
 * @module
 */

import type { Coordinator } from "../coordinator/Coordinator.js";
import type { LogLevel } from "../Logger.js";
import type { Feeds, Fetches, Session } from "../session/Session.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** One hook method call measured while hook timing is on (see `hookTimings`). */
export interface HookTimingSpan {
  /** The hook's display name (its `name`, else its class name, else `hook#<index>`). */
  readonly hook: string;
  readonly method: "beforeRun" | "afterRun";
  /** Clock epoch ms when the call began. */
  readonly startMs: number;
  /** Until the call returned, or until the promise it returned settled. */
  readonly durationMs: number;
}

/** Event payloads by `type`. Augment this interface to add event types. */
export interface SessionEventMap {
  // --- life cycle -----------------------------------------------------------------------------

  /**
   * A session was created: the first one (`recovery` 0), or a new one after a recoverable
   * error closed the previous one (`recovery` > 0, and `cause` says why in one line).
   * `restoredFrom` is the checkpoint it was restored from, `null` if it was initialized or the
   * creator does not say. Replayed to late subscribers (the latest one).
   */
  sessionCreated: {
    readonly session: Session;
    readonly coord: Coordinator;
    readonly recovery: number;
    readonly restoredFrom: string | null;
    /** After a recovery: the one-line cause of the `sessionAborted` that preceded it. */
    readonly cause?: string;
  };
  /**
   * A recoverable error (`AbortedError`/`UnavailableError`, from a run, `shouldStop()` or a
   * task on the coordinator) closed the session; it is re-created at the next run. `cause` is
   * one line: `<error name>: <first line of its message>`.
   */
  sessionAborted: { readonly error: unknown; readonly cause: string };
  /** A run is about to call the raw session: every hook's `beforeRun` returned. */
  beforeRun: { readonly run: number; readonly fetches: Fetches; readonly feeds: Feeds | undefined };
  /** A run finished and every hook's `afterRun` returned. `results` are the caller's. */
  afterRun: { readonly run: number; readonly results: unknown; readonly stopRequested: boolean };
  /** A stop was requested, by hooks (named, comma-separated) or by the coordinator. */
  stopRequested: { readonly by: string; readonly reason?: unknown };
  /** Hooks' `end()` ran (a clean finish or OutOfRange). */
  end: Record<never, never>;
  /** The monitored session closed; the stream completes after this. `error` is set if it closed because of one. */
  closed: { readonly error?: unknown };
  /**
   * An error that must not stop training (e.g. a failed background write), as data: the emitter
   * also wrote `message` to its logger at `warn` (the session's event logger: a `log` event just
   * before this one; a hook's own logger: a line there), so the log observer does not print this
   * event.
   */
  warning: { readonly message: string; readonly error?: unknown };
  /**
   * A log line of a hook, of the session pipeline or of a service a hook opened: what they once
   * wrote to a logger, they emit (`HookEnv.logger` emits these). The session's log observer
   * (`logObserver`) prints it; `fields` are the logger's structured fields.
   */
  log: {
    readonly level: LogLevel;
    readonly message: string;
    readonly fields?: Readonly<Record<string, unknown>>;
    /**
     * Which component wrote it, when it has a stream of its own (a `ComponentEvents`): `runtime`
     * (a started task), `preemption` (the handler), `checkpoint` (a manager opened before its
     * session), `supervisor`, `server` (a task's gRPC server), `collective` (a data-parallel
     * rank's ring), `notices` (a `TerminationNotices`), `platform` (a cloud platform's notice
     * poller), `goodput` (`monitoredTrainingSession`'s goodput log, opened before its session).
     * Absent: the session, its layers or its hooks. Not printed: for a recorder.
     */
    readonly source?: string;
  };

  // --- checkpoints (CheckpointSaverHook) --------------------------------------------------------

  /**
   * A checkpoint of `globalStep` is durable at `path` and recorded in the state file; the save
   * took `durationMs`, of which training waited `blockingMs` (a background save: its snapshot;
   * absent: all of it).
   */
  checkpointSaved: { readonly globalStep: number; readonly path: string; readonly durationMs: number; readonly blockingMs?: number };
  /** A checkpoint save of `globalStep` failed (the error is also raised by the hook); `blockingMs` as for `checkpointSaved`. */
  checkpointFailed: { readonly globalStep: number; readonly error: unknown; readonly durationMs: number; readonly blockingMs?: number };

  // --- summaries (SummarySaverHook, StepCounterHook) --------------------------------------------

  /**
   * Summaries of `globalStep` were handed to the event-file writer (which writes them in the
   * background) by `hook`; producing and adding them took `durationMs`.
   */
  summaryWritten: { readonly globalStep: number; readonly durationMs: number; readonly hook: string };
  /**
   * `StepCounterHook` measured the training speed at `globalStep`, as data. The hook wrote
   * TensorFlow's lines (`<tag>: <stepsPerSec>`, and `examples/sec: <examplesPerSec>`) to its
   * logger just before (in a session, `log` events).
   */
  stepRate: {
    readonly globalStep: number;
    readonly stepsPerSec: number;
    /** The summary tag, `global_step/sec` unless the hook was given another. */
    readonly tag?: string;
    /** Given `examplesPerStep`: the examples per second. */
    readonly examplesPerSec?: number;
  };

  // The preemption handler's events (`terminationNoticed`, `preemptionCheckpointSaved`, …) are
  // declared beside it, by augmentation (src/preemption/events.ts).

  // --- profiling ---------------------------------------------------------------------------------

  /**
   * Per-hook time attribution of one run (like Ignite's `HandlersTimeProfiler`), emitted after
   * every `afterRun` returned and before `afterRun`'s event, only while hook timing is on
   * (`MonitoredSessionOptions.hookTiming`, or a hook's `HookEnv.requestHookTiming()`). When it
   * is off the session reads no clock and allocates nothing for it.
   */
  hookTimings: {
    /** The same counter as `beforeRun`/`afterRun`. */
    readonly run: number;
    readonly globalStep?: number;
    /** Clock epoch ms when the run began (before the first `beforeRun`). */
    readonly runStartMs: number;
    /** Duration of the raw `session.run`. */
    readonly sessionRunMs: number;
    readonly sessionRunStartMs: number;
    /** Every `beforeRun` and `afterRun` call, in call order. */
    readonly spans: readonly HookTimingSpan[];
  };
}

/** One event: `{ type, time, ...payload }`, `time` being the clock's epoch milliseconds. */
export type SessionEvent = {
  [K in keyof SessionEventMap]: { readonly type: K; readonly time: number } & SessionEventMap[K];
}[keyof SessionEventMap];

/** The event of a given type. */
export type SessionEventOf<K extends keyof SessionEventMap> = Extract<SessionEvent, { type: K }>;

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/**
 * The one-line cause of an error for events and logs: `<name>: <first line of the message>`.
 *
 * @example
 * ```ts
 * import { AbortedError, describeCause } from "monitored-session";
 *
 * describeCause(new AbortedError("worker 3 was preempted\nstack...")); // "AbortedError: worker 3 was preempted"
 * ```
 */
export const describeCause = (error: unknown): string => {
  if (error instanceof Error) {
    const line = (error.message.split("\n", 1)[0] ?? "").trim();
    return line.length > 0 ? `${error.name}: ${line}` : error.name;
  }
  return (String(error).split("\n", 1)[0] ?? "").trim();
};
