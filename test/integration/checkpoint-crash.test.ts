/**
 * Real-process crash tests: a child process saves checkpoints continuously and is killed with
 * SIGKILL at random moments (seeded: the seed is printed, `TEST_SEED` replays it); corrupted
 * checkpoints on disk are found after a restart. Runs in the `integration` vitest project.
 */

import { spawn } from "node:child_process";
import { readFile, readdir, truncate, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { beforeEach, describe, expect, it } from "vitest";

import { CheckpointManager, dataPath, indexPath } from "../../src/checkpoint/index.js";
import { buildModel, checkConsistent } from "../fixtures/checkpoint/model.js";
import { seededRandom } from "../util/seed.js";
import { useTempDirs } from "../util/tempDirs.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";

const root = resolve(fileURLToPath(new URL("../..", import.meta.url)));
const child = join(root, "test/fixtures/checkpoint/saver-child.ts");

const KILLS = 50;
/**
 * Bound on the whole kill loop. Each run spawns a Node + tsx child (about 1.5 s idle, 3 s on a
 * shared 2-core machine under load), so 50 runs take 75–150 s; the bound leaves room for load.
 */
const LOOP_BUDGET_MS = 300_000;

const tempDir = useTempDirs("ms-ckpt-");

let dir: string;
beforeEach(async () => {
  dir = tempDir();
});
/** Runs the child; `onLine` sees each stdout line. Resolves with the exit code/signal. */
const runChild = (
  args: string[],
  onLine: (line: string, kill: () => void) => void = () => undefined,
): Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }> =>
  new Promise((resolvePromise, reject) => {
    const p = spawn(process.execPath, ["--import", "tsx", child, ...args], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    let buffered = "";
    p.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk;
      buffered += chunk;
      let nl;
      while ((nl = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        onLine(line, () => p.kill("SIGKILL"));
      }
    });
    p.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk;
    });
    p.on("error", reject);
    p.on("exit", (code, signal) => resolvePromise({ code, signal, stdout, stderr }));
  });

describe("crash safety with real processes", () => {
  it(
    `SIGKILL at ${KILLS} random moments while saving: a fresh manager always restores a verified latest checkpoint`,
    async () => {
      const started = Date.now();
      const random = seededRandom("checkpoint crash test (kill delays)");
      /** How each child ended, as observed by its exit event. */
      const exits: { code: number | null; signal: NodeJS.Signals | null }[] = [];
      let lastStep = 0;
      let leftoversRemoved = 0;
      const killDelays: number[] = [];
      for (let run = 1; run <= KILLS; run++) {
        expect(Date.now() - started, `kill loop over budget at run ${run}`).toBeLessThan(LOOP_BUDGET_MS);
        const delay = 5 + Math.floor(random.next() * 56);
        let timer: NodeJS.Timeout | undefined;
        let savedInRun = 0;
        const result = await runChild(["save", dir], (line, kill) => {
          if (!line.startsWith("saved ")) return;
          savedInRun++;
          // Kill a random 5–60 ms after the first save of this run completes.
          if (savedInRun === 1) timer = setTimeout(kill, delay);
        });
        clearTimeout(timer);
        exits.push({ code: result.code, signal: result.signal });
        killDelays.push(delay);
        const killed = result.signal === "SIGKILL";

        const events = new EventRecorder();
        const manager = await CheckpointManager.create({ directory: dir, logger: events.logger(), maxToKeep: 3 });
        leftoversRemoved += Number(events.messages("warn")[0]?.match(/^Removed (\d+) leftover/)?.[1] ?? 0);
        const { session } = buildModel();
        const path = await manager.restoreOrInitialize(session.variables);
        expect(path, `run ${run}: no checkpoint found`).not.toBeNull();
        // A killed writer's lock names a process that is gone: taken over, with a warning.
        if (killed) expect(events.messages("warn").filter((w) => w.startsWith("Took over "))).toEqual([expect.stringMatching(/process \d+ is gone/)]);
        expect(
          events.messages("warn").filter((w) => !w.startsWith("Removed ") && !w.startsWith("Took over ")),
          `run ${run}: the latest checkpoint did not verify`,
        ).toEqual([]);
        const { step, problems } = await checkConsistent(session);
        expect(problems, `run ${run} at step ${step}`).toEqual([]);
        expect(step).toBeGreaterThanOrEqual(lastStep);
        lastStep = step;
        // After cleanup, no temporary file is left.
        expect((await readdir(dir)).filter((f) => f.includes(".tmp-"))).toEqual([]);
        await manager.close();
      }
      const kills = exits.filter((e) => e.signal === "SIGKILL").length;
      console.info(
        `[crash test] ${kills} SIGKILLs observed in ${exits.length} runs (delays ${Math.min(...killDelays)}–${Math.max(...killDelays)} ms after a save, ` +
          `seed ${random.seed}), final step ${lastStep}, ${leftoversRemoved} leftover files of interrupted saves removed, ${Date.now() - started} ms`,
      );
      // Every child must have died of the SIGKILL: one that exited on its own was not tested.
      expect(
        exits.filter((e) => e.signal !== "SIGKILL"),
        "children that exited otherwise than by SIGKILL",
      ).toEqual([]);
      expect(kills).toBe(KILLS);
    },
    LOOP_BUDGET_MS + 30_000,
  );

  it("corrupt or truncated latest checkpoint on disk: a restarted process falls back to the previous one", async () => {
    const saved = await runChild(["save", dir, "3"]);
    expect(saved.code, saved.stderr).toBe(0);
    const restore = async () => JSON.parse((await runChild(["restore", dir])).stdout) as {
      path: string;
      step: number;
      problems: string[];
      warnings: string[];
    };
    expect(await restore()).toMatchObject({ path: join(dir, "ckpt-3"), step: 3, problems: [], warnings: [] });

    // Flip one byte in the middle of the latest data file.
    const data = await readFile(dataPath(join(dir, "ckpt-3")));
    data[data.length >> 1] = (data[data.length >> 1] as number) ^ 0xff;
    await writeFile(dataPath(join(dir, "ckpt-3")), data);
    const afterFlip = await restore();
    expect(afterFlip).toMatchObject({ path: join(dir, "ckpt-2"), step: 2, problems: [] });
    expect(afterFlip.warnings[0]).toMatch(/ckpt-3 is corrupt or incomplete.*tensor "dense\/kernel": Checksum does not match/s);

    // Truncate the next one's data and the last one's index as well.
    await truncate(dataPath(join(dir, "ckpt-2")), 1000);
    const afterTruncate = await restore();
    expect(afterTruncate).toMatchObject({ path: join(dir, "ckpt-1"), step: 1, problems: [] });
    expect(afterTruncate.warnings.join("\n")).toMatch(/ckpt-2 is corrupt or incomplete.*truncated/s);

    await truncate(indexPath(join(dir, "ckpt-1")), 10);
    const none = await runChild(["restore", dir]);
    expect(none.code).not.toBe(0);
    expect(none.stderr).toMatch(/DataLossError: No valid checkpoint in .*every candidate failed verification/);
  });
});
