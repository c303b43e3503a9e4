/**
 * `npm run bench -- cluster` in its smoke mode (small sizes, few samples, real processes): the
 * result has every number the issue asks for, and the counts show equal work. Timings are not
 * asserted, only that they are there.
 */
import { describe, expect, it } from "vitest";
import { runClusterBench, SMOKE } from "../../bench/cluster.bench.js";

const positive = expect.any(Number);

describe("the cluster benchmark (smoke mode)", () => {
  it("reports allReduceOverRawTcp, allReduceBusGBps at 2 and 4 ranks, scaling2 (through launch) and collectiveOverheadUs, with equal work counted", { timeout: 600_000 }, async () => {
    const r = await runClusterBench(SMOKE);
    expect(r.smoke).toBe(true);
    expect(r.allReduceOverRawTcp).toBeGreaterThan(0);
    expect(r.allReduceOverRawTcpOnread).toBeGreaterThan(0);
    expect(r.allReduceBusGBps).toMatchObject({ ranks2: { ranks: 2, median: positive }, ranks4: { ranks: 4, median: positive }, boundGBps: positive, boundOnreadGBps: positive });
    expect(r.allReduceBusGBps.ranks2.samples).toHaveLength(SMOKE.samples);
    expect(r.allReduceBusGBps.ranks4.samples).toHaveLength(SMOKE.samples);
    expect(r.scaling2).toBeGreaterThan(0);
    expect(Number.isFinite(r.collectiveOverheadUs)).toBe(true);
    expect(Number.isFinite(r.collectiveOverheadVsAloneUs)).toBe(true);
    // Per step: the group's step − the slower rank's local compute − the all-reduce alone; the skew apart.
    expect(Number.isFinite(r.rankSkewUs)).toBe(true);
    expect(r.rankSkewUs).toBeGreaterThanOrEqual(0);
    expect(Number.isFinite(r.collectiveOverheadPairMediansUs)).toBe(true);
    // The same per-step figure against the all-reduce entered after a step's local compute.
    expect(Number.isFinite(r.collectiveOverheadAfterComputeUs)).toBe(true);
    // The gradients' size: all-reduce against the plain exchange, back to back and after idling.
    expect(r.gradientAllReduceOverRawTcp).toBeGreaterThan(0);
    expect(r.gradientAllReduceOverRawTcpAfterIdle).toBeGreaterThan(0);
    expect(r.gradientSize).toMatchObject({ elements: 101_387, bytes: 101_387 * 4, idleMs: SMOKE.idleMs, samples: SMOKE.smallSamples });
    for (const k of ["allReduceMs", "rawTcpMs", "allReduceAfterIdleMs", "rawTcpAfterIdleMs"] as const) expect(r.gradientSize[k].samples).toHaveLength(SMOKE.smallSamples);
    expect(r.training.gradientAllReduceAfterComputeMs).toBeGreaterThan(0);
    expect(r.training.n2MaxComputeMs).toBeGreaterThan(0);
    expect(r.training.n2OverheadSteps).toBe(SMOKE.rounds * (SMOKE.stepsPerRound - 1));
    expect(Number.isFinite(r.collectiveOverheadSlowerRankUs)).toBe(true);
    expect(r.training.n2GroupStepMs).toBeGreaterThan(0);
    expect(r.training.stepMs).toMatchObject({ n1: positive, n2: positive, n1Pair: positive });

    const bytes = SMOKE.elements * 4;
    expect(r.allReduce).toMatchObject({ bytes, payloadBytesReceivedPerRank: { ranks2: bytes, rawTcp: bytes, ranks4: (bytes * 2 * 3) / 4 } });
    expect(r.allReduce.ranks2Ms.samples).toHaveLength(SMOKE.samples);
    expect(r.allReduce.rawTcpMs.samples).toHaveLength(SMOKE.samples);
    expect(r.allReduce.rawTcpOnreadMs.samples).toHaveLength(SMOKE.samples);
    expect(r.training).toMatchObject({
      parameters: 128 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10,
      batchPerWorker: SMOKE.batch,
      stepsPerProcess: SMOKE.warmupSteps + SMOKE.rounds * SMOKE.stepsPerRound,
      timedStepsPerVariant: SMOKE.rounds * SMOKE.stepsPerRound,
      gradientAllReduceSamples: SMOKE.gradientSamples,
      gradientAllReduceAfterComputeSamples: SMOKE.gradientSamples,
    });
    expect(r.training.scalingPerRound).toHaveLength(SMOKE.rounds);
    expect(r.scaling2Ranks).toBeGreaterThan(0);
    // scaling2 through `launch --workers 1` and `--workers 2` of bench/mlpJob.ts.
    expect(r.launch).toMatchObject({ stepsPerRun: SMOKE.launchSteps, intervalsPerRun: SMOKE.launchSteps / SMOKE.launchLogSteps - 2 });
    expect(r.launch.examplesPerSecond.n1.samples).toHaveLength(SMOKE.launchPairs);
    expect(r.launch.examplesPerSecond.n2.samples).toHaveLength(SMOKE.launchPairs);
    expect(r.launch.scalingPerPair).toHaveLength(SMOKE.launchPairs);
    expect(Object.keys(r.goalsMet)).toEqual(["allReduceOverRawTcp", "scaling2", "collectiveOverheadUs"]);
    expect(Object.keys(r.barsMet)).toEqual(["allReduceOverRawTcp"]);
  });
});
