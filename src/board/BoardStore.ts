/**
 * `BoardStore`: what the board serves, kept up to date. It reads a logdir with the project's
 * reader (`readEvents` in follow mode) into a `LogdirScalars` (every point, TensorBoard's
 * restart purges) and a {@link ViewStore} (histograms, images, text, checkpoints, with the same
 * purges), notes each run's first-event time (TensorBoard orders runs by it), and announces what
 * changed on {@link BoardStore.updates$}: at most one {@link BoardUpdate} per `throttleMs`,
 * naming the series that grew, the runs that appeared or went, and the purges of a restart's
 * `SessionLog START`.
 *
 * Loading is streamed on the main thread, never in one block: the reader (`readEventsInto`, which
 * hands scalars over with no event object per point) gives the event loop a turn at each file
 * read (256 KiB, a few milliseconds of decoding), so requests are answered while a large logdir
 * loads.
 *
 * @module
 */

import { Subject, type Observable } from "rxjs";

import { type Clock, systemClock, type TimerHandle } from "../time/Clock.js";
import { LogdirScalars, type ReadEvent, readEventsInto, type ReadIssue, type ScalarSeries } from "../summary/index.js";
import { type Ingested, type ViewBudgets, type ViewChange, ViewStore } from "./ViewStore.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A series that changed: its length and last step now. */
export interface SeriesChange {
  readonly run: string;
  readonly tag: string;
  readonly points: number;
  readonly lastStep: number | null;
}

/** A restart's purge: every point of `run` at step >= `step` was removed (or of `tag` only). */
export interface Purge {
  readonly run: string;
  readonly step: number;
  /** The one tag purged (a file without a version purges per tag); absent: every tag of the run. */
  readonly tag?: string;
}

/** What changed since the last update. */
export interface BoardUpdate {
  /** The runs in `/data/runs` order, when the list changed. */
  readonly runs: readonly string[] | undefined;
  readonly purges: readonly Purge[];
  readonly series: readonly SeriesChange[];
  /** `true` on the update that ends the first full read of the logdir. */
  readonly loaded: boolean;
  /** Histogram, image, text and checkpoint series that grew (or were purged): refetch them. */
  readonly views: readonly ViewChange[];
}

/** Options of {@link BoardStore}. */
export interface BoardStoreOptions extends ViewBudgets {
  /** Keep reading new data (default `true`); `false` reads what is there once. */
  readonly follow?: boolean;
  /** Seconds between polls of the logdir (default 0.5). */
  readonly pollSecs?: number;
  /**
   * Also read at once on the file system's change notices (`readEvents`' `watch`), so a flushed
   * scalar reaches the page without waiting for the poll. Default: on with the system clock, off
   * with any other clock (a test's `VirtualClock` decides when reads happen).
   */
  readonly watch?: boolean;
  /** Shortest time between two updates, in ms (default 100). */
  readonly throttleMs?: number;
  /** Time for polls, throttling and yields (default: the system clock; tests pass a `VirtualClock`). */
  readonly clock?: Clock;
  /** Image bytes kept per (run, tag) before older steps are thinned out (default 32 MiB; see `ImageSeries`). */
  readonly imageBytesPerTag?: number;
  /** The most payload bytes a record may claim (`readEvents`' `maxRecordBytes`; default 256 MiB): a header claiming more is reported on {@link BoardStore.issues$} and skipped. */
  readonly maxRecordBytes?: number;
}

/** The scalars of a logdir, loaded in the background and followed. */
export class BoardStore {
  /** The logdir (or event file) read. */
  readonly logdir: string;
  /** Resolves once the logdir has been read through once (or reading stopped on an error, reported on {@link issues$}). */
  readonly loaded: Promise<void>;
  private readonly scalars = new LogdirScalars();
  /** Histograms, images, text and checkpoints. */
  readonly views: ViewStore;
  private readonly notes = new Subject<string>();
  private viewsDirty = new Map<string, ViewChange>();
  private readonly firstEventSecs = new Map<string, number>();
  private readonly updates = new Subject<BoardUpdate>();
  private readonly problems = new Subject<ReadIssue>();
  private readonly abort = new AbortController();
  private readonly clock: Clock;
  private readonly throttleMs: number;
  private readonly loop: Promise<void>;
  private resolveLoaded!: () => void;
  private isLoaded = false;
  private runsChanged = false;
  private loadedPending = false;
  private purges: Purge[] = [];
  /** The scalar series that grew or were purged since the last update, by run. */
  private dirty = new Map<string, Set<string>>();
  private timer: TimerHandle | undefined;
  /** Changes when points are removed (a purge, a deleted run); between changes a series only grows. */
  private epoch = 0;
  /** Changes with every tag metadata seen. */
  private metaVersion = 0;
  /** Each run's tags' display names and descriptions. */
  private readonly tagMeta = new Map<string, Map<string, { readonly displayName: string; readonly description: string }>>();
  /** When the last update went out (clock ms; −∞: none yet). */
  private lastFlushMs = Number.NEGATIVE_INFINITY;

  constructor(logdir: string, options: BoardStoreOptions = {}) {
    this.logdir = logdir;
    this.clock = options.clock ?? systemClock;
    this.throttleMs = options.throttleMs ?? 100;
    this.views = new ViewStore(options);
    this.loaded = new Promise<void>((resolve) => {
      this.resolveLoaded = resolve;
    });
    // The reader sleeps on the clock (a change notice may cut the sleep short) only once every
    // file is read to its end: that is "caught up".
    const clock = this.clock;
    const pollClock: Clock = {
      now: () => clock.now(),
      setTimer: (ms, fn) => clock.setTimer(ms, fn),
      sleep: (ms, signal) => {
        this.caughtUp();
        return clock.sleep(ms, signal);
      },
    };
    const watch = options.watch ?? this.clock === systemClock;
    const reading = readEventsInto(
      logdir,
      { event: (e) => this.ingest(e), scalar: (run, tag, step, wallTime, value) => this.scalar(run, tag, step, wallTime, value) },
      {
        follow: options.follow ?? true,
        pollSecs: options.pollSecs ?? 0.5,
        watch,
        tagMetadata: true,
        clock: pollClock,
        signal: this.abort.signal,
        chunkBytes: READ_CHUNK_BYTES,
        ...(options.maxRecordBytes === undefined ? {} : { maxRecordBytes: options.maxRecordBytes }),
      },
    );
    // The reader reports problems as issues; anything it throws ends the reading, and is reported too.
    this.loop = reading.then(
      () => this.caughtUp(),
      (e: unknown) => {
        this.problems.next({ kind: "issue", problem: "unreadable", run: "", path: logdir, offset: undefined, message: `${logdir}: reading stopped: ${e instanceof Error ? e.message : String(e)}` });
        this.caughtUp();
      },
    );
  }

  /** Updates, throttled; completes on {@link close}. */
  get updates$(): Observable<BoardUpdate> {
    return this.updates.asObservable();
  }

  /** What the reader reported (bad checksums, non-event files, deleted runs...); reading goes on. */
  get issues$(): Observable<ReadIssue> {
    return this.problems.asObservable();
  }

  /** What the store itself reports: histograms, images or text thinned out to stay within their byte budget. */
  get notices$(): Observable<string> {
    return this.notes.asObservable();
  }

  /** Whether the logdir has been read through once. */
  get isFullyLoaded(): boolean {
    return this.isLoaded;
  }

  /** Every run (a directory with event files that hold events), by first-event time, then by name. */
  runs(): string[] {
    return [...this.firstEventSecs.keys()].sort((a, b) => (this.firstEventSecs.get(a) as number) - (this.firstEventSecs.get(b) as number) || (a < b ? -1 : a > b ? 1 : 0));
  }

  /** The runs with scalars, sorted by name. */
  scalarRuns(): string[] {
    return this.scalars.runs();
  }

  /**
   * A tag's display name and description, from its first value's metadata (TensorBoard's rule:
   * a TF1 value without a display name shows its tag); empty strings for a tag not seen.
   */
  tagInfo(run: string, tag: string): { readonly displayName: string; readonly description: string } {
    return this.tagMeta.get(run)?.get(tag) ?? NO_TAG_INFO;
  }

  /**
   * A number that changes whenever scalar points are removed (a restart's purge, a deleted run).
   * Between two changes every series only grows, so (epoch, run, tag, length) names its content.
   */
  get scalarEpoch(): number {
    return this.epoch;
  }

  /**
   * A name for the runs' scalar tags and their metadata as they are now: it changes whenever a
   * series appears, a run is deleted, points are purged, or a tag's metadata arrives. Equal
   * versions, equal answers of `/data/plugin/scalars/tags`.
   */
  get tagsVersion(): string {
    return `${this.epoch}.${this.scalars.seriesCreated}.${this.metaVersion}`;
  }

  /** The scalar tags of `run`, sorted. */
  scalarTags(run: string): string[] {
    return this.scalars.tags(run);
  }

  /** One scalar series, every point, or `undefined`. */
  series(run: string, tag: string): ScalarSeries | undefined {
    return this.scalars.series(run, tag);
  }

  /** Stops reading, completes the streams. */
  async close(): Promise<void> {
    this.abort.abort();
    await this.loop;
    this.timer?.cancel();
    this.timer = undefined;
    this.updates.complete();
    this.problems.complete();
    this.notes.complete();
  }

  /** One scalar: appended to its series, which is marked for the next update. */
  private scalar(run: string, tag: string, step: number, wallTime: number, value: number): void {
    if (!this.firstEventSecs.has(run)) {
      this.firstEventSecs.set(run, wallTime);
      this.changed();
    }
    if (this.scalars.add(run, tag, step, wallTime, value) > 0) {
      this.purges.push({ run, step, tag });
      this.epoch++;
    }
    this.markDirty(run, tag);
  }

  private ingest(e: ReadEvent): void {
    if (e.kind === "issue") {
      this.scalars.ingest(e);
      this.views.ingest(e);
      if (e.problem === "runDeleted") {
        this.tagMeta.delete(e.run);
        this.epoch++;
      }
      if (e.problem === "runDeleted" && this.firstEventSecs.delete(e.run)) this.changed();
      this.problems.next(e);
      return;
    }
    if (!this.firstEventSecs.has(e.run)) {
      this.firstEventSecs.set(e.run, e.wallTime);
      this.changed();
    }
    if (e.kind === "tagMetadata") {
      let tags = this.tagMeta.get(e.run);
      if (tags === undefined) this.tagMeta.set(e.run, (tags = new Map()));
      tags.set(e.tag, { displayName: e.displayName, description: e.description });
      this.metaVersion++;
      return;
    }
    if (e.kind === "scalar") {
      this.scalar(e.run, e.tag, e.step, e.wallTime, e.value);    } else if (e.kind === "sessionLog" && e.status === "START") {
      const before = this.runPoints(e.run);
      this.scalars.ingest(e);
      const viewed = this.views.ingest(e);
      const scalarsPurged = this.runPoints(e.run) < before;
      if (scalarsPurged) this.epoch++;
      if (scalarsPurged || viewed.purge !== undefined) {
        this.purges.push({ run: e.run, step: e.step });
        if (scalarsPurged) for (const tag of this.scalars.tags(e.run)) this.markDirty(e.run, tag);
        this.viewed({ changes: viewed.changes });
      }
    } else {
      this.scalars.ingest(e);
      this.viewed(this.views.ingest(e));
    }
  }

  /**
   * Marks a scalar series for the next update. The run and tag strings are the reader's own, the
   * same objects at every point: their hashes are cached, so these lookups cost less than one
   * key string built per point.
   */
  private markDirty(run: string, tag: string): void {
    let tags = this.dirty.get(run);
    if (tags === undefined) this.dirty.set(run, (tags = new Set()));
    tags.add(tag);
    this.schedule();
  }

  private viewed(i: Ingested): void {
    if (i.notice !== undefined) this.notes.next(i.notice);
    if (i.changes.length === 0) return;
    const first = i.changes[0] as ViewChange;
    if (i.purge !== undefined) this.purges.push({ run: first.run, step: i.purge.step, ...(i.purge.tag === undefined ? {} : { tag: i.purge.tag }) });
    for (const c of i.changes) this.viewsDirty.set(`${c.plugin}\0${c.run}\0${c.tag ?? ""}`, c);
    this.schedule();
  }

  private runPoints(run: string): number {
    let n = 0;
    for (const tag of this.scalars.tags(run)) n += this.scalars.series(run, tag)?.length ?? 0;
    return n;
  }

  private changed(): void {
    this.runsChanged = true;
    this.schedule();
  }

  private caughtUp(): void {
    if (this.isLoaded) return;
    this.isLoaded = true;
    this.loadedPending = true;
    this.resolveLoaded();
    this.flush();
  }

  /**
   * An update goes out `throttleMs` after the previous one, or at the next turn of the event loop
   * when the previous one is older than that (what one read brought in goes out together).
   */
  private schedule(): void {
    if (this.timer !== undefined || this.updates.closed) return;
    // While the logdir is first read, every series changes all the time: pages that refetch on
    // each update would make the server redo their charts five times as often for nothing.
    const throttleMs = this.isLoaded ? this.throttleMs : Math.max(this.throttleMs, LOADING_THROTTLE_MS);
    const waitMs = Math.max(0, this.lastFlushMs + throttleMs - this.clock.now());
    this.timer = this.clock.setTimer(waitMs, () => this.flush());
  }

  private flush(): void {
    this.timer?.cancel();
    this.timer = undefined;
    if (!this.runsChanged && !this.loadedPending && this.purges.length === 0 && this.dirty.size === 0 && this.viewsDirty.size === 0) return;
    const series: SeriesChange[] = [];
    for (const [run, tags] of this.dirty) {
      for (const tag of tags) {
        const s = this.scalars.series(run, tag);
        if (s === undefined) continue; // its run was deleted since
        series.push({ run, tag, points: s.length, lastStep: s.length > 0 ? (s.steps[s.length - 1] as number) : null });
      }
    }
    const update: BoardUpdate = { runs: this.runsChanged ? this.runs() : undefined, purges: this.purges, series, loaded: this.loadedPending, views: [...this.viewsDirty.values()] };
    this.viewsDirty = new Map();
    this.runsChanged = false;
    this.loadedPending = false;
    this.purges = [];
    this.dirty = new Map();
    this.lastFlushMs = this.clock.now();
    this.updates.next(update);
  }
}

const NO_TAG_INFO = Object.freeze({ displayName: "", description: "" });

/** Bytes per file read: about 4,000 scalar events, a few milliseconds between event-loop turns. */
const READ_CHUNK_BYTES = 256 * 1024;

/** Shortest time between two updates while the logdir is first read, ms. */
const LOADING_THROTTLE_MS = 500;
