/**
 * {@link computeGoodput}: a run's goodput from its goodput logs alone (src/goodput/goodputLog.ts),
 * across every restart of every task. Productive time is step time that moved training forward;
 * every other second of a task's life is in exactly one badput bucket, so that productive time
 * and the buckets add up to the task's wall time. The group's goodput is the chief's productive
 * time over the wall time from the first task's start to the last task's end (steps are global:
 * the chief's steps are the group's). docs/goodput.md defines every figure.
 *
 * @module
 */

import { BADPUT_BUCKETS, type BadputBucket, type GoodputLog, type GoodputRecord } from "./goodputLog.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Seconds by badput bucket (every key of {@link BADPUT_BUCKETS}). */
export type Badput = Readonly<Record<BadputBucket, number>>;

/** Where the time of one task (or of the group) went. */
export interface GoodputFigures {
  /** First process start (Unix epoch ms). */
  readonly startMs: number;
  /** Last record of the last process (Unix epoch ms). */
  readonly endMs: number;
  /** `endMs - startMs`, in seconds. */
  readonly totalSecs: number;
  /** Step time that moved training forward, in seconds. */
  readonly productiveSecs: number;
  /** `productiveSecs / totalSecs` (0 for an empty span). */
  readonly goodput: number;
  readonly badput: Badput;
}

/** One task's figures. */
export interface TaskGoodput extends GoodputFigures {
  readonly task: string;
  readonly chief: boolean;
  /** Processes the log holds (1 + restarts). */
  readonly processes: number;
  /** The highest global step the task's records name, if any. */
  readonly lastStep: number | null;
  /** The last process's exit code, `null` when it recorded none (killed, or still running). */
  readonly exitCode: number | null;
  /**
   * Each process after the first: when it started (Unix epoch ms, its `processStartMs`) and the
   * global step its training resumed from (its `ready`; `null` when it never got there or did not know).
   */
  readonly restarts: readonly { readonly t: number; readonly step: number | null }[];
}

/** A fault `launch --chaos` injected into the run (its `fault` record), placed on the chief's steps. */
export interface RunFault {
  /** When it was injected (Unix epoch ms). */
  readonly t: number;
  /** Its place in its schedule (the chaos report's `id`). */
  readonly id: number;
  /** The schedule's kind: `sigterm`, `sigkillWorker`, `sigkillChief`, `freeze`, `opError`. */
  readonly kind: string;
  /** The task it hit (`worker:0`). */
  readonly target: string;
  /**
   * The chief's global step at `t`: interpolated between the steps its process running then
   * recorded before and after (its last one recorded when none came after); while that process
   * was starting (no step recorded yet), the last step an earlier chief process recorded; `null`
   * when none did, or no chief process ran.
   */
  readonly step: number | null;
}

/**
 * A lost rank that rejoined the chief's data-parallel group while the chief's process trained on
 * (under `launch`, a worker restarted alone): the chief's `ready` that kept its state.
 */
export interface RunRejoin {
  /** When the ring re-formed and training went on (Unix epoch ms). */
  readonly t: number;
  /** The task that rejoined (`worker:1`), `null` when the chief did not know. */
  readonly task: string | null;
  /**
   * The chief's global step when the group lost the rank (its `aborted`), interpolated between
   * the steps that process recorded before and after; training went on from there. `null` when
   * it recorded none before.
   */
  readonly step: number | null;
}

/** A run's figures: each task's, the group's, and the faults injected into it. */
export interface RunGoodput {
  readonly tasks: readonly TaskGoodput[];
  /** The group's figures (the chief's productive time over the whole run's span); `null` without records. */
  readonly group: (GoodputFigures & { readonly chief: string | null }) | null;
  /** The faults `launch --chaos` injected (from `launch`'s own log), in time order; empty without. */
  readonly faults: readonly RunFault[];
  /** The ranks that rejoined the group while its chief trained on ({@link RunRejoin}), in time order; empty without. */
  readonly rejoins: readonly RunRejoin[];
  /** Lines of the logs that were not valid records (skipped). */
  readonly skippedLines: number;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** The figures of every task of `logs` and of their group. */
export const computeGoodput = (logs: readonly GoodputLog[]): RunGoodput => {
  const tasks = logs.map((l) => taskGoodput(l.task, l.records)).filter((t): t is TaskGoodput => t !== undefined);
  const skippedLines = logs.reduce((n, l) => n + l.skippedLines, 0);
  const chiefLog = logs.find((l) => l.records.some((r) => r.type === "start" && r.chief));
  const chiefProcesses = chiefLog === undefined ? [] : splitProcesses(chiefLog.records);
  const faults = faultsOf(logs, chiefProcesses);
  const rejoins = chiefProcesses.flatMap(rejoinsOf);
  if (tasks.length === 0) return { tasks, group: null, faults, rejoins, skippedLines };
  const startMs = Math.min(...tasks.map((t) => t.startMs));
  const endMs = Math.max(...tasks.map((t) => t.endMs));
  const chief = tasks.find((t) => t.chief);
  const totalMs = endMs - startMs;
  const badput = zeroBadput();
  let productiveMs = 0;
  if (chief !== undefined) {
    productiveMs = chief.productiveSecs * 1000;
    for (const b of BADPUT_BUCKETS) badput[b] = chief.badput[b] * 1000;
    // The time the group ran beyond the chief's own span (a worker that started first, or left last).
    badput.other += Math.max(0, totalMs - chief.totalSecs * 1000);
  } else badput.other = totalMs;
  return { tasks, group: { chief: chief?.task ?? null, ...figures(startMs, endMs, productiveMs, badput) }, faults, rejoins, skippedLines };
};

/** The one-line summary `run` prints at exit: `Goodput 93.1% of 4m12s over 2 processes (badput: startup 6.2s, …)`. */
export const describeGoodput = (t: TaskGoodput): string => {
  const parts = BADPUT_BUCKETS.filter((b) => t.badput[b] >= 0.05).map((b) => `${b} ${formatSecs(t.badput[b])}`);
  return `Goodput ${(t.goodput * 100).toFixed(1)}% of ${formatSecs(t.totalSecs)} over ${t.processes} process${t.processes === 1 ? "" : "es"} (productive ${formatSecs(t.productiveSecs)}${parts.length === 0 ? "" : `; badput: ${parts.join(", ")}`}).`;
};

/** `93.1s`, `4m12s`, `2h03m`. */
export const formatSecs = (secs: number): string => {
  if (secs < 60) return `${secs.toFixed(1)}s`;
  const whole = Math.round(secs);
  if (whole < 3600) return `${Math.floor(whole / 60)}m${String(whole % 60).padStart(2, "0")}s`;
  return `${Math.floor(whole / 3600)}h${String(Math.floor((whole % 3600) / 60)).padStart(2, "0")}m`;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

type MutableBadput = Record<BadputBucket, number>;

const zeroBadput = (): MutableBadput => Object.fromEntries(BADPUT_BUCKETS.map((b) => [b, 0])) as MutableBadput;

/** Figures from milliseconds: seconds, and `other` as what the rest leaves of the span. */
const figures = (startMs: number, endMs: number, productiveMs: number, badputMs: MutableBadput): GoodputFigures => {
  const totalMs = Math.max(0, endMs - startMs);
  const named = BADPUT_BUCKETS.filter((b) => b !== "other").reduce((n, b) => n + badputMs[b], 0);
  // Whatever no record explains; at least what the records put there (the group's excess span).
  badputMs.other = Math.max(badputMs.other, totalMs - productiveMs - named);
  const badput = Object.fromEntries(BADPUT_BUCKETS.map((b) => [b, badputMs[b] / 1000])) as Badput;
  return { startMs, endMs, totalSecs: totalMs / 1000, productiveSecs: productiveMs / 1000, goodput: totalMs > 0 ? productiveMs / totalMs : 0, badput };
};

type StartRecord = Extract<GoodputRecord, { type: "start" }>;

/** The records of one process: its `start`, and what followed until the next `start`. */
interface ProcessRecords {
  readonly start: StartRecord;
  readonly records: GoodputRecord[];
}

/**
 * The processes of a log. An `end` is the process's it names (`proc`: a process may write its
 * end after its successor started, since the checkpoint directory's lock is released first).
 */
const splitProcesses = (records: readonly GoodputRecord[]): ProcessRecords[] => {
  const out: ProcessRecords[] = [];
  for (const r of records) {
    if (r.type === "start") out.push({ start: r, records: [] });
    else if (r.type === "end") {
      const owner = [...out].reverse().find((p) => p.start.proc === r.proc) ?? out[out.length - 1];
      owner?.records.push(r);
    }
    // Records before the first start (a file cut at its head) belong to no process.
    else out[out.length - 1]?.records.push(r);
  }
  return out;
};

/** The steps named by `records`, with their times: `ready`, `mark` and `end` records that carry one. */
export const stepPoints = (records: readonly GoodputRecord[]): { t: number; step: number }[] =>
  records.flatMap((r) => ((r.type === "ready" || r.type === "end") && r.step !== null) || r.type === "mark" ? [{ t: r.t, step: r.step as number }] : []);

/** The `fault` records of `logs`, in time order, each placed on the steps of the chief's process running at its time (`chief`: the chief log's processes). */
const faultsOf = (logs: readonly GoodputLog[], chief: readonly ProcessRecords[]): RunFault[] => {
  const out: RunFault[] = [];
  for (const l of logs) {
    for (const r of l.records) {
      if (r.type !== "fault") continue;
      const i = chief.findLastIndex((p) => p.start.processStartMs <= r.t);
      // Before the running process recorded a step (it was starting): the last step its predecessors recorded, where the restart resumes at best.
      const step = i < 0 ? null : (stepAt(stepPoints((chief[i] as ProcessRecords).records), r.t) ?? lastStepBefore(chief.slice(0, i)));
      out.push({ t: r.t, id: r.id, kind: r.kind, target: r.target, step });
    }
  }
  return out.sort((a, b) => a.t - b.t || a.id - b.id);
};

/** The rejoins of one chief process: its `ready` records that kept their state, each at the step of the `aborted` before it. */
const rejoinsOf = (p: ProcessRecords): RunRejoin[] => {
  const points = stepPoints(p.records);
  let lostAt: number | undefined;
  const out: RunRejoin[] = [];
  for (const r of p.records) {
    if (r.type === "aborted") lostAt ??= r.t;
    else if (r.type === "ready") {
      if (r.kept === true) out.push({ t: r.t, task: r.rejoined ?? null, step: stepAt(points, lostAt ?? r.t) });
      lostAt = undefined;
    }
  }
  return out;
};

/** The last step that any of `processes` recorded (the latest process first), or `null`. */
const lastStepBefore = (processes: readonly ProcessRecords[]): number | null => {
  for (let i = processes.length - 1; i >= 0; i--) {
    const points = stepPoints((processes[i] as ProcessRecords).records);
    if (points.length > 0) return (points[points.length - 1] as { step: number }).step;
  }
  return null;
};

/** The step at `t` on `points` (in time order): interpolated between the last point at or before `t` and the next; the last one when none comes after; `null` before the first. */
const stepAt = (points: readonly { t: number; step: number }[], t: number): number | null => {
  let before: { t: number; step: number } | undefined;
  let after: { t: number; step: number } | undefined;
  for (const p of points) {
    if (p.t <= t) before = p;
    else {
      after = p;
      break;
    }
  }
  if (before === undefined) return null;
  if (after === undefined || after.t === before.t || after.step < before.step) return before.step;
  return Math.round(before.step + ((after.step - before.step) * (t - before.t)) / (after.t - before.t));
};

/** The largest of `values` (a loop: a log may hold more records than a call may have arguments). */
const maxOf = (first: number, values: readonly number[]): number => {
  let m = first;
  for (const v of values) if (v > m) m = v;
  return m;
};

const taskGoodput = (task: string, records: readonly GoodputRecord[]): TaskGoodput | undefined => {
  const processes = splitProcesses(records);
  const first = processes[0];
  if (first === undefined) return undefined;
  const badput = zeroBadput();
  let productiveMs = 0;
  /** Where the previous process's window ended: windows never overlap (a clock set back, two processes at once). */
  let previousEnd: number | undefined;
  /** The highest step trained by the processes before the current one. */
  let highest: number | undefined;
  let exitCode: number | null = null;
  for (const p of processes) {
    const s = p.start.processStartMs;
    const windowStart = previousEnd === undefined ? s : Math.max(s, previousEnd);
    const windowEnd = maxOf(Math.max(windowStart, p.start.t), p.records.map((r) => r.t));
    // Downtime between processes: from the last record of one to its successor's start.
    if (previousEnd !== undefined) badput.infrastructureRecovery += Math.max(0, s - previousEnd);
    const one = processFigures(p.records, windowStart, windowEnd, highest);
    productiveMs += one.productiveMs;
    for (const b of BADPUT_BUCKETS) badput[b] += one.badput[b] ?? 0;
    const steps = stepPoints(p.records).map((x) => x.step);
    if (steps.length > 0) highest = maxOf(highest ?? 0, steps);
    const end = p.records.find((r) => r.type === "end");
    exitCode = end?.type === "end" ? end.exitCode : null;
    previousEnd = windowEnd;
  }
  const restarts = processes.slice(1).map((p) => {
    const ready = p.records.find((r) => r.type === "ready");
    return { t: p.start.processStartMs, step: ready?.type === "ready" ? ready.step : null };
  });
  return {
    task,
    chief: processes.some((p) => p.start.chief),
    processes: processes.length,
    restarts,
    lastStep: highest ?? null,
    exitCode,
    ...figures(first.start.processStartMs, previousEnd ?? first.start.processStartMs, productiveMs, badput),
  };
};

/**
 * One process's productive time and badput (ms) within its window `[from, to]`, `highest` being
 * the step its predecessors reached. The window is cut in three, which add up to it exactly:
 * before training (to `ready`, or to the notice if it came first), training (to the notice or
 * the end), and the preemption (from the notice). Every time is clamped to its part, so no
 * record can make a bucket negative or the buckets exceed the window.
 */
const processFigures = (rs: readonly GoodputRecord[], from: number, to: number, highest: number | undefined): { productiveMs: number; badput: Partial<MutableBadput> } => {
  const clamp = (t: number): number => Math.min(to, Math.max(from, t));
  const ready = rs.find((r) => r.type === "ready");
  const notice = rs.find((r) => r.type === "notice");
  const noticeAt = notice === undefined ? to : clamp(notice.t);
  const readyAt = ready === undefined ? noticeAt : Math.min(clamp(ready.t), noticeAt);
  const preemption = to - noticeAt;
  // Before training: joining, the creation's saves (TensorFlow's first save), restoring; the rest is startup.
  const before = readyAt - from;
  const phase = (bucket: string, after: number, until: number) => rs.reduce((n, r) => (r.type === "phase" && r.bucket === bucket && r.t > after && r.t <= until ? n + r.ms : n), 0);
  const clusterJoin = Math.min(phase("clusterJoin", Number.NEGATIVE_INFINITY, readyAt), before);
  const earlySaves = Math.min(phase("checkpointSave", Number.NEGATIVE_INFINITY, readyAt), before - clusterJoin);
  // The creation's saves happen inside the restore's time when it restored.
  const restore = Math.min(Math.max(0, phase("restore", Number.NEGATIVE_INFINITY, readyAt) - earlySaves), before - clusterJoin - earlySaves);
  const startup = before - clusterJoin - earlySaves - restore;
  const span = noticeAt - readyAt;
  if (ready === undefined || span <= 0) return { productiveMs: 0, badput: { startup, clusterJoin, restore, checkpointSave: earlySaves, preemption } };
  // Training: a recoverable failure is down from its first `aborted` to the next `ready` (a save
  // made while the session is re-created is the recovery's); the other saves are checkpointSave.
  let down = 0;
  let saves = 0;
  let downSince: number | undefined;
  for (const r of rs) {
    if (r.t <= readyAt && r !== ready) continue;
    if (r.type === "aborted") downSince ??= clamp(r.t);
    else if (r.type === "ready" && r !== ready && downSince !== undefined) {
      down += Math.max(0, Math.min(clamp(r.t), noticeAt) - Math.min(downSince, noticeAt));
      downSince = undefined;
    } else if (r.type === "phase" && r.bucket === "checkpointSave" && downSince === undefined && r.t <= noticeAt) saves += r.ms;
  }
  if (downSince !== undefined) down += Math.max(0, noticeAt - Math.min(downSince, noticeAt));
  down = Math.min(down, span);
  saves = Math.min(saves, span - down);
  const raw = span - down - saves;
  // Steps trained again: from the restored step up to the highest step trained before, the
  // share of the span until the step passed it (interpolated between the recorded steps).
  let wastedProgress = 0;
  if (highest !== undefined && ready.step !== null && ready.step < highest) {
    const crossing = crossingTime(stepPoints(rs), highest);
    const wastedSpan = Math.min(span, Math.max(0, (crossing ?? noticeAt) - readyAt));
    wastedProgress = raw * (wastedSpan / span);
  }
  return {
    productiveMs: raw - wastedProgress,
    badput: { startup, clusterJoin, restore, checkpointSave: earlySaves + saves, preemption, wastedProgress, infrastructureRecovery: down },
  };
};

/** When the step first reached `target`, interpolated linearly between the two points around it; `undefined` if it never did. */
const crossingTime = (points: readonly { t: number; step: number }[], target: number): number | undefined => {
  const sorted = [...points].sort((a, b) => a.t - b.t);
  for (let i = 0; i < sorted.length; i++) {
    const p = sorted[i] as { t: number; step: number };
    if (p.step < target) continue;
    const before = sorted[i - 1];
    if (before === undefined || p.step === before.step) return p.t;
    return before.t + ((p.t - before.t) * (target - before.step)) / (p.step - before.step);
  }
  return undefined;
};
