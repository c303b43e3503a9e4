/**
 * computeGoodput: the figures of goodput logs built record by record, so that every bucket has
 * a hand-computed expectation: a run without a fault, a restart that trains steps again, a
 * preemption, a recoverable failure inside a process, the group of a chief and a worker; and the
 * invariant that productive time and the buckets add up to each task's wall time.
 */
import { describe, expect, it } from "vitest";

import { BADPUT_BUCKETS, computeGoodput, describeGoodput, type GoodputLog, type GoodputRecord } from "../../src/index.js";

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

const T0 = 1_700_000_000_000;
const at = (secs: number): number => T0 + secs * 1000;

const start = (task: string, secs: number, chief = true): GoodputRecord => ({ v: 1, type: "start", t: at(secs), task, pid: 1, chief, processStartMs: at(secs) });
const phase = (bucket: "clusterJoin" | "restore" | "checkpointSave", endSecs: number, secs: number): GoodputRecord => ({ v: 1, type: "phase", t: at(endSecs), bucket, ms: secs * 1000 });
const ready = (secs: number, step: number | null): GoodputRecord => ({ v: 1, type: "ready", t: at(secs), step });
const mark = (secs: number, step: number): GoodputRecord => ({ v: 1, type: "mark", t: at(secs), step });
const end = (secs: number, step: number | null, exitCode: number | null = 0): GoodputRecord => ({ v: 1, type: "end", t: at(secs), step, exitCode });

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

  it("without records: no tasks and no group; records before a file's first start are ignored", () => {
    expect(computeGoodput([])).toEqual({ tasks: [], group: null, skippedLines: 0 });
    expect(computeGoodput([log("x", [mark(1, 1)])]).group).toBeNull();
  });

  it("the one-line summary names the goodput, the span, the processes and each bucket of at least 0.05 s", () => {
    const t = only([start("local", 0), ready(5, 0), phase("checkpointSave", 20, 1), end(245, 200)]);
    expect(describeGoodput(t)).toBe("Goodput 97.6% of 4m05s over 1 process (productive 3m59s; badput: startup 5.0s, checkpointSave 1.0s).");
  });
});
