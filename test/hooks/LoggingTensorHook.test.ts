import { describe, expect, it } from "vitest";
import { ValueError } from "../../src/errors.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { LoggingTensorHook } from "../../hooks/LoggingTensorHook.js";
import { driveHooks, trainingGraph } from "../util/driveHooks.js";

/** A graph whose `foo` is 42 and counts its evaluations, plus `bar` = [1, 2] and `train`. */
const fooGraph = () => {
  const evaluations = { foo: 0 };
  const graph = trainingGraph({
    ops: {
      foo: () => {
        evaluations.foo++;
        return 42;
      },
      bar: () => new Float64Array([1.5, 2]),
    },
  });
  return { graph, evaluations };
};

/** Drives `hook` on {@link fooGraph}; its lines are `log` events on the session's `events`. */
const open = async (hook: LoggingTensorHook, clock = new VirtualClock()) => {
  const { graph, evaluations } = fooGraph();
  const driven = await driveHooks({ hooks: [hook], graph, clock });
  return { ...driven, evaluations, clock };
};

describe("LoggingTensorHook", () => {
  it("LoggingTensorHookTest.test_illegal_args: everyNIter must be positive; atEnd and/or exactly one frequency, in TensorFlow's words", () => {
    expect(() => new LoggingTensorHook({ tensors: ["t"], everyNIter: 0 })).toThrow(ValueError);
    // TensorFlow raises ValueError('invalid every_n_iter=0') and '... exactly one of every_n_iter and every_n_secs ...': a ported test matches on them.
    expect(() => new LoggingTensorHook({ tensors: ["t"], everyNIter: 0 })).toThrow("LoggingTensorHook: invalid every_n_iter=0: everyNIter must be a positive integer");
    expect(() => new LoggingTensorHook({ tensors: ["t"], everyNIter: -10 })).toThrow(/invalid every_n_iter=-10/);
    expect(() => new LoggingTensorHook({ tensors: ["t"], everyNIter: 1.5 })).toThrow("everyNIter: expected a safe integer, got 1.5");
    expect(() => new LoggingTensorHook({ tensors: ["t"], everyNIter: 5, everyNSecs: 5 })).toThrow(
      "LoggingTensorHook: either atEnd and/or exactly one of everyNIter and everyNSecs must be given (got everyNIter: 5, everyNSecs: 5)",
    );
    expect(() => new LoggingTensorHook({ tensors: ["t"] })).toThrow("LoggingTensorHook: either atEnd and/or exactly one of everyNIter and everyNSecs must be given (got neither)");
    expect(() => new LoggingTensorHook({ tensors: ["t"], atEnd: true, everyNIter: 5, everyNSecs: 5 })).toThrow(/exactly one of/);
    expect(() => new LoggingTensorHook({ tensors: ["t"], atEnd: true })).not.toThrow();
    expect(() => new LoggingTensorHook({ tensors: ["t"], atEnd: true, everyNSecs: 2 })).not.toThrow();
  });

  it("LoggingTensorHookTest.test_print_at_end_only: nothing during the runs, one line at the end", async () => {
    const hook = new LoggingTensorHook({ tensors: ["foo"], atEnd: true });
    const { sess, events, evaluations } = await open(hook);
    for (let i = 0; i < 3; i++) {
      await sess.run("train");
      expect(events.messages()).toEqual([]);
    }
    expect(evaluations.foo).toBe(0);
    await sess.close();
    expect(events.messages("info")).toEqual(["foo = 42"]);
  });

  const validatePrintEveryNSteps = async (atEnd: boolean) => {
    const hook = new LoggingTensorHook({ tensors: ["foo"], everyNIter: 10, atEnd });
    const { sess, events, evaluations, clock } = await open(hook);
    await sess.run("train");
    expect(events.messages()).toEqual(["foo = 42"]);
    for (let round = 0; round < 3; round++) {
      events.clear();
      for (let i = 0; i < 9; i++) {
        await clock.advance(100);
        await sess.run("train");
        expect(events.messages()).toEqual([]);
      }
      await clock.advance(100);
      await sess.run("train");
      expect(events.messages()).toEqual(["foo = 42 (1.000 sec)"]);
    }
    // One more run logs nothing: the count does not restart on its own.
    events.clear();
    await sess.run("train");
    expect(events.messages()).toEqual([]);
    // Only the logging runs fetched the tensor.
    expect(evaluations.foo).toBe(4);
    await clock.advance(500);
    await sess.close();
    expect(events.messages()).toEqual(atEnd ? ["foo = 42 (0.500 sec)"] : []);
  };

  it("LoggingTensorHookTest.test_print_every_n_steps: logs at iterations 0, 10, 20, 30 and not at the end", async () => {
    await validatePrintEveryNSteps(false);
    await validatePrintEveryNSteps(false);
  });

  it("LoggingTensorHookTest.test_print_every_n_steps_and_end: the same, plus a line at the end", async () => {
    await validatePrintEveryNSteps(true);
    await validatePrintEveryNSteps(true);
  });

  it("LoggingTensorHookTest.test_print_every_n_steps (reset): a reused hook starts counting again at begin", async () => {
    const hook = new LoggingTensorHook({ tensors: ["foo"], everyNIter: 10 });
    const first = await open(hook);
    for (let i = 0; i < 5; i++) await first.sess.run("train");
    await first.sess.close();
    const second = await open(hook);
    await second.sess.run("train");
    // Iteration 0 of the new session: logged, and without a time since the old session's line.
    expect(second.events.messages()).toEqual(["foo = 42"]);
    await second.sess.close();
  });

  it("LoggingTensorHookTest.test_print_first_step: the first line has no 'sec', later ones do", async () => {
    const hook = new LoggingTensorHook({ tensors: { foo: "foo" }, everyNIter: 1 });
    const { sess, events, clock } = await open(hook);
    await sess.run("train");
    expect(events.messages()).toEqual(["foo = 42"]);
    expect(events.messages()[0]).not.toContain("sec");
    await clock.advance(1234);
    await sess.run("train");
    expect(events.messages()[1]).toBe("foo = 42 (1.234 sec)");
    // TensorFlow logs the tensors at info.
    expect(events.lines().map((e) => e.level)).toEqual(["info", "info"]);
    await sess.close();
  });

  const validatePrintEveryNSecs = async (atEnd: boolean) => {
    const hook = new LoggingTensorHook({ tensors: ["foo"], everyNSecs: 1, atEnd });
    const { sess, events, clock } = await open(hook);
    await sess.run("train");
    expect(events.messages()).toEqual(["foo = 42"]);
    events.clear();
    await clock.advance(999);
    await sess.run("train");
    expect(events.messages()).toEqual([]);
    await clock.advance(1);
    await sess.run("train");
    expect(events.messages()).toEqual(["foo = 42 (1.000 sec)"]);
    events.clear();
    await sess.close();
    expect(events.messages()).toEqual(atEnd ? ["foo = 42 (0.000 sec)"] : []);
  };

  it("LoggingTensorHookTest.test_print_every_n_secs: logs once a second has passed on the virtual clock", async () => {
    await validatePrintEveryNSecs(false);
    await validatePrintEveryNSecs(false);
  });

  it("LoggingTensorHookTest.test_print_every_n_secs_and_end: the same, plus a line at the end", async () => {
    await validatePrintEveryNSecs(true);
    await validatePrintEveryNSecs(true);
  });

  it("LoggingTensorHookTest.test_print_formatter: the formatter's string is the whole line", async () => {
    const hook = new LoggingTensorHook({
      tensors: ["foo"],
      everyNIter: 10,
      formatter: (values) => `qqq=${(values["foo"] as number).toFixed(1)}`,
    });
    const { sess, events } = await open(hook);
    await sess.run("train");
    expect(events.messages()).toEqual(["qqq=42.0"]);
    await sess.close();
  });

  it("a record logs in sorted tag order, an array in the given order", async () => {
    const byRecord = new LoggingTensorHook({ tensors: { zeta: "foo", alpha: "bar", mid: "global_step" }, everyNIter: 1 });
    const a = await open(byRecord);
    await a.sess.run("train");
    expect(a.events.messages()).toEqual(["alpha = [1.5 2], mid = 0, zeta = 42"]);
    await a.sess.close();

    const byArray = new LoggingTensorHook({ tensors: ["global_step", "foo", "bar"], everyNIter: 1 });
    const b = await open(byArray);
    await b.sess.run("train");
    expect(b.events.messages()).toEqual(["global_step = 0, foo = 42, bar = [1.5 2]"]);
    await b.sess.close();
  });

  it("counts local iterations, not global steps", async () => {
    const hook = new LoggingTensorHook({ tensors: ["global_step"], everyNIter: 2 });
    const { graph } = fooGraph();
    const { sess, raw, events } = await driveHooks({ hooks: [hook], graph });
    await raw.run("set_global_step", { global_step_value: 1001 });
    for (let i = 0; i < 4; i++) await sess.run("train");
    expect(events.messages()).toEqual(["global_step = 1001", "global_step = 1003 (0.000 sec)"]);
    await sess.close();
  });
});
