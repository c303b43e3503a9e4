/**
 * `confineToLogdir`: the one gate of every board route that will serve a file (images, profiler
 * timelines): a path taken from a request becomes a real file path only if it stays inside the
 * logdir after decoding and after following symbolic links. Nothing else may turn request input
 * into a path.
 *
 * Refused: a path that does not decode (`%E0%A4%A`), a NUL byte, an absolute path (`/etc/passwd`,
 * `%2Fetc%2Fpasswd`, `C:\…`, `\\server\share`), any `..` segment (`..`, `%2e%2e`, `a/..%2F..`),
 * and a path whose real location (symbolic links resolved) is outside the logdir's real
 * location, or does not exist. The reader follows links only inside the logdir too
 * (`findRuns`), so a run found through a link inside the logdir is served, and one pointing out
 * is not.
 *
 * @example
 * ```ts
 * import { confineToLogdir } from "./confineToLogdir.js";
 *
 * const r = await confineToLogdir("runs", "exp1/plugins/profile/trace.json.gz");
 * if (r._tag === "Right") console.log("serve", r.right);
 * else console.log("refused:", r.left);
 * ```
 *
 * @module
 */

import * as E from "fp-ts/lib/Either.js";
import { realpath } from "node:fs/promises";
import { isAbsolute, join, sep } from "node:path";

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Decodes `requested` (a percent-encoded path relative to the logdir, as it stands in a URL) and
 * resolves it inside `logdir`: `Right` with the real path of an existing file or directory inside
 * the logdir, or `Left` with why not (a message safe to log, not meant for the client).
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
