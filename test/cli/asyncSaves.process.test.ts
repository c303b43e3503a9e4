/**
 * Asynchronous checkpoints on the real workload: the bundled TensorFlow.js job in a child
 * process, synchronous steps with no delay between them. What is checked does not depend on
 * timing: the final step is durable before exit 0, every save that started either landed or
 * was reported, and a SIGKILL resumes from a verified checkpoint at or before the last step the
 * child printed. (How many of the cadence's saves land is a benchmark: `npm run bench -- async-saves`.)
 */
import { existsSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

import { readBundle } from "../../src/checkpoint/index.js";
import { repoRoot, startCli } from "../util/cliChild.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-async-");
const printingJob = join(repoRoot, "test/fixtures/cli/printing-job.ts");

const config = (dir: string, policy: string, lastStep: number): string => {
  const file = join(dir, "job.yaml");
  writeFileSync(file, `module: ${printingJob}\ncheckpoint:\n  dir: ck\n  saveSteps: 50\n  async: ${policy}\n  maxToKeep: null\nlastStep: ${lastStep}\nlogStepCountSteps: 0\n`);
  return file;
};

/** Steps of the checkpoints on disk whose every checksum verifies. */
const verifiedSteps = async (ck: string): Promise<number[]> => {
  const steps: number[] = [];
  for (const f of readdirSync(ck)) {
    const m = /^model\.ckpt-(\d+)\.index$/.exec(f);
    if (m === null) continue;
    await readBundle(join(ck, `model.ckpt-${m[1]}`)); // throws on a bad checksum
    steps.push(Number(m[1]));
  }
  return steps.sort((a, b) => a - b);
};

/** Each "Saving checkpoints for N" line has its bundle on disk, or an error line naming step N. */
const everyStartedSaveLandedOrWasReported = (stderr: string, onDisk: readonly number[]): void => {
  const started = [...stderr.matchAll(/Saving checkpoints for (\d+) into/g)].map((m) => Number(m[1]));
  expect(started.length).toBeGreaterThan(1);
  for (const step of started) {
    if (onDisk.includes(step)) continue;
    expect(stderr, `the save of step ${step} neither landed nor was reported`).toMatch(new RegExp(`(of|for) step ${step}\\b.*failed`));
  }
};

describe("asynchronous checkpoints on the bundled TensorFlow.js job", () => {
  for (const policy of ["true", "coalesce"]) {
    it(`async: ${policy}: the final step is durable before exit 0, and every save that started landed or was reported`, async () => {
      const dir = tempDir();
      const r = await startCli(["run", config(dir, policy, 400)]).done;
      expect(r.code, r.stderr).toBe(0);
      const ck = join(dir, "ck");
      const onDisk = await verifiedSteps(ck);
      expect(onDisk.at(-1)).toBe(400);
      expect(readFileSync(join(ck, "checkpoint"), "utf8")).toMatch(/^model_checkpoint_path: "model\.ckpt-400"$/m);
      everyStartedSaveLandedOrWasReported(r.stderr, onDisk);
      // Skipped saves are said, not silent.
      const skipped = (r.stderr.match(/Checkpoint save skipped/g) ?? []).length;
      expect(onDisk.length + skipped).toBeGreaterThanOrEqual(400 / 50);
    });
  }

  it("SIGKILL mid-run: the restart resumes from a verified checkpoint at or before the last step the child printed", async () => {
    const dir = tempDir();
    const cfg = config(dir, "true", 100_000_000);
    const run = startCli(["run", cfg]);
    await run.waitFor(/^trained 1[2-9]\d$/m); // past two cadences
    run.process.kill("SIGKILL");
    const killed = await run.done;
    expect(killed.signal).toBe("SIGKILL");
    const printed = [...killed.stdout.matchAll(/^trained (\d+)$/gm)].map((m) => Number(m[1]));
    const lastPrinted = printed.at(-1) as number;
    const ck = join(dir, "ck");
    const onDisk = await verifiedSteps(ck);
    const newest = onDisk.at(-1) as number;
    expect(newest).toBeLessThanOrEqual(lastPrinted);
    expect(newest % 50).toBe(0);

    writeFileSync(cfg, readFileSync(cfg, "utf8").replace("lastStep: 100000000", `lastStep: ${newest + 2}`));
    const again = await startCli(["run", cfg]).done;
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).toContain(`Starting at global step ${newest} (restored from ${join(ck, `model.ckpt-${newest}`)})`);
    expect(existsSync(join(ck, `model.ckpt-${newest + 2}.index`))).toBe(true);
  });
});
