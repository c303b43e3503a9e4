/**
 * The fault figures of `npm run bench -- preemption` (bench/preemption.bench.ts): how long a
 * cluster takes to end when a task freezes and another gets a termination notice. Three tasks of
 * the custom TensorFlow.js loop (test/fixtures/preemption/customLoop.ts, no delay between steps)
 * under `launch --workers 3 --kill-after 60 -- …`, on the embedded backend:
 *
 * - `frozenChief`: SIGSTOP to the chief once every task trains, then SIGTERM to worker:1
 *   (independent replicas). The outcome the docs state: worker:1 exits 43, `launch` SIGKILLs the
 *   lost chief and exits 43.
 * - `frozenRank`: one replica group (`DATA_PARALLEL=1`), SIGSTOP to worker:0, then SIGTERM to
 *   worker:1.
 *
 * Per launch: `declarationMs`, from the freeze to `launch`'s line that names the frozen task
 * and SIGKILLs it: a task found it lost (its status channel's `lost`), or `launch` found it
 * stopped once another task had exited (its "is stopped (SIGSTOP)" line), whichever comes
 * first; `allExitedMs`, from the SIGTERM to the last task's exit; and the exit codes. A launch whose codes differ from the scenario's stated outcome is
 * recorded as such (`outcomes`), so that a figure is never reported for a different ending; one
 * still running 120 s after the SIGTERM is killed and counted as stalled.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { killLaunchTree, repoRoot, startCli } from "../test/util/cliChild.js";
import { median, round } from "./stats.js";

const loop = join(repoRoot, "test/fixtures/preemption/customLoop.ts");
const TASKS = ["chief:0", "worker:0", "worker:1"] as const;

/** A fault scenario: whom to freeze, in which mode, and the codes it must end with. */
interface Scenario {
  readonly frozen: (typeof TASKS)[number];
  readonly env: Readonly<Record<string, string>>;
  /** The exit codes the docs state, by task (a list: any of them). */
  readonly expected: Readonly<Record<string, readonly number[]>>;
  readonly launchCode: readonly number[];
}

const scenarios = {
  frozenChief: { frozen: "chief:0", env: {}, expected: { "chief:0": [137], "worker:1": [43] }, launchCode: [43] },
  frozenRank: { frozen: "worker:0", env: { DATA_PARALLEL: "1" }, expected: { "worker:0": [137] }, launchCode: [1, 42, 43] },
} satisfies Record<string, Scenario>;

/** What one scenario measured over its launches. */
export interface FaultFigures {
  readonly launches: number;
  readonly declarationMs: { readonly median: number | null; readonly all: readonly (number | null)[] };
  readonly allExitedMs: { readonly median: number | null; readonly all: readonly (number | null)[] };
  /** Each launch's exit codes (`launch` first), and whether they are the stated outcome. */
  readonly outcomes: readonly { readonly launch: number | null; readonly tasks: Readonly<Record<string, number>>; readonly asStated: boolean }[];
  readonly stalled: number;
}

/** Runs each scenario `runs` times (interleaved); fails when a launch ends otherwise than stated. */
export const measureFaults = async (options: { readonly runs: number }): Promise<Record<keyof typeof scenarios, FaultFigures>> => {
  const results = Object.fromEntries(Object.keys(scenarios).map((k) => [k, { declaration: [] as (number | null)[], exited: [] as (number | null)[], outcomes: [] as FaultFigures["outcomes"][number][], stalled: 0 }])) as Record<
    keyof typeof scenarios,
    { declaration: (number | null)[]; exited: (number | null)[]; outcomes: FaultFigures["outcomes"][number][]; stalled: number }
  >;
  for (let i = 0; i < options.runs; i++) {
    for (const [name, s] of Object.entries(scenarios) as [keyof typeof scenarios, Scenario][]) {
      console.log(`preemption: fault ${name}, launch ${i + 1}/${options.runs}`);
      const r = results[name];
      const dir = mkdtempSync(join(tmpdir(), "ms-bench-faults-"));
      const run = startCli(["launch", "--workers", "3", "--kill-after", "60", "--", process.execPath, "--import", "tsx", loop], {
        env: { CHECKPOINT_DIR: join(dir, "ckpt"), ...s.env },
        timeoutMs: 300_000,
      });
      try {
        for (const t of TASKS) await run.waitFor(`[${t}] ${t}: training`, 120_000);
        const pid = (task: string): number => Number(new RegExp(`^\\[launch\\] started ${task} at \\S+ \\(pid (\\d+)\\)$`, "m").exec(run.output())?.[1]);
        const frozeAt = Date.now();
        process.kill(pid(s.frozen), "SIGSTOP");
        const termAt = Date.now();
        process.kill(pid("worker:1"), "SIGTERM");
        const declared = run.waitFor(new RegExp(`^\\[launch\\] ${s.frozen} (was declared failed|is lost|is stopped \\(SIGSTOP\\))`, "m"), 120_000).then(
          () => Date.now() - frozeAt,
          () => null,
        );
        const ended = await Promise.race([run.done, new Promise<null>((ok) => setTimeout(() => ok(null), 120_000))]);
        if (ended === null) {
          r.stalled += 1;
          r.exited.push(null);
          r.declaration.push(null);
          continue;
        }
        r.exited.push(Date.now() - termAt);
        r.declaration.push(await declared);
        const tasks = Object.fromEntries([...run.output().matchAll(/^\[launch\] (\S+) exited with (\d+)/gm)].map((m) => [m[1] as string, Number(m[2])]));
        const asStated = s.launchCode.includes(ended.code ?? -1) && Object.entries(s.expected).every(([t, codes]) => codes.includes(tasks[t] ?? -1));
        r.outcomes.push({ launch: ended.code, tasks, asStated });
      } finally {
        await killLaunchTree(run);
        rmSync(dir, { recursive: true, force: true });
      }
    }
  }
  const figures = (r: (typeof results)[keyof typeof scenarios]): FaultFigures => {
    const med = (xs: readonly (number | null)[]): number | null => {
      const done = xs.filter((x): x is number => x !== null);
      return done.length * 2 <= xs.length ? null : round(median(done), 0);
    };
    return { launches: r.exited.length, declarationMs: { median: med(r.declaration), all: r.declaration }, allExitedMs: { median: med(r.exited), all: r.exited }, outcomes: r.outcomes, stalled: r.stalled };
  };
  return { frozenChief: figures(results.frozenChief), frozenRank: figures(results.frozenRank) };
};
