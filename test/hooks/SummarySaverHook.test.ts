import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { AbortedError, InvalidArgumentError, ValueError } from "../../src/errors.js";
import { Graph } from "../../src/session/Graph.js";
import { SessionRunArgs, SessionRunContext } from "../../src/hook/SessionRunHook.js";
import { fileWriterCache, scalarValue, SummaryWriter } from "../../src/summary/index.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { SummarySaverHook } from "../../hooks/SummarySaverHook.js";
import { summaries, toSummaryValues } from "../../src/summary/index.js";
import { eventFiles, float32At, float32s, readEvents, type DecodedEvent, type DecodedValue } from "../summary/decoder.js";
import { driveHooks, trainingGraph } from "../util/driveHooks.js";

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "summary-saver-hook-"));
});
afterEach(async () => {
  await fileWriterCache.closeAll();
  rmSync(dir, { recursive: true, force: true });
});

/** The events of every file in `dir`, in TensorBoard's reading order. */
const allEvents = (logdir: string): DecodedEvent[] => eventFiles(logdir).flatMap(readEvents);

/** A decoded scalar (TF2 tensor form or legacy simple_value). */
const scalarOf = (v: DecodedValue): number => v.simpleValue ?? float32At(v.tensor?.tensorContent);

/** Scalars by step: `step → { tag: value }`, in file order. */
const scalarsByStep = (events: readonly DecodedEvent[]): Map<number, Record<string, number>> => {
  const out = new Map<number, Record<string, number>>();
  for (const e of events) {
    for (const v of e.summary?.value ?? []) {
      const step = Number(e.step ?? 0);
      out.set(step, { ...out.get(step), [v.tag as string]: scalarOf(v) });
    }
  }
  return out;
};

/** The steps of the `SessionLog` events with `status`. */
const sessionLogSteps = (events: readonly DecodedEvent[], status = "START"): number[] =>
  events.filter((e) => e.sessionLog?.status === status).map((e) => Number(e.step ?? 0));

/**
 * TensorBoard's Python accumulator on `brain.Event:2` files: a second or later
 * `SessionLog(START)` at step s purges every event seen so far with step >= s.
 */
const applyPurgeRule = (events: readonly DecodedEvent[]): DecodedEvent[] => {
  let kept: DecodedEvent[] = [];
  let starts = 0;
  for (const e of events) {
    if (e.sessionLog?.status === "START" && starts++ > 0) {
      const s = Number(e.step ?? 0);
      kept = kept.filter((k) => k.summary === undefined || Number(k.step ?? 0) < s);
    }
    kept.push(e);
  }
  return kept;
};

/** Runs `train` `runs` times; the clock moves `msBefore` before and `msAfter` after each run. */
const trainFor = async (
  hook: SummarySaverHook,
  runs: number,
  opts: { msBefore?: number; msAfter?: number; ops?: Parameters<typeof trainingGraph>[0] } = {},
) => {
  const clock = new VirtualClock();
  const driven = await driveHooks({ hooks: [hook], graph: trainingGraph(opts.ops), clock });
  for (let i = 0; i < runs; i++) {
    clock.set(clock.now() + (opts.msBefore ?? 0));
    await driven.sess.run("train");
    clock.set(clock.now() + (opts.msAfter ?? 0));
  }
  await driven.sess.close(); // end() flushes the cached writer; it stays open
  return driven;
};

describe("SummarySaverHook constructor (SummarySaverHookTest)", () => {
  it("SummarySaverHookTest.test_raise_when_scaffold_and_summary_op_both_missing", () => {
    expect(() => new SummarySaverHook({ saveSteps: 1, outputDir: dir })).toThrow(ValueError);
    expect(() => new SummarySaverHook({ saveSteps: 1, outputDir: dir })).toThrow(
      "Exactly one of scaffold or summaryOp must be provided.",
    );
    // null is Python's None.
    expect(() => new SummarySaverHook({ saveSteps: 1, outputDir: dir, scaffold: null, summaryOp: null })).toThrow(
      "Exactly one of scaffold or summaryOp",
    );
  });

  it("SummarySaverHookTest.test_raise_when_scaffold_and_summary_op_both_present", () => {
    expect(() => new SummarySaverHook({ saveSteps: 1, outputDir: dir, scaffold: { summaryOp: "s" }, summaryOp: "s" })).toThrow(
      "Exactly one of scaffold or summaryOp must be provided.",
    );
  });

  it("SummarySaverHookTest.test_raise_in_both_secs_and_steps", () => {
    expect(() => new SummarySaverHook({ saveSteps: 10, saveSecs: 10, outputDir: dir, summaryOp: "s" })).toThrow(
      new ValueError("SummarySaverHook: give only one of saveSteps and saveSecs (got saveSteps: 10, saveSecs: 10)"),
    );
  });

  it("SummarySaverHookTest.test_raise_in_none_secs_and_steps", () => {
    expect(() => new SummarySaverHook({ outputDir: dir, summaryOp: "s" })).toThrow(
      new ValueError("SummarySaverHook: give one of saveSteps and saveSecs"),
    );
    expect(() => new SummarySaverHook({ saveSteps: null, saveSecs: null, outputDir: dir, summaryOp: "s" })).toThrow(
      "SummarySaverHook: give one of saveSteps and saveSecs",
    );
  });

  it("checks in TensorFlow's order: op, then timer, then writer; rejects bad frequencies", () => {
    expect(() => new SummarySaverHook({})).toThrow("Exactly one of scaffold or summaryOp");
    expect(() => new SummarySaverHook({ summaryOp: "s" })).toThrow("SummarySaverHook: give one of saveSteps and saveSecs");
    expect(() => new SummarySaverHook({ summaryOp: "s", saveSteps: 1 })).toThrow(
      new ValueError("One of outputDir or summaryWriter must be provided."),
    );
    expect(() => new SummarySaverHook({ summaryOp: "s", saveSteps: 0, outputDir: dir })).toThrow(
      "SummarySaverHook: saveSteps: expected a positive integer, got 0",
    );
    expect(() => new SummarySaverHook({ summaryOp: "s", saveSteps: 1.5, outputDir: dir })).toThrow("saveSteps");
    expect(() => new SummarySaverHook({ summaryOp: "s", saveSecs: -1, outputDir: dir })).toThrow(
      "SummarySaverHook: saveSecs: expected a number >= 0, got -1",
    );
    expect(() => new SummarySaverHook({ summaryOp: "s", saveSecs: 0, outputDir: dir })).not.toThrow();
    expect(() => new SummarySaverHook({ summaryOp: "s", saveSteps: 1, summaryWriter: new SummaryWriter(dir) })).not.toThrow();
  });
});

describe("SummarySaverHook writing (SummarySaverHookTest)", () => {
  it("SummarySaverHookTest.test_save_steps: saveSteps 8 over 30 runs writes at steps 1, 9, 17, 25, fetched in the training run", async () => {
    const hook = new SummarySaverHook({ saveSteps: 8, outputDir: dir, summaryOp: "my_summary" });
    const { raw } = await trainFor(hook, 30, {
      ops: { ops: { my_summary: (ctx) => Number(ctx.read<number>("global_step")) / 2 } },
    });
    const events = allEvents(dir);
    expect(eventFiles(dir)).toHaveLength(1);
    const byStep = scalarsByStep(events);
    expect([...byStep.keys()]).toEqual([1, 9, 17, 25]);
    // The op ran in the same run as `train`, before or after its increment.
    for (const [step, values] of byStep) expect([(step - 1) / 2, step / 2]).toContain(values.my_summary);
    expect(sessionLogSteps(events)).toEqual([1]);
    // The summary rode on the training runs: never fetched on its own, and only 4 times.
    expect(raw.readsOf("my_summary")).toBe(0);
    expect(raw.runs.filter((f) => JSON.stringify(f).includes("my_summary"))).toHaveLength(4);
    // The true step was read only on the writing runs.
    expect(raw.readsOf("global_step")).toBe(4);
  });

  it("SummarySaverHookTest.test_multiple_summaries: two summary ops, both written at each save step", async () => {
    const hook = new SummarySaverHook({ saveSteps: 8, outputDir: dir, summaryOp: ["my_summary", "my_other_summary"] });
    await trainFor(hook, 10, { ops: { ops: { my_summary: () => 1, my_other_summary: () => 2 } } });
    const byStep = scalarsByStep(allEvents(dir));
    expect([...byStep.entries()]).toEqual([
      [1, { my_summary: 1, my_other_summary: 2 }],
      [9, { my_summary: 1, my_other_summary: 2 }],
    ]);
  });

  it("SummarySaverHookTest.test_save_secs_saving_once_every_step: saveSecs 0.5 with 0.5 s per step writes every step", async () => {
    const hook = new SummarySaverHook({ saveSecs: 0.5, outputDir: dir, summaryOp: "my_summary" });
    await trainFor(hook, 8, { msAfter: 500, ops: { ops: { my_summary: () => 1 } } });
    expect([...scalarsByStep(allEvents(dir)).keys()]).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
  });

  it("SummarySaverHookTest.test_save_secs_saving_once_every_three_steps: saveSecs 9 with 3.1 s per step writes at 1, 4, 7", async () => {
    const hook = new SummarySaverHook({ saveSecs: 9, outputDir: dir, summaryOp: "my_summary" });
    await trainFor(hook, 8, { msAfter: 3100, ops: { ops: { my_summary: () => 1 } } });
    expect([...scalarsByStep(allEvents(dir)).keys()]).toEqual([1, 4, 7]);
  });

  it("writes `loss` and `accuracy` every 100 steps with their names as tags, and flushes at end", async () => {
    const hook = new SummarySaverHook({ saveSteps: 100, outputDir: dir, summaryOp: ["loss", "accuracy"] });
    const { raw } = await trainFor(hook, 250, { ops: { ops: { loss: () => 0.25, accuracy: () => 0.75 } } });
    // Not closed, only flushed by end(): everything is in the file.
    expect(fileWriterCache.getWriter(dir).closed).toBe(false);
    expect(fileWriterCache.getWriter(dir).pendingRecords).toBe(0);
    const events = allEvents(dir);
    expect([...scalarsByStep(events).entries()]).toEqual([
      [1, { loss: 0.25, accuracy: 0.75 }],
      [101, { loss: 0.25, accuracy: 0.75 }],
      [201, { loss: 0.25, accuracy: 0.75 }],
    ]);
    const value = events.find((e) => e.summary !== undefined)?.summary?.value?.[0];
    expect(value?.metadata?.pluginData?.pluginName).toBe("scalars");
    expect(raw.runs.filter((f) => JSON.stringify(f).includes("accuracy"))).toHaveLength(3);
  });

  it("emits summaryWritten with the global step of each write", async () => {
    const clock = new VirtualClock();
    const hook = new SummarySaverHook({ saveSteps: 8, outputDir: dir, summaryOp: "loss" });
    const graph = trainingGraph({ ops: { loss: () => 0.5 } });
    const driven = await driveHooks({ hooks: [hook], graph, clock });
    for (let i = 0; i < 10; i++) await driven.sess.run("train");
    await driven.sess.close();
    expect(driven.events.ofType("summaryWritten").map((e) => ({ globalStep: e.globalStep, hook: e.hook }))).toEqual([
      { globalStep: 1, hook: "SummarySaverHook" },
      { globalStep: 9, hook: "SummarySaverHook" },
    ]);
    // Writing summaries is data, not a line: the hook prints nothing.
    expect(driven.events.messages()).toEqual([]);
  });

  it("takes the summary op from a scaffold (read when the session is created)", async () => {
    const scaffold: { summaryOp?: string } = {};
    const hook = new SummarySaverHook({ saveSteps: 5, outputDir: dir, scaffold });
    scaffold.summaryOp = "loss"; // as Scaffold.finalize() may set it after the hook is built
    await trainFor(hook, 6, { ops: { ops: { loss: () => 3 } } });
    expect([...scalarsByStep(allEvents(dir)).entries()]).toEqual([
      [1, { loss: 3 }],
      [6, { loss: 3 }],
    ]);
  });

  it("a scaffold without a summary op writes only SessionLog START", async () => {
    const hook = new SummarySaverHook({ saveSteps: 2, outputDir: dir, scaffold: {} });
    await trainFor(hook, 5);
    const events = allEvents(dir);
    expect(sessionLogSteps(events)).toEqual([1]);
    expect(events.filter((e) => e.summary !== undefined)).toEqual([]);
  });

  it("a function summary op is called after the run on writing steps and its record's keys are the tags", async () => {
    const calls: number[] = [];
    const hook = new SummarySaverHook({
      saveSteps: 3,
      outputDir: dir,
      summaryOp: async (session) => {
        const step = Number(await session.run("global_step"));
        calls.push(step);
        return { "train/loss": 1 / step, weights: summaries.histogram(new Float32Array([1, 2, 3])) };
      },
    });
    await trainFor(hook, 5);
    expect(calls).toEqual([1, 4]);
    const events = allEvents(dir);
    expect([...scalarsByStep(events).keys()]).toEqual([1, 4]);
    const at4 = events.find((e) => Number(e.step) === 4 && e.summary !== undefined)?.summary?.value ?? [];
    expect(at4.map((v) => v.tag)).toEqual(["train/loss", "weights"]);
    expect(float32At(at4[0]?.tensor?.tensorContent)).toBeCloseTo(0.25, 7);
    const histogram = at4[1];
    expect(histogram?.metadata?.pluginData?.pluginName).toBe("histograms");
    expect(histogram?.tensor?.tensorShape?.dim?.map((d) => Number(d.size))).toEqual([30, 3]);
    const rows = float32s(histogram?.tensor?.tensorContent);
    expect(rows.filter((_, i) => i % 3 === 2).reduce((a, b) => a + b, 0)).toBe(3);
  });

  it("uses a given summaryWriter instead of the cache (nothing is created in outputDir)", async () => {
    const other = mkdtempSync(join(tmpdir(), "summary-saver-hook-writer-"));
    try {
      const writer = new SummaryWriter(other);
      const hook = new SummarySaverHook({ saveSteps: 1, outputDir: dir, summaryWriter: writer, summaryOp: "loss" });
      await trainFor(hook, 2, { ops: { ops: { loss: () => 1 } } });
      await writer.close();
      expect(eventFiles(dir)).toEqual([]);
      expect([...scalarsByStep(allEvents(other)).keys()]).toEqual([1, 2]);
    } finally {
      rmSync(other, { recursive: true, force: true });
    }
  });

  it("a bad summary op result fails the run with a clear error and writes nothing for that step", async () => {
    const hook = new SummarySaverHook({ saveSteps: 1, outputDir: dir, summaryOp: "weights" });
    const { sess } = await driveHooks({
      hooks: [hook],
      graph: trainingGraph({ ops: { weights: () => new Float32Array([1, 2]) } }),
    });
    await expect(sess.run("train")).rejects.toThrow(
      'summary "weights": 2 numbers are not a scalar; return summaries.histogram(values) to write a histogram',
    );
    await fileWriterCache.getWriter(dir).flush();
    expect(allEvents(dir).filter((e) => e.fileVersion === undefined)).toEqual([]);
  });
});

describe("SummarySaverHook restarts (SessionLog START, TensorBoard purge)", () => {
  /** A graph whose `loss` is the generation of the session that computed it. */
  const restartGraph = (state: { generation: number; abortAtStep: number | undefined }) => {
    const g = new Graph();
    const step = g.globalStep();
    g.op("train", (ctx) => {
      if (Number(ctx.read(step)) === state.abortAtStep) {
        state.abortAtStep = undefined;
        throw new AbortedError("preempted");
      }
      return ctx.assignAdd(step, 1);
    });
    g.op("set_global_step", (ctx) => ctx.assign(step, ctx.feed<number>("global_step_value")));
    g.op("loss", () => state.generation);
    return g;
  };

  it("in-process recovery to step 10 after writing steps 1..20: START at 11, and the purge rule leaves no stale step", async () => {
    const state = { generation: 0, abortAtStep: undefined as number | undefined };
    const hook = new SummarySaverHook({ saveSteps: 1, outputDir: dir, summaryOp: "loss" });
    const { sess } = await driveHooks({
      hooks: [hook],
      graph: restartGraph(state),
      onCreate: async (s, creation) => {
        state.generation = creation;
        // The recreated session "restores" the checkpoint taken at step 10.
        if (creation > 0) await s.inner.run("set_global_step", { global_step_value: 10 });
      },
    });
    for (let i = 0; i < 20; i++) await sess.run("train");
    state.abortAtStep = 20;
    for (let i = 0; i < 15; i++) await sess.run("train"); // the first one recovers, then steps 11..25
    await sess.close();

    const events = allEvents(dir);
    expect(sessionLogSteps(events)).toEqual([1, 11]);
    // Without the purge, steps 11..20 appear twice.
    expect(events.filter((e) => e.summary !== undefined && Number(e.step) === 15)).toHaveLength(2);
    const series = applyPurgeRule(events)
      .filter((e) => e.summary !== undefined)
      .map((e) => [Number(e.step), scalarOf(e.summary?.value?.[0] as DecodedValue)]);
    expect(series).toEqual(Array.from({ length: 25 }, (_, i) => [i + 1, i + 1 <= 10 ? 0 : 1]));
  });

  it("a new process restoring step 10 writes a new file whose first run has START at 11; the purge rule drops the old 11..20", async () => {
    const first = { generation: 0, abortAtStep: undefined };
    const run1 = await driveHooks({
      hooks: [new SummarySaverHook({ saveSteps: 1, outputDir: dir, summaryOp: "loss" })],
      graph: restartGraph(first),
    });
    for (let i = 0; i < 20; i++) await run1.sess.run("train");
    await run1.sess.close();
    await fileWriterCache.closeAll(); // the process exits

    const second = { generation: 1, abortAtStep: undefined };
    const run2 = await driveHooks({
      hooks: [new SummarySaverHook({ saveSteps: 1, outputDir: dir, summaryOp: "loss" })],
      graph: restartGraph(second),
      initialGlobalStep: 10,
    });
    for (let i = 0; i < 5; i++) await run2.sess.run("train");
    await run2.sess.close();

    const files = eventFiles(dir);
    expect(files).toHaveLength(2);
    expect(sessionLogSteps(readEvents(files[1] as string))).toEqual([11]);
    const series = applyPurgeRule(allEvents(dir))
      .filter((e) => e.summary !== undefined)
      .map((e) => [Number(e.step), scalarOf(e.summary?.value?.[0] as DecodedValue)]);
    expect(series).toEqual(Array.from({ length: 15 }, (_, i) => [i + 1, i + 1 <= 10 ? 0 : 1]));
  });
});

describe("SummarySaverHook hot path", () => {
  it("an idle run reuses the same run arguments (the global step only) and returns no promise", async () => {
    const hook = new SummarySaverHook({ saveSteps: 100, outputDir: dir, summaryOp: ["loss"] });
    const { sess, raw } = await driveHooks({ hooks: [hook] });
    const ctx = new SessionRunContext(SessionRunArgs("train"), raw);
    const first = hook.beforeRun(ctx);
    expect(first.fetches).toEqual({ globalStep: "global_step", summary: ["loss"] });
    await hook.afterRun(ctx, { results: { globalStep: 0, summary: [null] }, options: {}, runMetadata: {} });
    const idle = hook.beforeRun(ctx);
    expect(idle.fetches).toBe("global_step");
    expect(hook.afterRun(ctx, { results: 1, options: {}, runMetadata: {} })).toBeUndefined();
    expect(hook.beforeRun(ctx)).toBe(idle);
    expect(hook.afterRun(ctx, { results: 2, options: {}, runMetadata: {} })).toBeUndefined();
    await sess.close();
  });
});

describe("toSummaryValues", () => {
  const tags = (fetches: Parameters<typeof toSummaryValues>[0], result: unknown) =>
    toSummaryValues(fetches, result).map((v) => v.tag);

  it("names values by op name, fetch keys and returned keys", () => {
    expect(tags("loss", 0.3)).toEqual(["loss"]);
    expect(tags(["loss", "accuracy"], [0.3, 0.9])).toEqual(["loss", "accuracy"]);
    expect(tags("metrics", { loss: 0.3, accuracy: 0.9 })).toEqual(["loss", "accuracy"]);
    expect(tags({ train: "metrics" }, { train: { loss: 0.3, accuracy: 0.9 } })).toEqual(["train/loss", "train/accuracy"]);
    expect(tags({ train_loss: "loss" }, { train_loss: 0.3 })).toEqual(["train_loss"]);
    expect(tags({ train: ["loss", "acc"] }, { train: [0.3, 0.9] })).toEqual(["train/loss", "train/acc"]);
    expect(tags("m", { a: { b: 1n } })).toEqual(["a/b"]);
    expect(tags("nothing", undefined)).toEqual([]);
  });

  it("scalars: numbers, bigints, one-element typed arrays and tensors", () => {
    const [a, b, c] = toSummaryValues(["a", "b", "c"], [2n, new Float32Array([0.5]), { dtype: "float64", shape: [], data: new Float64Array([4]) }]);
    expect(a).toEqual(scalarValue("a", 2));
    expect(b).toEqual(scalarValue("b", 0.5));
    expect(c).toEqual(scalarValue("c", 4));
  });

  it("marked kinds, explicit tags, SummaryValue and Summary as they are", () => {
    const explicit = scalarValue("given", 1, { simpleValue: true });
    const out = toSummaryValues("op", {
      h: summaries.histogram([1, 2, 3], { buckets: 2 }),
      t: summaries.text("hello"),
      s: summaries.scalar(0.5, { simpleValue: true, tag: "renamed" }),
      v: explicit,
      whole: { value: [scalarValue("w1", 1), scalarValue("w2", 2)] },
    });
    expect(out.map((v) => v.tag)).toEqual(["h", "t", "renamed", "given", "w1", "w2"]);
    expect(out[0]?.tensor?.tensorShape).toEqual({ dim: [{ size: 2 }, { size: 3 }] });
    expect(out[1]?.metadata?.pluginData?.pluginName).toBe("text");
    expect(out[2]).toEqual({ tag: "renamed", simpleValue: 0.5 });
    expect(out[3]).toBe(explicit);
  });

  it("rejects what has no obvious summary, saying what to do", () => {
    expect(() => toSummaryValues("w", [1, 2, 3])).toThrow(InvalidArgumentError);
    expect(() => toSummaryValues("w", [1, 2, 3])).toThrow('summary "w": 3 numbers are not a scalar; return summaries.histogram');
    expect(() => toSummaryValues("note", "hi")).toThrow('summary "note": cannot write a string; return summaries.text(value)');
    expect(() => toSummaryValues(null, 0.3)).toThrow("summary: 0.3 has no tag; a function summary op must return a record");
    expect(() => toSummaryValues(["a", "b"], [{ x: 1 }, { x: 2 }])).toThrow('summary tag "x" is written twice in one step');
    expect(() => toSummaryValues("m", new Map())).toThrow('summary "m": cannot write a Map');
  });
});
