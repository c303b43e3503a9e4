/** FailureStreak: a repeated failure is warned once per streak, its repeats at debug, the recovery once. */
import { describe, expect, it } from "vitest";

import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { FailureStreak } from "../../src/preemption/failureStreak.js";

describe("FailureStreak", () => {
  it("warns the first failure of each streak, says the repeats at debug and the first success after it at info; successes alone say nothing", () => {
    const events = new EventRecorder();
    const streak = new FailureStreak(events.logger());
    streak.succeeded("back");
    streak.failed("down", "still down");
    streak.failed("down", "still down");
    streak.succeeded("back");
    streak.succeeded("back");
    streak.failed("down again", "still down");
    expect(events.lines().map((e) => [e.level, e.message])).toEqual([
      ["warn", "down"],
      ["debug", "still down"],
      ["info", "back"],
      ["warn", "down again"],
    ]);
  });
});
