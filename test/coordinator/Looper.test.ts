import { describe, expect, it } from "vitest";
import { Coordinator, task } from "../../src/coordinator/Coordinator.js";
import { RuntimeError, ValueError } from "../../src/errors.js";
import { Looper, type LooperOptions } from "../../src/coordinator/Looper.js";
import { EventRecorder, VirtualClock } from "../../src/testing/index.js";

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

const setup = () => {
  const clock = new VirtualClock();
  const events = new EventRecorder();
  const logger = events.logger(() => clock.now());
  const coord = new Coordinator({ clock, logger });
  const options: LooperOptions = { clock, logger, name: "looper" };
  return { clock, events, coord, options, start: clock.now() };
};

/** TensorFlow's `_StopAt0`: counts `n` down, then requests a stop. */
const stopAt0 = (coord: Coordinator, n: { value: number }): void => {
  if (n.value === 0) coord.requestStop();
  else n.value -= 1;
};

/** A looper that records its lifecycle calls. */
class RecordingLooper extends Looper<[]> {
  readonly events: string[] = [];
  constructor(
    coord: Coordinator,
    intervalSecs: number | null,
    private readonly iteration: (i: number) => unknown,
    options: LooperOptions,
  ) {
    super(coord, intervalSecs, undefined, undefined, options);
  }
  protected override startLoop(): void {
    this.events.push("start");
  }
  protected override runLoop(): unknown {
    this.events.push("run");
    return this.iteration(this.events.filter((e) => e === "run").length);
  }
  protected override stopLoop(): void {
    this.events.push("stop");
  }
}

// ---------------------------------------------------------------------------------------------
// LooperTest
// ---------------------------------------------------------------------------------------------

describe("Looper", () => {
  it("LooperTest.testTargetArgs: a 0-interval looper calls target(...args) until it requests a stop", async () => {
    const { clock, coord, options, start } = setup();
    const n = { value: 3 };
    let calls = 0;
    const looper = Looper.loop(
      coord,
      0,
      (c: Coordinator, m: { value: number }) => {
        calls++;
        stopAt0(c, m);
      },
      [coord, n],
      options,
    );
    await coord.join([looper]);
    expect(n.value).toBe(0);
    expect(calls).toBe(4); // 3 → 0, then the call that requests the stop
    expect(looper.isAlive()).toBe(false);
    expect(clock.now() - start).toBe(0);
  });

  it("LooperTest.testTargetKwargs: keyword arguments are an options object", async () => {
    const { coord, options } = setup();
    const n = { value: 3 };
    const looper = Looper.loop(coord, 0, (kw: { coord: Coordinator; n: { value: number } }) => stopAt0(kw.coord, kw.n), [{ coord, n }], options);
    await coord.join([looper]);
    expect(n.value).toBe(0);
  });

  it("LooperTest.testTargetMixedArgs: positional arguments then an options object", async () => {
    const { coord, options } = setup();
    const n = { value: 3 };
    const looper = Looper.loop(coord, 0, (c: Coordinator, kw: { n: { value: number } }) => stopAt0(c, kw.n), [coord, { n }], options);
    await coord.join([looper]);
    expect(n.value).toBe(0);
  });

  it("the first call is immediate, then one call per interval on the clock", async () => {
    const { clock, coord, options, start } = setup();
    const at: number[] = [];
    Looper.loop(coord, 10, () => at.push(clock.now() - start), undefined, options);
    await clock.advance(0);
    expect(at).toEqual([0]);
    await clock.advanceSecs(9.999);
    expect(at).toEqual([0]);
    await clock.advanceSecs(0.001);
    expect(at).toEqual([0, 10_000]);
    await clock.advanceSecs(20);
    expect(at).toEqual([0, 10_000, 20_000, 30_000]);
  });

  it("drift correction: iterations that take time do not push the schedule back", async () => {
    const { clock, coord, options, start } = setup();
    const at: number[] = [];
    Looper.loop(coord, 10, async () => {
      at.push(clock.now() - start);
      await clock.sleep(3_000);
    }, undefined, options);
    await clock.advanceSecs(40);
    expect(at).toEqual([0, 10_000, 20_000, 30_000, 40_000]); // not 0, 13, 26, 39
  });

  it("drift correction: an overrun makes the missed iterations run back to back, then the absolute schedule resumes", async () => {
    const { clock, coord, options, start } = setup();
    const at: number[] = [];
    Looper.loop(coord, 10, async () => {
      at.push(clock.now() - start);
      if (at.length === 2) await clock.sleep(25_000); // the call at 10 s ends at 35 s
    }, undefined, options);
    await clock.advanceSecs(60);
    // due at 20 and 30 → both run at 35; then 40, 50, 60 as scheduled
    expect(at).toEqual([0, 10_000, 35_000, 35_000, 40_000, 50_000, 60_000]);
  });

  it("a null interval calls back to back, checking for a stop before every call", async () => {
    const { clock, coord, options, start } = setup();
    const looper = new RecordingLooper(coord, null, (i) => {
      if (i === 3) coord.requestStop();
    }, options).start();
    await coord.join();
    expect(looper.events).toEqual(["start", "run", "run", "run", "stop"]);
    expect(clock.now() - start).toBe(0);
  });

  it("a stop wakes a looper in the middle of its wait; stopLoop runs", async () => {
    const { clock, coord, options, start } = setup();
    const looper = new RecordingLooper(coord, 60, () => undefined, options).start();
    await clock.advanceSecs(30);
    coord.requestStop();
    await coord.join();
    expect(looper.events).toEqual(["start", "run", "stop"]);
    expect(clock.now() - start).toBe(30_000);
    expect(clock.pendingTimers).toBe(0);
  });

  it("an error in an iteration is recorded in the coordinator and stopLoop is skipped", async () => {
    const { clock, coord, options } = setup();
    const err = new RuntimeError("iteration 2 failed");
    const looper = new RecordingLooper(coord, 1, (i) => {
      if (i === 2) throw err;
    }, options).start();
    const j = expect(coord.join()).rejects.toBe(err);
    await clock.advanceSecs(1);
    await j;
    expect(coord.requestedException).toBe(err);
    expect(coord.shouldStop()).toBe(true);
    expect(looper.events).toEqual(["start", "run", "run"]);
    expect(looper.isAlive()).toBe(false);
  });

  it("an error in startLoop is recorded, and no iteration runs", async () => {
    const { coord, options } = setup();
    class BadStart extends Looper<[]> {
      protected override startLoop(): void {
        throw new RuntimeError("cannot start");
      }
    }
    let calls = 0;
    const looper = new BadStart(coord, 1, () => calls++, [], options).start();
    await expect(coord.join()).rejects.toThrow("cannot start");
    expect(calls).toBe(0);
    expect(looper.isAlive()).toBe(false);
  });

  it("registers itself with the coordinator in its constructor: join() waits for it", async () => {
    const { coord, options } = setup();
    const looper = new RecordingLooper(coord, 5, () => undefined, options);
    looper.start();
    coord.requestStop();
    await coord.join();
    expect(looper.isAlive()).toBe(false);
    expect(looper.events).toEqual(["start", "stop"]);
  });

  it("a registered looper that was never started does not hold join back", async () => {
    const { clock, coord, options, start } = setup();
    const idle = new Looper(coord, 5, () => undefined, [], options);
    coord.registerThread(task("work", clock.sleep(10)));
    const j = coord.join();
    await clock.advance(10);
    await expect(j).resolves.toBeUndefined();
    expect(idle.isAlive()).toBe(false);
    expect(clock.now() - start).toBe(10);
  });

  it("Looper.loop returns a started looper; a looper starts only once", async () => {
    const { coord, options } = setup();
    const looper = Looper.loop(coord, 1, () => undefined, undefined, options);
    expect(looper).toBeInstanceOf(Looper);
    expect(looper.isAlive()).toBe(true);
    expect(looper.name).toBe("looper");
    expect(() => looper.start()).toThrow(RuntimeError);
    coord.requestStop();
    await coord.join();
  });

  it("an error raised after the coordinator was joined is logged, not lost or unhandled", async () => {
    const { clock, coord, events, options } = setup();
    const looper = Looper.loop(coord, 1, async () => {
      await clock.sleep(100_000);
      throw new RuntimeError("too late");
    }, undefined, options);
    await clock.advance(0); // the first call starts its 100 s sleep
    coord.requestStop();
    const j = coord.join(undefined, { stopGracePeriodSecs: 1, ignoreLiveThreads: true });
    await clock.advanceSecs(2);
    await j;
    expect(looper.isAlive()).toBe(true);
    await clock.advanceSecs(100);
    expect(looper.isAlive()).toBe(false);
    expect(events.messages("error")).toEqual(["Looper looper failed after the Coordinator was joined"]);
  });

  it("validates its arguments", () => {
    const { coord } = setup();
    expect(() => new Looper({} as Coordinator, 1)).toThrow(ValueError);
    expect(() => new Looper(coord, 1, undefined, [1])).toThrow(new ValueError("'args' argument requires that 'target' be set"));
    expect(() => new Looper(coord, 1, undefined, [])).not.toThrow(); // empty args are allowed, as upstream
    expect(() => new Looper(coord, -1, () => undefined)).toThrow(ValueError);
    expect(() => new Looper(coord, Number.NaN, () => undefined)).toThrow(ValueError);
  });

  it("default names are distinct", () => {
    const { coord } = setup();
    const a = new Looper(coord, 1);
    const b = new Looper(coord, 1);
    expect(a.name).toMatch(/^Looper-\d+$/);
    expect(b.name).not.toBe(a.name);
  });
});

describe("Looper daemon semantics (TensorFlow's LooperThread is a daemon)", () => {

  it("on a VirtualClock the looper still waits for the clock", async () => {
    const clock = new VirtualClock();
    const coord = new Coordinator({ clock });
    let n = 0;
    Looper.loop(coord, 10, () => void (n += 1), undefined, { clock });
    await clock.advance(0);
    expect(n).toBe(1);
    await clock.advance(9_999);
    expect(n).toBe(1);
    await clock.advance(1);
    expect(n).toBe(2);
    coord.requestStop();
    await clock.advance(0);
    await coord.join();
  });
});
