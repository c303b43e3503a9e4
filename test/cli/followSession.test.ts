/** The CLI's progress display follows a session's `events$` (unit test: no process, a virtual clock). */
import { PassThrough } from "node:stream";
import { Subject } from "rxjs";
import { describe, expect, it } from "vitest";

import { createProgress, followSession } from "../../src/cli/progress.js";
import { Coordinator } from "../../src/coordinator/Coordinator.js";
import type { SessionEvent } from "../../src/events/SessionEvent.js";
import { FakeSession } from "../../src/testing/FakeSession.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";

const setup = () => {
  const clock = new VirtualClock();
  const out = new PassThrough();
  const err = new PassThrough();
  const text = { out: "", err: "" };
  out.on("data", (d: Buffer) => (text.out += d.toString()));
  err.on("data", (d: Buffer) => (text.err += d.toString()));
  const progress = createProgress({ tty: false, out, err, clock, lineIntervalMs: 1000 });
  const events = new Subject<SessionEvent>();
  let step = 0;
  let reads = 0;
  const following = followSession(progress, {
    events$: events,
    readStep: () => {
      reads += 1;
      return Promise.resolve(step);
    },
    lossOf: (r) => (typeof r === "number" ? r : undefined),
  });
  const afterRun = (run: number, loss: number, stopRequested = false): void => {
    step = run * 2;
    events.next({ type: "afterRun", time: clock.now(), run, results: loss, stopRequested });
  };
  return { clock, progress, events, following, afterRun, text, reads: () => reads };
};

describe("followSession", () => {
  it("draws from afterRun events when due: the global step read after the run, the rate and the loss", async () => {
    const { clock, progress, following, afterRun, text, reads } = setup();
    progress.start(0, 100);
    await clock.advance(1000);
    afterRun(1, 0.5);
    await following.settled();
    // Not due again for a second: later runs neither read the step nor print.
    afterRun(2, 0.4);
    await clock.advance(500);
    afterRun(3, 0.3);
    await following.settled();
    expect(reads()).toBe(1);
    await clock.advance(500);
    afterRun(4, 0.25);
    await following.settled();
    expect(text.out).toBe("step 2/100 | 2.0 steps/s | loss 0.5000 | eta 49s\nstep 8/100 | 4.0 steps/s | loss 0.2500 | eta 23s\n");
    following.unsubscribe();
  });

  it("shows StepCounterHook's rate once a stepRate event came, and counts warning events", async () => {
    const { clock, progress, events, following, afterRun, text } = setup();
    progress.start(0, 100);
    await clock.advance(1000);
    afterRun(1, 0.5);
    await following.settled();
    events.next({ type: "stepRate", time: clock.now(), globalStep: 2, stepsPerSec: 123.4 });
    events.next({ type: "warning", time: clock.now(), message: "Model diverged with loss = NaN." });
    await clock.advance(1000);
    afterRun(2, 0.4);
    await following.settled();
    events.next({ type: "warning", time: clock.now(), message: "again" });
    await clock.advance(1000);
    afterRun(3, 0.3);
    await following.settled();
    expect(text.out.split("\n")).toEqual([
      "step 2/100 | 2.0 steps/s | loss 0.5000 | eta 49s",
      "step 4/100 | 123 steps/s | loss 0.4000 | eta 1s | 1 warning",
      "step 6/100 | 123 steps/s | loss 0.3000 | eta 1s | 2 warnings",
      "",
    ]);
    // The warning's line is the session's log observer's, not the display's.
    expect(text.err).toBe("");
    following.unsubscribe();
  });

  it("a run that requested a stop is drawn even when the display is not due", async () => {
    const { clock, progress, following, afterRun, text } = setup();
    progress.start(0, undefined);
    await clock.advance(1000);
    afterRun(1, 1);
    await following.settled();
    await clock.advance(10);
    afterRun(2, 0.75, true);
    await following.settled();
    progress.stop();
    expect(text.out.trim().split("\n").at(-1)).toBe("step 4 | 4.0 steps/s | loss 0.7500");
  });

  it("logs checkpoints and recoveries from the events (a preemption overrun is the handler's own line, not repeated), and nothing after unsubscribe", async () => {
    const { following, events, text, progress, clock } = setup();
    progress.start(0, undefined);
    const session = new FakeSession();
    const coord = new Coordinator({ clock });
    events.next({ type: "sessionCreated", time: clock.now(), session, coord, recovery: 0, restoredFrom: null });
    events.next({ type: "checkpointSaved", time: clock.now(), globalStep: 20, path: "/ckpt/model.ckpt-20", durationMs: 12.4 });
    events.next({ type: "sessionAborted", time: clock.now(), error: new Error("x"), cause: "AbortedError: worker 1 preempted" });
    events.next({ type: "sessionCreated", time: clock.now(), session, coord, recovery: 1, restoredFrom: "/ckpt/model.ckpt-20", cause: "AbortedError: worker 1 preempted" });
    events.next({ type: "gracePeriodExceeded", time: clock.now(), run: 3, message: "the checkpoint did not finish within 5 s" });
    following.unsubscribe();
    events.next({ type: "sessionCreated", time: clock.now(), session, coord, recovery: 2, restoredFrom: null });
    expect(text.err.split("\n")).toEqual([
      "INFO Checkpoint saved: /ckpt/model.ckpt-20 (global step 20, 12 ms).",
      "WARN Session aborted (AbortedError: worker 1 preempted): it is re-created at the next step.",
      "INFO Session re-created (recovery 1 after AbortedError: worker 1 preempted), restored from /ckpt/model.ckpt-20.",
      "",
    ]);
  });
});
