/**
 * Preemption with real processes (failure_handler_test's local scenarios): SIGTERM a training
 * process mid-run → it saves at a step boundary and exits 42; a restart resumes at exactly that
 * run, and the final weights equal an uninterrupted run's.
 */

import { readdir } from "node:fs/promises";
import { beforeAll, describe, expect, it } from "vitest";

import { CHECKPOINTED_RUNS, PREEMPTION_EXIT_CODE } from "../../src/preemption/index.js";
import { latestCheckpoint, readBundle } from "../../src/checkpoint/index.js";
import { useTempDirs } from "../util/tempDirs.js";
import { finalOf, numbersOf, runTraining } from "../fixtures/preemption/runChild.js";

const STEPS = 100;
const STEP_MS = 10;

const makeDir = useTempDirs("ms-resume-");
const newDir = async (): Promise<string> => makeDir();

let expected: { step: number; hex: string };
beforeAll(async () => {
  const reference = await runTraining(["handler", await newDir(), String(STEPS), "0"]);
  expect(reference.code, reference.stderr).toBe(0);
  expected = finalOf(reference.lines) as { step: number; hex: string };
  expect(expected.step).toBe(STEPS);
});

/** The run count and global step recorded in the latest checkpoint. */
const checkpointed = async (dir: string) => {
  const path = (await latestCheckpoint(dir)) as string;
  const { values } = await readBundle(path);
  const scalar = (n: string) => Number((values.get(n)?.data as BigInt64Array)[0]);
  return { path, runs: scalar(CHECKPOINTED_RUNS), globalStep: scalar("global_step") };
};

describe("test_preemption_checkpointing (local, real processes)", () => {
  it("SIGTERM mid-run: checkpoint at the step it stopped, exit 42; the restart continues from exactly that step", async () => {
    const dir = await newDir();
    const first = await runTraining(["handler", dir, String(STEPS), String(STEP_MS)], (line, kill) => {
      if (line === "ran 10") kill("SIGTERM");
    });
    expect(first.code, first.stderr).toBe(PREEMPTION_EXIT_CODE);
    const lastRun = Math.max(...numbersOf(first.lines, "ran"));
    // The save happens at the step boundary after the next one (TF's run_counter + 1).
    expect(lastRun).toBeGreaterThan(10);
    expect(lastRun).toBeLessThan(STEPS);
    const ckpt = await checkpointed(dir);
    expect(ckpt).toEqual({ path: `${dir}/ckpt-1`, runs: lastRun, globalStep: lastRun });

    const second = await runTraining(["handler", dir, String(STEPS), "0"]);
    expect(second.code, second.stderr).toBe(0);
    expect(numbersOf(second.lines, "restored")).toEqual([lastRun]);
    expect(numbersOf(second.lines, "ran")[0]).toBe(lastRun + 1);
    expect(finalOf(second.lines)).toEqual(expected);
  });

  it("test_grace_period_continue_training: trains on during the grace period, saves twice, exits 42, resumes", async () => {
    const dir = await newDir();
    const first = await runTraining(["handler", dir, String(STEPS), String(STEP_MS), "0.3"], (line, kill) => {
      if (line === "ran 10") kill("SIGTERM");
    });
    expect(first.code, first.stderr).toBe(PREEMPTION_EXIT_CODE);
    const lastRun = Math.max(...numbersOf(first.lines, "ran"));
    // Training went on past the first save (at run 11). How far it gets in the 0.3 s depends on
    // the machine's load, so only "past it" is asserted.
    expect(lastRun).toBeGreaterThan(11);
    expect(lastRun).toBeLessThan(STEPS);
    const ckpt = await checkpointed(dir);
    expect(ckpt).toEqual({ path: `${dir}/ckpt-2`, runs: lastRun, globalStep: lastRun });
    expect((await readdir(dir)).filter((f) => f.endsWith(".index"))).toEqual(["ckpt-2.index"]); // maxToKeep 1

    const second = await runTraining(["handler", dir, String(STEPS), "0"]);
    expect(second.code, second.stderr).toBe(0);
    expect(numbersOf(second.lines, "restored")).toEqual([lastRun]);
    expect(finalOf(second.lines)).toEqual(expected);
  });
});
