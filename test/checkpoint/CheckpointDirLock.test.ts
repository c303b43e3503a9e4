/**
 * The checkpoint directory lock: one writer per directory. Another process (a real child),
 * another session of this process, a dead holder (taken over), a holder on another host (a
 * lease, expired on the virtual clock), and the race of two takers.
 */
import { execFileSync, spawn } from "node:child_process";
import { readFile, readdir, writeFile } from "node:fs/promises";
import { hostname } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";

import {
  CheckpointDirInUseError,
  CheckpointDirLock,
  CheckpointManager,
  LOCK_FILENAME,
  type LockHolder,
} from "../../src/checkpoint/index.js";
import { currentProcess } from "../../src/checkpoint/CheckpointDirLock.js";
import { tensor } from "../../src/Tensor.js";
import { VirtualClock } from "../../src/testing/index.js";
import { useTempDirs } from "../util/tempDirs.js";
import { RecordingLogger } from "../../src/testing/RecordingLogger.js";

const root = resolve(fileURLToPath(new URL("../..", import.meta.url)));
const child = join(root, "test/fixtures/checkpoint/lock-child.ts");

const tempDir = useTempDirs("ms-ckpt-");

let dir: string;
const held: CheckpointDirLock[] = [];
beforeEach(async () => {
  dir = tempDir();
});
afterEach(async () => {
  for (const l of held.splice(0)) await l.release();
});

const acquire = async (options: Parameters<typeof CheckpointDirLock.acquire>[1] = {}): Promise<CheckpointDirLock> => {
  const lock = await CheckpointDirLock.acquire(dir, options);
  held.push(lock);
  return lock;
};

/** Writes a lock file as another holder would. */
const writeLock = (holder: Partial<LockHolder>): Promise<void> =>
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

const lockFile = async (): Promise<LockHolder> => JSON.parse(await readFile(join(dir, LOCK_FILENAME), "utf8")) as LockHolder;

/** The pid of a process that has exited. */
const deadPid = (): number => Number(execFileSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], { encoding: "utf8" }));

const values = () => new Map([["w", tensor("float32", [2], Float32Array.of(1, 2))]]);

describe("CheckpointDirLock", () => {
  it("records pid, host, start time and boot id; a second acquisition in this process fails naming it, until released", async () => {
    const lock = await acquire();
    const onDisk = await lockFile();
    expect(onDisk).toMatchObject({ pid: process.pid, hostname: hostname(), token: lock.holder.token });
    if (process.platform === "linux") {
      expect(onDisk.bootId).toMatch(/^[0-9a-f-]{36}$/);
      expect(onDisk.startTime).toMatch(/^\d+$/);
    }
    const second = CheckpointDirLock.acquire(dir);
    await expect(second).rejects.toThrow(CheckpointDirInUseError);
    await expect(second).rejects.toThrow(
      new RegExp(`^${dir} is in use by pid ${process.pid} on host ${hostname()} since \\d\\d:\\d\\d:\\d\\d \\(this process: hand the owner's CheckpointManager`),
    );
    await lock.release();
    expect(await readdir(dir)).toEqual([]);
    await acquire();
  });

  it("a lock of a process that is gone (same host and boot) is taken over with a warning naming it", async () => {
    const pid = deadPid();
    await writeLock({ pid, startTime: "1" });
    // What a writer killed while taking or refreshing the lock leaves: removed once the lock is taken.
    await writeFile(join(dir, `${LOCK_FILENAME}.tmp-${pid}-abcdef`), "{}");
    const logger = new RecordingLogger();
    const lock = await acquire({ logger });
    expect(lock.holder.pid).toBe(process.pid);
    expect((await lockFile()).token).toBe(lock.holder.token);
    expect(logger.messages("warn")).toEqual([expect.stringMatching(new RegExp(`^Took over .*${LOCK_FILENAME} from pid ${pid} on host ${hostname()} .*process ${pid} is gone`))]);
    expect(await readdir(dir)).toEqual([LOCK_FILENAME]);
  });

  it.runIf(process.platform === "linux")("a live pid that started at another time is another process: its lock is stale", async () => {
    await writeLock({ pid: process.pid, startTime: "1" });
    const logger = new RecordingLogger();
    await acquire({ logger });
    expect(logger.messages("warn")[0]).toContain(`pid ${process.pid} now belongs to another process`);
  });

  it("a lock from another host is a lease: held while refreshed, taken over after the timeout (virtual clock)", async () => {
    const clock = new VirtualClock();
    await writeLock({ hostname: "other-host", bootId: "b", pid: 4242, acquiredAtMs: clock.now(), refreshedAtMs: clock.now() });
    await expect(acquire({ clock, leaseTimeoutSecs: 30 })).rejects.toThrow(/is in use by pid 4242 on host other-host since .*; stop that process/);
    clock.set(clock.now() + 30_000);
    await expect(acquire({ clock, leaseTimeoutSecs: 30 })).rejects.toThrow(CheckpointDirInUseError);
    clock.set(clock.now() + 1_000);
    const logger = new RecordingLogger();
    await acquire({ clock, leaseTimeoutSecs: 30, logger });
    expect(logger.messages("warn")).toEqual([expect.stringMatching(/from pid 4242 on host other-host .*last refreshed 31 s ago \(lease timeout 30 s\)/)]);
  });

  it("the holder refreshes its lease on the clock, so another host does not take it over", async () => {
    const clock = new VirtualClock();
    const lock = await acquire({ clock, leaseTimeoutSecs: 30, refreshSecs: 10 });
    const elsewhere = { ...currentProcess(), hostname: "other-host", bootId: "b" };
    for (let i = 1; i <= 6; i++) {
      await clock.advanceSecs(10);
      // The refresh is real file I/O on libuv's thread pool, which the other test files of this
      // process share: wait for it with a deadline far beyond any I/O, not a count of turns.
      const due = clock.now();
      await vi.waitFor(async () => expect((await lockFile()).refreshedAtMs).toBe(due), { timeout: 30_000, interval: 5 });
    }
    await expect(CheckpointDirLock.acquire(dir, { clock, leaseTimeoutSecs: 30, identity: elsewhere })).rejects.toThrow(CheckpointDirInUseError);
    await lock.release();
    expect(clock.pendingTimers).toBe(0);
  });

  it("two processes taking over one stale lock at once: exactly one wins, the other is told who", async () => {
    for (let round = 0; round < 20; round++) {
      await writeLock({ pid: deadPid(), hostname: hostname(), refreshedAtMs: 0 });
      const a = currentProcess();
      const b = { ...a, hostname: "twin" }; // another host's view: the stale lock is an expired lease
      const results = await Promise.allSettled([
        CheckpointDirLock.acquire(dir, { identity: a, logger: new RecordingLogger() }),
        CheckpointDirLock.acquire(dir, { identity: b, logger: new RecordingLogger() }),
      ]);
      const won = results.filter((r): r is PromiseFulfilledResult<CheckpointDirLock> => r.status === "fulfilled");
      expect(won, `round ${round}`).toHaveLength(1);
      const lost = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
      expect(lost?.reason).toBeInstanceOf(CheckpointDirInUseError);
      const winner = (won[0] as PromiseFulfilledResult<CheckpointDirLock>).value;
      expect((lost?.reason as CheckpointDirInUseError).holder.token).toBe(winner.holder.token);
      expect((await lockFile()).token).toBe(winner.holder.token);
      await winner.release();
      expect((await readdir(dir)).filter((f) => f !== "checkpoint")).toEqual([]);
    }
  });

  it("a writer whose lock was taken over fails its next save, naming the new holder, and records nothing", async () => {
    const manager = await CheckpointManager.create({ directory: dir, logger: new RecordingLogger() });
    await manager.save(values(), { checkpointNumber: 1 });
    const state = await readFile(join(dir, "checkpoint"), "utf8");
    await writeLock({ hostname: "other-host", bootId: "b", pid: 4242, token: "usurper" });
    await expect(manager.save(values(), { checkpointNumber: 2 })).rejects.toThrow(/in use by pid 4242 on host other-host/);
    expect(await readFile(join(dir, "checkpoint"), "utf8")).toBe(state);
    expect((await readdir(dir)).filter((f) => f.startsWith("ckpt-2"))).toEqual([]);
    await manager.close();
    expect((await lockFile()).token).toBe("usurper"); // not ours to delete
  });
});

describe("a second process on a checkpoint directory in use", () => {
  it("fails before it writes anything, with one line naming the holder (a real child process)", async () => {
    const manager = await CheckpointManager.create({ directory: dir, logger: new RecordingLogger() });
    await manager.save(values(), { checkpointNumber: 1 });
    const before = new Map(await Promise.all((await readdir(dir)).map(async (f) => [f, await readFile(join(dir, f), "utf8")] as const)));
    const r = await new Promise<{ code: number | null; stdout: string; stderr: string }>((done, fail) => {
      const p = spawn(process.execPath, ["--import", "tsx", child, dir], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
      let stdout = "";
      let stderr = "";
      p.stdout.setEncoding("utf8").on("data", (c: string) => (stdout += c));
      p.stderr.setEncoding("utf8").on("data", (c: string) => (stderr += c));
      p.on("error", fail);
      p.on("exit", (code) => done({ code, stdout, stderr }));
    });
    expect(r.code, r.stderr).toBe(3);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(new RegExp(`^${dir} is in use by pid ${process.pid} on host ${hostname()} since \\d\\d:\\d\\d:\\d\\d; stop that process or use another checkpoint directory\\n$`));
    const after = new Map(await Promise.all((await readdir(dir)).map(async (f) => [f, await readFile(join(dir, f), "utf8")] as const)));
    expect(after).toEqual(before);
    await manager.close();
  });
});
