/**
 * Child of the overhead benchmark: `hooks6 − bare` in a process that runs only those two
 * variants, as a job with one session does (see `alone` in overhead.bench.ts). Same steps and
 * rounds as the parent; prints one JSON line. With the argument `asyncRaw`, hooks6's raw session
 * has `run` only (no `runMaybeSync`).
 */
import { monitoredNoop, noopSession } from "./noopSession.js";
import { ROUNDS, sixHooks, STEPS_PER_ROUND, timeSteps } from "./overhead.bench.js";
import { median, round } from "./stats.js";

const bare = noopSession();
const m6 = await monitoredNoop(sixHooks(), undefined, process.argv[2] === "asyncRaw");
const variants: [string, () => Promise<unknown>][] = [
  ["bare", () => bare.run("train")],
  ["hooks6", () => m6.run("train")],
];
for (const [, run] of variants) await timeSteps(run, STEPS_PER_ROUND);
const samples: Record<string, number[]> = { bare: [], hooks6: [] };
for (let r = 0; r < ROUNDS; r++) {
  for (const [k, run] of variants) samples[k]?.push(await timeSteps(run, STEPS_PER_ROUND));
}
await m6.close();
const b = samples["bare"] as number[];
const h = samples["hooks6"] as number[];
process.stdout.write(
  `${JSON.stringify({
    bareUsPerStep: round(median(b)),
    hooks6UsPerStep: round(median(h)),
    hooks6MinusBareUs: round(median(h.map((x, i) => x - (b[i] as number)))),
  })}\n`,
);
