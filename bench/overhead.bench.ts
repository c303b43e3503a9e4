/**
 * Per-step overhead of the run pipeline, in microseconds per step, on a session whose ops do
 * nothing. `bareUsPerStep` is a plain loop calling the session; the others run the same
 * session through a MonitoredSession with 0, 6 or 50 hooks, with the default event-loop yield
 * (a turn every 5 ms). `hooks6NoYield` turns the timed yield off (`yieldIntervalMs:
 * Infinity`: no clock read per run), so `yieldUs` = hooks6 − hooks6NoYield is what the yield costs
 * per step: the clock read and comparison on every run plus the turns themselves.
 * `hooks6+subscriber` is hooks6 with one no-op subscriber on `events$`, so every run builds and
 * delivers its `beforeRun`/`afterRun` events: `subscriberUs` = hooks6+subscriber − hooks6 is what
 * an observer (the CLI's progress display, say) costs per step. The no-op session answers
 * synchronously through `runMaybeSync`, as the Graph and TensorFlow.js sessions do;
 * `aloneAsyncRaw` is `alone` (below) over the same session without it (`run` only, as a session
 * in another process would be), so `asyncRawUs` = aloneAsyncRaw − alone is what that fast path
 * saves. It runs in a process of its own so that this process keeps the layouts it always had. Medians of many short rounds (differences are medians of per-round differences); the
 * variants are interleaved in each round so that machine noise hits them alike.
 */
import {
  FeedFnHook,
  LoggingTensorHook,
  NanTensorHook,
  StepCounterHook,
  StopAtStepHook,
} from "../hooks/index.js";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

import { systemClock } from "../src/time/Clock.js";
import { EventLoopYield } from "../src/pipeline/EventLoopYield.js";
import { silentLogger } from "../src/Logger.js";
import type { SessionRunHook } from "../src/hook/SessionRunHook.js";
import { monitoredNoop, noopSession } from "./noopSession.js";
import { median, round } from "./stats.js";

/** Steps per round and rounds, here and in bench/overheadAlone.ts. */
export const STEPS_PER_ROUND = 100_000;
export const ROUNDS = 21;

export const sixHooks = (): SessionRunHook[] => [
  new StopAtStepHook({ lastStep: Number.MAX_SAFE_INTEGER }),
  new StepCounterHook({ everyNSteps: 1e12, logger: silentLogger }),
  new LoggingTensorHook({ tensors: ["loss"], atEnd: true, logger: silentLogger }),
  new NanTensorHook({ lossTensor: "loss" }),
  new FeedFnHook({ feedFn: () => ({}) }),
  { name: "noop", beforeRun: () => undefined, afterRun: () => undefined },
];

const noopHooks = (n: number): SessionRunHook[] =>
  Array.from({ length: n }, (_, i) => ({ name: `noop${i}`, beforeRun: () => undefined, afterRun: () => undefined }));

/**
 * The yield check alone, in nanoseconds per run, measured on `EventLoopYield.after` with an
 * already-settled promise: `timed` has an interval that never falls due (the countdown, and a
 * clock read every few runs), `untimed` an infinite one (no clock read), and `clockRead` is one
 * `systemClock.now()`, which a check on every run (the first design) paid each time.
 */
const yieldCheckNs = (): { timed: number; untimed: number; clockRead: number } => {
  const n = 5_000_000;
  const p = Promise.resolve(0);
  const perCall = (f: () => unknown): number => {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) f();
    return Number(process.hrtime.bigint() - t0) / n;
  };
  const timed = new EventLoopYield(systemClock, 1e15);
  const untimed = new EventLoopYield(systemClock, Number.POSITIVE_INFINITY);
  const samples = { timed: [] as number[], untimed: [] as number[], clockRead: [] as number[] };
  for (let r = 0; r < 5; r++) {
    samples.timed.push(perCall(() => timed.after(p)));
    samples.untimed.push(perCall(() => untimed.after(p)));
    samples.clockRead.push(perCall(() => systemClock.now()));
  }
  return { timed: round(median(samples.timed), 1), untimed: round(median(samples.untimed), 1), clockRead: round(median(samples.clockRead), 1) };
};

export const timeSteps = async (run: () => Promise<unknown>, steps: number): Promise<number> => {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < steps; i++) await run();
  return Number(process.hrtime.bigint() - t0) / 1e3 / steps;
};

/**
 * `hooks6 − bare` measured in a process of its own that runs only those two variants
 * (bench/overheadAlone.ts): a job has one session, so the layers' shared call sites see one
 * hook layout, as they do in a user's process. In this process they see five layouts (0, 6 and
 * 50 hooks, with and without the yield and a subscriber), which makes those sites polymorphic
 * and costs every variant a little.
 */
const alone = (raw: "maybeSync" | "asyncRaw"): Promise<Record<string, number>> =>
  new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [...process.execArgv, fileURLToPath(new URL("./overheadAlone.ts", import.meta.url)), raw], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
    const deadline = setTimeout(() => child.kill("SIGKILL"), 300_000);
    child.on("error", reject);
    child.on("exit", (code, signal) => {
      clearTimeout(deadline);
      if (code !== 0) reject(new Error(`bench/overheadAlone.ts exited with ${code ?? signal}`));
      else resolvePromise(JSON.parse(out.trim().split("\n").pop() as string) as Record<string, number>);
    });
  });

/** `alone` and `aloneAsyncRaw`, one process each, and what the synchronous fast path saves. */
const aloneFigures = async (): Promise<Record<string, unknown>> => {
  const sync = await alone("maybeSync");
  const asyncRaw = await alone("asyncRaw");
  return {
    alone: sync,
    aloneAsyncRaw: asyncRaw,
    asyncRawUs: round((asyncRaw["hooks6MinusBareUs"] as number) - (sync["hooks6MinusBareUs"] as number)),
  };
};

export default async (): Promise<Record<string, unknown>> => {
  // Many short rounds: a burst of machine noise spoils a round or two, and the median of the
  // per-round differences (each variant against the bare loop timed right before it, in the
  // same round) leaves them out.
  const steps = STEPS_PER_ROUND;
  const rounds = ROUNDS;
  const bare = noopSession();
  const m0 = await monitoredNoop([]);
  const m6 = await monitoredNoop(sixHooks());
  const m6NoYield = await monitoredNoop(sixHooks(), Number.POSITIVE_INFINITY);
  const m50 = await monitoredNoop(noopHooks(50));
  const m6Sub = await monitoredNoop(sixHooks());
  const subscriber = m6Sub.events$.subscribe(() => undefined);
  const variants: [string, () => Promise<unknown>][] = [
    ["bare", () => bare.run("train")],
    ["hooks0", () => m0.run("train")],
    ["hooks6", () => m6.run("train")],
    ["hooks6NoYield", () => m6NoYield.run("train")],
    ["hooks50", () => m50.run("train")],
    ["hooks6+subscriber", () => m6Sub.run("train")],
  ];
  // Warm up: let the JIT settle and the hooks pass their first (logging) steps.
  for (const [, run] of variants) await timeSteps(run, steps);
  const samples = new Map<string, number[]>(variants.map(([k]) => [k, []]));
  for (let r = 0; r < rounds; r++) {
    for (const [k, run] of variants) samples.get(k)?.push(await timeSteps(run, steps));
  }
  subscriber.unsubscribe();
  for (const m of [m0, m6, m6NoYield, m50, m6Sub]) await m.close();
  const med = (k: string) => median(samples.get(k) ?? []);
  /** Median over rounds of `a − b` within each round. */
  const medDiff = (a: string, b: string) => {
    const xs = samples.get(a) ?? [];
    const ys = samples.get(b) ?? [];
    return median(xs.map((x, i) => x - (ys[i] as number)));
  };
  return {
    stepsPerRound: steps,
    rounds,
    bareUsPerStep: round(med("bare")),
    hooks0UsPerStep: round(med("hooks0")),
    hooks6UsPerStep: round(med("hooks6")),
    hooks50UsPerStep: round(med("hooks50")),
    hooks6NoYieldUsPerStep: round(med("hooks6NoYield")),
    hooks6SubscriberUsPerStep: round(med("hooks6+subscriber")),
    hooks6MinusBareUs: round(medDiff("hooks6", "bare")),
    yieldUs: round(medDiff("hooks6", "hooks6NoYield")),
    hooks6SubscriberMinusBareUs: round(medDiff("hooks6+subscriber", "bare")),
    subscriberUs: round(medDiff("hooks6+subscriber", "hooks6")),
    yieldCheckNsPerRun: yieldCheckNs(),
    ...(await aloneFigures()),
    targetHooks6MinusBareUs: 0.6,
  };
};
