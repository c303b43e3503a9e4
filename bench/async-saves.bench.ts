/**
 * Asynchronous checkpoints on the real workload: the bundled TensorFlow.js job run by the
 * `monitored-session` command, 2000 steps, `saveSteps: 50`, every checkpoint kept.
 *
 * - `durableFraction` per policy (`skip`, i.e. `async: true`, and `coalesce`): the cadence's
 *   checkpoints (steps 50, 100, … 2000) whose every checksum verifies after the run, over the 40
 *   requested. Goal ≥ 0.9. The final step must be among them, or the benchmark fails.
 * - `killResumes`: `KILLS` children of the printing job (test/fixtures/cli/printing-job.ts) are
 *   SIGKILLed at random moments; each is restarted and must resume from the newest verified
 *   checkpoint. `withinTwoCadences` is the fraction whose restart step is at most 100 steps
 *   behind the last step the killed child printed. Goal ≥ 0.95. The seed is printed.
 */
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { readBundle } from "../src/checkpoint/index.js";
import { repoRoot, startCli } from "../test/util/cliChild.js";
import { round } from "./stats.js";
import { mulberry32 } from "../src/util/mulberry32.js";

const STEPS = 2000;
const CADENCE = 50;
const KILLS = 50;
const printingJob = join(repoRoot, "test/fixtures/cli/printing-job.ts");


const yaml = (policy: string, lastStep: number): string =>
  `module: ${printingJob}\ncheckpoint:\n  dir: ck\n  saveSteps: ${CADENCE}\n  async: ${policy}\n  maxToKeep: null\nlastStep: ${lastStep}\nlogStepCountSteps: 0\n`;

/** Steps of the bundles in `ck` whose checksums all verify. */
const verifiedSteps = async (ck: string): Promise<number[]> => {
  const steps: number[] = [];
  for (const f of readdirSync(ck)) {
    const m = /^model\.ckpt-(\d+)\.index$/.exec(f);
    if (m === null) continue;
    try {
      await readBundle(join(ck, `model.ckpt-${m[1]}`));
      steps.push(Number(m[1]));
    } catch {
      // not durable
    }
  }
  return steps.sort((a, b) => a - b);
};

const durable = async (policy: string): Promise<{ requested: number; durable: number; fraction: number; final: boolean }> => {
  const dir = mkdtempSync(join(tmpdir(), "ms-bench-async-"));
  try {
    const cfg = join(dir, "job.yaml");
    writeFileSync(cfg, yaml(policy, STEPS));
    const r = await startCli(["run", cfg], { timeoutMs: 600_000 }).done;
    if (r.code !== 0) throw new Error(`async ${policy}: exit ${r.code}:\n${r.stderr}`);
    const steps = await verifiedSteps(join(dir, "ck"));
    const cadence = steps.filter((s) => s > 0 && s % CADENCE === 0).length;
    const requested = STEPS / CADENCE;
    const final = steps.includes(STEPS);
    if (!final) throw new Error(`async ${policy}: the final step ${STEPS} is not durable`);
    return { requested, durable: cadence, fraction: round(cadence / requested, 3), final };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
};

export default async (): Promise<Record<string, unknown>> => {
  const seed = Number(process.env["BENCH_SEED"] ?? Date.now() % 1_000_000);
  console.log(`async-saves: seed ${seed} (BENCH_SEED=${seed} repeats these kill moments)`);
  const random = mulberry32(seed);
  const skip = await durable("true");
  console.log(`  skip: ${skip.durable}/${skip.requested} durable`);
  const coalesce = await durable("coalesce");
  console.log(`  coalesce: ${coalesce.durable}/${coalesce.requested} durable`);

  const behind: number[] = [];
  for (let i = 0; i < KILLS; i++) {
    const dir = mkdtempSync(join(tmpdir(), "ms-bench-kill-"));
    try {
      const cfg = join(dir, "job.yaml");
      writeFileSync(cfg, yaml("true", 100_000_000));
      const run = startCli(["run", cfg]);
      await run.waitFor("Starting at global step 0");
      await new Promise((r) => setTimeout(r, 300 + random() * 3000));
      run.process.kill("SIGKILL");
      const killed = await run.done;
      const printed = [...killed.stdout.matchAll(/^trained (\d+)$/gm)].map((m) => Number(m[1]));
      const lastPrinted = printed.at(-1) ?? 0;
      const newest = (await verifiedSteps(join(dir, "ck"))).at(-1) ?? 0;
      // The restart: it must resume from exactly the newest verified checkpoint.
      writeFileSync(cfg, yaml("true", newest));
      const again = await startCli(["run", cfg]).done;
      const m = /Starting at global step (\d+)/.exec(again.stderr);
      if (again.code !== 0 || m === null) throw new Error(`kill ${i}: the restart failed (${again.code}):\n${again.stderr}`);
      const resumed = Number(m[1]);
      if (resumed !== newest) throw new Error(`kill ${i}: resumed at ${resumed}, but the newest verified checkpoint is ${newest}`);
      behind.push(lastPrinted - resumed);
      console.log(`  kill ${i + 1}/${KILLS}: killed after step ${lastPrinted}, resumed at ${resumed}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  const within = behind.filter((b) => b <= 2 * CADENCE).length / behind.length;
  return {
    seed,
    steps: STEPS,
    saveSteps: CADENCE,
    skip,
    coalesce,
    goalDurableFraction: 0.9,
    kills: KILLS,
    killResumes: {
      withinTwoCadences: round(within, 3),
      maxStepsBehind: Math.max(...behind),
      medianStepsBehind: [...behind].sort((a, b) => a - b)[behind.length >> 1],
    },
    goalWithinTwoCadences: 0.95,
    goalsMet: skip.fraction >= 0.9 && coalesce.fraction >= 0.9 && within >= 0.95,
  };
};
