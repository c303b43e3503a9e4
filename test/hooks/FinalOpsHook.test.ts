import { describe, expect, it } from "vitest";
import { OutOfRangeError } from "../../src/errors.js";
import { withSession } from "../../src/pipeline/MonitoredSession.js";
import { FinalOpsHook } from "../../hooks/FinalOpsHook.js";
import { driveHooks, trainingGraph } from "../util/driveHooks.js";

/** A graph with constant ops and `next_batch`, a one-element input that then runs dry. */
const finalGraph = () => {
  const input = [7];
  return trainingGraph({
    ops: {
      four: () => 4,
      values: () => [1, 6, 3, 5, 2, 4],
      next_batch: () => {
        const v = input.shift();
        if (v === undefined) throw new OutOfRangeError("End of sequence");
        return v;
      },
    },
  });
};

describe("FinalOpsHook", () => {
  it("FinalOpsHookTest.test_final_ops_is_scalar_tensor: finalOpsValues holds the value after end", async () => {
    const hook = new FinalOpsHook({ finalOps: "four" });
    const { sess } = await driveHooks({ hooks: [hook], graph: finalGraph() });
    await sess.run("train");
    expect(hook.finalOpsValues).toBeUndefined();
    await sess.close();
    expect(hook.finalOpsValues).toBe(4);
  });

  it("FinalOpsHookTest.test_final_ops_is_tensor: an array value, with a record structure mirrored", async () => {
    const hook = new FinalOpsHook({ finalOps: { values: "values", step: "global_step" } });
    const { sess } = await driveHooks({ hooks: [hook], graph: finalGraph() });
    await sess.run("train");
    await sess.run("train");
    await sess.close();
    expect(hook.finalOpsValues).toEqual({ values: [1, 6, 3, 5, 2, 4], step: 2 });
  });

  it("FinalOpsHookTest.test_final_ops_with_dictionary: finalOpsFeedDict feeds the final run", async () => {
    const hook = new FinalOpsHook({ finalOps: "x", finalOpsFeedDict: { x: [4, -3] } });
    const { sess } = await driveHooks({ hooks: [hook], graph: finalGraph() });
    await sess.close();
    expect(hook.finalOpsValues).toEqual([4, -3]);
  });

  it("FinalOpsHookTest.test_final_ops_triggers_out_of_range_error: warns about the input dependency and rethrows", async () => {
    const hook = new FinalOpsHook({ finalOps: "next_batch" });
    const { sess, raw, events } = await driveHooks({ hooks: [hook], graph: finalGraph() });
    await raw.run("next_batch");
    await expect(hook.end(raw)).rejects.toThrow(/End of sequence/);
    const warnings = events.messages("warn");
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/dependency back to some input source/);
    // Also a `warning` event carrying the error, as every hook's warnings.
    expect(events.ofType("warning")).toEqual([expect.objectContaining({ message: warnings[0], error: expect.any(OutOfRangeError) })]);
    expect(hook.finalOpsValues).toBeUndefined();
    await sess.close().catch(() => undefined);
  });

  it("through withSession: the input running dry ends the loop, and the final read's OutOfRange escapes", async () => {
    const hook = new FinalOpsHook({ finalOps: "next_batch" });
    const graph = finalGraph();
    const driven = driveHooks({ hooks: [hook], graph });
    const opened = driven.then((d) => d.sess);
    const seen: unknown[] = [];
    const done = withSession(opened, async (sess) => {
      for (;;) seen.push(await sess.run("next_batch"));
    });
    await expect(done).rejects.toBeInstanceOf(OutOfRangeError);
    expect(seen).toEqual([7]);
    const { events } = await driven;
    expect(events.messages("warn").some((m) => m.includes("dependency back to some input source"))).toBe(true);
  });

  it("null finalOps runs nothing", async () => {
    const hook = new FinalOpsHook({ finalOps: null });
    const { sess, raw } = await driveHooks({ hooks: [hook], graph: finalGraph() });
    const before = raw.runs.length;
    await sess.close();
    expect(raw.runs.length).toBe(before);
    expect(hook.finalOpsValues).toBeUndefined();
  });
});
