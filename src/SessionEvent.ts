/**
 * The events a monitored session publishes on `events$`. Observers (loggers, progress bars,
 * UIs) subscribe to them without being hooks.
 *
 * The set is open: a module that adds events (checkpoints, summaries) augments
 * {@link SessionEventMap} by declaration merging, and `SessionEvent` picks them up.
 *
 * @example
 * ```ts
 * session.events$.pipe(filter((e) => e.type === "afterRun")).subscribe((e) => draw(e.step));
 * ```
 *
 * @module
 */

import type { Coordinator } from "./Coordinator.js";
import type { Feeds, Fetches, Session } from "./Session.js";

/** Event payloads by `type`. Augment this interface to add event types. */
export interface SessionEventMap {
  /**
   * A session was created (or re-created after a recoverable error; then `recovery` > 0).
   * `restoredFrom` is the checkpoint it was restored from, `null` if it was initialized or the
   * creator does not say.
   */
  sessionCreated: {
    readonly session: Session;
    readonly coord: Coordinator;
    readonly recovery: number;
    readonly restoredFrom: string | null;
  };
  /** A run is about to start. `run` counts runs of this monitored session from 1. */
  beforeRun: { readonly run: number; readonly fetches: Fetches; readonly feeds: Feeds | undefined };
  /** A run finished and every hook's `afterRun` returned. */
  afterRun: { readonly run: number; readonly results: unknown; readonly stopRequested: boolean };
  /** A stop was requested, by a hook (named) or by the coordinator. */
  stopRequested: { readonly by: string; readonly reason?: unknown };
  /** A recoverable error (Aborted/Unavailable) closed the session; it will be re-created. */
  sessionAborted: { readonly error: unknown };
  /** Hooks' `end()` ran (a clean finish or OutOfRange). */
  end: Record<never, never>;
  /** The monitored session closed. `error` is set if it closed because of one. */
  closed: { readonly error?: unknown };
  /** An error that must not stop training (e.g. a failed background write) was logged. */
  warning: { readonly message: string; readonly error?: unknown };
}

/** One event: `{ type, time, ...payload }`, `time` being the clock's epoch milliseconds. */
export type SessionEvent = {
  [K in keyof SessionEventMap]: { readonly type: K; readonly time: number } & SessionEventMap[K];
}[keyof SessionEventMap];

/** The event of a given type. */
export type SessionEventOf<K extends keyof SessionEventMap> = Extract<SessionEvent, { type: K }>;
