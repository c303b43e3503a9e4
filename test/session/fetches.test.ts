/**
 * Type-level tests of typed fetches: `run` infers its results' shape from the fetches. The
 * assertions are checked by `tsc` (the project's tsconfig includes test/); at runtime they only
 * run the sessions.
 */
import { describe, expectTypeOf, it } from "vitest";

import { Graph } from "../../src/session/Graph.js";
import { MonitoredSession, SingularMonitoredSession, type StepContext } from "../../src/pipeline/MonitoredSession.js";
import { fetchOf, type Fetch, type FetchResult, type Fetches, type FetchValue, type Session } from "../../src/session/Session.js";
import type { TensorValue } from "../../src/session/Tensor.js";
import { FakeSession } from "../../src/testing/FakeSession.js";
import { LOSS_OP, TRAIN_OP, type TfjsSession } from "../../src/tfjs/TfjsSession.js";

describe("typed fetches", () => {
  it("a record gives a record, an array a tuple, a single fetch one value, null null", () => {
    const loss = fetchOf<number>("loss");
    const w = fetchOf<TensorValue>("w");
    expectTypeOf<FetchResult<typeof loss>>().toEqualTypeOf<number>();
    expectTypeOf<FetchResult<{ readonly l: typeof loss; readonly w: typeof w }>>().toEqualTypeOf<{ l: number; w: TensorValue }>();
    expectTypeOf<FetchResult<readonly [typeof loss, typeof w]>>().toEqualTypeOf<[number, TensorValue]>();
    expectTypeOf<FetchResult<null>>().toEqualTypeOf<null>();
    expectTypeOf<FetchResult<{ readonly nested: readonly [typeof loss, null] }>>().toEqualTypeOf<{ nested: [number, null] }>();
  });

  it("a plain name gives FetchValue, never unknown; only the wide Fetches type is unknown", () => {
    expectTypeOf<FetchResult<"loss">>().toEqualTypeOf<FetchValue>();
    expectTypeOf<FetchResult<string>>().toEqualTypeOf<FetchValue>();
    expectTypeOf<FetchResult<"loss">>().not.toBeUnknown();
    expectTypeOf<FetchResult<Fetches>>().toBeUnknown();
    // A session may narrow the value of plain names.
    expectTypeOf<FetchResult<"x", TensorValue>>().toEqualTypeOf<TensorValue>();
  });

  it("Session.run, GraphSession.run, FakeSession.run and TfjsSession.run infer from literals", async () => {
    const graph = new Graph();
    const step = graph.globalStep();
    const initial = new Float32Array([1]);
    const w = graph.variable("w", initial);
    const loss = graph.op("loss", (ctx) => ctx.read(w)[0] ?? 0);
    const asyncOp = graph.op<string>("label", async () => "x");
    expectTypeOf(loss).toEqualTypeOf<Fetch<number>>();
    expectTypeOf(asyncOp).toEqualTypeOf<Fetch<string>>();
    expectTypeOf(step.name).toEqualTypeOf<Fetch<number>>();

    const s = graph.session();
    await s.variables.initialize();
    const r = await s.run({ loss, step: step.name, w: w.name, other: "loss" });
    expectTypeOf(r.loss).toEqualTypeOf<number>();
    expectTypeOf(r.step).toEqualTypeOf<number>();
    expectTypeOf(r.w).toEqualTypeOf<typeof initial>();
    expectTypeOf(r.other).toEqualTypeOf<FetchValue>();
    expectTypeOf(await s.run([loss, "loss"])).toEqualTypeOf<[number, FetchValue]>();
    expectTypeOf(await s.run(loss)).toEqualTypeOf<number>();

    const asSession: Session = s;
    expectTypeOf(await asSession.run({ loss })).toEqualTypeOf<{ loss: number }>();

    const fake = new FakeSession();
    expectTypeOf(await fake.run(["train", "global_step"])).toEqualTypeOf<[FetchValue, FetchValue]>();

    const tfjsRun = (t: TfjsSession) => t.run({ loss: TRAIN_OP, step: "global_step" });
    expectTypeOf<Awaited<ReturnType<typeof tfjsRun>>>().toEqualTypeOf<{ loss: number; step: FetchValue }>();
    expectTypeOf(TRAIN_OP).toEqualTypeOf<Fetch<number>>();
    expectTypeOf(LOSS_OP).toEqualTypeOf<Fetch<number>>();

    // @ts-expect-error a result typed number is not a string
    const wrong: string = (await s.run({ loss })).loss;
    void wrong;
  });

  it("MonitoredSession, SingularMonitoredSession and a step function's runWithHooks type their results", () => {
    const loss = fetchOf<number>("loss");
    type MonRun = Awaited<ReturnType<typeof run>>;
    const run = (m: MonitoredSession) => m.run({ loss, step: "global_step" });
    expectTypeOf<MonRun>().toEqualTypeOf<{ loss: number; step: FetchValue }>();
    const single = (m: SingularMonitoredSession) => m.run([loss, loss]);
    expectTypeOf<Awaited<ReturnType<typeof single>>>().toEqualTypeOf<[number, number]>();
    const step = (ctx: StepContext) => ctx.runWithHooks(loss);
    expectTypeOf<Awaited<ReturnType<typeof step>>>().toEqualTypeOf<number>();
  });
});
