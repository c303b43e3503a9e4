import { describe, expect, it } from "vitest";
import { AbortedError, RuntimeError, ValueError } from "../../src/errors.js";
import { SessionRunArgs, SessionRunContext } from "../../src/hook/SessionRunHook.js";
import { StopAtStepHook } from "../../hooks/StopAtStepHook.js";
import { driveHooks, setGlobalStep, trainingGraph } from "../util/driveHooks.js";

describe("StopAtStepHook", () => {
  it("StopAtStepTest.test_raise_in_both_last_step_and_num_steps: exactly one of numSteps and lastStep", () => {
    expect(() => new StopAtStepHook({ numSteps: 10, lastStep: 20 })).toThrow(ValueError);
    expect(() => new StopAtStepHook({ numSteps: 10, lastStep: 20 })).toThrow("StopAtStepHook: give only one of numSteps and lastStep (got numSteps: 10, lastStep: 20)");
    expect(() => new StopAtStepHook({})).toThrow("StopAtStepHook: give one of numSteps and lastStep");
  });

  it("StopAtStepTest.test_stop_based_on_last_step: stops only once the true step reaches lastStep, re-reading only from stale+1", async () => {
    const hook = new StopAtStepHook({ lastStep: 10 });
    const { sess, raw } = await driveHooks({ hooks: [hook], initialGlobalStep: 5 });
    await sess.run("noop");
    expect(sess.shouldStop()).toBe(false);
    expect(raw.readsOf("global_step")).toBe(0);

    // Stale 9 + 1 reaches the target, so the hook re-reads: still 9 after a no-op, no stop.
    await setGlobalStep(raw, 9);
    await sess.run("noop");
    expect(sess.shouldStop()).toBe(false);
    expect(raw.readsOf("global_step")).toBe(1);

    await setGlobalStep(raw, 10);
    await sess.run("noop");
    expect(sess.shouldStop()).toBe(true);
    await sess.close();

    // Past the target, in a new session with the same hook: the first run stops.
    const again = await driveHooks({ hooks: [hook], initialGlobalStep: 11 });
    await again.sess.run("noop");
    expect(again.sess.shouldStop()).toBe(true);
    await again.sess.close();
  });

  it("StopAtStepTest.test_stop_based_on_num_step: numSteps 10 from step 5 stops at 15, not at 13 or 14", async () => {
    const hook = new StopAtStepHook({ numSteps: 10 });
    const { sess, raw } = await driveHooks({ hooks: [hook], initialGlobalStep: 5 });
    expect(hook.targetStep).toBe(15);
    await sess.run("noop");
    expect(sess.shouldStop()).toBe(false);
    await setGlobalStep(raw, 13);
    await sess.run("noop");
    expect(sess.shouldStop()).toBe(false);
    await setGlobalStep(raw, 14);
    await sess.run("noop");
    expect(sess.shouldStop()).toBe(false);
    await setGlobalStep(raw, 15);
    await sess.run("noop");
    expect(sess.shouldStop()).toBe(true);
    await sess.close();
  });

  it("StopAtStepTest.test_stop_based_with_multiple_steps: a jump from 5 to 15 stops", async () => {
    const hook = new StopAtStepHook({ numSteps: 10 });
    const { sess, raw } = await driveHooks({ hooks: [hook], initialGlobalStep: 5 });
    await sess.run("noop");
    expect(sess.shouldStop()).toBe(false);
    await setGlobalStep(raw, 15);
    await sess.run("noop");
    expect(sess.shouldStop()).toBe(true);
    await sess.close();
  });

  it("training with lastStep 10 runs exactly 10 steps; the true step is read only on the last run", async () => {
    const hook = new StopAtStepHook({ lastStep: 10 });
    const { sess, raw } = await driveHooks({ hooks: [hook] });
    let runs = 0;
    while (!sess.shouldStop()) {
      await sess.run("train");
      runs++;
    }
    expect(runs).toBe(10);
    expect(await raw.run("global_step")).toBe(10);
    expect(raw.readsOf("global_step")).toBe(2); // the hook's one re-read, plus ours
    await expect(sess.run("train")).rejects.toThrow(RuntimeError);
    await sess.close();
  });

  it("edge case 2: after a recovery the numSteps target is not moved", async () => {
    const hook = new StopAtStepHook({ numSteps: 10 });
    let aborted = false;
    const graph = trainingGraph({
      ops: {
        maybe_abort: (ctx) => {
          // A preemption at step 4, after which the session restores a step-3 checkpoint.
          if (!aborted && ctx.read<number>("global_step") === 4) {
            aborted = true;
            throw new AbortedError("worker preempted");
          }
          return ctx.run("train");
        },
      },
    });
    const { sess, sessions } = await driveHooks({
      hooks: [hook],
      graph,
      onCreate: async (s, creation) => {
        if (creation > 0) await setGlobalStep(s.inner, 3);
      },
    });
    let runs = 0;
    while (!sess.shouldStop()) {
      await sess.run("maybe_abort");
      runs++;
    }
    expect(sessions).toHaveLength(2);
    expect(hook.targetStep).toBe(10);
    expect(await sessions[1]?.run("global_step")).toBe(10);
    expect(runs).toBe(4 + 7); // 4 steps, the preempted run retried from 3, then up to 10
    await sess.close();
  });

  it("without afterCreateSession, the target counts from the first run's step", async () => {
    const graph = trainingGraph();
    const session = graph.session();
    await session.variables.initialize();
    await setGlobalStep(session, 7);
    const hook = new StopAtStepHook({ numSteps: 2 });
    const stops: boolean[] = [];
    for (let i = 0; i < 2; i++) {
      const ctx = new SessionRunContext(SessionRunArgs("train"), session);
      const args = hook.beforeRun(ctx);
      const [, gs] = (await session.run(["train", args.fetches])) as [unknown, number];
      await hook.afterRun(ctx, { results: gs, options: {}, runMetadata: {} });
      stops.push(ctx.stopRequested);
    }
    expect(hook.targetStep).toBe(9);
    expect(stops).toEqual([false, true]);
  });

  it("hot path: constant run arguments, and no promise for a run far from the target", async () => {
    const hook = new StopAtStepHook({ lastStep: 100 });
    const { sess, raw } = await driveHooks({ hooks: [hook] });
    const ctx = new SessionRunContext(SessionRunArgs("train"), raw);
    const args = hook.beforeRun(ctx);
    expect(hook.beforeRun(ctx)).toBe(args);
    expect(args.fetches).toBe("global_step");
    expect(hook.afterRun(ctx, { results: 5, options: {}, runMetadata: {} })).toBeUndefined();
    const nearTarget = hook.afterRun(ctx, { results: 99, options: {}, runMetadata: {} });
    expect(nearTarget).toBeInstanceOf(Promise);
    await nearTarget;
    expect(ctx.stopRequested).toBe(false); // the true step is still 0
    await sess.close();
  });

  it("a session without a global step is a RuntimeError naming the hook", async () => {
    const hook = new StopAtStepHook({ lastStep: 3 });
    await expect(driveHooks({ hooks: [hook], graph: trainingGraph({ globalStepName: null }) })).rejects.toThrow(
      "Global step should be created to use StopAtStepHook.",
    );
  });
});
