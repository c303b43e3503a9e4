#!/usr/bin/env node
/**
 * The `monitored-session` executable: `npx tsx src/cli/main.ts run config.yaml`, or the
 * package's `bin` once built.
 *
 * Termination signals are caught first, before the rest of the program loads (loading
 * TensorFlow.js takes seconds): one that arrives meanwhile is replayed to the command as a
 * termination notice instead of killing the process with 143, so a restart loop goes on. The
 * handlers stay to the end: while the command runs, its own handlers act and these do nothing;
 * once it has removed its own (it is closing down), a late signal neither kills the process
 * with 143 nor changes the exit code the command decides, and once that code is known a signal
 * exits with it at once instead of waiting for the output to drain.
 *
 * An error that nothing caught (one `main` rejects with, or one thrown or rejected outside it) is
 * one line, `monitored-session: <error>`, and exit 1; `--verbose` adds its stack.
 *
 * @module
 */

import { ExitCodes } from "../runtime/exitCodes.js";
import { LAUNCH_READY_ENV, LAUNCH_READY_LINE } from "../runtime/launchReady.js";
import { failureMessage } from "./faults.js";
import { jsonLine } from "./logFormat.js";
import { STANDBY_ENV, standBy } from "./standby.js";
import { systemClock } from "../time/Clock.js";

const argv = process.argv.slice(2);
// The command's own flags: a task command's, after `launch … --`, are not ours.
const ownFlags = argv.includes("--") ? argv.slice(0, argv.indexOf("--")) : argv;
const verbose = ownFlags.includes("--verbose");
const json = ownFlags.some((a, i) => a === "--log-format=json" || (a === "--log-format" && ownFlags[i + 1] === "json"));
/** Reports an error nothing caught; returns the exit code. */
const unexpected = (e: unknown): number => {
  const withStack = failureMessage(e, true, "monitored-session");
  // Only run and launch take --verbose: the line offers it there alone.
  const line = argv[0] === "run" || argv[0] === "launch" ? failureMessage(e, false, "monitored-session") : `${withStack.split("\n")[0] ?? ""}\n`;
  const text = verbose ? withStack : line;
  process.stderr.write(json ? jsonLine(systemClock.now(), { ...(argv[0] === "launch" ? { task: "launch" } : {}), level: "error", message: text.trimEnd() }) : text);
  return ExitCodes.failure;
};
// An unhandled rejection comes here too (Node raises it as an uncaught exception).
process.on("uncaughtException", (e) => process.exit(unexpected(e)));

// A standby of `launch` (src/cli/standby.ts): `run`'s modules load now, and the task
// starts when launch hands it a group (or the process ends without a word when launch is done).
let startMs: number | undefined;
if (argv[0] === "run" && process.env[STANDBY_ENV] === "1" && process.env[LAUNCH_READY_ENV] === "1") {
  const outcome = await standBy(process.stdin, process.env, preloadRun, () => systemClock.now());
  if (!outcome.go) {
    if (outcome.line !== undefined) process.stderr.write(json ? jsonLine(systemClock.now(), { level: "error", message: outcome.line }) : `${outcome.line}\n`);
    process.exit(outcome.code);
  }
  startMs = outcome.startMs;
  // The go is the last thing launch writes there.
  process.stdin.destroy();
}

const earlySignals: NodeJS.Signals[] = [];
/** Whether the command has its own handlers (from then on, signals are its business). */
let handedOver = false;
/** The command's exit code, once it has returned. */
let decided: number | undefined;
const catchEarly = (signal: NodeJS.Signals): void => {
  if (decided !== undefined) process.exit(decided);
  if (!handedOver) earlySignals.push(signal);
};
// Only `run` and `launch` (which forwards them to its tasks) watch them; `inspect` and `--help`
// keep Node's default handling.
const early = argv[0] === "run" || argv[0] === "launch" ? (["SIGTERM", "SIGINT", "SIGHUP"] as const) : [];
for (const s of early) process.on(s, catchEarly);
// Under `launch`: from here on a signal is a termination notice, so launch may forward one.
if (early.length > 0 && process.env[LAUNCH_READY_ENV] === "1") process.stderr.write(`${LAUNCH_READY_LINE}\n`);

const { main } = await import("./program.js");
const code = await main(argv, {
  out: process.stdout,
  err: process.stderr,
  env: process.env,
  isTTY: process.stdout.isTTY === true,
  earlySignals,
  ...(startMs === undefined ? {} : { processStartMs: startMs }),
  exit: (c) => process.exit(c),
  // The command installs its own handlers first; the early ones then only guard its last moments.
  onStarted: () => {
    handedOver = true;
  },
}).catch(unexpected);
decided = code;
// Exit once the output is flushed (a pipe may still hold it); background work is abandoned, as
// after TensorFlow's exit_fn (checkpoint writes are atomic, leftovers are cleaned at the next start).
process.stdout.write("", () => process.stderr.write("", () => process.exit(code)));

/**
 * What `run` loads before its first step, loaded by a standby while it waits (each failure is
 * left for the start itself to report). TensorFlow.js itself, not its WASM backend: importing that
 * registers it above `cpu`, so a job that does not name its backend would get another one than
 * a fresh start gives it.
 */
async function preloadRun(): Promise<unknown> {
  // The default coordination backend's implementation too (its registration loads it only when a task connects).
  return Promise.allSettled([import("./program.js"), import("./run.js"), import("./clusterJoin.js"), import("../cluster/coordination/embeddedConnect.js"), import("../tfjs/backend.js")]);
}
