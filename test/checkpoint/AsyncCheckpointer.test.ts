import { join } from "node:path";
import { beforeEach, describe, expect, it } from "vitest";

import { DeadlineExceededError, RuntimeError } from "../../src/errors.js";
import type { TensorValue } from "../../src/session/Tensor.js";
import { flush, VirtualClock } from "../../src/testing/VirtualClock.js";
import {
  AsyncCheckpointer,
  CheckpointManager,
  CheckpointSaveError,
  readBundle,
  type AsyncCheckpointerOptions,
  type CheckpointEvent,
} from "../../src/checkpoint/index.js";
import { GatedSaver, ls } from "./helpers.js";
import { useTempDirs } from "../util/tempDirs.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";

const tempDir = useTempDirs("ms-ckpt-");

let dir: string;
let clock: VirtualClock;
let saver: GatedSaver;
beforeEach(async () => {
  dir = tempDir();
  clock = new VirtualClock();
  saver = new GatedSaver({ clock });
});
/** Live "variables": a Map the test mutates in place, as a training loop would. */
const live = (): Map<string, TensorValue> => new Map([["w", { dtype: "float32", shape: [2], data: Float32Array.of(0, 0) }]]);
const setW = (v: Map<string, TensorValue>, x: number): void => {
  (v.get("w")?.data as Float32Array).fill(x);
};

const setup = async (options: AsyncCheckpointerOptions = {}) => {
  const recorder = new EventRecorder();
  const logger = recorder.logger(() => clock.now());
  const manager = await CheckpointManager.create({ directory: dir, saver, clock, logger, maxToKeep: null });
  const ckpt = new AsyncCheckpointer(manager, { clock, logger, ...options });
  const events: CheckpointEvent[] = [];
  let completed = false;
  ckpt.events$.subscribe({ next: (e) => events.push(e), complete: () => (completed = true) });
  return { manager, ckpt, events, recorder, isCompleted: () => completed };
};

const ckpts = async (): Promise<string[]> => (await ls(dir)).filter((f) => f.endsWith(".index"));

describe("AsyncCheckpointer", () => {
  it("snapshots synchronously: values changed after save() returns are not in the checkpoint", async () => {
    const { ckpt, events } = await setup();
    const vars = live();
    setW(vars, 1);
    const r = await ckpt.save(vars, { checkpointNumber: 1 });
    expect(r.status).toBe("started");
    setW(vars, 2); // the next training step runs while the save is in flight
    expect(await ckpts()).toEqual([]);
    saver.release();
    if (r.status !== "started") throw new Error("unreachable");
    expect(await r.done).toEqual({ status: "saved", path: join(dir, "ckpt-1") });
    expect((await readBundle(join(dir, "ckpt-1"))).values.get("w")?.data).toEqual(Float32Array.of(1, 1));
    expect(events.map((e) => e.type)).toEqual(["checkpointStarted", "checkpointSaved"]);
    // Session events: the same types a MonitoredSession's events$ carries.
    expect(events[0]).toEqual({ type: "checkpointStarted", time: expect.any(Number) as unknown, globalStep: 1, path: join(dir, "ckpt-1") });
    expect(events[1]).toEqual({ type: "checkpointSaved", time: clock.now(), globalStep: 1, path: join(dir, "ckpt-1"), durationMs: clock.now() - (events[0]?.time ?? NaN) });
  });

  it("policy block: a save requested while one runs waits for it", async () => {
    const { ckpt } = await setup({ policy: "block" });
    const vars = live();
    await ckpt.save(vars, { checkpointNumber: 1 });
    setW(vars, 2);
    let secondStarted = false;
    const second = ckpt.save(vars, { checkpointNumber: 2 }).then((r) => {
      secondStarted = true;
      return r;
    });
    setW(vars, 3); // after the request: not in checkpoint 2
    await flush();
    expect(secondStarted).toBe(false);
    expect(ckpt.pending).toBe(2);
    saver.release();
    expect((await second).status).toBe("started");
    saver.release();
    await ckpt.waitForPending();
    expect(await ckpts()).toEqual(["ckpt-1.index", "ckpt-2.index"]);
    expect((await readBundle(join(dir, "ckpt-2"))).values.get("w")?.data).toEqual(Float32Array.of(2, 2));
  });

  it("policy skip: a save requested while one runs is dropped, logged and emitted", async () => {
    const { ckpt, events, recorder } = await setup({ policy: "skip" });
    const vars = live();
    await ckpt.save(vars, { checkpointNumber: 1 });
    expect(await ckpt.save(vars, { checkpointNumber: 2, step: 2 })).toEqual({ status: "skipped" });
    saver.release();
    await ckpt.waitForPending();
    expect(await ckpts()).toEqual(["ckpt-1.index"]);
    expect(events.map((e) => e.type)).toEqual(["checkpointStarted", "checkpointSkipped", "checkpointSaved"]);
    expect(events[1]).toEqual({ type: "checkpointSkipped", time: clock.now(), globalStep: 2 });
    expect(recorder.lines("info").some((l) => l.message.includes('policy "skip"'))).toBe(true);
  });

  it("policy skip with maxInFlight 2: the line counts the saves still running and carries the skipped step", async () => {
    const { ckpt, recorder } = await setup({ policy: "skip", maxInFlight: 2 });
    const vars = live();
    await ckpt.save(vars, { checkpointNumber: 1 });
    await ckpt.save(vars, { checkpointNumber: 2 });
    expect(recorder.lines()).toEqual([]); // two slots: neither was skipped
    expect(await ckpt.save(vars, { checkpointNumber: 3, step: 3 })).toEqual({ status: "skipped" });
    expect(recorder.lines()).toEqual([{ type: "log", time: clock.now(), level: "info", message: 'Checkpoint save skipped: 2 save(s) still running (policy "skip").', fields: { step: 3 } }]);
    saver.release();
    saver.release();
    await ckpt.waitForPending();
    expect(await ckpts()).toEqual(["ckpt-1.index", "ckpt-2.index"]);
  });

  it("policy coalesce: only the newest pending save is kept", async () => {
    const { ckpt, events, manager } = await setup({ policy: "coalesce" });
    const vars = live();
    await ckpt.save(vars, { checkpointNumber: 1 });
    const results = [];
    for (const n of [2, 3, 4]) {
      setW(vars, n);
      results.push(await ckpt.save(vars, { checkpointNumber: n })); // returns at once
    }
    expect(results.map((r) => r.status)).toEqual(["queued", "queued", "queued"]);
    if (results[0]?.status !== "queued") throw new Error("unreachable");
    expect(await results[0].done).toEqual({ status: "superseded" });
    saver.release(); // ckpt-1 finishes, ckpt-4 starts
    await saver.waitStarted(2);
    saver.release();
    await ckpt.waitForPending();
    expect(await ckpts()).toEqual(["ckpt-1.index", "ckpt-4.index"]);
    expect((await readBundle(join(dir, "ckpt-4"))).values.get("w")?.data).toEqual(Float32Array.of(4, 4));
    expect(events.filter((e) => e.type === "checkpointCoalesced").map((e) => [e.globalStep, e.path])).toEqual([
      [2, join(dir, "ckpt-2")],
      [3, join(dir, "ckpt-3")],
    ]);
    expect(manager.latestCheckpoint).toBe(join(dir, "ckpt-4"));
    expect(saver.started).toEqual([join(dir, "ckpt-1"), join(dir, "ckpt-4")]);
  });

  it("maxInFlight 2 runs two saves at once and records them in request order", async () => {
    const { ckpt, manager } = await setup({ maxInFlight: 2 });
    const vars = live();
    await ckpt.save(vars, { checkpointNumber: 1 });
    await ckpt.save(vars, { checkpointNumber: 2 });
    expect(saver.started).toHaveLength(2);
    saver.release();
    saver.release();
    await ckpt.waitForPending();
    expect(manager.checkpoints).toEqual([join(dir, "ckpt-1"), join(dir, "ckpt-2")]);
  });

  it("a background failure is emitted, logged, and re-raised by the next save (once)", async () => {
    const { ckpt, events, recorder } = await setup();
    const vars = live();
    saver.failNext = 1;
    const r = await ckpt.save(vars, { checkpointNumber: 7 });
    saver.release();
    if (r.status !== "started") throw new Error("unreachable");
    expect((await r.done).status).toBe("failed");
    expect(events.map((e) => e.type)).toEqual(["checkpointStarted", "checkpointFailed"]);
    expect(events[1]).toMatchObject({ type: "checkpointFailed", globalStep: 7, durationMs: expect.any(Number) as unknown });
    expect(String((events[1] as { error?: unknown }).error)).toContain("injected failure writing");
    expect(recorder.messages("error")[0]).toContain("Background checkpoint save of step 7");
    const next = ckpt.save(vars, { checkpointNumber: 8 });
    await expect(next).rejects.toThrow(CheckpointSaveError);
    await expect(next).rejects.toThrow(/A background checkpoint save failed: step 7 \(.*ckpt-7\): injected failure writing/);
    // reported once; saving works again
    const again = await ckpt.save(vars, { checkpointNumber: 8 });
    saver.release();
    if (again.status !== "started") throw new Error("unreachable");
    expect((await again.done).status).toBe("saved");
  });

  it("a background failure is re-raised by close() and waitForPending()", async () => {
    const { ckpt } = await setup();
    saver.failNext = 2;
    await ckpt.save(live(), { checkpointNumber: 1 });
    saver.release();
    await expect(ckpt.waitForPending()).rejects.toThrow(/step 1/);
    await ckpt.save(live(), { checkpointNumber: 2 });
    saver.release();
    await expect(ckpt.close()).rejects.toThrow(CheckpointSaveError);
  });

  it("close(graceMs) waits for the running save, then completes events$", async () => {
    const { ckpt, isCompleted } = await setup();
    await ckpt.save(live(), { checkpointNumber: 1 });
    const closing = ckpt.close(10_000);
    await flush();
    saver.release();
    await closing;
    expect(isCompleted()).toBe(true);
    expect(await ckpts()).toEqual(["ckpt-1.index"]);
    await expect(ckpt.save(live())).rejects.toThrow(RuntimeError);
  });

  it("close(graceMs) says clearly, naming the step, when the grace period expires", async () => {
    const { ckpt, events, isCompleted } = await setup();
    await ckpt.save(live(), { checkpointNumber: 42 });
    const closing = ckpt.close(5_000);
    closing.catch(() => undefined);
    await clock.advance(4_999);
    await clock.advance(1);
    await expect(closing).rejects.toThrow(DeadlineExceededError);
    await expect(closing).rejects.toThrow(
      /grace period of 5000 ms expired with 1 checkpoint save\(s\) unfinished: step 42 \(.*ckpt-42\)/,
    );
    expect(isCompleted()).toBe(false); // the save goes on and still reports
    saver.release();
    await new Promise<void>((resolve) => {
      ckpt.events$.subscribe({ complete: resolve });
    });
    expect(events.map((e) => e.type)).toEqual(["checkpointStarted", "checkpointSaved"]);
  });
});
