/**
 * The hooked layer's unrolled hook calls (src/pipeline/hookDispatch.ts) against its generic
 * loops: random hook sets, answering synchronously or with promises, fetching, feeding,
 * requesting stops and throwing, over raw sessions with `run` only or with `runMaybeSync`
 * (answering synchronously, or now and then with a promise), must give the same calls in the
 * same order, the same raw runs, results, errors and stop decisions every way.
 */
import { describe, expect, it } from "vitest";
import { HookedSession } from "../../src/pipeline/HookedSession.js";
import { HookTimingSwitch } from "../../src/pipeline/HookTimingSwitch.js";
import { compileHookDispatch } from "../../src/pipeline/hookDispatch.js";
import type { Feeds, Fetches, Session } from "../../src/session/Session.js";
import { SessionRunArgs, type SessionRunContext, type SessionRunHook, type SessionRunValues } from "../../src/hook/SessionRunHook.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { seededRandom } from "../util/seed.js";

type BeforeKind = "none" | "undefined" | "fetch" | "feed" | "fetchFeed" | "asyncFetch" | "asyncUndefined" | "throw";
type AfterKind = "none" | "record" | "async" | "stop" | "throw";

interface HookPlan {
  readonly before: readonly BeforeKind[]; // by run
  readonly after: readonly AfterKind[];
}

const RUNS = 4;

const makeHooks = (plans: readonly HookPlan[], trace: unknown[]): SessionRunHook[] =>
  plans.map((plan, i) => {
    let run = 0;
    const h: { -readonly [K in keyof SessionRunHook]: SessionRunHook[K] } = { name: `h${i}` };
    if (plan.before.some((k) => k !== "none")) {
      h.beforeRun = (ctx: SessionRunContext) => {
        const kind = plan.before[run] ?? "undefined";
        trace.push(["before", i, run, ctx.originalArgs.fetches]);
        switch (kind) {
          case "none":
          case "undefined":
            return undefined;
          case "fetch":
            return SessionRunArgs(`t${i}`);
          case "feed":
            return SessionRunArgs(null, { [`f${i}`]: run });
          case "fetchFeed":
            return SessionRunArgs({ a: `t${i}`, b: [`t${i}`] }, { [`f${i}`]: run });
          case "asyncFetch":
            return Promise.resolve(SessionRunArgs(`t${i}`)) as never;
          case "asyncUndefined":
            return Promise.resolve(undefined) as never;
          case "throw":
            throw new Error(`before ${i} at run ${run}`);
        }
      };
    }
    if (plan.after.some((k) => k !== "none")) {
      h.afterRun = (ctx: SessionRunContext, values: SessionRunValues) => {
        const kind = plan.after[run] ?? "record";
        trace.push(["after", i, run, values.results, values.options, Object.keys(values.runMetadata)]);
        run++;
        switch (kind) {
          case "none":
          case "record":
            return undefined;
          case "async":
            return Promise.resolve().then(() => {
              trace.push(["afterAsyncDone", i]);
            });
          case "stop":
            ctx.requestStop();
            return undefined;
          case "throw":
            throw new Error(`after ${i}`);
        }
      };
    } else {
      // A hook without afterRun still counts its runs.
      const before = h.beforeRun;
      if (before !== undefined) {
        h.beforeRun = (ctx) => {
          const r = before(ctx);
          run++;
          return r;
        };
      }
    }
    return h as SessionRunHook;
  });

/**
 * How the raw session answers: `run` only (the reference), `runMaybeSync` answering
 * synchronously, or `runMaybeSync` answering with a promise on odd runs.
 */
type RawKind = "async" | "sync" | "mixed";

/**
 * A raw session that records its runs and answers each name with `name@run`; on run
 * `failAt` it fails (a rejection from `run`, a throw from `runMaybeSync`).
 */
const recordingSession = (trace: unknown[], kind: RawKind = "async", failAt = -1): Session => {
  let run = 0;
  const map = (f: Fetches, r: number): unknown => {
    if (typeof f === "string") return `${f}@${r}`;
    if (f === null) return null;
    if (Array.isArray(f)) return (f as Fetches[]).map((x) => map(x, r));
    return Object.fromEntries(Object.entries(f).map(([k, v]) => [k, map(v as Fetches, r)]));
  };
  const evaluate = (fetches: Fetches, feeds?: Feeds): { r: number; out: unknown } => {
    const r = run++;
    trace.push(["raw", fetches, feeds === undefined ? undefined : { ...feeds }]);
    if (r === failAt) throw new Error(`raw failure at run ${r}`);
    return { r, out: map(fetches, r) };
  };
  const session: Session = {
    run: ((fetches: Fetches, feeds?: Feeds) => {
      try {
        return Promise.resolve(evaluate(fetches, feeds).out);
      } catch (e) {
        return Promise.reject(e);
      }
    }) as Session["run"],
  };
  if (kind !== "async") {
    session.runMaybeSync = ((fetches: Fetches, feeds?: Feeds) => {
      const { r, out } = evaluate(fetches, feeds);
      return kind === "mixed" && r % 2 === 1 ? Promise.resolve(out) : out;
    }) as NonNullable<Session["runMaybeSync"]>;
  }
  return session;
};

const drive = async (plans: readonly HookPlan[], unroll: boolean, kind: RawKind = "async", failAt = -1): Promise<unknown[]> => {
  const trace: unknown[] = [];
  const sess = new HookedSession(recordingSession(trace, kind, failAt), makeHooks(plans, trace), undefined, new VirtualClock(), new HookTimingSwitch(false), unroll);
  for (let r = 0; r < RUNS; r++) {
    if (sess.shouldStop()) {
      trace.push(["stopped", r]);
      break;
    }
    try {
      trace.push(["result", await sess.run(r % 2 === 0 ? "main" : ["main", { x: "main" }], r === 3 ? { user: 1 } : undefined, { traceLevel: r })]);
    } catch (e) {
      trace.push(["error", (e as Error).message]);
    }
  }
  return trace;
};

const pick = <T>(rand: () => number, xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)] as T;

const randomPlans = (rand: () => number): HookPlan[] => {
  const n = 1 + Math.floor(rand() * 9);
  const befores: BeforeKind[] = ["none", "undefined", "fetch", "feed", "fetchFeed", "asyncFetch", "asyncUndefined", "throw"];
  const afters: AfterKind[] = ["none", "record", "async", "stop", "throw"];
  return Array.from({ length: n }, () => {
    const noBefore = rand() < 0.2;
    const noAfter = rand() < 0.2;
    // Throws are rare, so that most scenarios run all their runs.
    const b = (): BeforeKind => (noBefore ? "none" : rand() < 0.03 ? "throw" : pick(rand, befores.filter((k) => k !== "none" && k !== "throw")));
    const a = (): AfterKind => (noAfter ? "none" : rand() < 0.03 ? "throw" : rand() < 0.05 ? "stop" : pick(rand, afters.filter((k) => k === "record" || k === "async")));
    return { before: Array.from({ length: RUNS }, b), after: Array.from({ length: RUNS }, a) };
  });
};

describe("unrolled hook calls", () => {
  it("behave exactly like the generic loops on random hook sets, over raw sessions that answer synchronously or not", async () => {
    const rng = seededRandom("hookDispatch differential");
    const rand = () => rng.next();
    const kinds: RawKind[] = ["sync", "mixed"];
    for (let scenario = 0; scenario < 300; scenario++) {
      const plans = randomPlans(rand);
      // Now and then the raw session itself fails on one run.
      const failAt = rand() < 0.1 ? Math.floor(rand() * RUNS) : -1;
      const kind = pick(rand, kinds);
      const label = `scenario ${scenario} (raw ${kind}, failAt ${failAt}): ${JSON.stringify(plans)}`;
      // The reference: the generic loops over a raw session with `run` only.
      const loop = await drive(plans, false, "async", failAt);
      expect(await drive(plans, true, "async", failAt), label).toEqual(loop);
      expect(await drive(plans, true, kind, failAt), label).toEqual(loop);
      expect(await drive(plans, false, kind, failAt), label).toEqual(loop);
    }
  });

  it("settle a run whose raw session and hooks all answer synchronously before `run` returns", async () => {
    const trace: unknown[] = [];
    const plans: HookPlan[] = [{ before: ["fetch", "fetch", "fetch", "fetch"], after: ["record", "record", "record", "record"] }];
    const sess = new HookedSession(recordingSession(trace, "sync"), makeHooks(plans, trace), undefined, new VirtualClock(), new HookTimingSwitch(false));
    const p = sess.run("main");
    // Every hook has been called, and the promise is already settled: a race against a
    // promise resolved after it still loses to it.
    expect(trace.map((t) => (t as unknown[])[0])).toEqual(["before", "raw", "after"]);
    await expect(Promise.race([p, Promise.resolve("later")])).resolves.toBe("main@0");
  });

  it("a feed that two hooks give is the same error both ways", async () => {
    const plans: HookPlan[] = [
      { before: ["feed", "feed", "feed", "feed"], after: ["record", "record", "record", "record"] },
      { before: ["feed", "feed", "feed", "feed"], after: ["record", "record", "record", "record"] },
    ];
    // Both hooks feed a different key, so the run works; then force a clash through a hook
    // that feeds h0's key.
    const clash: SessionRunHook = { name: "clash", beforeRun: () => SessionRunArgs(null, { f0: 9 }) };
    for (const unroll of [false, true]) {
      const trace: unknown[] = [];
      const sess = new HookedSession(recordingSession(trace), [...makeHooks(plans, trace), clash], undefined, new VirtualClock(), new HookTimingSwitch(false), unroll);
      await expect(sess.run("main")).rejects.toThrow("Same tensor is fed by two hooks. Conflict(s): ['f0']");
    }
  });

  it("are not built where code generation from strings is disallowed: the loops serve instead", () => {
    const saved = globalThis.Function;
    // What `node --disallow-code-generation-from-strings` makes `new Function` do.
    const refusing = function () {
      throw new EvalError("Code generation from strings disallowed for this context");
    } as unknown as FunctionConstructor;
    globalThis.Function = refusing;
    try {
      const host = { collect: () => undefined, resumeBefore: () => Promise.resolve(), resumeAfter: () => Promise.resolve() };
      expect(compileHookDispatch([{ name: "h", beforeRun: () => undefined }], ["h"], [0], [], host)).toBeUndefined();
    } finally {
      globalThis.Function = saved;
    }
  });
});
