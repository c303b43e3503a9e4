/** What CheckpointDirLock.test.ts and CheckpointDirLock.process.test.ts share: tempDir, dir, held, acquire, writeLock, lockFile. */
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterEach, beforeEach } from "vitest";
import { CheckpointDirLock, LOCK_FILENAME, type LockHolder } from "../../src/checkpoint/index.js";
import { currentProcess } from "../../src/checkpoint/CheckpointDirLock.js";
import { useTempDirs } from "../util/tempDirs.js";

export const tempDir = useTempDirs("ms-ckpt-");

export let dir: string;
export const held: CheckpointDirLock[] = [];
beforeEach(async () => {
  dir = tempDir();
});
afterEach(async () => {
  for (const l of held.splice(0)) await l.release();
});

export const acquire = async (options: Parameters<typeof CheckpointDirLock.acquire>[1] = {}): Promise<CheckpointDirLock> => {
  const lock = await CheckpointDirLock.acquire(dir, options);
  held.push(lock);
  return lock;
};

/** Writes a lock file as another holder would. */
export const writeLock = (holder: Partial<LockHolder>): Promise<void> =>
  writeFile(
    join(dir, LOCK_FILENAME),
    JSON.stringify({
      format: "monitored-session/lock",
      version: 1,
      ...currentProcess(),
      acquiredAtMs: 1_700_000_000_000,
      refreshedAtMs: 1_700_000_000_000,
      token: "theirs",
      ...holder,
    }),
  );

export const lockFile = async (): Promise<LockHolder> => JSON.parse(await readFile(join(dir, LOCK_FILENAME), "utf8")) as LockHolder;
