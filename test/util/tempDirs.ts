/** Temporary directories for tests, removed after each test. */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach } from "vitest";

/**
 * Registers cleanup for the calling test file and returns a function that makes a new
 * temporary directory (under `base`, the system's temporary directory by default); every
 * directory made during a test is removed after it (retries cover a background write that
 * finishes while the directory is being removed).
 */
export const useTempDirs = (prefix = "monitored-session-test-", base = tmpdir()): (() => string) => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true, maxRetries: 5, retryDelay: 20 });
  });
  return () => {
    const d = mkdtempSync(join(base, prefix));
    dirs.push(d);
    return d;
  };
};
