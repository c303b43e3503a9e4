/**
 * The checkpoint directory lock: one writer per directory. Another process (a real child),
 * another session of this process, a dead holder (taken over), a holder on another host (a
 * lease, expired on the virtual clock), and the race of two takers.
 */
import { readFile, readdir } from "node:fs/promises";
import { hostname } from "node:os";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";

import { CheckpointDirInUseError, CheckpointDirLock, CheckpointManager } from "../../src/checkpoint/index.js";
import { currentProcess } from "../../src/checkpoint/CheckpointDirLock.js";
import { syncCounters } from "../../src/checkpoint/internal/files.js";
import { tensor } from "../../src/session/Tensor.js";
import { VirtualClock } from "../../src/testing/index.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { acquire, dir, lockFile, writeLock } from "./CheckpointDirLock.testHelpers.js";

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

  it("makes each directory it creates durable in its parent (one fsync a level); a directory that exists costs none", async () => {
    const nested = join(dir, "a", "b", "c");
    const before = syncCounters.directories;
    const lock = await CheckpointDirLock.acquire(nested);
    // dir (gained a), a (gained b) and b (gained c).
    expect(syncCounters.directories - before).toBe(3);
    await lock.release();
    const again = syncCounters.directories;
    await (await CheckpointDirLock.acquire(nested)).release();
    expect(syncCounters.directories - again).toBe(0);
  });

  it.runIf(process.platform === "linux")("a live pid that started at another time is another process: its lock is stale", async () => {
    await writeLock({ pid: process.pid, startTime: "1" });
    const events = new EventRecorder();
    await acquire({ logger: events.logger() });
    expect(events.messages("warn")[0]).toContain(`pid ${process.pid} now belongs to another process`);
  });

  it("a lock from another host is a lease: held while refreshed, taken over after the timeout (virtual clock)", async () => {
    const clock = new VirtualClock();
    await writeLock({ hostname: "other-host", bootId: "b", pid: 4242, acquiredAtMs: clock.now(), refreshedAtMs: clock.now() });
    await expect(acquire({ clock, leaseTimeoutSecs: 30 })).rejects.toThrow(/is in use by pid 4242 on host other-host since .*; stop that process/);
    clock.set(clock.now() + 30_000);
    await expect(acquire({ clock, leaseTimeoutSecs: 30 })).rejects.toThrow(CheckpointDirInUseError);
    clock.set(clock.now() + 1_000);
    const events = new EventRecorder();
    await acquire({ clock, leaseTimeoutSecs: 30, logger: events.logger(() => clock.now()) });
    expect(events.messages("warn")).toEqual([expect.stringMatching(/from pid 4242 on host other-host .*last refreshed 31 s ago \(lease timeout 30 s\)/)]);
  });

  it("the holder refreshes its lease on the clock, so another host does not take it over", async () => {
    const clock = new VirtualClock();
    const lock = await acquire({ clock, leaseTimeoutSecs: 30, refreshSecs: 10 });
    const elsewhere = { ...currentProcess(), hostname: "other-host", bootId: "b" };
    for (let i = 1; i <= 6; i++) {
      await clock.advanceSecs(10);
      // The refresh is real file I/O on libuv's thread pool, which the other test files of this
      // process share: wait for it with a deadline far beyond any I/O, not a count of turns. The
      // next refresh is scheduled once this one has finished, a moment after its record is
      // visible: wait for that timer too, or the next advance would run before it exists.
      const due = clock.now();
      await vi.waitFor(
        async () => {
          expect((await lockFile()).refreshedAtMs).toBe(due);
          expect(clock.pendingTimers).toBe(1);
        },
        { timeout: 30_000, interval: 5 },
      );
    }
    await expect(CheckpointDirLock.acquire(dir, { clock, leaseTimeoutSecs: 30, identity: elsewhere })).rejects.toThrow(CheckpointDirInUseError);
    await lock.release();
    expect(clock.pendingTimers).toBe(0);
  });

  it.each([
    ["on the writer thread", undefined],
    ["streamed on the calling thread", null],
  ] as const)("a writer whose lock was taken over fails its next save (%s), naming the new holder, and records nothing", async (_, fileCommitter) => {
    const manager = await CheckpointManager.create({ directory: dir, logger: new EventRecorder().logger(), ...(fileCommitter === null ? { fileCommitter } : {}) });
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

