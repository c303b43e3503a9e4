import { describe, expect, it } from "vitest";
import { ValueError } from "../../src/errors.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { NeverTriggerTimer, SecondOrStepTimer } from "../../hooks/SecondOrStepTimer.js";

describe("SecondOrStepTimer", () => {
  it("SecondOrStepTimerTest.test_raise_in_both_secs_and_steps: both frequencies are a ValueError naming them", () => {
    expect(() => new SecondOrStepTimer({ everySecs: 2, everySteps: 10 })).toThrow(ValueError);
    expect(() => new SecondOrStepTimer({ everySecs: 2, everySteps: 10 })).toThrow(
      "Can not provide both everySecs and everySteps.",
    );
  });

  it("SecondOrStepTimerTest.test_raise_in_none_secs_and_steps: no frequency is a ValueError naming both", () => {
    expect(() => new SecondOrStepTimer({})).toThrow(ValueError);
    expect(() => new SecondOrStepTimer({ everySecs: undefined })).toThrow(
      "Either everySecs or everySteps should be provided.",
    );
  });

  it("SecondOrStepTimerTest.test_every_secs: fires once a second has passed, never twice for one step", () => {
    const clock = new VirtualClock();
    const timer = new SecondOrStepTimer({ everySecs: 1, clock });
    expect(timer.shouldTriggerForStep(1)).toBe(true);
    timer.updateLastTriggeredStep(1);
    expect(timer.shouldTriggerForStep(1)).toBe(false);
    expect(timer.shouldTriggerForStep(2)).toBe(false);
    clock.set(clock.now() + 999);
    expect(timer.shouldTriggerForStep(2)).toBe(false);
    clock.set(clock.now() + 1);
    expect(timer.shouldTriggerForStep(1)).toBe(false);
    expect(timer.shouldTriggerForStep(2)).toBe(true);
  });

  it("SecondOrStepTimerTest.test_every_steps: with everySteps 3, fires at 1, not at 2 or 3, again at 4", () => {
    const timer = new SecondOrStepTimer({ everySteps: 3, clock: new VirtualClock() });
    expect(timer.shouldTriggerForStep(1)).toBe(true);
    timer.updateLastTriggeredStep(1);
    expect([1, 2, 3, 4].map((s) => timer.shouldTriggerForStep(s))).toEqual([false, false, false, true]);
    expect(timer.lastTriggeredStep()).toBe(1);
  });

  it("SecondOrStepTimerTest.test_update_last_triggered_step: nothing on the first trigger, then seconds and steps since the previous", () => {
    const clock = new VirtualClock();
    const timer = new SecondOrStepTimer({ everySteps: 1, clock });
    expect(timer.updateLastTriggeredStep(1)).toEqual([undefined, undefined]);
    clock.set(clock.now() + 2500);
    expect(timer.updateLastTriggeredStep(5)).toEqual([2.5, 4]);
    clock.set(clock.now() + 250);
    expect(timer.updateLastTriggeredStep(7)).toEqual([0.25, 2]);
    expect(timer.lastTriggeredStep()).toBe(7);
  });

  it("edge case 19: everySecs 0 fires on every new step and never re-fires for the same step", () => {
    const timer = new SecondOrStepTimer({ everySecs: 0, clock: new VirtualClock() });
    const fired: number[] = [];
    for (const step of [0, 0, 1, 1, 2, 5, 5]) {
      if (timer.shouldTriggerForStep(step)) {
        fired.push(step);
        timer.updateLastTriggeredStep(step);
      }
    }
    expect(fired).toEqual([0, 1, 2, 5]);
  });

  it("reset forgets the last trigger: the next step fires and reports nothing elapsed", () => {
    const clock = new VirtualClock();
    const timer = new SecondOrStepTimer({ everySteps: 100, clock });
    timer.updateLastTriggeredStep(10);
    expect(timer.shouldTriggerForStep(11)).toBe(false);
    timer.reset();
    expect(timer.lastTriggeredStep()).toBeUndefined();
    expect(timer.shouldTriggerForStep(11)).toBe(true);
    clock.set(clock.now() + 1000);
    expect(timer.updateLastTriggeredStep(11)).toEqual([undefined, undefined]);
  });

  it("reads time only from its clock", () => {
    const clock = new VirtualClock({ startMs: 0 });
    const timer = new SecondOrStepTimer({ everySecs: 60, clock });
    timer.updateLastTriggeredStep(0);
    // Real time passes while the virtual clock stands still: no trigger.
    expect(timer.shouldTriggerForStep(1)).toBe(false);
    clock.set(60_000);
    expect(timer.shouldTriggerForStep(1)).toBe(true);
  });
});

describe("NeverTriggerTimer", () => {
  it("never fires, reports nothing elapsed and has no last step", () => {
    const timer = new NeverTriggerTimer();
    expect(timer.shouldTriggerForStep(0)).toBe(false);
    expect(timer.shouldTriggerForStep(1_000_000)).toBe(false);
    expect(timer.updateLastTriggeredStep(5)).toEqual([undefined, undefined]);
    expect(timer.lastTriggeredStep()).toBeUndefined();
    timer.reset();
    expect(timer.shouldTriggerForStep(0)).toBe(false);
  });
});
