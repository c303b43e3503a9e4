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

import { closeSync, constants, fstatSync, mkdirSync, openSync, readdirSync, readSync, writeSync } from "node:fs";
import { join } from "node:path";

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

/**
 * One record of a goodput log. `t` is the wall-clock time it was written (Unix epoch ms).
 *
 * - `start`: a process of the task began at `processStartMs` (the process's own start, before
 *   its modules loaded); `chief` says whether its figures are the group's.
 * - `phase`: the process spent `ms` in a phase (`clusterJoin`, `restore`, or the blocking part
 *   of a checkpoint save), ending at `t`.
 * - `ready`: training begins (or begins again after a recovery) at global step `step`.
 * - `mark`: the global step was `step` at `t` (written at saves, step rates and summaries).
 * - `aborted`: the session failed recoverably; training is down until the next `ready`.
 * - `notice`: a termination notice (this task's, or the cluster's): what follows is preemption.
 * - `end`: the process `pid` ends at `t` with `exitCode`, the global step at `step` when known
 *   (its pid: it may be written after a successor's `start`, once the directory's lock is released).
 */
export const GoodputRecordCodec = t.union([
  t.strict({ v: t.literal(1), type: t.literal("start"), t: Time, task: t.string, pid: t.number, chief: t.boolean, processStartMs: Time }),
  t.strict({ v: t.literal(1), type: t.literal("phase"), t: Time, bucket: t.keyof({ clusterJoin: null, restore: null, checkpointSave: null }), ms: Ms }),
  t.strict({ v: t.literal(1), type: t.literal("ready"), t: Time, step: t.union([Step, t.null]) }),
  t.strict({ v: t.literal(1), type: t.literal("mark"), t: Time, step: Step }),
  t.strict({ v: t.literal(1), type: t.literal("aborted"), t: Time }),
  t.strict({ v: t.literal(1), type: t.literal("notice"), t: Time }),
  t.strict({ v: t.literal(1), type: t.literal("end"), t: Time, pid: t.number, step: t.union([Step, t.null]), exitCode: t.union([t.number, t.null]) }),
]);

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
 * when written: a SIGKILL loses nothing written). A write that fails (a full disk) is reported
 * once through `onError` and the log stops: accounting never stops training.
 */
export class GoodputLogWriter {
  private fd: number | undefined;

  private constructor(
    readonly path: string,
    fd: number,
    private readonly onError: (message: string) => void,
  ) {
    this.fd = fd;
  }

  /** Opens (creating it and its directory) `<logDir>/goodput/<task>.jsonl` for appending. */
  static open(logDir: string, task: string, onError: (message: string) => void): GoodputLogWriter {
    const dir = join(logDir, GOODPUT_DIR);
    mkdirSync(dir, { recursive: true });
    const path = join(dir, goodputLogName(task));
    return new GoodputLogWriter(path, openSync(path, "a"), onError);
  }

  /** Appends `record` as one line. */
  write(record: GoodputRecord): void {
    if (this.fd === undefined) return;
    try {
      writeSync(this.fd, `${JSON.stringify(record)}\n`);
    } catch (e) {
      const fd = this.fd;
      this.fd = undefined;
      try {
        closeSync(fd);
      } catch {
        // The write's error is the one to report.
      }
      this.onError(`the goodput log ${this.path} could not be written (${e instanceof Error ? e.message : String(e)}); this process records no more goodput (training goes on)`);
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
}

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

/**
 * Follows the goodput logs of a log directory: each {@link read} reads only what was appended to
 * each log since the last one (the logs only grow), so that reading them again during a long run
 * costs what was written meanwhile, not the whole history. A file that shrank or was replaced is
 * read again from its start.
 */
export class GoodputLogFollower {
  private readonly files = new Map<string, FollowedFile>();

  constructor(readonly logDir: string) {}

  /**
   * Every task's log as it is now, sorted by task (see {@link readGoodputLogs}).
   *
   * @throws ValueError as {@link readGoodputLogs} does.
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
    return names.sort().map((name) => {
      const path = join(dir, name);
      const f = this.follow(path);
      const start = f.records.find((r) => r.type === "start");
      return { task: start?.type === "start" ? start.task : name.replace(/\.jsonl$/, ""), path, records: f.records, skippedLines: f.skippedLines };
    });
  }

  /** Reads what was appended to `path` since the last read (all of it the first time). */
  private follow(path: string): FollowedFile {
    let fd: number;
    try {
      // Non-blocking: a FIFO in a log's place opens at once (and is refused below) instead of
      // waiting for a writer forever. A link in a log's place is not followed (ELOOP): a log is
      // a file its task wrote, never a link to one.
      fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ELOOP") throw new ValueError(`the goodput log ${path} is a symbolic link, which a log never is: remove it`);
      throw new ValueError(`cannot read the goodput log ${path}: ${(e as Error).message}`);
    }
    try {
      const stat = fstatSync(fd);
      if (!stat.isFile()) throw new ValueError(`the goodput log ${path} is not a regular file; remove it`);
      if (stat.size > MAX_GOODPUT_LOG_BYTES) {
        throw new ValueError(`the goodput log ${path} is ${stat.size} bytes, more than the ${MAX_GOODPUT_LOG_BYTES} a log can be; it is not one of ours, or it is damaged: move it away`);
      }
      let f = this.files.get(path);
      if (f === undefined || f.ino !== stat.ino || stat.size < f.offset) {
        f = { ino: stat.ino, offset: 0, pending: Buffer.alloc(0), records: [], skippedLines: 0 };
        this.files.set(path, f);
      }
      const chunk = Buffer.alloc(stat.size - f.offset);
      let read = 0;
      while (read < chunk.length) {
        const n = readSync(fd, chunk, read, chunk.length - read, f.offset + read);
        if (n === 0) break;
        read += n;
      }
      f.offset += read;
      const bytes = Buffer.concat([f.pending, chunk.subarray(0, read)]);
      // Whole lines only: a line still being written is kept for the next read.
      const lastNewline = bytes.lastIndexOf(0x0a);
      f.pending = Buffer.from(bytes.subarray(lastNewline + 1));
      const parsed = parseGoodputLog(bytes.subarray(0, lastNewline + 1).toString("utf8"));
      for (const r of parsed.records) f.records.push(r);
      f.skippedLines += parsed.skippedLines;
      // A last line without its newline (a torn write of a killed process) counts as what it is, for this answer.
      const tail = parseGoodputLog(f.pending.toString("utf8"));
      return tail.records.length === 0 && tail.skippedLines === 0 ? f : { ...f, records: [...f.records, ...tail.records], skippedLines: f.skippedLines + tail.skippedLines };
    } finally {
      closeSync(fd);
    }
  }
}

/** What a {@link GoodputLogFollower} knows of one file. */
interface FollowedFile {
  readonly ino: number;
  offset: number;
  /** The bytes after the last newline read (a line not yet whole). */
  pending: Buffer;
  readonly records: GoodputRecord[];
  skippedLines: number;
}
