/**
 * The examples of docs/testing.md, run as tests so the documentation cannot rot.
 * Keep the two in step: each block here is copied into the guide.
 */
import { describe, expect, it } from "vitest";
import { CheckpointSaverHook, StopAtStepHook, StepCounterHook } from "../../hooks/index.js";
import {
  AbortedError,
  fetchOf,
  MonitoredSession,
  OutOfRangeError,
  SessionRunArgs,
  SessionRunHook,
  silentLogger,
  withSession,
  type SessionRunContext,
  type SessionRunValues,
} from "../../src/index.js";
import { EventRecorder, FakeSession, FakeSessionCreator, HookRecorder, InMemorySaver, RecordingLogger, VirtualClock } from "../../src/testing/index.js";
import { useTempDirs } from "../util/tempDirs.js";

// --- A training loop under test -------------------------------------------------------------
/** The user's loop: trains until the session says stop, returns the last loss. */
async function trainLoop(sess: MonitoredSession): Promise<number> {
  let loss = Number.NaN;
  while (!sess.shouldStop()) {
    const out = await sess.run({ step: "train", loss: fetchOf<number>("loss") });
    loss = out.loss; // a number: the fetch is typed
  }
  return loss;
}

const tempDir = useTempDirs("ms-docs-testing-");

describe("docs/testing.md examples", () => {
  it("records what the session said and did with an EventRecorder", async () => {
    const clock = new VirtualClock();
    const recorder = new EventRecorder();
    const session = MonitoredSession.create({
      sessionCreator: new FakeSessionCreator(),
      hooks: [new StopAtStepHook({ lastStep: 3 }), new StepCounterHook({ everyNSteps: 2 })],
      clock,
      observer: recorder.listener,
      logObserver: null,
    });
    await withSession(session, async (s) => {
      while (!s.shouldStop()) {
        await clock.advanceSecs(1);
        await s.run("train");
      }
    });
    expect(recorder.ofType("stopRequested").map((e) => e.by)).toEqual(["StopAtStepHook"]);
    // The step counter's line and its data: one second a step.
    expect(recorder.messages("info")).toContain("global_step/sec: 1");
    expect(recorder.ofType("stepRate").map((e) => e.stepsPerSec)).toEqual([1]);
  });

  it("unit-tests a training loop with a FakeSession", async () => {
    const creator = new FakeSessionCreator(() => new FakeSession({ ops: { loss: (ctx) => 1 / ctx.call } }));
    const loss = await withSession(
      { sessionCreator: creator, hooks: [new StopAtStepHook({ lastStep: 10 })], logger: silentLogger },
      trainLoop,
    );
    expect(creator.last?.globalStep).toBe(10);
    expect(loss).toBe(1 / 10);
  });

  it("checks that the loop survives a preemption", async () => {
    // The first session is preempted on its 3rd run; the monitored session re-creates it.
    const first = new FakeSession({ ops: { loss: () => 0.5 } }).injectError(new AbortedError("preempted"), { atCall: 3 });
    const creator = new FakeSessionCreator(() => new FakeSession({ ops: { loss: () => 0.5 } }), [first]);
    await withSession(
      { sessionCreator: creator, hooks: [new StopAtStepHook({ numSteps: 5 })], logger: silentLogger },
      trainLoop,
    );
    expect(creator.created).toHaveLength(2);
  });

  it("treats OutOfRange as the end of the data", async () => {
    const creator = new FakeSessionCreator(() =>
      new FakeSession({ ops: { loss: () => 0.1 } }).injectError(new OutOfRangeError("end of data"), { atStep: 7 }),
    );
    const loss = await withSession({ sessionCreator: creator, logger: silentLogger }, trainLoop);
    expect(loss).toBeUndefined(); // withSession returns undefined on a clean OutOfRange exit
    expect(creator.last?.globalStep).toBe(7);
  });

  it("tests an 'every 600 seconds' hook in microseconds with the virtual clock", async () => {
    const clock = new VirtualClock();
    const logger = new RecordingLogger();
    const sess = await MonitoredSession.create({
      sessionCreator: new FakeSessionCreator(),
      hooks: [new StepCounterHook({ everyNSteps: null, everyNSecs: 600 })],
      clock,
      logger,
    });
    await sess.run("train"); // anchors the timer
    for (let i = 0; i < 100; i++) {
      await clock.advanceSecs(10);
      await sess.run("train");
    }
    // 600 simulated seconds, 60 steps: one measurement of 0.1 steps/sec.
    expect(logger.messages("info")).toEqual(["global_step/sec: 0.1"]);
    await sess.close();
  });

  it("unit-tests a custom hook, and its call order with HookRecorder", async () => {
    /** The hook under test: stops when the loss falls under a threshold. */
    class StopWhenConverged extends SessionRunHook {
      constructor(private readonly threshold: number) {
        super();
      }
      override beforeRun(): SessionRunArgs {
        return SessionRunArgs("loss");
      }
      override afterRun(ctx: SessionRunContext, values: SessionRunValues): void {
        const loss = values.results; // this hook's fetches are untyped: narrow, do not cast
        if (typeof loss === "number" && loss < this.threshold) ctx.requestStop();
      }
    }

    const log: string[] = [];
    const creator = new FakeSessionCreator(() => new FakeSession({ ops: { loss: (ctx) => 1 / ctx.call } }));
    const sess = await MonitoredSession.create({
      sessionCreator: creator,
      hooks: [new HookRecorder("before", { log }), new StopWhenConverged(0.3), new HookRecorder("after", { log })],
      logger: silentLogger,
    });
    let runs = 0;
    while (!sess.shouldStop()) {
      await sess.run("train");
      runs++;
    }
    await sess.close();
    expect(runs).toBe(4); // 1/4 < 0.3
    expect(log.slice(0, 4)).toEqual(["before.begin", "after.begin", "before.afterCreateSession", "after.afterCreateSession"]);
    expect(log.at(-1)).toBe("after.end");
  });

  it("tests a checkpoint cadence with the in-memory saver", async () => {
    const checkpointDir = tempDir(); // holds only the manager's state file and lock
    const saver = new InMemorySaver();
    const sessionLogs: number[] = [];
    await withSession(
      {
        sessionCreator: new FakeSessionCreator(() => new FakeSession({ ops: { loss: () => 0.5 } })),
        hooks: [
          new StopAtStepHook({ lastStep: 5 }),
          new CheckpointSaverHook({ checkpointDir, saveSteps: 2, saver, summaryWriter: { addSessionLog: (_s, step) => void sessionLogs.push(step) } }),
        ],
        logger: silentLogger,
      },
      trainLoop,
    );
    // At creation, every 2 steps, and at the end.
    expect(saver.saves.map((s) => s.step)).toEqual([0, 2, 4, 5]);
    expect(sessionLogs).toEqual([0, 2, 4, 5]);
  });
});
