/**
 * `operatorHook`: a {@link SessionRunHook} written as RxJS operators over the stream of runs.
 * The hook declares its fetches; every run's values flow through the pipeline synchronously
 * inside `afterRun`, and each value the pipeline emits requests a stop.
 *
 * @example
 * ```ts
 * import { filter, map, pairwise, scan } from "rxjs";
 * import { operatorHook } from "monitored-session/hooks";
 *
 * // Every 100 steps: smooth the loss; stop once it improves by less than 0.1%.
 * const stopOnPlateau = operatorHook({
 *   name: "stopOnPlateau",
 *   fetches: { loss: "loss", step: "global_step" },
 *   pipeline: (runs$) =>
 *     runs$.pipe(
 *       filter(({ results }) => Number(results.step) % 100 === 0),
 *       map(({ results }) => Number(results.loss)),
 *       scan((ema, loss) => 0.9 * ema + 0.1 * loss),
 *       pairwise(),
 *       filter(([before, now]) => before - now < 0.001 * before),
 *     ),
 * });
 * ```
 *
 * @module
 */

import { Subject, type Observable, type SchedulerLike, type Subscription } from "rxjs";

import { systemClock, type Clock } from "../src/time/Clock.js";
import { ClockScheduler } from "../src/time/ClockScheduler.js";
import { RuntimeError, ValueError } from "../src/errors.js";
import { defaultLogger, type Logger } from "../src/Logger.js";
import type { FetchResult, Fetches } from "../src/session/Session.js";
import {
  SessionRunArgs,
  type HookEnv,
  type SessionRunContext,
  type SessionRunHook,
  type SessionRunValues,
} from "../src/hook/SessionRunHook.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** One run, as the pipeline of an {@link operatorHook} sees it. */
export interface HookRun<R> {
  /** Counts this hook's runs from 1 (across recoveries). */
  readonly run: number;
  /** The values of the hook's declared fetches, mirroring their structure. */
  readonly results: R;
  /** The session clock's time when the run's `afterRun` started, in epoch milliseconds. */
  readonly time: number;
}

/** What a pipeline may use besides the run stream. */
export interface OperatorHookTools {
  /**
   * A scheduler on the session's clock: pass it to time-based operators (`debounceTime`,
   * `throttleTime`, `bufferTime`, `timeout`...) so that they run on a `VirtualClock` in tests.
   */
  readonly scheduler: SchedulerLike;
  /** The session's clock. */
  readonly clock: Clock;
  /** The session's logger. */
  readonly logger: Logger;
}

/** Options of {@link operatorHook}. */
export interface OperatorHookOptions<F extends Fetches> {
  /** The hook's name, for logs, `stopRequested` events and error messages. */
  readonly name: string;
  /** What every run fetches for the pipeline (added to the run's `SessionRunArgs`). Default: nothing. */
  readonly fetches?: F;
  /**
   * Builds the pipeline from the stream of runs. Each value it emits requests a stop: one emitted
   * while a run's values flow through it stops after that run; one emitted later, by a
   * time-based operator, stops after the next run.
   */
  readonly pipeline: (runs$: Observable<HookRun<FetchResult<F>>>, tools: OperatorHookTools) => Observable<unknown>;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Turns an RxJS pipeline over the runs into a {@link SessionRunHook}.
 *
 * - `beforeRun` adds the declared fetches to the run.
 * - `afterRun` pushes `{ run, results, time }` into the pipeline and returns when the pipeline
 *   has handled it: operators run synchronously, so a stop takes effect at the same step.
 * - An error in the pipeline fails the run (or, if it happened on a timer, the next run) with a
 *   `RuntimeError` naming the hook, the original error as its `cause`.
 * - The pipeline is subscribed in `begin` and unsubscribed at `end` (its timers cancelled).
 */
export const operatorHook = <const F extends Fetches = null>(options: OperatorHookOptions<F>): SessionRunHook & { readonly name: string } => {
  const { name, pipeline } = options;
  if (typeof name !== "string" || name.length === 0) throw new ValueError("operatorHook: `name` must be a non-empty string (it names the hook in logs and errors).");
  if (typeof pipeline !== "function") throw new ValueError(`operatorHook "${name}": \`pipeline\` must be a function (runs$, tools) => Observable.`);
  const fetches: Fetches = options.fetches ?? null;
  const args = SessionRunArgs(fetches);

  let runs$: Subject<HookRun<FetchResult<F>>> | undefined;
  let subscription: Subscription | undefined;
  /** The run whose values are in the pipeline right now; `undefined` between runs. */
  let current: SessionRunContext | undefined;
  let stopLater = false;
  let failure: RuntimeError | undefined;
  /** Whether `failure` was thrown from a run already (then `end` does not throw it again). */
  let reported = false;
  let runCount = 0;
  let clock: Clock = systemClock;

  const stop = (): void => {
    if (current !== undefined) current.requestStop();
    else stopLater = true;
  };
  const fail = (e: unknown): void => {
    const where = current === undefined ? "on a timer after run " : "at run ";
    failure = new RuntimeError(`operatorHook "${name}": its pipeline failed ${where}${runCount}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  };
  const unsubscribe = (): void => {
    subscription?.unsubscribe();
    subscription = undefined;
    runs$ = undefined;
  };
  const subscribe = (env: Pick<HookEnv, "clock" | "logger">): Subject<HookRun<FetchResult<F>>> => {
    unsubscribe();
    clock = env.clock;
    stopLater = false;
    failure = undefined;
    reported = false;
    const subject = new Subject<HookRun<FetchResult<F>>>();
    const tools: OperatorHookTools = { scheduler: new ClockScheduler(env.clock), clock: env.clock, logger: env.logger };
    let output: Observable<unknown>;
    try {
      output = pipeline(subject.asObservable(), tools);
    } catch (e) {
      throw new RuntimeError(`operatorHook "${name}": building its pipeline failed: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    }
    runs$ = subject;
    subscription = output.subscribe({ next: stop, error: fail });
    return subject;
  };
  const throwIfFailed = (): void => {
    if (failure === undefined) return;
    reported = true;
    throw failure;
  };

  return {
    name,
    begin(env: HookEnv): void {
      subscribe(env);
    },
    beforeRun(ctx: SessionRunContext): SessionRunArgs {
      throwIfFailed();
      if (stopLater) {
        stopLater = false;
        ctx.requestStop();
      }
      return args;
    },
    afterRun(ctx: SessionRunContext, values: SessionRunValues): void {
      // Outside a monitored session (no `begin`), the pipeline starts on the first run.
      const subject = runs$ ?? subscribe({ clock, logger: defaultLogger });
      runCount += 1;
      current = ctx;
      try {
        subject.next({ run: runCount, results: values.results as FetchResult<F>, time: clock.now() });
      } finally {
        current = undefined;
      }
      throwIfFailed();
    },
    end(): void {
      const subject = runs$;
      // Completion lets operators flush (`last`, `reduce`); a stop requested now changes nothing.
      subject?.complete();
      unsubscribe();
      // A failure no run reported yet (on a timer after the last run, or while completing).
      if (!reported) throwIfFailed();
    },
  };
};
