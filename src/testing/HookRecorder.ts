/**
 * `HookRecorder`: a hook that writes a transcript of every call it receives, optionally
 * requesting fetches, feeds or a stop, or throwing at a chosen call. Share one transcript
 * between several recorders to assert the order in which hooks are called.
 *
 * @example
 * ```ts
 * import { withSession } from "monitored-session";
 * import { FakeSession, FakeSessionCreator, HookRecorder } from "monitored-session/testing";
 * import { expect } from "vitest";
 *
 * const log: string[] = [];
 * const a = new HookRecorder("a", { log }), b = new HookRecorder("b", { log });
 * const sessionCreator = new FakeSessionCreator(() => new FakeSession());
 * await withSession({ sessionCreator, hooks: [a, b] }, (sess) => sess.run("train"));
 * expect(log.slice(0, 4)).toEqual(["a.begin", "b.begin", "a.afterCreateSession", "b.afterCreateSession"]);
 * ```
 *
 * @module
 */

import type { Coordinator } from "../coordinator/Coordinator.js";
import type { Feeds, Fetches, RunOptions, Session } from "../session/Session.js";
import {
  SessionRunArgs,
  type HookEnv,
  type SessionRunContext,
  type SessionRunHook,
  type SessionRunValues,
} from "../hook/SessionRunHook.js";

/** A hook method name. */
export type HookMethod = "begin" | "afterCreateSession" | "beforeRun" | "afterRun" | "end";

/** Options of {@link HookRecorder}. */
export interface HookRecorderOptions {
  /** A shared transcript; entries are `<name>.<method>`. */
  readonly log?: string[];
  /** Fetches to request in every `beforeRun`. */
  readonly fetches?: Fetches;
  /** Feeds to add in every `beforeRun`. */
  readonly feeds?: Feeds;
  /** Run options to add in every `beforeRun`. */
  readonly options?: RunOptions;
  /** Request a stop in `afterRun` of this 1-based run. */
  readonly requestStopAtRun?: number;
  /** Throw `error` from `method` on its `at`-th call (1-based; default the first). */
  readonly throwIn?: { readonly method: HookMethod; readonly error: unknown; readonly at?: number };
  /** Make every method async (returns promises), to test async hooks. */
  readonly async?: boolean;
}

/** A hook that records its calls. */
export class HookRecorder implements SessionRunHook {
  /** Calls per method. */
  readonly counts: Record<HookMethod, number> = { begin: 0, afterCreateSession: 0, beforeRun: 0, afterRun: 0, end: 0 };
  /** The contexts and values seen, in order. */
  readonly runs: { ctx: SessionRunContext; values?: SessionRunValues }[] = [];
  /** Sessions given to `afterCreateSession` and `end`. */
  readonly sessions: { method: "afterCreateSession" | "end"; session: Session; coord?: Coordinator }[] = [];
  readonly log: string[];
  env: HookEnv | undefined;

  constructor(
    readonly name: string = "recorder",
    private readonly opts: HookRecorderOptions = {},
  ) {
    this.log = opts.log ?? [];
  }

  begin(env: HookEnv): void | Promise<void> {
    this.env = env;
    return this.record("begin", undefined);
  }

  afterCreateSession(session: Session, coord: Coordinator): void | Promise<void> {
    this.sessions.push({ method: "afterCreateSession", session, coord });
    return this.record("afterCreateSession", undefined);
  }

  beforeRun(ctx: SessionRunContext): SessionRunArgs | undefined | Promise<SessionRunArgs | undefined> {
    this.runs.push({ ctx });
    const o = this.opts;
    const args =
      o.fetches !== undefined || o.feeds !== undefined || o.options !== undefined
        ? SessionRunArgs(o.fetches ?? null, o.feeds, o.options)
        : undefined;
    return this.record("beforeRun", args);
  }

  afterRun(ctx: SessionRunContext, values: SessionRunValues): void | Promise<void> {
    const last = this.runs[this.runs.length - 1];
    if (last !== undefined && last.ctx === ctx) last.values = values;
    else this.runs.push({ ctx, values });
    const n = this.counts.afterRun + 1;
    if (this.opts.requestStopAtRun === n) ctx.requestStop();
    return this.record("afterRun", undefined);
  }

  end(session: Session): void | Promise<void> {
    this.sessions.push({ method: "end", session });
    return this.record("end", undefined);
  }

  private record<T>(method: HookMethod, value: T): T | Promise<T> {
    this.counts[method]++;
    this.log.push(`${this.name}.${method}`);
    const t = this.opts.throwIn;
    if (t !== undefined && t.method === method && this.counts[method] === (t.at ?? 1)) {
      if (this.opts.async === true) return Promise.reject(t.error);
      throw t.error;
    }
    return this.opts.async === true ? Promise.resolve(value) : value;
  }
}
