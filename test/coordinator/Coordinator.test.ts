import { describe, expect, it } from "vitest";
import { Coordinator, task, type CoordinatedTask } from "../../src/coordinator/Coordinator.js";
import { OutOfRangeError, RuntimeError, ValueError } from "../../src/errors.js";
import { EventRecorder, flush, VirtualClock } from "../../src/testing/index.js";

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

interface Deferred {
  readonly promise: Promise<void>;
  resolve(): void;
}

const deferred = (): Deferred => {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
};

/** Observes a promise without awaiting it, so a test can assert it is still pending. */
const track = <T>(p: Promise<T>): { state: "pending" | "resolved" | "rejected"; value?: T; error?: unknown } => {
  const s: { state: "pending" | "resolved" | "rejected"; value?: T; error?: unknown } = { state: "pending" };
  p.then(
    (v) => {
      s.state = "resolved";
      s.value = v;
    },
    (e: unknown) => {
      s.state = "rejected";
      s.error = e;
    },
  );
  return s;
};

const setup = (options: { cleanStopExceptionTypes?: readonly (abstract new (...args: never[]) => unknown)[] } = {}) => {
  const clock = new VirtualClock();
  const events = new EventRecorder();
  const coord = new Coordinator({ clock, logger: events.logger(() => clock.now()), ...options });
  return { clock, events, coord, start: clock.now() };
};

/** A task that sleeps `ms` on the virtual clock (TensorFlow's `SleepABit`). */
const sleepABit = (clock: VirtualClock, name: string, ms: number): CoordinatedTask => task(name, clock.sleep(ms));

/** A task that never ends on its own. */
const stuck = (name: string): CoordinatedTask => task(name, new Promise(() => undefined));

/** Grace-period polling sleeps of join (1 ms and up), without the tasks' own sleeps. */
const graceSleeps = (clock: VirtualClock, taskSleeps: readonly number[]): number[] => {
  const rest = [...clock.sleeps];
  for (const s of taskSleeps) rest.splice(rest.indexOf(s), 1);
  return rest;
};

// ---------------------------------------------------------------------------------------------
// CoordinatorTest
// ---------------------------------------------------------------------------------------------

describe("Coordinator", () => {
  it("CoordinatorTest.testStopAPI: shouldStop and waitForStop before and after requestStop", async () => {
    const { clock, coord, start } = setup();
    expect(coord.shouldStop()).toBe(false);
    const w = track(coord.waitForStop(0.01));
    await clock.advance(9);
    expect(w.state).toBe("pending");
    await clock.advance(1);
    expect(w).toEqual({ state: "resolved", value: false });

    coord.requestStop();
    expect(coord.shouldStop()).toBe(true);
    const w2 = track(coord.waitForStop(0.01));
    await flush();
    expect(w2).toEqual({ state: "resolved", value: true });
    expect(clock.now() - start).toBe(10);
  });

  it("CoordinatorTest.testStopAsync: a stop requested by another task wakes waitForStop before its timeout", async () => {
    const { clock, coord, start } = setup();
    const waitForStopEv = deferred();
    let hasStopped = false;
    coord.spawn("stopper", async () => {
      await waitForStopEv.promise;
      coord.requestStop();
      hasStopped = true;
    });
    expect(coord.shouldStop()).toBe(false);
    const w = track(coord.waitForStop(0.01));
    await clock.advance(10);
    expect(w).toEqual({ state: "resolved", value: false });

    const w2 = track(coord.waitForStop(0.05));
    waitForStopEv.resolve();
    await flush();
    expect(hasStopped).toBe(true);
    expect(w2).toEqual({ state: "resolved", value: true });
    expect(coord.shouldStop()).toBe(true);
    expect(clock.now() - start).toBe(10); // woken by the stop, not by the 50 ms timeout
    expect(clock.pendingTimers).toBe(0); // the timeout's timer was cancelled
  });

  it("CoordinatorTest.testJoin: join waits for every given task, without a stop request", async () => {
    const { clock, coord } = setup();
    const threads = [sleepABit(clock, "a", 10), sleepABit(clock, "b", 20), sleepABit(clock, "c", 10)];
    const j = track(coord.join(threads));
    await clock.advance(19);
    expect(j.state).toBe("pending");
    expect(threads.map((t) => t.isAlive())).toEqual([false, true, false]);
    await clock.advance(1);
    expect(j.state).toBe("resolved");
    expect(threads.map((t) => t.isAlive())).toEqual([false, false, false]);
    expect(coord.joined).toBe(true);
    expect(coord.shouldStop()).toBe(false); // join never requests a stop itself
  });

  it("CoordinatorTest.testJoinAllRegistered: join() with no argument waits for the registered tasks", async () => {
    const { clock, coord } = setup();
    const threads = [10, 20, 10].map((ms, i) => coord.spawn(`t${i}`, () => clock.sleep(ms)));
    const j = track(coord.join());
    await clock.advance(19);
    expect(j.state).toBe("pending");
    await clock.advance(1);
    expect(j.state).toBe("resolved");
    expect(threads.every((t) => !t.isAlive())).toBe(true);
  });

  it("CoordinatorTest.testJoinSomeRegistered: join waits for the registered tasks and the ones it is given", async () => {
    const { clock, coord } = setup();
    const registered = [coord.spawn("r0", () => clock.sleep(10)), coord.spawn("r2", () => clock.sleep(10))];
    const unregistered = sleepABit(clock, "u1", 20);
    const j = track(coord.join([unregistered]));
    await clock.advance(19);
    expect(j.state).toBe("pending"); // held back by the unregistered task only
    expect(registered.map((t) => t.isAlive())).toEqual([false, false]);
    await clock.advance(1);
    expect(j.state).toBe("resolved");
    expect(unregistered.isAlive()).toBe(false);
  });

  it("CoordinatorTest.testJoinGraceExpires: 1e-10 s, 2 ms and 1 s grace periods end in 'threads still running'", async () => {
    // TensorFlow polls at 1 ms, doubling, clamped to [1 ms, remaining], while remaining >= 0,
    // so a task gets the whole grace period plus a last 1 ms poll.
    const cases = [
      { graceSecs: 1e-10, sleeps: [1] },
      { graceSecs: 0.002, sleeps: [1, 1, 1] },
      { graceSecs: 1, sleeps: [1, 2, 4, 8, 16, 32, 64, 128, 256, 489, 1] },
    ];
    for (const { graceSecs, sleeps } of cases) {
      const { clock, coord, start } = setup();
      const waitForStopEv = deferred();
      const stopper = task(
        "stopper",
        waitForStopEv.promise.then(() => coord.requestStop()),
      );
      const sleeper = sleepABit(clock, "sleeper", 10_000);
      waitForStopEv.resolve();
      await flush();
      expect(coord.shouldStop()).toBe(true);

      const j = track(coord.join([stopper, sleeper], { stopGracePeriodSecs: graceSecs }));
      const totalMs = sleeps.reduce((a, b) => a + b, 0);
      await clock.advance(totalMs - 1);
      expect(j.state, `grace ${graceSecs}`).toBe("pending");
      await clock.advance(1);
      expect(j.state, `grace ${graceSecs}`).toBe("rejected");
      expect(j.error).toBeInstanceOf(RuntimeError);
      expect((j.error as Error).message).toBe("Coordinator stopped with threads still running: sleeper");
      expect(clock.now() - start).toBe(totalMs);
      expect(graceSleeps(clock, [10_000])).toEqual(sleeps);
      expect(coord.joined).toBe(true);
    }
  });

  it("CoordinatorTest.testJoinGraceExpires: every straggler is named, separated by spaces", async () => {
    const { clock, coord } = setup();
    coord.registerThread(stuck("reader"));
    coord.registerThread(sleepABit(clock, "quick", 1));
    coord.registerThread(stuck("writer"));
    coord.requestStop();
    const j = coord.join(undefined, { stopGracePeriodSecs: 0.1 });
    const check = expect(j).rejects.toThrow(new RuntimeError("Coordinator stopped with threads still running: reader writer"));
    await clock.advance(101);
    await check;
  });

  it("CoordinatorTest.testJoinWithoutGraceExpires: ignoreLiveThreads logs the stragglers instead of raising", async () => {
    const { clock, coord, events } = setup();
    const stopper = task("stopper", Promise.resolve().then(() => coord.requestStop()));
    const sleeper = sleepABit(clock, "sleeper", 10_000);
    await flush();
    const j = track(coord.join([stopper, sleeper], { stopGracePeriodSecs: 1, ignoreLiveThreads: true }));
    await clock.advance(1000);
    expect(j.state).toBe("pending");
    await clock.advance(1);
    expect(j.state).toBe("resolved");
    expect(events.lines()).toContainEqual({ type: "log", time: clock.now(), level: "info", message: "Coordinator stopped with threads still running: sleeper" });
    expect(sleeper.isAlive()).toBe(true);
  });

  it("join never times out before a stop is requested, then gives live tasks the grace period", async () => {
    const { clock, coord } = setup();
    coord.registerThread(stuck("forever"));
    const j = track(coord.join(undefined, { stopGracePeriodSecs: 0.002 }));
    await clock.advanceSecs(3600);
    expect(j.state).toBe("pending");
    coord.requestStop();
    await clock.advance(2);
    expect(j.state).toBe("pending");
    await clock.advance(1);
    expect(j.state).toBe("rejected");
  });

  it("join returns as soon as the tasks finish within the grace period", async () => {
    const { clock, coord, start } = setup();
    coord.spawn("obedient", (signal) => new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve())));
    coord.spawn("slow", async (signal) => {
      await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve()));
      await clock.sleep(30);
    });
    coord.requestStop();
    const j = track(coord.join(undefined, { stopGracePeriodSecs: 120 }));
    await clock.advance(30);
    expect(j.state).toBe("resolved");
    expect(clock.now() - start).toBe(30);
    expect(clock.pendingTimers).toBe(0); // the polling timer was cancelled
  });

  it("join snapshots the registered tasks: one registered during join is neither waited for nor reported", async () => {
    const { clock, coord } = setup();
    coord.spawn("first", () => clock.sleep(10));
    const j = track(coord.join(undefined, { stopGracePeriodSecs: 0 }));
    const late = coord.spawn("late", () => new Promise(() => undefined));
    await clock.advance(10);
    expect(j.state).toBe("resolved");
    expect(late.isAlive()).toBe(true);
    // join clears the registered set, so the next join does not see "late" either
    coord.clearStop();
    await expect(coord.join()).resolves.toBeUndefined();
  });

  it("a recorded error takes precedence over the stragglers' RuntimeError", async () => {
    const { clock, coord } = setup();
    coord.registerThread(stuck("forever"));
    const err = new Error("task failed");
    coord.requestStop(err);
    const j = track(coord.join(undefined, { stopGracePeriodSecs: 0.001 }));
    await clock.advance(2);
    expect(j.state).toBe("rejected");
    expect(j.error).toBe(err);
  });

  const firstWins = async (report: (coord: Coordinator, error: Error, after: Promise<void>) => CoordinatedTask) => {
    const { coord } = setup();
    const ev1 = deferred();
    const ev2 = deferred();
    const first = new RuntimeError("First");
    const tooLate = new RuntimeError("Too late");
    const threads = [
      report(coord, first, ev1.promise.then(() => undefined)),
      report(coord, tooLate, ev2.promise.then(() => undefined)),
    ];
    // The second task raises only once the first one has: set ev2 after the first error.
    void threads[0]?.done.finally(() => ev2.resolve());
    ev1.resolve();
    await expect(coord.join(threads)).rejects.toBe(first);
    expect(coord.requestedException).toBe(first);
    expect(threads.every((t) => !t.isAlive())).toBe(true);
  };

  it("CoordinatorTest.testJoinRaiseReportExcInfo: a task body that throws is reported; the first error wins over 'Too late'", async () => {
    await firstWins((coord, error, after) =>
      coord.spawn(error.message, async () => {
        await after;
        throw error;
      }),
    );
  });

  it("CoordinatorTest.testJoinRaiseReportException: requestStop(e) from a catch; the first error wins over 'Too late'", async () => {
    await firstWins((coord, error, after) =>
      task(
        error.message,
        (async () => {
          try {
            await after;
            throw error;
          } catch (e) {
            coord.requestStop(e);
          }
        })(),
      ),
    );
  });

  it("CoordinatorTest.testJoinRaiseReportExceptionUsingHandler: stopOnException; the first error wins over 'Too late'", async () => {
    await firstWins((coord, error, after) =>
      task(
        error.message,
        coord.stopOnException(async () => {
          await after;
          throw error;
        }),
      ),
    );
  });

  it("CoordinatorTest.testJoinIgnoresOutOfRange: OutOfRangeError is a clean stop by default", async () => {
    const { coord } = setup();
    const t = task("reader", Promise.resolve().then(() => coord.requestStop(new OutOfRangeError("First"))));
    await expect(coord.join([t])).resolves.toBeUndefined();
    expect(coord.shouldStop()).toBe(true);
    expect(coord.requestedException).toBeUndefined();
  });

  it("CoordinatorTest.testJoinIgnoresMyExceptionType: custom clean-stop types replace the default", async () => {
    const { coord } = setup({ cleanStopExceptionTypes: [ValueError] });
    const t = task("t", Promise.resolve().then(() => coord.requestStop(new ValueError("Clean stop"))));
    await expect(coord.join([t])).resolves.toBeUndefined();
    expect(coord.shouldStop()).toBe(true);

    // OutOfRange is no longer clean once the list is given (MonitoredSession passes [])
    const { coord: strict } = setup({ cleanStopExceptionTypes: [] });
    const oor = new OutOfRangeError("end of input");
    strict.requestStop(oor);
    await expect(strict.join([])).rejects.toBe(oor);
  });

  it("CoordinatorTest.testClearStopClearsExceptionToo: after clearStop a new error is reported, not the old one", async () => {
    const { coord } = setup();
    const raise = (message: string): CoordinatedTask =>
      coord.spawn(message, async () => {
        await Promise.resolve();
        throw new RuntimeError(message);
      });
    raise("First");
    await expect(coord.join()).rejects.toThrow("First");
    coord.clearStop();
    expect(coord.shouldStop()).toBe(false);
    expect(coord.joined).toBe(false);
    expect(coord.requestedException).toBeUndefined();
    raise("Second");
    await expect(coord.join()).rejects.toThrow("Second");
  });

  it("CoordinatorTest.testRequestStopRaisesIfJoined: after join, requestStop(e) throws e; after clearStop it is recorded again", async () => {
    const { coord } = setup();
    await coord.join([]);
    expect(coord.joined).toBe(true);
    const tooLate = new RuntimeError("Too late");
    let reported = false;
    expect(() => {
      reported = true;
      coord.requestStop(tooLate);
    }).toThrow(tooLate);
    expect(reported).toBe(true);
    // Nothing to raise: a plain request and a clean-stop error do not throw.
    expect(() => coord.requestStop(new OutOfRangeError())).not.toThrow();
    expect(() => coord.requestStop()).not.toThrow();

    coord.clearStop();
    const afterClear = new RuntimeError("After clear");
    expect(() => coord.requestStop(afterClear)).not.toThrow();
    await expect(coord.join([])).rejects.toBe(afterClear);
  });

  it("CoordinatorTest.testRequestStopRaisesIfJoined_ExcInfo: a task failing after join rejects its `done` and is logged, not lost", async () => {
    const { clock, coord, events } = setup();
    await coord.join([]);
    const boom = new RuntimeError("Too late");
    const t = coord.spawn("late", async () => {
      await Promise.resolve();
      throw boom;
    });
    await expect(t.done).rejects.toBe(boom);
    expect(t.isAlive()).toBe(false);
    expect(events.lines()).toContainEqual({
      type: "log",
      time: clock.now(),
      level: "error",
      message: "Task late failed after the Coordinator was joined: RuntimeError: Too late",
    });
    expect(coord.requestedException).toBeUndefined();
  });
});

// ---------------------------------------------------------------------------------------------
// requestStop, signal, waitForStop, stopOnException, spawn
// ---------------------------------------------------------------------------------------------

describe("Coordinator.requestStop", () => {
  it("keeps only the first error, and drops an error that follows a plain stop (logged at debug)", async () => {
    const { clock, coord, events } = setup();
    coord.requestStop();
    coord.requestStop(new RuntimeError("dropped"));
    expect(coord.requestedException).toBeUndefined();
    await expect(coord.join([])).resolves.toBeUndefined();
    expect(events.lines()).toEqual([
      { type: "log", time: clock.now(), level: "debug", message: "Error dropped by Coordinator (a stop was already requested): RuntimeError: dropped" },
    ]);

    const { clock: clock2, coord: c2, events: e2 } = setup();
    const first = new RuntimeError("first");
    c2.requestStop(first);
    c2.requestStop(new RuntimeError("second"));
    expect(c2.requestedException).toBe(first);
    expect(e2.lines()[0]).toEqual({ type: "log", time: clock2.now(), level: "info", message: "Error reported to Coordinator: RuntimeError: first" });
  });

  it("raiseRequestedException throws the recorded error without clearing it", () => {
    const { coord } = setup();
    expect(() => coord.raiseRequestedException()).not.toThrow();
    const err = new RuntimeError("x");
    coord.requestStop(err);
    expect(() => coord.raiseRequestedException()).toThrow(err);
    expect(() => coord.raiseRequestedException()).toThrow(err);
    expect(coord.requestedException).toBe(err);
  });
});

describe("Coordinator.signal", () => {
  it("aborts on stop with the error as reason, and is a fresh signal after clearStop", () => {
    const { coord } = setup();
    const s1 = coord.signal;
    let aborts = 0;
    s1.addEventListener("abort", () => aborts++);
    expect(s1.aborted).toBe(false);
    const err = new RuntimeError("why");
    coord.requestStop(err);
    expect(s1.aborted).toBe(true);
    expect(s1.reason).toBe(err);
    expect(aborts).toBe(1);
    expect(coord.signal).toBe(s1);

    coord.clearStop();
    const s2 = coord.signal;
    expect(s2).not.toBe(s1);
    expect(s2.aborted).toBe(false);
    coord.requestStop();
    expect(s2.aborted).toBe(true);
    expect(aborts).toBe(1);
  });

  it("is the same signal across clearStop when no stop was requested", () => {
    const { coord } = setup();
    const s = coord.signal;
    coord.clearStop();
    expect(coord.signal).toBe(s);
  });
});

describe("Coordinator.waitForStop", () => {
  it("resolves true when a stop arrives during the wait, and cancels its timer", async () => {
    const { clock, coord, start } = setup();
    const w = track(coord.waitForStop(1));
    await clock.advance(500);
    expect(w.state).toBe("pending");
    coord.requestStop();
    await flush();
    expect(w).toEqual({ state: "resolved", value: true });
    expect(clock.now() - start).toBe(500);
    expect(clock.pendingTimers).toBe(0);
  });

  it("resolves false exactly when the timeout expires", async () => {
    const { clock, coord } = setup();
    const w = track(coord.waitForStop(1));
    await clock.advance(999);
    expect(w.state).toBe("pending");
    await clock.advance(1);
    expect(w).toEqual({ state: "resolved", value: false });
    // a later stop does not change a settled wait, and a new wait sees it
    coord.requestStop();
    await expect(coord.waitForStop(1)).resolves.toBe(true);
  });

  it("a negative or zero timeout checks at once, without a timer", async () => {
    const { clock, coord } = setup();
    await expect(coord.waitForStop(-5)).resolves.toBe(false);
    await expect(coord.waitForStop(0)).resolves.toBe(false);
    expect(clock.pendingTimers).toBe(0);
    coord.requestStop();
    await expect(coord.waitForStop(-5)).resolves.toBe(true);
  });

  it("no timeout, or Infinity, waits for the stop without a timer", async () => {
    const { clock, coord } = setup();
    const a = track(coord.waitForStop());
    const b = track(coord.waitForStop(Infinity));
    expect(clock.pendingTimers).toBe(0);
    await clock.advanceSecs(1e6);
    expect([a.state, b.state]).toEqual(["pending", "pending"]);
    coord.requestStop();
    await flush();
    expect([a.value, b.value]).toEqual([true, true]);
  });

  it("rejects a NaN timeout", async () => {
    const { coord } = setup();
    await expect(coord.waitForStop(Number.NaN)).rejects.toBeInstanceOf(ValueError);
  });

  it("waiting again after clearStop waits for the next stop", async () => {
    const { coord } = setup();
    coord.requestStop();
    coord.clearStop();
    const w = track(coord.waitForStop());
    await flush();
    expect(w.state).toBe("pending");
    coord.requestStop();
    await flush();
    expect(w.value).toBe(true);
  });
});

describe("Coordinator.stopOnException", () => {
  it("returns the body's value when it does not throw", async () => {
    const { coord } = setup();
    await expect(coord.stopOnException(() => 42)).resolves.toBe(42);
    await expect(coord.stopOnException(async () => "x")).resolves.toBe("x");
    expect(coord.shouldStop()).toBe(false);
  });

  it("swallows a synchronous throw and records it as the stop reason", async () => {
    const { coord } = setup();
    const err = new RuntimeError("sync");
    await expect(
      coord.stopOnException(() => {
        throw err;
      }),
    ).resolves.toBeUndefined();
    expect(coord.shouldStop()).toBe(true);
    expect(coord.requestedException).toBe(err);
  });

  it("swallows a rejection and records it", async () => {
    const { coord } = setup();
    const err = new RuntimeError("async");
    await expect(coord.stopOnException(() => Promise.reject(err))).resolves.toBeUndefined();
    expect(coord.requestedException).toBe(err);
  });

  it("catches anything thrown; a thrown undefined is recorded as a ValueError, not lost", async () => {
    const { coord } = setup();
    await coord.stopOnException(() => Promise.reject(undefined));
    expect(coord.shouldStop()).toBe(true);
    expect(coord.requestedException).toBeInstanceOf(ValueError);
    expect((coord.requestedException as Error).message).toBe("a coordinated task threw undefined");

    const { coord: c2 } = setup();
    await c2.stopOnException(() => {
      throw "a string"; // eslint-disable-line @typescript-eslint/only-throw-error
    });
    expect(c2.requestedException).toBe("a string");
  });

  it("a clean-stop error stops without being recorded", async () => {
    const { coord } = setup();
    await coord.stopOnException(() => {
      throw new OutOfRangeError();
    });
    expect(coord.shouldStop()).toBe(true);
    expect(coord.requestedException).toBeUndefined();
  });
});

describe("Coordinator.spawn", () => {
  it("an error thrown by a spawned task stops the others, and join raises it", async () => {
    const { coord } = setup();
    let workerSawStop = false;
    const worker = coord.spawn("worker", async (signal) => {
      await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve()));
      workerSawStop = true;
    });
    const err = new RuntimeError("reader failed");
    const reader = coord.spawn("reader", async () => {
      await Promise.resolve();
      throw err;
    });
    expect(worker.isAlive()).toBe(true);
    expect(reader.isAlive()).toBe(true);
    await expect(coord.join()).rejects.toBe(err);
    expect(workerSawStop).toBe(true);
    expect(worker.isAlive()).toBe(false);
    expect(reader.isAlive()).toBe(false);
    await expect(reader.done).resolves.toBeUndefined(); // reported, so the task itself ends normally
  });

  it("a synchronous throw in the body is reported before spawn returns", () => {
    const { coord } = setup();
    const err = new RuntimeError("at once");
    coord.spawn("t", () => {
      throw err;
    });
    expect(coord.shouldStop()).toBe(true);
    expect(coord.requestedException).toBe(err);
  });

  it("task() tracks liveness of a promise", async () => {
    const d = deferred();
    const t = task("t", d.promise);
    expect(t.name).toBe("t");
    expect(t.isAlive()).toBe(true);
    d.resolve();
    await t.done;
    expect(t.isAlive()).toBe(false);
    const failed = task("f", Promise.reject(new RuntimeError("no")));
    await expect(failed.done).rejects.toThrow("no");
    expect(failed.isAlive()).toBe(false);
  });
});
