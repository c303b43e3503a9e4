import { describe, expect, it } from "vitest";
import { ValueError } from "../../src/errors.js";
import { SessionRunArgs, SessionRunContext } from "../../src/hook/SessionRunHook.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { StepCounterHook, type ScalarSummaryWriter } from "../../hooks/StepCounterHook.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { RecordingLogger } from "../../src/testing/RecordingLogger.js";
import { driveHooks, trainingGraph } from "../util/driveHooks.js";

/** A summary writer that keeps scalars by step, like TensorFlow's FakeSummaryWriter. */
class FakeSummaryWriter implements ScalarSummaryWriter {
  readonly summaries = new Map<number, { tag: string; value: number }[]>();
  addScalar(tag: string, value: number, step: number): void {
    const list = this.summaries.get(step) ?? [];
    list.push({ tag, value });
    this.summaries.set(step, list);
  }
  get steps(): number[] {
    return [...this.summaries.keys()];
  }
}

/**
 * Runs `train` `runs` times, advancing the virtual clock by `msPerRun` before each run; returns
 * the session's events (its lines are `log` events: what a user reads).
 */
const train = async (hook: StepCounterHook, runs: number, msPerRun: number, stepsPerRun = 1): Promise<EventRecorder> => {
  const clock = new VirtualClock();
  const { sess, events } = await driveHooks({ hooks: [hook], graph: trainingGraph({ stepsPerRun }), clock });
  for (let i = 0; i < runs; i++) {
    clock.set(clock.now() + msPerRun);
    await sess.run("train");
  }
  await sess.close();
  return events;
};

describe("StepCounterHook", () => {
  it("validation: exactly one of everyNSteps (default 100) and everyNSecs", () => {
    const message = /exactly one of everyNSteps and everyNSecs should be provided/;
    expect(() => new StepCounterHook({ everyNSteps: 10, everyNSecs: 1 })).toThrow(ValueError);
    // As in TensorFlow the step default still applies, so seconds alone are two frequencies.
    expect(() => new StepCounterHook({ everyNSecs: 1 })).toThrow(message);
    expect(() => new StepCounterHook({ everyNSteps: null })).toThrow(message);
    expect(() => new StepCounterHook({ everyNSteps: null, everyNSecs: 1 })).not.toThrow();
    expect(() => new StepCounterHook()).not.toThrow();
  });

  it("StepCounterHookTest.test_step_counter_every_n_steps: everyNSteps 10 over 30 runs writes rates at steps 11 and 21, no warning", async () => {
    const writer = new FakeSummaryWriter();
    const hook = new StepCounterHook({ everyNSteps: 10, summaryWriter: writer });
    const events = await train(hook, 30, 10);
    expect(writer.steps).toEqual([11, 21]);
    for (const step of [11, 21]) {
      // 10 steps in 10 runs of 10 ms each.
      expect(writer.summaries.get(step)).toEqual([{ tag: "global_step/sec", value: 100 }]);
    }
    expect(events.messages("info")).toEqual(["global_step/sec: 100", "global_step/sec: 100"]);
    expect(events.ofType("stepRate")).toMatchObject([
      { globalStep: 11, stepsPerSec: 100 },
      { globalStep: 21, stepsPerSec: 100 },
    ]);
    expect(events.messages("warn")).toEqual([]);
    expect(events.ofType("warning")).toEqual([]);
  });

  it("examplesPerStep: also writes and logs examples/sec (steps/sec × examples per step); a non-positive value is rejected", async () => {
    const writer = new FakeSummaryWriter();
    // Data parallelism: 64 examples per replica × 3 replicas per global step.
    const hook = new StepCounterHook({ everyNSteps: 10, summaryWriter: writer, examplesPerStep: 192 });
    const events = await train(hook, 12, 10);
    expect(writer.summaries.get(11)).toEqual([
      { tag: "global_step/sec", value: 100 },
      { tag: "examples/sec", value: 19_200 },
    ]);
    expect(events.messages("info")).toEqual(["global_step/sec: 100", "examples/sec: 19200"]);
    expect(events.ofType("stepRate")).toMatchObject([{ globalStep: 11, stepsPerSec: 100, examplesPerSec: 19_200 }]);
    expect(() => new StepCounterHook({ examplesPerStep: 0 })).toThrow(/examplesPerStep must be a positive number, got 0/);
  });

  it("StepCounterHookTest.test_step_counter_every_n_secs: everyNSecs 0.1 with 0.2 s between runs writes at steps 2 and 3", async () => {
    const writer = new FakeSummaryWriter();
    const hook = new StepCounterHook({ everyNSteps: null, everyNSecs: 0.1, summaryWriter: writer });
    const events = await train(hook, 3, 200);
    expect(writer.steps).toEqual([2, 3]);
    expect(writer.summaries.get(2)?.[0]?.value).toBe(5);
    expect(writer.summaries.get(3)?.[0]?.value).toBe(5);
    expect(events.messages("info")).toEqual(["global_step/sec: 5", "global_step/sec: 5"]);
  });

  it("everyNSecs does not fire before the interval has passed", async () => {
    const writer = new FakeSummaryWriter();
    const hook = new StepCounterHook({ everyNSteps: null, everyNSecs: 1, summaryWriter: writer });
    await train(hook, 12, 300);
    // Anchored at step 1 (t=0.3 s); then steps 5 (1.5 s), 9 (2.7 s) after >= 1 s each.
    expect(writer.steps).toEqual([5, 9]);
    expect(writer.summaries.get(5)?.[0]?.value).toBeCloseTo(4 / 1.2, 12);
  });

  it("StepCounterHookTest.test_global_step_name: the tag is '<global step name>/sec'", async () => {
    const writer = new FakeSummaryWriter();
    const hook = new StepCounterHook({ everyNSteps: 1, summaryWriter: writer });
    const clock = new VirtualClock();
    const { sess, events } = await driveHooks({ hooks: [hook], graph: trainingGraph({ globalStepName: "bar/foo" }), clock });
    for (let i = 0; i < 2; i++) {
      await clock.advance(500);
      await sess.run("train");
    }
    await sess.close();
    expect(writer.steps).toEqual([2]);
    expect(writer.summaries.get(2)).toEqual([{ tag: "bar/foo/sec", value: 2 }]);
    expect(events.messages("info")).toEqual(["bar/foo/sec: 2"]);
    expect(events.ofType("stepRate")).toMatchObject([{ globalStep: 2, stepsPerSec: 2, tag: "bar/foo/sec" }]);
  });

  it("StepCounterHookTest.test_log_warning_if_global_step_not_increased: a frozen step warns, at most 5 times", async () => {
    const hook = new StepCounterHook({ everyNSteps: 1 });
    const events = await train(hook, 31, 10, 0);
    const warnings = events.messages("warn");
    expect(warnings).toHaveLength(5);
    for (const w of warnings) expect(w).toMatch(/global step \(global_step\) has not been increased/);
    expect(warnings[0]).toContain("Current value (could be stable): 0 vs previous value: 0");
    expect(events.messages("info")).toEqual([]);
  });

  it("each 'not increased' warning is also a warning event on events$", async () => {
    const hook = new StepCounterHook({ everyNSteps: 1 });
    const { sess, events } = await driveHooks({ hooks: [hook], graph: trainingGraph({ stepsPerRun: 0 }) });
    for (let i = 0; i < 8; i++) await sess.run("train");
    await sess.close();
    const warnings = events.ofType("warning").map((e) => e.message);
    expect(warnings).toHaveLength(5);
    expect(warnings[4]).toMatch(/has not been increased/);
    // The data and the line say the same thing, once each.
    expect(events.messages("warn")).toEqual(warnings);
  });

  it.each([
    { name: "test_steps_per_run_less_than_every_n_steps", everyNSteps: 10, stepsPerRun: 5, expected: [15, 25] },
    { name: "test_steps_per_run_equal_every_n_steps", everyNSteps: 5, stepsPerRun: 5, expected: [10, 15, 20, 25] },
    { name: "test_steps_per_run_greater_than_every_n_steps", everyNSteps: 5, stepsPerRun: 10, expected: [20, 30, 40, 50] },
  ])("StepCounterHookTest.$name: everyNSteps $everyNSteps, stepsPerRun $stepsPerRun → $expected", async ({ everyNSteps, stepsPerRun, expected }) => {
    const writer = new FakeSummaryWriter();
    const hook = new StepCounterHook({ everyNSteps, stepsPerRun, summaryWriter: writer });
    await train(hook, 5, 10, stepsPerRun);
    expect(writer.steps).toEqual(expected);
    for (const step of expected) {
      expect(writer.summaries.get(step)?.[0]?.value).toBeGreaterThan(0);
    }
  });

  it("emits stepRate and summaryWritten events at the measured global step", async () => {
    const clock = new VirtualClock();
    const hook = new StepCounterHook({ everyNSteps: 10, summaryWriter: new FakeSummaryWriter() });
    const { sess, events } = await driveHooks({ hooks: [hook], graph: trainingGraph(), clock });
    for (let i = 0; i < 12; i++) {
      clock.set(clock.now() + 100);
      await sess.run("train");
    }
    await sess.close();
    expect(events.events.filter((e) => e.type === "stepRate" || e.type === "summaryWritten")).toMatchObject([
      { type: "summaryWritten", globalStep: 11, durationMs: 0, hook: "StepCounterHook" },
      { type: "stepRate", globalStep: 11, stepsPerSec: 10 },
    ]);
  });

  it("reads the true step only when the stale pre-check fires", async () => {
    const hook = new StepCounterHook({ everyNSteps: 10 });
    const clock = new VirtualClock();
    const { sess, raw } = await driveHooks({ hooks: [hook], clock });
    for (let i = 0; i < 30; i++) {
      await clock.advance(10);
      await sess.run("train");
    }
    // Stale+1 hits 1 (anchor), 11 and 21: three extra reads in 30 runs.
    expect(raw.readsOf("global_step")).toBe(3);
    await sess.close();
  });

  it("hot path: a run that does not measure returns no promise", async () => {
    const hook = new StepCounterHook({ everyNSteps: 10 });
    const { sess, raw } = await driveHooks({ hooks: [hook] });
    const ctx = new SessionRunContext(SessionRunArgs("train"), raw);
    expect(hook.beforeRun(ctx)).toBe(hook.beforeRun(ctx));
    await hook.afterRun(ctx, { results: 0, options: {}, runMetadata: {} }); // anchors at the true step 0
    expect(hook.afterRun(ctx, { results: 1, options: {}, runMetadata: {} })).toBeUndefined();
    const measuring = hook.afterRun(ctx, { results: 9, options: {}, runMetadata: {} });
    expect(measuring).toBeInstanceOf(Promise);
    await measuring;
    await sess.close();
  });

  it("formats the rate with %g and logs it with fields", async () => {
    const hook = new StepCounterHook({ everyNSteps: 1 });
    const events = await train(hook, 3, 3);
    // One step per 3 ms.
    expect(events.messages("info")).toEqual(["global_step/sec: 333.333", "global_step/sec: 333.333"]);
    expect(events.lines()[0]?.fields).toEqual({ step: 2, stepsPerSec: 1000 / 3 });
  });

  it("edge case 20 (deviation): with no time elapsed there is no rate, and nothing throws", async () => {
    const writer = new FakeSummaryWriter();
    const hook = new StepCounterHook({ everyNSteps: 1, summaryWriter: writer });
    const events = await train(hook, 5, 0);
    expect(writer.steps).toEqual([]);
    expect(events.messages()).toEqual([]);
    expect(events.ofType("stepRate")).toEqual([]);
  });

  it("uses its own clock and logger when given, over the session's", async () => {
    const own = new VirtualClock();
    const ownLogger = new RecordingLogger();
    const hook = new StepCounterHook({ everyNSteps: 1, clock: own, logger: ownLogger });
    const { sess, events } = await driveHooks({ hooks: [hook] });
    await sess.run("train");
    own.set(own.now() + 250);
    await sess.run("train");
    await sess.close();
    // The hook's own logger is a plain-logger path: its lines are printed there, not on events$.
    expect(ownLogger.messages("info")).toEqual(["global_step/sec: 4"]);
    expect(events.messages("info")).toEqual([]);
    // The rate is still the session's data, timed on the hook's own clock.
    expect(events.ofType("stepRate")).toMatchObject([{ globalStep: 2, stepsPerSec: 4 }]);
  });
});
