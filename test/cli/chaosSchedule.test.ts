/**
 * The `launch --chaos` schedule (work in progress): the document's codec (every problem with its
 * path), and the plan it gives: the same seed the same faults, in time order, within the
 * duration, each kind on the tasks it may hit, the weights respected over many draws.
 */
import * as E from "fp-ts/lib/Either.js";
import { describe, expect, it } from "vitest";

import { decodeChaosSchedule, FAULT_KINDS, planFaults, type ChaosSchedule } from "../../src/cli/chaosSchedule.js";

const valid = (u: unknown): ChaosSchedule => {
  const d = decodeChaosSchedule(u);
  if (E.isLeft(d)) throw new Error(d.left.map((i) => `${i.path}: ${i.message}`).join("; "));
  return d.right;
};

const issue36 = { seed: 1, durationSecs: 600, meanIntervalSecs: 60, kinds: { sigterm: 0.4, sigkillWorker: 0.3, sigkillChief: 0.1, freeze: 0.1, opError: 0.1 }, freezeSecs: 15 };

describe("the --chaos schedule", () => {
  it("the issue's benchmark schedule: the same seed gives the same faults, in order, within the duration, each on a task it may hit", () => {
    const a = planFaults(valid(issue36), 2);
    expect(planFaults(valid(issue36), 2)).toEqual(a);
    expect(a.length).toBeGreaterThan(0);
    expect(a.map((f) => f.atMs)).toEqual([...a.map((f) => f.atMs)].sort((x, y) => x - y));
    for (const f of a) {
      expect(f.atMs).toBeGreaterThanOrEqual(0);
      expect(f.atMs).toBeLessThan(600_000);
      if (f.kind === "sigkillChief") expect(f.target).toBe("chief:0");
      if (f.kind === "sigkillWorker") expect(f.target).toMatch(/^worker:[01]$/);
      expect(f.target).toMatch(/^(chief:0|worker:[01])$/);
      expect(f.durationMs).toBe(f.kind === "freeze" ? 15_000 : undefined);
    }
    expect(planFaults(valid({ ...issue36, seed: 2 }), 2)).not.toEqual(a);
  });

  it("over many faults the kinds follow their weights, and the mean gap is the one asked for", () => {
    const plan = planFaults(valid({ ...issue36, durationSecs: 6_000_000 }), 2);
    expect(plan.length).toBeGreaterThan(90_000);
    const share = (k: string): number => plan.filter((f) => f.kind === k).length / plan.length;
    expect(share("sigterm")).toBeCloseTo(0.4, 1);
    expect(share("sigkillWorker")).toBeCloseTo(0.3, 1);
    for (const k of ["sigkillChief", "freeze", "opError"]) expect(share(k)).toBeCloseTo(0.1, 1);
    const meanGap = (plan[plan.length - 1]?.atMs ?? 0) / plan.length;
    expect(meanGap / 60_000).toBeCloseTo(1, 1);
  });

  it("explicit times: those within the duration, sorted; without workers, no sigkillWorker", () => {
    const plan = planFaults(valid({ seed: 7, durationSecs: 100, times: [90, 10, 200, 50], kinds: { sigkillWorker: 1, sigterm: 1 } }), 0);
    expect(plan.map((f) => f.atMs)).toEqual([10_000, 50_000, 90_000]);
    expect(plan.every((f) => f.kind === "sigterm" && f.target === "chief:0")).toBe(true);
    expect(FAULT_KINDS).toHaveLength(5);
  });

  it("bad documents: every problem with its path", () => {
    const issues = (u: unknown): string[] => {
      const d = decodeChaosSchedule(u);
      return E.isLeft(d) ? d.left.map((i) => `${i.path}: ${i.message}`) : [];
    };
    expect(issues({ seed: 1, durationSecs: 10, kinds: { sigterm: 1 } }).join("\n")).toMatch(/meanIntervalSecs: give meanIntervalSecs or times, exactly one of them/);
    expect(issues({ seed: 1, durationSecs: 10, meanIntervalSecs: 1, times: [1], kinds: { sigterm: 1 } }).join("\n")).toMatch(/exactly one of them/);
    expect(issues({ seed: 1, durationSecs: 10, meanIntervalSecs: 1, kinds: {} }).join("\n")).toMatch(/kinds.*give at least one kind a weight above 0/);
    expect(issues({ seed: 1.5, durationSecs: -1, meanIntervalSecs: 1, kinds: { sigterm: -1, boom: 1 } }).length).toBeGreaterThanOrEqual(3);
  });
});
