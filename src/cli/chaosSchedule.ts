/**
 * The fault schedule of `launch --chaos <file>`: a YAML or JSON document decoded with the
 * project's codecs, and the faults it gives. The same document (the same seed) always gives the
 * same faults, so recovery reports compare between runs.
 *
 * ```yaml
 * seed: 1
 * durationSecs: 600          # faults are drawn within the first 600 s of the run
 * meanIntervalSecs: 60       # exponential gaps with this mean (or `times: [30, 90]`, in seconds)
 * kinds: { sigterm: 0.4, sigkillWorker: 0.3, sigkillChief: 0.1, freeze: 0.1, opError: 0.1 }
 * freezeSecs: 15             # how long a `freeze` holds its task stopped (SIGSTOP, then SIGCONT)
 * from: training             # the clock starts once every task of a group first trains (default: launch)
 * ```
 *
 * Or, to replay one scenario, the faults themselves (`seed` and `kinds` are then not needed):
 *
 * ```yaml
 * faults:
 *   - { atSecs: 0, kind: sigterm, target: worker:0 }
 *   - { atSecs: 20, kind: sigkillChief }
 * ```
 *
 * @module
 */

import { readFileSync, statSync } from "node:fs";

import * as E from "fp-ts/lib/Either.js";
import * as t from "io-ts";
import { parseDocument } from "yaml";

import { decode, formatIssue, NonNegativeNumber, optional, refined, required, SafeInt, show, struct, type Issue } from "../codec.js";
import { MAX_ALIAS_COUNT } from "../config/index.js";
import { mulberry32 } from "../util/mulberry32.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The kinds of fault, with what each does to which task. */
export const FAULT_KINDS = ["sigterm", "sigkillWorker", "sigkillChief", "freeze", "opError"] as const;

/** One kind of fault (see {@link FAULT_KINDS}). */
export type FaultKind = (typeof FAULT_KINDS)[number];

/** The largest `--chaos` file read: a schedule is a few lines; anything larger is not one. */
const MAX_SCHEDULE_BYTES = 1024 * 1024;

/** The most faults a schedule may give (a mean interval far below the duration would flood the run). */
const MAX_FAULTS = 10_000;

/** Where {@link planFaults} stops drawing, whatever the schedule (a bound on its memory and time). */
const PLAN_LIMIT = 1_000_000;

const Weights = struct(
  "ChaosKinds",
  "The mix of fault kinds, as weights (they need not add up to 1; a kind left out never happens).",
  {
    sigterm: optional(NonNegativeNumber, "A termination notice (SIGTERM) to a random task."),
    sigkillWorker: optional(NonNegativeNumber, "SIGKILL to a random worker."),
    sigkillChief: optional(NonNegativeNumber, "SIGKILL to the chief."),
    freeze: optional(NonNegativeNumber, "SIGSTOP to a random task for freezeSecs, then SIGCONT."),
    opError: optional(NonNegativeNumber, "An OpError (InternalError) raised in a random task's step."),
  },
  (w) => (FAULT_KINDS.some((k) => (w[k] ?? 0) > 0) ? [] : [{ message: "give at least one kind a weight above 0" }]),
);

/** The longest time a schedule may name, in seconds: about 23 days (a timer's longest wait is 2^31 - 1 ms). */
const MAX_SECS = 2_000_000;

/** Seconds from 0 to {@link MAX_SECS}. */
const Secs = refined(`a number of seconds from 0 to ${MAX_SECS}`, (u): u is number => typeof u === "number" && Number.isFinite(u) && u >= 0 && u <= MAX_SECS);

/** Seconds above 0, to {@link MAX_SECS}. */
const PositiveSecs = refined(`a number of seconds above 0, to ${MAX_SECS}`, (u): u is number => typeof u === "number" && Number.isFinite(u) && u > 0 && u <= MAX_SECS);

/** A task of `launch`'s group: `chief:0` or `worker:<i>`. */
const TaskName = refined("a task of the group (chief:0 or worker:<i>)", (u): u is string => typeof u === "string" && /^(?:chief:0|worker:(?:0|[1-9]\d{0,5}))$/.test(u));

const Fault = struct("ChaosFault", "One fault of an explicit list.", {
  atSecs: required(Secs, "Seconds from the schedule's start (see from)."),
  kind: required(t.keyof(Object.fromEntries(FAULT_KINDS.map((k) => [k, null])) as Record<FaultKind, null>, "a fault kind (sigterm, sigkillWorker, sigkillChief, freeze, opError)"), "What happens."),
  target: optional(TaskName, "The task it hits (sigkillChief: chief:0; sigkillWorker: a worker).", "a random task the kind may hit"),
});

/** The `--chaos` document's codec. */
const ChaosScheduleCodec = struct(
  "ChaosSchedule",
  "The faults `launch --chaos` injects.",
  {
    seed: optional(SafeInt, "The seed of the draws: the same seed gives the same faults.", "1"),
    durationSecs: optional(PositiveSecs, "Faults are drawn within this many seconds from the schedule's start (with meanIntervalSecs or times)."),
    meanIntervalSecs: optional(PositiveSecs, "The mean gap between faults (exponential gaps). Give this, times or faults."),
    times: optional(t.array(Secs), "Fault times, seconds from the schedule's start, each of a kind drawn from kinds. Give this, meanIntervalSecs or faults."),
    kinds: optional(Weights, "The mix of fault kinds (with meanIntervalSecs or times)."),
    faults: optional(t.array(Fault), "The faults themselves, each with its time, kind and (optionally) target. Give this, meanIntervalSecs or times."),
    freezeSecs: optional(PositiveSecs, "How long a freeze holds its task stopped.", "15"),
    from: optional(
      t.keyof({ launch: null, training: null }, "launch or training"),
      "Where the schedule's clock starts: the first group's start (launch), or the moment every task of a group first trains (training: no fault lands while the tasks start).",
      "launch",
    ),
  },
  (v) => {
    const given = (["meanIntervalSecs", "times", "faults"] as const).filter((k) => v[k] !== undefined);
    if (given.length !== 1) return [{ key: "meanIntervalSecs", message: `give exactly one of meanIntervalSecs, times and faults (${given.length === 0 ? "none is given" : `${given.join(" and ")} are given`})` }];
    const out: { key?: string; message: string }[] = [];
    if (v.faults === undefined && v.kinds === undefined) out.push({ key: "kinds", message: "is required with meanIntervalSecs or times: the mix of fault kinds, e.g. { sigterm: 1 }" });
    if (v.meanIntervalSecs !== undefined && v.durationSecs === undefined) out.push({ key: "durationSecs", message: "is required with meanIntervalSecs: faults are drawn within it" });
    if (v.faults !== undefined && v.kinds !== undefined) out.push({ key: "kinds", message: "is not used with faults (each fault names its kind); remove it" });
    // An opError's time is handed to its task as the task starts, before anyone trains.
    const opErrors = (v.kinds?.opError ?? 0) > 0 || (v.faults ?? []).some((f) => f?.kind === "opError");
    if (v.from === "training" && opErrors) out.push({ key: "from", message: "training does not take opError faults (their times are handed to the tasks as they start); use from: launch, or leave opError out" });
    for (const [i, f] of (v.faults ?? []).entries()) {
      if (f?.kind === "sigkillChief" && f.target !== undefined && f.target !== "chief:0") out.push({ key: `faults[${i}].target`, message: "sigkillChief hits chief:0; leave target out or use sigkillWorker" });
      if (f?.kind === "sigkillWorker" && f.target === "chief:0") out.push({ key: `faults[${i}].target`, message: "sigkillWorker hits a worker; use sigkillChief for the chief" });
    }
    return out;
  },
);

/** A decoded `--chaos` document. */
export type ChaosSchedule = t.TypeOf<typeof ChaosScheduleCodec>;

/** One fault to inject. */
export interface PlannedFault {
  /** Its place in the schedule (0, 1, …), as the report and the tasks name it. */
  readonly id: number;
  /** Milliseconds from the schedule's start (the first group's start, or its training with from: training). */
  readonly atMs: number;
  readonly kind: FaultKind;
  /** The task it hits: `chief:0` or `worker:<i>`. */
  readonly target: string;
  /** A freeze's length, ms. */
  readonly durationMs?: number;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Decodes a `--chaos` document: the schedule, or every problem with its path. */
export const decodeChaosSchedule = (u: unknown): E.Either<Issue[], ChaosSchedule> => decode(ChaosScheduleCodec, u);

/**
 * Reads the `--chaos` file at `path` (JSON or YAML) and plans its faults for a group of a chief
 * and `workers` workers. `Left`: one line per problem, each naming the file (and the key).
 */
export const readChaosSchedule = (path: string, workers: number): E.Either<string[], { readonly schedule: ChaosSchedule; readonly faults: readonly PlannedFault[] }> => {
  const fix = "give a JSON or YAML file such as {seed: 1, durationSecs: 600, meanIntervalSecs: 60, kinds: {sigterm: 1}} (docs/goodput.md)";
  let text: string;
  try {
    const st = statSync(path);
    if (!st.isFile()) return E.left([`--chaos ${path} is not a regular file: ${fix}`]);
    if (st.size > MAX_SCHEDULE_BYTES) return E.left([`--chaos ${path} is ${st.size} bytes, more than a schedule's ${MAX_SCHEDULE_BYTES}: ${fix}`]);
    text = readFileSync(path, "utf8");
  } catch (e) {
    const why = (e as NodeJS.ErrnoException).code === "ENOENT" ? "does not exist" : `cannot be read (${(e as Error).message})`;
    return E.left([`--chaos ${path} ${why}: ${fix}`]);
  }
  const doc = parseDocument(text, { prettyErrors: true });
  if (doc.errors.length > 0) {
    return E.left(
      doc.errors.map((e) => {
        const at = e.linePos?.[0];
        const message = `YAML syntax error: ${(e.message.split("\n")[0] ?? e.code).replace(/ at line \d+, column \d+:?$/, "")}`;
        return `--chaos ${path}: ${formatIssue({ path: "(file)", message, ...(at === undefined ? {} : { line: at.line, column: at.col }) })}`;
      }),
    );
  }
  let value: unknown;
  try {
    value = doc.toJS({ maxAliasCount: MAX_ALIAS_COUNT });
  } catch (e) {
    return E.left([`--chaos ${path}: ${(e as Error).message}`]);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return E.left([`--chaos ${path}: (root): expected a schedule object, got ${show(value)}: ${fix}`]);
  const decoded = decodeChaosSchedule(value);
  if (E.isLeft(decoded)) return E.left(decoded.left.map((i) => `--chaos ${path}: ${formatIssue(i)}`));
  const schedule = decoded.right;
  const problems: string[] = [];
  for (const [i, f] of (schedule.faults ?? []).entries()) {
    const m = /^worker:(\d+)$/.exec(f.target ?? "");
    if (m !== null && Number(m[1]) >= workers) problems.push(`--chaos ${path}: faults[${i}].target: ${f.target as string} is not a task of this group (launch --workers ${workers + 1} has ${workers === 0 ? "no worker" : workers === 1 ? "worker:0 only" : `worker:0 to worker:${workers - 1}`})`);
    if (f.kind === "sigkillWorker" && workers === 0) problems.push(`--chaos ${path}: faults[${i}].kind: sigkillWorker needs a worker (launch --workers 2 or more)`);
  }
  if (problems.length > 0) return E.left(problems);
  if (schedule.kinds !== undefined && !FAULT_KINDS.some((k) => (schedule.kinds?.[k] ?? 0) > 0 && (workers > 0 || k !== "sigkillWorker"))) {
    return E.left([`--chaos ${path}: kinds: only sigkillWorker has a weight, and this group has no worker (launch --workers 1): give another kind a weight, or launch --workers 2 or more`]);
  }
  const faults = planFaults(schedule, workers, MAX_FAULTS + 1);
  if (faults.length > MAX_FAULTS) return E.left([`--chaos ${path}: the schedule gives ${faults.length} faults, more than ${MAX_FAULTS}: raise meanIntervalSecs or lower durationSecs`]);
  return E.right({ schedule, faults });
};

/**
 * The faults of `schedule` for a group of a chief and `workers` workers, in time order (ties in
 * the schedule's order): the same schedule and group always give the same list. At most `limit`
 * are drawn.
 */
export const planFaults = (schedule: ChaosSchedule, workers: number, limit: number = PLAN_LIMIT): PlannedFault[] => {
  const random = mulberry32(schedule.seed ?? 1);
  const tasks = ["chief:0", ...Array.from({ length: workers }, (_, i) => `worker:${i}`)];
  const pick = <T>(items: readonly T[]): T => items[Math.min(items.length - 1, Math.floor(random() * items.length))] as T;
  const targetOf = (kind: FaultKind): string => (kind === "sigkillChief" ? "chief:0" : kind === "sigkillWorker" ? pick(tasks.slice(1)) : pick(tasks));
  const freezeMs = (schedule.freezeSecs ?? 15) * 1000;
  const fault = (id: number, atMs: number, kind: FaultKind, target: string): PlannedFault => (kind === "freeze" ? { id, atMs, kind, target, durationMs: freezeMs } : { id, atMs, kind, target });
  if (schedule.faults !== undefined) {
    const listed = schedule.faults.map((f, i) => ({ i, atMs: Math.round(f.atSecs * 1000), kind: f.kind, target: f.target }));
    listed.sort((a, b) => a.atMs - b.atMs || a.i - b.i);
    return listed.map((f, id) => fault(id, f.atMs, f.kind, f.target ?? targetOf(f.kind)));
  }
  const durationMs = (schedule.durationSecs ?? Number.POSITIVE_INFINITY) * 1000;
  const times: number[] = [];
  if (schedule.times !== undefined) {
    for (const s of schedule.times) if (s * 1000 < durationMs) times.push(Math.round(s * 1000));
    times.sort((a, b) => a - b);
  } else {
    const meanMs = (schedule.meanIntervalSecs as number) * 1000;
    // Exponential gaps: a Poisson process of faults, the same for the same seed (bounded: see MAX_FAULTS).
    for (let at = -meanMs * Math.log(1 - random()); at < durationMs && times.length < limit; at += -meanMs * Math.log(1 - random())) times.push(Math.round(at));
  }
  const weights = FAULT_KINDS.map((k) => [k, schedule.kinds?.[k] ?? 0] as const).filter(([kind, w]) => w > 0 && (workers > 0 || kind !== "sigkillWorker"));
  const total = weights.reduce((n, [, w]) => n + w, 0);
  if (total === 0) return [];
  return times.map((atMs, id) => {
    let r = random() * total;
    let kind: FaultKind = weights[weights.length - 1]?.[0] ?? "sigterm";
    for (const [k, w] of weights) {
      if (r < w) {
        kind = k;
        break;
      }
      r -= w;
    }
    return fault(id, atMs, kind, targetOf(kind));
  });
};
