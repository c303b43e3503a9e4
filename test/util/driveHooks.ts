/**
 * Test fixtures for the built-in hooks: a training graph with a global
 * step, a session wrapper that counts the runs hooks make on the raw session, and
 * {@link driveHooks}, which runs hooks through the real `MonitoredSession` pipeline.
 */

import type { Clock } from "../../src/time/Clock.js";
import type { Logger } from "../../src/Logger.js";
import { MonitoredSession } from "../../src/pipeline/MonitoredSession.js";
import { Graph, type GraphSession, type OpFn } from "../../src/session/Graph.js";
import type { Feeds, FetchResult, Fetches, RunMetadata, RunOptions, Session } from "../../src/session/Session.js";
import type { SessionRunHook } from "../../src/hook/SessionRunHook.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { RecordingLogger } from "../../src/testing/RecordingLogger.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";

/** Options of {@link trainingGraph}. */
export interface TrainingGraphOptions {
  /** The global step's name (default `global_step`); `null` builds a graph without one. */
  readonly globalStepName?: string | null;
  /** How much `train` adds to the global step per run (default 1; 0 freezes it). */
  readonly stepsPerRun?: number;
  /** Extra ops by name. */
  readonly ops?: Readonly<Record<string, OpFn>>;
}

/**
 * A graph with a global step and ops: `train` adds `stepsPerRun` to the global step,
 * `set_global_step` assigns the fed `global_step_value`, `noop` does nothing.
 */
export const trainingGraph = (options: TrainingGraphOptions = {}): Graph => {
  const g = new Graph();
  const name = options.globalStepName === undefined ? "global_step" : options.globalStepName;
  if (name !== null) {
    const step = g.globalStep(name);
    const delta = options.stepsPerRun ?? 1;
    g.op("train", (ctx) => ctx.assignAdd(step, delta));
    g.op("set_global_step", (ctx) => ctx.assign(step, ctx.feed<number>("global_step_value")));
  }
  g.op("noop", () => null);
  for (const [opName, fn] of Object.entries(options.ops ?? {})) g.op(opName, fn);
  return g;
};

/** Sets the global step of a raw session, outside any hooked run. */
export const setGlobalStep = async (session: Session, value: number): Promise<void> => {
  await session.run("set_global_step", { global_step_value: value });
};

/**
 * Wraps a session and records the fetches of every run made through it, so a test can see
 * the extra runs a hook makes on the raw session (e.g. a true global-step read).
 */
export class CountingSession implements Session {
  readonly runs: Fetches[] = [];
  constructor(readonly inner: GraphSession) {}
  get variables(): GraphSession["variables"] {
    return this.inner.variables;
  }
  get globalStepName(): string | undefined {
    return this.inner.globalStepName;
  }
  run<const F extends Fetches>(fetches: F, feeds?: Feeds, options?: RunOptions, runMetadata?: RunMetadata): Promise<FetchResult<F>> {
    this.runs.push(fetches);
    return this.inner.run(fetches, feeds, options, runMetadata);
  }
  close(): void {
    this.inner.close();
  }
  /** How many runs fetched exactly `name` on its own (a hook's raw read). */
  readsOf(name: string): number {
    return this.runs.filter((f) => f === name).length;
  }
}

/** Options of {@link driveHooks}. */
export interface DriveHooksOptions {
  readonly hooks: readonly SessionRunHook[];
  /** The graph to run (default: {@link trainingGraph}). */
  readonly graph?: Graph;
  /** The global step each created session starts at (default 0). */
  readonly initialGlobalStep?: number;
  /** Called on each new raw session after initialization (e.g. to restore state). */
  readonly onCreate?: (session: CountingSession, creation: number) => void | Promise<void>;
  readonly clock?: Clock;
  readonly logger?: Logger;
}

/** What {@link driveHooks} returns. */
export interface Driven {
  readonly sess: MonitoredSession;
  readonly clock: Clock;
  /**
   * The printer the session's log observer writes to; tests of what a user sees assert on
   * `events` instead, and keep this for the plain-logger path.
   */
  readonly logger: RecordingLogger | Logger;
  /** Every event of the session's `events$`, from before creation on (its lines are `log` events). */
  readonly events: EventRecorder;
  /** Every raw session created so far, the current one last. */
  readonly sessions: CountingSession[];
  /** The current raw session. */
  readonly raw: CountingSession;
}

/**
 * Runs `hooks` through a real `MonitoredSession` on Graph sessions. Hooks get the clock and
 * logger only through `begin(env)`, as in an application; `events` records the session's
 * `events$` from before the hooks begin.
 */
export const driveHooks = async (options: DriveHooksOptions): Promise<Driven> => {
  const graph = options.graph ?? trainingGraph();
  const clock = options.clock ?? new VirtualClock();
  const logger = options.logger ?? new RecordingLogger();
  const events = new EventRecorder();
  const sessions: CountingSession[] = [];
  const sess = await MonitoredSession.create({
    sessionCreator: {
      createSession: async () => {
        const s = new CountingSession(graph.session());
        await s.variables.initialize();
        if (options.initialGlobalStep !== undefined) await setGlobalStep(s.inner, options.initialGlobalStep);
        await options.onCreate?.(s, sessions.length);
        sessions.push(s);
        return s;
      },
    },
    hooks: options.hooks,
    clock,
    logger,
    // An observer, not a subscription after create(): hooks speak in begin() and at creation.
    // A failed creation also errors events$ (kept as events.failure); create() rejects with it.
    observer: events.observer,
    stopGracePeriodSecs: 0,
  });
  return {
    sess,
    clock,
    logger,
    events,
    sessions,
    get raw() {
      return sessions[sessions.length - 1] as CountingSession;
    },
  };
};
