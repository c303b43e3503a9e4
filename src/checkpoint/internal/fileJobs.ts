/**
 * A checkpoint's whole commit as one job for a background thread: files written under
 * temporary names and `fdatasync`ed, the directory lock checked, the renames, the directory's
 * fsync and the retention's deletions, each a blocking call on a worker thread, with one
 * message back when all are done.
 *
 * Why: made of asynchronous calls, a commit is about 25 steps, each waiting for the event-loop
 * turn after the next training step, so a small checkpoint took about 24 ms of wall time and
 * slowed every step in that window (docs/performance.md, `tfjs`). As one job it costs the
 * training thread one message each way.
 *
 * The steps run in a process-wide worker thread ({@link sharedFileCommitter}), made on first use
 * and kept, not holding the process open while idle. Its code is {@link JOB_RUNNER_SOURCE}, plain
 * JavaScript given to the worker as text, so that it runs the same under `tsx`, vitest and the
 * compiled package; {@link inProcessCommitter} runs the same text on the calling thread with a
 * file system of the caller's choice: the fallback when a worker cannot start (thread limits),
 * and the tests' way to inject faults.
 *
 * @module
 */

import { Worker } from "node:worker_threads";
import * as nodeFs from "node:fs";
import * as nodePath from "node:path";

import { RuntimeError } from "../../errors.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** One step of a {@link FileJob}, done with a blocking call. */
export type FileStep =
  /** Creates `dir` and its missing parents; fsyncs the parent of the first one it created. */
  | { readonly op: "mkdir"; readonly dir: string }
  /**
   * Creates `tmp` (it must not exist) and writes `bytes` to it, neither synced nor closed (see
   * `syncWritten`). A failure names `path`, the file it is written for.
   */
  | { readonly op: "write"; readonly tmp: string; readonly path: string; readonly bytes: Uint8Array }
  /** `fdatasync`s every file written since the last such step, all at once, and closes them. */
  | { readonly op: "syncWritten" }
  /**
   * Stops the job (a {@link FileJobResult} with `lock`) unless the JSON file at `path` holds
   * `token` as its `token`: the directory's writer lost its lock while it stalled.
   */
  | { readonly op: "checkLock"; readonly path: string; readonly token: string }
  /** Renames `from` to `to` (replacing a file there). */
  | { readonly op: "rename"; readonly from: string; readonly to: string }
  /** fsyncs the directory `dir`. */
  | { readonly op: "fsyncDir"; readonly dir: string }
  /**
   * Deletes `paths` in order, best effort: the first that fails is a warning of the result and
   * the rest are kept (a checkpoint's data outlives an index that could not be deleted); a
   * missing file is nothing.
   */
  | { readonly op: "unlink"; readonly paths: readonly string[] };

/** Steps run in order; the first that fails stops the job, and every written file not renamed is deleted. */
export interface FileJob {
  readonly steps: readonly FileStep[];
}

/** A file-system error as it crosses threads. */
export interface FileJobError {
  readonly message: string;
  readonly code?: string;
  readonly syscall?: string;
  readonly path?: string;
}

/** How a {@link FileJob} ended. */
export interface FileJobResult {
  /** How many steps completed (all of them: the job succeeded). */
  readonly done: number;
  /** Why step `done` failed. */
  readonly error?: FileJobError;
  /** A `checkLock` step stopped the job: the lock file's text then (`null`: none). */
  readonly lock?: string | null;
  /** `unlink` steps that failed (the job went on). */
  readonly warnings: readonly FileJobError[];
  /** The file and directory fsyncs it issued (for `syncCounters`). */
  readonly syncs: { readonly files: number; readonly directories: number };
}

/** Runs {@link FileJob}s. */
export interface FileCommitter {
  /** Resolves with the job's result; rejects only if the job could not run at all. */
  run(job: FileJob): Promise<FileJobResult>;
  /**
   * Whether a job sent now starts at once: `false` while a worker thread is still starting
   * (about 25 ms idle, more on a loaded machine), which a save should not wait for. Absent:
   * always ready.
   */
  ready?(): boolean;
}

/**
 * The job runner, as JavaScript text: the body of a function of `(fs, path, job)` returning a
 * promise of a {@link FileJobResult}: blocking calls, but for the one round of `fdatasync`s,
 * which run at once on libuv's threads. Kept as text (not a compiled function's `toString()`, which a
 * transpiler may decorate) so that a worker runs exactly it.
 */
const JOB_RUNNER_SOURCE = `
return (async () => {
const steps = job.steps;
const written = [];
const open = new Map();
const renamed = new Set();
const warnings = [];
const syncs = { files: 0, directories: 0 };
const errorOf = (e) => ({
  message: String(e && e.message !== undefined ? e.message : e),
  ...(e && typeof e.code === "string" ? { code: e.code } : {}),
  ...(e && typeof e.syscall === "string" ? { syscall: e.syscall } : {}),
  ...(e && typeof e.path === "string" ? { path: e.path } : {}),
});
const fsyncDir = (dir) => {
  const fd = fs.openSync(dir, "r");
  try { syncs.directories++; fs.fsyncSync(fd); } finally { fs.closeSync(fd); }
};
const named = (e, p) => {
  // The file it is written for, as the streaming path names it (not the temporary name).
  if (e && typeof e === "object") e.path = p;
  return e;
};
const datasync = (fd) => new Promise((resolve, reject) => fs.fdatasync(fd, (e) => (e ? reject(e) : resolve())));
let i = 0;
try {
  for (; i < steps.length; i++) {
    const s = steps[i];
    if (s.op === "write") {
      let fd;
      try {
        fd = fs.openSync(s.tmp, "wx", 0o644);
        written.push(s.tmp);
        open.set(s.tmp, { fd, path: s.path });
        let at = 0;
        while (at < s.bytes.byteLength) {
          const n = fs.writeSync(fd, s.bytes, at, s.bytes.byteLength - at);
          if (n === 0) throw new Error("write made no progress");
          at += n;
        }
      } catch (e) {
        throw named(e, s.path);
      }
    } else if (s.op === "syncWritten") {
      // One round: every file written and not yet synced, at once (one journal commit can cover them).
      const files = [...open.values()];
      open.clear();
      syncs.files += files.length;
      const results = await Promise.allSettled(files.map((f) => datasync(f.fd)));
      let first;
      for (let k = 0; k < files.length; k++) {
        try { fs.closeSync(files[k].fd); } catch (e) { if (first === undefined) first = named(e, files[k].path); }
        if (results[k].status === "rejected" && first === undefined) first = named(results[k].reason, files[k].path);
      }
      if (first !== undefined) throw first;
    } else if (s.op === "rename") {
      fs.renameSync(s.from, s.to);
      renamed.add(s.from);
    } else if (s.op === "fsyncDir") {
      fsyncDir(s.dir);
    } else if (s.op === "mkdir") {
      // Each directory created is made durable in its parent (mkdirDurable's loop, in this text).
      const target = path.resolve(s.dir);
      const created = fs.mkdirSync(target, { recursive: true });
      if (created !== undefined) {
        const first = path.resolve(created);
        for (let d = target; ; d = path.dirname(d)) {
          fsyncDir(path.dirname(d));
          if (d === first || path.dirname(d) === d) break;
        }
      }
    } else if (s.op === "checkLock") {
      let raw = null;
      try { raw = fs.readFileSync(s.path, "utf8"); } catch (e) { if (!e || e.code !== "ENOENT") throw e; }
      let token;
      try { token = JSON.parse(raw).token; } catch { token = undefined; }
      if (token !== s.token) return { done: i, lock: raw, warnings, syncs };
    } else if (s.op === "unlink") {
      for (const p of s.paths) {
        try { fs.unlinkSync(p); } catch (e) { if (!e || e.code !== "ENOENT") { warnings.push(errorOf(e)); break; } }
      }
    } else {
      throw new Error("unknown file step " + JSON.stringify(s.op));
    }
  }
  return { done: i, warnings, syncs };
} catch (e) {
  return { done: i, error: errorOf(e), warnings, syncs };
} finally {
  for (const f of open.values()) { try { fs.closeSync(f.fd); } catch { /* closed with the error already reported */ } }
  for (const t of written) {
    if (!renamed.has(t)) { try { fs.unlinkSync(t); } catch { /* already gone */ } }
  }
}
})();
`;

/**
 * The worker's program: runs the jobs it is sent one after another, in the order sent (a job
 * awaits its round of fdatasyncs: the next one starts only after it answered), and answers each
 * with its id.
 */
const WORKER_SOURCE = `
const { parentPort } = require("node:worker_threads");
const fs = require("node:fs");
const path = require("node:path");
const run = new Function("fs", "path", "job", ${JSON.stringify(JOB_RUNNER_SOURCE)});
const failed = (e) => ({ done: -1, error: { message: String((e && e.message) || e) }, warnings: [], syncs: { files: 0, directories: 0 } });
let tail = Promise.resolve();
parentPort.on("message", (m) => {
  tail = tail.then(() => {
    let running;
    try { running = run(fs, path, m.job); } catch (e) { running = Promise.resolve(failed(e)); }
    return running.then((result) => result, failed).then((result) => parentPort.postMessage({ id: m.id, result }));
  });
});
`;

/** The file system calls a job uses (Node's `fs`, or a test's stand-in). */
export type JobFileSystem = Pick<
  typeof nodeFs,
  "openSync" | "writeSync" | "fdatasync" | "fsyncSync" | "closeSync" | "renameSync" | "mkdirSync" | "readFileSync" | "unlinkSync"
>;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Runs jobs on the calling thread with `fs` (default Node's), one after another in the order
 * sent, as the worker does: the tests' way to inject faults.
 */
export const inProcessCommitter = (fs: JobFileSystem = nodeFs): FileCommitter => {
  const run = new Function("fs", "path", "job", JOB_RUNNER_SOURCE) as (fs: JobFileSystem, path: typeof nodePath, job: FileJob) => Promise<FileJobResult>;
  let tail: Promise<unknown> = Promise.resolve();
  return {
    run: (job) => {
      const result = tail.then(() => run(fs, nodePath, job));
      tail = result.catch(() => undefined);
      return result;
    },
  };
};

interface Pending {
  /** The worker running it: only its death fails the job. */
  readonly worker: Worker;
  readonly resolve: (r: FileJobResult) => void;
  readonly reject: (e: unknown) => void;
}

/**
 * Runs jobs on one worker thread, one at a time in the order sent. The worker is made on first
 * use; it holds the process open only while a job is running; if it dies, the running jobs
 * reject and the next job makes a new one.
 */
class WorkerCommitter implements FileCommitter {
  private worker: Worker | null = null;
  /** Whether {@link worker} runs JavaScript yet (its `online` event). */
  private online = false;
  /** Settles when the worker last started is online, or ended before it was. */
  private started: Promise<void> = Promise.resolve();
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;
  /** Set once a worker could not start (thread limits): jobs then run on the calling thread. */
  private fallback: FileCommitter | null = null;

  run(job: FileJob): Promise<FileJobResult> {
    if (this.fallback !== null) return this.fallback.run(job);
    let worker: Worker;
    try {
      worker = this.worker ?? this.start();
    } catch {
      // Blocking calls on this thread: slower for training, as durable.
      this.fallback = inProcessCommitter();
      return this.fallback.run(job);
    }
    const id = this.nextId++;
    return new Promise<FileJobResult>((resolve, reject) => {
      if (this.pending.size === 0) worker.ref();
      this.pending.set(id, { worker, resolve, reject });
      // Copied, never transferred: the caller keeps its buffers (a message carrying a buffer
      // that an earlier transfer detached is dropped without an error, and would never be
      // answered). Each write's bytes should be a buffer of their own (`ownedBytes`): a view is
      // copied with its whole buffer.
      try {
        worker.postMessage({ id, job });
      } catch (e) {
        this.settle(id);
        reject(e);
      }
    });
  }

  /**
   * Whether a job would run at once; if no worker runs, starts one (for the jobs after). A job
   * sent while it starts waits for it, so a save that finds it not ready is written another way.
   */
  ready(): boolean {
    if (this.fallback !== null) return true;
    if (this.worker === null) this.warm();
    return this.fallback !== null || this.online;
  }

  /** Starts the worker if none runs, and settles once it is online (or could not start, or died): {@link ready} then says which. */
  whenReady(): Promise<void> {
    this.warm();
    return this.started;
  }

  /** Starts the worker now, so that the first save does not wait for it (never throws: a worker that cannot start is the first job's concern). */
  warm(): void {
    if (this.worker !== null || this.fallback !== null) return;
    try {
      this.start();
    } catch {
      this.fallback = inProcessCommitter();
    }
  }

  /** Stops the worker: jobs running reject; the next job starts a new one. */
  async stop(): Promise<void> {
    await this.worker?.terminate();
  }

  private start(): Worker {
    // No inherited flags: the program is CommonJS text that needs no loader (`--import tsx`), and
    // a parent's `--input-type=module` would make it an ES module.
    const worker = new Worker(WORKER_SOURCE, { eval: true, execArgv: [], name: "monitored-session checkpoint writer", stdout: false, stderr: false });
    this.online = false;
    this.started = new Promise<void>((settle) => {
      worker.once("online", () => {
        if (this.worker === worker) this.online = true;
        settle();
      });
      worker.once("error", () => settle());
      worker.once("exit", () => settle());
    });
    worker.on("message", (m: { id: number; result: FileJobResult }) => this.settle(m.id)?.resolve(m.result));
    const fail = (why: string): void => {
      if (this.worker === worker) {
        this.worker = null;
        this.online = false;
      }
      for (const [id, p] of [...this.pending]) {
        if (p.worker !== worker) continue;
        this.settle(id);
        p.reject(
          new RuntimeError(`The checkpoint writer thread stopped (${why}) before it answered: the save is not counted, and its files may or may not be on disk (the next save records normally).`),
        );
      }
    };
    worker.on("error", (e) => fail(e.message));
    worker.on("exit", (code) => fail(`exit code ${code}`));
    // After the listeners: adding a "message" listener refs the worker again.
    worker.unref();
    this.worker = worker;
    return worker;
  }

  private settle(id: number): Pending | undefined {
    const p = this.pending.get(id);
    this.pending.delete(id);
    if (this.pending.size === 0) this.worker?.unref();
    return p;
  }
}

/** A committer with a worker thread of its own (tests; managers share {@link sharedFileCommitter}'s). */
export const workerCommitter = (): FileCommitter & { ready(): boolean; whenReady(): Promise<void>; warm(): void; stop(): Promise<void> } => new WorkerCommitter();

let shared: WorkerCommitter | null = null;

/**
 * Whether this process can run jobs at all: their runner is compiled from text, which
 * `--disallow-code-generation-from-strings` forbids (on every thread).
 */
const runnable = ((): boolean => {
  try {
    new Function("fs", "path", "job", JOB_RUNNER_SOURCE);
    return true;
  } catch {
    return false;
  }
})();

/**
 * The process's checkpoint writer thread (made on first use, shared by every manager); `null`
 * where jobs cannot run (code generation from strings disallowed): saves then stream on the
 * calling thread.
 */
export const sharedFileCommitter = (): (FileCommitter & { ready(): boolean; whenReady(): Promise<void>; warm(): void }) | null => (runnable ? (shared ??= new WorkerCommitter()) : null);

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** A Node-style error (`code`, `syscall`, `path`) from a {@link FileJobError}. */
export const toError = (e: FileJobError): Error => {
  const err = new Error(e.message) as NodeJS.ErrnoException;
  if (e.code !== undefined) err.code = e.code;
  if (e.syscall !== undefined) err.syscall = e.syscall;
  if (e.path !== undefined) err.path = e.path;
  return err;
};

/** `bytes` as a buffer of its own: itself if it spans its whole buffer, else a copy (so that no shared pool is copied to the worker with it). */
export const ownedBytes = (bytes: Uint8Array): Uint8Array =>
  bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength ? bytes : bytes.slice();

/** One buffer of its own holding `chunks` (so that no shared pool is copied to the worker with them). */
export const concatOwned = (chunks: readonly Uint8Array[]): Uint8Array => {
  let n = 0;
  for (const c of chunks) n += c.byteLength;
  const out = new Uint8Array(n);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out;
};
