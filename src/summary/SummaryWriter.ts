/**
 * `SummaryWriter`: the TensorBoard writer a training loop talks to (TF's `FileWriter` /
 * `tf.summary.create_file_writer`). It turns scalars, histograms, text, images, tensors and
 * session markers into events with the clock's wall time and hands them to an
 * {@link EventFileWriter}, which writes them in the background.
 *
 * @example
 * ```ts
 * import { SummaryWriter } from "monitored-session/summary";
 *
 * const writer = new SummaryWriter("runs/exp1");
 * writer.addScalar("loss", 0.25, 100);
 * writer.addHistogram("weights", new Float32Array([0.1, 0.2, 0.2]), 100);
 * await writer.close();
 * ```
 *
 * @module
 */

import type { Observable } from "rxjs";
import { InvalidArgumentError } from "../errors.js";
import type { TensorValue } from "../session/Tensor.js";
import { EventFileWriter, type EventFileWriterOptions, type FlushInfo } from "./EventFileWriter.js";
import { type EventProto, type Int64, SessionStatus, type Summary, type SummaryValue } from "./EventProto.js";
import { type HistogramInput, type HistogramOptions, histogramValue } from "./histogram.js";
import { type ImageInput, imageValue } from "./image.js";
import {
  checkTag,
  type DisplayOptions,
  type ScalarOptions,
  scalarValue,
  type TensorSummaryMetadata,
  tensorSummaryValue,
  textValue,
  writeScalarEvent,
} from "./summaryValues.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link SummaryWriter}. */
export interface SummaryWriterOptions extends EventFileWriterOptions {
  /**
   * Write `SessionLog(START)` at this step right after the file version, telling TensorBoard
   * that the run restarted from step `purgeStep` (tensorboardX's `purge_step`). Use the step
   * of the restored checkpoint. See {@link SummaryWriter.markRestart}.
   */
  readonly purgeStep?: Int64;
}

/** The `SessionLog` statuses a writer can record. */
export type SessionLogStatus = "START" | "STOP" | "CHECKPOINT";

/** Options of {@link SummaryWriter.addSessionLog}. */
export interface SessionLogOptions {
  /** For `CHECKPOINT`: the checkpoint's path and file name. */
  readonly checkpointPath?: string;
  readonly msg?: string;
}

/** An event without `wallTime` (the writer's clock supplies it) or with an explicit one. */
export type EventInput = Omit<EventProto, "wallTime"> & { readonly wallTime?: number };

/** Writes summaries for one log directory. All `add*` methods are synchronous and never block on I/O. */
export class SummaryWriter {
  /** The event file writer underneath. */
  readonly eventWriter: EventFileWriter;

  /**
   * Creates a new event file in `logdir` (created if missing). Throws `InvalidArgumentError`
   * for invalid options.
   */
  constructor(logdir: string, options: SummaryWriterOptions = {}) {
    if (options.purgeStep !== undefined) checkStep(options.purgeStep, "purgeStep");
    this.eventWriter = new EventFileWriter(logdir, options);
    if (options.purgeStep !== undefined) this.markRestart(options.purgeStep);
  }

  /** The log directory (the TensorBoard run). */
  get logdir(): string {
    return this.eventWriter.logdir;
  }

  /** The event file this writer writes. */
  get path(): string {
    return this.eventWriter.path;
  }

  /** Background write errors, as they happen. */
  get errors$(): Observable<Error> {
    return this.eventWriter.errors$;
  }

  /** One value per flush that made records durable. */
  get flushed$(): Observable<FlushInfo> {
    return this.eventWriter.flushed$;
  }

  /** The first background write error, if any (later events are dropped). */
  get error(): Error | undefined {
    return this.eventWriter.error;
  }

  /** Records queued in memory, not yet handed to the file system. */
  get pendingRecords(): number {
    return this.eventWriter.pendingRecords;
  }

  /** `true` once `close()` was called. */
  get closed(): boolean {
    return this.eventWriter.closed;
  }

  /**
   * A scalar at `step` (TF2 tensor form by default; `{ simpleValue: true }` for the legacy form).
   *
   * @example
   * ```ts
   * // @prelude docs/preludes/session.ts
   * writer.addScalar("loss", loss, step);
   * ```
   */
  addScalar(tag: string, value: number, step: Int64, options?: ScalarOptions): void {
    checkStep(step, tag);
    if (options === undefined) {
      checkTag(tag);
      if (typeof value !== "number") {
        throw new InvalidArgumentError(`scalar "${tag}": value must be a number, got ${typeof value}`);
      }
      this.eventWriter.addEncoded((w) => writeScalarEvent(w, this.wallTime(), step, tag, value));
      return;
    }
    this.write(step, [scalarValue(tag, value, options)]);
  }

  /** Several scalars at the same step, in one event (one value per key). */
  addScalars(values: Readonly<Record<string, number>>, step: Int64, options?: ScalarOptions): void {
    checkStep(step, "addScalars");
    const entries = Object.entries(values);
    if (entries.length === 0) throw new InvalidArgumentError("addScalars: no values given");
    this.write(
      step,
      entries.map(([tag, v]) => scalarValue(tag, v, options)),
    );
  }

  /** A histogram of `values` at `step` (30 equal-width buckets by default). */
  addHistogram(tag: string, values: HistogramInput, step: Int64, options?: HistogramOptions): void {
    checkStep(step, tag);
    this.write(step, [histogramValue(tag, values, options)]);
  }

  /** Markdown text at `step`. */
  addText(tag: string, text: string | readonly string[], step: Int64, options?: DisplayOptions): void {
    checkStep(step, tag);
    this.write(step, [textValue(tag, text, options)]);
  }

  /** An image at `step`: PNG bytes, or raw 8-bit pixels encoded to PNG. */
  addImage(tag: string, image: ImageInput, step: Int64, options?: DisplayOptions): void {
    checkStep(step, tag);
    this.write(step, [imageValue(tag, image, options)]);
  }

  /** Any tensor at `step`, for the plugin named in `metadata`. */
  addTensor(tag: string, value: TensorValue, step: Int64, metadata: TensorSummaryMetadata): void {
    checkStep(step, tag);
    this.write(step, [tensorSummaryValue(tag, value, metadata)]);
  }

  /** Pre-built summary values (or a whole `Summary`) at `step` (TF's `add_summary`). */
  addSummary(summary: Summary | readonly SummaryValue[], step: Int64): void {
    checkStep(step, "addSummary");
    const value = "value" in summary ? summary.value : (summary as readonly SummaryValue[]);
    for (const v of value) checkTag(v.tag);
    this.write(step, value);
  }

  /**
   * A `SessionLog` marker at `step`. `START` after a restore from step k, at step k, tells
   * TensorBoard to drop the events the crashed run wrote at steps `>= k`; `CHECKPOINT` records a
   * saved checkpoint (`checkpointPath`); `STOP` marks a clean end.
   */
  addSessionLog(status: SessionLogStatus, step: Int64, options: SessionLogOptions = {}): void {
    checkStep(step, `SessionLog ${status}`);
    const code = SessionStatus[status] as SessionStatus | undefined;
    if (code === undefined) {
      throw new InvalidArgumentError(`SessionLog status must be START, STOP or CHECKPOINT, got ${String(status)}`);
    }
    this.eventWriter.addEvent({
      wallTime: this.wallTime(),
      step,
      sessionLog: {
        status: code,
        ...(options.checkpointPath === undefined ? {} : { checkpointPath: options.checkpointPath }),
        ...(options.msg === undefined ? {} : { msg: options.msg }),
      },
    });
  }

  /**
   * Records that training restarted from a checkpoint at `step`: writes `SessionLog(START)` at
   * `step` and starts a background flush. TensorBoard then shows the new values for steps
   * `>= step` instead of the ones the previous run wrote after its last checkpoint.
   */
  markRestart(step: Int64): void {
    this.addSessionLog("START", step);
    void this.eventWriter.flush().catch(() => undefined); // errors reach errors$ and the next flush()
  }

  /** A raw event. `wallTime` defaults to the clock's time. */
  addEvent(event: EventInput): void {
    if (event.step !== undefined) checkStep(event.step, "addEvent");
    this.eventWriter.addEvent({ ...event, wallTime: event.wallTime ?? this.wallTime() });
  }

  /** Writes and fsyncs every event added so far; rejects with any background write error. */
  flush(): Promise<void> {
    return this.eventWriter.flush();
  }

  /** Flushes and closes the file. Idempotent; rejects with any background write error. */
  close(): Promise<void> {
    return this.eventWriter.close();
  }

  private write(step: Int64, value: readonly SummaryValue[]): void {
    this.eventWriter.addEvent({ wallTime: this.wallTime(), step, summary: { value } });
  }

  private wallTime(): number {
    return this.eventWriter.clock.now() / 1000;
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** Throws `InvalidArgumentError` unless `step` is a safe integer or an int64 bigint. */
const checkStep = (step: unknown, what: string): void => {
  if (typeof step === "number" && Number.isSafeInteger(step)) return;
  if (typeof step === "bigint" && step >= INT64_MIN && step <= INT64_MAX) return;
  throw new InvalidArgumentError(
    `${what}: step must be an integer (a safe integer number or an int64 bigint), got ${String(step)}`,
  );
};
