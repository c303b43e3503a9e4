/**
 * The progress display on a real terminal: the command runs in a pseudo-terminal made by
 * util-linux `script(1)`, so stdout is a TTY and the bar is drawn.
 */
import { spawnSync } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

import { linearJob, spawnResult } from "../util/cli.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-progress-");
const hasScript = spawnSync("script", ["--version"]).status === 0;
if (!hasScript) console.warn("SKIPPED test/cli/progress.process.test.ts: util-linux script(1) is not installed");

const quote = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`;
// eslint-disable-next-line no-control-regex
const plain = (s: string): string => s.replace(/\u001b\[[0-9;?]*[A-Za-z]/g, "").replace(/\r/g, "");

describe("progress on a terminal", () => {
  it.skipIf(!hasScript)("prints every final line after the bar stops: the step, the checkpoint paths and the TensorBoard command", async () => {
    const dir = tempDir();
    const config = join(dir, "train.yaml");
    await writeFile(config, `module: ${linearJob}\ncheckpoint:\n  dir: ckpt\n  saveSteps: 10\nlastStep: 30\nlogStepCountSteps: 0\n`);
    const command = `${quote(process.execPath)} --import tsx src/cli/main.ts run ${quote(config)}`;
    const env = { ...process.env };
    delete env["CI"];
    const r = await spawnResult("script", ["-qfec", command, "/dev/null"], { env: { ...env, TERM: "xterm" } });
    const out = plain(r.stdout);
    expect(r.code, out).toBe(0);
    // The bar was drawn (a terminal), then the final lines follow it.
    const bar = out.lastIndexOf("step 30/30");
    expect(bar).toBeGreaterThan(-1);
    const after = out.slice(bar);
    expect(after).toContain("INFO Done at global step 30.");
    expect(after).toContain(`INFO Checkpoints: ${join(dir, "ckpt")}`);
    expect(after).toContain(`INFO View them with: tensorboard --logdir ${join(dir, "ckpt")}`);
    expect(after).toContain(`INFO Or, without Python: monitored-session board ${join(dir, "ckpt")}`);
    // Lines logged while the bar ran are printed too (the last save at step 30).
    expect(out).toContain(`Saving checkpoints for 30 into ${join(dir, "ckpt", "model.ckpt")}`);
  });

  it.skipIf(!hasScript)("a preemption prints its hint and the paths after the bar, naming the global step", async () => {
    const dir = tempDir();
    const config = join(dir, "train.yaml");
    const stop = join(dir, "stop-now");
    await writeFile(config, `module: ${linearJob}\ncheckpoint:\n  dir: ckpt\n  saveSteps: 100000\npreemption:\n  watchFile: stop-now\nlastStep: 1000000\nlogStepCountSteps: 0\n`);
    const env: NodeJS.ProcessEnv = { ...process.env, TERM: "xterm", CLI_TEST_FAULT_AT_STEP: "5", CLI_TEST_FAULT: `touch:${stop}` };
    delete env["CI"];
    const command = `${quote(process.execPath)} --import tsx src/cli/main.ts run ${quote(config)}`;
    const r = await spawnResult("script", ["-qfec", command, "/dev/null"], { env, timeoutMs: 60_000 });
    const out = plain(r.stdout);
    expect(r.code, out).toBe(42);
    const saved = /Preemption checkpoint for step (\d+) saved/.exec(out);
    expect(saved, out).not.toBeNull();
    const after = out.slice(out.lastIndexOf(" steps/s"));
    expect(after).toContain("INFO Preempted: checkpoint saved; exiting with 42 (run the same command again to resume).");
    expect(after).toContain(`INFO View them with: tensorboard --logdir ${join(dir, "ckpt")}`);
    expect(out).toContain(`termination notice (the file ${stop} appeared) at global step `);
    expect(out).not.toMatch(/at run \d/);
  });
});
