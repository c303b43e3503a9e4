/**
 * The source of time for every timer in the library. Library code never reads the wall clock
 * directly; it asks a {@link Clock}. Tests pass a `VirtualClock` from `monitored-session/testing`
 * so that "every 600 seconds" runs in microseconds.
 *
 * @module
 */

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A handle to cancel a scheduled callback. */
export interface TimerHandle {
  cancel(): void;
}

/** Time, sleeping and timers. All values are milliseconds. */
export interface Clock {
  /** Milliseconds since the Unix epoch (wall time; used for timestamps and elapsed time). */
  now(): number;
  /**
   * Resolves after `ms` milliseconds. A non-positive `ms` resolves at once (on a microtask).
   * If `signal` aborts first, resolves early (it never rejects), so loops can check their state.
   */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /** Calls `fn` once after `ms` milliseconds, unless cancelled. */
  setTimer(ms: number, fn: () => void): TimerHandle;
  /**
   * Milliseconds on a clock that only moves forward with time, for deadlines: unlike `now()`, a
   * step of the system clock does not move it. Only differences between its readings mean
   * anything. Optional: without it, `now()` is used.
   */
  monotonic?(): number;
  /**
   * Resolves after one full turn of the event loop (timers, I/O callbacks, signals), taking no
   * time of its own. A session calls it between steps so that a synchronous training step does
   * not starve Node (see `EventLoopYield`). Optional: without it, `setImmediate` is used.
   */
  yieldTurn?(): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** The real clock: `Date.now()` and Node timers. Timers do not keep the process alive. */
export const systemClock: Clock = {
  now: () => Date.now(),
  sleep(ms, signal) {
    if (signal?.aborted === true) return Promise.resolve();
    if (ms <= 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const onAbort = (): void => {
        clearTimeout(t);
        resolve();
      };
      const t = setTimeout(() => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      }, ms);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  },
  setTimer(ms, fn) {
    const t = setTimeout(fn, Math.max(0, ms));
    t.unref();
    return { cancel: () => clearTimeout(t) };
  },
  yieldTurn: () => new Promise<void>((resolve) => setImmediate(resolve)),
  monotonic: () => performance.now(),
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** Seconds to milliseconds. */
export const secs = (s: number): number => s * 1000;
