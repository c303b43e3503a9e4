/**
 * A scenario across modules, with real processes.
 *
 * Exact-step resume with real processes: a training process whose updates depend on a seeded
 * RNG and on shuffled data order is SIGKILLed mid-run and restarted; with the iterator and RNG
 * registered in a ResumableState (saved by CheckpointSaverHook beside the variables), the final
 * weights are bit-identical to an uninterrupted run.
 */

import { describe, expect, it } from "vitest";

import { latestCheckpoint, readBundle } from "../../src/checkpoint/index.js";
import { useTempDirs } from "../util/tempDirs.js";
import { finalOf, numbersOf, runTraining } from "../fixtures/preemption/runChild.js";

const STEPS = 60;
const STEP_MS = 10;

const makeDir = useTempDirs("ms-resume-");
const newDir = async (): Promise<string> => makeDir();

describe("exact-step resume (real processes)", () => {
  it("SIGKILL after step 10, restart from the last checkpoint: final weights are bit-identical to an uninterrupted run", async () => {
    const reference = await runTraining(["hook", await newDir(), String(STEPS), "0"]);
    expect(reference.code, reference.stderr).toBe(0);
    const expected = finalOf(reference.lines);
    expect(expected?.step).toBe(STEPS);

    const dir = await newDir();
    const killed = await runTraining(["hook", dir, String(STEPS), String(STEP_MS)], (line, kill) => {
      if (line === "ran 10") kill("SIGKILL");
    });
    expect(killed.signal, killed.stderr).toBe("SIGKILL");
    const ranBeforeKill = Math.max(...numbersOf(killed.lines, "ran"));
    expect(ranBeforeKill).toBeLessThan(STEPS);

    // The checkpoint on disk holds the iterator and RNG beside the variables.
    const latest = (await latestCheckpoint(dir)) as string;
    const { values, step } = await readBundle(latest);
    expect([...values.keys()].sort()).toEqual(["b", "data/iterator", "global_step", "rng", "w"]);
    expect(step % 3 === 0 || step === ranBeforeKill).toBe(true);

    const resumed = await runTraining(["hook", dir, String(STEPS), "0"]);
    expect(resumed.code, resumed.stderr).toBe(0);
    const restoredAt = numbersOf(resumed.lines, "restored")[0] as number;
    expect(restoredAt).toBeGreaterThanOrEqual(9);
    expect(restoredAt).toBeLessThanOrEqual(ranBeforeKill);
    // It replays from the checkpoint, not from step 0 and not past it.
    expect(numbersOf(resumed.lines, "ran")[0]).toBe(restoredAt + 1);
    expect(finalOf(resumed.lines)).toEqual(expected);

    // Control: the same kill and restart without the registered state ends with other bits.
    const dir2 = await newDir();
    const killed2 = await runTraining(["hook", dir2, String(STEPS), String(STEP_MS), "--no-state"], (line, kill) => {
      if (line === "ran 10") kill("SIGKILL");
    });
    expect(killed2.signal, killed2.stderr).toBe("SIGKILL");
    const resumed2 = await runTraining(["hook", dir2, String(STEPS), "0", "--no-state"]);
    expect(resumed2.code, resumed2.stderr).toBe(0);
    expect(finalOf(resumed2.lines)?.step).toBe(STEPS);
    expect(finalOf(resumed2.lines)?.hex).not.toBe(expected?.hex);
  });
});
