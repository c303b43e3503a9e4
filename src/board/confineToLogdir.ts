/**
 * `confineToLogdir`: the one gate of every board route that will serve a file (today the profiler
 * timelines): a path taken from a request becomes a real file path only if it stays inside the
 * logdir after decoding and after following symbolic links. Nothing else may turn request input
 * into a path, and nothing else may read the file: {@link readConfinedFile} opens it once,
 * without following a link, and serves the bytes of that one open file only if it is the file
 * the gate resolved.
 *
 * Refused: a path that does not decode (`%E0%A4%A`), a NUL byte, an absolute path (`/etc/passwd`,
 * `%2Fetc%2Fpasswd`, `C:\…`, `\\server\share`), any `..` segment (`..`, `%2e%2e`, `a/..%2F..`),
 * and a path whose real location (symbolic links resolved) is outside the logdir's real
 * location, or does not exist. The reader follows links only inside the logdir too
 * (`findRuns`), so a run found through a link inside the logdir is served, and one pointing out
 * is not.
 *
 * Resolving a path and then reading it is a race: whoever can write in the logdir can put a link
 * (or another file) in the file's place between the two. So {@link confineFile} records the
 * resolved file's identity (device and inode, from `lstat` of the real path), and
 * {@link readConfinedFile} opens the real path with `O_NOFOLLOW` (a link put in place of the last
 * component fails to open), `O_NONBLOCK` (a FIFO put there cannot hang the open), checks that
 * the open file is a regular file with that same identity, and on Linux that the kernel's path
 * of the open file (`/proc/self/fd/N`) is the resolved path (a directory swapped for a link on
 * the way is caught too), then reads from that handle, at most `maxBytes`.
 *
 * @example
 * ```ts
 * import { confineFile, readConfinedFile } from "./confineToLogdir.js";
 *
 * const file = await confineFile("runs", "exp1/timeline-5.json");
 * if (file._tag === "Right") {
 *   const bytes = await readConfinedFile(file.right, 1 << 20);
 *   if (bytes._tag === "Right") console.log("serve", bytes.right.length, "bytes");
 * }
 * ```
 *
 * @module
 */

import * as E from "fp-ts/lib/Either.js";
import { constants } from "node:fs";
import { type FileHandle, lstat, open, readlink, realpath } from "node:fs/promises";
import { isAbsolute, join, sep } from "node:path";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A regular file inside the logdir, as {@link confineFile} resolved it: its real path and its identity then. */
export interface ConfinedFile {
  /** The real path (links resolved), inside the logdir's real path. */
  readonly path: string;
  /** `st_dev` when resolved. */
  readonly dev: bigint;
  /** `st_ino` when resolved. */
  readonly ino: bigint;
}

/**
 * Why {@link readConfinedFile} read nothing. `notable` is `true` when it is worth a line in the
 * log (the file changed under the gate, or is over the size bound), `false` for an ordinary miss
 * (the file is gone).
 */
export interface ReadRefusal {
  readonly notable: boolean;
  /** Safe to log, not meant for the client. */
  readonly reason: string;
}

/**
 * The flags the file is opened with: read only, not through a link at the last component (the
 * flag is 0 where the platform has none: Windows; the identity check stands alone there), and
 * without blocking on a FIFO.
 */
const OPEN_FLAGS = constants.O_RDONLY | (constants.O_NOFOLLOW ?? 0) | (constants.O_NONBLOCK ?? 0);

/** How much one `read` asks for. */
const READ_CHUNK_BYTES = 1 << 16;

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Decodes `requested` (a percent-encoded path relative to the logdir, as it stands in a URL) and
 * resolves it inside `logdir`: `Right` with the real path of an existing file or directory inside
 * the logdir, or `Left` with why not (a message safe to log, not meant for the client). To read
 * the file, use {@link confineFile} and {@link readConfinedFile}, never this path.
 */
export const confineToLogdir = async (logdir: string, requested: string): Promise<E.Either<string, string>> => {
  let decoded: string;
  try {
    decoded = decodeURIComponent(requested);
  } catch {
    return E.left(`not a valid percent-encoded path: ${JSON.stringify(requested)}`);
  }
  if (decoded.includes("\0")) return E.left("a NUL byte in the path");
  if (decoded === "" || decoded.startsWith("/") || decoded.startsWith("\\") || /^[A-Za-z]:/.test(decoded) || isAbsolute(decoded)) {
    return E.left(`not a relative path: ${JSON.stringify(decoded)}`);
  }
  if (decoded.split(/[\\/]/).includes("..")) return E.left(`a ".." segment: ${JSON.stringify(decoded)}`);
  let root: string;
  let real: string;
  try {
    root = await realpath(logdir);
    real = await realpath(join(root, decoded));
  } catch (e) {
    return E.left(`${JSON.stringify(decoded)}: ${(e as NodeJS.ErrnoException).code ?? String(e)}`);
  }
  if (real !== root && !real.startsWith(root.endsWith(sep) ? root : root + sep)) {
    return E.left(`${JSON.stringify(decoded)} resolves to ${real}, outside the logdir ${root}`);
  }
  return E.right(real);
};

/**
 * {@link confineToLogdir}, for a regular file: `Right` with its real path and its identity (from
 * `lstat` of the real path), for {@link readConfinedFile}; `Left` with why not (not inside, gone,
 * not a regular file).
 */
export const confineFile = async (logdir: string, requested: string): Promise<E.Either<string, ConfinedFile>> => {
  const real = await confineToLogdir(logdir, requested);
  if (E.isLeft(real)) return real;
  const s = await lstat(real.right, { bigint: true }).catch((e: NodeJS.ErrnoException) => e.code ?? String(e));
  if (typeof s === "string") return E.left(`${real.right}: ${s}`);
  if (!s.isFile()) return E.left(`${real.right}: not a regular file`);
  return E.right({ path: real.right, dev: s.dev, ino: s.ino });
};

/**
 * Opens `file` once (`O_NOFOLLOW`, `O_NONBLOCK`) and reads it from that handle: `Right` with its
 * bytes only if the open file is a regular file with the identity {@link confineFile} recorded
 * (and, on Linux, the kernel's path of the open file is `file.path`) and holds at most
 * `maxBytes`; `Left` otherwise. Nothing of a file that fails a check is returned.
 */
export const readConfinedFile = async (file: ConfinedFile, maxBytes: number): Promise<E.Either<ReadRefusal, Buffer>> => {
  let fh: FileHandle;
  try {
    fh = await open(file.path, OPEN_FLAGS);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? String(e);
    // ELOOP (EMLINK on the BSDs): the last component is a link now, put there since it was resolved.
    if (code === "ELOOP" || code === "EMLINK") return E.left(changed(file, "a symbolic link was put in its place"));
    return E.left({ notable: false, reason: `${file.path}: ${code}` });
  }
  try {
    const s = await fh.stat({ bigint: true });
    if (!s.isFile() || s.dev !== file.dev || s.ino !== file.ino) return E.left(changed(file, "the file opened is not the one resolved"));
    if (!(await openedAt(fh, file.path))) return E.left(changed(file, "the file opened is elsewhere (a directory on its path was swapped)"));
    if (s.size > BigInt(maxBytes)) return E.left(tooLarge(file, maxBytes));
    const bytes = await readAtMost(fh, maxBytes + 1);
    return bytes.length > maxBytes ? E.left(tooLarge(file, maxBytes)) : E.right(bytes);
  } finally {
    await fh.close();
  }
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const changed = (file: ConfinedFile, what: string): ReadRefusal => ({ notable: true, reason: `${file.path} changed between resolving and opening it: ${what}; refused` });

const tooLarge = (file: ConfinedFile, maxBytes: number): ReadRefusal => ({ notable: true, reason: `${file.path} holds more than the ${maxBytes} bytes served; refused` });

/**
 * On Linux, whether the kernel's path of the open file is `path`: a directory on the way that
 * became a link after `path` was resolved leads elsewhere, and the identity taken then could
 * already be the other file's. `true` where there is no `/proc` (the identity check stands alone).
 */
const openedAt = async (fh: FileHandle, path: string): Promise<boolean> => {
  if (process.platform !== "linux") return true;
  const opened = await readlink(`/proc/self/fd/${fh.fd}`).catch(() => undefined);
  return opened === undefined || opened === path;
};

/** At most `limit` bytes of `fh`, from its start. */
const readAtMost = async (fh: FileHandle, limit: number): Promise<Buffer> => {
  const chunks: Buffer[] = [];
  let total = 0;
  while (total < limit) {
    const chunk = Buffer.alloc(Math.min(READ_CHUNK_BYTES, limit - total));
    const { bytesRead } = await fh.read(chunk, 0, chunk.length, total);
    if (bytesRead === 0) break;
    chunks.push(chunk.subarray(0, bytesRead));
    total += bytesRead;
  }
  return Buffer.concat(chunks, total);
};
