import { debounceTime, filter, finalize, interval, map, pairwise, scan, switchMap, tap } from "rxjs";
import { describe, expect, it } from "vitest";

import { operatorHook } from "../../hooks/operatorHook.js";
import { RuntimeError, ValueError } from "../../src/errors.js";
import { silentLogger } from "../../src/Logger.js";
import { withSession } from "../../src/pipeline/MonitoredSession.js";
import type { SessionEvent } from "../../src/events/SessionEvent.js";
import { FakeSession, FakeSessionCreator } from "../../src/testing/index.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { driveHooks, trainingGraph } from "../util/driveHooks.js";

/** A loss that falls by half a unit per run until run `flatFrom`, then stays flat. */
const lossGraph = (flatFrom: number) => {
  let calls = 0;
  return trainingGraph({ ops: { loss: () => 10 - 0.5 * Math.min(++calls, flatFrom) } });
};

describe("operatorHook", () => {
  it("adds its declared fetches to the run and gives the pipeline their values", async () => {
    const seen: unknown[] = [];
    const hook = operatorHook({
      name: "recorder",
      fetches: { loss: "loss", step: "global_step" },
      pipeline: (runs$) => runs$.pipe(tap((r) => seen.push(r.results)), filter(() => false)),
    });
    const { sess, raw } = await driveHooks({ hooks: [hook], graph: lossGraph(100) });
    const own = await sess.run("train");
    await sess.run("train");
    // The caller's result is its own; the hook's fetches ride along in the same raw run.
    expect(own).toBe(1);
    expect(raw.runs[0]).toEqual(["train", { loss: "loss", step: "global_step" }]);
    expect(seen).toEqual([
      { loss: 9.5, step: 0 },
      { loss: 9, step: 1 },
    ]);
    await sess.close();
  });

  it("the docs' plateau example: every 100 steps, smoothed loss, stops at the very step the plateau shows", async () => {
    const stopOnPlateau = operatorHook({
      name: "stopOnPlateau",
      fetches: { loss: "loss", step: "global_step" },
      pipeline: (runs$) =>
        runs$.pipe(
          filter(({ results }) => Number(results.step) % 100 === 0),
          map(({ results }) => Number(results.loss)),
          scan((ema, loss) => 0.5 * ema + 0.5 * loss),
          pairwise(),
          filter(([before, now]) => before - now < 0.001 * before),
        ),
    });
    // The loss falls for 1000 runs (to 5), then is flat.
    let calls = 0;
    const graph = trainingGraph({ ops: { loss: () => 10 - 0.005 * Math.min(++calls, 1000) } });
    const { sess } = await driveHooks({ hooks: [stopOnPlateau], graph });
    const stops: SessionEvent[] = [];
    sess.events$.pipe(filter((e) => e.type === "stopRequested")).subscribe((e) => stops.push(e));
    let runs = 0;
    while (!sess.shouldStop()) {
      await sess.run("train");
      runs += 1;
    }
    // Samples at steps 0, 100, ...: the smoothed loss is still falling by > 0.1% until the
    // raw loss has been flat long enough; the stop happens on a sampled run, not one later.
    // The smoothed loss at step 1700 is within 0.1% of step 1600's: run 1701 (global step 1700
    // before its increment) stops, with no run after it.
    expect(runs).toBe(1701);
    expect(stops).toEqual([expect.objectContaining({ by: "stopOnPlateau" })]);
    await sess.close();
  });

  it("time-based operators run on the session's VirtualClock; a stop they emit later applies after the next run", async () => {
    const clock = new VirtualClock();
    const hook = operatorHook({
      name: "quietStop",
      pipeline: (runs$, { scheduler }) => runs$.pipe(debounceTime(60_000, scheduler)),
    });
    const { sess } = await driveHooks({ hooks: [hook], clock });
    await sess.run("train");
    await clock.advanceSecs(59);
    await sess.run("train");
    await clock.advanceSecs(59);
    expect(sess.shouldStop()).toBe(false);
    // A minute without a run: the debounce fires on the virtual clock.
    await clock.advanceSecs(1);
    expect(sess.shouldStop()).toBe(false);
    await sess.run("train");
    expect(sess.shouldStop()).toBe(true);
    await sess.close();
  });

  it("an error in the pipeline fails that run with a RuntimeError naming the hook, the error as cause", async () => {
    const boom = new Error("loss is not a number");
    const hook = operatorHook({
      name: "strict",
      fetches: "loss",
      pipeline: (runs$) =>
        runs$.pipe(
          map((r) => {
            if (r.run === 2) throw boom;
            return r;
          }),
          filter(() => false),
        ),
    });
    const { sess } = await driveHooks({ hooks: [hook], graph: lossGraph(10) });
    await sess.run("train");
    const err = await sess.run("train").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RuntimeError);
    expect((err as Error).message).toBe('operatorHook "strict": its pipeline failed at run 2: loss is not a number');
    expect((err as Error).cause).toBe(boom);
    // Reported once: closing does not throw it again.
    await sess.close();
  });

  /** One run, then a failure on a timer a second later. */
  const failingOnTimer = async (name: string) => {
    const clock = new VirtualClock();
    const hook = operatorHook({
      name,
      pipeline: (runs$, { scheduler }) =>
        runs$.pipe(
          debounceTime(1000, scheduler),
          map(() => {
            throw new Error("late failure");
          }),
        ),
    });
    const { sess } = await driveHooks({ hooks: [hook], clock });
    await sess.run("train");
    await clock.advanceSecs(2);
    return sess;
  };

  it("an error on a timer fails the next run", async () => {
    const sess = await failingOnTimer("timed");
    await expect(sess.run("train")).rejects.toThrow('operatorHook "timed": its pipeline failed on a timer after run 1: late failure');
    await sess.close();
  });

  it("an error on a timer after the last run fails the close (end), naming the hook", async () => {
    const sess = await failingOnTimer("lateFail");
    await expect(sess.close()).rejects.toThrow('operatorHook "lateFail": its pipeline failed on a timer after run 1: late failure');
  });

  it("unsubscribes at end: the pipeline is torn down and its timers cancelled", async () => {
    const clock = new VirtualClock();
    const ticks: number[] = [];
    let finalized = 0;
    const hook = operatorHook({
      name: "ticker",
      // An inner interval outlives the run stream's completion: only unsubscribing stops it.
      pipeline: (runs$, { scheduler }) =>
        runs$.pipe(
          switchMap(() => interval(1000, scheduler)),
          tap((i) => ticks.push(i)),
          filter(() => false),
          finalize(() => (finalized += 1)),
        ),
    });
    const { sess } = await driveHooks({ hooks: [hook], clock });
    await sess.run("train");
    await clock.advanceSecs(2);
    expect(ticks).toEqual([0, 1]);
    await sess.close();
    expect(finalized).toBe(1);
    expect(clock.pendingTimers).toBe(0);
    await clock.advanceSecs(5);
    expect(ticks).toEqual([0, 1]);
  });

  it("bad options get a one-line error naming the fix", () => {
    expect(() => operatorHook({ name: "", pipeline: (r) => r })).toThrow(ValueError);
    expect(() => operatorHook({ name: "", pipeline: (r) => r })).toThrow("operatorHook: `name` must be a non-empty string");
    // @ts-expect-error: a pipeline is required
    expect(() => operatorHook({ name: "x" })).toThrow('operatorHook "x": `pipeline` must be a function');
  });
});

describe("docs/hooks.md: hooks as RxJS operators", () => {
  it("the plateau example runs as written (imports from the package's modules)", async () => {
    // --- copied from docs/hooks.md, "Hooks as RxJS operators" ---
    const stopOnPlateau = operatorHook({
      name: "stopOnPlateau",
      fetches: { loss: "loss", step: "global_step" },
      pipeline: (runs$) =>
        runs$.pipe(
          filter(({ results }) => Number(results.step) % 100 === 0),
          map(({ results }) => Number(results.loss)),
          scan((ema, loss) => 0.5 * ema + 0.5 * loss),
          pairwise(),
          filter(([before, now]) => before - now < 0.001 * before),
        ),
    });

    // A loss that falls from 10 to 5 over 1000 steps, then stays flat.
    const creator = new FakeSessionCreator(() => new FakeSession({ ops: { loss: (ctx) => 10 - 0.005 * Math.min(ctx.call, 1000) } }));
    const steps = await withSession({ sessionCreator: creator, hooks: [stopOnPlateau], logger: silentLogger }, async (sess) => {
      let runs = 0;
      while (!sess.shouldStop()) {
        await sess.run("train");
        runs += 1;
      }
      return runs;
    });
    // --- end of the copy ---
    expect(steps).toBe(1701);
  });
});
