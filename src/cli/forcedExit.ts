/**
 * The `run` command's answer to a repeated interrupt: the first termination notice asks for a
 * preemption checkpoint at the next step boundary; a later Ctrl-C or SIGTERM (see
 * `TerminationNotice.count`) means "stop waiting". The save then gets at most
 * `gracePeriodSecs` more (0: none), and the process exits with the preemption code without it.
 * A checkpoint still being written is never half-visible (saves are atomic), and the restart
 * resumes from the newest checkpoint on disk.
 *
 * @module
 */

import type { Observable, Subscription } from "rxjs";

import type { Clock, TimerHandle } from "../time/Clock.js";
import type { Logger } from "../Logger.js";
import type { TerminationNotice } from "../preemption/TerminationNotices.js";

/** Options of {@link exitOnRepeatedNotice}. */
export interface RepeatedNoticeOptions {
  readonly gracePeriodSecs: number;
  readonly exitCode: number;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Ends the process (`process.exit` in the CLI). */
  readonly exit: (code: number) => void;
  /** Called just before `exit` (the CLI stops its progress bar). */
  readonly beforeExit?: () => void;
}

/**
 * Watches `notices$`: on the first repeated notice, logs why and schedules `exit(exitCode)` after
 * `gracePeriodSecs`. Unsubscribing (or the returned `cancel`) also cancels a scheduled exit.
 */
export const exitOnRepeatedNotice = (notices$: Observable<TerminationNotice>, options: RepeatedNoticeOptions): { cancel(): void } => {
  let timer: TimerHandle | undefined;
  const { gracePeriodSecs: grace, exitCode, clock, logger } = options;
  const subscription: Subscription = notices$.subscribe((n) => {
    if (n.count < 2 || timer !== undefined) return;
    logger.warn(
      `${n.source} again: exiting with ${exitCode} ${grace > 0 ? `in at most ${grace} s ` : ""}without waiting for the preemption checkpoint (the restart resumes from the newest checkpoint on disk).`,
    );
    timer = clock.setTimer(grace * 1000, () => {
      options.beforeExit?.();
      options.exit(exitCode);
    });
  });
  return {
    cancel: () => {
      subscription.unsubscribe();
      timer?.cancel();
    },
  };
};
