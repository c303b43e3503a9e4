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
}

/** A run's figures: each task's, and the group's. */
export interface RunGoodput {
  readonly tasks: readonly TaskGoodput[];
  /** The group's figures (the chief's productive time over the whole run's span); `null` without records. */
  readonly group: (GoodputFigures & { readonly chief: string | null }) | null;
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
  if (tasks.length === 0) return { tasks, group: null, skippedLines };
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
  return { tasks, group: { chief: chief?.task ?? null, ...figures(startMs, endMs, productiveMs, badput) }, skippedLines };
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
  readonly records: readonly GoodputRecord[];
}

const splitProcesses = (records: readonly GoodputRecord[]): ProcessRecords[] => {
  const out: { start: StartRecord; records: GoodputRecord[] }[] = [];
  for (const r of records) {
    if (r.type === "start") out.push({ start: r, records: [] });
    // Records before the first start (a file cut at its head) belong to no process.
    else out[out.length - 1]?.records.push(r);
  }
  return out;
};

/** The steps named by `records`, with their times: `ready`, `mark` and `end` records that carry one. */
const stepPoints = (records: readonly GoodputRecord[]): { t: number; step: number }[] =>
  records.flatMap((r) => ((r.type === "ready" || r.type === "end") && r.step !== null) || r.type === "mark" ? [{ t: r.t, step: r.step as number }] : []);

const taskGoodput = (task: string, records: readonly GoodputRecord[]): TaskGoodput | undefined => {
  const processes = splitProcesses(records);
  const first = processes[0];
  if (first === undefined) return undefined;
  const badput = zeroBadput();
  let productiveMs = 0;
  let previousEnd: number | undefined;
  /** The highest step trained by the processes before the current one. */
  let highest: number | undefined;
  let endMs = first.start.processStartMs;
  let exitCode: number | null = null;
  for (const p of processes) {
    const s = p.start.processStartMs;
    const last = Math.max(s, p.start.t, ...p.records.map((r) => r.t));
    // Downtime between processes: from the last record of one to its successor's start.
    if (previousEnd !== undefined) badput.infrastructureRecovery += Math.max(0, s - previousEnd);
    const one = processFigures(p, s, last, highest);
    productiveMs += one.productiveMs;
    for (const b of BADPUT_BUCKETS) badput[b] += one.badput[b] ?? 0;
    const steps = stepPoints(p.records).map((x) => x.step);
    if (steps.length > 0) highest = Math.max(highest ?? 0, ...steps);
    const end = p.records.find((r) => r.type === "end");
    exitCode = end?.type === "end" ? end.exitCode : null;
    previousEnd = Math.max(last, previousEnd ?? last);
    endMs = Math.max(endMs, last);
  }
  return {
    task,
    chief: processes.some((p) => p.start.chief),
    processes: processes.length,
    lastStep: highest ?? null,
    exitCode,
    ...figures(first.start.processStartMs, endMs, productiveMs, badput),
  };
};

/** One process's productive time and badput (ms), `highest` being the step its predecessors reached. */
const processFigures = (p: ProcessRecords, s: number, last: number, highest: number | undefined): { productiveMs: number; badput: Partial<MutableBadput> } => {
  const rs = p.records;
  const ready = rs.find((r) => r.type === "ready");
  const notice = rs.find((r) => r.type === "notice");
  const trainingEnd = notice === undefined ? last : Math.min(notice.t, last);
  const phase = (bucket: string, until: number) => rs.reduce((n, r) => (r.type === "phase" && r.bucket === bucket && r.t <= until ? n + r.ms : n), 0);
  const readyAt = ready?.t ?? trainingEnd;
  const clusterJoin = phase("clusterJoin", readyAt);
  const restore = phase("restore", readyAt);
  const startup = Math.max(0, readyAt - s - clusterJoin - restore);
  const preemption = notice === undefined ? 0 : Math.max(0, last - notice.t);
  if (ready === undefined) return { productiveMs: 0, badput: { startup, clusterJoin, restore, preemption } };
  // Saves during training (a save after the notice is the preemption's).
  const checkpointSave = rs.reduce((n, r) => (r.type === "phase" && r.bucket === "checkpointSave" && r.t > readyAt && r.t <= trainingEnd ? n + r.ms : n), 0);
  // A session that failed recoverably is down from its abort to its next `ready`.
  let down = 0;
  for (let i = 0; i < rs.length; i++) {
    const a = rs[i] as GoodputRecord;
    if (a.type !== "aborted" || a.t < readyAt || a.t >= trainingEnd) continue;
    const back = rs.slice(i + 1).find((r) => r.type === "ready");
    down += Math.max(0, Math.min(back?.t ?? trainingEnd, trainingEnd) - a.t);
  }
  const span = Math.max(0, trainingEnd - readyAt);
  const raw = Math.max(0, span - checkpointSave - down);
  // Steps trained again: from the restored step up to the highest step trained before, the
  // share of the span until the step passed it (interpolated between the recorded steps).
  let wastedProgress = 0;
  if (highest !== undefined && ready.step !== null && ready.step < highest && span > 0) {
    const crossing = crossingTime(stepPoints(rs), highest);
    const wastedSpan = Math.min(span, Math.max(0, (crossing ?? trainingEnd) - readyAt));
    wastedProgress = raw * (wastedSpan / span);
  }
  return { productiveMs: raw - wastedProgress, badput: { startup, clusterJoin, restore, checkpointSave, preemption, wastedProgress, infrastructureRecovery: down } };
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
