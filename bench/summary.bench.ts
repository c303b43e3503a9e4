/**
 * Summary writer throughput: scalar events encoded, framed, written and fsynced by a final
 * `flush()`, as a training loop calling `addScalar` every step would drive it.
 *
 * - `scalarsPerSec`: `SummaryWriter.addScalar` (default options: maxQueue 10) × N, then `flush()`.
 * - `scalarsPerSecGenericEncoder`: the same events through the generic path (building a
 *   `Summary.Value` object and encoding it with `encodeEvent`), to keep the hand-written scalar
 *   fast path (`writeScalarEvent`) honest: it must stay clearly faster or go.
 * - `scalarsPerSecYielding`: the loop yields to the event loop (`setImmediate`) after every 10
 *   events, as an async training loop does, so batches of about `maxQueue` records go out in
 *   many small background writes instead of one large one.
 * - baseline `rawWriteFsyncPerSec`: writing the very bytes the writer produced with one
 *   `fs.write` + `fsync`, measured in the same run; `ratioToRawWrite` = writer time / raw time.
 * - `idleSummaryHookUsPerStep`: what a `SummarySaverHook` adds per step on the steps where it
 *   does not write (`saveSteps` huge, after its first run), over the same MonitoredSession
 *   without it, on a session whose ops do nothing. The two variants are interleaved in each
 *   round; the figure is the median of the per-round differences.
 *
 * Medians over repeated runs after a warm-up, because the machine is shared and noisy.
 */
import { closeSync, fsyncSync, mkdtempSync, openSync, readFileSync, rmSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { firstValueFrom } from "rxjs";
import { SummarySaverHook } from "../hooks/SummarySaverHook.js";
import type { MonitoredSession } from "../src/pipeline/MonitoredSession.js";
import { SummaryWriter } from "../src/summary/SummaryWriter.js";
import { monitoredNoop } from "./noopSession.js";
import { elapsedMs, median, round } from "./stats.js";

const EVENTS = 200_000;
const YIELDING_EVENTS = 50_000;
const RUNS = 7;
const HOOK_STEPS = 200_000;
const HOOK_ROUNDS = 9;

const timeWriter = async (dir: string, generic: boolean): Promise<{ ms: number; path: string }> => {
  const writer = new SummaryWriter(dir);
  await firstValueFrom(writer.flushed$); // the file_version record; not part of the measurement
  const options = generic ? { displayName: "loss" } : undefined; // any option takes the generic path
  const start = process.hrtime.bigint();
  for (let step = 0; step < EVENTS; step++) writer.addScalar("loss", 1 / (step + 1), step, options);
  await writer.flush();
  const ms = elapsedMs(start);
  await writer.close();
  return { ms, path: writer.path };
};

const timeYielding = async (dir: string): Promise<number> => {
  const writer = new SummaryWriter(dir);
  await firstValueFrom(writer.flushed$);
  const start = process.hrtime.bigint();
  for (let step = 0; step < YIELDING_EVENTS; step++) {
    writer.addScalar("loss", 1 / (step + 1), step);
    if (step % 10 === 9) await new Promise<void>((r) => setImmediate(r));
  }
  await writer.flush();
  const ms = elapsedMs(start);
  await writer.close();
  return ms;
};

const timeRawWrite = (dir: string, bytes: Uint8Array): number => {
  const start = process.hrtime.bigint();
  const fd = openSync(join(dir, "raw.bin"), "wx");
  let off = 0;
  while (off < bytes.length) off += writeSync(fd, bytes, off, bytes.length - off);
  fsyncSync(fd);
  closeSync(fd);
  return elapsedMs(start);
};

const timeSteps = async (sess: MonitoredSession, steps: number): Promise<number> => {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < steps; i++) await sess.run("train");
  return Number(process.hrtime.bigint() - t0) / 1e3 / steps;
};

/** Microseconds per step without a hook and with an idle SummarySaverHook, per round. */
const timeIdleHook = async (dir: string): Promise<{ none: number[]; idle: number[] }> => {
  const writer = new SummaryWriter(dir);
  const hook = new SummarySaverHook({ saveSteps: 1e12, summaryWriter: writer, summaryOp: ["loss", "accuracy"] });
  const none = await monitoredNoop([]);
  const idle = await monitoredNoop([hook]);
  await idle.run("train"); // the first run writes START and the summaries; all later runs are idle
  const variants: [keyof Awaited<ReturnType<typeof timeIdleHook>>, MonitoredSession][] = [
    ["none", none],
    ["idle", idle],
  ];
  for (const [, sess] of variants) await timeSteps(sess, HOOK_STEPS); // warm-up
  const samples = { none: [] as number[], idle: [] as number[] };
  for (let r = 0; r < HOOK_ROUNDS; r++) {
    for (const [k, sess] of variants) samples[k].push(await timeSteps(sess, HOOK_STEPS));
  }
  await none.close();
  await idle.close();
  await writer.close();
  return samples;
};

export default async (): Promise<Record<string, unknown>> => {
  const root = mkdtempSync(join(tmpdir(), "summary-bench-"));
  try {
    const writerMs: number[] = [];
    const genericMs: number[] = [];
    const rawMs: number[] = [];
    const yieldingMs: number[] = [];
    let bytesPerEvent = 0;
    for (let run = 0; run <= RUNS; run++) {
      const fast = await timeWriter(join(root, `fast${run}`), false);
      const generic = await timeWriter(join(root, `generic${run}`), true);
      const bytes = readFileSync(fast.path);
      const raw = timeRawWrite(join(root, `fast${run}`), bytes);
      const yielding = await timeYielding(join(root, `yielding${run}`));
      bytesPerEvent = bytes.length / (EVENTS + 1);
      if (run === 0) continue; // warm-up (JIT, page cache)
      writerMs.push(fast.ms);
      genericMs.push(generic.ms);
      rawMs.push(raw);
      yieldingMs.push(yielding);
    }
    const hook = await timeIdleHook(join(root, "idle-hook"));
    const writer = median(writerMs);
    const generic = median(genericMs);
    const raw = median(rawMs);
    return {
      events: EVENTS,
      runs: RUNS,
      bytesPerEvent: round(bytesPerEvent, 1),
      scalarsPerSec: Math.round(EVENTS / (writer / 1000)),
      scalarsPerSecTarget: 500_000,
      scalarsPerSecGenericEncoder: Math.round(EVENTS / (generic / 1000)),
      scalarsPerSecYielding: Math.round(YIELDING_EVENTS / (median(yieldingMs) / 1000)),
      baseline: "raw fs write + fsync of the same bytes",
      rawWriteFsyncPerSec: Math.round(EVENTS / (raw / 1000)),
      ratioToRawWrite: round(writer / raw, 2),
      idleSummaryHookUsPerStep: round(median(hook.idle.map((t, i) => t - (hook.none[i] as number)))),
      idleSummaryHookTargetUs: 0.2,
      idleSummaryHookMedianUsPerStep: { noHook: round(median(hook.none)), idleHook: round(median(hook.idle)) },
      idleSummaryHookStepsPerRound: HOOK_STEPS,
      idleSummaryHookRounds: HOOK_ROUNDS,
      medianMs: { writer: round(writer, 1), genericEncoder: round(generic, 1), rawWriteFsync: round(raw, 1) },
      loadAverage1m: round((await import("node:os")).loadavg()[0] ?? 0, 2),
    };
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
};
