import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import protobuf from "protobufjs";
import { describe, expect, it } from "vitest";

import { ProfilerHook, type ChromeTrace, type RunMetadataSink } from "../../hooks/ProfilerHook.js";
import { isLeft } from "fp-ts/lib/Either.js";

import { HookRegistry, type HookConfig } from "../../src/config/HookRegistry.js";
import { parseConfigText } from "../../src/config/loadConfig.js";
import { ValueError } from "../../src/errors.js";
import { Scaffold } from "../../src/creation/Scaffold.js";
import type { SessionEvent } from "../../src/events/SessionEvent.js";
import { silentLogger } from "../../src/Logger.js";
import { SessionRunArgs, SessionRunContext, type HookEnv, type SessionRunHook } from "../../src/hook/SessionRunHook.js";
import { FakeSession } from "../../src/testing/FakeSession.js";
import type { EventInput } from "../../src/summary/index.js";
import { fileWriterCache } from "../../src/summary/index.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { eventFiles, readEvents } from "../summary/decoder.js";
import { driveHooks, trainingGraph } from "../util/driveHooks.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-profiler-");

/** Records run metadata as TensorFlow's FakeSummaryWriter does. */
class RecordingSink implements RunMetadataSink {
  readonly events: EventInput[] = [];
  addEvent(event: EventInput): void {
    this.events.push(event);
  }
  get tags(): string[] {
    return this.events.map((e) => e.taggedRunMetadata?.tag ?? "");
  }
}

const timelines = (dir: string): string[] => (existsSync(dir) ? readdirSync(dir).filter((f) => /^timeline-\d+\.json$/.test(f)).sort() : []);

/** A graph whose `train` takes 20 ms of the virtual clock (set, not advanced: no timers fire). */
const slowGraph = (clock: VirtualClock) => trainingGraph({ ops: { work: () => clock.set(clock.now() + 20) } });

/** A hook that takes 3 ms in beforeRun and 7 ms in afterRun, and reports a checkpoint and a summary write of that step. */
const busyHook = (clock: VirtualClock): SessionRunHook => {
  let env: HookEnv | undefined;
  let step = 0;
  return {
    name: "Busy",
    begin: (e) => {
      env = e;
    },
    beforeRun: () => {
      clock.set(clock.now() + 3);
    },
    afterRun: () => {
      step += 1;
      clock.set(clock.now() + 5);
      env?.emit({ type: "checkpointSaved", time: clock.now(), globalStep: step, path: `/ckpt/model.ckpt-${step}`, durationMs: 5 });
      clock.set(clock.now() + 2);
      env?.emit({ type: "summaryWritten", time: clock.now(), globalStep: step, durationMs: 2, hook: "Busy" });
    },
  };
};

describe("ProfilerHook", () => {
  it("ProfilerHookTest.test_raise_in_both_secs_and_steps / test_raise_in_none_secs_and_steps: exactly one of saveSteps and saveSecs", () => {
    expect(() => new ProfilerHook({ saveSteps: 10, saveSecs: 5, outputDir: "x" })).toThrow(ValueError);
    expect(() => new ProfilerHook({ saveSteps: 10, saveSecs: 5, outputDir: "x" })).toThrow("ProfilerHook: give only one of saveSteps and saveSecs (got saveSteps: 10, saveSecs: 5)");
    expect(() => new ProfilerHook({ outputDir: "x" })).toThrow("ProfilerHook: give one of saveSteps and saveSecs");
    expect(() => new ProfilerHook({ saveSteps: 0, outputDir: "x" })).toThrow("ProfilerHook: saveSteps: expected a positive integer, got 0");
  });

  it("ProfilerHookTest.test_save_secs_does_not_save_in_first_step and test_save_steps_does_not_save_in_first_step", async () => {
    for (const options of [{ saveSecs: 2 }, { saveSteps: 1 }]) {
      const dir = tempDir();
      const sink = new RecordingSink();
      const { sess } = await driveHooks({ hooks: [new ProfilerHook({ ...options, outputDir: dir, runMetadataWriter: sink })] });
      await sess.run("train");
      await sess.close();
      expect(timelines(dir)).toEqual([]);
      expect(sink.events).toEqual([]);
    }
  });

  it("ProfilerHookTest.test_save_secs_saves_periodically: saves at 2.5 s, not at 2.6 or 4.4, again at 4.5", async () => {
    const dir = tempDir();
    const clock = new VirtualClock();
    const start = clock.now();
    const hook = new ProfilerHook({ saveSecs: 2, outputDir: dir, runMetadataWriter: new RecordingSink() });
    const { sess } = await driveHooks({ hooks: [hook], clock });
    const runAt = async (secs: number): Promise<string[]> => {
      clock.set(start + secs * 1000);
      await sess.run("train");
      return timelines(dir);
    };
    expect(await runAt(0)).toEqual([]);
    expect(await runAt(2.5)).toEqual(["timeline-2.json"]);
    expect(await runAt(2.6)).toHaveLength(1);
    expect(await runAt(4.4)).toHaveLength(1);
    expect(await runAt(4.5)).toEqual(["timeline-2.json", "timeline-5.json"]);
    await sess.close();
  });

  it("ProfilerHookTest.test_save_steps_saves_periodically: saveSteps 2 saves at runs 2 and 4 (steps 2 and 4); hook timing is on only for those runs", async () => {
    const dir = tempDir();
    const hook = new ProfilerHook({ saveSteps: 2, outputDir: dir, runMetadataWriter: new RecordingSink() });
    const { sess } = await driveHooks({ hooks: [hook] });
    const timed: number[] = [];
    sess.events$.subscribe((e) => {
      if (e.type === "hookTimings") timed.push(e.run);
    });
    const counts: number[] = [];
    for (let i = 0; i < 5; i++) {
      await sess.run("train");
      counts.push(timelines(dir).length);
    }
    await sess.close();
    expect(counts).toEqual([0, 1, 1, 2, 2]);
    expect(timelines(dir)).toEqual(["timeline-2.json", "timeline-4.json"]);
    expect(timed).toEqual([2, 4]);
  });

  it("ProfilerHookTest.test_run_metadata_saves: the run metadata is recorded under step_2", async () => {
    const sink = new RecordingSink();
    const { sess } = await driveHooks({ hooks: [new ProfilerHook({ saveSteps: 1, outputDir: tempDir(), runMetadataWriter: sink })] });
    await sess.run("train");
    await sess.run("train");
    await sess.close();
    expect(sink.tags).toEqual(["step_2"]);
    expect(sink.events[0]?.step).toBe(2);
  });

  it("the timeline is Chrome trace JSON with the step, session.run, every hook's beforeRun/afterRun, and the checkpoint and summary writes", async () => {
    const dir = tempDir();
    const clock = new VirtualClock();
    const hooks = [busyHook(clock), new ProfilerHook({ saveSteps: 1, outputDir: dir, runMetadataWriter: new RecordingSink() })];
    const { sess } = await driveHooks({ hooks, clock, graph: slowGraph(clock) });
    await sess.run(["train", "work"]);
    await sess.run(["train", "work"]);
    await sess.close();
    expect(timelines(dir)).toEqual(["timeline-2.json"]);
    // Written atomically: no temporary file is left beside it.
    expect(readdirSync(dir)).toEqual(["timeline-2.json"]);
    const trace = JSON.parse(readFileSync(join(dir, "timeline-2.json"), "utf8")) as ChromeTrace;
    const spans = trace.traceEvents.filter((e) => e.ph === "X").map((e) => [e.name, e.ts, e.dur]);
    // Busy's beforeRun 3 ms, the profiler's, the 20 ms run, Busy's afterRun 7 ms (with its
    // 5 ms checkpoint and 2 ms summary write), the profiler's afterRun.
    expect(spans).toEqual([
      ["step 2", 0, 30_000],
      ["session.run", 3000, 20_000],
      ["Busy.beforeRun", 0, 3000],
      ["ProfilerHook.beforeRun", 3000, 0],
      ["Busy.afterRun", 23_000, 7000],
      ["ProfilerHook.afterRun", 30_000, 0],
      ["checkpoint save", 23_000, 5000],
      ["summary write", 28_000, 2000],
    ]);
    expect(trace.traceEvents.find((e) => e.name === "checkpoint save")?.args).toEqual({ globalStep: 2, path: "/ckpt/model.ckpt-2" });
    expect(trace.otherData).toEqual({ globalStep: 2, run: 2, startTimeMs: clock.now() - 30 });
    // showDataflow (default): a flow from each beforeRun into the run and from the run to each afterRun.
    const flows = trace.traceEvents.filter((e) => e.ph === "s" || e.ph === "f").map((e) => [e.name, e.ph, e.ts]);
    expect(flows).toEqual([
      ["fetches", "s", 3000],
      ["fetches", "f", 3000],
      ["fetches", "s", 3000],
      ["fetches", "f", 3000],
      ["results", "s", 23_000],
      ["results", "f", 23_000],
      ["results", "s", 23_000],
      ["results", "f", 30_000],
    ]);
    expect(trace.traceEvents.some((e) => e.ph === "C")).toBe(false);
  });

  it("showDataflow: false draws no flows; showMemory adds a memory counter", async () => {
    const dir = tempDir();
    const { sess } = await driveHooks({ hooks: [new ProfilerHook({ saveSteps: 1, outputDir: dir, showDataflow: false, showMemory: true, runMetadataWriter: new RecordingSink() })] });
    await sess.run("train");
    await sess.run("train");
    await sess.close();
    const trace = JSON.parse(readFileSync(join(dir, "timeline-2.json"), "utf8")) as ChromeTrace;
    expect(trace.traceEvents.filter((e) => e.ph === "s" || e.ph === "f")).toEqual([]);
    const memory = trace.traceEvents.find((e) => e.ph === "C");
    expect(memory?.name).toBe("memory");
    expect(memory?.args?.["heapUsedBytes"]).toBeGreaterThan(0);
    expect(memory?.args?.["rssBytes"]).toBeGreaterThan(0);
  });

  it("writes a TaggedRunMetadata event to the event file of outputDir, whose RunMetadata decodes to the step's spans", async () => {
    const dir = tempDir();
    const clock = new VirtualClock();
    const { sess } = await driveHooks({ hooks: [new ProfilerHook({ saveSteps: 1, outputDir: dir })], clock, graph: slowGraph(clock) });
    await sess.run(["train", "work"]);
    await sess.run(["train", "work"]);
    await sess.close();
    await fileWriterCache.closeAll();
    const [file] = eventFiles(dir);
    const tagged = readEvents(file as string).filter((e) => e.what === "taggedRunMetadata");
    expect(tagged).toHaveLength(1);
    const event = tagged[0] as { step?: string; taggedRunMetadata?: { tag?: string; runMetadata?: Uint8Array } };
    expect(event.step).toBe("2");
    expect(event.taggedRunMetadata?.tag).toBe("step_2");
    // An independent decoder, from our own minimal schema of the fields written.
    const schema = protobuf.parse(`syntax = "proto3";
      message Node { string node_name = 1; int64 all_start_micros = 2; int64 op_start_rel_micros = 3; int64 op_end_rel_micros = 4; int64 all_end_rel_micros = 5; string timeline_label = 8; }
      message Device { string device = 1; repeated Node node_stats = 2; }
      message Steps { repeated Device dev_stats = 1; }
      message Meta { Steps step_stats = 1; }`).root;
    const Meta = schema.lookupType("Meta");
    const meta = Meta.toObject(Meta.decode(event.taggedRunMetadata?.runMetadata as Uint8Array), { longs: Number }) as {
      stepStats: { devStats: { device: string; nodeStats: { nodeName: string; allStartMicros: number; allEndRelMicros?: number }[] }[] };
    };
    const [device] = meta.stepStats.devStats;
    expect(device?.device).toBe("/job:localhost/replica:0/task:0/device:CPU:0");
    const run = device?.nodeStats.find((n) => n.nodeName === "session.run");
    expect(run?.allEndRelMicros).toBe(20_000);
    expect(run?.allStartMicros).toBe((clock.now() - 20) * 1000);
  });

  it("outside a monitored session (no events$, no hook timing) it still profiles: the step span, without hook spans", async () => {
    const dir = tempDir();
    const clock = new VirtualClock();
    const hook = new ProfilerHook({ saveSteps: 1, outputDir: dir, runMetadataWriter: new RecordingSink() });
    const session = new FakeSession();
    hook.begin({ clock, logger: silentLogger, emit: () => undefined });
    hook.afterCreateSession(session);
    for (let i = 0; i < 2; i++) {
      const ctx = new SessionRunContext(SessionRunArgs("train"), session);
      const args = hook.beforeRun(ctx);
      const [, step] = (await session.run(["train", args.fetches])) as [unknown, unknown];
      await hook.afterRun(ctx, { results: step, options: args.options ?? {}, runMetadata: {} });
    }
    await hook.end();
    const trace = JSON.parse(readFileSync(join(dir, "timeline-2.json"), "utf8")) as ChromeTrace;
    expect(trace.traceEvents.filter((e) => e.ph === "X").map((e) => e.name)).toEqual(["step 2"]);
  });

  it("a failed timeline write is logged and emitted as a warning, and training goes on", async () => {
    const dir = tempDir();
    // outputDir is a file: mkdir fails.
    const blocked = join(dir, "file");
    await import("node:fs/promises").then((fs) => fs.writeFile(blocked, "x"));
    const { sess, logger } = await driveHooks({ hooks: [new ProfilerHook({ saveSteps: 1, outputDir: blocked, runMetadataWriter: new RecordingSink() })] });
    const warnings: SessionEvent[] = [];
    sess.events$.subscribe((e) => e.type === "warning" && warnings.push(e));
    await sess.run("train");
    await sess.run("train");
    await sess.run("train");
    await sess.close();
    expect(warnings.length).toBeGreaterThanOrEqual(1);
    const warned = (logger as { messages(l: string): string[] }).messages("warn");
    expect(warned.filter((m) => /^ProfilerHook: writing .*timeline-\d+\.json failed: /.test(m)), warned.join("\n")).not.toHaveLength(0);
  });
});

describe("ProfilerHook from a configuration file", () => {
  it("a YAML hooks entry makes a ProfilerHook with its options, outputDir resolved against the file", async () => {
    const parsed = parseConfigText(`module: job.ts\nhooks:\n  - type: ProfilerHook\n    saveSteps: 1\n    outputDir: profile\n    showDataflow: false\n`, "yaml");
    if (isLeft(parsed)) throw new Error(parsed.left.map((i) => i.message).join("; "));
    const entry = parsed.right.config.hooks?.[0];
    const base = tempDir();
    const hook = HookRegistry.builtins.create(entry as HookConfig, { resolvePath: (p) => join(base, p), scaffold: new Scaffold() });
    expect(hook).toBeInstanceOf(ProfilerHook);
    const { sess } = await driveHooks({ hooks: [hook] });
    await sess.run("train");
    await sess.run("train");
    await sess.close();
    const trace = JSON.parse(readFileSync(join(base, "profile", "timeline-2.json"), "utf8")) as ChromeTrace;
    expect(trace.traceEvents.some((e) => e.ph === "s")).toBe(false);
  });

  it("bad options are configuration problems naming the key", () => {
    const parsed = parseConfigText(`module: job.ts\nhooks:\n  - type: ProfilerHook\n    outputDir: profile\n    saveSteps: 1\n    saveSecs: 2\n`, "yaml");
    expect(isLeft(parsed)).toBe(true);
    if (isLeft(parsed)) expect(parsed.left.map((i) => `${i.path}: ${i.message}`).join("\n")).toMatch(/saveSteps.*saveSecs|saveSecs.*saveSteps/);
  });
});
