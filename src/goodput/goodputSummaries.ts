/**
 * {@link goodputSummaries}: the chief's goodput as TensorBoard scalars, so that the run's
 * dashboard shows where its time went beside its loss: `goodput/fraction` (the group's goodput,
 * 0 to 1) and `badput/<bucket>_secs` for every bucket, recomputed from every task's goodput log
 * at most once per interval when the session writes its summaries, and once more when the
 * session ends.
 *
 * @module
 */

import type { SessionEventListener } from "../events/logObserver.js";
import type { Logger } from "../Logger.js";
import type { SummaryWriter } from "../summary/SummaryWriter.js";
import type { Clock } from "../time/Clock.js";
import { computeGoodput } from "./computeGoodput.js";
import { BADPUT_BUCKETS, GoodputLogFollower } from "./goodputLog.js";
import type { GoodputRecorder } from "./GoodputRecorder.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link goodputSummaries}. */
export interface GoodputSummariesOptions {
  /** The log directory whose `goodput/` logs are read (every task's). */
  readonly logDir: string;
  /** The chief's own recorder: it marks the step first, so that the figures cover training up to now and the log alone gives them again. */
  readonly recorder: GoodputRecorder;
  /** Where the scalars go (called when one is written: the session's shared writer for the log directory). */
  readonly writer: () => SummaryWriter;
  readonly clock: Clock;
  /** Where a failure to compute or write them is said (once). */
  readonly logger: Logger;
  /** The least time between two writes during training, in seconds (default 60). */
  readonly intervalSecs?: number | undefined;
}

/** The summary tag of the group's goodput. */
export const GOODPUT_TAG = "goodput/fraction";

/** The summary tag of a badput bucket's seconds. */
export const badputTag = (bucket: string): string => `badput/${bucket}_secs`;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * A session log observer (`MonitoredSessionOptions.logObserver`) that writes the group's goodput
 * as scalars at the global step of a `summaryWritten` event (at most once per `intervalSecs`) and
 * at the session's `end`. A failure (an unreadable log, a closed writer) is a warning, said once:
 * the figures are never worth a step.
 */
export const goodputSummaries = (options: GoodputSummariesOptions): SessionEventListener => {
  const intervalMs = (options.intervalSecs ?? 60) * 1000;
  // Each write reads only what the logs gained since the last one: its cost does not grow with the run.
  const logs = new GoodputLogFollower(options.logDir);
  let lastWriteMs = Number.NEGATIVE_INFINITY;
  let step: number | undefined;
  let warned = false;
  const write = (at: number): void => {
    try {
      options.recorder.mark(at, true);
      const group = computeGoodput(logs.read()).group;
      if (group === null) return;
      const values: Record<string, number> = { [GOODPUT_TAG]: group.goodput };
      for (const b of BADPUT_BUCKETS) values[badputTag(b)] = group.badput[b];
      options.writer().addScalars(values, at);
    } catch (e) {
      if (warned) return;
      warned = true;
      options.logger.warn(`The goodput summaries could not be written (${e instanceof Error ? e.message : String(e)}); training goes on, and \`monitored-session goodput ${options.logDir}\` recomputes them`);
    }
  };
  return (e) => {
    switch (e.type) {
      case "summaryWritten": {
        step = e.globalStep;
        const now = options.clock.now();
        if (now - lastWriteMs < intervalMs) return;
        lastWriteMs = now;
        write(e.globalStep);
        return;
      }
      case "checkpointSaved":
        step = e.globalStep;
        return;
      case "end":
        if (step !== undefined) write(step);
        return;
      default:
        return;
    }
  };
};
