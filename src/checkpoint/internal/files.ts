/**
 * Durable file primitives for checkpoints: temporary names, fsync of files and directories,
 * atomic replace (temp + fsync + rename + fsync dir), and path validation.
 *
 * Temporary files are named `<final>.tmp-<pid>-<random>` so that a later cleanup can tell an
 * interrupted save (its process is gone) from one in flight (this process, or a live one).
 *
 * @module
 */

import { access, mkdir, open, readdir, rename, unlink, type FileHandle } from "node:fs/promises";
import { dirname, isAbsolute, relative, resolve, sep } from "node:path";

import { InvalidArgumentError } from "../../errors.js";
import { withPath } from "../../util/fsErrors.js";
import { processTempFiles, TEMP_MARKER, type TempFileRegistry } from "../TempFileRegistry.js";

export { TEMP_MARKER };

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/**
 * How many file and directory fsyncs this process has issued through this module (for the
 * benchmark's breakdown; cheap counters, never reset by the library).
 */
export const syncCounters = { files: 0, directories: 0 };

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------


// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** fsyncs a directory so that renames and unlinks in it survive a power cut. */
export const fsyncDir = async (dir: string): Promise<void> => {
  const fh = await open(dir, "r");
  try {
    syncCounters.directories++;
    await fh.sync();
  } finally {
    await fh.close();
  }
};

/**
 * Creates `dir` and whatever parents it lacks, and makes each directory it created durable in its
 * parent (an fsync of every directory that gained an entry: a save recorded in a directory that a
 * power cut forgets is lost with it). Nothing is synced when `dir` existed.
 */
export const mkdirDurable = async (dir: string): Promise<void> => {
  const target = resolve(dir);
  const created = await mkdir(target, { recursive: true });
  if (created === undefined) return;
  const first = resolve(created);
  for (let d = target; ; d = dirname(d)) {
    await fsyncDir(dirname(d));
    if (d === first || dirname(d) === d) return;
  }
};

/** Writes every byte of `buffers` at `position`, looping over partial writes. */
export const writeAll = async (fh: FileHandle, buffers: readonly Uint8Array[], position: number): Promise<void> => {
  let pending = buffers.filter((b) => b.byteLength > 0);
  let pos = position;
  while (pending.length > 0) {
    const { bytesWritten } = await fh.writev(pending as Uint8Array[], pos);
    pos += bytesWritten;
    let skip = bytesWritten;
    const rest: Uint8Array[] = [];
    for (const b of pending) {
      if (skip >= b.byteLength) {
        skip -= b.byteLength;
        continue;
      }
      rest.push(skip > 0 ? b.subarray(skip) : b);
      skip = 0;
    }
    if (bytesWritten === 0 && rest.length > 0) throw new Error("write made no progress");
    pending = rest;
  }
};

/**
 * A file written under a temporary name next to its final path, not yet visible there.
 * The writer decides when to make it durable ({@link StagedFile.sync}) and when to publish it
 * ({@link StagedFile.publish}), so that several files' fsyncs can run at once and one
 * directory fsync can cover several renames.
 */
export interface StagedFile {
  /** The final path. */
  readonly path: string;
  /** The temporary path it is written to. */
  readonly tmp: string;
  /** `fdatasync`s the temporary file and closes it. Call once, before {@link publish}. */
  sync(): Promise<void>;
  /**
   * Renames the temporary file to its final path (atomically replacing a file there). Does
   * not fsync the directory: the caller does, once for all the renames it needs durable.
   */
  publish(): Promise<void>;
  /** Closes and deletes the temporary file (if not published) and releases its name. Never throws. */
  abort(): Promise<void>;
}

/** Writes `data` to a fresh temporary name next to `path` (not synced, not published). */
export const stageFile = async (path: string, data: string | Uint8Array, temps: TempFileRegistry = processTempFiles): Promise<StagedFile> =>
  (await stageFileWith(path, (fh) => writeAll(fh, [typeof data === "string" ? Buffer.from(data, "utf8") : data], 0), temps)).staged;

/**
 * Opens a fresh temporary name next to `path` and lets `write` fill it; resolves with the
 * staged file (not synced, not published) and what `write` returned. On failure the
 * temporary file is deleted.
 */
export const stageFileWith = async <T>(
  path: string,
  write: (fh: FileHandle) => Promise<T>,
  temps: TempFileRegistry = processTempFiles,
): Promise<{ staged: StagedFile; result: T }> => {
  const tmp = temps.tempPathFor(path);
  let fh: FileHandle | null = null;
  let published = false;
  const closeFh = async (): Promise<void> => {
    const f = fh;
    fh = null;
    if (f !== null) await f.close();
  };
  const abort = async (): Promise<void> => {
    await closeFh().catch(() => undefined);
    if (!published) await unlink(tmp).catch(() => undefined);
    temps.release(tmp);
  };
  let result: T;
  try {
    fh = await open(tmp, "wx", 0o644);
    result = await write(fh);
  } catch (e) {
    await abort();
    throw withPath(e, path);
  }
  const staged: StagedFile = {
    path,
    tmp,
    sync: async () => {
      const f = fh;
      if (f === null) return;
      syncCounters.files++;
      await f.datasync();
      await closeFh();
    },
    publish: async () => {
      await closeFh();
      await rename(tmp, path);
      published = true;
      temps.release(tmp);
    },
    abort,
  };
  return { staged, result };
};

/**
 * Waits for every promise (`undefined`/`null` entries are skipped) and then rethrows the
 * first rejection, if any: unlike `Promise.all`, nothing is still running when it throws.
 */
export const settleAll = async <T>(promises: readonly (Promise<T> | undefined | null)[]): Promise<T[]> => {
  const results = await Promise.allSettled(promises.filter((p): p is Promise<T> => p !== undefined && p !== null));
  const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
  if (failed !== undefined) throw failed.reason;
  return results.map((r) => (r as PromiseFulfilledResult<T>).value);
};

/** `true` if something exists at `path`. */
export const pathExists = async (path: string): Promise<boolean> => {
  try {
    await access(path);
    return true;
  } catch {
    return false;
  }
};

/** The names of the entries of `dir`; none when it does not exist (yet). */
export const readdirIfExists = async (dir: string): Promise<string[]> => {
  try {
    return await readdir(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw e;
  }
};

/** Deletes `path`; a missing file is not an error. Returns `true` if it was deleted. */
export const unlinkIfExists = async (path: string): Promise<boolean> => {
  try {
    await unlink(path);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw e;
  }
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/**
 * `true` if `fileName` is a temporary file left by an interrupted write: it carries the temp
 * marker and its writer is neither in flight in this process nor another live process.
 */
export const isStaleTemp = (dir: string, fileName: string, temps: TempFileRegistry = processTempFiles): boolean => {
  const at = fileName.lastIndexOf(TEMP_MARKER);
  if (at < 0) return false;
  if (temps.isHeld(resolve(dir, fileName))) return false;
  const m = /^(\d+)-[0-9a-f]+$/.exec(fileName.slice(at + TEMP_MARKER.length));
  if (m === null) return true; // not ours in form, but a temp name: an older or foreign leftover
  const pid = Number(m[1]);
  return pid === process.pid ? true : !isProcessAlive(pid);
};

/** `true` if a process with this pid exists (signal 0; EPERM means it exists under another user). */
export const isProcessAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
};

/** Throws `InvalidArgumentError` naming `path` if it contains a NUL byte or is empty. */
export const assertValidPath = (path: string, what = "checkpoint path"): void => {
  if (path.length === 0) throw new InvalidArgumentError(`${what} must not be empty`);
  if (path.includes("\0")) throw new InvalidArgumentError(`${what} ${JSON.stringify(path)} contains a NUL byte`);
};

/**
 * Resolves `path` (relative paths against `dir`) and checks that it stays inside `dir`.
 * Throws `InvalidArgumentError` naming the path for traversal (`../x`), absolute paths
 * elsewhere, and NUL bytes.
 */
export const resolveInside = (dir: string, path: string, what = "checkpoint path"): string => {
  assertValidPath(path, what);
  const root = resolve(dir);
  const full = resolve(root, path);
  const rel = relative(root, full);
  if (rel === "" || rel === ".." || rel.startsWith(`..${sep}`) || isAbsolute(rel)) {
    throw new InvalidArgumentError(
      `${what} ${JSON.stringify(path)} resolves to ${JSON.stringify(full)}, outside the checkpoint directory ${JSON.stringify(root)}`,
    );
  }
  return full;
};

/**
 * Checks that `name` is a single path component usable as a checkpoint base name
 * (`ckpt`, `model.ckpt`): no separators, no NUL, not `.` or `..`.
 */
export const assertPlainName = (name: string, what = "checkpoint name"): void => {
  assertValidPath(name, what);
  if (name === "." || name === ".." || name.includes("/") || name.includes("\\")) {
    throw new InvalidArgumentError(`${what} ${JSON.stringify(name)} must be a plain file name (no "/", "\\", "." or "..")`);
  }
};
