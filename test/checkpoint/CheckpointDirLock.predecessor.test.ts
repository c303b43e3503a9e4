/**
 * `waitOutPredecessorLease`: a pod recreated on another node keeps its hostname but not its boot
 * id, so its predecessor's lock is a lease from "another host" that nobody refreshes any more.
 * The restarted chief waits it out instead of exiting 2 (docs/kubernetes.md).
 */
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";

import { CheckpointDirInUseError, CheckpointDirLock, LOCK_FILENAME, type LockHolder } from "../../src/checkpoint/index.js";
import { currentProcess } from "../../src/checkpoint/CheckpointDirLock.js";
import { VirtualClock } from "../../src/testing/index.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-ckpt-pred-");
let dir: string;
const held: CheckpointDirLock[] = [];
beforeEach(() => {
  dir = tempDir();
});
afterEach(async () => {
  for (const l of held.splice(0)) await l.release();
});

/** This process as the pod it replaces sees it: the same hostname, on another node's boot. */
const me = { ...currentProcess(), hostname: "spirals-chief-0-0", bootId: "boot-of-node-b", pid: 1 };

const writeLock = (holder: Partial<LockHolder>): Promise<void> =>
  writeFile(join(dir, LOCK_FILENAME), JSON.stringify({ format: "monitored-session/lock", version: 1, ...me, bootId: "boot-of-node-a", startTime: "77", acquiredAtMs: 1_700_000_000_000, refreshedAtMs: 1_700_000_000_000, token: "predecessor", ...holder }));

/** Starts an acquisition and lets the virtual clock run once the lock is waiting on it. */
const acquireWaiting = async (clock: VirtualClock, events: EventRecorder, during?: () => Promise<void>): Promise<CheckpointDirLock> => {
  const acquiring = CheckpointDirLock.acquire(dir, { clock, logger: events.logger(() => clock.now()), leaseTimeoutSecs: 60, identity: me, waitOutPredecessorLease: true });
  acquiring.catch(() => undefined);
  // The file reads are real I/O: wait for the sleep to be scheduled, with a deadline far beyond any I/O.
  await vi.waitFor(() => expect(clock.pendingTimers).toBeGreaterThan(0), { timeout: 30_000, interval: 5 });
  await during?.();
  await clock.advanceSecs(120);
  const lock = await acquiring;
  held.push(lock);
  return lock;
};

describe("CheckpointDirLock: waiting out a predecessor's lease (virtual clock)", () => {
  it("a predecessor with this hostname on another boot: one line naming it, its lease waited out, then taken over", async () => {
    const clock = new VirtualClock();
    // Last refreshed 20 s ago: 40 s of lease are left (plus a second of margin).
    await writeLock({ acquiredAtMs: clock.now() - 300_000, refreshedAtMs: clock.now() - 20_000 });
    const events = new EventRecorder();
    const start = clock.now();
    const lock = await acquireWaiting(clock, events);
    expect(lock.holder.bootId).toBe("boot-of-node-b");
    expect(JSON.parse(await readFile(join(dir, LOCK_FILENAME), "utf8")).token).toBe(lock.holder.token);
    const warnings = events.messages("warn");
    expect(warnings[0]).toMatch(/is held by pid 1 on host spirals-chief-0-0 \(boot id boot-of-node-a, since .*\), this host's name on another node or boot: a predecessor of this task\. Waiting 41 s for its lease to run out \(leaseTimeoutSecs 60\)\.$/);
    expect(warnings[1]).toMatch(/^Took over .* from pid 1 on host spirals-chief-0-0 .*lease was last refreshed \d+ s ago/);
    expect(clock.now() - start).toBeGreaterThanOrEqual(41_000);
  });

  it("a predecessor that refreshes its lease meanwhile is alive: in use, as without waiting", async () => {
    const clock = new VirtualClock();
    await writeLock({ acquiredAtMs: clock.now(), refreshedAtMs: clock.now() });
    const events = new EventRecorder();
    await expect(acquireWaiting(clock, events, () => writeLock({ refreshedAtMs: clock.now() + 100_000 }))).rejects.toThrow(CheckpointDirInUseError);
    expect(events.messages("warn")).toHaveLength(1);
  });

  it("without the option, or for a holder of another hostname, no wait: in use at once", async () => {
    const clock = new VirtualClock();
    await writeLock({ refreshedAtMs: clock.now() });
    await expect(CheckpointDirLock.acquire(dir, { clock, identity: me })).rejects.toThrow(CheckpointDirInUseError);
    await writeLock({ hostname: "another-pod", refreshedAtMs: clock.now() });
    await expect(CheckpointDirLock.acquire(dir, { clock, identity: me, waitOutPredecessorLease: true })).rejects.toThrow(/in use by pid 1 on host another-pod/);
    expect(clock.pendingTimers).toBe(0);
  });
});
