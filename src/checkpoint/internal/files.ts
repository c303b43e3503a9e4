/**
 * Durable file primitives for checkpoints: temporary names, fsync of files and directories,
 * atomic replace (temp + fsync + rename + fsync dir), and path validation.
 *
 * Temporary files are named `<final>.tmp-<pid>-<random>` so that a later cleanup can tell an
 * interrupted save (its process is gone) from one in flight (this process, or a live one).
 *
 * @module
 * @internal
 */

import { randomBytes } from "node:crypto";
import { open, rename, unlink, type FileHandle } from "node:fs/promises";
import { dirname, isAbsolute, relative, resolve, sep } from "node:path";

import { InvalidArgumentError } from "../../errors.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The marker between a final name and the temporary suffix. */
export const TEMP_MARKER = ".tmp-";

/** Temporary paths that a save of this process is writing right now (never cleaned up). */
const inFlight = new Set<string>();

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** A fresh temporary name next to `finalPath`, registered as in flight until released. */
export const tempPathFor = (finalPath: string): string => {
  const p = `${finalPath}${TEMP_MARKER}${process.pid}-${randomBytes(6).toString("hex")}`;
  hold(p);
  return p;
};

/** Marks `path` as being written by this process, so cleanup leaves it alone. */
export const hold = (path: string): void => {
  inFlight.add(resolve(path));
};

/** Marks a path (temporary or final) as no longer being written. */
export const releaseTemp = (path: string): void => {
  inFlight.delete(resolve(path));
};

/** `true` while a save of this process is writing `path`. */
export const isHeld = (path: string): boolean => inFlight.has(resolve(path));

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** fsyncs a directory so that renames and unlinks in it survive a power cut. */
export const fsyncDir = async (dir: string): Promise<void> => {
  const fh = await open(dir, "r");
  try {
    await fh.sync();
  } finally {
    await fh.close();
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
 * Replaces `path` atomically with `data`: write to a temporary name, fsync it, rename it over
 * `path`, fsync the directory. A crash leaves either the old file or the new one (and maybe a
 * temporary file that {@link isStaleTemp} recognises).
 */
export const writeFileAtomic = async (path: string, data: string | Uint8Array): Promise<void> => {
  const tmp = tempPathFor(path);
  try {
    const fh = await open(tmp, "wx", 0o644);
    try {
      await writeAll(fh, [typeof data === "string" ? Buffer.from(data, "utf8") : data], 0);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
    await fsyncDir(dirname(path));
  } catch (e) {
    await unlink(tmp).catch(() => undefined);
    throw e;
  } finally {
    releaseTemp(tmp);
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
export const isStaleTemp = (dir: string, fileName: string): boolean => {
  const at = fileName.lastIndexOf(TEMP_MARKER);
  if (at < 0) return false;
  if (inFlight.has(resolve(dir, fileName))) return false;
  const m = /^(\d+)-[0-9a-f]+$/.exec(fileName.slice(at + TEMP_MARKER.length));
  if (m === null) return true; // not ours in form, but a temp name: an older or foreign leftover
  const pid = Number(m[1]);
  return pid === process.pid ? true : !isProcessAlive(pid);
};

const isProcessAlive = (pid: number): boolean => {
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
