/**
 * The fault schedule of `launch --chaos <file>` (issue 36; work in progress, not wired into
 * `launch` yet): a YAML or JSON document decoded with the project's codecs, and the seeded
 * schedule it gives. The same document (the same seed) always gives the same faults, so a
 * recovery report can be compared between runs.
 *
 * ```yaml
 * seed: 1
 * durationSecs: 600          # faults are drawn within the first 600 s of the run
 * meanIntervalSecs: 60       # exponential gaps with this mean (or `times: [30, 90]`, in seconds)
 * kinds: { sigterm: 0.4, sigkillWorker: 0.3, sigkillChief: 0.1, freeze: 0.1, opError: 0.1 }
 * freezeSecs: 15             # how long a `freeze` holds its task stopped (SIGSTOP, then SIGCONT)
 * ```
 *
 * @module
 */

import * as E from "fp-ts/lib/Either.js";

import { decode, NonNegativeNumber, optional, PositiveNumber, required, SafeInt, struct, type Issue } from "../codec.js";
import * as t from "io-ts";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The kinds of fault, with what each does to which task. */
export const FAULT_KINDS = ["sigterm", "sigkillWorker", "sigkillChief", "freeze", "opError"] as const;

/** One kind of fault (see {@link FAULT_KINDS}). */
export type FaultKind = (typeof FAULT_KINDS)[number];

const Weights = struct(
  "ChaosKinds",
  "The mix of fault kinds, as weights (they need not add up to 1; a kind left out never happens).",
  {
    sigterm: optional(NonNegativeNumber, "A termination notice (SIGTERM) to a random task."),
    sigkillWorker: optional(NonNegativeNumber, "SIGKILL to a random worker."),
    sigkillChief: optional(NonNegativeNumber, "SIGKILL to the chief."),
    freeze: optional(NonNegativeNumber, "SIGSTOP to a random task for freezeSecs, then SIGCONT."),
    opError: optional(NonNegativeNumber, "An OpError raised in a random task's step."),
  },
  (w) => (FAULT_KINDS.some((k) => (w[k] ?? 0) > 0) ? [] : [{ message: "give at least one kind a weight above 0" }]),
);

/** The `--chaos` document's codec. */
export const ChaosScheduleCodec = struct(
  "ChaosSchedule",
  "The faults `launch --chaos` injects.",
  {
    seed: required(SafeInt, "The seed of the draws: the same seed gives the same faults."),
    durationSecs: required(PositiveNumber, "Faults are drawn within this many seconds from the run's start."),
    meanIntervalSecs: optional(PositiveNumber, "The mean gap between faults (exponential gaps). Give this or times."),
    times: optional(t.array(NonNegativeNumber), "Explicit fault times, seconds from the run's start. Give this or meanIntervalSecs."),
    kinds: required(Weights, "The mix of fault kinds."),
    freezeSecs: optional(PositiveNumber, "How long a freeze holds its task stopped.", "15"),
  },
  (v) => ((v.meanIntervalSecs === undefined) === (v.times === undefined) ? [{ key: "meanIntervalSecs", message: "give meanIntervalSecs or times, exactly one of them" }] : []),
);

/** A decoded `--chaos` document. */
export type ChaosSchedule = t.TypeOf<typeof ChaosScheduleCodec>;

/** One fault to inject. */
export interface PlannedFault {
  /** Milliseconds from the run's start. */
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
 * The faults of `schedule` for a group of a chief and `workers` workers, in time order: the same
 * schedule and group always give the same list.
 */
export const planFaults = (schedule: ChaosSchedule, workers: number): PlannedFault[] => {
  const random = mulberry32(schedule.seed);
  const durationMs = schedule.durationSecs * 1000;
  const times: number[] = [];
  if (schedule.times !== undefined) {
    for (const s of schedule.times) if (s * 1000 < durationMs) times.push(s * 1000);
    times.sort((a, b) => a - b);
  } else {
    const meanMs = (schedule.meanIntervalSecs as number) * 1000;
    // Exponential gaps: a Poisson process of faults, the same for the same seed.
    for (let at = -meanMs * Math.log(1 - random()); at < durationMs; at += -meanMs * Math.log(1 - random())) times.push(Math.round(at));
  }
  const weights = FAULT_KINDS.map((k) => [k, schedule.kinds[k] ?? 0] as const).filter(([kind, w]) => w > 0 && (workers > 0 || kind !== "sigkillWorker"));
  const total = weights.reduce((n, [, w]) => n + w, 0);
  const tasks = ["chief:0", ...Array.from({ length: workers }, (_, i) => `worker:${i}`)];
  const pick = <T>(items: readonly T[]): T => items[Math.min(items.length - 1, Math.floor(random() * items.length))] as T;
  return times.map((atMs) => {
    let r = random() * total;
    let kind: FaultKind = weights[weights.length - 1]?.[0] ?? "sigterm";
    for (const [k, w] of weights) {
      if (r < w) {
        kind = k;
        break;
      }
      r -= w;
    }
    const target = kind === "sigkillChief" ? "chief:0" : kind === "sigkillWorker" ? pick(tasks.slice(1)) : pick(tasks);
    return kind === "freeze" ? { atMs, kind, target, durationMs: (schedule.freezeSecs ?? 15) * 1000 } : { atMs, kind, target };
  });
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** A deterministic generator of numbers in [0, 1) (mulberry32), from a 32-bit seed. */
const mulberry32 = (seed: number): (() => number) => {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let x = state;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
};
