/**
 * The structured channel from a task to `monitored-session launch`: JSON lines on a descriptor
 * of their own (`launch` opens a pipe as fd 3 and names it in {@link LAUNCH_STATUS_FD_ENV}), so
 * that `launch` learns what happened from the task itself, never by reading its log text:
 *
 * - `notice`: this task got a termination notice of its own (a signal, the watched file, a
 *   platform's notice), so `launch` names the task whose notice started a preemption;
 * - `lost`: the coordination service declared `tasks` failed, or the embedded service (hosted by
 *   the chief) is gone: `launch` SIGKILLs those tasks at once instead of waiting out its kill delay;
 * - `exiting`: the exit code this task is about to exit with, and why;
 * - `chaos`: under `launch --chaos`, the task raises the schedule's `opError` fault now
 *   (src/runtime/chaosOpErrors.ts), so that the recovery report times it;
 * - `training`: the task's training began (its session exists): `launch` (keeping standbys) starts the
 *   next restart's standbys once every task of the group said so, off the group's own start;
 * - `rejoins`: the task joined its data-parallel replica group, and the group waits for a lost
 *   worker to rejoin (launch named {@link LAUNCH_RESTARTS_ALONE_ENV}): once every task of the
 *   group said so, `launch` restarts a worker that dies alone instead of restarting the group.
 *
 * Each line is one write of less than `PIPE_BUF` bytes, so lines from a task never interleave.
 * A task that was not started by `launch` has no channel, and nothing is written. A channel that
 * broke (`launch` died) is dropped without a word: the task's own exit path goes on.
 *
 * @module
 */

import { writeSync } from "node:fs";

import * as t from "io-ts";

import { decodeOrThrow, JsonText, NonEmptyString, oneOf, refined } from "../codec.js";
import { DataLossError } from "../errors.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Set by `launch` in a task's environment: the descriptor of the status channel (3). */
export const LAUNCH_STATUS_FD_ENV = "MONITORED_SESSION_LAUNCH_STATUS_FD";

/**
 * Set to `1` by `launch` when it may restart a lost worker of a data-parallel group alone (it
 * has a restart to give: `--max-restarts`, or `--chaos`): the task's group then waits for a lost
 * worker to rejoin, as a group started by hand does, instead of failing at once.
 */
export const LAUNCH_RESTARTS_ALONE_ENV = "MONITORED_SESSION_LAUNCH_RESTARTS_ALONE";

/** What a task tells `launch` (see the module's list); `launch` knows whose channel it reads. Task names are `launch`'s: `chief:0`, `worker:1`. */
export type LaunchStatus =
  | { readonly type: "notice"; readonly source: string }
  | { readonly type: "lost"; readonly tasks: readonly string[]; readonly why: "declaredFailed" | "serviceGone" }
  | { readonly type: "exiting"; readonly code: number; readonly reason: string }
  /** Under `launch --chaos`: the task raises the schedule's fault `fault` (an OpError in its step) now. */
  | { readonly type: "chaos"; readonly fault: number }
  /** Training began (`run`'s first step is next). */
  | { readonly type: "training" }
  /** The task joined its replica group, which waits for a lost worker to rejoin. */
  | { readonly type: "rejoins" };

/** Writes statuses to `launch`; a no-op where the task has no channel. */
export type LaunchStatusWriter = (status: LaunchStatus) => void;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

const TaskName = NonEmptyString;

const LaunchStatusCodec: t.Type<LaunchStatus, LaunchStatus, unknown> = oneOf('a launch status ({"type": "notice"|"lost"|"exiting"|"chaos"|"training"|"rejoins", ...})', [
  t.exact(t.type({ type: t.literal("notice"), source: NonEmptyString })),
  t.exact(t.type({ type: t.literal("lost"), tasks: t.readonlyArray(TaskName), why: t.keyof({ declaredFailed: null, serviceGone: null }) })),
  t.exact(
    t.type({
      type: t.literal("exiting"),
      code: refined("an exit code (an integer 0-255)", (u): u is number => Number.isInteger(u) && (u as number) >= 0 && (u as number) <= 255),
      reason: t.string,
    }),
  ),
  t.exact(t.type({ type: t.literal("chaos"), fault: refined("a fault's id (an integer >= 0)", (u): u is number => Number.isSafeInteger(u) && (u as number) >= 0) })),
  t.exact(t.type({ type: t.literal("training") })),
  t.exact(t.type({ type: t.literal("rejoins") })),
]);

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * The status writer of a task whose environment is `env`: writes to the descriptor `launch`
 * named, or does nothing without one (or with a value that is not a descriptor).
 */
export const launchStatusWriter = (env: NodeJS.ProcessEnv): LaunchStatusWriter => {
  const text = env[LAUNCH_STATUS_FD_ENV];
  const fd = text === undefined || !/^\d+$/.test(text) ? undefined : Number(text);
  if (fd === undefined) return () => undefined;
  let broken = false;
  return (status) => {
    if (broken) return;
    try {
      writeSync(fd, `${JSON.stringify(status)}\n`);
    } catch {
      // EPIPE (launch is gone) or EBADF (the descriptor was not launch's): the task goes on.
      broken = true;
    }
  };
};

/** A line of the channel, decoded; `DataLossError` naming `task` and every problem when it is not a status. */
export const decodeLaunchStatus = (line: string, task: string): LaunchStatus =>
  decodeOrThrow(JsonText.pipe(LaunchStatusCodec), line, (problems) => new DataLossError(`${task}'s status channel: ${problems}`));

/** `launch`'s name of a coordination task name: `/job:worker/replica:0/task:1` → `worker:1` (others as they are). */
export { shortTaskName as launchTaskName } from "../util/taskNames.js";
