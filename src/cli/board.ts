/**
 * `monitored-session board <logdir> [--port N] [--host H] [--token T]`: serves the board's page
 * (scalars, histograms, images, text, checkpoints, profiler timelines) and TensorBoard's HTTP data
 * API for `logdir` until SIGINT or SIGTERM, then closes and exits 0. It prints one line with the
 * URL to open (on every interface, `--host 0.0.0.0` or `::`, with this machine's host name);
 * images, histograms and text thinned out to stay within their per-tag budgets are reported on
 * stderr. A logdir that does not exist, a port that cannot be bound or is not one (0 to 65535),
 * or an empty `--token` is one line on stderr and exit 2.
 *
 * @module
 */

import { createRequire } from "node:module";

import { onAllInterfaces, startBoard } from "../board/BoardServer.js";
import { InvalidArgumentError, NotFoundError } from "../errors.js";
import { levelLogger } from "../Logger.js";
import { ExitCodes } from "../runtime/exitCodes.js";
import type { CliIo } from "./cliIo.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The options of `board`, as commander gives them. */
export interface BoardFlags {
  readonly port: number;
  readonly host?: string;
  readonly token?: string;
  /** Image MiB kept per run and tag before older steps are thinned out (default 32). */
  readonly imageMibPerTag?: number;
  /** Histogram MiB kept per run and tag before older steps are thinned out (default 16). */
  readonly histogramMibPerTag?: number;
  /** Text MiB kept per run and tag before older steps are thinned out (default 4). */
  readonly textMibPerTag?: number;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Runs the board until a termination signal; resolves with the exit code. */
export const boardCommand = async (logdir: string, flags: BoardFlags, io: CliIo): Promise<number> => {
  const host = flags.host ?? "127.0.0.1";
  const fail = (line: string): number => {
    io.err.write(`monitored-session board: ${line}\n`);
    return ExitCodes.usage;
  };
  let board;
  try {
    board = await startBoard(logdir, {
      host,
      port: flags.port,
      ...(flags.token === undefined ? {} : { token: flags.token }),
      ...(flags.imageMibPerTag === undefined ? {} : { imageBytesPerTag: mibToBytes(flags.imageMibPerTag) }),
      ...(flags.histogramMibPerTag === undefined ? {} : { histogramBytesPerTag: mibToBytes(flags.histogramMibPerTag) }),
      ...(flags.textMibPerTag === undefined ? {} : { textBytesPerTag: mibToBytes(flags.textMibPerTag) }),
      ...(io.clock === undefined ? {} : { clock: io.clock }),
      version: packageVersion(),
      // Its lines are events (Board.events$); this printer is their log observer.
      logger: levelLogger("warn", (_level, m) => io.err.write(`monitored-session board: ${m}\n`)),
    });
  } catch (e) {
    // The one argument startBoard checks itself is the token (requiredToken).
    if (e instanceof InvalidArgumentError && flags.token !== undefined) {
      return fail(
        `--token ${JSON.stringify(flags.token)}: ${flags.token.trim() === flags.token ? "empty" : "only whitespace"}, which is no secret; set a non-empty token (in a script, --token "\${TOKEN:?set TOKEN}" stops when TOKEN is unset), or omit --token (none is needed on loopback; on another host a random one is generated and printed)`,
      );
    }
    if (e instanceof NotFoundError) return fail(`${logdir}: no such directory (give the directory your summaries are written to, e.g. runs)`);
    const code = (e as NodeJS.ErrnoException).code;
    // Node's own check of the port (as `run --board` says it).
    if (code === "ERR_SOCKET_BAD_PORT") return fail(`--port ${flags.port}: expected a port from 0 to 65535 (0 picks a free one)`);
    if (code === "EADDRINUSE") return fail(`port ${flags.port} on ${host} is in use (a TensorBoard or another board?); pass --port <another port>, or --port 0 for a free one`);
    if (code === "EACCES") return fail(`port ${flags.port} on ${host} needs privileges; pass --port with a number above 1023`);
    if (code === "EADDRNOTAVAIL" || code === "ENOTFOUND" || code === "EAI_AGAIN") return fail(`cannot bind ${host}: not an address of this machine; pass --host with one (or leave it out for 127.0.0.1)`);
    throw e;
  }
  const where = onAllInterfaces(host) ? ` on all interfaces (${host === "" ? "every address" : host})` : "";
  io.err.write(`monitored-session board: serving ${logdir}${where}${board.token === undefined ? "" : " (token required)"}; press Ctrl-C to stop\n`);
  io.out.write(`${board.url}\n`);
  io.onStarted?.();
  const proc = io.noticeProcess ?? process;
  await new Promise<void>((resolve) => {
    const stop = (): void => {
      for (const s of SIGNALS) proc.off(s, stop);
      resolve();
    };
    for (const s of SIGNALS) proc.on(s, stop);
  });
  await board.close();
  return ExitCodes.done;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const SIGNALS: readonly NodeJS.Signals[] = ["SIGINT", "SIGTERM"];

/** MiB to bytes, at least 1 (a tiny positive MiB must not round to a refused 0). */
const mibToBytes = (mib: number): number => Math.max(1, Math.round(mib * (1 << 20)));

/** This package's version, for `/data/environment` (from src/cli/ and dist/src/cli/ alike). */
const packageVersion = (): string => {
  const require = createRequire(import.meta.url);
  for (const p of ["../../package.json", "../../../package.json"]) {
    try {
      const pkg = require(p) as { name?: string; version?: string };
      if (pkg.name === "monitored-session" && typeof pkg.version === "string") return pkg.version;
    } catch {
      // not at this depth
    }
  }
  return "";
};
