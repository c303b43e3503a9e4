/** The test kit's in-memory checkpoint saver, alone and behind a CheckpointSaverHook. */
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

import { CheckpointSaverHook, type SessionLogWriter } from "../../hooks/CheckpointSaverHook.js";
import { CheckpointManager } from "../../src/checkpoint/index.js";
import { DataLossError, InvalidArgumentError, NotFoundError } from "../../src/errors.js";
import { Graph } from "../../src/session/Graph.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { InMemorySaver, VirtualClock } from "../../src/testing/index.js";
import { driveHooks } from "../util/driveHooks.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-inmemory-saver-");

/** A session with one float variable `w` holding `value`. */
const sessionWith = async (value: number) => {
  const graph = new Graph();
  const w = graph.variable("w", value);
  const session = graph.session();
  await session.variables.initialize();
  return { session, w };
};

/** A SessionLog writer that keeps the steps it was given. */
const stepsWriter = (): SessionLogWriter & { steps: number[] } => {
  const steps: number[] = [];
  return { steps, addSessionLog: (_status, step) => void steps.push(step) };
};

describe("InMemorySaver", () => {
  it("copies the values at save time: a later change to the session does not reach the checkpoint", async () => {
    const clock = new VirtualClock({ startMs: 5_000 });
    const saver = new InMemorySaver({ clock });
    const { session } = await sessionWith(1.5);
    expect(await saver.save(session.variables, "/ckpts/model.ckpt-7", { step: 7 })).toBe("/ckpts/model.ckpt-7");
    await session.variables.restore(new Map([["w", { dtype: "float64", shape: [], data: Float64Array.of(9) }]]));

    const restored = await saver.restore("/ckpts/model.ckpt-7");
    expect(restored.step).toBe(7);
    expect(restored.createdAtMs).toBe(5_000);
    expect(restored.values.get("w")).toEqual({ dtype: "float64", shape: [], data: Float64Array.of(1.5) });
    expect(await saver.step("/ckpts/model.ckpt-7")).toBe(7);
    expect(saver.saves).toEqual([{ prefix: "/ckpts/model.ckpt-7", step: 7 }]);
  });

  it("exists, remove and prefixes track what is held; a missing one is NotFoundError naming what is held", async () => {
    const saver = new InMemorySaver();
    const { session } = await sessionWith(1);
    await saver.save(session.variables, "/c/m-1", { step: 1 });
    await saver.save(session.variables, "/c/m-2", { step: 2 });
    expect(saver.prefixes()).toEqual(["/c/m-1", "/c/m-2"]);
    await saver.remove("/c/m-1");
    await saver.remove("/c/never-saved");
    expect(await saver.exists("/c/m-1")).toBe(false);
    expect(await saver.exists("/c/m-2")).toBe(true);
    await expect(saver.restore("/c/m-1")).rejects.toThrow(new NotFoundError("No checkpoint at /c/m-1 in this InMemorySaver (held: /c/m-2)"));
    expect(await saver.cleanup("/c", "m")).toEqual([]);
  });

  it("corrupt(prefix) makes restores fail with DataLossError, as a damaged file does", async () => {
    const saver = new InMemorySaver();
    const { session } = await sessionWith(1);
    await saver.save(session.variables, "/c/m-1");
    saver.corrupt("/c/m-1");
    await expect(saver.restore("/c/m-1")).rejects.toBeInstanceOf(DataLossError);
    expect(() => saver.corrupt("/c/m-9")).toThrow(NotFoundError);
  });

  it("rejects a prefix that names no file with a one-line fix", async () => {
    const saver = new InMemorySaver();
    const { session } = await sessionWith(1);
    await expect(saver.save(session.variables, "")).rejects.toThrow(new InvalidArgumentError('Checkpoint prefix "" is not a path to a file: pass e.g. "/ckpts/model.ckpt-1"'));
  });

  it("behind a CheckpointManager: a fresh manager restores the newest checkpoint from memory, falling back past a corrupt one", async () => {
    const dir = tempDir();
    const saver = new InMemorySaver();
    const { session } = await sessionWith(2);
    const manager = await CheckpointManager.create({ directory: dir, saver, maxToKeep: 2 });
    for (const step of [1, 2, 3]) await manager.save(session.variables, { checkpointNumber: step, step });
    await manager.close();
    expect(saver.prefixes()).toEqual([join(dir, "ckpt-2"), join(dir, "ckpt-3")]);

    saver.corrupt(join(dir, "ckpt-3"));
    const events = new EventRecorder();
    const reader = await CheckpointManager.create({ directory: dir, saver, logger: events.logger(), lock: false });
    const { session: fresh } = await sessionWith(0);
    expect(await reader.restoreOrInitialize(fresh.variables)).toBe(join(dir, "ckpt-2"));
    expect(events.messages("warn").join("\n")).toMatch(/ckpt-3 is corrupt or incomplete/);
    await reader.close();
  });

  it("CheckpointSaverHook cadence (saveSteps: 2) with no checkpoint file on disk", async () => {
    const dir = tempDir();
    const saver = new InMemorySaver();
    const writer = stepsWriter();
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 2, saver, summaryWriter: writer });
    const { sess } = await driveHooks({ hooks: [hook] });
    for (let i = 0; i < 5; i++) await sess.run("train");
    await sess.close();

    // The creation save at 0, then every 2 steps, and the final save at the end.
    expect(saver.saves.map((s) => s.step)).toEqual([0, 2, 4, 5]);
    expect(writer.steps).toEqual([0, 2, 4, 5]);
    // Only the manager's state file (and its lock) are on disk; no checkpoint data.
    expect(readdirSync(dir).filter((f) => f.includes("model.ckpt"))).toEqual([]);
  });
});
