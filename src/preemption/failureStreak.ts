/**
 * {@link FailureStreak}: how a poller says that something it checks again and again keeps
 * failing, without flooding the log: the first failure of a streak is a warning, the repeats
 * are `debug`, and the first success after a streak is said once at `info`.
 *
 * @module
 */

import type { Logger } from "../Logger.js";

/** One checked thing's failures, said once per streak (see the module doc). */
export class FailureStreak {
  private failing = false;

  constructor(private readonly logger: Logger) {}

  /** A check failed: `first` (a warning) if it is the streak's first, else `again` (debug). */
  failed(first: string, again: string): void {
    if (this.failing) this.logger.debug(again);
    else this.logger.warn(first);
    this.failing = true;
  }

  /** A check succeeded: `back` (info) if it ends a streak, else nothing. */
  succeeded(back: string): void {
    if (this.failing) this.logger.info(back);
    this.failing = false;
  }
}
