import { describe, expect, it } from "vitest";
import { NanLossDuringTrainingError, RuntimeError } from "../../src/errors.js";
import { NanTensorHook } from "../../hooks/NanTensorHook.js";
import { driveHooks, trainingGraph } from "../util/driveHooks.js";

// basic_session_run_hooks_test.py has no NanTensorHook test; these follow section 1.3's contract.

/** A graph whose `loss` is the next value of `losses` on each `train` run. */
const lossGraph = (losses: readonly unknown[]) => {
  let i = 0;
  return trainingGraph({ ops: { loss: (ctx) => (ctx.run("train"), losses[i++]) } });
};

describe("NanTensorHook", () => {
  it("NanTensorHook contract: a NaN loss logs an error and throws NanLossDuringTrainingError", async () => {
    const { sess, events } = await driveHooks({ hooks: [new NanTensorHook({ lossTensor: "loss" })], graph: lossGraph([0.5, Number.NaN]) });
    expect(await sess.run("loss")).toBe(0.5);
    const error = await sess.run("loss").then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(NanLossDuringTrainingError);
    expect(error).toBeInstanceOf(RuntimeError);
    expect((error as Error).message).toBe("NaN loss during training.");
    expect(events.messages("error")).toEqual(["Model diverged with loss = NaN."]);
    await sess.close();
  });

  it("NanTensorHook contract: failOnNanLoss false warns and requests a stop without an error", async () => {
    const hook = new NanTensorHook({ lossTensor: "loss", failOnNanLoss: false });
    const { sess, events } = await driveHooks({ hooks: [hook], graph: lossGraph([1, 2, Number.NaN, 4]) });
    const seen: unknown[] = [];
    while (!sess.shouldStop()) seen.push(await sess.run("loss"));
    expect(seen).toEqual([1, 2, Number.NaN]);
    expect(events.messages("warn")).toEqual(["Model diverged with loss = NaN."]);
    expect(events.messages("error")).toEqual([]);
    expect(events.ofType("warning").map((e) => e.message)).toEqual(["Model diverged with loss = NaN."]);
    await sess.close();
  });

  it("a tensor loss is NaN if any element is; finite and infinite losses pass", async () => {
    const hook = new NanTensorHook({ lossTensor: "loss", failOnNanLoss: false });
    const losses = [Number.POSITIVE_INFINITY, new Float32Array([1, 2]), { dtype: "float64", shape: [2], data: new Float64Array([3, Number.NaN]) }];
    const { sess } = await driveHooks({ hooks: [hook], graph: lossGraph(losses) });
    await sess.run("train");
    expect(sess.shouldStop()).toBe(false);
    await sess.run("train");
    expect(sess.shouldStop()).toBe(false);
    await sess.run("train");
    expect(sess.shouldStop()).toBe(true);
    await sess.close();
  });

  it("fetches the loss in every run, even when the caller does not", async () => {
    const hook = new NanTensorHook({ lossTensor: "loss" });
    const { sess } = await driveHooks({ hooks: [hook], graph: lossGraph([Number.NaN]) });
    await expect(sess.run("noop")).rejects.toThrow(NanLossDuringTrainingError);
    await sess.close();
  });
});

describe("NanTensorHook options", () => {
  it("rejects a missing or empty lossTensor, naming the option", () => {
    expect(() => new NanTensorHook({ lossTensor: "" })).toThrow('NanTensorHook: lossTensor: expected a non-empty string, got ""');
    expect(() => new NanTensorHook({} as never)).toThrow("NanTensorHook: lossTensor: is required (a non-empty string)");
  });
});
