#!/usr/bin/env node
/**
 * The `monitored-session` executable: `npx tsx src/cli/main.ts run config.yaml`, or the
 * package's `bin` once built.
 *
 * Termination signals are caught first, before the rest of the program loads (loading
 * TensorFlow.js takes seconds): one that arrives meanwhile is replayed to the command as a
 * termination notice instead of killing the process with 143, so a restart loop goes on.
 *
 * @module
 */

import { LAUNCH_READY_ENV, LAUNCH_READY_LINE } from "./launchReady.js";

const earlySignals: NodeJS.Signals[] = [];
const catchEarly = (signal: NodeJS.Signals): void => {
  earlySignals.push(signal);
};
// Only `run` and `launch` (which forwards them to its tasks) watch them; `inspect` and `--help`
// keep Node's default handling.
const early = process.argv[2] === "run" || process.argv[2] === "launch" ? (["SIGTERM", "SIGINT", "SIGHUP"] as const) : [];
for (const s of early) process.on(s, catchEarly);
// Under `launch`: from here on a signal is a termination notice, so launch may forward one.
if (early.length > 0 && process.env[LAUNCH_READY_ENV] === "1") process.stderr.write(`${LAUNCH_READY_LINE}\n`);

const { main } = await import("./program.js");
const code = await main(process.argv.slice(2), {
  out: process.stdout,
  err: process.stderr,
  env: process.env,
  isTTY: process.stdout.isTTY === true,
  earlySignals,
  exit: (c) => process.exit(c),
  // The command installs its own handlers first; the early ones go once it has them.
  onStarted: () => {
    for (const s of early) process.off(s, catchEarly);
  },
}).catch((e: unknown) => {
  process.stderr.write(`monitored-session: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  return 1;
});
// Exit once the output is flushed (a pipe may still hold it); background work is abandoned, as
// after TensorFlow's exit_fn (checkpoint writes are atomic, leftovers are cleaned at the next start).
process.stdout.write("", () => process.stderr.write("", () => process.exit(code)));
