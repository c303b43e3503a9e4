/**
 * Keeps Node's event loop turning while a session trains. A TensorFlow.js step is synchronous,
 * and `await sess.run()` on an already-settled promise only drains microtasks: without a
 * macrotask turn, signals, timers (the Looper and Supervisor services, preemption watchers),
 * file watches and background checkpoint writes would wait until training ends.
 *
 * An {@link EventLoopYield} is consulted after every run: when `intervalMs` has passed on the
 * session's {@link Clock} since the last turn, or while background work it tracks is pending,
 * the run's promise settles only after one event-loop turn (`Clock.yieldTurn`, `setImmediate`
 * on the system clock). Otherwise the run's own promise is returned untouched, so the hot path
 * pays one clock read and a comparison.
 *
 * @module
 */

import type { Clock } from "../time/Clock.js";
import { ValueError } from "../errors.js";
import type { Session } from "../session/Session.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/**
 * The default {@link EventLoopYield.intervalMs}: at most 5 ms of training between two turns,
 * which keeps event-loop delay well under the 20 ms budget of docs/performance.md at a cost of
 * well under 0.1 µs per step.
 */
export const DEFAULT_YIELD_INTERVAL_MS = 5;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * The most runs between two clock reads. Reading the clock costs 60–90 ns here, more than the
 * rest of the check, so when runs are much shorter than the interval the clock is read every
 * few runs, as many as the last measured run time says fit in half the remaining budget, and
 * at most this many: a sudden change from microsecond runs to slow ones is noticed within 8 runs.
 */
const MAX_RUNS_BETWEEN_READS = 8;

/** Decides when a session gives the event loop a turn, and takes it. */
export class EventLoopYield {
  private lastTurn: number;
  private lastRead: number;
  /** Runs until the clock is read again, and how many there were in the current batch. */
  private countdown = 1;
  private batch = 1;
  private pendingWork = 0;
  private readonly turn: () => Promise<void>;
  /** `false` for an infinite interval: no clock read per run. */
  private readonly timed: boolean;

  /**
   * @param clock The session's clock: its time decides when a turn is due, its `yieldTurn`
   *   takes it (so a `VirtualClock` counts turns and real time never matters in tests).
   * @param intervalMs Longest stretch of training without a turn. `0` yields after every run;
   *   `Infinity` yields only while background work is pending.
   */
  constructor(
    private readonly clock: Clock,
    readonly intervalMs: number = DEFAULT_YIELD_INTERVAL_MS,
  ) {
    if (!(intervalMs >= 0)) throw new ValueError(`yieldIntervalMs must be a number >= 0 (or Infinity), got ${String(intervalMs)}`);
    this.lastTurn = this.lastRead = clock.now();
    this.timed = intervalMs !== Number.POSITIVE_INFINITY;
    this.turn = clock.yieldTurn === undefined ? setImmediateTurn : () => (clock.yieldTurn as () => Promise<void>).call(clock);
  }

  // -------------------------------------------------------------------------------------------
  // operations
  // -------------------------------------------------------------------------------------------

  /**
   * Counts one run and says whether it should end with a turn: always while background work
   * is pending, else when `intervalMs` has passed since the last turn.
   */
  due(): boolean {
    if (this.pendingWork > 0) return true;
    if (--this.countdown > 0 || !this.timed) return false;
    const now = this.clock.now();
    const sinceTurn = now - this.lastTurn;
    if (sinceTurn >= this.intervalMs) return true;
    const perRun = (now - this.lastRead) / this.batch;
    this.lastRead = now;
    const fit = perRun > 0 ? Math.floor((this.intervalMs - sinceTurn) / perRun / 2) : MAX_RUNS_BETWEEN_READS;
    this.batch = this.countdown = Math.max(1, Math.min(MAX_RUNS_BETWEEN_READS, fit));
    return false;
  }

  /**
   * `result`, delayed by one event-loop turn when a turn is due (see {@link due}). Call it once
   * per run, right after starting it: a synchronous step has done its work by then.
   */
  after<T>(result: Promise<T>): Promise<T> {
    if (!this.due()) return result;
    return result.then(
      (v) => this.take().then(() => v),
      (e: unknown) => this.take().then(() => Promise.reject(e)),
    );
  }

  /** Takes one turn now. */
  take(): Promise<void> {
    return this.turn().then(() => {
      this.lastTurn = this.lastRead = this.clock.now();
      this.batch = this.countdown = 1;
    });
  }

  /**
   * Tracks background work (an asynchronous checkpoint write, say): while it is pending, every
   * run ends with a turn so that its I/O callbacks run between steps. Returns `work`.
   *
   * Work that makes progress off this thread (`offThread`: a checkpoint committed on the writer
   * thread) needs a turn only to deliver its end, which the time budget gives: it is tracked
   * only when there is no time budget (`intervalMs` infinite).
   */
  track<T>(work: Promise<T>, options: { readonly offThread?: boolean } = {}): Promise<T> {
    if (options.offThread === true && this.timed) return work;
    this.pendingWork += 1;
    const done = (): void => {
      this.pendingWork -= 1;
    };
    work.then(done, done);
    return work;
  }
}

/**
 * `session` with every `run` passed through `eventLoop` (what `Supervisor.managedSession` hands
 * out). Every other member is the session's own, called on the session itself, so a TensorFlow.js
 * or Graph session keeps its whole API.
 */
export const fairSession = <S extends Session>(session: S, eventLoop: EventLoopYield): S => {
  const run: Session["run"] = (fetches, feeds, options, runMetadata) => eventLoop.after(session.run(fetches, feeds, options, runMetadata));
  return new Proxy(session, {
    get(target, prop) {
      if (prop === "run") return run;
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const setImmediateTurn = (): Promise<void> => new Promise<void>((resolve) => setImmediate(resolve));
