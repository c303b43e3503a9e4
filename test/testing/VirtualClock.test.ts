import { describe, expect, it } from "vitest";
import { VirtualClock } from "../../src/testing/index.js";

describe("VirtualClock", () => {
  it("fires timers in time order as it advances, and wakes sleepers", async () => {
    const clock = new VirtualClock({ startMs: 0 });
    const fired: string[] = [];
    clock.setTimer(300, () => fired.push(`b@${clock.now()}`));
    clock.setTimer(100, () => fired.push(`a@${clock.now()}`));
    const cancelled = clock.setTimer(200, () => fired.push("never"));
    cancelled.cancel();
    let woke = -1;
    void clock.sleep(250).then(() => (woke = clock.now()));
    await clock.advance(200);
    expect(fired).toEqual(["a@100"]);
    expect(woke).toBe(-1);
    await clock.advance(200);
    expect(fired).toEqual(["a@100", "b@300"]);
    expect(woke).toBe(250);
    expect(clock.now()).toBe(400);
    expect(clock.pendingTimers).toBe(0);
  });

  it("lets a woken loop schedule its next timer within the same advance", async () => {
    const clock = new VirtualClock({ startMs: 0 });
    const ticks: number[] = [];
    void (async () => {
      for (let i = 0; i < 5; i++) {
        await clock.sleep(1000);
        ticks.push(clock.now());
      }
    })();
    await clock.advanceSecs(3.5);
    expect(ticks).toEqual([1000, 2000, 3000]);
  });

  it("sleep resolves early on abort; autoAdvance moves time by itself", async () => {
    const clock = new VirtualClock({ startMs: 0 });
    const ac = new AbortController();
    const p = clock.sleep(10_000, ac.signal);
    ac.abort();
    await p;
    expect(clock.now()).toBe(0);
    const auto = new VirtualClock({ startMs: 0, autoAdvance: true });
    await auto.sleep(500);
    await auto.sleep(500);
    expect(auto.now()).toBe(1000);
    expect(auto.sleeps).toEqual([500, 500]);
  });

  it("monotonic() moves with advance and autoAdvance, not with set() (a jump of the wall clock)", async () => {
    const clock = new VirtualClock({ startMs: 1_000 });
    const m0 = clock.monotonic();
    await clock.advance(250);
    clock.set(5_000_000);
    expect(clock.now()).toBe(5_000_000);
    expect(clock.monotonic() - m0).toBe(250);
    clock.set(0);
    await clock.advance(50);
    expect(clock.now()).toBe(50);
    expect(clock.monotonic() - m0).toBe(300);
    const auto = new VirtualClock({ startMs: 0, autoAdvance: true });
    await auto.sleep(40);
    expect(auto.monotonic()).toBe(40);
  });
});
