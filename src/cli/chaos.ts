/**
 * `launch --chaos`: the faults of a schedule (chaosSchedule.ts) injected into the groups `launch`
 * runs, and the recovery report of each.
 *
 * - **Injection.** A signal fault (`sigterm`, `sigkillWorker`, `sigkillChief`, `freeze`) fires at
 *   its time, ms from the chaos run's start, on its target in the group that runs then: SIGTERM
 *   once the task handles signals (a `run` task says so), SIGKILL and SIGSTOP at once (a freeze
 *   ends with SIGCONT after its duration, if the task is still there). A fault whose time comes
 *   while its target is not running (the group is stopping, or being restarted) lands on the
 *   target of the next group as soon as it starts: a fault during another's recovery is counted
 *   on its own. An `opError` cannot be injected from outside: `launch` hands each task, as its
 *   group starts, the opError faults that hit it and are still to come
 *   (src/runtime/chaosOpErrors.ts), and the task raises each in the first step that begins at or
 *   after its time, telling `launch` on its status channel.
 * - **Restarts.** A group that ends after a fault was injected into it is restarted without
 *   using up `--max-restarts` (the fault was the plan); one that fails with no fault injected
 *   counts as usual. A worker of a data-parallel group that a fault killed (`sigkillWorker`, or a
 *   `freeze` it was SIGKILLed for) is restarted alone while its group waits for it, again
 *   without using up a restart (launch.ts). The run ends when a group exits 0 (training done),
 *   or as without `--chaos`.
 * - **The report** ({@link ChaosReport}), printed at the end and written as JSON: for each fault,
 *   when it was injected, when the first sign of it reached `launch` (`detectMs`: a task's status
 *   line, its own notice, a peer declaring it lost, or a task's exit), the first checkpoint made
 *   durable after it and before training resumed (`savedMs`), the first time training resumed
 *   after it (`firstStepMs`: the chief's next `ready` record), and the steps the restart trains
 *   again (`stepsLost`). The last three, and the group's goodput, come from the goodput logs in
 *   the run's log directory (src/goodput), read after the last group exited. docs/goodput.md
 *   defines every figure.
 *
 * @module
 */

import { readdirSync, renameSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";

import type { Clock, TimerHandle } from "../time/Clock.js";
import { computeGoodput, formatSecs, stepPoints, type GoodputFigures } from "../goodput/computeGoodput.js";
import { readGoodputLogs, type GoodputLog, type GoodputRecord } from "../goodput/goodputLog.js";
import { readEvents } from "../summary/readEvents.js";
import { launchTaskName, type LaunchStatus } from "../runtime/launchStatus.js";
import type { ChaosOpError } from "../runtime/chaosOpErrors.js";
import type { FaultKind, PlannedFault } from "./chaosSchedule.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What a chaos run needs of the group that is running: its tasks, and a way to signal them. */
export interface ChaosGroup {
  /** Whether `task` runs in this group (started, not yet exited). */
  isLive(task: string): boolean;
  /**
   * Sends `signal` to `task`, as the task's own fault (never one of `launch`'s): `delivered` is
   * called once it went (a SIGTERM waits until the task handles signals), `undelivered` when the
   * task exited first. `false` when the task is not running (or already has a fault waiting).
   */
  inject(task: string, signal: NodeJS.Signals, delivery: { readonly delivered: () => void; readonly undelivered: () => void }): boolean;
}

/** One fault of the report (times in ms; `null` where it did not happen or is not known). */
export interface FaultReport {
  readonly id: number;
  readonly kind: FaultKind;
  readonly target: string;
  /** When the schedule put it, ms from the chaos run's start. */
  readonly atMs: number;
  /** When it was injected, ms from the chaos run's start (later than `atMs` when it waited for its target); `null`: never (the run ended first). */
  readonly injectedMs: number | null;
  /** From the injection to the first sign of it that reached `launch`. */
  readonly detectMs: number | null;
  /** From the injection to the first checkpoint made durable after it, before training resumed. */
  readonly savedMs: number | null;
  /** From the injection to the first time training resumed after it (the chief's `ready`). */
  readonly firstStepMs: number | null;
  /** Steps trained before the injection that the resumed training trains again (at least these: see docs/goodput.md). */
  readonly stepsLost: number | null;
  /**
   * What recovered from it: `alone` (its target, a worker of a data-parallel group, was restarted
   * alone while the group waited), `group` (a restart of the group, or the group trained on
   * without one); `null` when it was not injected or was absorbed.
   */
  readonly recovery: "alone" | "group" | null;
}

/** The recovery report of a chaos run (`--chaos-report`, JSON). */
export interface ChaosReport {
  readonly version: 1;
  /** The schedule's clock start, Unix epoch ms: the first group's start, or (`from: training`) when every task first trained; fault times count from it. */
  readonly startMs: number;
  /** The run's length, ms, from the first group's start. */
  readonly durationMs: number;
  /** `launch`'s exit code. */
  readonly exitCode: number;
  /** Groups started (1 + restarts). */
  readonly groups: number;
  /** The log directory whose goodput logs were read, `null` when none is known. */
  readonly logDir: string | null;
  readonly faults: readonly FaultReport[];
  /** The group's goodput over the chaos run (its records only), `null` without goodput logs. */
  readonly goodput: GoodputFigures | null;
}

/** Options of {@link ChaosRun}. */
export interface ChaosRunOptions {
  readonly faults: readonly PlannedFault[];
  readonly clock: Clock;
  /** `launch`'s own line. */
  readonly say: (line: string, level?: "info" | "warn" | "error") => void;
  /** Told as each fault is injected (at `t`, Unix epoch ms): `launch` records it in the run's log directory, where the board marks it. */
  readonly injected?: ((fault: PlannedFault, t: number) => void) | undefined;
  /** The schedule's `from: training`: its clock starts once every task of a group first trains ({@link ChaosRun.trainingBegan}), not as the group starts. */
  readonly fromTraining?: boolean | undefined;
}

interface FaultState {
  readonly fault: PlannedFault;
  /** Clock time of the injection. */
  injectedAt?: number;
  detectedAt?: number;
  /** The group it was injected into (1, 2, …). */
  group?: number;
  /** Waiting for its target in the next group. */
  pending: boolean;
  /** Handed to a group, not yet delivered (a SIGTERM waiting until its task handles signals). */
  handed: boolean;
  /** A freeze that ended (SIGCONT) with no sign of it: the group trained on, nothing to recover. */
  absorbed: boolean;
  /** A freeze whose SIGCONT has not gone yet. */
  frozen: boolean;
  /** Its target was restarted alone after it (its group trained on): a later end of the group is not its doing. */
  recoveredAlone?: boolean;
}

/** A sign of a fault that reached `launch`: a task's status line, or its exit. */
type Sign = { readonly type: "status"; readonly task: string; readonly status: LaunchStatus } | { readonly type: "exit"; readonly task: string };

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** The faults of one `launch --chaos` run, across its groups (see the module doc). */
export class ChaosRun {
  private readonly states: FaultState[];
  private readonly timers: TimerHandle[] = [];
  private group: ChaosGroup | undefined;
  /** When the schedule's clock started (fault times count from it). */
  private startMs: number | undefined;
  /** When the first group started (the run's records count from it, also under `from: training`). */
  private runStartMs: number | undefined;
  private groups = 0;
  /** The group stops (a task failed or was preempted, or launch got a notice): faults wait for the next one. */
  private stopping = false;
  /** When the running group's first task exited with a non-zero code (clock time). */
  private firstFailureAt: number | undefined;
  /** No more faults: launch got a termination notice, or the run ended. */
  private stopped = false;

  constructor(private readonly o: ChaosRunOptions) {
    this.states = o.faults.map((fault) => ({ fault, pending: false, handed: false, absorbed: false, frozen: false }));
  }

  /** Starts the schedule's clock (once, as the first group starts; with `fromTraining`, once it trains). */
  start(): void {
    this.runStartMs ??= this.o.clock.now();
    if (this.o.fromTraining !== true) this.startClock();
  }

  /** Every task of the group trains: with `fromTraining`, the schedule's clock starts (once). */
  trainingBegan(): void {
    if (this.o.fromTraining !== true || this.startMs !== undefined || this.stopped) return;
    this.o.say("chaos: every task trains: the schedule's clock starts (from: training)");
    this.startClock();
  }

  private startClock(): void {
    if (this.startMs !== undefined) return;
    const now = this.o.clock.now();
    this.startMs = now;
    for (const s of this.states) {
      if (s.fault.kind === "opError") continue;
      this.timers.push(this.o.clock.setTimer(s.fault.atMs, () => this.fire(s)));
    }
  }

  /**
   * The environment of `task` in the next group: the opError faults that hit it and were not yet
   * raised, with their times as Unix epoch ms.
   */
  opErrorsFor(task: string): readonly ChaosOpError[] {
    if (this.stopped) return [];
    const start = this.startMs ?? this.o.clock.now();
    return this.states.filter((s) => s.fault.kind === "opError" && s.fault.target === task && s.injectedAt === undefined).map((s) => ({ fault: s.fault.id, atMs: start + s.fault.atMs }));
  }

  /** A group started: the faults that waited for it land on their targets. */
  groupStarted(group: ChaosGroup): void {
    this.groups += 1;
    this.group = group;
    this.stopping = false;
    this.firstFailureAt = undefined;
    for (const s of this.states) if (s.pending) this.fire(s);
  }

  /**
   * The group stops (a task failed or was preempted): a fault whose time comes now waits for the
   * next group (a task still frozen is `launch`'s to SIGKILL, as any stopped task of a group that stops).
   */
  groupStopping(): void {
    this.stopping = true;
  }

  /**
   * The group ended: `true` when its end came after a fault was injected into it (its restart uses
   * up no `--max-restarts`). A freeze the group absorbed, a fault whose target was restarted
   * alone, or a fault injected after the failure that ended the group, does not count.
   */
  groupEnded(): boolean {
    const failedAt = this.firstFailureAt ?? this.o.clock.now();
    const index = this.groups;
    this.group = undefined;
    return this.states.some((s) => s.group === index && s.injectedAt !== undefined && !s.absorbed && s.recoveredAlone !== true && s.injectedAt <= failedAt);
  }

  /** A task's status line: the opError it raises now, and a sign of a fault injected before. */
  status(task: string, status: LaunchStatus): void {
    const now = this.o.clock.now();
    if (status.type === "chaos") {
      const s = this.states.find((x) => x.fault.id === status.fault && x.fault.kind === "opError" && x.fault.target === task);
      if (s === undefined || s.injectedAt !== undefined || this.stopped) return;
      s.injectedAt = now;
      s.group = this.groups;
      this.o.injected?.(s.fault, now);
      // The task that raised it knows at once.
      s.detectedAt = now;
      this.o.say(`chaos: fault ${s.fault.id} (opError) raised in ${task}'s step`, "warn");
      return;
    }
    this.detect({ type: "status", task, status }, now);
  }

  /** Task `task` of the group exited with `code`. */
  exited(task: string, code: number): void {
    const now = this.o.clock.now();
    if (code !== 0) this.firstFailureAt ??= now;
    this.detect({ type: "exit", task }, now);
  }

  /**
   * Whether a fault was injected into `task` at or after `sinceMs` (clock time: its process's
   * start) and not absorbed: a worker restarted alone after it uses up no `--max-restarts`.
   */
  hitSince(task: string, sinceMs: number): boolean {
    return this.states.some((s) => s.fault.target === task && s.injectedAt !== undefined && s.injectedAt >= sinceMs && !s.absorbed);
  }

  /**
   * Task `task` died and starts again alone, while its group trains on: the group did not fail,
   * and the faults that waited for the task land on its new process.
   */
  taskRestarted(task: string): void {
    this.firstFailureAt = undefined;
    // The faults that hit it are recovered: a later failure of the group is not theirs.
    for (const s of this.states) if (s.fault.target === task && s.group === this.groups && s.injectedAt !== undefined) s.recoveredAlone = true;
    for (const s of this.states) if (s.pending && s.fault.target === task) this.fire(s);
  }

  /** Stops injecting (launch got a termination notice, or the run ended); a frozen task is let go. */
  stop(): void {
    this.stopped = true;
    for (const t of this.timers) t.cancel();
    this.timers.length = 0;
    this.thaw();
  }

  /**
   * The report of the run that ended with `exitCode`, its recovery figures from the goodput logs
   * of `logDir` (none when `undefined`, or when it holds none).
   */
  async report(exitCode: number, logDir: string | undefined): Promise<ChaosReport> {
    const endMs = this.o.clock.now();
    const runStartMs = this.runStartMs ?? this.startMs ?? endMs;
    // Fault times count from the schedule's clock (under `from: training`, later than the run's start).
    const startMs = this.startMs ?? runStartMs;
    let logs: GoodputLog[] = [];
    if (logDir !== undefined) {
      try {
        // Only this run's records: a log directory may hold earlier runs' (every record of this run's processes is written after it started).
        logs = readGoodputLogs(logDir).map((l) => ({ ...l, records: l.records.filter((r) => r.t >= runStartMs) }));
      } catch (e) {
        this.o.say(`chaos: the goodput logs in ${logDir} could not be read (${e instanceof Error ? e.message : String(e)}): the report has no recovery figures`, "warn");
      }
    }
    const chief = logs.find((l) => l.records.some((r) => r.type === "start" && r.chief))?.records ?? [];
    // The chief's summaries name the global step every few steps (the goodput log's marks are seconds apart): where training was at each fault.
    const summarySteps = logDir === undefined ? [] : await summaryStepsOf(logDir, runStartMs);
    const each = this.states.map((s) => faultReport(s, startMs, chief, summarySteps));
    // Faults whose recoveries end at the same first step share their lost steps: the first one injected has them.
    const byInjection = [...each].filter((f) => f.injectedMs !== null).sort((a, b) => (a.injectedMs as number) - (b.injectedMs as number) || a.id - b.id);
    const counted = new Set<number>();
    const shared = new Set<number>();
    for (const f of byInjection) {
      if (f.firstStepMs === null) continue;
      const resumed = (f.injectedMs as number) + f.firstStepMs;
      if (counted.has(resumed)) shared.add(f.id);
      counted.add(resumed);
    }
    const faults = each.map((f) => (shared.has(f.id) && f.stepsLost !== null ? { ...f, stepsLost: 0 } : f));
    const group = computeGoodput(logs).group;
    return {
      version: 1,
      startMs,
      durationMs: endMs - runStartMs,
      exitCode,
      groups: this.groups,
      logDir: logDir ?? null,
      faults,
      goodput: group === null ? null : { startMs: group.startMs, endMs: group.endMs, totalSecs: group.totalSecs, productiveSecs: group.productiveSecs, goodput: group.goodput, badput: group.badput },
    };
  }

  // -------------------------------------------------------------------------------------------
  // internals
  // -------------------------------------------------------------------------------------------

  private fire(s: FaultState): void {
    if (s.injectedAt !== undefined || s.handed || this.stopped) return;
    const { fault } = s;
    const group = this.group;
    const wait = (): void => {
      if (!s.pending) this.o.say(`chaos: fault ${fault.id} (${fault.kind} to ${fault.target}) waits for ${fault.target} to run again`);
      s.pending = true;
    };
    if (group === undefined || this.stopping || !group.isLive(fault.target)) return wait();
    const signal: NodeJS.Signals = fault.kind === "sigterm" ? "SIGTERM" : fault.kind === "freeze" ? "SIGSTOP" : "SIGKILL";
    const index = this.groups;
    const delivered = (): void => {
      s.handed = false;
      s.injectedAt = this.o.clock.now();
      s.group = index;
      this.o.injected?.(fault, s.injectedAt);
      const start = this.startMs ?? s.injectedAt;
      const late = s.injectedAt - (start + fault.atMs);
      this.o.say(
        `chaos: fault ${fault.id}: ${signal} to ${fault.target}${fault.kind === "freeze" ? ` for ${formatSecs((fault.durationMs ?? 0) / 1000)}` : ""} at ${formatSecs((s.injectedAt - start) / 1000)}${late >= 1000 ? ` (${formatSecs(late / 1000)} after its time: it waited for its target)` : ""}`,
        "warn",
      );
      if (fault.kind !== "freeze") return;
      s.frozen = true;
      this.timers.push(this.o.clock.setTimer(fault.durationMs ?? 0, () => this.release(s, group)));
    };
    const undelivered = (): void => {
      s.handed = false;
      wait();
    };
    if (!group.inject(fault.target, signal, { delivered, undelivered })) return wait();
    s.pending = false;
    if (s.injectedAt === undefined) s.handed = true;
  }

  /** A freeze's end: SIGCONT to its task, if it is still there; with no sign of it by then, the group absorbed it. */
  private release(s: FaultState, group: ChaosGroup): void {
    if (!s.frozen) return;
    s.frozen = false;
    if (this.group !== group || !group.isLive(s.fault.target)) return;
    if (s.detectedAt === undefined && !this.stopping) s.absorbed = true;
    group.inject(s.fault.target, "SIGCONT", { delivered: () => undefined, undelivered: () => undefined });
    this.o.say(`chaos: fault ${s.fault.id}: SIGCONT to ${s.fault.target}${s.absorbed ? " (the group trained on: nothing to recover)" : ""}`);
  }

  /** Every freeze not yet released gets its SIGCONT now. */
  private thaw(): void {
    const group = this.group;
    if (group === undefined) return;
    for (const s of this.states) if (s.frozen) this.release(s, group);
  }

  /**
   * A sign of the faults injected before that have none yet, when it is of them: the target's own
   * notice or exit, a task's `exiting` line about itself being the target, or a peer finding the
   * target lost.
   */
  private detect(sign: Sign, now: number): void {
    for (const s of this.states) {
      if (s.injectedAt === undefined || s.detectedAt !== undefined) continue;
      const target = s.fault.target;
      const of =
        sign.type === "exit"
          ? sign.task === target
          : sign.status.type === "lost"
            ? sign.status.tasks.map(launchTaskName).includes(target)
            : (sign.status.type === "notice" || sign.status.type === "exiting") && sign.task === target;
      if (of) s.detectedAt = now;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** The report's lines for `launch` to print: one a fault, then the goodput. */
export const describeChaosReport = (r: ChaosReport): string[] => {
  const ms = (v: number | null): string => (v === null ? "-" : formatSecs(v / 1000));
  const lines = r.faults.map(
    (f) =>
      `chaos: fault ${f.id} ${f.kind} to ${f.target}: ${f.injectedMs === null ? (f.kind === "opError" ? "not injected (no step of its target began after its time: the run ended first, or the target's session does not run the task's hooks)" : "not injected (the run ended first)") : `at ${ms(f.injectedMs)}; detected +${ms(f.detectMs)}, saved +${ms(f.savedMs)}, training again +${ms(f.firstStepMs)}${f.recovery === "alone" ? " (its target restarted alone)" : ""}, steps lost ${f.stepsLost ?? "-"}`}`,
  );
  lines.push(
    r.goodput === null
      ? `chaos: ${r.faults.length} fault${r.faults.length === 1 ? "" : "s"} over ${formatSecs(r.durationMs / 1000)} and ${r.groups} group${r.groups === 1 ? "" : "s"}; no goodput logs${r.logDir === null ? "" : ` in ${r.logDir}`}, so no recovery figures`
      : `chaos: ${r.faults.length} fault${r.faults.length === 1 ? "" : "s"} over ${formatSecs(r.durationMs / 1000)} and ${r.groups} group${r.groups === 1 ? "" : "s"}: goodput ${(r.goodput.goodput * 100).toFixed(1)}% (productive ${formatSecs(r.goodput.productiveSecs)} of ${formatSecs(r.goodput.totalSecs)})`,
  );
  return lines;
};

/**
 * The log directory `launch --chaos -- <command>` names for its tasks' goodput logs: beside the
 * report, named after it (`chaos-report.json` → `chaos-report-logs`).
 */
export const chaosLogDirOf = (reportPath: string): string => join(dirname(reportPath), `${basename(reportPath).replace(/\.json$/i, "")}-logs`);

/** Writes `report` to `path` as JSON, whole or not at all (a temporary file renamed over it). */
export const writeChaosReport = (path: string, report: ChaosReport): void => {
  const tmp = join(dirname(path), `.${process.pid}.chaos-report.tmp`);
  writeFileSync(tmp, `${JSON.stringify(report, null, 2)}\n`);
  renameSync(tmp, path);
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/**
 * The global steps the event files in `logDir` itself (the chief's summaries; not its subruns')
 * name, with their times (ms), from `sinceMs` on. Unreadable records are skipped (every file is
 * hostile input).
 */
const summaryStepsOf = async (logDir: string, sinceMs: number): Promise<{ t: number; step: number }[]> => {
  const out: { t: number; step: number }[] = [];
  let files: string[];
  try {
    files = readdirSync(logDir, { withFileTypes: true })
      .filter((d) => d.isFile() && d.name.includes("tfevents"))
      .map((d) => join(logDir, d.name));
  } catch {
    return out;
  }
  for (const file of files) {
    try {
      for await (const e of readEvents(file)) {
        if (e.kind === "issue" || e.kind === "fileVersion") continue;
        const t = e.wallTime * 1000;
        if (t >= sinceMs && Number.isSafeInteger(e.step) && e.step >= 0) out.push({ t, step: e.step });
      }
    } catch {
      // A file that went: the others, and the goodput log's marks.
    }
  }
  return out;
};

/** One fault's figures, from its state, the chief's goodput records and its summaries' steps. */
const faultReport = (s: FaultState, startMs: number, chief: readonly GoodputRecord[], summarySteps: readonly { t: number; step: number }[]): FaultReport => {
  const { fault } = s;
  const base = { id: fault.id, kind: fault.kind, target: fault.target, atMs: fault.atMs };
  if (s.injectedAt === undefined) return { ...base, injectedMs: null, detectMs: null, savedMs: null, firstStepMs: null, stepsLost: null, recovery: null };
  const at = s.injectedAt;
  if (s.absorbed) return { ...base, injectedMs: at - startMs, detectMs: null, savedMs: null, firstStepMs: null, stepsLost: 0, recovery: null };
  // Training resumes: the chief's first `ready` after the injection (a restarted process's, or a session re-created in the same one).
  const ready = chief.find((r): r is Extract<GoodputRecord, { type: "ready" }> => r.type === "ready" && r.t >= at);
  const resumedAt = ready?.t ?? Number.POSITIVE_INFINITY;
  // The chief process that ran at the injection (started by then: its process's start, not its log's
  // first record, which waits for the checkpoint directory); a save of its after the injection is the
  // fault's (a restarted process's first save re-saves what it restored).
  const lastStart = chief.reduce((i, r, k) => (r.type === "start" && r.processStartMs <= at ? k : i), -1);
  const nextStart = chief.findIndex((r, k) => k > lastStart && r.type === "start");
  const running = lastStart < 0 ? [] : chief.slice(lastStart, nextStart < 0 ? undefined : nextStart);
  const saved = running.find((r) => r.type === "mark" && r.checkpoint === true && r.t >= at && r.t <= resumedAt);
  // The steps this fault cost: those trained since training last began (the running process's
  // `ready` before the injection), beyond where it resumed. Training that was not running at the
  // injection (a recovery under way, or a session down) loses nothing more: an earlier fault's
  // figures have those steps.
  const began = [...running].reverse().find((r) => (r.type === "ready" || r.type === "aborted") && r.t <= at);
  let stepsLost: number | null = 0;
  // The chief's process went on with the state it had (its group re-formed around the rank
  // restarted alone): nothing was restored, so no step is trained again.
  if (ready?.kept === true) stepsLost = 0;
  else if (ready === undefined || ready.step === null) stepsLost = null;
  else if (began?.type === "ready") {
    let highest = began.step ?? 0;
    for (const p of [...stepPoints(running), ...summarySteps]) if (p.t >= began.t && p.t <= at && p.step > highest) highest = p.step;
    stepsLost = Math.max(0, highest - ready.step);
  }
  return {
    ...base,
    injectedMs: at - startMs,
    detectMs: s.detectedAt === undefined ? null : s.detectedAt - at,
    savedMs: saved === undefined ? null : saved.t - at,
    firstStepMs: ready === undefined ? null : ready.t - at,
    stepsLost,
    recovery: s.recoveredAlone === true ? "alone" : "group",
  };
};
