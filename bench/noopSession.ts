/** The no-op session and monitored-session builder shared by the per-step benchmarks. */
import { mapFetchesAny } from "../src/session/fetches.js";
import { silentLogger } from "../src/Logger.js";
import { MonitoredSession } from "../src/pipeline/MonitoredSession.js";
import type { Feeds, Fetches, Session } from "../src/session/Session.js";
import type { SessionRunHook } from "../src/hook/SessionRunHook.js";

/**
 * A session whose `train` op increments the global step and whose other names read constants.
 * Like the Graph and TensorFlow.js sessions it answers synchronously through `runMaybeSync`,
 * unless `asyncOnly` (a session with `run` alone, as a remote one would be).
 */
export const noopSession = (asyncOnly = false): Session => {
  let step = 0;
  const value = (name: string): unknown => {
    if (name === "train") return ++step;
    if (name === "global_step") return step;
    return 0.5;
  };
  const evaluate = (fetches: Fetches): unknown => (typeof fetches === "string" ? value(fetches) : mapFetchesAny(fetches, value));
  const session: Session = {
    globalStepName: "global_step",
    run: ((fetches: Fetches, _feeds?: Feeds) => Promise.resolve(evaluate(fetches))) as Session["run"],
  };
  if (!asyncOnly) session.runMaybeSync = ((fetches: Fetches, _feeds?: Feeds) => evaluate(fetches)) as NonNullable<Session["runMaybeSync"]>;
  return session;
};

/**
 * A monitored session over a fresh {@link noopSession} with `hooks` (default event-loop yield
 * unless given; `asyncOnly`: a raw session without `runMaybeSync`).
 */
export const monitoredNoop = (hooks: SessionRunHook[], yieldIntervalMs?: number, asyncOnly = false): Promise<MonitoredSession> =>
  MonitoredSession.create({
    sessionCreator: { createSession: async () => noopSession(asyncOnly) },
    hooks,
    logger: silentLogger,
    ...(yieldIntervalMs === undefined ? {} : { yieldIntervalMs }),
  });
