/**
 * The task runtime's session events, declared beside it by augmentation of `SessionEventMap` (the
 * core declares only its own). A started task (`startTask()`, `startClusterTask`, the task `run`
 * starts) emits them on its `events$`, with its lines as `log` events (`source: "runtime"`, or
 * the part's that wrote them: `server`, `collective`, `notices`);
 * `session.forwardEvents(task)` puts them on a monitored session's stream, whose log observers
 * then print the task's lines. Importing anything of `monitored-session/runtime` brings them into
 * `SessionEvent`.
 *
 * @module
 */

import type { ComponentEvents } from "../events/componentEvents.js";
import type { SessionEventMap, SessionEventOf } from "../events/SessionEvent.js";
import type { Clock } from "../time/Clock.js";

declare module "../events/SessionEvent.js" {
  interface SessionEventMap {
    /** Every task of the cluster registered with the coordination service (`generation` when the backend numbers them). */
    taskRegistered: { readonly task: string; readonly tasks: number; readonly generation: number | null };
    /** The task joined its data-parallel replica group as `rank` of `size` (again after the group re-formed). */
    replicaGroupJoined: { readonly task: string; readonly rank: number; readonly size: number };
    /**
     * The replica group lost a rank (`lost`: its task; `null` when the chief opened a new
     * generation without naming one, or when this task itself was declared failed, after a
     * freeze); it waits up to `maxWaitSecs` for the rank to rejoin.
     */
    replicaRankLost: { readonly task: string; readonly lost: string | null; readonly maxWaitSecs: number };
    /** The replica group re-formed its ring in `generation`: every rank takes rank 0's state and trains on. */
    replicaGroupReformed: { readonly task: string; readonly generation: number | null; readonly rejoined: string | null };
    /**
     * A worker lost its chief. `waiting`: it waits up to `maxWaitSecs` for the chief to restart
     * (its session is then re-created from the chief's values); otherwise it fails with the loss.
     */
    chiefLost: { readonly task: string; readonly chief: string; readonly waiting: boolean; readonly maxWaitSecs: number };
    /** The lost chief registered again and published its model (`generation`): the worker's session is re-created from it. */
    chiefReturned: { readonly task: string; readonly generation: number | null };
    /**
     * The task exits the process with `code`: a termination notice while it started, a second
     * one before a handler took them over, one while it leaves the cluster, or a lost chief while
     * a notice was held (43). Emitted as the exit is decided, before the task's last lines.
     */
    taskExiting: { readonly task: string; readonly code: number; readonly reason: string };
  }
}

/** The runtime's own event types (besides its `log` lines). */
type RuntimeEventType = "taskRegistered" | "replicaGroupJoined" | "replicaRankLost" | "replicaGroupReformed" | "chiefLost" | "chiefReturned" | "taskExiting";

/** An event of a started task's `events$`: the runtime's own types and its `log` lines. */
export type RuntimeEvent = SessionEventOf<RuntimeEventType | "log">;

/** A runtime event as its emitter writes it: the emit function stamps its `time`. */
export type RuntimeEventBody = { [K in RuntimeEventType]: { readonly type: K } & SessionEventMap[K] }[RuntimeEventType];

/** What a step of the runtime emits its events through. */
export type RuntimeEmit = (e: RuntimeEventBody) => void;

/** Emits on `events`, stamped with `clock`'s time. */
export const runtimeEmitter =
  (events: ComponentEvents<RuntimeEvent>, clock: Clock): RuntimeEmit =>
  (e) =>
    events.emit({ ...e, time: clock.now() } as RuntimeEvent);
