/**
 * The goodput log: what each task of a run appends about where its time went, one JSON object a
 * line, in `<logdir>/goodput/<task>.jsonl` (`chief-0.jsonl`, `worker-1.jsonl`, `local.jsonl`
 * for a run without a cluster). Every process of the task (each restart) appends to the same
 * file, starting with a `start` record; each record is written when it happens, so a process
 * killed with SIGKILL loses nothing it recorded. {@link computeGoodput} turns the records of
 * every task into the run's goodput (docs/goodput.md defines each figure).
 *
 * The file is read as hostile input: a line that is not a valid record (a torn last line, a
 * foreign file) is skipped and counted, never trusted, and a file larger than
 * {@link MAX_GOODPUT_LOG_BYTES} is refused with a one-line error.
 *
 * @module
 */

import { closeSync, constants, fstatSync, mkdirSync, openSync, readdirSync, readlinkSync, readSync, realpathSync, writeSync } from "node:fs";
import { basename, join, sep } from "node:path";

import * as E from "fp-ts/lib/Either.js";
import * as t from "io-ts";

import { ValueError } from "../errors.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/**
 * The badput buckets, the keys of every report (their ml-goodput-measurement equivalents are in
 * docs/goodput.md). `collectiveWait` is not yet told apart from step time: it stays 0.
 */
export const BADPUT_BUCKETS = ["startup", "clusterJoin", "restore", "checkpointSave", "preemption", "collectiveWait", "wastedProgress", "infrastructureRecovery", "other"] as const;

/** One badput bucket (see {@link BADPUT_BUCKETS}). */
export type BadputBucket = (typeof BADPUT_BUCKETS)[number];

/** The directory of the goodput logs under a log directory. */
export const GOODPUT_DIR = "goodput";

/** The largest goodput log read: about 1 million records, months of a task's run at a mark every 10 s and a save a minute. */
export const MAX_GOODPUT_LOG_BYTES = 64 * 1024 * 1024;

const Time = t.refinement(t.number, (n) => Number.isFinite(n) && n >= 0, "a time in ms");
const Ms = t.refinement(t.number, (n) => Number.isFinite(n) && n >= 0, "a duration in ms");
const Step = t.refinement(t.number, (n) => Number.isSafeInteger(n) && n >= 0, "a global step");
const ShortName = t.refinement(t.string, (x) => x.length > 0 && x.length <= 64, "a name (1 to 64 characters)");

/**
 * One record of a goodput log. `t` is the wall-clock time it was written (Unix epoch ms).
 *
 * - `start`: a process of the task began at `processStartMs` (the process's own start, before
 *   its modules loaded); `proc` names the process uniquely (a pid repeats: every container's
 *   first process is pid 1); `chief` says whether its figures are the group's.
 * - `phase`: the process spent `ms` in a phase (`clusterJoin`, `restore`, or the blocking part
 *   of a checkpoint save), ending at `t`.
 * - `ready`: training begins (or begins again after a recovery) at global step `step`.
 *   `kept: true`: it goes on with the state it had, nothing restored (a data-parallel group
 *   re-formed its ring around a rank that rejoined, `rejoined` naming it as `worker:1` when known:
 *   training was down from the `aborted` before it, and no step is trained again).
 * - `mark`: the global step was `step` at `t` (written at saves, step rates and summaries);
 *   `checkpoint: true` when a checkpoint of that step was made durable at `t`.
 * - `aborted`: the session failed recoverably; training is down until the next `ready`.
 * - `notice`: a termination notice (this task's, or the cluster's): what follows is preemption.
 * - `end`: the process `proc` ends at `t` with `exitCode`, the global step at `step` when known
 *   (it names its process: it may be written after a successor's `start`, once the directory's
 *   lock is released).
 * - `fault`: `launch --chaos` injected fault `id` (its schedule's `kind`, into `target`) at `t`.
 *   Only `launch`'s own log ({@link LAUNCH_LOG_TASK}) holds these; it has no `start`, so it adds no
 *   task to the figures.
 */
export const GoodputRecordCodec = t.union([
  t.strict({ v: t.literal(1), type: t.literal("start"), t: Time, task: t.string, proc: t.string, pid: t.number, chief: t.boolean, processStartMs: Time }),
  t.strict({ v: t.literal(1), type: t.literal("phase"), t: Time, bucket: t.keyof({ clusterJoin: null, restore: null, checkpointSave: null }), ms: Ms }),
  t.intersection([
    t.strict({ v: t.literal(1), type: t.literal("ready"), t: Time, step: t.union([Step, t.null]) }),
    t.exact(t.partial({ kept: t.literal(true), rejoined: ShortName })),
  ]),
  t.intersection([t.strict({ v: t.literal(1), type: t.literal("mark"), t: Time, step: Step }), t.exact(t.partial({ checkpoint: t.literal(true) }))]),
  t.strict({ v: t.literal(1), type: t.literal("aborted"), t: Time }),
  t.strict({ v: t.literal(1), type: t.literal("notice"), t: Time }),
  t.strict({ v: t.literal(1), type: t.literal("end"), t: Time, proc: t.string, step: t.union([Step, t.null]), exitCode: t.union([t.number, t.null]) }),
  t.strict({ v: t.literal(1), type: t.literal("fault"), t: Time, id: Step, kind: ShortName, target: ShortName }),
]);

/** The task name of `launch`'s own goodput log (`launch.jsonl`): the faults `launch --chaos` injected. */
export const LAUNCH_LOG_TASK = "launch";

/** One record of a goodput log (see {@link GoodputRecordCodec}). */
export type GoodputRecord = t.TypeOf<typeof GoodputRecordCodec>;

/** The buckets a process measures as phases of its own (the rest are derived from the records). */
export type PhaseBucket = Extract<GoodputRecord, { type: "phase" }>["bucket"];

/** The records of one task's goodput log. */
export interface GoodputLog {
  /** The task (`chief:0`, `worker:1`, `local`), from the file's `start` records. */
  readonly task: string;
  readonly path: string;
  readonly records: readonly GoodputRecord[];
  /** Lines that were not valid records (skipped): a torn last line, or a file that is not ours. */
  readonly skippedLines: number;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** The file name of `task`'s goodput log (`chief:0` → `chief-0.jsonl`). */
export const goodputLogName = (task: string): string => `${task.replace(/[^A-Za-z0-9_.-]/g, "-")}.jsonl`;

/**
 * Appends records to one task's goodput log, one line per `write` (each line reaches the file
 * when written: a SIGKILL loses nothing written). A log that does not end with a newline (its
 * last writer was killed in mid-line) gets one first, so that a torn line never swallows this
 * process's records. A write that fails (a full disk), or a log that would grow past
 * {@link MAX_GOODPUT_LOG_BYTES}, is reported once through `onError` and the log stops:
 * accounting never stops training.
 */
export class GoodputLogWriter {
  private fd: number | undefined;

  private constructor(
    readonly path: string,
    fd: number,
    private size: number,
    private readonly onError: (message: string) => void,
  ) {
    this.fd = fd;
  }

  /** Opens (creating it and its directory) `<logDir>/goodput/<task>.jsonl` for appending. */
  static open(logDir: string, task: string, onError: (message: string) => void): GoodputLogWriter {
    const dir = join(logDir, GOODPUT_DIR);
    mkdirSync(dir, { recursive: true });
    const path = join(dir, goodputLogName(task));
    const fd = openSync(path, "a+");
    let size = 0;
    try {
      size = fstatSync(fd).size;
      const last = Buffer.alloc(1);
      if (size > 0 && readSync(fd, last, 0, 1, size - 1) === 1 && last[0] !== 0x0a) size += writeAll(fd, "\n");
    } catch {
      // A log that cannot even be looked at: the first write says so.
    }
    return new GoodputLogWriter(path, fd, size, onError);
  }

  /** Appends `record` as one line. */
  write(record: GoodputRecord): void {
    if (this.fd === undefined) return;
    const line = `${JSON.stringify(record)}\n`;
    if (this.size + line.length > MAX_GOODPUT_LOG_BYTES) {
      return this.stop(`the goodput log ${this.path} reached ${MAX_GOODPUT_LOG_BYTES} bytes, as large as a log can be; this process records no more goodput (training goes on). Start the next run in a log directory of its own`);
    }
    try {
      this.size += writeAll(this.fd, line);
    } catch (e) {
      this.stop(`the goodput log ${this.path} could not be written (${e instanceof Error ? e.message : String(e)}); this process records no more goodput (training goes on)`);
    }
  }

  /** Closes the file; later writes do nothing. A failed close (EIO on a network file system) is reported like a failed write, never thrown. */
  close(): void {
    const fd = this.fd;
    this.fd = undefined;
    if (fd === undefined) return;
    try {
      closeSync(fd);
    } catch (e) {
      this.onError(`the goodput log ${this.path} could not be closed (${e instanceof Error ? e.message : String(e)}); its last records may be lost`);
    }
  }

  /** Stops writing (closing quietly: `message` is what to report). */
  private stop(message: string): void {
    const fd = this.fd;
    this.fd = undefined;
    try {
      if (fd !== undefined) closeSync(fd);
    } catch {
      // The reason to stop is the one to report.
    }
    this.onError(message);
  }
}

/** Writes all of `text` at the end of `fd` (a short write goes on where it stopped); returns the bytes written. */
const writeAll = (fd: number, text: string): number => {
  const bytes = Buffer.from(text, "utf8");
  let done = 0;
  while (done < bytes.length) done += writeSync(fd, bytes, done, bytes.length - done);
  return bytes.length;
};

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Parses the text of a goodput log: valid records in order, and how many lines were not. */
export const parseGoodputLog = (text: string): { readonly records: GoodputRecord[]; readonly skippedLines: number } => {
  const records: GoodputRecord[] = [];
  let skippedLines = 0;
  for (const line of text.split("\n")) {
    if (line.trim() === "") continue;
    let json: unknown;
    try {
      json = JSON.parse(line);
    } catch {
      skippedLines += 1;
      continue;
    }
    const decoded = GoodputRecordCodec.decode(json);
    if (E.isRight(decoded)) records.push(decoded.right);
    else skippedLines += 1;
  }
  return { records, skippedLines };
};

/**
 * Reads every goodput log under `logDir` (`<logDir>/goodput/*.jsonl`), sorted by task. An absent
 * directory gives none.
 *
 * @throws ValueError naming the file when one is larger than {@link MAX_GOODPUT_LOG_BYTES}, is not
 *   a regular file (a directory, a FIFO), is a symbolic link, or cannot be read.
 */
export const readGoodputLogs = (logDir: string): GoodputLog[] => new GoodputLogFollower(logDir).read();

/** The most goodput logs read from one directory (a task writes one: this is thousands of tasks). */
export const MAX_GOODPUT_LOGS = 4096;

/** Options of a {@link GoodputLogFollower}. */
export interface GoodputLogFollowerOptions {
  /**
   * A real directory (symbolic links resolved) every log must really be in: a log whose open
   * file is elsewhere (its folder swapped for a link after it was checked) is refused. On Linux
   * the open file's own path is checked (`/proc/self/fd`); elsewhere the path's real location.
   */
  readonly within?: string | undefined;
}

/**
 * Follows the goodput logs of a log directory: each {@link read} reads only what was appended to
 * each log since the last one (the logs only grow), so that reading them again during a long run
 * costs what was written meanwhile, not the whole history. A file that shrank, was replaced, or
 * was rewritten from its start is read again from its start; one that went is forgotten.
 */
export class GoodputLogFollower {
  private readonly files = new Map<string, FollowedFile>();

  constructor(
    readonly logDir: string,
    private readonly options: GoodputLogFollowerOptions = {},
  ) {}

  /**
   * Every task's log as it is now, sorted by task (see {@link readGoodputLogs}).
   *
   * @throws ValueError as {@link readGoodputLogs} does, and when the directory holds more than
   *   {@link MAX_GOODPUT_LOGS} logs.
   */
  read(): GoodputLog[] {
    const dir = join(this.logDir, GOODPUT_DIR);
    let names: string[];
    try {
      names = readdirSync(dir).filter((n) => n.endsWith(".jsonl"));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return [];
      throw new ValueError(`cannot list the goodput logs in ${dir}: ${(e as Error).message}`);
    }
    if (names.length > MAX_GOODPUT_LOGS) throw new ValueError(`${dir} holds ${names.length} goodput logs, more than the ${MAX_GOODPUT_LOGS} a run can have; it is not a run's log directory`);
    const present = new Set(names.map((n) => join(dir, n)));
    for (const path of this.files.keys()) if (!present.has(path)) this.files.delete(path);
    return names.sort().flatMap((name) => {
      const path = join(dir, name);
      const f = this.readOne(path);
      return f === undefined ? [] : [f];
    });
  }

  /**
   * One log as it is now (`undefined` if it is gone), reading only what was appended since the
   * last time. The records are a copy: a later read never changes what an earlier one returned.
   *
   * @throws ValueError as {@link readGoodputLogs} does.
   */
  readOne(path: string): GoodputLog | undefined {
    const f = this.follow(path);
    if (f === undefined) return undefined;
    // A last line without its newline (a torn write of a killed process) counts as what it is, for this answer only.
    const tail = f.pending.length === 0 ? { records: [], skippedLines: 0 } : parseGoodputLog(f.pending.toString("utf8"));
    const records = [...f.records, ...tail.records];
    const start = records.find((r) => r.type === "start");
    return { task: start?.type === "start" ? start.task : basename(path).replace(/\.jsonl$/, ""), path, records, skippedLines: f.skippedLines + tail.skippedLines };
  }

  /** Reads what was appended to `path` since the last read (all of it the first time); `undefined` if it is gone. */
  private follow(path: string): FollowedFile | undefined {
    let fd: number;
    try {
      // Non-blocking: a FIFO in a log's place opens at once (and is refused below) instead of
      // waiting for a writer forever. A link in a log's place is not followed (ELOOP): a log is
      // a file its task wrote, never a link to one.
      fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ENOENT") {
        this.files.delete(path);
        return undefined;
      }
      if (code === "ELOOP") throw new ValueError(`the goodput log ${path} is a symbolic link, which a log never is: remove it`);
      throw new ValueError(`cannot read the goodput log ${path}: ${(e as Error).message}`);
    }
    try {
      this.confine(fd, path);
      const stat = fstatSync(fd);
      if (!stat.isFile()) throw new ValueError(`the goodput log ${path} is not a regular file; remove it`);
      if (stat.size > MAX_GOODPUT_LOG_BYTES) {
        throw new ValueError(`the goodput log ${path} is larger than the ${MAX_GOODPUT_LOG_BYTES} bytes a log can be; it is not one of ours, or it is damaged: move it away`);
      }
      let f = this.files.get(path);
      // Replaced (another file), shrunk, or rewritten from its start (its first bytes differ): read again.
      if (f !== undefined && (f.dev !== stat.dev || f.ino !== stat.ino || stat.size < f.offset || !startsWith(fd, f.head))) f = undefined;
      if (f === undefined) {
        f = { dev: stat.dev, ino: stat.ino, head: Buffer.alloc(0), offset: 0, pending: Buffer.alloc(0), records: [], skippedLines: 0 };
        this.files.set(path, f);
      }
      const chunk = Buffer.alloc(stat.size - f.offset);
      let read = 0;
      while (read < chunk.length) {
        const n = readSync(fd, chunk, read, chunk.length - read, f.offset + read);
        if (n === 0) break;
        read += n;
      }
      if (f.offset === 0) f.head = Buffer.from(chunk.subarray(0, Math.min(read, HEAD_BYTES)));
      f.offset += read;
      const bytes = Buffer.concat([f.pending, chunk.subarray(0, read)]);
      // Whole lines only: a line still being written is kept for the next read.
      const lastNewline = bytes.lastIndexOf(0x0a);
      f.pending = Buffer.from(bytes.subarray(lastNewline + 1));
      const parsed = parseGoodputLog(bytes.subarray(0, lastNewline + 1).toString("utf8"));
      for (const r of parsed.records) f.records.push(r);
      f.skippedLines += parsed.skippedLines;
      return f;
    } finally {
      closeSync(fd);
    }
  }

  /** Refuses the open file `fd` unless it really is inside `within` (see {@link GoodputLogFollowerOptions.within}). */
  private confine(fd: number, path: string): void {
    const within = this.options.within;
    if (within === undefined) return;
    let real: string;
    try {
      real = process.platform === "linux" ? readlinkSync(`/proc/self/fd/${fd}`) : realpathSync(path);
    } catch (e) {
      throw new ValueError(`cannot tell where the goodput log ${path} is (${(e as Error).message}); not read`);
    }
    if (!real.startsWith(within.endsWith(sep) ? within : within + sep)) throw new ValueError(`the goodput log ${path} is really ${real}, outside ${within}; not read`);
  }
}

/** How many first bytes of a log identify it (its `start` record's beginning). */
const HEAD_BYTES = 64;

/** Whether the file `fd` still starts with `head`. */
const startsWith = (fd: number, head: Buffer): boolean => {
  if (head.length === 0) return true;
  const now = Buffer.alloc(head.length);
  return readSync(fd, now, 0, head.length, 0) === head.length && now.equals(head);
};

/** What a {@link GoodputLogFollower} knows of one file. */
interface FollowedFile {
  readonly dev: number;
  readonly ino: number;
  /** Its first bytes, as first read. */
  head: Buffer;
  offset: number;
  /** The bytes after the last newline read (a line not yet whole). */
  pending: Buffer;
  readonly records: GoodputRecord[];
  skippedLines: number;
}
