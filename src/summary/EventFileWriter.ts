/**
 * The file side of TensorBoard summaries: creates a new event file in a log directory, frames
 * and queues records, and writes them from a single in-order background writer so the caller
 * never waits for the disk. The equivalent of TensorBoard's Python `EventFileWriter` and TF's
 * `EventsWriter`; `SummaryWriter` builds the summaries on top of it.
 *
 * Guarantees:
 * - A writer always creates a new file (exclusive create), never appends to an existing one:
 *   a file left by a crashed process keeps its truncated tail at the end, where readers expect it.
 * - Records are handed to the file system whole, in order, several per write call; a record is
 *   never split across calls, so a crash can only leave a truncated last record.
 * - `flush()` resolves once everything added before it is written and fsynced.
 * - A background write error is never lost: it is emitted on `errors$` (and `onError`), logged,
 *   and every later `flush()`/`close()` rejects with it.
 *
 * @module
 */

import { constants as fsConstants, close, fsync, mkdirSync, openSync, write } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { BinaryWriter } from "@bufbuild/protobuf/wire";
import * as t from "io-ts";
import { type Observable, Subject } from "rxjs";
import { type Clock, systemClock, type TimerHandle } from "../time/Clock.js";
import { decodeOrThrow, PositiveInt, PositiveNumber } from "../codec.js";
import { InvalidArgumentError, RuntimeError, UnknownError } from "../errors.js";
import { withPath } from "../util/fsErrors.js";
import { defaultLogger, type Logger } from "../Logger.js";
import { type EventProto, writeEvent } from "./EventProto.js";
import { RecordBuffer } from "./recordWriter.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link EventFileWriter} (and of `SummaryWriter`). */
export interface EventFileWriterOptions {
  /**
   * Records kept in memory before a background write starts (default 10, as in TensorFlow).
   * The write does not fsync; `flush()`, the `flushSecs` timer and `close()` do.
   */
  readonly maxQueue?: number;
  /** Seconds between automatic flushes (write + fsync), default 120. */
  readonly flushSecs?: number;
  /** Appended to the file name, e.g. `".v2"` (default none). */
  readonly filenameSuffix?: string;
  /** The source of time for `wall_time`, the file name and the flush timer (default: system). */
  readonly clock?: Clock;
  /** Where write errors are logged (default: the console logger). */
  readonly logger?: Logger;
  /** Called with each background write error, in addition to `errors$`. */
  readonly onError?: (error: Error) => void;
}

/** What one completed flush made durable. */
export interface FlushInfo {
  /** Records written and fsynced by this flush. */
  readonly records: number;
  /** Bytes written and fsynced by this flush. */
  readonly bytes: number;
}

/** The `file_version` every event file starts with. */
const FILE_VERSION = "brain.Event:2";

/**
 * Writes one event file. Methods that add records are synchronous and never wait for I/O.
 *
 * @example
 * ```ts
 * import { EventFileWriter, scalarValue } from "monitored-session/summary";
 *
 * const w = new EventFileWriter("runs/exp1");
 * w.addEvent({ wallTime: Date.now() / 1000, step: 1, summary: { value: [scalarValue("loss", 0.5)] } });
 * await w.close();
 * ```
 */
export class EventFileWriter {
  /** The log directory (the TensorBoard run). */
  readonly logdir: string;
  /** The path of the event file this writer created. */
  readonly path: string;
  /** Background write errors, as they happen. Completes on close. */
  readonly errors$: Observable<Error>;
  /** One value per flush that made records durable. Completes on close. */
  readonly flushed$: Observable<FlushInfo>;
  /** The writer's clock (used by `SummaryWriter` for `wall_time`). */
  readonly clock: Clock;

  private readonly maxQueue: number;
  private readonly flushMs: number;
  private readonly logger: Logger;
  private readonly onError: ((error: Error) => void) | undefined;
  private readonly errorsSubject = new Subject<Error>();
  private readonly flushedSubject = new Subject<FlushInfo>();
  private readonly proto = new BinaryWriter();
  private readonly fd: number;
  private buffer = new RecordBuffer();
  /** The tail of the chain of file operations; each link runs after the previous one. */
  private tail: Promise<void> = Promise.resolve();
  private writeScheduled = false;
  private unsynced = { records: 0, bytes: 0 };
  private failure: Error | undefined;
  private timer: TimerHandle | undefined;
  private closing: Promise<void> | undefined;

  /**
   * Creates the log directory if needed and a new event file in it, then writes and flushes
   * the `file_version` record. Throws `InvalidArgumentError` for invalid options, and the file
   * system's error if the file cannot be created.
   */
  constructor(logdir: string, options: EventFileWriterOptions = {}) {
    const o = decodeOptions(options);
    if (typeof logdir !== "string" || logdir === "") {
      throw new InvalidArgumentError("logdir must be a non-empty string");
    }
    if (o.filenameSuffix.includes("/") || o.filenameSuffix.includes("\\")) {
      throw new InvalidArgumentError(`filenameSuffix must not contain a path separator, got ${JSON.stringify(o.filenameSuffix)}`);
    }
    this.logdir = logdir;
    this.clock = options.clock ?? systemClock;
    this.logger = options.logger ?? defaultLogger;
    this.onError = options.onError;
    this.maxQueue = o.maxQueue;
    this.flushMs = o.flushSecs * 1000;
    this.errors$ = this.errorsSubject.asObservable();
    this.flushed$ = this.flushedSubject.asObservable();
    mkdirSync(logdir, { recursive: true });
    const { fd, path } = createEventFile(logdir, Math.floor(this.clock.now() / 1000), o.filenameSuffix);
    this.fd = fd;
    this.path = path;
    this.addEvent({ wallTime: this.clock.now() / 1000, fileVersion: FILE_VERSION });
    void this.flushInBackground();
    this.armTimer();
  }

  /** `true` once `close()` was called. */
  get closed(): boolean {
    return this.closing !== undefined;
  }

  /** Records queued in memory, not yet handed to the file system. */
  get pendingRecords(): number {
    return this.buffer.records;
  }

  /** The first background write error, if any. The writer drops records after it. */
  get error(): Error | undefined {
    return this.failure;
  }

  /**
   * Encodes, frames and queues an event. Throws at once for an invalid event (e.g. a step that
   * is not an integer) or a closed writer; never waits for I/O.
   */
  addEvent(event: EventProto): void {
    this.addEncoded((w) => writeEvent(w, event));
  }

  /**
   * Queues an event that `encode` writes into the writer's protobuf buffer (for hot paths that
   * encode without building an {@link EventProto}).
   */
  addEncoded(encode: (w: BinaryWriter) => void): void {
    this.checkOpen();
    try {
      encode(this.proto);
    } catch (e) {
      this.proto.finish(); // drop the half-encoded event so it cannot prefix the next one
      throw e;
    }
    this.addRecord(this.proto.finish());
  }

  /** Frames and queues an already serialized `Event`. */
  addRecord(payload: Uint8Array): void {
    this.checkOpen();
    this.buffer.append(payload);
    if (this.buffer.records >= this.maxQueue && !this.writeScheduled) {
      this.writeScheduled = true;
      void this.enqueue(() => this.writePending());
    }
  }

  /**
   * Writes every queued record and fsyncs the file. Resolves when they are durable; rejects
   * with the write error if any background write failed. After `close()`, resolves at once
   * (or rejects with the error).
   */
  async flush(): Promise<void> {
    if (this.closing !== undefined) {
      await this.closing;
      return;
    }
    await this.flushInBackground();
    if (this.failure !== undefined) throw this.failure;
  }

  /**
   * Flushes, closes the file and stops the timer. Idempotent: later calls return the same
   * promise. Rejects with the write error if any background write failed.
   */
  close(): Promise<void> {
    if (this.closing === undefined) {
      this.timer?.cancel();
      this.timer = undefined;
      const done = this.enqueue(async () => {
        try {
          await this.writePending();
          await this.syncFile();
        } finally {
          await new Promise<void>((resolve) => close(this.fd, () => resolve()));
        }
      });
      this.closing = done.then(() => {
        this.errorsSubject.complete();
        this.flushedSubject.complete();
        if (this.failure !== undefined) throw this.failure;
      });
    }
    return this.closing;
  }

  private checkOpen(): void {
    if (this.closing !== undefined) throw new RuntimeError(`event file writer for ${this.path} is closed`);
  }

  private flushInBackground(): Promise<void> {
    return this.enqueue(async () => {
      await this.writePending();
      await this.syncFile();
    });
  }

  /** Runs `op` after every operation queued before it. The returned promise never rejects. */
  private enqueue(op: () => Promise<void>): Promise<void> {
    const next = this.tail.then(op).catch((e: unknown) => this.fail(e));
    this.tail = next;
    return next;
  }

  private armTimer(): void {
    this.timer = this.clock.setTimer(this.flushMs, () => {
      if (this.closing !== undefined) return;
      this.armTimer();
      void this.flushInBackground();
    });
  }

  private async writePending(): Promise<void> {
    this.writeScheduled = false;
    const records = this.buffer.records;
    const bytes = this.buffer.take();
    if (bytes.length === 0 || this.failure !== undefined) return;
    await writeFully(this.fd, bytes);
    this.unsynced = { records: this.unsynced.records + records, bytes: this.unsynced.bytes + bytes.length };
  }

  private async syncFile(): Promise<void> {
    if (this.failure !== undefined || this.unsynced.records === 0) return;
    const info = this.unsynced;
    await new Promise<void>((resolve, reject) => fsync(this.fd, (e) => (e === null ? resolve() : reject(e))));
    this.unsynced = { records: 0, bytes: 0 };
    this.flushedSubject.next(info);
  }

  private fail(e: unknown): void {
    if (this.failure !== undefined) return;
    const cause = e instanceof Error ? (withPath(e, this.path) as Error) : new Error(String(e));
    const error = new UnknownError(`writing event file ${this.path} failed: ${cause.message}`, { cause });
    this.failure = error;
    this.logger.error("event file write failed; later events to this file are dropped", {
      path: this.path,
      error: cause.message,
    });
    this.errorsSubject.next(error);
    try {
      this.onError?.(error);
    } catch (callbackError) {
      this.logger.error("onError callback threw", { error: String(callbackError) });
    }
  }
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * The event file name for `seconds` (epoch): `events.out.tfevents.<10-digit seconds>.<host>.
 * <pid>.<counter><suffix>`, as TensorBoard's own writer names files. The zero-padded time keeps
 * lexicographic order chronological; pid and counter keep concurrent writers apart.
 */
export const eventFileName = (
  seconds: number,
  host: string = hostname(),
  pid: number = process.pid,
  counter = 0,
  suffix = "",
): string => `events.out.tfevents.${String(Math.floor(seconds)).padStart(10, "0")}.${host}.${pid}.${counter}${suffix}`;

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** Process-wide, so two writers created in the same second get different names. */
let fileCounter = 0;
const MAX_NAME_ATTEMPTS = 1000;

const createEventFile = (logdir: string, seconds: number, suffix: string): { fd: number; path: string } => {
  const host = hostname();
  for (let attempt = 0; attempt < MAX_NAME_ATTEMPTS; attempt++) {
    const path = join(logdir, eventFileName(seconds, host, process.pid, fileCounter++, suffix));
    try {
      // O_EXCL: never append to a file someone else (or a crashed run) left behind.
      const flags = fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL;
      return { fd: openSync(path, flags, 0o644), path };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    }
  }
  throw new RuntimeError(`could not find a free event file name in ${logdir}`);
};

const writeFully = async (fd: number, bytes: Uint8Array): Promise<void> => {
  let off = 0;
  while (off < bytes.length) {
    off += await new Promise<number>((resolve, reject) =>
      write(fd, bytes, off, bytes.length - off, null, (e, n) => (e === null ? resolve(n) : reject(e))),
    );
  }
};

/** The data options (the others are objects: clock, logger, callback). */
const OptionsCodec = t.partial({ maxQueue: PositiveInt, flushSecs: PositiveNumber, filenameSuffix: t.string });

/** Decodes the data options at the boundary, with their defaults; every problem is listed with its path. */
const decodeOptions = (options: EventFileWriterOptions): { maxQueue: number; flushSecs: number; filenameSuffix: string } => {
  const o = decodeOrThrow(OptionsCodec, options, (problems) => new InvalidArgumentError(`invalid summary writer options: ${problems}`));
  return { maxQueue: o.maxQueue ?? 10, flushSecs: o.flushSecs ?? 120, filenameSuffix: o.filenameSuffix ?? "" };
};
