/**
 * `ViewStore`: what the board shows beyond scalars, per run: the histograms
 * ({@link HistogramSeries}), images ({@link ImageSeries}) and text ({@link TextSeries}), each
 * under a byte budget per tag (the board's thinning policy, `thinning.ts`), and the run's
 * `SessionLog CHECKPOINT` markers. It takes the events of `readEvents` and
 * applies TensorBoard's restart rules as `LogdirScalars` does for scalars:
 *
 * - a run whose files declare `brain.Event:2` or later: each `SessionLog START` after the
 *   run's first, at step s, removes the histograms, images and texts at step >= s, and the
 *   checkpoints at step > s (the checkpoint at s is the one the run restarted from: it exists);
 * - a run without a file version: a histogram, image or text whose step is below the last such
 *   step of the run removes that tag's points at step >= its step;
 * - a run reported deleted is dropped.
 *
 * {@link ViewStore.ingest} says what changed, for the board's live updates.
 *
 * @module
 */

import { InvalidArgumentError } from "../errors.js";
import type { HistogramEvent, ImageEvent, ReadIssue, SummaryEvent, TextEvent } from "../summary/index.js";
import { HistogramSeries } from "./HistogramSeries.js";
import { ImageSeries } from "./ImageSeries.js";
import { keepWhere } from "./keepWhere.js";
import { TextSeries, type TextPoint } from "./TextSeries.js";
import { mibText } from "./thinning.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The views the store keeps. */
export type ViewPlugin = "histograms" | "images" | "text" | "checkpoints";

/** A series of a view that changed: its length and last step now (`tag` absent for checkpoints). */
export interface ViewChange {
  readonly plugin: ViewPlugin;
  readonly run: string;
  readonly tag?: string;
  readonly count: number;
  readonly lastStep: number | null;
}

/** One `SessionLog CHECKPOINT`. */
export interface CheckpointMark {
  readonly step: number;
  readonly wallTime: number;
  readonly path: string;
}

/** What {@link ViewStore.ingest} did with an event. */
export interface Ingested {
  /** Series that grew or shrank. */
  readonly changes: readonly ViewChange[];
  /** A restart purge: every view of the run at step >= `step` (or of `tag` only). */
  readonly purge?: { readonly step: number; readonly tag?: string };
  /** A line to report (images, histograms or text thinned to stay within their budget). */
  readonly notice?: string;
}

interface RunViews {
  readonly histograms: Map<string, HistogramSeries>;
  readonly images: Map<string, ImageSeries>;
  readonly texts: Map<string, TextSeries>;
  readonly checkpoints: CheckpointMark[];
  fileVersion: number | undefined;
  seenStart: boolean;
  mostRecentStep: number;
}

/** The byte budgets of one (run, tag) of each view, past which older steps are thinned out. */
export interface ViewBudgets {
  /** Image bytes (encoded, as in the file) kept per (run, tag); default 32 MiB. */
  readonly imageBytesPerTag?: number | undefined;
  /** Histogram bytes (24 a bucket, 28 a step) kept per (run, tag); default 16 MiB. */
  readonly histogramBytesPerTag?: number | undefined;
  /** Text bytes (UTF-8, 16 a string, 64 a step) kept per (run, tag); default 4 MiB. */
  readonly textBytesPerTag?: number | undefined;
}

/** One series thinned to stay within its budget: how many steps went, how many are kept. */
export interface ThinnedSeries {
  readonly plugin: "histograms" | "images" | "text";
  readonly run: string;
  readonly tag: string;
  readonly dropped: number;
  readonly kept: number;
  readonly budgetBytes: number;
}

/** The default budgets: images 32 MiB, histograms 16 MiB, text 4 MiB per (run, tag). */
const DEFAULT_VIEW_BUDGETS = { imageBytesPerTag: 32 << 20, histogramBytesPerTag: 16 << 20, textBytesPerTag: 4 << 20 } as const;

/** Each budget's flag, for the notices. */
const BUDGET_FLAGS = { images: "--image-mib-per-tag", histograms: "--histogram-mib-per-tag", text: "--text-mib-per-tag" } as const;
const BUDGET_OPTIONS = { images: "imageBytesPerTag", histograms: "histogramBytesPerTag", text: "textBytesPerTag" } as const;

const NOTHING: Ingested = { changes: [] };

/** Histograms, images, text and checkpoints of a logdir, by run. */
export class ViewStore {
  private readonly byRun = new Map<string, RunViews>();
  private nextImageId = 1;
  private readonly imageId = (): number => this.nextImageId++;
  private readonly imageBytesPerTag: number;
  private readonly histogramBytesPerTag: number;
  private readonly textBytesPerTag: number;

  /** Throws `InvalidArgumentError` unless each budget given is a positive number of bytes. */
  constructor(budgets: ViewBudgets = {}) {
    const budget = (name: keyof ViewBudgets): number => {
      const b = budgets[name] ?? DEFAULT_VIEW_BUDGETS[name];
      if (!(b > 0) || !Number.isFinite(b)) throw new InvalidArgumentError(`${name} must be a positive number of bytes (default ${DEFAULT_VIEW_BUDGETS[name]}), got ${b}`);
      return b;
    };
    this.imageBytesPerTag = budget("imageBytesPerTag");
    this.histogramBytesPerTag = budget("histogramBytesPerTag");
    this.textBytesPerTag = budget("textBytesPerTag");
  }

  /** Takes one event of `readEvents`; says what changed. */
  ingest(e: SummaryEvent | ReadIssue): Ingested {
    switch (e.kind) {
      case "histogram":
      case "image":
      case "text":
        return this.summary(e);
      case "fileVersion": {
        const v = Number.parseFloat(e.version.split("brain.Event:").pop() ?? "");
        if (Number.isFinite(v)) this.run(e.run).fileVersion = v;
        return NOTHING;
      }
      case "sessionLog":
        if (e.status === "CHECKPOINT") {
          const r = this.run(e.run);
          const at = r.checkpoints.findIndex((c) => c.step === e.step);
          const mark = { step: e.step, wallTime: e.wallTime, path: e.checkpointPath };
          // The same step saved again (after a restart from it) replaces the old mark.
          if (at >= 0) r.checkpoints[at] = mark;
          else r.checkpoints.push(mark);
          return { changes: [checkpointChange(e.run, r)] };
        }
        return e.status === "START" ? this.start(e.run, e.step) : NOTHING;
      case "issue":
        if (e.problem === "runDeleted") this.byRun.delete(e.run);
        return NOTHING;
      default:
        return NOTHING;
    }
  }

  /** Every series that lost steps to its budget, by run, then plugin, then tag. */
  thinned(): ThinnedSeries[] {
    const out: ThinnedSeries[] = [];
    for (const run of [...this.byRun.keys()].sort()) {
      const r = this.byRun.get(run) as RunViews;
      const add = (plugin: ThinnedSeries["plugin"], tag: string, dropped: number, kept: number, budgetBytes: number): void => {
        if (dropped > 0) out.push({ plugin, run, tag, dropped, kept, budgetBytes });
      };
      for (const [tag, s] of sortedEntries(r.histograms)) add("histograms", tag, s.droppedSteps, s.length, this.histogramBytesPerTag);
      for (const [tag, s] of sortedEntries(r.images)) add("images", tag, s.droppedSteps, s.shots.length, this.imageBytesPerTag);
      for (const [tag, s] of sortedEntries(r.texts)) add("text", tag, s.droppedSteps, s.points.length, this.textBytesPerTag);
    }
    return out;
  }

  /** The runs with histograms, sorted. */
  histogramRuns(): string[] {
    return this.runsWith((r) => r.histograms.size > 0);
  }

  /** The histogram tags of `run`, sorted. */
  histogramTags(run: string): string[] {
    return sortedKeys(this.byRun.get(run)?.histograms);
  }

  /** One histogram series, or `undefined`. */
  histograms(run: string, tag: string): HistogramSeries | undefined {
    return this.byRun.get(run)?.histograms.get(tag);
  }

  /** The runs with images, sorted. */
  imageRuns(): string[] {
    return this.runsWith((r) => r.images.size > 0);
  }

  /** The image tags of `run`, sorted. */
  imageTags(run: string): string[] {
    return sortedKeys(this.byRun.get(run)?.images);
  }

  /** One image series, or `undefined`. */
  images(run: string, tag: string): ImageSeries | undefined {
    return this.byRun.get(run)?.images.get(tag);
  }

  /** The byte budget of one (run, tag)'s images. */
  get imageBudgetBytes(): number {
    return this.imageBytesPerTag;
  }

  /** The byte budget of one (run, tag)'s histograms. */
  get histogramBudgetBytes(): number {
    return this.histogramBytesPerTag;
  }

  /** The byte budget of one (run, tag)'s text. */
  get textBudgetBytes(): number {
    return this.textBytesPerTag;
  }

  /** The runs with text, sorted. */
  textRuns(): string[] {
    return this.runsWith((r) => r.texts.size > 0);
  }

  /** The text tags of `run`, sorted. */
  textTags(run: string): string[] {
    return sortedKeys(this.byRun.get(run)?.texts);
  }

  /** One text series, or `undefined`. */
  texts(run: string, tag: string): TextSeries | undefined {
    return this.byRun.get(run)?.texts.get(tag);
  }

  /** The runs with checkpoints, sorted. */
  checkpointRuns(): string[] {
    return this.runsWith((r) => r.checkpoints.length > 0);
  }

  /** `run`'s checkpoints by step (empty for a run without any). */
  checkpoints(run: string): readonly CheckpointMark[] {
    return [...(this.byRun.get(run)?.checkpoints ?? [])].sort((a, b) => a.step - b.step);
  }

  private summary(e: HistogramEvent | ImageEvent | TextEvent): Ingested {
    const r = this.run(e.run);
    let purge: Ingested["purge"];
    const changes: ViewChange[] = [];
    if (r.fileVersion === undefined || r.fileVersion < 2) {
      if (e.step < r.mostRecentStep && this.purgeTag(r, e.kind, e.tag, e.step) > 0) purge = { step: e.step, tag: e.tag };
      r.mostRecentStep = e.step;
    }
    let notice: string | undefined;
    if (e.kind === "histogram") {
      const s = getOr(r.histograms, e.tag, () => new HistogramSeries(this.histogramBytesPerTag));
      if (s.append(e.step, e.wallTime, e.left, e.right, e.count) !== undefined) notice = this.thinningNotice("histograms", e.run, e.tag, s, s.length);
      changes.push({ plugin: "histograms", run: e.run, tag: e.tag, count: s.length, lastStep: s.lastStep });
    } else if (e.kind === "image") {
      const s = getOr(r.images, e.tag, () => new ImageSeries(this.imageBytesPerTag));
      const thinned = s.add(e.step, e.wallTime, e.sample, e.encoded, this.imageId);
      if (thinned !== undefined) notice = this.thinningNotice("images", e.run, e.tag, s, s.shots.length);
      changes.push({ plugin: "images", run: e.run, tag: e.tag, count: s.shots.length, lastStep: s.shots.at(-1)?.step ?? null });
    } else {
      const s = getOr(r.texts, e.tag, () => new TextSeries(this.textBytesPerTag));
      const point: TextPoint = { step: e.step, wallTime: e.wallTime, text: e.text, shape: e.shape };
      if (s.add(point) !== undefined) notice = this.thinningNotice("text", e.run, e.tag, s, s.points.length);
      changes.push({ plugin: "text", run: e.run, tag: e.tag, count: s.points.length, lastStep: e.step });
    }
    return { changes, ...(purge === undefined ? {} : { purge }), ...(notice === undefined ? {} : { notice }) };
  }

  /** A later `START` of a versioned run purges every view of the run at its step. */
  private start(run: string, step: number): Ingested {
    const r = this.run(run);
    if (r.fileVersion === undefined || r.fileVersion < 2) return NOTHING;
    if (!r.seenStart) {
      r.seenStart = true;
      return NOTHING;
    }
    const changes: ViewChange[] = [];
    for (const [tag, s] of r.histograms) if (s.purgeFrom(step) > 0) changes.push({ plugin: "histograms", run, tag, count: s.length, lastStep: s.lastStep });
    for (const [tag, s] of r.images) if (s.purgeFrom(step) > 0) changes.push({ plugin: "images", run, tag, count: s.shots.length, lastStep: s.shots.at(-1)?.step ?? null });
    for (const [tag, s] of r.texts) if (s.purgeFrom(step) > 0) changes.push({ plugin: "text", run, tag, count: s.points.length, lastStep: s.points.at(-1)?.step ?? null });
    if (keepWhere(r.checkpoints, (c) => c.step <= step) > 0) changes.push(checkpointChange(run, r));
    return changes.length === 0 ? NOTHING : { changes, purge: { step } };
  }

  private purgeTag(r: RunViews, kind: "histogram" | "image" | "text", tag: string, step: number): number {
    if (kind === "histogram") return r.histograms.get(tag)?.purgeFrom(step) ?? 0;
    if (kind === "image") return r.images.get(tag)?.purgeFrom(step) ?? 0;
    return r.texts.get(tag)?.purgeFrom(step) ?? 0;
  }

  /** The line that reports a thinning (a series thins a handful of times over a run: each is said). */
  private thinningNotice(plugin: "histograms" | "images" | "text", run: string, tag: string, s: ImageSeries | HistogramSeries | TextSeries, kept: number): string {
    const budget = plugin === "images" ? this.imageBytesPerTag : plugin === "histograms" ? this.histogramBytesPerTag : this.textBytesPerTag;
    return `${plugin} of run ${JSON.stringify(run)}, tag ${JSON.stringify(tag)}: over the ${mibText(budget)} MiB kept per tag; ${s.droppedSteps} older steps dropped so far (the steps kept stay evenly spread, the first and the newest always among them), ${kept} kept; raise ${BUDGET_FLAGS[plugin]} (${BUDGET_OPTIONS[plugin]}) to keep more`;
  }

  private runsWith(has: (r: RunViews) => boolean): string[] {
    return [...this.byRun].filter(([, r]) => has(r)).map(([name]) => name).sort();
  }

  private run(name: string): RunViews {
    let r = this.byRun.get(name);
    if (r === undefined) {
      r = { histograms: new Map(), images: new Map(), texts: new Map(), checkpoints: [], fileVersion: undefined, seenStart: false, mostRecentStep: Number.NEGATIVE_INFINITY };
      this.byRun.set(name, r);
    }
    return r;
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const getOr = <V>(map: Map<string, V>, key: string, make: () => V): V => {
  let v = map.get(key);
  if (v === undefined) {
    v = make();
    map.set(key, v);
  }
  return v;
};

const sortedKeys = (map: Map<string, unknown> | undefined): string[] => [...(map?.keys() ?? [])].sort();

const sortedEntries = <V>(map: Map<string, V>): [string, V][] => [...map].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));

const checkpointChange = (run: string, r: RunViews): ViewChange => ({
  plugin: "checkpoints",
  run,
  count: r.checkpoints.length,
  lastStep: r.checkpoints.reduce<number | null>((m, c) => (m === null || c.step > m ? c.step : m), null),
});
