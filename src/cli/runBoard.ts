/**
 * `run --board`: the board beside training, in a process of its own, so that whatever the board
 * meets — a hostile event file, a bug, memory it runs out of, a native abort no `catch` can
 * stop — training goes on. The run forks this module; the child serves `monitored-session
 * board` on the summaries and tells the run over the IPC channel what it would have printed:
 * its URL, each issue of its reader (one `WARN board: …` line each), or why it could not serve.
 * A board that fails or dies is one warning line, and the run's exit code stays the training's.
 *
 * The child lives as long as the channel: the run closes it at its end (or dies), and the child
 * closes the board and exits. Termination signals are the run's business (a Ctrl-C reaches the
 * whole process group): the child ignores them.
 *
 * @module
 */

import { fork, type ChildProcess } from "node:child_process";
import { mkdir } from "node:fs/promises";
import type { Socket } from "node:net";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { isLeft } from "fp-ts/lib/Either.js";
import * as t from "io-ts";

import type { Clock, TimerHandle } from "../time/Clock.js";
import type { Logger } from "../Logger.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The board beside a run. */
export interface BoardBeside {
  /** Stops the board (closing its process) and resolves once its process has exited; never rejects. */
  close(): Promise<void>;
}

/** What the board's process tells the run. */
const BoardMessage = t.union([
  t.type({ kind: t.literal("listening"), url: t.string }),
  t.type({ kind: t.literal("issue"), message: t.string }),
  t.type({ kind: t.literal("failed"), message: t.string, code: t.union([t.string, t.undefined]) }),
]);
type BoardMessage = t.TypeOf<typeof BoardMessage>;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Starts the board on `logdir` (made if missing) and `port` (0: a free one) in a child process,
 * and returns at once: training does not wait for it. Its URL, its issues and its failure are
 * logged on `logger` as they come.
 */
export const startBoardBeside = (logdir: string, port: number, logger: Logger, clock: Clock): BoardBeside => {
  let closing = false;
  /** Set once the board's end was reported (a failure to serve, or its process gone): nothing more is. */
  let ended = false;
  const fail = (why: string): void => {
    if (closing || ended) return;
    ended = true;
    logger.warn(`The board ${why}; training goes on without it.`);
  };
  let child: ChildProcess;
  try {
    child = fork(THIS_MODULE, [logdir, String(port)], {
      execArgv: process.execArgv.filter((a) => !/^--inspect(?:-brk|-port)?(?:=|$)/.test(a)),
      env: { ...process.env, [CHILD_ENV]: "1" },
      stdio: ["ignore", "ignore", "pipe", "ipc"],
      serialization: "json",
    });
  } catch (e) {
    fail(`could not start: ${e instanceof Error ? e.message : String(e)}`);
    return { close: () => Promise.resolve() };
  }
  // What the process printed last, to say why it died (a native abort, a heap limit).
  let stderrTail = "";
  child.stderr?.setEncoding("utf8").on("data", (d: string) => {
    stderrTail = (stderrTail + d).slice(-STDERR_TAIL_CHARS);
  });
  child.on("message", (raw: unknown) => {
    const decoded = BoardMessage.decode(raw);
    if (isLeft(decoded)) {
      logger.warn(`board: an unexpected message from its process: ${JSON.stringify(raw)}`);
      return;
    }
    const m: BoardMessage = decoded.right;
    if (closing || ended) return;
    if (m.kind === "listening") logger.info(`Board: ${m.url} (monitored-session board ${logdir})`);
    else if (m.kind === "issue") logger.warn(`board: ${m.message}`);
    else fail(`could not serve ${logdir}${m.code === "EADDRINUSE" ? ` (port ${port} is in use: give another with --board <port>, or 0 for a free one)` : `: ${m.message}`}`);
  });
  // Its end is its exit and the end of its channel, which comes after the messages it sent. (Not
  // "close": that waits for every holder of its stderr, and a loader's helper process may outlive it.)
  const disconnected = new Promise<void>((resolveDisconnect) => child.once("disconnect", resolveDisconnect));
  const exited = new Promise<void>((resolveExit) => {
    child.once("exit", (code, signal) => {
      void disconnected.then(() => {
        child.stderr?.destroy();
        const last = stderrTail.trim().split("\n").at(-1) ?? "";
        fail(`stopped (${signal === null ? `exit code ${code}` : `killed by ${signal}`}${last === "" ? "" : `: ${last}`})`);
        resolveExit();
      });
    });
    child.on("error", (e) => {
      fail(`stopped: ${e.message}`);
      // A process that never started never exits.
      if (child.pid === undefined) resolveExit();
    });
  });
  // The board never keeps a finished run alive.
  child.unref();
  child.channel?.unref();
  (child.stderr as Socket | null)?.unref();
  return {
    async close(): Promise<void> {
      if (closing) return exited;
      closing = true;
      if (child.exitCode !== null || child.signalCode !== null) return exited;
      // Waited for now: the process holds the loop open.
      child.ref();
      // Closing the channel asks the board to close; one that does not is killed, and the run
      // waits no longer than that.
      let timers: TimerHandle[] = [];
      const givenUp = new Promise<void>((giveUp) => {
        timers = [clock.setTimer(CLOSE_GRACE_MS, () => child.kill("SIGKILL")), clock.setTimer(2 * CLOSE_GRACE_MS, giveUp)];
      });
      if (child.connected) child.disconnect();
      else child.kill("SIGKILL");
      await Promise.race([exited, givenUp]);
      for (const t of timers) t.cancel();
    },
  };
};

// ---------------------------------------------------------------------------------------------
// operations (the board's process)
// ---------------------------------------------------------------------------------------------

/** Serves the board for the run that forked this process, until the channel to it closes. */
const serveForRun = async (logdir: string, port: number): Promise<void> => {
  /** Sends `m` to the run; resolves once it is written (or the channel is gone). */
  const tell = (m: BoardMessage): Promise<void> =>
    new Promise((sent) => {
      if (process.connected && process.send !== undefined) process.send(m, undefined, {}, () => sent());
      else sent();
    });
  // Ctrl-C reaches the process group: the run decides what it means, and closes the channel.
  for (const s of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(s, () => undefined);
  let close: () => Promise<void> = () => Promise.resolve();
  process.on("disconnect", () => {
    close().then(
      () => process.exit(0),
      (e: unknown) => {
        process.stderr.write(`closing the board failed: ${String(e)}\n`);
        process.exit(1);
      },
    );
  });
  try {
    await mkdir(logdir, { recursive: true });
    const { startBoard } = await import("../board/BoardServer.js");
    const board = await startBoard(logdir, { port, onIssue: (message) => void tell({ kind: "issue", message }) });
    close = () => board.close();
    await tell({ kind: "listening", url: board.url });
  } catch (e) {
    await tell({ kind: "failed", message: e instanceof Error ? e.message : String(e), code: (e as NodeJS.ErrnoException).code });
    if (process.connected) process.disconnect();
  }
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const THIS_MODULE = fileURLToPath(import.meta.url);

/** Set in the board's process, with this module as its entry point. */
const CHILD_ENV = "MONITORED_SESSION_BOARD_BESIDE_RUN";

/** How long a closed board may take to exit before it is killed, ms. */
const CLOSE_GRACE_MS = 5_000;

/** How much of the board process's last output is kept, to say why it died. */
const STDERR_TAIL_CHARS = 2_000;

if (process.env[CHILD_ENV] === "1" && process.argv[1] !== undefined && resolve(process.argv[1]) === THIS_MODULE && process.send !== undefined) {
  void serveForRun(process.argv[2] ?? ".", Number(process.argv[3] ?? 0));
}
