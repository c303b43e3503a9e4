#!/usr/bin/env node
/**
 * The `monitored-session` executable: `npx tsx src/cli/main.ts run config.yaml`, or the
 * package's `bin` once built.
 *
 * @module
 */

import { main } from "./program.js";

const code = await main(process.argv.slice(2), {
  out: process.stdout,
  err: process.stderr,
  env: process.env,
  isTTY: process.stdout.isTTY === true,
}).catch((e: unknown) => {
  process.stderr.write(`monitored-session: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  return 1;
});
// Exit once the output is flushed (a pipe may still hold it); background work is abandoned, as
// after TensorFlow's exit_fn (checkpoint writes are atomic, leftovers are cleaned at the next start).
process.stdout.write("", () => process.stderr.write("", () => process.exit(code)));
