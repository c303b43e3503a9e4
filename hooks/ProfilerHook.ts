/**
 * `ProfilerHook`: every N steps or seconds, writes a timeline of one training step in Chrome's
 * trace-event format (TensorFlow's `tf.estimator.ProfilerHook`), and the step's run metadata
 * for TensorBoard.
 *
 * @module
 */

import { randomBytes } from "node:crypto";
import { mkdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as t from "io-ts";
import type { Subscription } from "rxjs";

import { Bool, decodeOptions, defaulted, exactlyOneOf, optional, PositiveInt, PositiveNumber, struct } from "../src/codec.js";
import type { Session } from "../src/session/Session.js";
import type { HookTimingSpan, SessionEventOf } from "../src/events/SessionEvent.js";
import {
  SessionRunArgs,
  SessionRunHook,
  type HookEnv,
  type SessionRunContext,
  type SessionRunValues,
} from "../src/hook/SessionRunHook.js";
import { fileWriterCache, type EventInput } from "../src/summary/index.js";
import { globalStepNameOf, readGlobalStep, stepValue } from "./internal/globalStep.js";
import { encodeRunMetadata, type NodeStats } from "./internal/runMetadata.js";
import { SecondOrStepTimer } from "./SecondOrStepTimer.js";
import { warn } from "./internal/services.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Where the hook records run metadata: a `SummaryWriter`, or anything with `addEvent`. */
export interface RunMetadataSink {
  addEvent(event: EventInput): void;
}

/** Options of {@link ProfilerHook}: exactly one of `saveSteps` and `saveSecs`. */
export interface ProfilerHookOptions {
  /** Profile every this many global steps. */
  readonly saveSteps?: number | null | undefined;
  /** Profile every this many seconds of the session's clock. */
  readonly saveSecs?: number | null | undefined;
  /** Where `timeline-<step>.json` files and the run metadata go (default `""`: the current directory). */
  readonly outputDir?: string | undefined;
  /**
   * Draw flow arrows (default `true`): from each hook's `beforeRun` to the session run it
   * added fetches to, and from the run to each hook's `afterRun` that received results.
   */
  readonly showDataflow?: boolean | undefined;
  /** Add a memory counter track: the process's heap and resident set size when the step ended (default `false`). */
  readonly showMemory?: boolean | undefined;
  /** Records `step_<n>` run metadata here instead of the writer the session's writer cache (default `fileWriterCache`) holds for `outputDir`. */
  readonly runMetadataWriter?: RunMetadataSink | null | undefined;
}

/** One trace event of Chrome's trace-event format (the subset the hook writes). */
export interface TraceEvent {
  readonly name: string;
  readonly ph: "X" | "M" | "C" | "s" | "f";
  readonly ts?: number;
  readonly dur?: number;
  readonly pid: number;
  readonly tid?: number;
  readonly cat?: string;
  readonly id?: number;
  readonly bp?: "e";
  readonly args?: Readonly<Record<string, unknown>>;
}

/** The JSON document of a `timeline-<step>.json` file. */
export interface ChromeTrace {
  readonly traceEvents: readonly TraceEvent[];
  readonly displayTimeUnit: "ms";
  /** The step, the run and the clock time (epoch ms) that `ts` 0 stands for. */
  readonly otherData: { readonly globalStep: number; readonly run: number; readonly startTimeMs: number };
}

/** TensorFlow's `RunOptions.FULL_TRACE`. */
const FULL_TRACE = 3;
const PID = 1;
const STEP_TID = 1;
const IO_TID = 2;
/** The device named in run metadata: everything here runs on the host. */
const DEVICE = "/job:localhost/replica:0/task:0/device:CPU:0";

/** A checkpoint or summary write seen on the session's events. */
type IoEvent = SessionEventOf<"checkpointSaved"> | SessionEventOf<"summaryWritten">;

/** A profiled step waiting for its run's `hookTimings`. */
interface PendingProfile {
  readonly globalStep: number;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Profiles one step every `saveSteps` steps or `saveSecs` seconds, with TensorFlow's semantics:
 *
 * - It never profiles the first run: that run only anchors the timer at the (stale) global
 *   step. It predicts the step each run will reach (`nextStep`) to decide before the run.
 * - A profiled run asks for `traceLevel: FULL_TRACE`, reads the true global step after it, and
 *   writes `<outputDir>/timeline-<step>.json` atomically (a temporary file renamed) and a
 *   `TaggedRunMetadata` event tagged `step_<step>` to the log directory's event file. The
 *   timeline is on disk when the profiled `run` resolves, as TensorFlow's is when its
 *   `after_run` returns.
 *
 * The timeline covers the step (from the first `beforeRun` to the last `afterRun`), the raw
 * `session.run`, every hook's `beforeRun`/`afterRun`, and the checkpoint and summary writes of
 * that step. Open it in Perfetto (ui.perfetto.dev) or chrome://tracing. The hook spans come
 * from the session's `hookTimings` events. With `saveSteps` the hook turns hook timing on only
 * for the runs it profiles, so the other runs pay nothing for it; with `saveSecs` the next
 * profiled run cannot be predicted, and timing stays on while the hook runs.
 *
 * @example
 * ```ts
 * import { ProfilerHook } from "monitored-session/hooks";
 *
 * const profiler = new ProfilerHook({ saveSteps: 1000, outputDir: "logs/profile" });
 * ```
 */
export class ProfilerHook extends SessionRunHook {
  /** The codec of the options, shared with the configuration registry. */
  static readonly optionsCodec = struct(
    "ProfilerHook",
    "Writes a Chrome trace (timeline-<step>.json) of one step every N steps or seconds, and its run metadata for TensorBoard.",
    {
      saveSteps: optional(PositiveInt, "Profile every this many steps."),
      saveSecs: optional(PositiveNumber, "Profile every this many seconds."),
      outputDir: defaulted(t.string, "Where the timelines and the run metadata go.", ""),
      showDataflow: defaulted(Bool, "Draw flow arrows from hooks' beforeRun to the run and from the run to their afterRun.", true),
      showMemory: defaulted(Bool, "Add a counter track with the process's heap and resident memory.", false),
    },
    exactlyOneOf("saveSteps", "saveSecs"),
  );

  private timer: SecondOrStepTimer;
  private readonly saveSteps: number | undefined;
  private readonly saveSecs: number | undefined;
  private readonly outputDir: string;
  private readonly showDataflow: boolean;
  private readonly showMemory: boolean;
  private writer: RunMetadataSink | undefined;
  private env: HookEnv | undefined;
  private events: Subscription | undefined;
  private globalStepName: string | undefined;
  private nextStep: number | undefined;
  private requested = false;
  /** Releases the hook-timing request while one is held (the next run may be profiled). */
  private releaseTiming: (() => void) | undefined;
  private pending: PendingProfile | undefined;
  private io: IoEvent[] = [];

  constructor(options: ProfilerHookOptions) {
    super();
    const { saveSteps, saveSecs, outputDir, showDataflow, showMemory } = decodeOptions(ProfilerHook.optionsCodec, options, "ProfilerHook");
    this.timer = new SecondOrStepTimer({ everySteps: saveSteps, everySecs: saveSecs });
    this.saveSteps = saveSteps;
    this.saveSecs = saveSecs;
    this.outputDir = outputDir;
    this.showDataflow = showDataflow;
    this.showMemory = showMemory;
    this.writer = options.runMetadataWriter ?? undefined;
  }

  override begin(env: HookEnv): void {
    this.end$();
    this.env = env;
    // The timer reads the session's clock (a VirtualClock in tests).
    this.timer = new SecondOrStepTimer({ everySteps: this.saveSteps, everySecs: this.saveSecs, clock: env.clock });
    // The session's writer cache, as the other summary hooks use (a session may inject its own).
    this.writer ??= (env.writerCache ?? fileWriterCache).getWriter(this.outputDir === "" ? "." : this.outputDir, { clock: env.clock, logger: env.logger });
    this.nextStep = undefined;
    this.globalStepName = undefined;
    if (this.saveSecs !== undefined) this.armTiming();
    this.events = env.events$?.subscribe((e) => {
      switch (e.type) {
        case "checkpointSaved":
        case "summaryWritten":
          this.io.push(e);
          break;
        case "hookTimings":
          this.savePending(e);
          break;
        case "beforeRun":
          // The profiled run's hookTimings never came (a later hook's afterRun threw): write
          // what is known rather than attribute this run's timings to it.
          this.savePending(undefined);
          break;
        case "afterRun":
          this.io = [];
          break;
        default:
          break;
      }
    });
  }

  override afterCreateSession(session: Session): void {
    this.globalStepName = globalStepNameOf(session, "ProfilerHook");
  }

  override beforeRun(ctx: SessionRunContext): SessionRunArgs {
    const name = (this.globalStepName ??= globalStepNameOf(ctx.session, "ProfilerHook"));
    const next = this.nextStep;
    // The session decides whether to time a run when it starts, so timing was turned on after
    // the previous run (see planNext). Outside a monitored session there is no timing to wait for.
    this.requested = next !== undefined && this.timer.shouldTriggerForStep(next);
    return SessionRunArgs(name, undefined, this.requested ? { traceLevel: FULL_TRACE } : undefined);
  }

  override afterRun(ctx: SessionRunContext, values: SessionRunValues): void | Promise<void> {
    const stale = stepValue(values.results);
    if (this.nextStep === undefined) this.timer.updateLastTriggeredStep(stale);
    if (!this.requested) return this.planNext(stale + 1);
    return readGlobalStep(ctx.session, this.globalStepName as string).then((step) => {
      this.timer.updateLastTriggeredStep(step);
      if (this.events === undefined) this.save(step, undefined);
      else this.pending = { globalStep: step };
      this.planNext(step);
    });
  }

  override end(): void {
    this.end$();
  }

  /**
   * Resolves at once: a timeline is on disk when its profiled run resolves (written before it
   * returns). Kept for code written when the write ran in the background.
   */
  flush(): Promise<void> {
    return Promise.resolve();
  }

  // -------------------------------------------------------------------------------------------
  // utils
  // -------------------------------------------------------------------------------------------

  /**
   * Predicts the next run's step and holds hook timing for it only if it will be profiled.
   * With `saveSecs` that cannot be predicted (time passes between runs), so timing stays on.
   */
  private planNext(step: number): void {
    this.nextStep = step + 1;
    if (this.saveSecs !== undefined || this.timer.shouldTriggerForStep(this.nextStep)) this.armTiming();
    else this.disarmTiming();
  }

  private armTiming(): void {
    this.releaseTiming ??= this.env?.requestHookTiming?.();
  }

  private disarmTiming(): void {
    this.releaseTiming?.();
    this.releaseTiming = undefined;
  }

  /** Stops following the session: a profile still waiting for its timings is written without them. */
  private end$(): void {
    this.events?.unsubscribe();
    this.events = undefined;
    this.disarmTiming();
    this.savePending(undefined);
    this.io = [];
  }

  private savePending(timings: SessionEventOf<"hookTimings"> | undefined): void {
    const p = this.pending;
    if (p === undefined) return;
    this.pending = undefined;
    this.save(p.globalStep, timings);
  }

  /** Writes the timeline and the run metadata of `step` in the background. */
  private save(step: number, timings: SessionEventOf<"hookTimings"> | undefined): void {
    const env = this.env;
    const now = env?.clock.now() ?? 0;
    const trace = chromeTrace({
      globalStep: step,
      timings,
      io: this.io,
      endMs: now,
      showDataflow: this.showDataflow,
      memory: this.showMemory ? process.memoryUsage() : undefined,
    });
    this.recordRunMetadata(step, trace, now);
    const path = join(this.outputDir, `timeline-${step}.json`);
    // Written now, as TensorFlow's hook writes it in `after_run`: the file is on disk when the
    // profiled `run` resolves (a timeline is tens of kilobytes, written once per profiled step).
    try {
      mkdirSync(this.outputDir === "" ? "." : this.outputDir, { recursive: true });
      replaceFileSync(path, JSON.stringify(trace));
    } catch (e) {
      // A failed profile must not stop training: logged, and emitted as a warning event.
      const message = `ProfilerHook: writing ${path} failed: ${e instanceof Error ? e.message : String(e)}`;
      warn({}, env, message, e);
    }
  }

  private recordRunMetadata(step: number, trace: ChromeTrace, nowMs: number): void {
    const startUs = trace.otherData.startTimeMs * 1000;
    const nodeStats: NodeStats[] = trace.traceEvents
      .filter((e) => e.ph === "X" && e.tid === STEP_TID)
      .map((e) => ({ nodeName: e.name, allStartMicros: startUs + (e.ts ?? 0), durationMicros: e.dur ?? 0, timelineLabel: e.name }));
    this.writer?.addEvent({
      wallTime: nowMs / 1000,
      step,
      taggedRunMetadata: { tag: `step_${step}`, runMetadata: encodeRunMetadata([{ device: DEVICE, nodeStats }]) },
    });
  }
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** What a timeline is built from. */
interface TraceInput {
  readonly globalStep: number;
  /** The run's `hookTimings`, or `undefined` when the hook ran outside a monitored session. */
  readonly timings: SessionEventOf<"hookTimings"> | undefined;
  /** Checkpoint and summary writes seen since the previous run ended. */
  readonly io: readonly IoEvent[];
  /** The clock when the step's last `afterRun` returned (epoch ms). */
  readonly endMs: number;
  readonly showDataflow: boolean;
  readonly memory: NodeJS.MemoryUsage | undefined;
}

/**
 * The Chrome trace of one step. Times are microseconds from the step's start; `otherData`
 * gives that start on the clock.
 */
const chromeTrace = (input: TraceInput): ChromeTrace => {
  const { timings, globalStep } = input;
  const startMs = timings?.runStartMs ?? input.endMs;
  const us = (ms: number): number => Math.round((ms - startMs) * 1000 * 1000) / 1000;
  const spans: readonly HookTimingSpan[] = timings?.spans ?? [];
  const endMs = Math.max(input.endMs, ...spans.map((s) => s.startMs + s.durationMs));
  const run = timings?.run ?? 0;
  const events: TraceEvent[] = [
    { name: "process_name", ph: "M", pid: PID, args: { name: "monitored-session" } },
    { name: "thread_name", ph: "M", pid: PID, tid: STEP_TID, args: { name: "training step" } },
    { name: "thread_name", ph: "M", pid: PID, tid: IO_TID, args: { name: "checkpoints and summaries" } },
    { name: `step ${globalStep}`, ph: "X", cat: "step", ts: 0, dur: us(endMs), pid: PID, tid: STEP_TID, args: { globalStep, run } },
  ];
  if (timings !== undefined) {
    const runStart = us(timings.sessionRunStartMs);
    const runEnd = us(timings.sessionRunStartMs + timings.sessionRunMs);
    events.push({ name: "session.run", ph: "X", cat: "session", ts: runStart, dur: runEnd - runStart, pid: PID, tid: STEP_TID, args: { run } });
    let flow = 0;
    for (const s of spans) {
      const ts = us(s.startMs);
      const dur = Math.round(s.durationMs * 1000 * 1000) / 1000;
      events.push({ name: `${s.hook}.${s.method}`, ph: "X", cat: "hook", ts, dur, pid: PID, tid: STEP_TID, args: { hook: s.hook, method: s.method } });
      if (!input.showDataflow) continue;
      // Fetches flow from a hook's beforeRun into the run; results flow from the run to afterRun.
      flow += 1;
      const [from, to] = s.method === "beforeRun" ? [ts + dur, runStart] : [runEnd, ts];
      const name = s.method === "beforeRun" ? "fetches" : "results";
      events.push({ name, ph: "s", cat: "dataflow", id: flow, ts: from, pid: PID, tid: STEP_TID });
      events.push({ name, ph: "f", bp: "e", cat: "dataflow", id: flow, ts: to, pid: PID, tid: STEP_TID });
    }
  }
  for (const e of input.io) {
    if (e.time < startMs) continue;
    const ts = us(e.time - e.durationMs);
    const dur = Math.round(e.durationMs * 1000 * 1000) / 1000;
    events.push(
      e.type === "checkpointSaved"
        ? { name: "checkpoint save", ph: "X", cat: "checkpoint", ts, dur, pid: PID, tid: IO_TID, args: { globalStep: e.globalStep, path: e.path } }
        : { name: "summary write", ph: "X", cat: "summary", ts, dur, pid: PID, tid: IO_TID, args: { globalStep: e.globalStep, hook: e.hook } },
    );
  }
  if (input.memory !== undefined) {
    events.push({ name: "memory", ph: "C", ts: us(endMs), pid: PID, args: { heapUsedBytes: input.memory.heapUsed, rssBytes: input.memory.rss } });
  }
  return { traceEvents: events, displayTimeUnit: "ms", otherData: { globalStep, run, startTimeMs: startMs } };
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/**
 * Writes `path` through a temporary file renamed over it, so a reader (or a crash) never sees
 * half a timeline. No fsync: a timeline is diagnostics, not state to recover from (checkpoints
 * use the checkpoint module's durable writes).
 */
const replaceFileSync = (path: string, text: string): void => {
  const temp = `${path}.tmp-${process.pid}-${randomBytes(4).toString("hex")}`;
  try {
    writeFileSync(temp, text);
    renameSync(temp, path);
  } catch (e) {
    rmSync(temp, { force: true });
    throw e;
  }
};
