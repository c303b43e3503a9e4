/**
 * The hooked layer's calls of `beforeRun` and `afterRun`, unrolled for one session's hooks.
 *
 * A loop over the hooks calls every hook from one call site. With hooks of several classes that
 * site is megamorphic: V8 looks each method up through its stub cache and cannot inline it, which
 * cost about 20 ns per call on the benchmark machine, a quarter of the per-step budget for six
 * hooks. The functions built here call hook `i` from its own call site (`h3.beforeRun(ctx)`), so
 * each site sees one class, stays monomorphic and can be inlined. They are generated once per
 * session with `new Function` from the hooks' *positions* only: no name, option or other user
 * text is ever part of the generated source.
 *
 * They cover the synchronous path only: when a hook returns a promise, the rest of the calls go
 * through the session's generic loop (`resumeBefore`/`resumeAfter`), which also serves hook
 * timing. Where code generation is not allowed (`node --disallow-code-generation-from-strings`),
 * {@link compileHookDispatch} returns `undefined` and the session uses its loop: same behaviour,
 * slower.
 *
 * @module
 */

import type { RunMetadata, RunOptions } from "../session/Session.js";
import type { SessionRunArgs, SessionRunContext, SessionRunHook } from "../hook/SessionRunHook.js";
import { isPromiseLike } from "../util/promise.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What the unrolled calls read and write on a run's context (the hooked layer's run state). */
export interface DispatchContext extends SessionRunContext {
  currentHook: string | undefined;
  readonly hookIdx: number[] | undefined;
  readonly fetchCount: number;
  readonly runOptions: RunOptions | undefined;
  readonly meta: RunMetadata | undefined;
}

/** The session's side of the unrolled calls: merging a hook's arguments and the generic loop. */
export interface DispatchHost<C extends DispatchContext> {
  /** Merges hook `i`'s run arguments into the run. */
  collect(i: number, args: SessionRunArgs, ctx: C): void;
  /** Waits for `pending` (the answer of the `k`-th hook with a `beforeRun`), then calls the rest. */
  resumeBefore(ctx: C, k: number, pending: PromiseLike<SessionRunArgs | undefined | void>): Promise<void>;
  /** Waits for `pending` (the `k`-th `afterRun`), then calls the rest from `k + 1`, `j` as the loop left it. */
  resumeAfter(ctx: C, outputs: unknown, k: number, j: number, pending: PromiseLike<void>): Promise<void>;
}

/** One session's unrolled calls. Each returns `undefined` when every hook answered synchronously. */
export interface HookDispatch<C extends DispatchContext> {
  before(ctx: C): Promise<void> | undefined;
  after(ctx: C, outputs: unknown): Promise<void> | undefined;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Builds the unrolled calls for `hooks`; `beforeIdx`/`afterIdx` are the positions of the hooks
 * that have each method, ascending. `undefined` where code generation is disallowed.
 */
export const compileHookDispatch = <C extends DispatchContext>(
  hooks: readonly SessionRunHook[],
  names: readonly string[],
  beforeIdx: readonly number[],
  afterIdx: readonly number[],
  host: DispatchHost<C>,
): HookDispatch<C> | undefined => {
  const params = hooks.map((_, i) => `h${i}`);
  const before = beforeIdx
    .map(
      (i, k) =>
        `ctx.currentHook = names[${i}]; r = h${i}.beforeRun?.(ctx);` +
        ` if (r !== undefined && r !== null) { if (isPromiseLike(r)) return host.resumeBefore(ctx, ${k}, r); host.collect(${i}, r, ctx); }`,
    )
    .join("\n");
  const after = afterIdx
    .map(
      (i, k) =>
        `results = null; if (hookIdx !== undefined) { while (j < fetchCount && hookIdx[j] < ${i}) j++; if (j < fetchCount && hookIdx[j] === ${i}) results = outputs[j + 1]; }` +
        ` ctx.currentHook = names[${i}]; r = h${i}.afterRun?.(ctx, { results, options, runMetadata });` +
        ` if (r !== undefined && isPromiseLike(r)) return host.resumeAfter(ctx, outputs, ${k}, j, r);`,
    )
    .join("\n");
  const source = `"use strict";
return {
  before(ctx) {
    let r;
    ${before}
    return undefined;
  },
  after(ctx, outputs) {
    const hookIdx = ctx.hookIdx, fetchCount = ctx.fetchCount, options = ctx.runOptions, runMetadata = ctx.meta;
    let j = 0, results, r;
    ${after}
    return undefined;
  },
};`;
  let factory: (...args: unknown[]) => HookDispatch<C>;
  try {
    factory = new Function("host", "names", "isPromiseLike", ...params, source) as typeof factory;
  } catch (e) {
    if (e instanceof EvalError) return undefined;
    throw e;
  }
  return factory(host, names, isPromiseLike, ...hooks);
};
