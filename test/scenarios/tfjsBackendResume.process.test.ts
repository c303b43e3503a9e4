/**
 * A scenario across modules, with real processes.
 *
 * Exact-step resume of the bundled TensorFlow.js job (examples/tfjs-classifier.job.ts) on each
 * backend, with real processes through the `monitored-session run` command: training to step 30
 * in one process, and to step 15 then (a new process, restoring the step-15 checkpoint) to step
 * 30, leave bit-identical checkpoints: weights, Adam's slots and beta powers, step and data
 * position. On wasm also with a SIGKILL mid-run, as test/scenarios/exactStepResume.process.test.ts does for
 * a Graph job.
 */
import { writeFile } from "node:fs/promises";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { latestCheckpoint, readBundle } from "../../src/checkpoint/index.js";
import type { TfjsBackendName } from "../../src/tfjs/index.js";
import { useTempDirs } from "../util/tempDirs.js";
import { bits } from "../util/tensorBits.js";
import { repoRoot, runCli } from "../util/runCli.js";

const job = join(repoRoot, "examples/tfjs-classifier.job.ts");
const newDir = useTempDirs("ms-resume-tfjs-");

/** Writes the configuration of the bundled job in `dir`: `lastStep` on `backend`, saving every `saveSteps`. */
const configure = async (dir: string, lastStep: number, backend: TfjsBackendName, saveSteps = 10): Promise<string> => {
  const config = join(dir, "train.yaml");
  await writeFile(
    config,
    `module: ${job}\ncheckpoint: { dir: ckpt, saveSteps: ${saveSteps} }\nsummaries: { saveSteps: 0 }\nlogStepCountSteps: 0\nlastStep: ${lastStep}\ntfjs: { backend: ${backend} }\n`,
  );
  return config;
};

/** Runs the bundled job in `dir` up to `lastStep` on `backend`; returns the command's stderr. */
const trainTo = async (dir: string, lastStep: number, backend: TfjsBackendName, saveSteps = 10): Promise<string> => {
  const r = await runCli(["run", await configure(dir, lastStep, backend, saveSteps)]);
  expect(r.code, r.stderr).toBe(0);
  expect(r.stderr).toContain(`TensorFlow.js backend: ${backend} (1 thread).`);
  return r.stderr;
};

const latestValues = async (dir: string) => {
  const latest = (await latestCheckpoint(join(dir, "ckpt"))) as string;
  return readBundle(latest);
};

describe("exact-step resume of the bundled TensorFlow.js job (real processes)", () => {
  it.each<TfjsBackendName>(["cpu", "wasm"])("on %s: 30 steps in one process = 15 steps, then a new process from the checkpoint to 30", async (backend) => {
    const straight = newDir();
    await trainTo(straight, 30, backend);
    const expected = await latestValues(straight);
    expect(expected.step).toBe(30);
    expect([...expected.values.keys()]).toEqual(expect.arrayContaining(["global_step", "model/0_dense/kernel", "optimizer/accBeta1", "data/permutation"]));

    const split = newDir();
    await trainTo(split, 15, backend);
    expect((await latestValues(split)).step).toBe(15);
    const resumed = await trainTo(split, 30, backend);
    expect(resumed).toContain(`Starting at global step 15 (restored from ${join(split, "ckpt", "model.ckpt-15")})`);
    const actual = await latestValues(split);
    expect(actual.step).toBe(30);
    expect(bits(actual.values)).toEqual(bits(expected.values));
  });

  // Three processes of a few thousand steps: more than the default timeout on a loaded machine.
  it("on wasm: SIGKILL mid-run, restart from the last checkpoint: the final checkpoint is bit-identical to an uninterrupted run", { timeout: 180_000 }, async () => {
    const LAST = 2000;
    const straight = newDir();
    await trainTo(straight, LAST, "wasm", 400);
    const expected = await latestValues(straight);
    expect(expected.step).toBe(LAST);

    // Killed once a progress line (CI mode: at most one a second) shows step 700 or more: the
    // step-400 checkpoint is on disk, and the kill lands wherever the loop is.
    const dir = newDir();
    const config = await configure(dir, LAST, "wasm", 400);
    const killed = await runCli(["run", config], {
      onSpawn: (child) =>
        child.stdout?.on("data", (chunk: Buffer) => {
          const steps = [...chunk.toString().matchAll(/^step (\d+)\//gm)].map((m) => Number(m[1]));
          if (steps.some((n) => n >= 700)) child.kill("SIGKILL");
        }),
    });
    expect(killed.signal, killed.stderr).toBe("SIGKILL");
    const onDisk = await latestValues(dir);
    expect(onDisk.step).toBeGreaterThanOrEqual(400);
    expect(onDisk.step).toBeLessThan(LAST);

    const resumed = await runCli(["run", config]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stderr).toContain(`Starting at global step ${onDisk.step} (restored from`);
    const actual = await latestValues(dir);
    expect(actual.step).toBe(LAST);
    expect(bits(actual.values)).toEqual(bits(expected.values));
  });
});
