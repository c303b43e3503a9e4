import { debounceTime, interval, Subject, take, timer } from "rxjs";
import { describe, expect, it } from "vitest";

import { ClockScheduler } from "../../src/time/ClockScheduler.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";

describe("ClockScheduler", () => {
  it("now() is the clock's", () => {
    const clock = new VirtualClock({ startMs: 5_000 });
    expect(new ClockScheduler(clock).now()).toBe(5_000);
  });

  it("runs interval on virtual time: ticks fire only as the clock advances", async () => {
    const clock = new VirtualClock();
    const ticks: [number, number][] = [];
    const start = clock.now();
    const sub = interval(1000, new ClockScheduler(clock)).subscribe((i) => ticks.push([i, clock.now() - start]));
    await clock.advance(999);
    expect(ticks).toEqual([]);
    await clock.advanceSecs(3);
    expect(ticks).toEqual([
      [0, 1000],
      [1, 2000],
      [2, 3000],
    ]);
    sub.unsubscribe();
    expect(clock.pendingTimers).toBe(0);
  });

  it("debounceTime waits for quiet on the clock, and unsubscribing cancels its timer", async () => {
    const clock = new VirtualClock();
    const input = new Subject<number>();
    const out: number[] = [];
    const sub = input.pipe(debounceTime(500, new ClockScheduler(clock))).subscribe((v) => out.push(v));
    input.next(1);
    await clock.advance(300);
    input.next(2);
    await clock.advance(300);
    expect(out).toEqual([]);
    await clock.advance(200);
    expect(out).toEqual([2]);
    input.next(3);
    expect(clock.pendingTimers).toBe(1);
    sub.unsubscribe();
    expect(clock.pendingTimers).toBe(0);
    await clock.advanceSecs(10);
    expect(out).toEqual([2]);
  });

  it("a delayed timer completes once", async () => {
    const clock = new VirtualClock();
    const events: string[] = [];
    timer(2000, new ClockScheduler(clock))
      .pipe(take(1))
      .subscribe({ next: () => events.push(`next@${clock.now()}`), complete: () => events.push("complete") });
    await clock.advanceSecs(5);
    expect(events).toEqual([`next@${1_700_000_002_000}`, "complete"]);
  });
});
