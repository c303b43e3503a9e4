/**
 * CheckpointSaverHook: ports of TensorFlow's CheckpointSaverHookTest and
 * CheckpointSaverHookMultiStepTest, plus recovery, events, the summary log and async saving.
 */

import { readdirSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

import { CheckpointSaverHook, type CheckpointSaverListener, type SessionLogWriter } from "../../hooks/CheckpointSaverHook.js";
import { CheckpointDirInUseError, CheckpointManager, CheckpointSaveError, latestCheckpoint, readBundle, Retention, type RetentionPolicy } from "../../src/checkpoint/index.js";
import { AbortedError, DeadlineExceededError, ValueError } from "../../src/errors.js";
import { Scaffold } from "../../src/creation/Scaffold.js";
import type { Session } from "../../src/session/Session.js";
import type { SessionEvent } from "../../src/events/SessionEvent.js";
import { SessionRunArgs, SessionRunContext, type HookEnv } from "../../src/hook/SessionRunHook.js";
import { fileWriterCache } from "../../src/summary/index.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { GatedSaver } from "../checkpoint/helpers.js";
import { useTempDirs } from "../util/tempDirs.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { RecordingLogger } from "../../src/testing/RecordingLogger.js";
import { driveHooks, trainingGraph } from "../util/driveHooks.js";

const tempDir = useTempDirs("ms-ckpt-");

let dir: string;
beforeEach(async () => {
  dir = tempDir();
});
afterEach(async () => {
  await fileWriterCache.closeAll();
});

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

/** The global step held by the latest checkpoint in `dir` (TF's `load_variable(global_step)`), or null. */
const savedStep = async (d = dir): Promise<number | null> => {
  const p = await latestCheckpoint(d);
  if (p === null) return null;
  const { step, values } = await readBundle(p);
  const gs = values.get("global_step");
  expect(Number((gs?.data as BigInt64Array)[0]), "the recorded step is the global step's value").toBe(step);
  return step;
};

/** A session log writer that records its calls. */
const recordingWriter = (): SessionLogWriter & { logs: { status: string; step: number; path: string | undefined }[] } => {
  const logs: { status: string; step: number; path: string | undefined }[] = [];
  return { logs, addSessionLog: (status, step, o) => void logs.push({ status, step, path: o?.checkpointPath }) };
};

/** Counts listener calls (TF's MockCheckpointSaverListener). */
class CountingListener implements CheckpointSaverListener {
  readonly counts = { begin: 0, beforeSave: 0, afterSave: 0, end: 0 };
  readonly steps: number[] = [];
  constructor(private readonly stopAt?: (step: number) => boolean) {}
  begin(): void {
    this.counts.begin++;
  }
  beforeSave(_s: Session, step: number): void {
    this.counts.beforeSave++;
    this.steps.push(step);
  }
  afterSave(_s: Session, step: number): boolean {
    this.counts.afterSave++;
    return this.stopAt?.(step) ?? false;
  }
  end(): void {
    this.counts.end++;
  }
}

/**
 * TensorFlow's bare `_HookedSession`: hooks get `begin`, `beforeRun`/`afterRun` around each run
 * and `end`, but never `afterCreateSession`.
 */
const bare = async (hook: CheckpointSaverHook, options: { stepsPerRun?: number; clock?: VirtualClock } = {}) => {
  const graph = trainingGraph({ stepsPerRun: options.stepsPerRun ?? 1 });
  const session = graph.session();
  await session.variables.initialize();
  const events: SessionEvent[] = [];
  const waiters: { type: string; resolve: () => void }[] = [];
  const emit = (e: SessionEvent): void => {
    events.push(e);
    for (const w of waiters.splice(0)) {
      if (w.type === e.type) w.resolve();
      else waiters.push(w);
    }
  };
  /** Resolves once the `n`-th event of `type` was emitted, and pending callbacks ran. */
  const eventCount = async (type: SessionEvent["type"], n: number): Promise<void> => {
    while (events.filter((e) => e.type === type).length < n) await new Promise<void>((resolve) => waiters.push({ type, resolve }));
    await new Promise((r) => setImmediate(r));
  };
  const env: HookEnv = { clock: options.clock ?? new VirtualClock(), logger: new RecordingLogger(), emit };
  await hook.begin(env);
  const run = async (): Promise<boolean> => {
    const ctx = new SessionRunContext(SessionRunArgs("train"), session);
    const args = (await hook.beforeRun(ctx)) as SessionRunArgs;
    const [, stale] = (await session.run(["train", args.fetches])) as [unknown, unknown];
    await hook.afterRun(ctx, { results: stale, options: {}, runMetadata: {} });
    return ctx.stopRequested;
  };
  return { session, run, events, eventCount, end: () => hook.end(session) };
};

// ---------------------------------------------------------------------------------------------
// CheckpointSaverHookTest
// ---------------------------------------------------------------------------------------------

describe("CheckpointSaverHookTest", () => {
  it("test_raise_when_saver_and_scaffold_both_present", () => {
    expect(() => new CheckpointSaverHook({ checkpointDir: dir, saveSecs: 10, saver: new GatedSaver(), scaffold: new Scaffold() })).toThrow(
      new ValueError("You cannot provide both saver and scaffold."),
    );
  });

  it("test_raise_in_both_secs_and_steps / test_raise_in_none_secs_and_steps", () => {
    expect(() => new CheckpointSaverHook({ checkpointDir: dir, saveSecs: 10, saveSteps: 20 })).toThrow(
      new ValueError("CheckpointSaverHook: give only one of saveSecs and saveSteps (got saveSecs: 10, saveSteps: 20)"),
    );
    expect(() => new CheckpointSaverHook({ checkpointDir: dir })).toThrow(new ValueError("CheckpointSaverHook: give one of saveSecs and saveSteps"));
  });

  it("test_saves_when_saver_and_scaffold_both_missing (default saver)", async () => {
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1 });
    const { run } = await bare(hook);
    await run();
    expect(await savedStep()).toBe(1);
    expect(await latestCheckpoint(dir)).toBe(`${dir}/model.ckpt-1`);
  });

  it("test_save_secs_saves_in_first_step", async () => {
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSecs: 2, scaffold: new Scaffold().finalize() });
    const { run } = await bare(hook);
    await run();
    expect(await savedStep()).toBe(1);
  });

  it("test_listener_with_default_saver: bare hooked session counts {begin 1, before 2, after 2, end 1}", async () => {
    const listener = new CountingListener();
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, listeners: [listener] });
    const { run, end } = await bare(hook);
    await run();
    await run();
    expect(await savedStep()).toBe(2);
    await end();
    expect(listener.counts).toEqual({ begin: 1, beforeSave: 2, afterSave: 2, end: 1 });
  });

  it("test_listener_with_monitored_session: {begin 1, before 3, after 3, end 1} over 2 steps incl. the creation save", async () => {
    const listener = new CountingListener();
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, listeners: [listener] });
    const { sess } = await driveHooks({ hooks: [hook] });
    await sess.run("train");
    await sess.run("train");
    expect(await savedStep()).toBe(2);
    await sess.close();
    expect(listener.counts).toEqual({ begin: 1, beforeSave: 3, afterSave: 3, end: 1 });
    expect(listener.steps).toEqual([0, 1, 2]);
  });

  it("test_listener_stops_training_in_after_save (the creation save's stop is ignored)", async () => {
    const listener = new CountingListener(() => true);
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, listeners: [listener] });
    const { sess } = await driveHooks({ hooks: [hook] });
    expect(sess.shouldStop()).toBe(false); // creation save asked to stop: ignored
    await sess.run("train");
    expect(sess.shouldStop()).toBe(true);
    await sess.close();
  });

  it("test_multiple_listeners: every listener is called even after one asks to stop", async () => {
    const stopper = new CountingListener(() => true);
    const other = new CountingListener();
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, listeners: [stopper, other] });
    const { run } = await bare(hook);
    expect(await run()).toBe(true);
    expect(stopper.counts.afterSave).toBe(1);
    expect(other.counts).toEqual({ begin: 1, beforeSave: 1, afterSave: 1, end: 0 });
  });

  it("test_save_secs_saves_periodically: 1 → 3 → 6", async () => {
    const clock = new VirtualClock();
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSecs: 2 });
    const { run } = await bare(hook, { clock });
    await run(); // saved
    clock.set(clock.now() + 500);
    await run(); // not saved
    expect(await savedStep()).toBe(1);
    clock.set(clock.now() + 2000); // start + 2.5 s
    await run(); // saved
    clock.set(clock.now() + 100);
    await run();
    clock.set(clock.now() + 100);
    await run();
    expect(await savedStep()).toBe(3);
    clock.set(clock.now() + 7300); // start + 10 s
    await run(); // saved
    expect(await savedStep()).toBe(6);
  });

  it("test_save_secs_calls_listeners_periodically: 4 saves", async () => {
    const clock = new VirtualClock();
    const listener = new CountingListener();
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSecs: 2, listeners: [listener] });
    const { run, end } = await bare(hook, { clock });
    await run(); // saved (1)
    clock.set(clock.now() + 500);
    await run();
    clock.set(clock.now() + 2000);
    await run(); // saved (3)
    clock.set(clock.now() + 100);
    await run();
    clock.set(clock.now() + 7400);
    await run(); // saved (5)
    clock.set(clock.now() + 100);
    await run(); // not saved (6)
    await end(); // saved at the end (6)
    expect(listener.counts).toEqual({ begin: 1, beforeSave: 4, afterSave: 4, end: 1 });
    expect(listener.steps).toEqual([1, 3, 5, 6]);
  });

  it("test_save_steps_saves_in_first_step", async () => {
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 2 });
    const { run } = await bare(hook);
    await run();
    expect(await savedStep()).toBe(1);
  });

  it("test_save_steps_saves_periodically: 1, 3, 5", async () => {
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 2 });
    const { run } = await bare(hook);
    const seen: (number | null)[] = [];
    for (let i = 0; i < 5; i++) {
      await run();
      seen.push(await savedStep());
    }
    expect(seen).toEqual([1, 1, 3, 3, 5]);
  });

  it("test_save_saves_at_end: 2", async () => {
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 2 });
    const { run, end } = await bare(hook);
    await run();
    await run();
    expect(await savedStep()).toBe(1);
    await end();
    expect(await savedStep()).toBe(2);
  });

  it("test_summary_writer_defs: SessionLog(CHECKPOINT) with the checkpoint path at each saved step", async () => {
    const writer = recordingWriter();
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 2, summaryWriter: writer });
    const { sess } = await driveHooks({ hooks: [hook] });
    for (let i = 0; i < 3; i++) await sess.run("train");
    await sess.close();
    expect(writer.logs).toEqual([
      { status: "CHECKPOINT", step: 0, path: `${dir}/model.ckpt-0` },
      { status: "CHECKPOINT", step: 2, path: `${dir}/model.ckpt-2` },
      { status: "CHECKPOINT", step: 3, path: `${dir}/model.ckpt-3` },
    ]);
  });

  it("writes SessionLog(CHECKPOINT) to the cached writer of checkpointDir by default", async () => {
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1 });
    const { sess } = await driveHooks({ hooks: [hook] });
    await sess.run("train");
    await sess.close();
    const writer = fileWriterCache.getWriter(dir);
    await writer.flush();
    const { readdir, readFile } = await import("node:fs/promises");
    const events = (await readdir(dir)).filter((f) => f.startsWith("events.out.tfevents"));
    expect(events).toHaveLength(1);
    const bytes = await readFile(`${dir}/${events[0] as string}`);
    expect(bytes.includes(Buffer.from(`${dir}/model.ckpt-1`))).toBe(true);
  });

  it("test_save_checkpoint_before_first_train_step: 0 after creation, 0 after one step, 2 after two", async () => {
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 2 });
    const { sess } = await driveHooks({ hooks: [hook] });
    expect(await savedStep()).toBe(0);
    await sess.run("train");
    expect(await savedStep()).toBe(0);
    await sess.run("train");
    expect(await savedStep()).toBe(2);
    await sess.close();
  });
});

// ---------------------------------------------------------------------------------------------
// CheckpointSaverHookMultiStepTest (steps_per_run=5, save_steps=10)
// ---------------------------------------------------------------------------------------------

describe("CheckpointSaverHookMultiStepTest", () => {
  it("test_save_steps_saves_periodically: 5, 15, 25", async () => {
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 10, stepsPerRun: 5 });
    const { run } = await bare(hook, { stepsPerRun: 5 });
    const seen: (number | null)[] = [];
    for (let i = 0; i < 5; i++) {
      await run();
      seen.push(await savedStep());
    }
    expect(seen).toEqual([5, 5, 15, 15, 25]);
  });

  it("test_save_steps_saves_at_end: 10", async () => {
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 10, stepsPerRun: 5 });
    const { run, end } = await bare(hook, { stepsPerRun: 5 });
    await run();
    await run();
    expect(await savedStep()).toBe(5);
    await end();
    expect(await savedStep()).toBe(10);
  });
});

// ---------------------------------------------------------------------------------------------
// beyond the TensorFlow tests
// ---------------------------------------------------------------------------------------------

describe("CheckpointSaverHook", () => {
  it("saves again after each recovery (edge case 2) and emits checkpointSaved on events$", async () => {
    let failed = false;
    const graph = trainingGraph({
      ops: {
        flaky: (ctx) => {
          if (!failed && (ctx.read("global_step") as number) === 2) {
            failed = true;
            throw new AbortedError("preempted");
          }
          return ctx.run("train");
        },
      },
    });
    const listener = new CountingListener();
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 100, listeners: [listener] });
    const { sess, sessions, events } = await driveHooks({
      hooks: [hook],
      graph,
      // Each new session restores the latest checkpoint, as ChiefSessionCreator does.
      onCreate: async (s) => {
        const p = await latestCheckpoint(dir);
        if (p !== null) await s.variables.restore((await readBundle(p)).values);
      },
    });
    await sess.run("flaky");
    await sess.run("flaky");
    await sess.run("flaky"); // aborted at step 2 → new session restored at 0, retried
    expect(sessions).toHaveLength(2);
    expect(listener.steps).toEqual([0, 0]);
    await sess.close();
    expect(listener.steps).toEqual([0, 0, 1]);
    // Recorded from creation on: the first session's save at 0 too, as the listener saw.
    const saved = events.ofType("checkpointSaved");
    expect(saved.map((e) => e.globalStep)).toEqual([0, 0, 1]);
    expect(saved[2]).toMatchObject({ path: join(dir, "model.ckpt-1"), durationMs: expect.any(Number) });
    // Each save is also a line a user reads, at info, with its step.
    const savePath = join(dir, "model.ckpt");
    expect(events.lines().filter((e) => e.message.startsWith("Saving checkpoints"))).toEqual(
      [0, 0, 1].map((step) => expect.objectContaining({ level: "info", message: `Saving checkpoints for ${step} into ${savePath}.`, fields: { step } })),
    );
  });

  it("takes the saver from the scaffold once it is finalized", async () => {
    const saver = new GatedSaver();
    const scaffold = new Scaffold({ saver });
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, scaffold });
    const { run } = await bare(hook);
    const pending = run();
    await saver.waitStarted(1);
    saver.release();
    await pending;
    expect(saver.started).toEqual([`${dir}/model.ckpt-1`]);
  });

  it("a failed save is raised, logged and emitted as checkpointFailed", async () => {
    const saver = new GatedSaver();
    saver.failNext = 1;
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, saver });
    const { run, events } = await bare(hook);
    const pending = run();
    await saver.waitStarted(1);
    saver.release();
    await expect(pending).rejects.toThrow(/injected failure writing .*model\.ckpt-1/);
    expect(events.map((e) => e.type)).toEqual(["checkpointFailed"]);
  });

  it("in a session, a failed save is an error line naming the step and a checkpointFailed event", async () => {
    const saver = new GatedSaver();
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, saver });
    const creating = driveHooks({ hooks: [hook] });
    await saver.waitStarted(1); // the creation save
    saver.release();
    const { sess, events } = await creating;
    saver.failNext = 1;
    const running = sess.run("train");
    await saver.waitStarted(2);
    saver.release();
    await expect(running).rejects.toThrow(/injected failure writing .*model\.ckpt-1/);
    const savePath = join(dir, "model.ckpt");
    expect(events.lines("error")).toEqual([
      expect.objectContaining({ message: `Saving the checkpoint for step 1 into ${savePath} failed: injected failure writing ${savePath}-1`, fields: { step: 1 } }),
    ]);
    expect(events.ofType("checkpointFailed")).toEqual([expect.objectContaining({ globalStep: 1 })]);
    await sess.close().catch(() => undefined);
  });

  it("maxToKeep bounds the checkpoints kept", async () => {
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, maxToKeep: 2 });
    const { run } = await bare(hook);
    for (let i = 0; i < 4; i++) await run();
    const { readdir } = await import("node:fs/promises");
    expect((await readdir(dir)).filter((f) => f.endsWith(".index")).sort()).toEqual(["model.ckpt-3.index", "model.ckpt-4.index"]);
  });

  it("a retentionPolicy decides what stays instead of maxToKeep; both at once, or with a checkpointManager, is a ValueError", async () => {
    const odd: RetentionPolicy = (cps) => ({ keep: cps.filter((c) => (c.checkpointNumber ?? 0) % 2 === 1).map((c) => c.path) });
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, retentionPolicy: Retention.union(Retention.maxToKeep(1), odd) });
    const { run } = await bare(hook);
    for (let i = 0; i < 6; i++) await run();
    const { readdir } = await import("node:fs/promises");
    expect((await readdir(dir)).filter((f) => f.endsWith(".index")).sort()).toEqual(["model.ckpt-1.index", "model.ckpt-3.index", "model.ckpt-5.index", "model.ckpt-6.index"]);
    expect(() => new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, maxToKeep: 2, retentionPolicy: odd })).toThrow(
      new ValueError("CheckpointSaverHook: give retentionPolicy or maxToKeep and keepCheckpointEveryNHours, not both (Retention.tensorflow makes the policy of the two)"),
    );
  });

  it("keepCheckpointEveryNHours preserves one checkpoint per period beyond maxToKeep", async () => {
    const clock = new VirtualClock();
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, maxToKeep: 1, keepCheckpointEveryNHours: 1, clock });
    const { run } = await bare(hook, { clock });
    for (let i = 0; i < 6; i++) {
      await clock.advanceSecs(30 * 60); // half an hour per step
      await run();
    }
    const { readdir } = await import("node:fs/promises");
    const kept = (await readdir(dir)).filter((f) => f.endsWith(".index")).map((f) => Number(/-(\d+)\.index$/.exec(f)?.[1])).sort((a, b) => a - b);
    // Saves every 30 min from step 1 (this harness has no creation-time save). The newest is
    // kept by maxToKeep; an older one is preserved once it is an hour newer than the last
    // preserved time (initially the manager's creation - 1 s): TensorFlow's sweep keeps 3 and 5.
    expect(kept).toEqual([3, 5, 6]);
  });
});

describe("CheckpointSaverHook async", () => {
  it("snapshots in afterRun, writes in the background; afterSave and checkpointSaved follow the write", async () => {
    const saver = new GatedSaver();
    const listener = new CountingListener();
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 2, saver, async: "block", listeners: [listener] });
    const { run, events, end, eventCount } = await bare(hook);
    await run(); // step 1: save starts, does not wait for the write
    await saver.waitStarted(1);
    expect(listener.counts.beforeSave).toBe(1);
    expect(listener.counts.afterSave).toBe(0);
    await run(); // step 2: trains while step 1 is being written
    saver.release();
    await eventCount("checkpointSaved", 1);
    expect(await savedStep()).toBe(1); // the snapshot of step 1, not step 2
    expect(listener.counts.afterSave).toBe(1);
    expect(events.filter((e) => e.type === "checkpointSaved")).toHaveLength(1);
    const ending = end(); // saves step 2 synchronously, after the background one
    await saver.waitStarted(2);
    saver.release();
    await ending;
    expect(await savedStep()).toBe(2);
    expect(listener.counts).toEqual({ begin: 1, beforeSave: 2, afterSave: 2, end: 1 });
  });

  it("a background failure is raised at the next run, never lost", async () => {
    const saver = new GatedSaver();
    saver.failNext = 1;
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, saver, async: true });
    const { run, events, eventCount } = await bare(hook);
    await run();
    await saver.waitStarted(1);
    saver.release();
    await eventCount("checkpointFailed", 1);
    await expect(run()).rejects.toBeInstanceOf(CheckpointSaveError);
    expect(events.map((e) => e.type)).toEqual(["checkpointFailed"]);
  });

  it("a background failure during the last run is raised by end", async () => {
    const saver = new GatedSaver();
    saver.failNext = 1;
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, saver, async: true });
    const { run, end } = await bare(hook);
    await run();
    await saver.waitStarted(1);
    const ending = end();
    saver.release();
    await expect(ending).rejects.toThrow(CheckpointSaveError);
  });

  /** One step whose background save is held, then an `end` that gives up on it after its 30 s grace period (virtual clock). */
  const endGivingUp = async (hook: CheckpointSaverHook, clock: VirtualClock, saver: GatedSaver): Promise<Awaited<ReturnType<typeof bare>>> => {
    const session = await bare(hook, { clock });
    await session.run();
    await saver.waitStarted(1);
    const outcome = expect(session.end()).rejects.toThrow(DeadlineExceededError);
    await clock.advanceSecs(31);
    await outcome;
    return session;
  };

  it("end waits at most endGracePeriodSecs for a background save, then DeadlineExceededError", async () => {
    const clock = new VirtualClock();
    const saver = new GatedSaver();
    const listener = new CountingListener();
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, saver, async: true, endGracePeriodSecs: 30, listeners: [listener] });
    await endGivingUp(hook, clock, saver);
    expect(listener.counts.end).toBe(1);
    // Let the abandoned save finish before the directory is removed.
    saver.release();
    await saver.idle();
  });

  it("a listener's afterSave that fails after end gave up waiting is logged as an error naming the step (nobody is left to raise it to)", async () => {
    const clock = new VirtualClock();
    const saver = new GatedSaver();
    const logger = new RecordingLogger();
    const listener: CheckpointSaverListener = {
      afterSave: (_s, step) => {
        throw new Error(`evaluation of step ${step} crashed`);
      },
    };
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, saver, async: true, endGracePeriodSecs: 30, listeners: [listener], logger });
    const { eventCount } = await endGivingUp(hook, clock, saver);
    const ended = /^After the session ended/;
    expect(logger.messages().filter((m) => ended.test(m))).toEqual([]);
    saver.release();
    await eventCount("checkpointSaved", 1); // the write landed; its listener then throws
    expect(logger.entries.filter((e) => ended.test(e.message))).toEqual([
      { level: "error", message: "After the session ended, a listener of the checkpoint of step 1 failed (the checkpoint is saved): evaluation of step 1 crashed", fields: { step: 1 } },
    ]);
    // The checkpoint itself is on disk: only its listener failed.
    expect(await savedStep()).toBe(1);
  });

  it("the skip policy: a save while one runs is not made, and the session hears it as checkpointSkipped", async () => {
    const saver = new GatedSaver();
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, saver, async: "skip" });
    const { run, events, eventCount, end } = await bare(hook);
    await run();
    await saver.waitStarted(1);
    await run();
    expect(events.filter((e) => e.type === "checkpointSkipped")).toEqual([expect.objectContaining({ globalStep: 2 })]);
    saver.release();
    await eventCount("checkpointSaved", 1);
    // The skipped last step is saved by end (the final step is always durable).
    const ending = end();
    await saver.waitStarted(2);
    saver.release();
    await ending;
    expect(await savedStep()).toBe(2);
  });

  it("the coalesce policy: a pending save replaced by a newer one is not made, and the session hears it as checkpointCoalesced", async () => {
    const saver = new GatedSaver();
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, saver, async: "coalesce" });
    const { run, events, eventCount, end } = await bare(hook);
    await run();
    await saver.waitStarted(1);
    await run();
    await run();
    await eventCount("checkpointCoalesced", 1);
    // The checkpointer's own event, forwarded: the replaced save's step and path.
    expect(events.filter((e) => e.type === "checkpointCoalesced")).toEqual([expect.objectContaining({ globalStep: 2, path: join(dir, "model.ckpt-2") })]);
    saver.release();
    await saver.waitStarted(2);
    saver.release();
    await eventCount("checkpointSaved", 2);
    expect(events.filter((e) => e.type === "checkpointSaved").map((e) => e.type === "checkpointSaved" && e.globalStep)).toEqual([1, 3]);
    await end();
  });

  it("a truthy afterSave of a background save requests a stop at the next run", async () => {
    const saver = new GatedSaver();
    const hook = new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, saver, async: true, listeners: [new CountingListener(() => true)] });
    const { run, eventCount } = await bare(hook);
    expect(await run()).toBe(false);
    await saver.waitStarted(1);
    saver.release();
    await eventCount("checkpointSaved", 1);
    expect(await run()).toBe(true);
  });
});

/**
 * A MonitoredSession on `clock` with `hook` (saving through `saver`) and a 5 s stop grace period,
 * once its creation save (let through) is done.
 */
const gracedSession = async (
  hook: CheckpointSaverHook,
  saver: GatedSaver,
  { clock, logger, events }: { readonly clock: VirtualClock; readonly logger: RecordingLogger; readonly events: EventRecorder },
): Promise<import("../../src/pipeline/MonitoredSession.js").MonitoredSession> => {
  const { MonitoredSession } = await import("../../src/pipeline/MonitoredSession.js");
  const graph = trainingGraph();
  const creating = MonitoredSession.create({
    sessionCreator: { createSession: async () => { const s = graph.session(); await s.variables.initialize(); return s; } },
    hooks: [hook],
    stopGracePeriodSecs: 5,
    clock,
    logger,
    observer: events.listener,
  });
  await saver.waitStarted(1); // the creation save
  saver.release();
  return creating;
};

describe("CheckpointSaverHook and the session's stop grace period", () => {
  it("closing waits for a background save at most the session's stopGracePeriodSecs", async () => {
    const clock = new VirtualClock();
    const saver = new GatedSaver();
    const logger = new RecordingLogger();
    const events = new EventRecorder();
    // The abandoned step-1 save ends with its listeners' afterSave: the event the test waits for.
    let step1Saved!: () => void;
    const step1SaveEnded = new Promise<void>((resolve) => (step1Saved = resolve));
    const listener: CheckpointSaverListener = { afterSave: (_s, step) => void (step === 1 && step1Saved()) };
    const sess = await gracedSession(new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1, saver, async: true, listeners: [listener] }), saver, { clock, logger, events });
    await sess.run("train");
    await saver.waitStarted(2); // the step-1 save, in the background and blocked
    const closing = sess.close();
    const outcome = expect(closing).rejects.toThrow(/did not finish within 5 s/);
    await clock.advanceSecs(4.9);
    expect(sess.closed).toBe(false);
    await clock.advanceSecs(0.2);
    await outcome;
    // The abandoned save finishes after the session ended (its summary writer closed): the
    // checkpoint lands, the lost TensorBoard marker is a warning, and nothing is left unhandled.
    await fileWriterCache.closeAll();
    const unhandled: unknown[] = [];
    const onUnhandled = (e: unknown): void => void unhandled.push(e);
    process.on("unhandledRejection", onUnhandled);
    try {
      saver.release();
      await saver.idle();
      // The save then records the state file (real disk I/O, as slow as the machine is loaded)
      // and reports it: wait for that report (the test timeout is the deadline), not for time.
      await step1SaveEnded;
      await new Promise((r) => setImmediate(r));
    } finally {
      process.off("unhandledRejection", onUnhandled);
    }
    expect(unhandled).toEqual([]);
    expect(await savedStep()).toBe(1);
    // What the session said before it closed is on events$: the background save, and the grace
    // period running out at error.
    expect(events.messages("info")).toEqual([`Saving checkpoints for 0 into ${join(dir, "model.ckpt")}.`, `Saving checkpoints for 1 into ${join(dir, "model.ckpt")} (in the background).`]);
    expect(events.messages("error")).toEqual([
      "CheckpointSaverHook.end: background checkpoint saves did not finish within 5 s (1 pending); the newest checkpoint may be missing.",
    ]);
    // The lost marker is warned after close, when events$ has completed: only the session's log
    // observers (here its logger) still hear the session's lines then, so it stays a logger assertion.
    expect(logger.messages("warn").some((m) => m.includes("Could not record SessionLog CHECKPOINT for step 1"))).toBe(true);
  });
});

describe("CheckpointSaverHook: the last step after the grace period ran out", () => {
  it("a background save that outlives the grace period is not followed by a save at the last step: close() ends at the deadline, and says which step has no checkpoint", async () => {
    const clock = new VirtualClock();
    const saver = new GatedSaver();
    const events = new EventRecorder();
    const sess = await gracedSession(new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 2, saver, async: true }), saver, { clock, logger: new RecordingLogger(), events });
    await sess.run("train"); // step 1
    await sess.run("train"); // step 2: its save starts in the background, and blocks
    await saver.waitStarted(2);
    await sess.run("train"); // step 3: the last, no save due
    const closing = sess.close();
    const outcome = expect(closing).rejects.toThrow(/did not finish within 5 s/);
    await clock.advanceSecs(5.1);
    // A save at step 3 would record after step 2's, so it would wait for it without limit.
    await outcome;
    expect(saver.started).toHaveLength(2);
    expect(events.messages("error")).toEqual([
      "CheckpointSaverHook.end: background checkpoint saves did not finish within 5 s (1 pending); the newest checkpoint may be missing.",
      "CheckpointSaverHook.end: no checkpoint is made at the last step 3: the background saves before it did not finish within 5 s.",
    ]);
    // The late save still lands, after the session ended.
    saver.release();
    await saver.idle();
  });
});

describe("CheckpointSaverHook and the directory's one manager", () => {
  it("a hook without a manager takes the directory at its first save and gives it back in end; a second one meanwhile fails", async () => {
    const { sess } = await driveHooks({ hooks: [new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1 })] });
    await sess.run("train");
    await expect(driveHooks({ hooks: [new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1 })] })).rejects.toThrow(CheckpointDirInUseError);
    await sess.close();
    expect(readdirSync(dir)).not.toContain("checkpoint.lock");
    const again = await driveHooks({ hooks: [new CheckpointSaverHook({ checkpointDir: dir, saveSteps: 1 })] });
    await again.sess.close();
  });

  it("a hook handed a manager saves through it and leaves it open; its name and retention apply", async () => {
    const manager = await CheckpointManager.create({ directory: dir, checkpointName: "m", maxToKeep: 1, clock: new VirtualClock() });
    const { sess } = await driveHooks({ hooks: [new CheckpointSaverHook({ checkpointManager: manager, saveSteps: 1 })] });
    await sess.run("train");
    await sess.run("train");
    await sess.close();
    expect(manager.checkpoints).toEqual([join(dir, "m-2")]);
    expect(manager.holdsLock).toBe(true);
    await manager.close();
  });

  it("options that the manager decides, or another directory, are ValueErrors naming them", async () => {
    const manager = await CheckpointManager.create({ directory: dir, clock: new VirtualClock() });
    expect(() => new CheckpointSaverHook({ checkpointManager: manager, saveSteps: 1, maxToKeep: 3, checkpointBasename: "x" })).toThrow(
      new ValueError("CheckpointSaverHook: checkpointBasename, maxToKeep cannot be given with checkpointManager (the manager's apply)"),
    );
    expect(() => new CheckpointSaverHook({ checkpointManager: manager, checkpointDir: "/elsewhere", saveSteps: 1 })).toThrow(/is not the checkpointManager's directory/);
    expect(() => new CheckpointSaverHook({ saveSteps: 1 })).toThrow(/checkpointDir must be a non-empty path \(or give a checkpointManager\)/);
    await manager.close();
  });
});

