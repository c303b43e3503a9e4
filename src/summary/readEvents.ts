/**
 * `readEvents`: every event of an event file or of a whole logdir as an async iterable of typed
 * events (scalars, histograms, images, text, tensors, session logs), read incrementally by file
 * offset. With `follow`, it keeps watching: appended records, new files and new runs are read
 * as they appear, on a poll of the injected clock, until the signal aborts.
 *
 * Problems never end the iteration: a checksum failure, a record length past `maxRecordBytes`
 * (or past the end of a file read as complete), a record that is not an `Event`, a file named
 * like an event file that is not one, a file or run deleted while read, a symlink out of the
 * logdir: each is yielded once as a {@link ReadIssue} in the stream, and reading goes on. No file
 * can make the reader abort, allocate what a header only claims, or loop on an error.
 *
 * @example
 * ```ts
 * import { readEvents } from "monitored-session/summary";
 *
 * for await (const e of readEvents("runs")) {
 *   if (e.kind === "scalar") console.log(e.run, e.tag, e.step, e.value);
 *   else if (e.kind === "issue") console.warn(e.message);
 * }
 * ```
 *
 * @module
 */

import { type FSWatcher, watch } from "node:fs";
import { stat } from "node:fs/promises";
import { performance } from "node:perf_hooks";
import { type Clock, systemClock } from "../time/Clock.js";
import { InvalidArgumentError, NotFoundError } from "../errors.js";
import { EventDecoder, type ScalarSink, type SummaryEvent } from "./EventDecoder.js";
import { checkedMaxRecordBytes, EventFileTail, type EventFileTailOptions } from "./EventFileTail.js";
import { findRuns } from "./findRuns.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What went wrong, where. Reading goes on after every issue. */
export interface ReadIssue {
  readonly kind: "issue";
  readonly problem:
    | "corruptRecord"
    | "badEvent"
    | "notEventFile"
    | "fileDeleted"
    | "runDeleted"
    | "symlinkOutsideLogdir"
    | "unreadable";
  /** The run concerned (`""` when the issue is about no run). */
  readonly run: string;
  /** The file or directory concerned. */
  readonly path: string;
  /** File offset of the bad record, for record problems. */
  readonly offset: number | undefined;
  readonly message: string;
}

/** What {@link readEvents} yields. */
export type ReadEvent = SummaryEvent | ReadIssue;

/** Options of {@link readEvents}. */
export interface ReadEventsOptions {
  /** Keep watching for appended records, new files and new runs (default `false`: read what is there, then end). */
  readonly follow?: boolean;
  /** Seconds between polls when following (default 1). */
  readonly pollSecs?: number;
  /** Ends a following iteration (at the next poll, or at once while it waits). */
  readonly signal?: AbortSignal;
  /** The clock the poll waits on (default: the system clock; tests pass a `VirtualClock`). */
  readonly clock?: Clock;
  /** Bytes read from a file per system call (default 1 MiB). */
  readonly chunkBytes?: number;
  /**
   * When following, also wake on the file system's change notices (`fs.watch`, recursive:
   * inotify on Linux), so an appended record is read at once rather than at the next poll
   * (default `false`). The poll stays, for file systems without notices (NFS, some container
   * mounts): a missed notice costs at most `pollSecs`.
   */
  readonly watch?: boolean;
  /** Also yield a `tagMetadata` event before each tag's first value: its plugin, display name and description (default `false`). */
  readonly tagMetadata?: boolean;
  /**
   * The most payload bytes a record may claim (default `DEFAULT_MAX_RECORD_BYTES`, 256 MiB; at
   * most 1 GiB). A header claiming more is a `corruptRecord`, reported once and skipped: no file
   * makes the reader allocate more than this. Without `follow`, files are read as complete, so a
   * record that runs past the end of its file is a `corruptRecord` too; with `follow`, it is a
   * writer still writing, and waits for its bytes.
   */
  readonly maxRecordBytes?: number;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * The events of `path`, an event file or a logdir, in order: runs by name, each run's files in
 * lexicographic order, each file's records in file order. The iteration rejects only if `path`
 * does not exist when it starts (`NotFoundError`) and `follow` is off; following, it waits for
 * `path` to appear.
 */
export const readEvents = (path: string, options: ReadEventsOptions = {}): AsyncIterableIterator<ReadEvent> => new EventStream(logdirReader(path, options));

/**
 * The same events as {@link readEvents}, in the same order, a batch at a time: each batch is what
 * one read of a file (`chunkBytes`) or one look at the logdir produced, never empty. For
 * throughput: one `await` per batch instead of one per event (`npm run bench -- reader` measures
 * both ways; see docs/performance.md).
 *
 * @example
 * ```ts
 * import { LogdirScalars, readEventBatches } from "monitored-session/summary";
 *
 * const store = new LogdirScalars();
 * for await (const batch of readEventBatches("runs")) for (const e of batch) store.ingest(e);
 * console.log(`${store.points} points`);
 * ```
 */
export const readEventBatches = (path: string, options: ReadEventsOptions = {}): AsyncIterableIterator<readonly ReadEvent[]> => new BatchStream(logdirReader(path, options));

/** Where {@link readEventsInto} delivers: scalars to `scalar`, everything else to `event`, in stream order. */
export interface EventSink {
  /** Every event that is not a scalar, and every {@link ReadIssue}. */
  readonly event: (event: ReadEvent) => void;
  /** Every scalar, with no event object made for it. */
  readonly scalar: ScalarSink;
}

/**
 * The same events as {@link readEvents}, in the same order, pushed into `sink` as they are read:
 * scalars as plain arguments (no object per point), everything else as events. For a consumer
 * that keeps scalars in columns, such as `LogdirScalars.add` or the board, this is the fastest
 * way to read (`npm run bench -- reader`). Resolves when reading ends: at the end of what is
 * there, or, following, once `signal` aborts. Rejects as {@link readEvents} does, and with
 * whatever the sink throws. The event loop gets a turn at each file read (`chunkBytes`).
 *
 * @example
 * ```ts
 * import { LogdirScalars, readEventsInto } from "monitored-session/summary";
 *
 * const store = new LogdirScalars();
 * await readEventsInto("runs", { event: (e) => store.ingest(e), scalar: (run, tag, step, wallTime, value) => store.add(run, tag, step, wallTime, value) });
 * console.log(`${store.points} points`);
 * ```
 */
export const readEventsInto = async (path: string, sink: EventSink, options: ReadEventsOptions = {}): Promise<void> => {
  const source = logdirReader(path, options);
  // The decoder turns what its callbacks throw into a bad record: a sink's own failure is kept
  // here instead, nothing more reaches the sink, and the reading ends with it.
  let failed: { readonly error: unknown } | undefined;
  const scalar: ScalarSink = (run, tag, step, wallTime, value) => {
    if (failed !== undefined) return;
    try {
      sink.scalar(run, tag, step, wallTime, value);
    } catch (error) {
      failed = { error };
    }
  };
  const out: EventOut = {
    push: (e) => {
      if (failed !== undefined) return;
      try {
        sink.event(e);
      } catch (error) {
        failed = { error };
      }
    },
  };
  try {
    while (await source.fill(out, scalar)) if (failed !== undefined) break;
    if (failed !== undefined) throw failed.error;
  } finally {
    source.close();
  }
};

const logdirReader = (path: string, options: ReadEventsOptions): LogdirReader => {
  const pollSecs = options.pollSecs ?? 1;
  if (!(pollSecs > 0) || !Number.isFinite(pollSecs)) throw new InvalidArgumentError(`pollSecs must be a positive number, got ${pollSecs}`);
  const chunkBytes = options.chunkBytes ?? 1 << 20;
  if (!Number.isSafeInteger(chunkBytes) || chunkBytes <= 0) throw new InvalidArgumentError(`chunkBytes must be a positive integer, got ${chunkBytes}`);
  const tail: EventFileTailOptions = { chunkBytes, maxRecordBytes: checkedMaxRecordBytes(options.maxRecordBytes), growing: options.follow === true };
  return new LogdirReader(path, options.follow ?? false, pollSecs * 1000, options.clock ?? systemClock, tail, options.signal, options.watch === true && options.follow === true, options.tagMetadata === true);
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/**
 * An async iterator over batches that a source fills. Each `next()` on a filled batch is one
 * already-resolved promise; an async generator costs about twice as much per event, which is most
 * of the reader's budget for a scalar.
 */
class EventStream implements AsyncIterableIterator<ReadEvent> {
  private batch: ReadEvent[] = [];
  private at = 0;
  private ended = false;

  constructor(private readonly source: LogdirReader) {}

  [Symbol.asyncIterator](): AsyncIterableIterator<ReadEvent> {
    return this;
  }

  next(): Promise<IteratorResult<ReadEvent, undefined>> {
    if (this.at < this.batch.length) return Promise.resolve({ done: false, value: this.batch[this.at++] as ReadEvent });
    return this.refill();
  }

  return(): Promise<IteratorResult<ReadEvent, undefined>> {
    this.ended = true;
    this.batch = [];
    this.source.close();
    return Promise.resolve({ done: true, value: undefined });
  }

  private async refill(): Promise<IteratorResult<ReadEvent, undefined>> {
    for (;;) {
      if (this.ended) return { done: true, value: undefined };
      const batch: ReadEvent[] = [];
      const more = await this.source.fill(batch);
      this.batch = batch;
      this.at = 0;
      if (batch.length > 0) return { done: false, value: batch[this.at++] as ReadEvent };
      if (!more) {
        this.ended = true;
        this.source.close();
      }
    }
  }
}

/** The shortest time between two discoveries woken by change notices, ms. */
const MIN_DISCOVERY_GAP_MS = 50;

/** The reader's batches as they come (see {@link readEventBatches}). */
class BatchStream implements AsyncIterableIterator<readonly ReadEvent[]> {
  private ended = false;

  constructor(private readonly source: LogdirReader) {}

  [Symbol.asyncIterator](): AsyncIterableIterator<readonly ReadEvent[]> {
    return this;
  }

  async next(): Promise<IteratorResult<readonly ReadEvent[], undefined>> {
    for (;;) {
      if (this.ended) return { done: true, value: undefined };
      const batch: ReadEvent[] = [];
      const more = await this.source.fill(batch);
      if (!more) {
        this.ended = true;
        this.source.close();
      }
      if (batch.length > 0) return { done: false, value: batch };
    }
  }

  return(): Promise<IteratorResult<readonly ReadEvent[], undefined>> {
    this.ended = true;
    this.source.close();
    return Promise.resolve({ done: true, value: undefined });
  }
}

/** Where the reader puts events: a batch (an array), or a sink's `event`. */
interface EventOut {
  push(event: ReadEvent): void;
}

interface RunState {
  readonly decoder: EventDecoder;
  readonly tails: Map<string, EventFileTail>;
}

/** The poll loop: discovers runs and files, then reads each file's new bytes, a chunk per fill. */
class LogdirReader {
  private readonly runs = new Map<string, RunState>();
  /** Issues already reported for a path (a symlink out of the logdir is seen at every poll). */
  private readonly reported = new Set<string>();
  private queue: { run: string; state: RunState; tail: EventFileTail }[] = [];
  private polls = 0;
  /** The change watch, while following with `watch` (undefined: not started, or not available here). */
  private watcher: FSWatcher | undefined;
  /** A change was noticed since the last discovery. */
  private changed = false;
  /** Ends the current wait between polls early (a change notice). */
  private wake: (() => void) | undefined;
  private closed = false;
  private lastDiscoveryMs = 0;

  constructor(
    private readonly path: string,
    private readonly follow: boolean,
    private readonly pollMs: number,
    private readonly clock: Clock,
    /** How each file is read: chunk size, record size limit, and whether files may grow. */
    private readonly tailOptions: EventFileTailOptions,
    private readonly signal: AbortSignal | undefined,
    private readonly watchChanges: boolean = false,
    private readonly tagMetadata: boolean = false,
  ) {
    signal?.addEventListener("abort", () => this.close(), { once: true });
  }

  /** Stops the change watch (the iteration ended or was aborted). */
  close(): void {
    this.closed = true;
    this.watcher?.close();
    this.watcher = undefined;
    this.wake?.();
  }

  /** Adds the next events to `out`; resolves `false` once there is nothing more to come. */
  async fill(out: EventOut, scalar?: ScalarSink): Promise<boolean> {
    if (this.signal?.aborted === true) return false;
    const item = this.queue[0];
    if (item !== undefined) {
      await this.readChunk(item.run, item.state, item.tail, out, scalar);
      return true;
    }
    if (this.polls > 0) {
      if (!this.follow) return false;
      this.startWatch();
      if (!this.changed) await this.untilChangeOrPoll();
      // Woken by a notice: a writer that flushes often must not make discovery run back to back.
      // (Real time, not the injected clock: this bounds CPU use, and a notice is a real event.)
      const gapMs = this.lastDiscoveryMs + MIN_DISCOVERY_GAP_MS - performance.now();
      if (this.changed && gapMs > 0) await this.realPause(gapMs);
      this.changed = false;
      if (this.aborted() || this.closed) return false;
    }
    this.polls++;
    this.lastDiscoveryMs = performance.now();
    await this.discover(out);
    return true;
  }

  /**
   * Waits `pollMs` on the clock, or less when the watch notices a change (the notice aborts the
   * sleep). Always a `clock.sleep`: a caller's clock sees every wait (the board takes the first
   * one for "caught up").
   */
  private async untilChangeOrPoll(): Promise<void> {
    const wake = new AbortController();
    const onAbort = (): void => wake.abort();
    this.signal?.addEventListener("abort", onAbort, { once: true });
    this.wake = onAbort;
    try {
      await this.clock.sleep(this.pollMs, wake.signal);
    } finally {
      this.wake = undefined;
      this.signal?.removeEventListener("abort", onAbort);
    }
  }

  /** Waits `ms` of real time (at most the discovery gap), or until the signal aborts. */
  private realPause(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.signal?.removeEventListener("abort", done);
        resolve();
      };
      // Not unref'd: an unref'd timer as the only thing pending lets the process end mid-await.
      const timer = setTimeout(done, ms);
      this.signal?.addEventListener("abort", done, { once: true });
    });
  }

  /** Starts the recursive change watch once `path` exists; without notices here, the poll alone goes on. */
  private startWatch(): void {
    if (!this.watchChanges || this.watcher !== undefined || this.closed) return;
    try {
      const watcher = watch(this.path, { recursive: true, persistent: false }, () => {
        this.changed = true;
        this.wake?.();
      });
      watcher.on("error", () => {
        // The watched directory went away (or the watch broke): poll until it can start again.
        watcher.close();
        if (this.watcher === watcher) this.watcher = undefined;
      });
      this.watcher = watcher;
    } catch {
      // Not there yet (ENOENT), or no notices on this file system: the poll finds it.
    }
  }

  private aborted(): boolean {
    return this.signal?.aborted === true;
  }

  private async readChunk(run: string, state: RunState, tail: EventFileTail, out: EventOut, scalar: ScalarSink | undefined): Promise<void> {
    const emit = (e: SummaryEvent): void => {
      out.push(e);
    };
    try {
      const r = await tail.read((payload, offset) => {
        try {
          state.decoder.decode(payload, emit, scalar);
        } catch (e) {
          out.push(issue("badEvent", run, tail.path, offset, `${tail.path}: record at offset ${offset}: ${(e as Error).message}; skipped`));
        }
      }, this.tailOptions.chunkBytes);
      for (const i of r.issues) out.push(issue(i.problem, run, tail.path, i.offset, i.message));
      if (r.atEnd) this.queue.shift();
    } catch (e) {
      this.queue.shift();
      if ((e as NodeJS.ErrnoException).code === "ENOENT") {
        state.tails.delete(tail.path);
        out.push(issue("fileDeleted", run, tail.path, undefined, `${tail.path}: deleted while read`));
        return;
      }
      // Any other failure keeps the tail where it is (the next poll retries from there, never
      // from the start) and is reported once, not at each poll.
      const reported = this.once(issue("unreadable", run, tail.path, undefined, `${tail.path}: ${String(e)}`));
      if (reported !== undefined) out.push(reported);
    }
  }

  /** Finds the runs and files as they are now, reports what vanished, and queues every live file. */
  private async discover(out: EventOut): Promise<void> {
    let found: { run: string; files: readonly string[] }[];
    try {
      found = await this.find(out);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (this.polls === 1 && !this.follow && code === "ENOENT") throw new NotFoundError(`${this.path}: no such file or directory`);
      const reported = code === "ENOENT" ? undefined : this.once(issue("unreadable", "", this.path, undefined, `${this.path}: ${String(e)}`));
      if (reported !== undefined) out.push(reported);
      found = [];
    }
    const seen = new Set<string>();
    for (const { run, files } of found) {
      seen.add(run);
      let state = this.runs.get(run);
      if (state === undefined) {
        state = { decoder: new EventDecoder(run, { tagMetadata: this.tagMetadata }), tails: new Map() };
        this.runs.set(run, state);
      }
      for (const file of files) {
        let tail = state.tails.get(file);
        if (tail === undefined) {
          tail = new EventFileTail(file, this.tailOptions);
          state.tails.set(file, tail);
        }
        if (!tail.dead) this.queue.push({ run, state, tail });
      }
      for (const file of [...state.tails.keys()]) {
        if (files.includes(file)) continue;
        state.tails.delete(file);
        out.push(issue("fileDeleted", run, file, undefined, `${file}: deleted while read`));
      }
    }
    for (const [run] of this.runs) {
      if (seen.has(run)) continue;
      this.runs.delete(run);
      out.push(issue("runDeleted", run, run, undefined, `run ${run}: its event files are gone (deleted while read)`));
    }
  }

  private async find(out: EventOut): Promise<{ run: string; files: readonly string[] }[]> {
    const s = await stat(this.path);
    if (!s.isDirectory()) return [{ run: ".", files: [this.path] }];
    const { runs, issues } = await findRuns(this.path);
    for (const i of issues) {
      const reported = this.once(issue(i.problem, "", i.path, undefined, i.message));
      if (reported !== undefined) out.push(reported);
    }
    return [...runs];
  }

  private once(i: ReadIssue): ReadIssue | undefined {
    const key = `${i.problem}\0${i.path}`;
    if (this.reported.has(key)) return undefined;
    this.reported.add(key);
    return i;
  }
}

const issue = (problem: ReadIssue["problem"], run: string, path: string, offset: number | undefined, message: string): ReadIssue => ({
  kind: "issue",
  problem,
  run,
  path,
  offset,
  message,
});
