/**
 * `LogdirScalars`: every scalar point of a logdir, per run and tag, in {@link ScalarSeries}
 * columns, fed with the events of `readEvents`. It applies TensorBoard's restart rules, so that
 * the series are what TensorBoard shows, but with every point:
 *
 * - A run whose files declare `brain.Event:2` or later (every writer since TF 1.0, ours too):
 *   the run's first `SessionLog START` marks a session start and purges nothing; each later
 *   START at step s is a restart from a checkpoint, and removes, in every series of the run,
 *   the points with step >= s (what the crashed session wrote after that checkpoint).
 *   (TensorBoard's Python loader, `plugin_event_accumulator.py`, `_CheckForRestartAndMaybePurge`.)
 * - A run without a file version: a summary whose step is below the last summary step seen
 *   removes the points with step >= its step, only in the tags it carries (the same file's
 *   `_CheckForOutOfOrderStepAndMaybePurge`).
 * - A run reported deleted is dropped, as TensorBoard drops a run whose directory is gone.
 *
 * @example
 * ```ts
 * import { LogdirScalars, readEvents } from "monitored-session/summary";
 *
 * const store = new LogdirScalars();
 * for await (const e of readEvents("runs")) store.ingest(e);
 * const loss = store.series("exp1", "loss");
 * console.log(loss?.length, loss?.steps, loss?.values);
 * ```
 *
 * @module
 */

import type { SummaryEvent } from "./EventDecoder.js";
import type { ReadIssue } from "./readEvents.js";
import { ScalarSeries } from "./ScalarSeries.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

interface RunScalars {
  readonly series: Map<string, ScalarSeries>;
  fileVersion: number | undefined;
  seenStart: boolean;
  mostRecentStep: number;
}

/** The scalar series of a logdir, by run and tag. */
export class LogdirScalars {
  private readonly byRun = new Map<string, RunScalars>();
  private created = 0;

  /** Takes one event of `readEvents`: keeps scalars, applies restarts, drops deleted runs; ignores the rest. */
  ingest(e: SummaryEvent | ReadIssue): void {
    switch (e.kind) {
      case "scalar":
        this.add(e.run, e.tag, e.step, e.wallTime, e.value);
        return;
      case "fileVersion": {
        const v = Number.parseFloat(e.version.split("brain.Event:").pop() ?? "");
        if (Number.isFinite(v)) this.run(e.run).fileVersion = v;
        return;
      }
      case "sessionLog": {
        if (e.status !== "START") return;
        const run = this.run(e.run);
        if (run.fileVersion === undefined || run.fileVersion < 2) return;
        if (!run.seenStart) {
          run.seenStart = true;
          return;
        }
        for (const s of run.series.values()) s.purgeFrom(e.step);
        return;
      }
      case "issue":
        if (e.problem === "runDeleted") this.byRun.delete(e.run);
        return;
      default:
        return;
    }
  }

  /**
   * Takes one scalar, as {@link ingest} takes a scalar event (for `readEventsInto`'s sink: no
   * event object per point). Returns how many points of the tag's series a step going backwards
   * purged (TensorBoard's rule for files older than `brain.Event:2`), usually 0.
   */
  add(runName: string, tag: string, step: number, wallTime: number, value: number): number {
    const run = this.run(runName);
    let purged = 0;
    if (run.fileVersion === undefined || run.fileVersion < 2) {
      if (step < run.mostRecentStep) purged = run.series.get(tag)?.purgeFrom(step) ?? 0;
      run.mostRecentStep = step;
    }
    let s = run.series.get(tag);
    if (s === undefined) {
      s = new ScalarSeries();
      run.series.set(tag, s);
      this.created += 1;
    }
    s.append(step, wallTime, value);
    return purged;
  }

  /**
   * How many series were ever created: it changes whenever a (run, tag) appears, so with the
   * runs deleted it names the set of tags (a deleted run's tags coming back count again).
   */
  get seriesCreated(): number {
    return this.created;
  }

  /** The runs with at least one scalar series, sorted. */
  runs(): string[] {
    return [...this.byRun].filter(([, r]) => r.series.size > 0).map(([name]) => name).sort();
  }

  /** The tags of `run`'s scalar series, sorted (empty for an unknown run). */
  tags(run: string): string[] {
    return [...(this.byRun.get(run)?.series.keys() ?? [])].sort();
  }

  /** One series, or `undefined`. */
  series(run: string, tag: string): ScalarSeries | undefined {
    return this.byRun.get(run)?.series.get(tag);
  }

  /** Points held, over every series. */
  get points(): number {
    let n = 0;
    for (const r of this.byRun.values()) for (const s of r.series.values()) n += s.length;
    return n;
  }

  /** Bytes the series' columns hold, spare capacity included. */
  get byteLength(): number {
    let n = 0;
    for (const r of this.byRun.values()) for (const s of r.series.values()) n += s.byteLength;
    return n;
  }

  private run(name: string): RunScalars {
    let r = this.byRun.get(name);
    if (r === undefined) {
      r = { series: new Map(), fileVersion: undefined, seenStart: false, mostRecentStep: Number.NEGATIVE_INFINITY };
      this.byRun.set(name, r);
    }
    return r;
  }
}
