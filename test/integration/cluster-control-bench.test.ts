/**
 * `resumeToFirstStepMs` of `npm run bench -- cluster-control` (bench/resumeToFirstStep.ts) with
 * tiny sizes: a fresh 2-task launch of the bundled job and one resume, real processes. The
 * result has every number and counts every launch done; timings are not asserted.
 */
import { describe, expect, it } from "vitest";
import { measureResumeToFirstStep } from "../../bench/resumeToFirstStep.js";

describe("the cluster-control benchmark's resumeToFirstStepMs (smoke sizes)", () => {
  it("a fresh launch and a resume from its checkpoint, each done at its last step", { timeout: 600_000 }, async () => {
    const r = await measureResumeToFirstStep({ resumes: 1, steps: 10 });
    expect(r).toMatchObject({ stepsPerLaunch: 10, launchesDone: 2, goalMs: 1000 });
    expect(r.resumeToFirstStepMs.samples).toHaveLength(1);
    expect(Number.isFinite(r.resumeToFirstStepMs.median)).toBe(true);
    expect(Number.isFinite(r.freshLaunchToFirstStepMs)).toBe(true);
    expect(typeof r.waitedForPublish.fresh).toBe("boolean");
    expect(r.waitedForPublish.resumes).toBeGreaterThanOrEqual(0);
  });
});
