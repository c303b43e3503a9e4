/**
 * Which saves `CheckpointManager` commits on the checkpoint writer thread, and what it does with
 * what the thread reports: small saves of the default saver go there, larger ones and a custom
 * saver's stream on the calling thread; a deletion that fails is a warning; a thread that cannot
 * run the job fails the save and records nothing; a malformed tensor fails the request and never
 * blocks the next save. And `CheckpointSaverHook` asks for an event-loop turn per step only for a
 * save that needs them.
 */

import * as fs from "node:fs";
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";

import { CheckpointSaverHook } from "../../hooks/CheckpointSaverHook.js";
import { BundleSaver, CheckpointManager } from "../../src/checkpoint/index.js";
import { inProcessCommitter, sharedFileCommitter, workerCommitter, type FileCommitter, type FileJob } from "../../src/checkpoint/internal/fileJobs.js";
import { InvalidArgumentError, RuntimeError } from "../../src/errors.js";
import type { SessionEvent } from "../../src/events/SessionEvent.js";
import { SessionRunArgs, SessionRunContext, type HookEnv } from "../../src/hook/SessionRunHook.js";
import type { VariableStore } from "../../src/session/Session.js";
import type { TensorValue } from "../../src/session/Tensor.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { trainingGraph } from "../util/driveHooks.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-writer-thread-");

/** A saver of its own (the default format, but not the default saver): the manager leaves its writing to it. */
class OwnSaver extends BundleSaver {}

const values = (n: number, x = 1): Map<string, TensorValue> => new Map<string, TensorValue>([["w", { dtype: "float32", shape: [n], data: new Float32Array(n).fill(x) }]]);

/** The job runner on this thread, counting the jobs it is given. */
const counting = (inner: FileCommitter = inProcessCommitter()): FileCommitter & { jobs: FileJob[] } => {
  const jobs: FileJob[] = [];
  return {
    jobs,
    run: (job) => {
      jobs.push(job);
      return inner.run(job);
    },
  };
};

/** A store that records what is restored into it. */
const store = (): VariableStore & { restored: ReadonlyMap<string, TensorValue>[] } => {
  const restored: ReadonlyMap<string, TensorValue>[] = [];
  return { restored, snapshot: () => new Map(), restore: (v: ReadonlyMap<string, TensorValue>) => void restored.push(new Map(v)) } as unknown as VariableStore & {
    restored: ReadonlyMap<string, TensorValue>[];
  };
};

describe("CheckpointManager and the writer thread", () => {
  it("commits a small save as one job, streams one with more than 1 MiB of data, and both restore", async () => {
    const dir = tempDir();
    const committer = counting();
    const manager = await CheckpointManager.create({ directory: dir, fileCommitter: committer, maxToKeep: null, logger: new EventRecorder().logger() });
    const small = manager.prepareSave(values(4, 3)) as NonNullable<ReturnType<typeof manager.prepareSave>>;
    expect(manager.writesOnThread(small as never)).toBe(true);
    const smallPath = await manager.commitSave(small as never);
    expect(committer.jobs).toHaveLength(1);
    expect(committer.jobs[0]?.steps.map((s) => s.op)).toEqual(["mkdir", "write", "write", "write", "syncWritten", "checkLock", "rename", "rename", "rename", "fsyncDir"]);

    const big = manager.prepareSave(values(300_000, 5)) as never; // 1.2 MB of float32
    expect(manager.writesOnThread(big)).toBe(false);
    const bigPath = await manager.commitSave(big);
    expect(committer.jobs).toHaveLength(1);

    expect(manager.checkpoints).toEqual([smallPath, bigPath]);
    const s = store();
    await manager.restore(s, smallPath);
    await manager.restore(s, bigPath);
    expect(Array.from((s.restored[0]?.get("w")?.data as Float32Array) ?? [])).toEqual([3, 3, 3, 3]);
    const restoredBig = s.restored[1]?.get("w")?.data as Float32Array;
    expect([restoredBig.length, restoredBig[0], restoredBig[299_999]]).toEqual([300_000, 5, 5]);
    await manager.close();
  });

  it("lays out a save only once when its tensors alone are over 1 MiB (and does not ask for the thread), and measures the limit on the data file", async () => {
    const committer = Object.assign(counting(), { ready: vi.fn(() => true) });
    const manager = await CheckpointManager.create({ directory: tempDir(), fileCommitter: committer, maxToKeep: null, logger: new EventRecorder().logger() });
    const plan = vi.spyOn(BundleSaver.prototype, "plan");
    /** Whether the save goes to the thread; it is committed either way (a prepared save holds the commit order). */
    const onThread = async (v: ReadonlyMap<string, TensorValue>): Promise<boolean> => {
      const prepared = manager.prepareSave(v) as never;
      const answer = manager.writesOnThread(prepared);
      await manager.commitSave(prepared);
      return answer;
    };
    try {
      // 1 MiB and 4 bytes of float32: over the limit before any layout.
      expect(await onThread(values(262_145))).toBe(false);
      expect(plan).not.toHaveBeenCalled(); // the streaming path lays it out, once
      expect(committer.ready).not.toHaveBeenCalled(); // nor starts a thread for it
      // Exactly 1 MiB of float32: not over the limit by the tensors' bytes, over it in the data
      // file (the manager's own tensors add 16 bytes). The layout decides.
      expect(await onThread(values(262_144))).toBe(false);
      expect(plan).toHaveBeenCalledTimes(1);
      expect(await onThread(values(200_000))).toBe(true);
      expect(plan).toHaveBeenCalledTimes(2);
      expect(committer.jobs).toHaveLength(1);
    } finally {
      plan.mockRestore();
      await manager.close();
    }
  });

  it("streams a save made while the writer thread is still starting, and gives the thread the saves after it", async () => {
    const thread = workerCommitter();
    try {
      const manager = await CheckpointManager.create({ directory: tempDir(), fileCommitter: thread, maxToKeep: null, logger: new EventRecorder().logger() });
      // No worker runs yet: asking starts one, and this save does not wait for it.
      const first = manager.prepareSave(values(4, 1)) as never;
      expect(manager.writesOnThread(first)).toBe(false);
      await thread.whenReady();
      expect(thread.ready()).toBe(true);
      const second = manager.prepareSave(values(4, 2)) as never;
      expect(manager.writesOnThread(second)).toBe(true);
      const paths = [await manager.commitSave(first), await manager.commitSave(second)];
      expect(manager.checkpoints).toEqual(paths);
      const s = store();
      await manager.restore(s, paths[1]);
      expect(Array.from(s.restored[0]?.get("w")?.data as Float32Array)).toEqual([2, 2, 2, 2]);
      await manager.close();
    } finally {
      await thread.stop();
    }
  });

  it("never gives a custom saver's save to the thread", async () => {
    const committer = counting();
    const manager = await CheckpointManager.create({ directory: tempDir(), fileCommitter: committer, saver: new OwnSaver(), logger: new EventRecorder().logger() });
    const prepared = manager.prepareSave(values(2)) as never;
    expect(manager.writesOnThread(prepared)).toBe(false);
    await manager.commitSave(prepared);
    expect(committer.jobs).toEqual([]);
    expect(manager.latestCheckpoint).toBe(join(manager.directory, "ckpt-1"));
    await manager.close();
  });

  it("a checkpoint it cannot delete is a warning naming it, kept whole; the save is recorded", async () => {
    const dir = tempDir();
    let refuse = true;
    const committer = inProcessCommitter({
      ...fs,
      unlinkSync: (path) => {
        if (refuse && String(path).includes("ckpt-1.")) throw Object.assign(new Error(`EACCES: permission denied, unlink '${String(path)}'`), { code: "EACCES", path: String(path) });
        fs.unlinkSync(path);
      },
    });
    const events = new EventRecorder();
    const manager = await CheckpointManager.create({ directory: dir, fileCommitter: committer, maxToKeep: 1, logger: events.logger() });
    await manager.save(values(2));
    await manager.save(values(2));
    expect(manager.latestCheckpoint).toBe(join(dir, "ckpt-2"));
    expect(manager.checkpoints).toEqual([join(dir, "ckpt-2")]);
    // One line for the checkpoint; its index could not go, so its data stays with it (whole).
    expect(events.messages("warn")).toEqual([expect.stringMatching(new RegExp(`^Could not delete checkpoint ${join(dir, "ckpt-1")}: EACCES`))]);
    expect((await readdir(dir)).filter((f) => f.startsWith("ckpt-1.")).sort()).toEqual(["ckpt-1.data-00000-of-00001", "ckpt-1.index"]);
    await manager.close();
  });

  it("a job that cannot run fails its save and records nothing; the next save is not blocked", async () => {
    const dir = tempDir();
    let broken = true;
    const inner = inProcessCommitter();
    const committer: FileCommitter = {
      run: (job) => (broken ? Promise.reject(new RuntimeError("The checkpoint writer thread stopped (exit code 1); the save was not recorded.")) : inner.run(job)),
    };
    const manager = await CheckpointManager.create({ directory: dir, fileCommitter: committer, logger: new EventRecorder().logger() });
    await expect(manager.save(values(2))).rejects.toThrow(/writer thread stopped .*not recorded/);
    expect(manager.latestCheckpoint).toBeNull();
    expect((await readdir(dir)).filter((f) => f !== "checkpoint.lock")).toEqual([]);
    broken = false;
    expect(await manager.save(values(2))).toBe(join(dir, "ckpt-2"));
    await manager.close();
  });

  it("a malformed tensor fails the request before anything is written, and the next save records", async () => {
    const dir = tempDir();
    const manager = await CheckpointManager.create({ directory: dir, fileCommitter: counting(), logger: new EventRecorder().logger() });
    const first = manager.save(values(2));
    const bad = new Map<string, TensorValue>([["w", { dtype: "float32", shape: [3], data: Float32Array.of(1) }]]);
    await expect(manager.save(bad)).rejects.toThrow(InvalidArgumentError);
    await first;
    expect(await manager.save(values(2))).toBe(join(dir, "ckpt-3"));
    expect(manager.checkpoints).toEqual([join(dir, "ckpt-1"), join(dir, "ckpt-3")]);
    await manager.close();
  });
});

describe("CheckpointSaverHook's event-loop turns", () => {
  /** Three runs of a Graph session with the hook saving at each (as TensorFlow's bare `_HookedSession` drives it): how it reported its saves. */
  const track = async (options: { saver?: OwnSaver }): Promise<unknown[]> => {
    const session = trainingGraph({ stepsPerRun: 1 }).session();
    await session.variables.initialize();
    const trackBackground = vi.fn();
    const events: SessionEvent[] = [];
    const env: HookEnv = { clock: new VirtualClock(), logger: new EventRecorder().logger(), emit: (e) => void events.push(e), trackBackground };
    const hook = new CheckpointSaverHook({ checkpointDir: tempDir(), saveSteps: 1, async: "block", ...options });
    await hook.begin(env);
    for (let i = 0; i < 3; i++) {
      const ctx = new SessionRunContext(SessionRunArgs("train"), session);
      const args = (await hook.beforeRun(ctx)) as SessionRunArgs;
      const [, stale] = (await session.run(["train", args.fetches])) as [unknown, unknown];
      await hook.afterRun(ctx, { results: stale, options: {}, runMetadata: {} });
    }
    await hook.end(session);
    expect(events.filter((e) => e.type === "checkpointSaved").length).toBeGreaterThan(0);
    return trackBackground.mock.calls.map((call: unknown[]) => call[1]);
  };

  it("a save on the writer thread is reported as work off the thread (no turn per step); a save written on this thread is not", async () => {
    // The process's writer thread is running (a save made while it starts streams: see above).
    await sharedFileCommitter()?.whenReady();
    expect(await track({})).toEqual([{ offThread: true }, { offThread: true }, { offThread: true }]);
    expect(await track({ saver: new OwnSaver() })).toEqual([{ offThread: false }, { offThread: false }, { offThread: false }]);
  });
});
