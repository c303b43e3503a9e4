/**
 * Test setup of the unit project (vitest `setupFiles`). A unit test uses no real process and no
 * real time; this guard enforces the first half. Every way `node:child_process` starts a process
 * (`spawn`, `fork`, `exec*`, `execFile*`, `spawnSync`) is replaced, for the ESM named imports too
 * (`syncBuiltinESMExports`), by a function that throws {@link ProcessGuardError} naming the fix: a
 * test that needs real processes is a process test, named `*.process.test.ts`. A test that
 * depends on wall-clock time (worker threads, sockets with deadlines, real heartbeats) is named
 * `*.realtime.test.ts`. The integration project runs both (vitest.config.ts).
 */

import { createRequire, syncBuiltinESMExports } from "node:module";

/** Thrown when a unit test starts a process. */
export class ProcessGuardError extends Error {
  override readonly name = "ProcessGuardError";
}

/** The functions of `node:child_process` that start a process. */
export const PROCESS_STARTERS = ["spawn", "spawnSync", "fork", "exec", "execSync", "execFile", "execFileSync"] as const;

const childProcess = createRequire(import.meta.url)("node:child_process") as Record<string, unknown>;
for (const name of PROCESS_STARTERS) {
  childProcess[name] = (command: unknown): never => {
    throw new ProcessGuardError(
      `a unit test started a process (child_process.${name}(${JSON.stringify(String(command))})): a test that needs real processes belongs in a *.process.test.ts file, which the integration project runs`,
    );
  };
}
syncBuiltinESMExports();
