/**
 * A scenario across modules (hooks, the session and its services).
 *
 * Services reach hooks through `HookEnv`, so a test or a second session in the same process can
 * inject its own: the summary writer cache, the registry of files being written and the
 * checkpoint manager.
 */
import { describe, expect, it } from "vitest";

import { CheckpointSaverHook } from "../../hooks/CheckpointSaverHook.js";
import { SummarySaverHook } from "../../hooks/SummarySaverHook.js";
import { CheckpointManager } from "../../src/checkpoint/CheckpointManager.js";
import { processTempFiles, TempFileRegistry } from "../../src/checkpoint/TempFileRegistry.js";
import { ValueError } from "../../src/errors.js";
import { Graph } from "../../src/session/Graph.js";
import { silentLogger } from "../../src/Logger.js";
import { MonitoredSession } from "../../src/pipeline/MonitoredSession.js";
import { FileWriterCache, fileWriterCache } from "../../src/summary/FileWriterCache.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { eventFiles } from "../summary/decoder.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("services-");

const model = (): Graph => {
  const g = new Graph();
  const step = g.globalStep();
  g.op("train", (ctx) => ctx.assignAdd(step, 1));
  g.op("loss", () => 0.25);
  return g;
};

/** A session that writes the `loss` summary to `logdir` at every step. */
const summarySession = (logdir: string, extra: object = {}) => {
  const g = model();
  return MonitoredSession.create({
    graph: g,
    hooks: [new SummarySaverHook({ saveSteps: 1, outputDir: logdir, summaryOp: "loss" })],
    clock: new VirtualClock(),
    logger: silentLogger,
    ...extra,
  });
};

describe("HookEnv.writerCache", () => {
  it("two sessions on one log directory share the process-wide fileWriterCache's one writer (one event file)", async () => {
    const logdir = tempDir();
    const a = await summarySession(logdir);
    const b = await summarySession(logdir);
    await a.run("train");
    await b.run("train");
    await a.close();
    await b.close();
    const shared = fileWriterCache.getWriter(logdir);
    await fileWriterCache.closeAll();
    expect(shared.closed).toBe(true);
    expect(eventFiles(logdir)).toHaveLength(1);
  });

  it("a session given its own cache shares nothing: its own writer, its own event file", async () => {
    const logdir = tempDir();
    const own = new FileWriterCache();
    const a = await summarySession(logdir);
    const b = await summarySession(logdir, { writerCache: own });
    await a.run("train");
    await b.run("train");
    await a.close();
    await b.close();
    expect(own.size).toBe(1);
    expect(own.getWriter(logdir)).not.toBe(fileWriterCache.getWriter(logdir));
    await own.closeAll();
    await fileWriterCache.closeAll();
    expect(eventFiles(logdir)).toHaveLength(2);
  });
});

describe("HookEnv.checkpointManager", () => {
  it("a CheckpointSaverHook of the session's directory saves through the session's manager and leaves it open", async () => {
    const dir = tempDir();
    const manager = await CheckpointManager.create({ directory: dir, checkpointName: "model.ckpt", maxToKeep: 5, clock: new VirtualClock(), logger: silentLogger });
    const sess = await MonitoredSession.create({
      graph: model(),
      hooks: [new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, summaryWriter: { addSessionLog: () => undefined } })],
      checkpointManager: manager,
      clock: new VirtualClock(),
      logger: silentLogger,
    });
    await sess.run("train");
    await sess.close();
    // A second manager would have failed on the directory's lock; this one recorded every save.
    expect(manager.checkpoints).toEqual([`${dir}/model.ckpt-0`, `${dir}/model.ckpt-1`]);
    expect(manager.holdsLock).toBe(true);
    await manager.close();
  });

  it("a hook whose settings differ from the session's manager fails in begin, naming them", async () => {
    const dir = tempDir();
    const manager = await CheckpointManager.create({ directory: dir, checkpointName: "model.ckpt", maxToKeep: 2, clock: new VirtualClock(), logger: silentLogger });
    await expect(
      MonitoredSession.create({
        graph: model(),
        hooks: [new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, maxToKeep: 3 })],
        checkpointManager: manager,
        clock: new VirtualClock(),
        logger: silentLogger,
      }),
    ).rejects.toThrow(new ValueError(`CheckpointSaverHook: the session's checkpoint manager of ${dir} has other settings: maxToKeep 3 (the manager's: 2); give the hook the manager's settings, or give it its own checkpointManager`));
    await manager.close();
  });
});

describe("HookEnv.tempFiles", () => {
  /** Records every path held, and whether the process-wide registry held any of them meanwhile. */
  class RecordingTempFiles extends TempFileRegistry {
    readonly held: string[] = [];
    sharedHeld = false;
    override hold(path: string): void {
      this.held.push(path);
      if (processTempFiles.isHeld(path)) this.sharedHeld = true;
      super.hold(path);
    }
  }

  it("the checkpoint manager a hook creates writes through the session's registry, not the process-wide one", async () => {
    const dir = tempDir();
    const temps = new RecordingTempFiles();
    const sess = await MonitoredSession.create({
      graph: model(),
      hooks: [new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, summaryWriter: { addSessionLog: () => undefined } })],
      tempFiles: temps,
      clock: new VirtualClock(),
      logger: silentLogger,
    });
    const sharedBefore = processTempFiles.size;
    await sess.run("train");
    await sess.close();
    // The data file, its index and the state file of each save were held here, then released.
    expect(temps.held.some((p) => p.includes("model.ckpt-1.data-00000-of-00001.tmp-"))).toBe(true);
    expect(temps.held.some((p) => p.includes("model.ckpt-1.index.tmp-"))).toBe(true);
    expect(temps.held.some((p) => p.includes("checkpoint.tmp-"))).toBe(true);
    expect(temps.size).toBe(0);
    expect(temps.sharedHeld).toBe(false);
    expect(processTempFiles.size).toBe(sharedBefore);
  });
});
