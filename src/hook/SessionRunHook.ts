/**
 * The hook API: `SessionRunHook` and the values that flow through a hooked run
 * (`SessionRunArgs`, `SessionRunContext`, `SessionRunValues`), with TensorFlow's semantics.
 *
 * A hook is any object with some of the methods below; every method is optional and may be
 * sync or async. Extend the `SessionRunHook` class for the TensorFlow feel, or pass a plain
 * object:
 *
 * @example
 * ```ts
 * import { SessionRunArgs, type SessionRunHook } from "monitored-session";
 *
 * const printLoss: SessionRunHook = {
 *   beforeRun: () => SessionRunArgs("loss"),
 *   afterRun: (_ctx, { results }) => console.log("loss", results),
 * };
 * ```
 *
 * @module
 */

import type { CheckpointManager } from "../checkpoint/CheckpointManager.js";
import type { TempFileRegistry } from "../checkpoint/TempFileRegistry.js";
import type { Observable } from "rxjs";

import type { Clock } from "../time/Clock.js";
import type { Coordinator } from "../coordinator/Coordinator.js";
import { ValueError } from "../errors.js";
import type { Logger } from "../Logger.js";
import type { Feeds, Fetches, RunMetadata, RunOptions, Session } from "../session/Session.js";
import type { SessionEvent } from "../events/SessionEvent.js";
import type { FileWriterCache } from "../summary/FileWriterCache.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A value or a promise of it. Hooks return plain values to stay off the microtask queue. */
export type MaybePromise<T> = T | Promise<T>;

/** What a hook adds to a run: fetches, feeds and options (TensorFlow's `SessionRunArgs`). */
export interface SessionRunArgs {
  readonly fetches: Fetches;
  readonly feeds: Feeds | undefined;
  readonly options: RunOptions | undefined;
}

/** What a run produced for one hook (TensorFlow's `SessionRunValues`). */
export interface SessionRunValues<R = unknown> {
  /** The values of the hook's own fetches, mirroring their structure; `null` if it fetched none. */
  readonly results: R;
  /** The merged run options the session ran with. */
  readonly options: RunOptions;
  /** The run metadata the session filled. */
  readonly runMetadata: RunMetadata;
}

/** Services a monitored session gives its hooks in `begin`. */
export interface HookEnv {
  /** The session's clock: hooks' timers should use it. */
  readonly clock: Clock;
  /** The session's logger. */
  readonly logger: Logger;
  /**
   * The session's stop grace period: how long closing may wait for tasks. Hooks that wait in
   * `end` (for background saves, say) should wait at most this long by default.
   */
  readonly stopGracePeriodSecs?: number;
  /** Publishes an event on the session's `events$`. */
  emit(event: SessionEvent): void;
  /**
   * Where hooks get the summary writer of a log directory. A monitored session passes its
   * `writerCache` option, by default the process-wide `fileWriterCache`: two sessions on one
   * log directory then share one writer, as in TensorFlow. Absent outside a monitored session
   * (hooks then use `fileWriterCache`).
   */
  readonly writerCache?: FileWriterCache;
  /**
   * The session's checkpoint manager, if it was given one (`monitoredTrainingSession` gives the
   * one it made or was given): a `CheckpointSaverHook` of the same directory saves through it
   * instead of opening a second one.
   */
  readonly checkpointManager?: CheckpointManager;
  /**
   * The registry of files being written that a hook's own checkpoint manager and saver use
   * (the session's `tempFiles` option; default the process-wide `processTempFiles`).
   */
  readonly tempFiles?: TempFileRegistry;
  /**
   * Tells the session about background work (an asynchronous checkpoint write, say): until it
   * settles, every run ends with an event-loop turn so that its I/O makes progress while a
   * synchronous training loop runs. Work that makes progress off this thread (`offThread`: a
   * checkpoint committed on the writer thread) only needs its end delivered: the session's
   * timed turns do that, and it gets a turn after every run only when they are off
   * (`yieldIntervalMs: Infinity`). Absent when the hook runs outside a monitored session.
   */
  trackBackground?(work: Promise<unknown>, options?: { readonly offThread?: boolean }): void;
  /**
   * Turns on per-hook time attribution (the `hookTimings` event on `events$`) until the
   * returned function is called. Timing is on while at least one request is held, or when the
   * session was created with `hookTiming: true`; it costs nothing while off. Absent outside a
   * monitored session.
   */
  requestHookTiming?(): () => void;
  /**
   * The session's `events$`, for hooks that observe what other hooks and the session do (the
   * `ProfilerHook` reads `hookTimings`, checkpoint and summary events). Absent outside a
   * monitored session.
   */
  readonly events$?: Observable<SessionEvent>;
}

/**
 * A hook into a monitored session's life cycle. All methods are optional.
 *
 * Order (TensorFlow's): `begin` once, before the session exists → `afterCreateSession` after
 * every creation, including each recovery → per run `beforeRun` / run / `afterRun` → `end` on
 * a clean finish or OutOfRange (not after another error).
 */
export interface SessionRunHook {
  /** A name for logs, events and ordering errors (defaults to the class name). */
  readonly name?: string;
  /** Capabilities this hook provides; other hooks may ask to run after them. */
  readonly provides?: readonly string[];
  /** Capabilities whose providers must run before this hook. */
  readonly runsAfter?: readonly string[];

  /** Called once before the session is created. Not called again on recovery. */
  begin?(env: HookEnv): MaybePromise<void>;
  /** Called after each session creation, including each recovery. */
  afterCreateSession?(session: Session, coord: Coordinator): MaybePromise<void>;
  /** Called before each run; may return what to add to the run. */
  beforeRun?(ctx: SessionRunContext): MaybePromise<SessionRunArgs | undefined | void>;
  /** Called after each successful run with this hook's results. Not called if the run threw. */
  afterRun?(ctx: SessionRunContext, values: SessionRunValues): MaybePromise<void>;
  /** Called at a clean end (or OutOfRange), so a hook can run final ops. */
  end?(session: Session): MaybePromise<void>;
}

/**
 * Base class for hooks, for those who prefer TensorFlow's `class MyHook(SessionRunHook)`.
 * Override only what you need; methods you do not define cost nothing per step.
 */
export class SessionRunHook {}

/**
 * The context of one run (TensorFlow's `SessionRunContext`). The same object is given to every
 * hook's `beforeRun` and `afterRun` for that run.
 */
export class SessionRunContext {
  private stop = false;

  constructor(
    /** The caller's fetches and feeds. */
    readonly originalArgs: SessionRunArgs,
    /** The raw session. Runs through it bypass hooks. */
    readonly session: Session,
  ) {}

  /** Asks the monitored session to stop after this run. Sticky for this run. */
  requestStop(): void {
    this.stop = true;
  }

  /** `true` once any hook called {@link requestStop} during this run. */
  get stopRequested(): boolean {
    return this.stop;
  }
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Builds a {@link SessionRunArgs} (positional like TensorFlow's namedtuple).
 *
 * @example
 * ```ts
 * import { hook, SessionRunArgs } from "monitored-session";
 *
 * const withLearningRate = hook("withLearningRate", {
 *   beforeRun: () => SessionRunArgs({ loss: "loss" }, { learning_rate: 0.1 }),
 * });
 * ```
 */
export const SessionRunArgs = (fetches: Fetches = null, feeds?: Feeds, options?: RunOptions): SessionRunArgs => ({
  fetches,
  feeds,
  options,
});

/**
 * Gives a plain-object hook a name, for a one-liner hook with a readable name in logs and
 * ordering errors.
 *
 * @example
 * ```ts
 * import { hook } from "monitored-session";
 *
 * let flag = false; // set elsewhere, e.g. by a signal handler
 * const stopOnFlag = hook("stopOnFlag", { afterRun: (ctx) => { if (flag) ctx.requestStop(); } });
 * ```
 */
export const hook = <H extends Omit<SessionRunHook, "name">>(name: string, methods: H): H & { readonly name: string } => ({
  ...methods,
  name,
});

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

const HOOK_METHODS = ["begin", "afterCreateSession", "beforeRun", "afterRun", "end"] as const;

/**
 * What keeps `u` from being a {@link SessionRunHook} at run time, as `key: problem` strings
 * (empty when it is one). The check is the interface's, not the class's: any object whose hook
 * methods that it has are functions, whose `name` (if any) is a string and whose
 * `provides`/`runsAfter` (if any) are string arrays. A plain object is a hook, as the types say.
 */
export const hookProblems = (u: unknown): string[] => {
  if (typeof u !== "object" || u === null || Array.isArray(u)) return [`expected a hook (an object with some of ${HOOK_METHODS.join(", ")})`];
  const h = u as Record<string, unknown>;
  const problems: string[] = [];
  for (const m of HOOK_METHODS) if (h[m] !== undefined && typeof h[m] !== "function") problems.push(`${m}: expected a function`);
  if (h["name"] !== undefined && typeof h["name"] !== "string") problems.push("name: expected a string");
  for (const k of ["provides", "runsAfter"] as const) {
    const v = h[k];
    if (v !== undefined && !(Array.isArray(v) && v.every((x) => typeof x === "string"))) problems.push(`${k}: expected a list of strings`);
  }
  return problems;
};

/** Whether `u` can be used as a {@link SessionRunHook} (see {@link hookProblems}): class instances and plain objects alike. */
export const isSessionRunHook = (u: unknown): u is SessionRunHook => hookProblems(u).length === 0;

/** The display name of a hook: its `name`, else its class name, else `hook#<index>`. */
export const hookName = (h: SessionRunHook, index: number): string => {
  const n = h.name ?? (h as object).constructor?.name;
  return typeof n === "string" && n.length > 0 && n !== "Object" ? n : `hook#${index}`;
};

/**
 * Orders hooks so that each runs after the providers of its `runsAfter` capabilities. Without
 * constraints the registration order holds; with them, it is the stable topological order
 * (the earliest-registered ready hook goes first).
 *
 * Throws `ValueError` naming the hook and capability if a capability has no provider, and
 * naming the hooks of a cycle if the constraints are circular.
 */
export const orderHooks = <H extends SessionRunHook>(hooks: readonly H[]): H[] => {
  if (hooks.every((h) => h.runsAfter === undefined || h.runsAfter.length === 0)) return [...hooks];
  const providers = new Map<string, number[]>();
  hooks.forEach((h, i) => {
    for (const cap of h.provides ?? []) {
      const list = providers.get(cap) ?? [];
      list.push(i);
      providers.set(cap, list);
    }
  });
  const deps: Set<number>[] = hooks.map(() => new Set<number>());
  hooks.forEach((h, i) => {
    for (const cap of h.runsAfter ?? []) {
      const ps = providers.get(cap);
      if (ps === undefined) {
        throw new ValueError(
          `hook "${hookName(h, i)}" runs after "${cap}", but no hook provides "${cap}"`,
        );
      }
      for (const p of ps) if (p !== i) (deps[i] as Set<number>).add(p);
    }
  });
  const done = new Set<number>();
  const order: H[] = [];
  while (order.length < hooks.length) {
    let next = -1;
    for (let i = 0; i < hooks.length; i++) {
      if (done.has(i)) continue;
      if ([...(deps[i] as Set<number>)].every((d) => done.has(d))) {
        next = i;
        break;
      }
    }
    if (next < 0) {
      const cycle = findCycle(deps, done);
      throw new ValueError(
        `hook ordering constraints form a cycle: ${cycle.map((i) => hookName(hooks[i] as H, i)).join(" -> ")}`,
      );
    }
    done.add(next);
    order.push(hooks[next] as H);
  }
  return order;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const findCycle = (deps: readonly Set<number>[], done: Set<number>): number[] => {
  // Walk unresolved dependencies from any remaining node until a node repeats.
  const start = deps.findIndex((_, i) => !done.has(i));
  const path: number[] = [];
  const seen = new Map<number, number>();
  let cur = start;
  while (!seen.has(cur)) {
    seen.set(cur, path.length);
    path.push(cur);
    const next = [...(deps[cur] as Set<number>)].find((d) => !done.has(d));
    if (next === undefined) break;
    cur = next;
  }
  const from = seen.get(cur) ?? 0;
  return [...path.slice(from), cur];
};

