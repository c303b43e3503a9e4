import { describe, expect, it } from "vitest";
import { SessionRunArgs, SessionRunContext } from "../../src/hook/SessionRunHook.js";
import { flush, VirtualClock } from "../../src/testing/VirtualClock.js";
import { GlobalStepWaiterHook } from "../../hooks/GlobalStepWaiterHook.js";
import { driveHooks, setGlobalStep, trainingGraph } from "../util/driveHooks.js";

describe("GlobalStepWaiterHook", () => {
  it("GlobalStepWaiterHookTest.test_not_wait_for_step_zero: beforeRun returns at once, without reading or sleeping", async () => {
    const clock = new VirtualClock();
    const hook = new GlobalStepWaiterHook({ waitUntilStep: 0 });
    const { sess, raw } = await driveHooks({ hooks: [hook], clock });
    // Synchronous: no promise, so no microtask on the run path.
    expect(hook.beforeRun(new SessionRunContext(SessionRunArgs("train"), raw))).toBeUndefined();
    await sess.run("train");
    expect(clock.sleeps).toEqual([]);
    expect(raw.readsOf("global_step")).toBe(0);
    await sess.close();
  });

  it("GlobalStepWaiterHookTest.test_wait_for_step: waits through exactly two 0.5 s sleeps until the chief reaches 1100 >= 1000", async () => {
    const clock = new VirtualClock();
    const hook = new GlobalStepWaiterHook({ waitUntilStep: 1000 });
    const { sess, raw, events } = await driveHooks({ hooks: [hook], clock });
    let finished = false;
    const run = sess.run("train").then(() => (finished = true));
    await flush();
    expect(clock.sleeps).toEqual([500]);
    // The chief trains while this worker sleeps.
    await setGlobalStep(raw, 500);
    await clock.advance(500);
    expect(finished).toBe(false);
    expect(clock.sleeps).toEqual([500, 500]);
    await setGlobalStep(raw, 1100);
    await clock.advance(500);
    await run;
    expect(clock.sleeps).toEqual([500, 500]);
    expect(await raw.run("global_step")).toBe(1101);
    expect(events.messages()).toEqual(["Waiting for global step 1000 before starting training."]);
    expect(events.lines()[0]?.level).toBe("info");

    // Started: later runs neither read nor sleep.
    const reads = raw.readsOf("global_step");
    await sess.run("train");
    expect(raw.readsOf("global_step")).toBe(reads);
    expect(clock.sleeps).toHaveLength(2);
    await sess.close();
  });

  it("logs progress when the step moved more than 1000 since the last progress line", async () => {
    const clock = new VirtualClock();
    const hook = new GlobalStepWaiterHook({ waitUntilStep: 5000 });
    const { sess, raw, events } = await driveHooks({ hooks: [hook], clock });
    const run = sess.run("train");
    for (const step of [500, 1000, 1001, 2001, 2002, 5400]) {
      await flush();
      await setGlobalStep(raw, step);
      await clock.advance(500);
    }
    await run;
    expect(clock.sleeps).toHaveLength(6);
    // "More than 1000": 1000 and 2001 are exactly 1000 past the last line, so they do not log.
    expect(events.messages("info")).toEqual([
      "Waiting for global step 5000 before starting training.",
      "Waiting for global step 5000 before starting training. Current step is 1001.",
      "Waiting for global step 5000 before starting training. Current step is 2002.",
    ]);
    await sess.close();
  });

  it("a worker that starts past the target does not sleep", async () => {
    const clock = new VirtualClock();
    const hook = new GlobalStepWaiterHook({ waitUntilStep: 10 });
    const { sess } = await driveHooks({ hooks: [hook], clock, initialGlobalStep: 10 });
    await sess.run("train");
    expect(clock.sleeps).toEqual([]);
    await sess.close();
  });

  it("a session without a global step is a RuntimeError naming the hook", async () => {
    const hook = new GlobalStepWaiterHook({ waitUntilStep: 10 });
    await expect(
      driveHooks({ hooks: [hook], graph: trainingGraph({ globalStepName: null }) }),
    ).rejects.toThrow("Global step should be created to use GlobalStepWaiterHook.");
  });
});

describe("GlobalStepWaiterHook options", () => {
  it("rejects a waitUntilStep that is not a number, naming the option", () => {
    expect(() => new GlobalStepWaiterHook({ waitUntilStep: "10" as never })).toThrow('GlobalStepWaiterHook: waitUntilStep: expected an integer >= 0, got "10"');
    expect(() => new GlobalStepWaiterHook({ waitUntilStep: Number.NaN })).toThrow(/waitUntilStep/);
  });
});
