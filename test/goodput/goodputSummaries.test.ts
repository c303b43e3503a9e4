/**
 * goodputSummaries: the group's goodput as scalars, at a `summaryWritten` event at most once per
 * interval on the virtual clock and at the session's `end` (at the last step it heard of), with
 * the figures computeGoodput gives for the logs on disk; a failure is one warning, never an error
 * raised into the session.
 */
import { describe, expect, it } from "vitest";

import { badputTag, BADPUT_BUCKETS, computeGoodput, GOODPUT_TAG, goodputSummaries, GoodputRecorder, readGoodputLogs } from "../../src/index.js";
import type { SummaryWriter } from "../../src/summary/index.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-goodput-summaries-");

const silent = { debug: () => undefined, info: () => undefined, error: () => undefined };

describe("goodputSummaries", () => {
  it("writes goodput/fraction and every badput/<bucket>_secs at a summary, once per interval, and at the end at the last step heard", async () => {
    const dir = tempDir();
    const clock = new VirtualClock();
    const recorder = GoodputRecorder.open({ logDir: dir, task: "chief:0", chief: true, clock, processStartMs: clock.now() });
    await clock.advance(4_000);
    recorder.ready(0);
    const written: { values: Record<string, number>; step: number }[] = [];
    const writer = { addScalars: (values: Record<string, number>, step: number) => void written.push({ values, step }) } as unknown as SummaryWriter;
    const listen = goodputSummaries({ logDir: dir, recorder, writer: () => writer, clock, logger: { ...silent, warn: () => undefined }, intervalSecs: 60 });
    await clock.advance(6_000);
    listen({ type: "summaryWritten", time: clock.now(), globalStep: 100, durationMs: 1, hook: "SummarySaverHook" });
    await clock.advance(30_000);
    listen({ type: "summaryWritten", time: clock.now(), globalStep: 200, durationMs: 1, hook: "SummarySaverHook" });
    listen({ type: "checkpointSaved", time: clock.now(), globalStep: 250, path: "x", durationMs: 1 });
    listen({ type: "end", time: clock.now() });
    expect(written.map((w) => w.step)).toEqual([100, 250]);
    const first = written[0]?.values ?? {};
    expect(Object.keys(first).sort()).toEqual([GOODPUT_TAG, ...BADPUT_BUCKETS.map(badputTag)].sort());
    // At step 100: 4 s of startup, 6 s of training, from the log on disk (its mark of step 100 written first).
    expect(first[GOODPUT_TAG]).toBeCloseTo(0.6, 10);
    expect(first[badputTag("startup")]).toBe(4);
    const expected = computeGoodput(readGoodputLogs(dir)).group;
    expect(written[1]?.values[GOODPUT_TAG]).toBeCloseTo(expected?.goodput ?? NaN, 10);
  });

  it("a writer that fails is one warning, and the session never sees an error", () => {
    const dir = tempDir();
    const clock = new VirtualClock();
    const recorder = GoodputRecorder.open({ logDir: dir, task: "local", chief: true, clock });
    recorder.ready(0);
    const warnings: string[] = [];
    const writer = () => {
      throw new Error("closed");
    };
    const listen = goodputSummaries({ logDir: dir, recorder, writer, clock, logger: { ...silent, warn: (m: string) => void warnings.push(m) }, intervalSecs: 0 });
    for (let step = 1; step <= 3; step++) listen({ type: "summaryWritten", time: clock.now(), globalStep: step, durationMs: 1, hook: "SummarySaverHook" });
    listen({ type: "end", time: clock.now() });
    expect(warnings).toEqual([`The goodput summaries could not be written (closed); training goes on, and \`monitored-session goodput ${dir}\` recomputes them`]);
  });
});
