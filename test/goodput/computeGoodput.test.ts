/**
 * computeGoodput: the figures of goodput logs built record by record, so that every bucket has
 * a hand-computed expectation: a run without a fault, a restart that trains steps again, a
 * preemption, a recoverable failure inside a process, the group of a chief and a worker; and the
 * invariant that productive time and the buckets add up to each task's wall time.
 */
import { describe, expect, it } from "vitest";

import { BADPUT_BUCKETS, computeGoodput, describeGoodput, type GoodputLog, type GoodputRecord } from "../../src/index.js";
import { seededRandom } from "../util/seed.js";

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

const T0 = 1_700_000_000_000;
const at = (secs: number): number => T0 + secs * 1000;

const start = (task: string, secs: number, chief = true, proc = "p1"): GoodputRecord => ({ v: 1, type: "start", t: at(secs), task, proc, pid: 1, chief, processStartMs: at(secs) });
const phase = (bucket: "clusterJoin" | "restore" | "checkpointSave", endSecs: number, secs: number): GoodputRecord => ({ v: 1, type: "phase", t: at(endSecs), bucket, ms: secs * 1000 });
const ready = (secs: number, step: number | null): GoodputRecord => ({ v: 1, type: "ready", t: at(secs), step });
const mark = (secs: number, step: number): GoodputRecord => ({ v: 1, type: "mark", t: at(secs), step });
const end = (secs: number, step: number | null, exitCode: number | null = 0, proc = "p1"): GoodputRecord => ({ v: 1, type: "end", t: at(secs), proc, step, exitCode });

const log = (task: string, records: GoodputRecord[]): GoodputLog => ({ task, path: `/logs/goodput/${task}.jsonl`, records, skippedLines: 0 });

const only = (records: GoodputRecord[]) => {
  const run = computeGoodput([log("local", records)]);
  const task = run.tasks[0];
  if (task === undefined) throw new Error("no task");
  return task;
};

const sumsToTotal = (f: { totalSecs: number; productiveSecs: number; badput: Readonly<Record<string, number>> }): void => {
  const sum = f.productiveSecs + BADPUT_BUCKETS.reduce((n, b) => n + (f.badput[b] ?? 0), 0);
  expect(sum).toBeCloseTo(f.totalSecs, 6);
};

// ---------------------------------------------------------------------------------------------
// tests
// ---------------------------------------------------------------------------------------------

describe("computeGoodput", () => {
  it("one process without a fault: startup until training is ready, saves' blocking time, the rest productive", () => {
    const t = only([start("local", 0), ready(5, 0), phase("checkpointSave", 20, 1), mark(20, 100), phase("checkpointSave", 40, 2), end(45, 200)]);
    expect(t.totalSecs).toBe(45);
    expect(t.badput.startup).toBe(5);
    expect(t.badput.checkpointSave).toBe(3);
    expect(t.productiveSecs).toBe(37);
    expect(t.goodput).toBeCloseTo(37 / 45, 10);
    expect(t.processes).toBe(1);
    expect(t.lastStep).toBe(200);
    expect(t.exitCode).toBe(0);
    sumsToTotal(t);
  });

  it("joining the cluster and restoring are their own buckets, not startup", () => {
    const t = only([start("local", 0), phase("clusterJoin", 4, 3), phase("restore", 6, 1.5), ready(6, 100), end(16, 200)]);
    expect(t.badput).toMatchObject({ startup: 1.5, clusterJoin: 3, restore: 1.5 });
    expect(t.productiveSecs).toBe(10);
    sumsToTotal(t);
  });

  it("a restart: the downtime between processes is infrastructureRecovery, and steps trained again are wastedProgress (interpolated)", () => {
    const t = only([
      start("local", 0),
      ready(2, 0),
      phase("checkpointSave", 10, 0),
      mark(10, 100),
      mark(20, 200),
      // SIGKILLed after its last record at 20 s: no end record.
      start("local", 25),
      phase("restore", 27, 1),
      ready(27, 100),
      mark(37, 150),
      mark(47, 250),
      end(57, 300),
    ]);
    expect(t.processes).toBe(2);
    expect(t.exitCode).toBe(0);
    expect(t.badput.infrastructureRecovery).toBe(5);
    expect(t.badput.startup).toBe(2 + 1);
    expect(t.badput.restore).toBe(1);
    // Step 200 (the first process's highest) passed at 37 + 10 * 50/100 = 42 s: 15 s of 30 trained again.
    expect(t.badput.wastedProgress).toBeCloseTo(15, 10);
    expect(t.productiveSecs).toBeCloseTo(18 + 15, 10);
    expect(t.totalSecs).toBe(57);
    sumsToTotal(t);
  });

  it("a restart that never got back to the highest step: all its training was wasted", () => {
    const t = only([start("local", 0), ready(0, 0), mark(10, 100), start("local", 10), ready(10, 50), mark(15, 80), end(20, 90, 1)]);
    expect(t.badput.wastedProgress).toBe(10);
    expect(t.productiveSecs).toBe(10);
    expect(t.exitCode).toBe(1);
    sumsToTotal(t);
  });

  it("a termination notice: from the notice to the end is preemption, a save after it included", () => {
    const t = only([start("local", 0), ready(1, 0), { v: 1, type: "notice", t: at(11) }, phase("checkpointSave", 12, 1), end(13, 50, 42)]);
    expect(t.badput.preemption).toBe(2);
    expect(t.badput.checkpointSave).toBe(0);
    expect(t.productiveSecs).toBe(10);
    expect(t.exitCode).toBe(42);
    sumsToTotal(t);
  });

  it("a recoverable failure inside a process: down from the abort to the session's re-creation", () => {
    const t = only([start("local", 0), ready(0, 0), { v: 1, type: "aborted", t: at(10) }, ready(14, null), end(20, 60)]);
    expect(t.badput.infrastructureRecovery).toBe(4);
    expect(t.productiveSecs).toBe(16);
    sumsToTotal(t);
  });

  it("a process that never got to train: startup (and its phases) to its last record", () => {
    const t = only([start("local", 0), phase("clusterJoin", 8, 8), end(9, null, 1)]);
    expect(t.badput).toMatchObject({ clusterJoin: 8, startup: 1 });
    expect(t.productiveSecs).toBe(0);
    expect(t.goodput).toBe(0);
    sumsToTotal(t);
  });

  it("the group: the chief's productive time over the span from the first task's start to the last task's end", () => {
    const run = computeGoodput([
      log("chief:0", [start("chief:0", 1), ready(3, 0), end(21, 100)]),
      log("worker:0", [start("worker:0", 0, false), ready(4, 0), end(22, 100)]),
    ]);
    expect(run.tasks.map((t) => [t.task, t.chief])).toEqual([
      ["chief:0", true],
      ["worker:0", false],
    ]);
    const g = run.group;
    expect(g?.chief).toBe("chief:0");
    expect(g?.totalSecs).toBe(22);
    expect(g?.productiveSecs).toBe(18);
    expect(g?.badput.startup).toBe(2);
    // The 2 s the worker ran beyond the chief's span are the group's `other`.
    expect(g?.badput.other).toBe(2);
    if (g !== null && g !== undefined) sumsToTotal(g);
  });

  it("an end written after the successor's start (the lock was released first) is its own process's, by its name (both pid 1, as in containers)", () => {
    const t = only([start("local", 0, true, "a"), ready(1, 0), mark(9, 90), start("local", 10, true, "b"), end(10.5, 100, 42, "a"), ready(12, 100), end(20, 180, 0, "b")]);
    expect(t.processes).toBe(2);
    expect(t.exitCode).toBe(0);
    // The first process's window ends at its own end (10.5 s); the second's starts there (its start at 10 s overlaps).
    expect(t.badput.infrastructureRecovery).toBe(0);
    expect(t.productiveSecs).toBeCloseTo(9.5 + 8, 10);
    sumsToTotal(t);
  });

  it("a notice before training was ready: startup to the notice, preemption from it, nothing counted twice", () => {
    const t = only([start("local", 0), phase("clusterJoin", 3, 3), { v: 1, type: "notice", t: at(4) }, ready(7, 0), end(12, 0, 42)]);
    expect(t.badput).toMatchObject({ clusterJoin: 3, startup: 1, preemption: 8 });
    expect(t.productiveSecs).toBe(0);
    sumsToTotal(t);
  });

  it("aborts in a row are one downtime until the next ready; a save while the session is re-created is the recovery's", () => {
    const aborted = (secs: number): GoodputRecord => ({ v: 1, type: "aborted", t: at(secs) });
    const t = only([start("local", 0), ready(0, 0), aborted(10), aborted(11), aborted(12), phase("checkpointSave", 13.5, 0.5), ready(14, null), phase("checkpointSave", 16, 1), end(20, 60)]);
    expect(t.badput.infrastructureRecovery).toBe(4);
    expect(t.badput.checkpointSave).toBe(1);
    expect(t.productiveSecs).toBe(15);
    sumsToTotal(t);
  });

  it("the save made as the session is created is checkpointSave, taken out of the restore it happened in", () => {
    const t = only([start("local", 0), phase("checkpointSave", 2, 0.5), phase("restore", 3, 2), ready(3, 100), end(10, 150)]);
    expect(t.badput).toMatchObject({ checkpointSave: 0.5, restore: 1.5, startup: 1 });
    sumsToTotal(t);
  });

  it("any records, in any order, at any times (a clock set back, overlapping processes): buckets never negative, the sum is the wall time, goodput in [0, 1]", () => {
    const random = seededRandom("computeGoodput invariants");
    const int = (n: number): number => Math.floor(random.next() * n);
    for (let i = 0; i < 2_000; i++) {
      const records: GoodputRecord[] = [];
      const n = 1 + int(30);
      for (let k = 0; k < n; k++) {
        const secs = int(100) - 10;
        const kind = int(8);
        if (kind === 0 || k === 0) records.push(start("local", Math.max(0, secs), int(2) === 0, `p${int(3)}`));
        else if (kind === 1) records.push(phase((["clusterJoin", "restore", "checkpointSave"] as const)[int(3)] ?? "restore", Math.max(0, secs), int(40)));
        else if (kind === 2) records.push(ready(Math.max(0, secs), int(3) === 0 ? null : int(500)));
        else if (kind === 3) records.push(mark(Math.max(0, secs), int(500)));
        else if (kind === 4) records.push({ v: 1, type: "aborted", t: at(Math.max(0, secs)) });
        else if (kind === 5) records.push({ v: 1, type: "notice", t: at(Math.max(0, secs)) });
        else records.push(end(Math.max(0, secs), int(2) === 0 ? null : int(500), int(3) === 0 ? null : int(50), `p${int(3)}`));
      }
      const run = computeGoodput([log("local", records), log("other", records.map((r) => (r.type === "start" ? { ...r, chief: false } : r)))]);
      for (const f of [...run.tasks, ...(run.group === null ? [] : [run.group])]) {
        for (const b of BADPUT_BUCKETS) expect(f.badput[b], `${b} of ${JSON.stringify(records)}`).toBeGreaterThanOrEqual(0);
        expect(f.productiveSecs).toBeGreaterThanOrEqual(0);
        expect(f.goodput).toBeGreaterThanOrEqual(0);
        expect(f.goodput).toBeLessThanOrEqual(1);
        sumsToTotal(f);
      }
    }
  });

  it("a log of a million records (weeks of a run): computed, no stack overflow", () => {
    const records: GoodputRecord[] = [start("local", 0), ready(1, 0)];
    for (let k = 0; k < 1_000_000; k++) records.push(mark(1 + k / 1000, k));
    records.push(end(1_002, 1_000_000));
    const t = only(records);
    expect(t.lastStep).toBe(1_000_000);
    sumsToTotal(t);
  });

  it("launch's faults: in time order, each at the chief's step then (interpolated within the process running then; while a restarted chief starts, its predecessor's last step), adding no task and changing no figure", () => {
    const fault = (secs: number, id: number, kind: string, target: string): GoodputRecord => ({ v: 1, type: "fault", t: at(secs), id, kind, target });
    const chief = log("chief:0", [start("chief:0", 0), ready(10, 0), mark(20, 100), mark(30, 300), start("chief:0", 40, true, "p2"), ready(45, 200), end(60, 500, 0, "p2")]);
    const without = computeGoodput([chief]);
    const run = computeGoodput([chief, log("launch", [fault(50, 2, "sigterm", "worker:0"), fault(5, 0, "freeze", "chief:0"), fault(25, 1, "sigkillChief", "chief:0"), fault(35, 3, "opError", "chief:0"), fault(42, 4, "sigterm", "chief:0")])]);
    expect(run.tasks).toEqual(without.tasks);
    expect(run.group).toEqual(without.group);
    expect(run.faults).toEqual([
      // Before the first process recorded a step.
      { t: at(5), id: 0, kind: "freeze", target: "chief:0", step: null },
      // Halfway between 100 (20 s) and 300 (30 s).
      { t: at(25), id: 1, kind: "sigkillChief", target: "chief:0", step: 200 },
      // After the first process's last record, before the next started: its last step.
      { t: at(35), id: 3, kind: "opError", target: "chief:0", step: 300 },
      // The second process started (40 s) but recorded no step yet: the first one's last step.
      { t: at(42), id: 4, kind: "sigterm", target: "chief:0", step: 300 },
      // A third of the way from 200 (45 s) to 500 (60 s).
      { t: at(50), id: 2, kind: "sigterm", target: "worker:0", step: 300 },
    ]);
    // No chief process: no step.
    expect(computeGoodput([log("launch", [fault(1, 0, "sigterm", "worker:0")])]).faults).toEqual([{ t: at(1), id: 0, kind: "sigterm", target: "worker:0", step: null }]);
  });

  it("the chief's rejoins: each `ready` that kept its state, at the step of the `aborted` before it; a session re-created after a failure is none, nor is a worker's kept `ready`", () => {
    const aborted = (secs: number): GoodputRecord => ({ v: 1, type: "aborted", t: at(secs) });
    const kept = (secs: number, rejoined?: string): GoodputRecord => ({ v: 1, type: "ready", t: at(secs), step: null, kept: true, ...(rejoined === undefined ? {} : { rejoined }) });
    const run = computeGoodput([
      log("chief:0", [
        start("chief:0", 0),
        ready(0, 0),
        mark(10, 1000),
        aborted(15),
        kept(20, "worker:1"),
        mark(30, 2000),
        // A recoverable failure whose session was re-created (restored): no rejoin.
        aborted(35),
        ready(40, 1800),
        aborted(45),
        kept(46),
        end(50, 2500),
      ]),
      log("worker:1", [start("worker:1", 0, false), ready(0, 0), aborted(60), kept(61, "worker:0"), end(62, 2500)]),
    ]);
    expect(run.rejoins).toEqual([
      // Between the marks of 1000 (10 s) and 2000 (30 s).
      { t: at(20), task: "worker:1", step: 1250 },
      // Between the re-created session's ready at 1800 (40 s) and the end at 2500 (50 s).
      { t: at(46), task: null, step: 2150 },
    ]);
    // Training was down from each `aborted` to its `ready`: 5 + 5 + 1 s of the chief's 50.
    expect(run.group?.productiveSecs).toBeCloseTo(39, 6);
  });

  it("without records: no tasks and no group; records before a file's first start are ignored", () => {
    expect(computeGoodput([])).toEqual({ tasks: [], group: null, faults: [], rejoins: [], skippedLines: 0 });
    expect(computeGoodput([log("x", [mark(1, 1)])]).group).toBeNull();
  });

  it("the one-line summary names the goodput, the span, the processes and each bucket of at least 0.05 s", () => {
    const t = only([start("local", 0), ready(5, 0), phase("checkpointSave", 20, 1), end(245, 200)]);
    expect(describeGoodput(t)).toBe("Goodput 97.6% of 4m05s over 1 process (productive 3m59s; badput: startup 5.0s, checkpointSave 1.0s).");
  });
});
