/**
 * The cluster figures of `npm run bench -- preemption` (bench/preemption.bench.ts), here so
 * that the smoke test (test/integration/preemption-bench.test.ts) runs the same code with tiny
 * sizes:
 *
 * - `agreementSteps` / `agreementMs`: how long the tasks of a cluster take to agree on the run
 *   at which they all save. 4 processes (`launch --workers 4 -- node --import tsx
 *   bench/preemptionLoop.ts`), SIGTERM to one task (round-robin over the tasks, run by run), at a
 *   seeded random moment 1–3 s after every task trained its first step. `agreementMs` = from the
 *   benchmark's `kill()` to the last of the 4 durable preemption checkpoints, minus one save (the
 *   median of that run's 4 timed saves); `agreementSteps` = `agreementMs` over that run's step time
 *   (the median of the 4 tasks' median steps). In three modes, interleaved launch by launch:
 *   - `lockstep` (the goal's): one replica group (`DATA_PARALLEL=1`), whose all-reduce keeps the
 *     ranks within a step of one another, with the agreement forced through the coordination
 *     service (`AGREEMENT_PATH=coordination`: the handler does not see the group's stop vote).
 *     TensorFlow's setting: its handler is for MultiWorkerMirroredStrategy.
 *   - `stopVote`: the same group with its stop vote (a plain stop's default path there).
 *   - `independent`: independent replicas that agree over the coordination service; they drift
 *     apart, and the agreed run waits for the furthest one (`behindSteps`).
 *   Every launch must end with 4 saves at one run, each task and `launch` exiting 42, on the
 *   mode's path (a claim over the coordination service, or none for the vote), or the benchmark
 *   fails; a launch still running 15 s after the SIGTERM is killed and counted as stalled (its
 *   agreement +∞ in the median), with what it had done.
 * - `clusterCheckOverheadUs`: what the handler's check before each step costs in a cluster over
 *   local mode, in one process: `handler.run(() => undefined)` on a handler whose cluster resolver
 *   is a client of an in-process embedded coordination service, against a local-mode handler,
 *   both with `yieldIntervalMs: Infinity`, the two interleaved round by round (the order
 *   alternating); the median of the per-round differences per step, in µs.
 */
import { EventEmitter } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { systemClock } from "../src/time/Clock.js";
import { EmbeddedCoordinationClient, EmbeddedCoordinationService, inProcessTransport, taskName } from "../src/cluster/coordination/index.js";
import { Graph } from "../src/session/Graph.js";
import { silentLogger } from "../src/Logger.js";
import { PreemptionCheckpointHandler, type PreemptionClusterResolver } from "../src/preemption/index.js";
import { killLaunchTree, repoRoot, startCli, type CliChild } from "../test/util/cliChild.js";
import type { LoopSteps } from "./preemptionLoop.js";
import { median, round } from "./stats.js";
import { mulberry32 } from "../src/util/mulberry32.js";

// ---------------------------------------------------------------------------------------------
// agreementSteps
// ---------------------------------------------------------------------------------------------

/**
 * How the 4 tasks train and agree (see the module comment): `lockstep`, one replica group with the
 * agreement over the coordination service (TensorFlow's setting, the goal's); `stopVote`, one
 * replica group with its stop vote; `independent`, independent replicas.
 */
export type AgreementMode = "lockstep" | "stopVote" | "independent";

export const agreementModes: readonly AgreementMode[] = ["lockstep", "stopVote", "independent"];

/** bench/preemptionLoop.ts's environment for each mode (set in full: nothing leaks from this process's). */
const modeEnv: Record<AgreementMode, Record<string, string>> = {
  lockstep: { DATA_PARALLEL: "1", AGREEMENT_PATH: "coordination" },
  stopVote: { DATA_PARALLEL: "1", AGREEMENT_PATH: "default" },
  independent: { DATA_PARALLEL: "0", AGREEMENT_PATH: "default" },
};

/** Sizes of the agreement measurement. */
export interface AgreementSizes {
  /** Preempted launches per mode; the SIGTERM goes to task `run % tasks` (chief:0, worker:0, …). */
  readonly runs: number;
  /** Processes of the cluster, the chief included. */
  readonly tasks: number;
  readonly seed: number;
}

/**
 * How long a launch may take from the SIGTERM to its exit before the run counts as stalled (its
 * tree is then killed). Far beyond any agreement seen (≤ 1.5 s on a busy machine, independent
 * replicas 140 runs apart), and well under the collective's 60 s deadline, which a stalled
 * data-parallel group would otherwise wait out.
 */
const STALL_MS = 15_000;

/** One preempted launch that ended with 4 durable saves at one run, every exit 42. */
interface AgreementRun {
  readonly victim: string;
  /** The run every task saved at. */
  readonly savedAtRun: number;
  /** `kill()` to the last durable save, ms. */
  readonly killToLastSaveMs: number;
  /** The median of the 4 timed preemption saves, ms. */
  readonly saveMs: number;
  /** The median of the tasks' median step times, ms. */
  readonly stepMs: number;
  /** `kill()` to the victim's `terminationNoticed`, to the leader's `preemptionClaimed` (its claim stored; none on the vote's path), and to the last task's `preemptionStepAgreed`, ms. */
  readonly noticeMs: number;
  readonly claimedMs: number | undefined;
  readonly agreedMs: number;
  /** The most runs a task still had to train when it heard the agreed run (how far apart the tasks were). */
  readonly behindSteps: number;
  /**
   * `kill()` to the moment the task whose save was durable last began that save (its durable
   * time minus its own timed save): the protocol and the training to the agreed run, without
   * the saves that 4 processes make at once on the machine's cores.
   */
  readonly lastSaveStartMs: number;
  readonly lastSaveStartSteps: number;
  readonly agreementMs: number;
  readonly agreementSteps: number;
}

/** One preempted launch that had not exited {@link STALL_MS} after the SIGTERM. */
interface StalledRun {
  readonly victim: string;
  readonly stalled: string;
}

const loop = join(repoRoot, "bench/preemptionLoop.ts");
const hostNow = (): number => performance.timeOrigin + performance.now();

const taskNames = (n: number): string[] => ["chief:0", ...Array.from({ length: n - 1 }, (_, i) => `worker:${i}`)];

/** Each task's JSON lines of a kind (`[t] t: <kind> {json}`), by task. */
const linesOf = <T>(output: string, kind: string): { task: string; value: T }[] =>
  [...output.matchAll(new RegExp(`^\\[(\\S+)\\] \\S+: ${kind} (\\{.*\\})$`, "gm"))].map((m) => ({ task: m[1] as string, value: JSON.parse(m[2] as string) as T }));

interface LoopEvent {
  readonly type: string;
  readonly hostTimeMs: number;
  /** The handler's run counter when the event was emitted. */
  readonly atRun: number;
  readonly run?: number;
  readonly leader?: string | boolean;
}

const pidOf = (output: string, task: string): number => {
  const m = new RegExp(`^\\[launch\\] started ${task} at \\S+ \\(pid (\\d+)\\)$`, "m").exec(output);
  if (m === null) throw new Error(`no pid for ${task} in:\n${output}`);
  return Number(m[1]);
};

/** What a stalled launch had done: who claimed, who heard the agreed run, who saved. */
const stallOf = (output: string, tasks: readonly string[]): string => {
  const events = linesOf<LoopEvent>(output, "event");
  const of = (type: string): string[] => events.filter((e) => e.value.type === type).map((e) => `${e.task}@${e.value.atRun}`);
  const heard = new Set(events.filter((e) => e.value.type === "preemptionStepAgreed").map((e) => e.task));
  return `no exit ${STALL_MS / 1000} s after the SIGTERM: noticed ${of("terminationNoticed").join(", ") || "by none"}; claimed ${of("preemptionClaimed").join(", ") || "by none"}; the agreed run not heard by ${tasks.filter((t) => !heard.has(t)).join(", ") || "none"}; saved ${of("preemptionCheckpointSaved").join(", ") || "by none"} (task@run)`;
};

/**
 * One launch of `tasks` processes in `mode`, SIGTERM to `victim` `waitMs` after all trained,
 * checked for equal work and for the agreement's path; a launch still running {@link STALL_MS}
 * after the SIGTERM is killed and returned as stalled.
 */
const preemptCluster = async (mode: AgreementMode, tasks: readonly string[], victim: string, waitMs: number, label: string): Promise<AgreementRun | StalledRun> => {
  const dir = mkdtempSync(join(tmpdir(), "ms-bench-agree-"));
  let run: CliChild | undefined;
  try {
    run = startCli(["launch", "--workers", String(tasks.length), "--kill-after", "20", "--", process.execPath, "--import", "tsx", loop], {
      env: { CHECKPOINT_DIR: join(dir, "ckpt"), STEPS: "100000", GRACE_PERIOD_SECS: "0", ...modeEnv[mode] },
      timeoutMs: 300_000,
    });
    for (const t of tasks) await run.waitFor(`[${t}] ${t}: training`, 240_000);
    await new Promise((r) => setTimeout(r, waitMs));
    const pid = pidOf(run.output(), victim);
    const killedAt = hostNow();
    process.kill(pid, "SIGTERM");
    let timer: NodeJS.Timeout | undefined;
    const r = await Promise.race([run.done, new Promise<undefined>((ok) => (timer = setTimeout(() => ok(undefined), STALL_MS)))]);
    clearTimeout(timer);
    if (r === undefined) return { victim, stalled: stallOf(run.output(), tasks) };
    const out = run.output();
    const exits = Object.fromEntries([...out.matchAll(/^\[launch\] (\S+) exited with (\d+)/gm)].map((m) => [m[1] as string, Number(m[2])]));
    const events = linesOf<LoopEvent>(out, "event");
    const saved = events.filter((e) => e.value.type === "preemptionCheckpointSaved");
    const saves = linesOf<{ ms: number }>(out, "save");
    const steps = linesOf<LoopSteps>(out, "steps");
    const claims = events.filter((e) => e.value.type === "preemptionClaimed");
    // Equal work: one durable save per task, all at one run; every task and launch exit 42.
    const problems = [
      r.code === 42 ? "" : `launch exited with ${r.code}`,
      tasks.every((t) => exits[t] === 42) ? "" : `task exits ${JSON.stringify(exits)}`,
      saved.length === tasks.length && new Set(saved.map((e) => e.task)).size === tasks.length ? "" : `${saved.length} preemption saves (${saved.map((e) => e.task).join(", ")})`,
      new Set(saved.map((e) => e.value.run)).size === 1 ? "" : `saves at runs ${saved.map((e) => e.value.run).join(", ")}`,
      saves.length === tasks.length ? "" : `${saves.length} timed saves`,
      steps.length === tasks.length ? "" : `${steps.length} step summaries`,
      // The path the mode measures: the vote stores no claim; the coordination service's path starts with one.
      mode === "stopVote"
        ? claims.length === 0 ? "" : `a claim over the coordination service (${claims.map((e) => e.task).join(", ")}), not the stop vote`
        : claims.some((e) => e.value.leader === e.task) ? "" : "no claim over the coordination service",
    ].filter((p) => p !== "");
    if (problems.length > 0) throw new Error(`${label}: expected ${tasks.length} durable saves at one run and exit 42 everywhere, on the ${mode} path: ${problems.join("; ")}\n${out}`);
    const lastSave = Math.max(...saved.map((e) => e.value.hostTimeMs));
    const lastSaver = saved.find((e) => e.value.hostTimeMs === lastSave)?.task;
    const lastSaverMs = saves.find((s) => s.task === lastSaver)?.value.ms ?? Number.NaN;
    const noticed = events.find((e) => e.task === victim && e.value.type === "terminationNoticed");
    const claimed = claims.find((e) => e.value.leader === e.task);
    const agreed = events.filter((e) => e.value.type === "preemptionStepAgreed").map((e) => e.value);
    const savedAtRun = saved[0]?.value.run as number;
    const saveMs = median(saves.map((s) => s.value.ms));
    const stepMs = median(steps.map((s) => s.value.medianStepMs));
    const killToLastSaveMs = lastSave - killedAt;
    const agreementMs = killToLastSaveMs - saveMs;
    return {
      victim,
      savedAtRun,
      killToLastSaveMs,
      saveMs,
      stepMs,
      noticeMs: (noticed?.value.hostTimeMs ?? Number.NaN) - killedAt,
      claimedMs: claimed === undefined ? undefined : claimed.value.hostTimeMs - killedAt,
      agreedMs: (agreed.length > 0 ? Math.max(...agreed.map((e) => e.hostTimeMs)) : Number.NaN) - killedAt,
      behindSteps: agreed.length > 0 ? Math.max(...agreed.map((e) => savedAtRun - e.atRun)) : Number.NaN,
      lastSaveStartMs: killToLastSaveMs - lastSaverMs,
      lastSaveStartSteps: (killToLastSaveMs - lastSaverMs) / stepMs,
      agreementMs,
      agreementSteps: agreementMs / stepMs,
    };
  } finally {
    if (run !== undefined && run.process.exitCode === null && run.process.signalCode === null) await killLaunchTree(run);
    rmSync(dir, { recursive: true, force: true });
  }
};

const isStalled = (r: AgreementRun | StalledRun): r is StalledRun => "stalled" in r;

const summarize = (xs: readonly number[], digits: number) => ({ median: round(median(xs), digits), samples: xs.map((x) => round(x, digits)) });

/**
 * The median over every launch, a stalled one counted as never agreeing (+∞: `null` in the JSON,
 * as a median that is one); the samples in launch order, `null` for a stalled launch.
 */
const summarizeWithStalls = (rs: readonly (AgreementRun | StalledRun)[], f: (r: AgreementRun) => number, digits: number) => {
  const xs = rs.map((r) => (isStalled(r) ? Number.POSITIVE_INFINITY : f(r)));
  const m = median(xs);
  return { median: Number.isFinite(m) ? round(m, digits) : null, samples: xs.map((x) => (Number.isFinite(x) ? round(x, digits) : null)) };
};

/** One mode's figures over its launches. */
const modeSummary = (mode: AgreementMode, tasks: number, rs: readonly (AgreementRun | StalledRun)[]) => {
  const done = rs.filter((r): r is AgreementRun => !isStalled(r));
  const stalled = rs.filter(isStalled);
  const steps = summarizeWithStalls(rs, (r) => r.agreementSteps, 3);
  return {
    mode,
    runs: rs.length,
    /** Counted: every launch that exited ended with one durable save per task at one run (else it threw). */
    preemptionCheckpointsSaved: done.length * tasks,
    stalledRuns: stalled.length,
    agreementSteps: steps,
    agreementMs: summarizeWithStalls(rs, (r) => r.agreementMs, 1),
    // The parts, over the launches that exited.
    killToLastSaveMs: summarize(done.map((r) => r.killToLastSaveMs), 1),
    saveMs: summarize(done.map((r) => r.saveMs), 2),
    stepMs: summarize(done.map((r) => r.stepMs), 3),
    noticeMs: summarize(done.map((r) => r.noticeMs), 1),
    claimedMs: mode === "stopVote" ? null : summarize(done.map((r) => r.claimedMs ?? Number.NaN), 1),
    agreedMs: summarize(done.map((r) => r.agreedMs), 1),
    behindSteps: summarize(done.map((r) => r.behindSteps), 0),
    lastSaveStartMs: summarize(done.map((r) => r.lastSaveStartMs), 1),
    lastSaveStartSteps: summarize(done.map((r) => r.lastSaveStartSteps), 3),
    victims: rs.map((r) => r.victim),
    stalls: stalled.map((r) => `${r.victim}: ${r.stalled}`),
    goalSteps: 2,
    goalMet: stalled.length === 0 && steps.median !== null && steps.median <= 2,
  };
};

/**
 * `agreementSteps` and `agreementMs` in each mode over `sizes.runs` preempted launches per mode
 * (see the module comment): the modes interleaved launch by launch, the order rotating, each
 * round's victim and signal moment the same for every mode.
 */
export const measureAgreement = async (sizes: AgreementSizes) => {
  const tasks = taskNames(sizes.tasks);
  const random = mulberry32(sizes.seed);
  const runs: Record<AgreementMode, (AgreementRun | StalledRun)[]> = { lockstep: [], stopVote: [], independent: [] };
  for (let i = 0; i < sizes.runs; i++) {
    const victim = tasks[i % tasks.length] as string;
    const waitMs = 1000 + random() * 2000;
    const order = agreementModes.map((_, k) => agreementModes[(i + k) % agreementModes.length] as AgreementMode);
    for (const mode of order) {
      const label = `agreement ${mode} run ${i + 1}/${sizes.runs} (SIGTERM to ${victim})`;
      const r = await preemptCluster(mode, tasks, victim, waitMs, label);
      runs[mode].push(r);
      if (isStalled(r)) console.log(`  ${label}: STALLED, ${r.stalled}`);
      else console.log(`  ${label}: saved at run ${r.savedAtRun} (a task ${r.behindSteps} runs behind it when agreed), ${round(r.agreementMs, 1)} ms = ${round(r.agreementSteps, 2)} steps (step ${round(r.stepMs, 2)} ms, save ${round(r.saveMs, 2)} ms; the last save began ${round(r.lastSaveStartSteps, 2)} steps after the kill)`);
    }
  }
  return {
    tasks: sizes.tasks,
    runsPerMode: sizes.runs,
    stallBoundMs: STALL_MS,
    lockstep: modeSummary("lockstep", sizes.tasks, runs.lockstep),
    stopVote: modeSummary("stopVote", sizes.tasks, runs.stopVote),
    independent: modeSummary("independent", sizes.tasks, runs.independent),
  };
};

// ---------------------------------------------------------------------------------------------
// clusterCheckOverheadUs
// ---------------------------------------------------------------------------------------------

/** Sizes of the check-overhead measurement. */
export interface CheckOverheadSizes {
  /** Timed rounds (each runs both handlers), after `warmupRounds` untimed ones. */
  readonly rounds: number;
  readonly warmupRounds: number;
  readonly stepsPerRound: number;
}

const variables = () => {
  const g = new Graph();
  g.globalStep();
  g.variable("v", 0);
  return g.session().variables;
};

/** A 2-task cluster (chief:0, worker:0) on one in-process embedded service, and a handler per task. */
const inProcessCluster = async (dir: string) => {
  // Heartbeats on the handlers' real clock; a timeout far beyond the run, since the timed loops give timers no turn.
  const service = new EmbeddedCoordinationService({ clock: systemClock, heartbeatTimeoutMs: 3_600_000 });
  const names = ["chief:0", "worker:0"];
  const tasks = [taskName("chief", 0), taskName("worker", 0)];
  const clients = tasks.map((task, i) => new EmbeddedCoordinationClient(inProcessTransport(service), { task, tasks, isChief: i === 0, clock: systemClock, heartbeats: "inline" }));
  await Promise.all(clients.map((c) => c.connect()));
  const handlers = await Promise.all(
    names.map((name, id) => {
      const [taskType, index] = name.split(":") as [string, string];
      const resolver: PreemptionClusterResolver = {
        clusterSpec: { jobs: ["chief", "worker"] },
        taskType,
        taskIndex: Number(index),
        isChief: id === 0,
        numWorkers: names.length,
        idInCluster: id,
        coordination: clients[id],
        livenessTimeoutMs: 3_600_000,
      };
      const store = variables();
      return PreemptionCheckpointHandler.create({
        clusterResolver: resolver,
        checkpointDir: join(dir, "ckpt"),
        store,
        initFn: () => store.initialize(),
        signalTarget: new EventEmitter(),
        yieldIntervalMs: Infinity,
        logger: silentLogger,
      });
    }),
  );
  const close = async (): Promise<void> => {
    await Promise.all(handlers.map((h) => h.close()));
    await Promise.all(clients.map((c) => c.close()));
    service.close();
  };
  return { chief: handlers[0] as PreemptionCheckpointHandler, close };
};

const noop = (): undefined => undefined;

/** Milliseconds of `n` runs of a no-op step through `handler`. */
const timeRuns = async (handler: PreemptionCheckpointHandler, n: number): Promise<number> => {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await handler.run(noop);
  return Number(process.hrtime.bigint() - t0) / 1e6;
};

/** `clusterCheckOverheadUs` (see the module comment). */
export const measureCheckOverhead = async (sizes: CheckOverheadSizes) => {
  const dir = mkdtempSync(join(tmpdir(), "ms-bench-check-"));
  const cluster = await inProcessCluster(dir);
  const store = variables();
  const local = await PreemptionCheckpointHandler.create({
    checkpointDir: join(dir, "local"),
    store,
    initFn: () => store.initialize(),
    signalTarget: new EventEmitter(),
    yieldIntervalMs: Infinity,
    logger: silentLogger,
  });
  try {
    const localUs: number[] = [];
    const clusterUs: number[] = [];
    const diffUs: number[] = [];
    const n = sizes.stepsPerRound;
    for (let r = 0; r < sizes.warmupRounds + sizes.rounds; r++) {
      let l = 0;
      let c = 0;
      if (r % 2 === 0) {
        l = await timeRuns(local, n);
        c = await timeRuns(cluster.chief, n);
      } else {
        c = await timeRuns(cluster.chief, n);
        l = await timeRuns(local, n);
      }
      // A macrotask turn between rounds: the clients' heartbeats and the service's checks run here.
      await new Promise((ok) => setImmediate(ok));
      if (r < sizes.warmupRounds) continue;
      localUs.push((l * 1000) / n);
      clusterUs.push((c * 1000) / n);
      diffUs.push(((c - l) * 1000) / n);
    }
    // Equal work: both handlers ran the same number of steps.
    const expected = (sizes.warmupRounds + sizes.rounds) * n;
    if (local.totalRunCalls !== expected || cluster.chief.totalRunCalls !== expected) {
      throw new Error(`clusterCheckOverheadUs: the handlers ran ${local.totalRunCalls} (local) and ${cluster.chief.totalRunCalls} (cluster) steps, expected ${expected} each`);
    }
    return {
      rounds: sizes.rounds,
      stepsPerRound: n,
      stepsPerHandler: expected,
      clusterCheckOverheadUs: round(median(diffUs), 4),
      localUsPerStep: round(median(localUs), 4),
      clusterUsPerStep: round(median(clusterUs), 4),
      diffUsSamples: diffUs.map((x) => round(x, 4)),
      goalUs: 1,
      goalMet: median(diffUs) <= 1,
    };
  } finally {
    await local.close();
    await cluster.close();
    rmSync(dir, { recursive: true, force: true });
  }
};
