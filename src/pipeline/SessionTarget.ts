/**
 * Session targets: what the `master` option of `monitoredTrainingSession` means. TensorFlow's
 * `master` names where sessions run: `""` is in-process, `grpc://host:port` a cluster's
 * server. A {@link SessionTargetRegistry} maps a target's scheme to a
 * {@link SessionTargetResolver}; the default one knows only the in-process target, and
 * `clusterSessionTargets(...)` from `monitored-session/cluster` adds `grpc://` (the graph still
 * runs in this process; a worker waits for the chief's model and starts from its values).
 *
 * A started task of a cluster (the object `startTask()` from `monitored-session/runtime`
 * returns) carries its `master`, its registry and whether it is the chief: a {@link SessionTask},
 * given to `monitoredTrainingSession` or the `Supervisor` as `task` instead of those three.
 *
 * @example
 * ```ts
 * import { defaultSessionTargets } from "monitored-session";
 *
 * defaultSessionTargets.resolve("");              // the in-process target
 * // defaultSessionTargets.resolve("grpc://ps0:2222") throws ValueError: use clusterSessionTargets(...)
 * ```
 *
 * @module
 */

import type { Observable } from "rxjs";

import type { ChiefModel } from "../session/ChiefModel.js";
import { ValueError } from "../errors.js";
import type { SessionFactory } from "../creation/SessionManager.js";
import type { SessionEvent } from "../events/SessionEvent.js";
import { hook, type SessionRunHook } from "../hook/SessionRunHook.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A resolved `master`: where the raw sessions of a monitored session come from. */
export interface SessionTarget {
  /** The `master` string it was resolved from. */
  readonly master: string;
  /**
   * The factory of raw sessions for this target. `local` is the caller's `sessionFactory`
   * (`undefined`: the graph or scaffold makes in-process sessions); the in-process target
   * returns it as it is, a remote one a factory of sessions that run elsewhere.
   */
  sessionFactory(local: SessionFactory | undefined): SessionFactory | undefined;
  /**
   * Where a worker's model comes from when the chief runs elsewhere: a worker's session creator
   * waits for it and starts from its values. `undefined` (in-process): the worker's own session
   * must become ready.
   */
  readonly chiefModel?: ChiefModel | undefined;
  /** Hooks the chief runs to publish its model to the workers (its model service). */
  readonly chiefHooks?: readonly SessionRunHook[] | undefined;
}

/** Resolves the targets of one scheme. */
export interface SessionTargetResolver {
  /** The scheme before `://` (`"grpc"`), or `""` for the in-process target `""`. */
  readonly scheme: string;
  resolve(master: string): SessionTarget;
}

/**
 * A started task of a cluster, as its session uses it: the task object of `startTask()` from
 * `monitored-session/runtime` is one (TensorFlow has no such object: its closest is `master`
 * set to the task's `server.target`, with `is_chief`). Given as `task` to
 * `monitoredTrainingSession` or the `Supervisor`, it replaces `master`, `sessionTargets` and
 * `isChief`.
 */
export interface SessionTask {
  /** The task's session target, TensorFlow's `master`: `grpc://<its address>`. */
  readonly master: string;
  /** Resolves {@link master}: on the chief with its model publisher, on a worker to the chief's model. */
  readonly sessionTargets: SessionTargetRegistry;
  /** Whether this task is the chief: it initializes or restores, publishes its model and saves. */
  readonly isChief: boolean;
  /** Hooks the task's session runs before the caller's (a worker's recovery from the loss of its chief). */
  readonly hooks?: readonly SessionRunHook[] | undefined;
  /**
   * A log directory that the task's session writes its goodput log to, whatever its options say
   * (`launch --chaos` names one for a `-- <command>`, whose recovery report reads it).
   */
  readonly goodputDir?: string | undefined;
  /**
   * The cluster's start barrier, called once the task's first session exists (on the chief, after
   * its model is published): no task trains on before every task has its session, so the chief
   * serves its model until each worker has taken it.
   */
  sessionsCreated?(): Promise<void>;
  /**
   * The task's own events and lines (a started task's: src/runtime/events.ts), which a session
   * made for the task forwards (and prints) while it lives.
   */
  readonly events$?: Observable<SessionEvent> | undefined;
  /** Hands the task's lines to the session that forwards them (see `ComponentEvents.adopt`). */
  adopt?(): () => void;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** The in-process target `""`: sessions are made by the caller's factory or graph. */
export const inProcessTarget: SessionTargetResolver = {
  scheme: "",
  resolve: (master) => ({ master, sessionFactory: (local) => local }),
};

/**
 * Resolvers by scheme. Immutable: {@link SessionTargetRegistry.with} returns a registry with
 * one more resolver, so a test or a program can use its own without changing anyone else's.
 */
export class SessionTargetRegistry {
  private readonly byScheme: ReadonlyMap<string, SessionTargetResolver>;

  constructor(resolvers: readonly SessionTargetResolver[]) {
    const byScheme = new Map<string, SessionTargetResolver>();
    for (const r of resolvers) {
      if (byScheme.has(r.scheme)) throw new ValueError(`SessionTargetRegistry: two resolvers for the scheme "${r.scheme}"`);
      byScheme.set(r.scheme, r);
    }
    this.byScheme = byScheme;
  }

  /** A registry with `resolver` added (replacing the one of the same scheme). */
  with(resolver: SessionTargetResolver): SessionTargetRegistry {
    return new SessionTargetRegistry([...[...this.byScheme.values()].filter((r) => r.scheme !== resolver.scheme), resolver]);
  }

  /** The schemes it resolves, for messages. */
  get schemes(): readonly string[] {
    return [...this.byScheme.keys()];
  }

  /**
   * Resolves `master`. Throws `ValueError` in one line if it is malformed or its scheme has no
   * resolver (in the default registry, every scheme but the in-process `""`).
   */
  resolve(master: string): SessionTarget {
    const scheme = schemeOf(master);
    if (scheme === undefined) {
      throw new ValueError(`master "${master}" is not a session target: use "" (in-process) or "<scheme>://<address>"`);
    }
    const resolver = this.byScheme.get(scheme);
    if (resolver === undefined) {
      const known = this.schemes.map((s) => (s === "" ? '"" (in-process)' : `${s}://`)).join(", ");
      const fix = scheme === "grpc" ? 'pass sessionTargets: clusterSessionTargets(...) from "monitored-session/cluster"' : `supported: ${known}`;
      throw new ValueError(`master "${master}": this registry has no resolver for ${scheme}:// session targets; ${fix}`);
    }
    return resolver.resolve(master);
  }
}

/** The registry `monitoredTrainingSession` uses unless given one: the in-process target only. */
export const defaultSessionTargets: SessionTargetRegistry = new SessionTargetRegistry([inProcessTarget]);

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * The value of option `name` (`master`, `sessionTargets` or `isChief`) for a session given
 * `given` and perhaps a `task`: the task's value, else `given`. Giving both with different
 * values is a `ValueError` naming both options.
 */
export const fromTask = <K extends "master" | "sessionTargets" | "isChief">(
  task: SessionTask | undefined,
  name: K,
  given: SessionTask[K] | undefined,
): SessionTask[K] | undefined => {
  if (task === undefined) return given;
  const own = task[name];
  if (given !== undefined && given !== own) {
    const values = typeof own === "object" ? "another registry than the task's" : `${JSON.stringify(given)}, the task's is ${JSON.stringify(own)}`;
    throw new ValueError(`give either task or ${name}, not both: ${name} is ${values} (task sets master, sessionTargets and isChief)`);
  }
  return own;
};

/**
 * The hook that passes `task`'s start barrier ({@link SessionTask.sessionsCreated}) once its
 * first session exists; a creation that failed (and is retried) passes it at the next one.
 * `undefined` when the task has no barrier.
 */
export const sessionsCreatedHook = (task: SessionTask): SessionRunHook | undefined => {
  if (task.sessionsCreated === undefined) return undefined;
  let passed = false;
  return hook("SessionsCreated", {
    afterCreateSession: async () => {
      if (passed) return;
      await task.sessionsCreated?.();
      passed = true;
    },
  });
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** `""` for `""`, the scheme of `<scheme>://...`, else `undefined`. */
const schemeOf = (master: string): string | undefined => {
  if (master === "") return "";
  const m = /^([a-z][a-z0-9+.-]*):\/\//i.exec(master);
  return m === null ? undefined : (m[1] as string).toLowerCase();
};
