/**
 * `npm run bench -- chaos`: goodput and recovery under injected faults, on what users run. The
 * bundled TensorFlow.js job (data-parallel, WASM) under `monitored-session launch --workers 3
 * --chaos`, `saveSecs` 30, heartbeat timeout 4 s, with issue 36's schedule: seed 1, a fault every
 * 60 s on average within the first `CHAOS_BENCH_SECS` seconds (default 600), weights sigterm 0.4,
 * sigkillWorker 0.3, sigkillChief 0.1, freeze 0.1 (15 s), opError 0.1. The job's `lastStep` is
 * `CHAOS_BENCH_STEPS` (default 150,000: ten to fifteen minutes of training on a 2-core machine,
 * depending on the VM's speed, so that every fault of the window lands while it trains; 90,000
 * until 2026-12-02, which a faster VM trained in six minutes, before the window's last faults).
 *
 * Three variants in the same run, one after the other, with the same schedule (or those
 * `CHAOS_BENCH_VARIANTS` names, comma-separated): `plain` (from a clone, `launch --no-standby`:
 * every process, the restarted ones too, runs `node --import tsx src/cli/main.ts`, transpiling as
 * it loads), `standby` (the same with standbys, `launch`'s default under `--chaos` and
 * `--max-restarts`: a restarted group starts from processes that loaded `run`'s modules while the
 * group before trained) and `compiled` (the installed package's way: `node dist/src/cli/main.js`,
 * built first, with the job importing the package by name, `--no-standby`).
 *
 * Figures per variant (bench/results/chaos.json): the report's `goodput` and `badput`, every
 * fault (kind, target, times, steps lost, what recovered it), `firstStepMsMedian` by kind, the
 * same by recovery path (`firstStepMsMedianByRecovery`: `alone`, a worker restarted alone while
 * the group waited; `group`, the whole group restarted; each kind with its median and how many
 * faults it is of), `stepsLostSigterm`, and
 * beside them the process start to first step for a fresh task (`freshStartToFirstStepMs`: the
 * first group's chief, from its process's start to its `ready`); then `standbyVsPlain` and
 * `compiledVsPlain`, the ratio of a variant's `firstStepMsMedian` to `plain`'s for each kind.
 *
 * Equal work, or the benchmark fails: `launch` exits 0, the chief's last process ends at
 * `lastStep`, every checkpoint left verifies (`inspect` exits 0), and the report's goodput is
 * within 1 percentage point of a recomputation from the goodput logs.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import type { ChaosReport } from "../src/cli/chaos.js";
import { computeGoodput } from "../src/goodput/computeGoodput.js";
import { readGoodputLogs } from "../src/goodput/goodputLog.js";
import { repoRoot, startCli } from "../test/util/cliChild.js";
import { exampleTree } from "../test/util/exampleTree.js";
import { buildPackage, COMPILED_CLI, writePackagedJob } from "./packagedJob.js";
import { median, round } from "./stats.js";

const SECS = Number(process.env["CHAOS_BENCH_SECS"] ?? 600);
const STEPS = Number(process.env["CHAOS_BENCH_STEPS"] ?? 150_000);

const SCHEDULE = `seed: 1
durationSecs: ${SECS}
meanIntervalSecs: 60
kinds: { sigterm: 0.4, sigkillWorker: 0.3, sigkillChief: 0.1, freeze: 0.1, opError: 0.1 }
freezeSecs: 15
`;

const KINDS = ["sigterm", "sigkillWorker", "sigkillChief", "freeze", "opError"] as const;

/** How each variant starts `launch` (see the module doc). */
const VARIANTS = {
  plain: { standby: false, compiled: false },
  standby: { standby: true, compiled: false },
  compiled: { standby: false, compiled: true },
} as const;

type VariantName = keyof typeof VARIANTS;

/** The variants to run: `CHAOS_BENCH_VARIANTS` (comma-separated), default every one. */
const variantsToRun = (): VariantName[] => {
  const asked = (process.env["CHAOS_BENCH_VARIANTS"] ?? Object.keys(VARIANTS).join(",")).split(",").map((v) => v.trim());
  const unknown = asked.filter((v) => !(v in VARIANTS));
  if (unknown.length > 0 || asked.length === 0) throw new Error(`CHAOS_BENCH_VARIANTS: unknown variant ${unknown.join(", ")}; the variants are ${Object.keys(VARIANTS).join(", ")}`);
  return asked as VariantName[];
};

/** Where the compiled variant's package-name copy of the job goes (under the package's gitignored `runs/`). */
const JOB_FOLDER = ".bench-chaos";

export default async (): Promise<Record<string, unknown>> => {
  if (!(SECS > 0) || !(STEPS > 0)) throw new Error("CHAOS_BENCH_SECS and CHAOS_BENCH_STEPS must be positive numbers");
  const names = variantsToRun();
  const results: Partial<Record<VariantName, Awaited<ReturnType<typeof variant>>>> = {};
  try {
    for (const name of names) results[name] = await variant(name);
  } finally {
    rmSync(join(repoRoot, "runs", JOB_FOLDER), { recursive: true, force: true });
  }
  /** `name`'s firstStepMsMedian over plain's, by kind; absent when either did not run. */
  const versusPlain = (name: VariantName): Record<string, number | null> | undefined => {
    const plain = results.plain;
    const other = results[name];
    if (plain === undefined || other === undefined) return undefined;
    return Object.fromEntries(
      KINDS.map((k) => {
        const a = plain.firstStepMsMedian[k];
        const b = other.firstStepMsMedian[k];
        return [k, a === null || b === null || a === undefined || b === undefined ? null : round(b / a, 3)];
      }),
    );
  };
  const standbyVsPlain = versusPlain("standby");
  const compiledVsPlain = versusPlain("compiled");
  return {
    lastStep: STEPS,
    faultWindowSecs: SECS,
    ...results,
    ...(standbyVsPlain === undefined ? {} : { standbyVsPlain }),
    ...(compiledVsPlain === undefined ? {} : { compiledVsPlain }),
    goals: { goodput: 0.9, firstStepMsMedianSigtermAndSigkillWorker: 3000, stepsLostSigterm: 0, reportVsRecomputation: 0.01 },
  };
};

/** One launch under the schedule, started as `name` says. Fails unless it did the whole work. */
const variant = async (name: VariantName): Promise<{ firstStepMsMedian: Record<string, number | null> } & Record<string, unknown>> => {
  const { standby, compiled } = VARIANTS[name];
  const root = mkdtempSync(join(tmpdir(), "ms-bench-chaos-"));
  try {
    if (compiled) buildPackage("chaos");
    // The compiled CLI loads the job's package-name copy, so that the job uses dist/ as well.
    const job = compiled ? writePackagedJob("chaos", JOB_FOLDER) : undefined;
    const yaml = exampleTree(root, (y) => {
      const edited = `${y.replace(/^lastStep: \d+$/m, `lastStep: ${STEPS}`).replace(/^ {2}saveSteps: \d+.*$/m, "  saveSecs: 30")}cluster:\n  timeouts:\n    heartbeatTimeoutSecs: 4\n`;
      return job === undefined ? edited : edited.replace(/^module: .*$/m, `module: ${job}`);
    });
    const schedule = join(root, "chaos.yaml");
    writeFileSync(schedule, SCHEDULE);
    const reportPath = join(root, "report.json");
    // Bounded: the faults' window, the training, and a restart per fault with room to spare.
    const boundMs = (SECS + STEPS / 20 + 600) * 1000;
    const args = ["launch", "--workers", "3", "--kill-after", "30", standby ? "--standby" : "--no-standby", "--chaos", schedule, "--chaos-report", reportPath, yaml];
    // launch starts every task (a restarted one too) with its own command line: compiled or not.
    const l = startCli(args, { timeoutMs: boundMs, ...(compiled ? { compiledCli: COMPILED_CLI } : {}) });
    const r = await l.done;
    const out = l.output();
    if (r.code !== 0) throw new Error(`chaos: launch exited ${r.code} (equal work needs 0):\n${out.slice(-4000)}`);
    const report = JSON.parse(readFileSync(reportPath, "utf8")) as ChaosReport;
    const logDir = join(root, "runs/tfjs-classifier");
    // Equal work: the last step reached, and every checkpoint left verifies.
    const logs = readGoodputLogs(logDir).map((g) => ({ ...g, records: g.records.filter((x) => x.t >= report.startMs) }));
    const chief = logs.find((g) => g.task === "chief:0");
    const end = [...(chief?.records ?? [])].reverse().find((x) => x.type === "end");
    if (end?.type !== "end" || end.step !== STEPS || end.exitCode !== 0) throw new Error(`chaos: the chief's last process did not end at step ${STEPS} with 0: ${JSON.stringify(end)}`);
    const inspected = await startCli(["inspect", logDir], { timeoutMs: 120_000 }).done;
    if (inspected.code !== 0) throw new Error(`chaos: inspect ${logDir} exited ${inspected.code}: a checkpoint does not verify:\n${inspected.stdout}${inspected.stderr}`);
    // The report against a recomputation from the logs.
    const recomputed = computeGoodput(logs).group;
    if (report.goodput === null || recomputed === null) throw new Error("chaos: no goodput in the report or the logs");
    const gap = Math.abs(report.goodput.goodput - recomputed.goodput);
    if (gap > 0.01) throw new Error(`chaos: the report's goodput ${report.goodput.goodput} is ${gap} from the recomputation ${recomputed.goodput}`);
    const fromStandby = [...out.matchAll(/^\[launch\] started \S+ at \S+ \(pid \d+, its standby\)$/gm)].length;
    if (standby && report.groups > 1 && fromStandby === 0) throw new Error("chaos: --standby, and no restarted task started from its standby");
    const firstStepMsMedian = Object.fromEntries(
      KINDS.map((k) => {
        const xs = report.faults.filter((f) => f.kind === k && f.firstStepMs !== null).map((f) => f.firstStepMs as number);
        return [k, xs.length === 0 ? null : round(median(xs), 0)];
      }),
    );
    // The rejoin path apart from a group restart: a fault's `recovery` says which recovered it.
    const firstStepMsMedianByRecovery = Object.fromEntries(
      (["alone", "group"] as const).map((path) => {
        const byKind = KINDS.map((k) => {
          const xs = report.faults.filter((f) => f.kind === k && f.recovery === path && f.firstStepMs !== null).map((f) => f.firstStepMs as number);
          return [k, xs.length === 0 ? null : { median: round(median(xs), 0), faults: xs.length }] as const;
        });
        return [path, Object.fromEntries(byKind.filter(([, v]) => v !== null))];
      }),
    );
    const first = chief?.records.find((x) => x.type === "start");
    const firstReady = chief?.records.find((x) => x.type === "ready");
    return {
      wallSecs: round(report.durationMs / 1000, 1),
      groups: report.groups,
      goodput: round(report.goodput.goodput, 4),
      recomputedGoodput: round(recomputed.goodput, 4),
      badput: Object.fromEntries(Object.entries(report.goodput.badput).map(([k, v]) => [k, round(v, 1)])),
      faults: report.faults,
      firstStepMsMedian,
      firstStepMsMedianByRecovery,
      stepsLostSigterm: report.faults.filter((f) => f.kind === "sigterm").reduce((n, f) => n + (f.stepsLost ?? 0), 0),
      freshStartToFirstStepMs: first?.type === "start" && firstReady !== undefined ? firstReady.t - first.processStartMs : null,
      // Restarts that started from a standby (launch's own lines say which).
      fromStandby,
    };
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
};
