/**
 * The `launch --chaos` schedule: the document's codec (every problem with its path), the file's
 * reader (hostile input: one line per problem, naming the file), and the plan it gives: the same
 * seed the same faults, in time order, within the duration, each kind on the tasks it may hit,
 * the weights respected over many draws; an explicit list as written.
 */
import * as E from "fp-ts/lib/Either.js";
import { describe, expect, it } from "vitest";

import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { decodeChaosSchedule, FAULT_KINDS, planFaults, readChaosSchedule, type ChaosSchedule } from "../../src/cli/chaosSchedule.js";
import { mulberry32 } from "../../src/util/mulberry32.js";

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
    const plan = planFaults(valid({ ...issue36, durationSecs: 2_000_000, meanIntervalSecs: 20 }), 2);
    expect(plan.length).toBeGreaterThan(90_000);
    const share = (k: string): number => plan.filter((f) => f.kind === k).length / plan.length;
    expect(share("sigterm")).toBeCloseTo(0.4, 1);
    expect(share("sigkillWorker")).toBeCloseTo(0.3, 1);
    for (const k of ["sigkillChief", "freeze", "opError"]) expect(share(k)).toBeCloseTo(0.1, 1);
    const meanGap = (plan[plan.length - 1]?.atMs ?? 0) / plan.length;
    expect(meanGap / 20_000).toBeCloseTo(1, 1);
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
    expect(issues({ seed: 1, durationSecs: 10, kinds: { sigterm: 1 } }).join("\n")).toMatch(/meanIntervalSecs: give exactly one of meanIntervalSecs, times and faults \(none is given\)/);
    expect(issues({ seed: 1, durationSecs: 10, meanIntervalSecs: 1, times: [1], kinds: { sigterm: 1 } }).join("\n")).toMatch(/exactly one of meanIntervalSecs, times and faults \(meanIntervalSecs and times are given\)/);
    expect(issues({ seed: 1, durationSecs: 10, meanIntervalSecs: 1, kinds: {} }).join("\n")).toMatch(/kinds.*give at least one kind a weight above 0/);
    expect(issues({ seed: 1.5, durationSecs: -1, meanIntervalSecs: 1, kinds: { sigterm: -1, boom: 1 } }).length).toBeGreaterThanOrEqual(3);
    // from: training takes no opError (its time is handed to the task as it starts), and only its two values.
    expect(issues({ from: "training", faults: [{ atSecs: 1, kind: "opError", target: "chief:0" }] }).join("\n")).toMatch(/from: training does not take opError faults .*use from: launch/);
    expect(issues({ from: "training", durationSecs: 10, times: [1], kinds: { sigterm: 1, opError: 1 } }).join("\n")).toMatch(/from: training does not take opError faults/);
    expect(issues({ from: "later", faults: [{ atSecs: 1, kind: "sigterm" }] }).join("\n")).toMatch(/from: .*launch or training/);
    expect(issues({ from: "training", faults: [{ atSecs: 1, kind: "freeze", target: "chief:0" }] })).toEqual([]);
  });

  it("an explicit list of faults: in time order (ties as written), each with its id, a missing target drawn among the tasks its kind may hit", () => {
    const plan = planFaults(
      valid({ faults: [{ atSecs: 20, kind: "sigkillChief" }, { atSecs: 5, kind: "sigterm", target: "worker:1" }, { atSecs: 5, kind: "opError", target: "chief:0" }, { atSecs: 9, kind: "freeze" }], freezeSecs: 2 }),
      2,
    );
    expect(plan.map((f) => [f.id, f.atMs, f.kind, f.target])).toEqual([
      [0, 5000, "sigterm", "worker:1"],
      [1, 5000, "opError", "chief:0"],
      [2, 9000, "freeze", plan[2]?.target],
      [3, 20_000, "sigkillChief", "chief:0"],
    ]);
    expect(plan[2]?.target).toMatch(/^(chief:0|worker:[01])$/);
    expect(plan[2]?.durationMs).toBe(2000);
  });

  describe("the file", () => {
    const dir = mkdtempSync(join(tmpdir(), "chaos-schedule-"));
    const file = (name: string, text: string): string => {
      const path = join(dir, name);
      writeFileSync(path, text);
      return path;
    };
    const lines = (path: string, workers = 2): string[] => {
      const r = readChaosSchedule(path, workers);
      return E.isLeft(r) ? r.left : [];
    };

    it("YAML or JSON gives the plan; the same file, the same faults", () => {
      const yaml = file("ok.yaml", "seed: 3\ndurationSecs: 600\nmeanIntervalSecs: 60\nkinds: { sigterm: 1, sigkillWorker: 1 }\n");
      const a = readChaosSchedule(yaml, 2);
      const b = readChaosSchedule(file("ok.json", JSON.stringify({ seed: 3, durationSecs: 600, meanIntervalSecs: 60, kinds: { sigterm: 1, sigkillWorker: 1 } })), 2);
      expect(E.isRight(a) && E.isRight(b) && a.right.faults.length > 0).toBe(true);
      expect(E.isRight(a) ? a.right.faults : undefined).toEqual(E.isRight(b) ? b.right.faults : null);
    });

    it("hostile or wrong files: one line per problem, naming the file and the fix; never a throw", () => {
      expect(lines(join(dir, "missing.yaml"))).toEqual([expect.stringMatching(/^--chaos .*missing\.yaml does not exist: give a JSON or YAML file/)]);
      mkdirSync(join(dir, "a-dir"), { recursive: true });
      expect(lines(join(dir, "a-dir"))[0]).toMatch(/is not a regular file/);
      expect(lines(file("big.yaml", `# ${"x".repeat(1024 * 1024)}\n`))[0]).toMatch(/bytes, more than a schedule's 1048576/);
      expect(lines(file("syntax.yaml", "seed: [1\n"))[0]).toMatch(/syntax\.yaml: .*YAML syntax error/);
      expect(lines(file("list.yaml", "- 1\n- 2\n"))[0]).toMatch(/\(root\): expected a schedule object/);
      expect(lines(file("empty.yaml", ""))[0]).toMatch(/\(root\): expected a schedule object/);
      expect(lines(file("bomb.yaml", "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"))[0]).toMatch(/bomb\.yaml: /);
      expect(lines(file("flood.yaml", "durationSecs: 100000\nmeanIntervalSecs: 1\nkinds: { sigterm: 1 }\n"))[0]).toMatch(/more than 10000: raise meanIntervalSecs or lower durationSecs/);
      expect(lines(file("worker.yaml", "faults: [{ atSecs: 1, kind: sigterm, target: worker:5 }]\n"))[0]).toMatch(/faults\[0\]\.target: worker:5 is not a task of this group \(launch --workers 3 has worker:0 to worker:1\)/);
      expect(lines(file("alone.yaml", "faults: [{ atSecs: 1, kind: sigkillWorker }]\n"), 0)[0]).toMatch(/sigkillWorker needs a worker/);
      expect(lines(file("chief.yaml", "faults: [{ atSecs: 1, kind: sigkillChief, target: worker:0 }]\n")).join("\n")).toMatch(/sigkillChief hits chief:0/);
      expect(lines(file("both.yaml", "faults: [{ atSecs: 1, kind: sigterm }]\nkinds: { sigterm: 1 }\n")).join("\n")).toMatch(/kinds: is not used with faults/);
      expect(lines(file("nokinds.yaml", "times: [1]\n")).join("\n")).toMatch(/kinds: is required with meanIntervalSecs or times/);
      expect(lines(file("noduration.yaml", "meanIntervalSecs: 5\nkinds: { sigterm: 1 }\n")).join("\n")).toMatch(/durationSecs: is required with meanIntervalSecs/);
      expect(lines(file("badkind.yaml", "faults: [{ atSecs: 1, kind: boom }]\n")).join("\n")).toMatch(/faults\[0\]\.kind/);
      // Past a timer's longest wait (or Infinity in ms): refused, never a fault that fires at once.
      expect(lines(file("far.yaml", "faults: [{ atSecs: 3000000, kind: sigterm }]\n")).join("\n")).toMatch(/faults\[0\]\.atSecs: expected a number of seconds from 0 to 2000000/);
      expect(lines(file("huge.yaml", "faults: [{ atSecs: 1e306, kind: sigterm }]\nfreezeSecs: 1e300\n")).length).toBe(2);
      expect(lines(file("lone.yaml", "durationSecs: 60\nmeanIntervalSecs: 5\nkinds: { sigkillWorker: 1 }\n"), 0)[0]).toMatch(/kinds: only sigkillWorker has a weight, and this group has no worker/);
    });

    it("every truncation and seeded byte flips of valid files (YAML and JSON, drawn and explicit): a plan of valid faults or one-line problems naming the file; never a throw", () => {
      const texts = [
        "seed: 1\ndurationSecs: 600\nmeanIntervalSecs: 60\nkinds: { sigterm: 0.4, sigkillWorker: 0.3, sigkillChief: 0.1, freeze: 0.1, opError: 0.1 }\nfreezeSecs: 15\n",
        "faults:\n  - { atSecs: 30, kind: sigterm, target: worker:1 }\n  - { atSecs: 90, kind: sigkillChief }\n  - { atSecs: 95, kind: freeze, target: chief:0 }\nfreezeSecs: 5\n",
        JSON.stringify({ seed: 7, durationSecs: 120, times: [5, 10, 60], kinds: { opError: 1, freeze: 2 } }),
      ];
      const tasks = new Set(["chief:0", "worker:0", "worker:1"]);
      const random = mulberry32(36);
      let cases = 0;
      const check = (name: string, bytes: Uint8Array): void => {
        const path = join(dir, name);
        writeFileSync(path, bytes);
        const r = readChaosSchedule(path, 2);
        cases += 1;
        if (E.isLeft(r)) {
          expect(r.left.length, name).toBeGreaterThan(0);
          for (const line of r.left) {
            expect(line.startsWith(`--chaos ${path}`), line).toBe(true);
            expect(line.includes("\n"), line).toBe(false);
          }
          return;
        }
        for (const f of r.right.faults) {
          expect(Number.isFinite(f.atMs) && f.atMs >= 0 && f.atMs <= 2_000_000_000, JSON.stringify(f)).toBe(true);
          expect(FAULT_KINDS).toContain(f.kind);
          expect(tasks.has(f.target), JSON.stringify(f)).toBe(true);
        }
      };
      for (const [i, text] of texts.entries()) {
        const bytes = Buffer.from(text, "utf8");
        for (let end = 0; end <= bytes.length; end++) check(`cut-${i}-${end}.yaml`, bytes.subarray(0, end));
        for (let k = 0; k < 200; k++) {
          const flipped = Buffer.from(bytes);
          const at = Math.floor(random() * flipped.length);
          flipped[at] = Math.floor(random() * 256);
          check(`flip-${i}-${k}.yaml`, flipped);
        }
      }
      expect(cases).toBeGreaterThan(800);
      rmSync(dir, { recursive: true, force: true });
    });
  });
});
