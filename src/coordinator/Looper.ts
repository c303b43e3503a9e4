/**
 * `Looper`: runs a function repeatedly on a timer until its coordinator stops (TensorFlow's
 * `LooperThread`). The schedule is anchored to absolute times, so a slow iteration does not
 * push later ones back: overdue iterations run back to back. The first call is immediate.
 *
 * A looper is a daemon, as TensorFlow's `LooperThread`: it waits on the clock's timer, which on
 * the real clock is unref'd, so a waiting looper does not keep Node alive once nothing else
 * does (a `VirtualClock` runs it as before).
 *
 * @example
 * ```ts
 * // @prelude docs/preludes/session.ts
 * import { Coordinator, Looper } from "monitored-session";
 *
 * const coord = new Coordinator();
 * Looper.loop(coord, 60, () => writer.flush()); // every 60 s until coord stops
 * ```
 *
 * @module
 */

import { systemClock, type Clock, type TimerHandle } from "../time/Clock.js";
import type { CoordinatedTask } from "./Coordinator.js";
import { Coordinator } from "./Coordinator.js";
import { RuntimeError, ValueError } from "../errors.js";
import { defaultLogger, type Logger } from "../Logger.js";

/** Options of {@link Looper}. */
export interface LooperOptions {
  /** The task's name in join reports (default `Looper-<n>`). */
  readonly name?: string;
  /** The clock for the schedule (default: the system clock). */
  readonly clock?: Clock;
  /** Where an error that can no longer be reported to the (joined) coordinator is logged. */
  readonly logger?: Logger;
}

let counter = 0;

/**
 * A coordinated task that calls {@link runLoop} every `intervalSecs` (back to back when
 * `null`) until the coordinator stops. Subclasses may override {@link startLoop},
 * {@link runLoop} and {@link stopLoop}. An error stops the coordinator (it is reported to it)
 * and skips `stopLoop`. The looper registers itself with the coordinator when constructed.
 */
export class Looper<A extends unknown[] = unknown[]> implements CoordinatedTask {
  readonly name: string;
  private readonly clock: Clock;
  private readonly logger: Logger;
  private alive = false;
  private started: Promise<unknown> | undefined;
  private resolveDone!: () => void;
  /** Settles when the loop has finished. */
  readonly done: Promise<unknown>;

  constructor(
    readonly coord: Coordinator,
    readonly intervalSecs: number | null,
    private readonly target?: (...args: A) => unknown,
    private readonly args?: A,
    options: LooperOptions = {},
  ) {
    if (!(coord instanceof Coordinator)) throw new ValueError("coord must be a Coordinator");
    // As upstream, empty args without a target are accepted.
    if (target === undefined && args !== undefined && args.length > 0) {
      throw new ValueError("'args' argument requires that 'target' be set");
    }
    if (intervalSecs !== null && !(intervalSecs >= 0)) {
      throw new ValueError(`intervalSecs must be null or a number >= 0, got ${String(intervalSecs)}`);
    }
    this.name = options.name ?? `Looper-${++counter}`;
    this.clock = options.clock ?? systemClock;
    this.logger = options.logger ?? defaultLogger;
    this.done = new Promise<void>((resolve) => {
      this.resolveDone = resolve;
    });
    coord.registerThread(this);
  }

  /** Constructs a looper, starts it and returns it. */
  static loop<A extends unknown[]>(
    coord: Coordinator,
    intervalSecs: number | null,
    target: (...args: A) => unknown,
    args?: A,
    options?: LooperOptions,
  ): Looper<A> {
    return new Looper(coord, intervalSecs, target, args, options).start();
  }

  /** Starts the loop. Like a thread, a looper can be started only once (`RuntimeError`). */
  start(): this {
    if (this.started !== undefined) throw new RuntimeError(`Looper ${this.name} can only be started once`);
    this.alive = true;
    this.started = this.coord
      .stopOnException(() => this.body())
      .catch((e: unknown) => {
        // Only possible after join: the coordinator rethrows instead of recording.
        this.logger.error(`Looper ${this.name} failed after the Coordinator was joined`, { error: String(e) });
      })
      .finally(() => {
        this.alive = false;
        this.resolveDone();
      });
    return this;
  }

  isAlive(): boolean {
    return this.alive;
  }

  /** Called once before the first iteration. */
  protected startLoop(): unknown {
    return undefined;
  }

  /** One iteration: calls the target with its arguments. */
  protected runLoop(): unknown {
    return this.target?.(...((this.args ?? []) as A));
  }

  /** Called once after the last iteration, unless an iteration threw. */
  protected stopLoop(): unknown {
    return undefined;
  }

  private async body(): Promise<void> {
    await this.startLoop();
    if (this.intervalSecs === null) {
      while (!this.coord.shouldStop()) {
        await this.runLoop();
        await this.yieldTurn();
      }
    } else {
      const intervalMs = this.intervalSecs * 1000;
      let next = this.clock.now();
      for (;;) {
        const waitMs = next - this.clock.now();
        if (waitMs <= 0) await this.yieldTurn();
        if (await this.waitForStop(waitMs)) break;
        next += intervalMs;
        await this.runLoop();
      }
    }
    await this.stopLoop();
  }

  /**
   * `coord.waitForStop`, on the clock's timer (unref'd on the real clock) rather than its sleep,
   * so that waiting does not keep the process alive.
   */
  private waitForStop(ms: number): Promise<boolean> {
    if (this.coord.shouldStop()) return Promise.resolve(true);
    if (ms <= 0) return Promise.resolve(false);
    const signal = this.coord.signal;
    return new Promise<boolean>((resolve) => {
      const onStop = (): void => {
        timer.cancel();
        resolve(true);
      };
      const timer = this.clock.setTimer(ms, () => {
        signal.removeEventListener("abort", onStop);
        resolve(this.coord.shouldStop());
      });
      signal.addEventListener("abort", onStop, { once: true });
    });
  }

  /**
   * Lets I/O, timers and other tasks run before an iteration that needs no wait; without it a
   * back-to-back loop would starve the event loop on microtasks. A zero-delay timer on the clock
   * races `setImmediate`, so a virtual clock sees the pending iteration as work due *now* and
   * runs it before moving time on (with `setImmediate` alone, `advance` could jump past it).
   */
  private async yieldTurn(): Promise<void> {
    let timer: TimerHandle | undefined;
    await new Promise<void>((resolve) => {
      timer = this.clock.setTimer(0, resolve);
      setImmediate(resolve);
    });
    timer?.cancel();
  }
}
