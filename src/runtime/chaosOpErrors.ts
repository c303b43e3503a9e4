/**
 * The task's side of `launch --chaos`'s `opError` faults. `launch` cannot raise an error inside a
 * task's step, so it hands each task, at the group's start, the `opError` faults of the schedule
 * that hit it and are still to come ({@link CHAOS_OP_ERRORS_ENV}, JSON `[{"fault": <id>,
 * "atMs": <Unix epoch ms>}]`). The task's runtime adds {@link ChaosOpErrorHook} to every session
 * made from the task: at the first step that begins at or after a fault's time, the hook tells
 * `launch` (the status channel's `chaos` line) and raises `InternalError`, which the task reports
 * to the cluster as any failed step's error. Honoured only under `launch` (the variable is read
 * only with {@link LAUNCH_READY_ENV}), so a stray variable in a production environment does
 * nothing.
 *
 * @module
 */

import * as t from "io-ts";

import { decodeOrThrow, JsonText, NonNegativeInt } from "../codec.js";
import type { Clock } from "../time/Clock.js";
import { InternalError, ValueError } from "../errors.js";
import type { SessionRunHook } from "../hook/SessionRunHook.js";
import { LAUNCH_READY_ENV } from "./launchReady.js";
import type { LaunchStatusWriter } from "./launchStatus.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Set by `launch --chaos` in a task's environment: the `opError` faults that hit it. */
export const CHAOS_OP_ERRORS_ENV = "MONITORED_SESSION_CHAOS_OP_ERRORS";

/**
 * Set by `launch --chaos` for a `-- <command>`: the log directory where each task's session
 * (made with `monitoredTrainingSession({ task })`) writes its goodput log, which the recovery
 * report reads. Honoured only under `launch`.
 */
export const CHAOS_GOODPUT_DIR_ENV = "MONITORED_SESSION_GOODPUT_DIR";

/** The goodput directory `launch --chaos` names in `env`, if any (see {@link CHAOS_GOODPUT_DIR_ENV}). */
export const chaosGoodputDirOf = (env: NodeJS.ProcessEnv): string | undefined => {
  const dir = env[CHAOS_GOODPUT_DIR_ENV];
  return dir === undefined || dir === "" || env[LAUNCH_READY_ENV] !== "1" ? undefined : dir;
};

/** One `opError` fault a task raises: the schedule's id, and when (Unix epoch ms). */
export interface ChaosOpError {
  readonly fault: number;
  readonly atMs: number;
}

const ChaosOpErrorsCodec = t.readonlyArray(t.exact(t.type({ fault: NonNegativeInt, atMs: NonNegativeInt })), '[{"fault": <id>, "atMs": <Unix epoch ms>}, ...]');

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * The `opError` faults `env` hands this task: none outside `launch` or without the variable.
 *
 * @throws ValueError when the variable is set but is not a list of faults (one line, naming it).
 */
export const chaosOpErrorsOf = (env: NodeJS.ProcessEnv): readonly ChaosOpError[] => {
  const text = env[CHAOS_OP_ERRORS_ENV];
  if (text === undefined || env[LAUNCH_READY_ENV] !== "1") return [];
  const faults = decodeOrThrow(JsonText.pipe(ChaosOpErrorsCodec), text, (problems) => new ValueError(`invalid ${CHAOS_OP_ERRORS_ENV} (set by launch --chaos): ${problems}; unset it, or run under launch --chaos`));
  return [...faults].sort((a, b) => a.atMs - b.atMs);
};

/**
 * Raises each of `faults` at the first step that begins at or after its time: tells `launch`
 * first (`toLaunch`), then throws `InternalError` naming the fault. Each fault is raised once.
 */
export class ChaosOpErrorHook implements SessionRunHook {
  readonly name = "ChaosOpErrorHook";
  private next = 0;

  constructor(
    private readonly faults: readonly ChaosOpError[],
    private readonly task: string,
    private readonly clock: Clock,
    private readonly toLaunch: LaunchStatusWriter,
  ) {}

  beforeRun(): void {
    const due = this.faults[this.next];
    if (due === undefined || this.clock.now() < due.atMs) return;
    this.next += 1;
    this.toLaunch({ type: "chaos", fault: due.fault });
    throw new InternalError(`${this.task}: fault ${due.fault} of launch --chaos: an OpError injected in this step (the schedule's opError)`);
  }
}
