/**
 * The session gives Node's event loop a turn on a time budget (on the session's clock) and
 * after every run while background work is pending, so that a synchronous training step does
 * not starve signals, timers and I/O. Virtual clock only: "time" is what the steps add to it.
 */
import { describe, expect, it } from "vitest";

import { ValueError } from "../../src/errors.js";
import { EventLoopYield } from "../../src/pipeline/EventLoopYield.js";
import { Graph } from "../../src/session/Graph.js";
import { silentLogger } from "../../src/Logger.js";
import { MonitoredSession } from "../../src/pipeline/MonitoredSession.js";
import type { SessionRunHook } from "../../src/hook/SessionRunHook.js";
import { Supervisor } from "../../src/compat/v1/Supervisor.js";
import { VirtualClock } from "../../src/testing/index.js";

/** A graph whose `train` op is synchronous and advances the virtual clock by `stepMs`. */
const busyGraph = (clock: VirtualClock, stepMs: number): Graph => {
  const g = new Graph();
  const step = g.globalStep();
  g.op("train", (ctx) => {
    clock.set(clock.now() + stepMs);
    return ctx.assignAdd(step, 1);
  });
  return g;
};

/** Counts macrotasks that ran while `loop` ran; without turns, none can. */
const macrotasksDuring = async (loop: () => Promise<void>): Promise<number> => {
  let ran = 0;
  let stop = false;
  const tick = (): void => {
    if (stop) return;
    ran += 1;
    setImmediate(tick);
  };
  setImmediate(tick);
  await loop();
  stop = true;
  return ran;
};

const create = (clock: VirtualClock, stepMs: number, extra: { yieldIntervalMs?: number; hooks?: SessionRunHook[] } = {}) =>
  MonitoredSession.create({ graph: busyGraph(clock, stepMs), clock, logger: silentLogger, ...extra });

describe("EventLoopYield", () => {
  it("a plain `while (!shouldStop()) await run()` over synchronous steps gives the event loop a turn every yieldIntervalMs", async () => {
    const clock = new VirtualClock();
    const sess = await create(clock, 3, { yieldIntervalMs: 10 });
    const turnsBefore = clock.turnsYielded;
    const ran = await macrotasksDuring(async () => {
      for (let i = 0; i < 100; i++) await sess.run("train");
    });
    // 300 ms of training, a turn at least every 10 ms: every 4th step (12 ms).
    expect(clock.turnsYielded - turnsBefore).toBe(25);
    expect(ran).toBeGreaterThanOrEqual(25);
    await sess.close();
  });

  it("without the yield (yieldIntervalMs: Infinity, nothing pending) the same loop starves the event loop", async () => {
    const clock = new VirtualClock();
    const sess = await create(clock, 3, { yieldIntervalMs: Number.POSITIVE_INFINITY });
    const ran = await macrotasksDuring(async () => {
      for (let i = 0; i < 100; i++) await sess.run("train");
    });
    expect(ran).toBe(0);
    expect(clock.turnsYielded).toBe(0);
    await sess.close();
  });

  it("yieldIntervalMs 0 yields after every run; the default is 5 ms", async () => {
    const clock = new VirtualClock();
    const every = await create(clock, 0, { yieldIntervalMs: 0 });
    for (let i = 0; i < 7; i++) await every.run("train");
    expect(clock.turnsYielded).toBe(7);
    await every.close();

    const clock2 = new VirtualClock();
    const byDefault = await create(clock2, 1);
    for (let i = 0; i < 40; i++) await byDefault.run("train");
    expect(clock2.turnsYielded).toBe(8);
    await byDefault.close();
  });

  it("while a hook's background work is pending, every run ends with a turn, so the work's callbacks run between steps", async () => {
    const clock = new VirtualClock();
    let finish: (() => void) | undefined;
    let landed = false;
    const background: SessionRunHook = {
      name: "background",
      begin: (env) => {
        const work = new Promise<void>((resolve) => (finish = resolve)).then(() => {
          landed = true;
        });
        env.trackBackground?.(work);
      },
    };
    const sess = await create(clock, 0, { yieldIntervalMs: Number.POSITIVE_INFINITY, hooks: [background] });
    // The "I/O" completes in a macrotask, as a real write's callback does.
    setImmediate(() => finish?.());
    let steps = 0;
    while (!landed) {
      await sess.run("train");
      steps += 1;
      expect(steps).toBeLessThan(10);
    }
    const turns = clock.turnsYielded;
    for (let i = 0; i < 5; i++) await sess.run("train");
    // Nothing pending any more and no interval: no further turns.
    expect(clock.turnsYielded).toBe(turns);
    await sess.close();
  });

  it("a failed run also waits for its turn, and still fails", async () => {
    const clock = new VirtualClock();
    const g = new Graph();
    g.op("boom", () => {
      clock.set(clock.now() + 50);
      throw new Error("kernel failed");
    });
    const sess = await MonitoredSession.create({ graph: g, clock, logger: silentLogger });
    await expect(sess.run("boom")).rejects.toThrow("kernel failed");
    expect(clock.turnsYielded).toBe(1);
  });

  it("runStepFn yields like run", async () => {
    const clock = new VirtualClock();
    const sess = await create(clock, 6, { yieldIntervalMs: 10 });
    for (let i = 0; i < 10; i++) await sess.runStepFn((ctx) => ctx.runWithHooks("train"));
    expect(clock.turnsYielded).toBe(5);
    await sess.close();
  });

  it("sessions handed out by Supervisor.managedSession yield, so the services' timers fire during a synchronous loop", async () => {
    const clock = new VirtualClock();
    const sv = new Supervisor({ graph: busyGraph(clock, 5), clock, logger: silentLogger, saveSummariesSecs: null, saveModelSecs: null, yieldIntervalMs: 10 });
    const ran = await sv.managedSession((sess) =>
      macrotasksDuring(async () => {
        for (let i = 0; i < 20; i++) await sess.run("train");
      }),
    );
    expect(clock.turnsYielded).toBe(10);
    expect(ran).toBeGreaterThanOrEqual(10);
    // The managed session keeps the raw session's API.
    const kept = await sv.managedSession((sess) => sess.globalStepName);
    expect(kept).toBe("global_step");
  });

  it("work that progresses off the thread adds no turns under a time budget, and gets one per run without it", async () => {
    const clock = new VirtualClock();
    const timed = new EventLoopYield(clock, 10);
    let finish!: () => void;
    const work = new Promise<void>((resolve) => (finish = resolve));
    timed.track(work, { offThread: true });
    // Runs of 1 ms: the first due turn is the time budget's, after 10 ms.
    let dueAt: number | undefined;
    for (let i = 1; i <= 20 && dueAt === undefined; i++) {
      clock.set(clock.now() + 1);
      if (timed.due()) dueAt = i;
    }
    expect(dueAt).toBe(10);

    const untimed = new EventLoopYield(clock, Number.POSITIVE_INFINITY);
    untimed.track(work, { offThread: true });
    expect([untimed.due(), untimed.due()]).toEqual([true, true]);
    finish();
    await work;
    expect(untimed.due()).toBe(false);
  });

  it("reads the clock only every few runs when runs are much shorter than the interval, and still yields on time", async () => {
    const clock = new VirtualClock();
    let reads = 0;
    const counting = Object.assign(Object.create(clock) as VirtualClock, {
      now: () => {
        reads += 1;
        return clock.now();
      },
    });
    const y = new EventLoopYield(counting, 10);
    reads = 0;
    const runs = async (n: number, msEach: number): Promise<number> => {
      let turns = 0;
      for (let i = 0; i < n; i++) {
        clock.set(clock.now() + msEach);
        if (y.due()) {
          turns += 1;
          await y.take();
        }
      }
      return turns;
    };
    // 0.01 ms runs: 1000 runs = 10 ms, one turn; the clock is read far less than once a run.
    expect(await runs(1000, 0.01)).toBe(1);
    expect(reads).toBeLessThan(200);
    // Runs become slow at once: noticed within 8 runs, then every run is checked.
    expect(await runs(8, 20)).toBeGreaterThanOrEqual(1);
    reads = 0;
    expect(await runs(10, 20)).toBe(10);
    expect(reads).toBeGreaterThanOrEqual(10);
  });

  it("rejects a negative or NaN interval", async () => {
    const clock = new VirtualClock();
    expect(() => new EventLoopYield(clock, -1)).toThrow(ValueError);
    expect(() => new EventLoopYield(clock, Number.NaN)).toThrow("yieldIntervalMs must be a number >= 0");
    await expect(create(clock, 1, { yieldIntervalMs: -5 })).rejects.toThrow(ValueError);
    expect(() => new Supervisor({ graph: new Graph(), clock, yieldIntervalMs: -1 })).toThrow(ValueError);
  });
});
