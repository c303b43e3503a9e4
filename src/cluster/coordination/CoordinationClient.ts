/**
 * The coordination service as one task sees it: TensorFlow's coordination-service agent
 * (key-value store, barriers, liveness, error propagation, shutdown) behind one interface with
 * two backends, {@link EmbeddedCoordinationClient} and {@link EtcdCoordinationClient}.
 *
 * Errors (all from `monitored-session`'s error classes):
 * - `UnavailableError` naming the task: a task was declared failed (missed heartbeats), or the
 *   backend itself is gone;
 * - `AbortedError`: this task restarted (a new incarnation), or its generation is stale (the
 *   chief restarted): call `connect()` again;
 * - `DeadlineExceededError`: a blocking `get`, a barrier or the registration timed out;
 * - `AlreadyExistsError`: `insert` of a present key;
 * - an error given to `reportErrorToCluster`, by every task, naming the reporter.
 *
 * @module
 */

import type { Clock } from "../../time/Clock.js";
import type { CoordinationTimeouts } from "./CoordinationConfig.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** One entry of a directory listing. */
export interface KeyValue {
  /** The key, relative to the generation (as given to `insert`). */
  readonly key: string;
  readonly value: string;
}

/** Options of a blocking call. */
export interface WaitOptions {
  /** The deadline, from the call (default: the client's `getTimeoutMs` or `barrierTimeoutMs`). */
  readonly timeoutMs?: number;
}

/** Options of {@link CoordinationClient.connect}. */
export interface ConnectOptions {
  /**
   * How long registration goes on trying while the chief cannot be heard, before it fails with
   * `UnavailableError`. Embedded service over gRPC: nobody answers at the service's address,
   * counted from the first unanswered try (default: the whole registration timeout, as a worker
   * started before its chief needs). etcd: for a task registering again, the chief has had no
   * liveness key in its generation for this long (an expired lease fails it at once). An
   * in-process service ignores it. A rank that re-joins its replica group gives the heartbeat
   * timeout: the chief keeps serving (and heartbeating) through a new generation, so silence
   * means the chief is gone.
   */
  readonly unreachableTimeoutMs?: number;
}

/** Options of {@link CoordinationClient.reportErrorToCluster}. */
export interface ReportOptions {
  /**
   * This task is leaving for good with this report (a termination notice), maybe while its
   * client is between generations (its replica group re-forms and it registers again). The
   * embedded service takes the report from this task's last registration, in any generation,
   * and every task's pending and later calls, in any generation, raise it. etcd keeps it in a
   * `final` key beside the generation counter; every client that registered in the report's
   * generation or earlier (in its process) raises it, and the next launch's chief deletes it.
   */
  readonly final?: boolean;
}

/** Options of {@link CoordinationClient.barrier}. */
export interface BarrierOptions extends WaitOptions {
  /** The tasks that must arrive (default: every task of the cluster). */
  readonly tasks?: readonly string[];
}

/** One task's handle on the coordination service. */
export interface CoordinationClient extends AsyncDisposable {
  /** This task's name, e.g. `/job:worker/replica:0/task:1`. */
  readonly task: string;
  /** This process's incarnation: a random 64-bit id (decimal). */
  readonly incarnation: string;
  /** The launch this task registered in; `undefined` before `connect()`. */
  readonly generation: number | undefined;
  /**
   * Registers this task and starts its heartbeats. The chief starts a new generation; another
   * task waits for the chief's generation. Resolves when every task of the cluster registered.
   * Call it again after an `AbortedError` to join the current generation.
   */
  connect(options?: ConnectOptions): Promise<void>;
  /** Inserts `key` if absent; `AlreadyExistsError` when present. */
  insert(key: string, value: string): Promise<void>;
  /** The value of `key`, waiting for it to be inserted; `DeadlineExceededError` on timeout. */
  get(key: string, options?: WaitOptions): Promise<string>;
  /** The value of `key`, or `undefined` at once when absent. */
  tryGet(key: string): Promise<string | undefined>;
  /** Deletes `key` and, as TensorFlow does, every key under the directory `key/`. */
  delete(key: string): Promise<void>;
  /** Every key under the directory `dir` (recursive), sorted by key. Does not block. */
  listDir(dir: string): Promise<KeyValue[]>;
  /**
   * Waits until every task of `tasks` reached barrier `id`. The deadline is the first arrival
   * plus the timeout; then the barrier fails for every task with `DeadlineExceededError` naming
   * the stragglers. Barriers are one-shot: a later arrival gets the recorded outcome.
   */
  barrier(id: string, options?: BarrierOptions): Promise<void>;
  /** Makes every task's next (or pending) coordination call raise `error`, naming this task. */
  reportErrorToCluster(error: Error, options?: ReportOptions): Promise<void>;
  /**
   * The shutdown barrier: waits for every task, then stops heartbeats and leaves, so this exit
   * is not taken for a failure. Stops heartbeats even when the barrier fails.
   */
  shutdown(): Promise<void>;
  /** Stops heartbeats and releases connections without the shutdown barrier (idempotent). */
  close(): Promise<void>;
}

/** What both backends need to know about the task and the cluster. */
export interface CoordinationClientOptions {
  /** This task's name (see `taskName`). */
  readonly task: string;
  /** Every task of the cluster, this one included. */
  readonly tasks: readonly string[];
  /** The chief starts a new generation at `connect()`. Exactly one task is the chief. */
  readonly isChief: boolean;
  /** Overrides of the timeouts (see `defaultCoordinationTimeouts`). */
  readonly timeouts?: Partial<CoordinationTimeouts>;
  /**
   * This process's incarnation (default: `processIncarnationId`, drawn once per process start).
   * Give another one only to stand for another process, as tests do.
   */
  readonly incarnation?: string;
  /**
   * Where heartbeats run: `"thread"` (default), a worker thread, so that a long synchronous
   * step does not get this task declared failed; `"inline"`, timers of `clock` on the calling
   * thread (virtual-clock tests).
   */
  readonly heartbeats?: "thread" | "inline";
  /** The source of time for deadlines and inline heartbeats (default: the system clock). */
  readonly clock?: Clock;
}
