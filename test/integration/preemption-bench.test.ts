/**
 * The cluster figures of `npm run bench -- preemption` (bench/clusterPreemption.ts) with tiny
 * sizes, real processes: the result has every number of each mode, and the counts show equal
 * work. Timings are not asserted, only that they are there.
 */
import { describe, expect, it } from "vitest";
import { agreementModes, measureAgreement, measureCheckOverhead } from "../../bench/clusterPreemption.js";

const finite = (x: number | null): boolean => x !== null && Number.isFinite(x);

describe("the preemption benchmark's cluster figures (smoke sizes)", () => {
  it("agreementSteps and agreementMs: one launch of 4 tasks per mode, SIGTERM to the chief, 4 durable saves at one run counted (or the stall said)", { timeout: 600_000 }, async () => {
    const r = await measureAgreement({ runs: 1, tasks: 4, seed: 1 });
    expect(r).toMatchObject({ tasks: 4, runsPerMode: 1 });
    for (const mode of agreementModes) {
      const m = r[mode];
      expect(m, mode).toMatchObject({ mode, runs: 1, victims: ["chief:0"], goalSteps: 2 });
      expect(m.agreementSteps.samples, mode).toHaveLength(1);
      expect(m.agreementMs.samples, mode).toHaveLength(1);
      if (mode === "lockstep" && m.stalledRuns === 1) {
        // Lockstep's launch may stall (docs/performance.md): counted, +∞ in the median, what it had done said.
        expect(m.agreementSteps, mode).toEqual({ median: null, samples: [null] });
        expect(m.preemptionCheckpointsSaved, mode).toBe(0);
        expect(m.stalls, mode).toEqual([expect.stringMatching(/^chief:0: no exit 15 s after the SIGTERM: noticed /)]);
        expect(m.goalMet, mode).toBe(false);
        continue;
      }
      expect({ mode, stalledRuns: m.stalledRuns, saved: m.preemptionCheckpointsSaved }).toEqual({ mode, stalledRuns: 0, saved: 4 });
      expect(finite(m.agreementSteps.median), mode).toBe(true);
      expect(finite(m.agreementMs.median), mode).toBe(true);
      for (const k of ["killToLastSaveMs", "saveMs", "stepMs", "noticeMs", "agreedMs", "behindSteps", "lastSaveStartMs", "lastSaveStartSteps"] as const) {
        expect(m[k].samples, `${mode} ${k}`).toHaveLength(1);
        expect(finite(m[k].median), `${mode} ${k}`).toBe(true);
      }
      // The stop vote stores no claim; the coordination service's path starts with one.
      if (mode === "stopVote") expect(m.claimedMs, mode).toBeNull();
      else expect(finite(m.claimedMs?.median ?? null), mode).toBe(true);
      expect(m.saveMs.median).toBeGreaterThan(0);
      expect(m.stepMs.median).toBeGreaterThan(0);
      expect(m.behindSteps.median).toBeGreaterThanOrEqual(0);
    }
  });

  it("clusterCheckOverheadUs: the cluster and the local handler ran the same steps, round by round", async () => {
    const r = await measureCheckOverhead({ rounds: 3, warmupRounds: 1, stepsPerRound: 200 });
    expect(r).toMatchObject({ rounds: 3, stepsPerRound: 200, stepsPerHandler: 800, goalUs: 1 });
    expect(r.diffUsSamples).toHaveLength(3);
    expect(finite(r.clusterCheckOverheadUs)).toBe(true);
    expect(r.localUsPerStep).toBeGreaterThan(0);
    expect(r.clusterUsPerStep).toBeGreaterThan(0);
  });
});
