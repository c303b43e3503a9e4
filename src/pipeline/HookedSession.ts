/**
 * The hooked layer (TensorFlow's `_HookedSession`): calls every hook's `beforeRun`, merges the
 * fetches, feeds and options they return into the caller's run, splits the results back out,
 * calls `afterRun`, honours stop requests, and emits the run's events (and, while hook timing
 * is on, `hookTimings`). This is the per-step hot path.
 *
 * @module
 */

import type { Clock } from "../time/Clock.js";
import { RuntimeError } from "../errors.js";
import type { Feeds, Fetches, RunMetadata, RunOptions, Session } from "../session/Session.js";
import type { HookTimingSpan } from "../events/SessionEvent.js";
import { hookName, SessionRunArgs, SessionRunContext, type SessionRunHook } from "../hook/SessionRunHook.js";
import { compileHookDispatch, type HookDispatch } from "./hookDispatch.js";
import type { HookTimingSwitch } from "./HookTimingSwitch.js";
import { isPromiseLike } from "../util/promise.js";
import type { SessionEventStream } from "./SessionEventStream.js";
import { failRun, WrappedSession, type ErrorHandler, type RunRequest } from "./WrappedSession.js";

/**
 * TensorFlow's `_HookedSession`: merges hooks' run arguments into each run.
 *
 * The hot path is written so that a run costs one derived promise on top of the raw run:
 * hooks that return plain values are called synchronously, and the error handling of the
 * outer layers is passed down as `onError` instead of being chained as more promises. A raw
 * session with `runMaybeSync` that answers synchronously costs not even that: the run's promise
 * is created settled, after every hook has been called.
 */
export class HookedSession extends WrappedSession {
  private stopFlag = false;
  private readonly beforeHooks: readonly number[];
  private readonly afterHooks: readonly number[];
  private readonly names: readonly string[];
  private runCount = 0;
  /** How many hooks fetched in the last run: the size of the next run's fetch arrays. */
  private fetchHint = 0;
  /** The raw session answers synchronously where it can (it has `runMaybeSync`). */
  private readonly maybeSync: boolean;
  /** The hook calls unrolled for these hooks (see hookDispatch.ts); `undefined`: the loops only. */
  private readonly dispatch: HookDispatch<HookedRunContext> | undefined;

  constructor(
    private readonly raw: Session,
    private readonly hooks: readonly SessionRunHook[],
    private readonly events: SessionEventStream | undefined,
    private readonly clock: Clock,
    private readonly timing: HookTimingSwitch,
    /** `false` keeps to the generic loops (the reference the unrolled calls are tested against). */
    unroll = true,
  ) {
    super(raw);
    this.beforeHooks = indicesWith(hooks, "beforeRun");
    this.afterHooks = indicesWith(hooks, "afterRun");
    this.names = hooks.map(hookName);
    this.maybeSync = typeof raw.runMaybeSync === "function";
    this.dispatch = unroll ? compileHookDispatch(hooks, this.names, this.beforeHooks, this.afterHooks, this) : undefined;
  }

  override checkStop(): boolean {
    return this.stopFlag;
  }

  override shouldStop(): boolean {
    // The raw session never stops by itself; only this layer's flag matters.
    return this.stopFlag || this.inner === undefined;
  }

  override run(fetches: Fetches, feeds?: Feeds, options?: RunOptions, runMetadata?: RunMetadata, onError?: ErrorHandler): Promise<unknown> {
    try {
      if (this.shouldStop()) throw new RuntimeError("Run called even after should_stop requested.");
      // One object carries the whole run (the hooks' context and what is merged for the raw
      // run): fewer allocations per step than a context plus a separate accumulator.
      const ctx = new HookedRunContext(fetches, feeds, this.raw, options, runMetadata, onError, this.timing.on ? startTiming(this.clock.now()) : undefined);
      const dispatch = this.dispatch;
      const pending = dispatch !== undefined && ctx.timed === undefined ? dispatch.before(ctx) : this.callBefore(ctx, 0);
      if (pending !== undefined) return pending.then(() => this.callRaw(ctx), onError === undefined ? undefined : (e: unknown) => onError(e, ctx));
      return this.callRaw(ctx);
    } catch (e) {
      return failRun(e, onError, { fetches, feeds, options, runMetadata });
    }
  }

  /** Calls `beforeRun` from the `k`-th hook on; synchronous until a hook returns a promise. */
  private callBefore(ctx: HookedRunContext, k: number): Promise<void> | undefined {
    const idx = this.beforeHooks;
    const hooks = this.hooks;
    const timed = ctx.timed;
    for (; k < idx.length; k++) {
      const i = idx[k] as number;
      ctx.currentHook = this.names[i];
      const start = timed === undefined ? 0 : this.clock.now();
      const r = (hooks[i] as SessionRunHook).beforeRun?.(ctx);
      // Most hooks answer synchronously (`undefined` or a SessionRunArgs): test the common
      // answers before the thenable check, which reads `then` off every returned object.
      if (r === undefined || r === null) {
        if (timed !== undefined) this.addSpan(timed, i, "beforeRun", start);
        continue;
      }
      if (isPromiseLike(r)) {
        const next = k + 1;
        return Promise.resolve(r).then((args) => {
          if (timed !== undefined) this.addSpan(timed, i, "beforeRun", start);
          this.collect(i, args, ctx);
          return this.callBefore(ctx, next);
        });
      }
      if (timed !== undefined) this.addSpan(timed, i, "beforeRun", start);
      this.collect(i, r, ctx);
    }
    return undefined;
  }

  /** The unrolled calls' way back into {@link callBefore} after a hook answered with a promise. */
  resumeBefore(ctx: HookedRunContext, k: number, pending: PromiseLike<SessionRunArgs | undefined | void>): Promise<void> {
    const i = this.beforeHooks[k] as number;
    return Promise.resolve(pending).then((args) => {
      this.collect(i, args, ctx);
      return this.callBefore(ctx, k + 1);
    });
  }

  /** The unrolled calls' way back into {@link callAfter} after an `afterRun` answered with a promise. */
  resumeAfter(ctx: HookedRunContext, outputs: unknown, k: number, j: number, pending: PromiseLike<void>): Promise<void> {
    return Promise.resolve(pending).then(() => this.callAfter(ctx, outputs, k + 1, j));
  }

  private addSpan(timed: RunTiming, i: number, method: HookTimingSpan["method"], startMs: number): void {
    timed.spans.push({ hook: this.names[i] as string, method, startMs, durationMs: this.clock.now() - startMs });
  }

  /** Merges hook `i`'s run arguments into the run (called by the unrolled calls too). */
  collect(i: number, args: SessionRunArgs | undefined | void, ctx: HookedRunContext): void {
    if (args === undefined || args === null) return;
    const fetches = args.fetches;
    if (fetches !== null && fetches !== undefined) {
      let all = ctx.allFetches;
      let hookIdx = ctx.hookIdx;
      if (all === undefined || hookIdx === undefined) {
        // Sized for as many fetching hooks as the last run had, so that steady runs neither grow
        // the arrays (a literal grown by `push` copies its backing store) nor trim them (setting
        // `length` is a slow runtime call).
        const n = Math.max(1, this.fetchHint);
        all = ctx.allFetches = new Array<Fetches>(n + 1);
        hookIdx = ctx.hookIdx = new Array<number>(n);
        all[0] = ctx.fetches;
      }
      const j = ctx.fetchCount++;
      hookIdx[j] = i;
      all[j + 1] = fetches;
    }
    const f = args.feeds;
    if (f !== undefined && f !== null && hasKeys(f)) {
      if (ctx.hookFeeds === undefined) ctx.hookFeeds = { ...f };
      else {
        const conflicts = Object.keys(f).filter((key) => key in (ctx.hookFeeds as object));
        if (conflicts.length > 0) throw sameTensorFed("two hooks", conflicts);
        Object.assign(ctx.hookFeeds, f);
      }
    }
    if (args.options !== undefined) ctx.runOptions = mergeRunOptions(ctx.runOptions, args.options);
  }

  private callRaw(ctx: HookedRunContext): Promise<unknown> {
    const onError = ctx.onError;
    let p: Promise<unknown>;
    // A feed conflict or a raw session that throws instead of rejecting goes to `onError` like
    // any run error, also when an async `beforeRun` put this call in a promise callback.
    try {
      const feeds = ctx.feeds;
      const hookFeeds = ctx.hookFeeds;
      let merged: Feeds | undefined;
      if (hookFeeds === undefined) merged = feeds;
      else if (feeds === undefined) merged = hookFeeds;
      else {
        const conflicts = Object.keys(hookFeeds).filter((k) => k in feeds);
        if (conflicts.length > 0) throw sameTensorFed("a SessionRunHook and user", conflicts);
        merged = { ...feeds, ...hookFeeds };
      }
      const all = ctx.allFetches;
      if (all !== undefined) {
        const n = ctx.fetchCount;
        this.fetchHint = n;
        // The raw session gets exactly the fetches (`hookIdx` is read up to `fetchCount` only).
        if (all.length !== n + 1) all.length = n + 1;
      }
      ctx.runOptions ??= EMPTY_OPTIONS;
      ctx.meta = ctx.runMetadata ?? {};
      const run = (ctx.run = ++this.runCount);
      const events = this.events;
      if (events !== undefined && events.observed) {
        events.nextPerRun({ type: "beforeRun", time: this.clock.now(), run, fetches: ctx.fetches, feeds: merged });
      }
      if (ctx.timed !== undefined) ctx.timed.sessionRunStartMs = this.clock.now();
      const raw = this.raw;
      if (this.maybeSync) {
        const out = (raw.runMaybeSync as RawRunMaybeSync).call(raw, ctx.allFetches ?? ctx.fetches, merged, ctx.runOptions, ctx.meta);
        if (!isPromiseLike(out)) return this.afterRawSync(ctx, out);
        p = Promise.resolve(out);
      } else {
        p = (raw.run as RawRun).call(raw, ctx.allFetches ?? ctx.fetches, merged, ctx.runOptions, ctx.meta);
      }
    } catch (e) {
      return failRun(e, onError, ctx);
    }
    // Both callbacks close over the same two values: one context for the pair.
    return p.then((outputs) => this.afterRaw(ctx, outputs), onError === undefined ? undefined : (e: unknown) => onError(e, ctx));
  }

  /**
   * {@link afterRaw} for a raw run that answered synchronously: when every `afterRun` does too,
   * the run's promise is created settled, with no callback and no microtask in between.
   */
  private afterRawSync(ctx: HookedRunContext, outputs: unknown): Promise<unknown> {
    try {
      // A native promise (a hook answered with one) passes through `Promise.resolve` as it is.
      return Promise.resolve(this.afterRunAll(ctx, outputs));
    } catch (e) {
      return failRun(e, ctx.onError, ctx);
    }
  }

  /** After the raw run: `afterRun` of every hook, then the run's end. */
  private afterRaw(ctx: HookedRunContext, outputs: unknown): unknown {
    try {
      return this.afterRunAll(ctx, outputs);
    } catch (e) {
      const onError = ctx.onError;
      if (onError === undefined) throw e;
      return onError(e, ctx);
    }
  }

  /** `afterRun` of every hook, then the run's end: its result, or a promise when a hook answered with one. */
  private afterRunAll(ctx: HookedRunContext, outputs: unknown): unknown {
    const timed = ctx.timed;
    if (timed !== undefined) timed.sessionRunMs = this.clock.now() - timed.sessionRunStartMs;
    const dispatch = this.dispatch;
    const pending = dispatch !== undefined && timed === undefined ? dispatch.after(ctx, outputs) : this.callAfter(ctx, outputs, 0, 0);
    if (pending === undefined) return this.finishRun(ctx, outputs);
    const onError = ctx.onError;
    return pending.then(() => this.finishRun(ctx, outputs), onError === undefined ? undefined : (e: unknown) => onError(e, ctx));
  }

  /**
   * Calls `afterRun` from the `k`-th hook on. `j` walks `hookIdx` (hooks that fetched) in step,
   * as both lists are in ascending hook order.
   */
  private callAfter(ctx: HookedRunContext, outputs: unknown, k: number, j: number): Promise<void> | undefined {
    const idx = this.afterHooks;
    const hooks = this.hooks;
    const hookIdx = ctx.hookIdx;
    const fetchCount = ctx.fetchCount;
    const options = ctx.runOptions as RunOptions;
    const runMetadata = ctx.meta as RunMetadata;
    const timed = ctx.timed;
    for (; k < idx.length; k++) {
      const i = idx[k] as number;
      let results: unknown = null;
      if (hookIdx !== undefined) {
        while (j < fetchCount && (hookIdx[j] as number) < i) j++;
        if (j < fetchCount && hookIdx[j] === i) results = (outputs as unknown[])[j + 1];
      }
      ctx.currentHook = this.names[i];
      const start = timed === undefined ? 0 : this.clock.now();
      const r = (hooks[i] as SessionRunHook).afterRun?.(ctx, { results, options, runMetadata });
      if (r !== undefined && isPromiseLike(r)) {
        const nextK = k + 1;
        const nextJ = j;
        return Promise.resolve(r).then(() => {
          if (timed !== undefined) this.addSpan(timed, i, "afterRun", start);
          return this.callAfter(ctx, outputs, nextK, nextJ);
        });
      }
      if (timed !== undefined) this.addSpan(timed, i, "afterRun", start);
    }
    return undefined;
  }

  private finishRun(ctx: HookedRunContext, outputs: unknown): unknown {
    const callerResult = ctx.allFetches === undefined ? outputs : (outputs as unknown[])[0];
    const events = this.events;
    if (ctx.stopRequested && !this.stopFlag) {
      this.stopFlag = true;
      if (events !== undefined) {
        events.next({ type: "stopRequested", time: this.clock.now(), by: (ctx.stopRequesters ?? []).join(", ") });
      }
    }
    if (events === undefined || !events.observed) return callerResult;
    const run = ctx.run;
    const timed = ctx.timed;
    if (timed !== undefined) {
      const { runStartMs, sessionRunStartMs, sessionRunMs, spans } = timed;
      events.nextPerRun({ type: "hookTimings", time: this.clock.now(), run, runStartMs, sessionRunStartMs, sessionRunMs, spans });
    }
    // Read again: a subscriber may have unsubscribed on the events above.
    if (events.observed) {
      events.nextPerRun({ type: "afterRun", time: this.clock.now(), run, results: callerResult, stopRequested: ctx.stopRequested });
    }
    return callerResult;
  }
}

/**
 * The context the hooked layer gives hooks: it also knows which hook is being called, so that a
 * stop request can be attributed in the `stopRequested` event. It also carries the run's own
 * state (what is merged for the raw run, the error handler), so that a run allocates one object
 * instead of a context and an accumulator; hooks see it typed as `SessionRunContext` only.
 */
class HookedRunContext extends SessionRunContext implements RunRequest {
  /** The hook being called. */
  currentHook: string | undefined = undefined;
  /** The hooks that asked to stop during this run. */
  stopRequesters: string[] | undefined = undefined;
  /** Indices of hooks that requested fetches, ascending. */
  hookIdx: number[] | undefined = undefined;
  /** `[callerFetches, ...hookFetches]` when any hook fetches. */
  allFetches: Fetches[] | undefined = undefined;
  hookFeeds: Record<string, unknown> | undefined = undefined;
  /** How many hooks fetched: the used length of `hookIdx`. */
  fetchCount = 0;
  /** The caller's options merged with the hooks' (`EMPTY_OPTIONS` by the raw run if none). */
  runOptions: RunOptions | undefined;
  /** The run metadata the raw session fills: the caller's, else a fresh one (set by the raw run). */
  meta: RunMetadata | undefined = undefined;
  /** This run's number (set when the raw run starts). */
  run = 0;

  constructor(
    readonly fetches: Fetches,
    readonly feeds: Feeds | undefined,
    session: Session,
    readonly options: RunOptions | undefined,
    readonly runMetadata: RunMetadata | undefined,
    readonly onError: ErrorHandler | undefined,
    /** Set only while hook timing is on. */
    readonly timed: RunTiming | undefined,
  ) {
    super(SessionRunArgs(fetches, feeds), session);
    this.runOptions = options;
  }

  override requestStop(): void {
    super.requestStop();
    if (this.currentHook !== undefined) (this.stopRequesters ??= []).push(this.currentHook);
  }
}

/** The measurements of one run while hook timing is on. */
interface RunTiming {
  readonly runStartMs: number;
  sessionRunStartMs: number;
  sessionRunMs: number;
  readonly spans: HookTimingSpan[];
}

const startTiming = (runStartMs: number): RunTiming => ({ runStartMs, sessionRunStartMs: runStartMs, sessionRunMs: 0, spans: [] });

const hasKeys = (o: object): boolean => {
  for (const _ in o) return true;
  return false;
};

type RawRunMaybeSync = (f: Fetches, d?: Feeds, o?: RunOptions, m?: RunMetadata) => unknown;
type RawRun = (f: Fetches, d?: Feeds, o?: RunOptions, m?: RunMetadata) => Promise<unknown>;

const EMPTY_OPTIONS: RunOptions = Object.freeze({});

const indicesWith = (hooks: readonly SessionRunHook[], method: "beforeRun" | "afterRun"): number[] =>
  hooks.flatMap((h, i) => (typeof h[method] === "function" ? [i] : []));

const sameTensorFed = (by: string, keys: readonly string[]): RuntimeError =>
  new RuntimeError(`Same tensor is fed by ${by}. Conflict(s): [${keys.map((k) => `'${k}'`).join(", ")}]`);

/**
 * Merges hook run options into the caller's as TensorFlow does: numbers take the maximum,
 * flags are OR-ed and tensor watches are concatenated, the caller's first. Returns a new object
 * (the caller's is not mutated, unlike TensorFlow's).
 */
const mergeRunOptions = (base: RunOptions | undefined, extra: RunOptions): RunOptions => {
  const b = base ?? EMPTY_OPTIONS;
  const max = (x: number | undefined, y: number | undefined): number | undefined =>
    x === undefined ? y : y === undefined ? x : Math.max(x, y);
  const or = (x: boolean | undefined, y: boolean | undefined): boolean | undefined =>
    x === undefined && y === undefined ? undefined : x === true || y === true;
  const out: Record<string, unknown> = {};
  const set = (k: keyof RunOptions, v: unknown): void => {
    if (v !== undefined) out[k] = v;
  };
  set("traceLevel", max(b.traceLevel, extra.traceLevel));
  set("timeoutInMs", max(b.timeoutInMs, extra.timeoutInMs));
  set("interOpThreadPool", max(b.interOpThreadPool, extra.interOpThreadPool));
  set("outputPartitionGraphs", or(b.outputPartitionGraphs, extra.outputPartitionGraphs));
  set("reportTensorAllocationsUponOom", or(b.reportTensorAllocationsUponOom, extra.reportTensorAllocationsUponOom));
  set("resetDiskByteUsage", or(b.resetDiskByteUsage, extra.resetDiskByteUsage));
  if (b.debugTensorWatchOpts !== undefined || extra.debugTensorWatchOpts !== undefined) {
    out["debugTensorWatchOpts"] = [...(b.debugTensorWatchOpts ?? []), ...(extra.debugTensorWatchOpts ?? [])];
  }
  return out as RunOptions;
};

