/**
 * Progress output of `monitored-session run`: a cli-progress bar on a terminal, plain log lines
 * in a pipe or CI. Both show the global step, steps/sec, the loss (when the job fetches one)
 * and, when the last step is known, the ETA. Library log messages go through {@link Progress.logger}
 * so that they do not tear the bar.
 *
 * The display is an observer of the session: {@link followSession} subscribes it to the
 * session's `events$` (runs, recoveries) instead of the training loop calling it.
 *
 * @module
 */

import cliProgress from "cli-progress";
import type { Observable, Subscription } from "rxjs";

import type { Clock } from "../time/Clock.js";
import { levelLogger, type Logger, type LogLevel } from "../Logger.js";
import type { SessionEvent } from "../events/SessionEvent.js";
import { jsonLine, jsonLogger, type LogFormat } from "./logFormat.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Where the progress goes. */
export interface ProgressOptions {
  /** A terminal (a bar) or not (log lines). */
  readonly tty: boolean;
  readonly out: NodeJS.WritableStream;
  readonly err: NodeJS.WritableStream;
  readonly clock: Clock;
  /** Minimum milliseconds between plain lines (default 1000). */
  readonly lineIntervalMs?: number;
  /** Log messages below this level are dropped (default `info`). */
  readonly logLevel?: LogLevel;
  /** `json`: log records on `err` and progress records on `out`, one JSON object a line, never a bar (default `text`). */
  readonly format?: LogFormat;
}

/** The progress display of one run. */
export interface Progress {
  /** Log messages, printed above the bar (or as lines). */
  readonly logger: Logger;
  /** Starts the display at `step` (the restored global step). */
  start(step: number, lastStep: number | undefined): void;
  /** Whether {@link update} would draw now (so the caller reads the step only when needed). */
  due(): boolean;
  /** Records the global step (and loss; `undefined` keeps the last one) after a run. */
  update(step: number, loss: number | undefined): void;
  /**
   * The step rate `StepCounterHook` measured (its `stepRate` event): shown from then on instead
   * of the display's own estimate, so the display and TensorBoard's `global_step/sec` agree.
   */
  stepRate(stepsPerSec: number): void;
  /** A `warning` event: the display counts them (`| 2 warnings`); the line itself is the log observer's. */
  warning(): void;
  /** Draws the final state and releases the terminal. Log lines after it are written directly. Idempotent. */
  stop(): void;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** JSON records with `format: "json"`; else a bar on a terminal, plain lines elsewhere. */
export const createProgress = (options: ProgressOptions): Progress =>
  options.format === "json" ? lineProgress(options, jsonStyle(options)) : options.tty ? barProgress(options) : lineProgress(options, textStyle(options));

/** What one progress line says. */
interface ProgressFigures {
  readonly step: number;
  readonly lastStep: number | undefined;
  readonly stepsPerSec: number | undefined;
  readonly loss: number | undefined;
  readonly warnings: number;
}

/** How the plain display writes its log lines and its progress lines. */
interface LineStyle {
  readonly logger: Logger;
  progress(f: ProgressFigures): void;
}

/** `INFO <message>` lines on `err`, `step 3/10 | 5.0 steps/s | …` lines on `out`. */
const textStyle = (o: ProgressOptions): LineStyle => ({
  logger: levelLogger(o.logLevel ?? "info", (l, message) => o.err.write(`${l.toUpperCase()} ${message}\n`)),
  progress: (f) => {
    const parts = [`step ${f.step}${f.lastStep === undefined ? "" : `/${f.lastStep}`}`, `${fmtRate(f.stepsPerSec)} steps/s`];
    if (f.loss !== undefined) parts.push(`loss ${fmtLoss(f.loss)}`);
    if (f.lastStep !== undefined) parts.push(`eta ${fmtEta(etaSecs(f))}`);
    o.out.write(`${parts.join(" | ")}${warningsPart(f.warnings)}\n`);
  },
});

/** One JSON object a line (src/cli/logFormat.ts): log records on `err`, progress records on `out`. */
const jsonStyle = (o: ProgressOptions): LineStyle => ({
  logger: jsonLogger(o.err, () => o.clock.now(), o.logLevel),
  progress: (f) => {
    const eta = etaSecs(f);
    o.out.write(
      jsonLine(o.clock.now(), {
        type: "progress",
        step: f.step,
        ...(f.lastStep === undefined ? {} : { lastStep: f.lastStep }),
        ...(f.stepsPerSec === undefined ? {} : { stepsPerSec: f.stepsPerSec }),
        ...(f.loss === undefined ? {} : { loss: f.loss }),
        ...(eta === undefined || !Number.isFinite(eta) ? {} : { etaSecs: Math.max(0, Math.round(eta)) }),
        warnings: f.warnings,
      }),
    );
  },
});

/** Seconds to the last step at the current rate, when both are known. */
const etaSecs = (f: ProgressFigures): number | undefined =>
  f.lastStep === undefined || f.stepsPerSec === undefined || f.stepsPerSec <= 0 ? undefined : (f.lastStep - f.step) / f.stepsPerSec;

/** ` | 2 warnings` once there are some, for the end of a line. */
const warningsPart = (warnings: number): string => (warnings === 0 ? "" : ` | ${warnings} warning${warnings === 1 ? "" : "s"}`);

/** Steps per second over the last few seconds. */
class Rate {
  private samples: [number, number][] = [];
  add(t: number, step: number): void {
    this.samples.push([t, step]);
    while (this.samples.length > 2 && t - (this.samples[0] as [number, number])[0] > 5000) this.samples.shift();
  }
  get value(): number | undefined {
    const first = this.samples[0];
    const last = this.samples[this.samples.length - 1];
    if (first === undefined || last === undefined || last[0] <= first[0]) return undefined;
    return ((last[1] - first[1]) * 1000) / (last[0] - first[0]);
  }
}

const fmtLoss = (loss: number | undefined): string => (loss === undefined ? "" : Math.abs(loss) >= 1e4 || (loss !== 0 && Math.abs(loss) < 1e-3) ? loss.toExponential(3) : loss.toFixed(4));
const fmtRate = (r: number | undefined): string => (r === undefined ? "-" : r >= 100 ? r.toFixed(0) : r.toFixed(1));
const fmtEta = (secs: number | undefined): string => {
  if (secs === undefined || !Number.isFinite(secs)) return "-";
  const s = Math.max(0, Math.round(secs));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return h > 0 ? `${h}h${String(m).padStart(2, "0")}m` : m > 0 ? `${m}m${String(s % 60).padStart(2, "0")}s` : `${s}s`;
};

/** What both displays show beyond the step: the rate (the hook's once it measured one) and the warnings' count. */
class Status {
  private readonly estimate = new Rate();
  private hookRate: number | undefined;
  private warnings = 0;
  /** Records the global step at clock time `t` (the display's own estimate of the rate). */
  add(t: number, step: number): void {
    this.estimate.add(t, step);
  }
  /** Steps per second: `StepCounterHook`'s last rate, else the display's estimate. */
  get value(): number | undefined {
    return this.hookRate ?? this.estimate.value;
  }
  /** The `stepRate` and `warning` methods of {@link Progress}. */
  readonly events: Pick<Progress, "stepRate" | "warning"> = {
    stepRate: (r) => void (this.hookRate = r),
    warning: () => void this.warnings++,
  };
  /** The warnings counted so far. */
  get warningCount(): number {
    return this.warnings;
  }
  /** ` | 2 warnings` once there are some, for the end of the line. */
  get warningsPart(): string {
    return warningsPart(this.warnings);
  }
}

const lineProgress = (o: ProgressOptions, style: LineStyle): Progress => {
  const interval = o.lineIntervalMs ?? 1000;
  const rate = new Status();
  let lastStep: number | undefined;
  let lastLine = -Infinity;
  let step = 0;
  let loss: number | undefined;
  let printed = -1;
  const print = (): void => {
    style.progress({ step, lastStep, stepsPerSec: rate.value, loss, warnings: rate.warningCount });
    printed = step;
    lastLine = o.clock.now();
  };
  return {
    logger: style.logger,
    start(s, last) {
      step = s;
      lastStep = last;
      rate.add(o.clock.now(), s);
    },
    due: () => o.clock.now() - lastLine >= interval,
    update(s, l) {
      step = s;
      loss = l ?? loss;
      rate.add(o.clock.now(), s);
      if (o.clock.now() - lastLine >= interval) print();
    },
    ...rate.events,
    stop() {
      if (printed !== step) print();
    },
  };
};

const barProgress = (o: ProgressOptions): Progress => {
  const rate = new Status();
  let lastStep: number | undefined;
  let lastDraw = -Infinity;
  const multi = new cliProgress.MultiBar(
    {
      stream: o.out,
      hideCursor: true,
      clearOnComplete: false,
      stopOnComplete: false,
      noTTYOutput: false,
      format: (options, params, payload: { speed: string; loss: string; eta: string; last: string }) => {
        const bar = lastStep === undefined ? "" : `${cliProgress.Format.BarFormat(params.progress, options)} ${Math.floor(params.progress * 100)}% | `;
        return `${bar}step ${params.value}${payload.last} | ${payload.speed} steps/s${payload.loss === "" ? "" : ` | loss ${payload.loss}`}${lastStep === undefined ? "" : ` | ETA ${payload.eta}`}${rate.warningsPart}`;
      },
    },
    cliProgress.Presets.shades_classic,
  );
  let bar: cliProgress.SingleBar | undefined;
  let loss: number | undefined;
  return {
    logger: levelLogger(o.logLevel ?? "info", (l, message) => {
      const line = `${l.toUpperCase()} ${message}\n`;
      if (bar === undefined) o.err.write(line);
      else multi.log(line);
    }),
    start(s, last) {
      lastStep = last;
      rate.add(o.clock.now(), s);
      bar = multi.create(last ?? Math.max(s, 1), s, { speed: "-", loss: "", eta: "-", last: last === undefined ? "" : `/${last}` });
    },
    due: () => o.clock.now() - lastDraw >= 100,
    update(s, l) {
      loss = l ?? loss;
      rate.add(o.clock.now(), s);
      const r = rate.value;
      if (lastStep === undefined) bar?.setTotal(Math.max(s, 1));
      bar?.update(s, {
        speed: fmtRate(r),
        loss: fmtLoss(loss),
        eta: fmtEta(lastStep === undefined || r === undefined || r <= 0 ? undefined : (lastStep - s) / r),
      });
      lastDraw = o.clock.now();
    },
    ...rate.events,
    stop() {
      // After the bar stops, multi.log() would buffer lines that are never flushed: the final
      // lines ("Done at global step", the paths, the TensorBoard command) go straight to err.
      if (bar === undefined) return;
      multi.update(); // flushes the lines logged since the last redraw
      multi.stop();
      bar = undefined;
    },
  };
};

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** What {@link followSession} needs besides the display. */
export interface SessionFeed {
  /** The session's events. */
  readonly events$: Observable<SessionEvent>;
  /** Reads the current global step (`undefined` if the session has none). */
  readStep(): Promise<number | undefined>;
  /** The loss in a run's results, if the job fetches one. */
  lossOf(results: unknown): number | undefined;
}

/** A display following a session: stop following, or wait for the step read in flight. */
export interface Following extends Pick<Subscription, "unsubscribe"> {
  /** Resolves once no step read is in flight (so a final update comes after every earlier one). */
  settled(): Promise<void>;
}

/**
 * Subscribes `progress` to a session's events:
 *
 * - `afterRun`: when the display is due (or the run requested a stop), the global step is read
 *   and the step, rate, loss and ETA are updated. At most one read is in flight; runs that end
 *   meanwhile are covered by it, so a fast loop does not queue reads.
 * - `stepRate` (StepCounterHook's): the rate shown; `warning`: counted in the display (the
 *   session's log observer prints the line).
 * - Log lines: a recovery (`sessionAborted` with its cause, then `sessionCreated` with the
 *   checkpoint restored) and every durable checkpoint (`checkpointSaved`). A preemption save
 *   that overran its grace period is the handler's own line (at `error`), not printed again here.
 */
export const followSession = (progress: Progress, feed: SessionFeed): Following => {
  const { logger } = progress;
  let reading: Promise<void> | undefined;
  const read = (loss: number | undefined): void => {
    reading = feed.readStep().then(
      (step) => {
        reading = undefined;
        if (step !== undefined) progress.update(step, loss);
      },
      (e: unknown) => {
        // A read racing the session's close: the final update after the loop covers it.
        reading = undefined;
        logger.debug(`Progress: reading the global step failed: ${e instanceof Error ? e.message : String(e)}`);
      },
    );
  };
  const subscription = feed.events$.subscribe((e) => {
    switch (e.type) {
      case "afterRun":
        if (reading === undefined && (e.stopRequested || progress.due())) read(feed.lossOf(e.results));
        break;
      case "sessionCreated":
        if (e.recovery > 0) {
          logger.info(
            `Session re-created (recovery ${e.recovery}${e.cause === undefined ? "" : ` after ${e.cause}`})${e.restoredFrom === null ? "" : `, restored from ${e.restoredFrom}`}.`,
          );
        }
        break;
      case "sessionAborted":
        logger.warn(`Session aborted (${e.cause}): it is re-created at the next step.`);
        break;
      case "checkpointSaved":
        logger.info(`Checkpoint saved: ${e.path} (global step ${e.globalStep}, ${Math.round(e.durationMs)} ms).`);
        break;
      case "stepRate":
        progress.stepRate(e.stepsPerSec);
        break;
      case "warning":
        progress.warning();
        break;
      default:
        break;
    }
  });
  return {
    unsubscribe: () => subscription.unsubscribe(),
    settled: async () => {
      while (reading !== undefined) await reading;
    },
  };
};
