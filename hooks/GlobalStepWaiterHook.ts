/**
 * `GlobalStepWaiterHook`: delays a worker's first run until the global step reaches a value,
 * for staggered worker start (TensorFlow's `tf.estimator.GlobalStepWaiterHook`).
 *
 * @module
 */

import type { Clock } from "../src/time/Clock.js";
import { decodeOptions, NonNegativeInt, required, struct } from "../src/codec.js";
import type { Logger } from "../src/Logger.js";
import type { Session } from "../src/session/Session.js";
import { SessionRunHook, type HookEnv, type SessionRunContext } from "../src/hook/SessionRunHook.js";
import { globalStepNameOf, readGlobalStep } from "./internal/globalStep.js";
import { hookServices, type OwnServices } from "./internal/services.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link GlobalStepWaiterHook}. */
export interface GlobalStepWaiterHookOptions {
  /** The global step to wait for before the first run (an integer >= 0; `0` never waits). */
  readonly waitUntilStep: number;
  /** Time source for the polling sleeps (default: the session's clock). */
  readonly clock?: Clock | undefined;
  /** Where progress goes (default: the session's logger). */
  readonly logger?: Logger | undefined;
}

/** How long to sleep between two reads of the global step (TensorFlow: 0.5 s). */
const POLL_MS = 500;
/** Log progress when the step moved more than this since the last line. */
const LOG_EVERY_STEPS = 1000;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Blocks the first run until the global step is at least `waitUntilStep`, reading it every
 * 0.5 s and logging progress every 1000 steps. Once reached, it never blocks again, and
 * costs nothing per run.
 *
 * @example
 * ```ts
 * import { GlobalStepWaiterHook } from "monitored-session/hooks";
 *
 * declare const taskIndex: number; // this worker's index
 * // Worker k starts once the chief has trained k * 1000 steps.
 * const hooks = [new GlobalStepWaiterHook({ waitUntilStep: taskIndex * 1000 })];
 * ```
 */
export class GlobalStepWaiterHook extends SessionRunHook {
  /** The codec of the data options, shared with the configuration registry. */
  static readonly optionsCodec = struct("GlobalStepWaiterHook", "Delays a worker's first run until the global step reaches a value.", {
    waitUntilStep: required(NonNegativeInt, "The global step to wait for."),
  });

  private readonly waitUntilStep: number;
  private readonly own: OwnServices;
  private clock: Clock;
  private logger: Logger;
  private workerIsStarted = false;
  private globalStepName: string | undefined;

  constructor(options: GlobalStepWaiterHookOptions) {
    super();
    this.waitUntilStep = decodeOptions(GlobalStepWaiterHook.optionsCodec, options, "GlobalStepWaiterHook").waitUntilStep;
    this.own = { clock: options.clock, logger: options.logger };
    ({ clock: this.clock, logger: this.logger } = hookServices(this.own));
  }

  override begin(env?: HookEnv): void {
    ({ clock: this.clock, logger: this.logger } = hookServices(this.own, env));
    this.workerIsStarted = false;
  }

  override afterCreateSession(session: Session): void {
    this.globalStepName = globalStepNameOf(session, "GlobalStepWaiterHook");
  }

  override beforeRun(ctx: SessionRunContext): void | Promise<void> {
    if (this.workerIsStarted) return;
    if (!(this.waitUntilStep > 0)) {
      this.workerIsStarted = true;
      return;
    }
    return this.waitForStep(ctx.session);
  }

  private async waitForStep(session: Session): Promise<void> {
    const name = this.globalStepName ?? globalStepNameOf(session, "GlobalStepWaiterHook");
    const target = this.waitUntilStep;
    this.logger.info(`Waiting for global step ${target} before starting training.`);
    let lastLoggedStep = 0;
    for (;;) {
      const currentStep = await readGlobalStep(session, name);
      if (currentStep >= target) {
        this.workerIsStarted = true;
        return;
      }
      if (currentStep - lastLoggedStep > LOG_EVERY_STEPS) {
        this.logger.info(
          `Waiting for global step ${target} before starting training. Current step is ${currentStep}.`,
        );
        lastLoggedStep = currentStep;
      }
      await this.clock.sleep(POLL_MS);
    }
  }
}
