import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { fileWriterCache, SummaryWriter } from "../../src/summary/index.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { StepCounterHook } from "../../hooks/StepCounterHook.js";
import { eventFiles, float32At, readEvents, type DecodedEvent } from "../summary/decoder.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { driveHooks } from "../util/driveHooks.js";

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "step-counter-tb-"));
});
afterEach(async () => {
  await fileWriterCache.closeAll();
  rmSync(dir, { recursive: true, force: true });
});

/**
 * Runs `train` `runs` times with the virtual clock advancing `msPerRun` before each run; returns
 * the session's events.
 */
const train = async (hook: StepCounterHook, runs: number, msPerRun: number, clock = new VirtualClock()): Promise<EventRecorder> => {
  const { sess, events } = await driveHooks({ hooks: [hook], clock });
  for (let i = 0; i < runs; i++) {
    clock.set(clock.now() + msPerRun);
    await sess.run("train");
  }
  await sess.close();
  return events;
};

const summaryEvents = (logdir: string): DecodedEvent[] =>
  eventFiles(logdir)
    .flatMap(readEvents)
    .filter((e) => e.summary !== undefined);

describe("StepCounterHook with outputDir (TensorBoard event files)", () => {
  it("StepCounterHookTest.test_step_counter_every_n_steps: global_step/sec lands in the event file at steps 11 and 21", async () => {
    const clock = new VirtualClock();
    const hook = new StepCounterHook({ everyNSteps: 10, outputDir: dir });
    const session = await train(hook, 30, 10, clock);
    // The session heard of each write, at the steps the file holds.
    expect(session.ofType("summaryWritten")).toMatchObject([
      { globalStep: 11, hook: "StepCounterHook" },
      { globalStep: 21, hook: "StepCounterHook" },
    ]);
    expect(session.messages("info")).toEqual(["global_step/sec: 100", "global_step/sec: 100"]);
    // As in TensorFlow, the hook does not flush at the end; the cached writer does on close.
    await fileWriterCache.closeAll();
    expect(eventFiles(dir)).toHaveLength(1);
    const events = summaryEvents(dir);
    expect(events.map((e) => Number(e.step))).toEqual([11, 21]);
    for (const e of events) {
      const [value] = e.summary?.value ?? [];
      expect(value?.tag).toBe("global_step/sec");
      expect(value?.metadata?.pluginData?.pluginName).toBe("scalars");
      expect(float32At(value?.tensor?.tensorContent)).toBe(100); // 10 steps in 10 runs of 10 ms
    }
    // The cached writer took the session's clock: wall_time is virtual time.
    expect(events.map((e) => e.wallTime)).toEqual([
      (1_700_000_000_000 + 11 * 10) / 1000,
      (1_700_000_000_000 + 21 * 10) / 1000,
    ]);
  });

  it("shares the cached writer for its directory", async () => {
    const shared = fileWriterCache.getWriter(dir);
    await train(new StepCounterHook({ everyNSteps: 1, outputDir: dir }), 3, 500);
    await shared.flush();
    expect(eventFiles(dir)).toEqual([shared.path]);
    expect(summaryEvents(dir).map((e) => Number(e.step))).toEqual([2, 3]);
  });

  it("summaryWriter wins over outputDir, as in TensorFlow", async () => {
    const other = mkdtempSync(join(tmpdir(), "step-counter-tb-writer-"));
    try {
      const writer = new SummaryWriter(other);
      await train(new StepCounterHook({ everyNSteps: 1, outputDir: dir, summaryWriter: writer }), 3, 500);
      await writer.close();
      expect(eventFiles(dir)).toEqual([]);
      expect(summaryEvents(other).map((e) => Number(e.step))).toEqual([2, 3]);
    } finally {
      rmSync(other, { recursive: true, force: true });
    }
  });
});
