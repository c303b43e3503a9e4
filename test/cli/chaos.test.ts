/**
 * `launch --chaos`'s fault run, on the virtual clock with a stand-in for the group: each fault
 * lands on its target at its time, waits for a target that is not running (to the next group),
 * a SIGTERM counts from its delivery, a freeze ends with SIGCONT, the opErrors go to their tasks
 * as the group starts; and the report's figures from goodput logs and summaries written here,
 * each figure recomputed by hand from the records.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { ChaosRun, chaosLogDirOf, describeChaosReport, writeChaosReport, type ChaosGroup } from "../../src/cli/chaos.js";
import type { PlannedFault } from "../../src/cli/chaosSchedule.js";
import { ChaosOpErrorHook, chaosGoodputDirOf, chaosOpErrorsOf, CHAOS_GOODPUT_DIR_ENV, CHAOS_OP_ERRORS_ENV } from "../../src/runtime/chaosOpErrors.js";
import { LAUNCH_READY_ENV } from "../../src/runtime/launchReady.js";
import { InternalError, ValueError } from "../../src/errors.js";
import type { GoodputRecord } from "../../src/goodput/goodputLog.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-chaos-");

/** A group stand-in: which tasks run, and every signal sent, with a SIGTERM held until `ready()`. */
class FakeGroup implements ChaosGroup {
  readonly sent: [string, NodeJS.Signals][] = [];
  readonly held = new Map<string, { delivered: () => void; undelivered: () => void }>();
  constructor(
    readonly live: Set<string>,
    private readonly holdTerm = false,
  ) {}
  isLive(task: string): boolean {
    return this.live.has(task);
  }
  inject(task: string, signal: NodeJS.Signals, delivery: { delivered: () => void; undelivered: () => void }): boolean {
    if (!this.live.has(task) || this.held.has(task)) return false;
    if (signal === "SIGTERM" && this.holdTerm) {
      this.held.set(task, delivery);
      return true;
    }
    this.sent.push([task, signal]);
    delivery.delivered();
    return true;
  }
  ready(task: string): void {
    const d = this.held.get(task);
    this.held.delete(task);
    this.sent.push([task, "SIGTERM"]);
    d?.delivered();
  }
  exit(task: string): void {
    this.live.delete(task);
    this.held.get(task)?.undelivered();
    this.held.delete(task);
  }
}

const faults: PlannedFault[] = [
  { id: 0, atMs: 1_000, kind: "sigterm", target: "worker:0" },
  { id: 1, atMs: 3_000, kind: "opError", target: "chief:0" },
  { id: 2, atMs: 5_000, kind: "sigkillChief", target: "chief:0" },
  { id: 3, atMs: 8_000, kind: "freeze", target: "worker:0", durationMs: 2_000 },
  { id: 4, atMs: 60_000, kind: "sigkillWorker", target: "worker:0" },
];

const line = (r: GoodputRecord): string => `${JSON.stringify(r)}\n`;

describe("launch --chaos: the fault run", () => {
  it("injects each fault on its target at its time, or as soon as its target runs again; the opErrors go to their tasks; a freeze with no sign of it is absorbed", async () => {
    const clock = new VirtualClock();
    const said: string[] = [];
    const run = new ChaosRun({ faults, clock, say: (l) => said.push(l) });
    run.start();
    const t0 = clock.now();
    expect(run.opErrorsFor("chief:0")).toEqual([{ fault: 1, atMs: t0 + 3_000 }]);
    expect(run.opErrorsFor("worker:0")).toEqual([]);

    const g1 = new FakeGroup(new Set(["chief:0", "worker:0"]), true);
    run.groupStarted(g1);
    await clock.advance(1_000);
    // Held until the task handles signals: not yet injected.
    expect(g1.held.has("worker:0")).toBe(true);
    await clock.advance(500);
    g1.ready("worker:0");
    await clock.advance(100);
    run.status("worker:0", { type: "notice", source: "SIGTERM" });
    g1.exit("worker:0");
    run.exited("worker:0", 42);
    g1.exit("chief:0");
    run.exited("chief:0", 42);
    expect(run.groupEnded()).toBe(true);
    // Between groups: the sigkillChief waits for the chief to run again.
    await clock.advance(3_400); // t0 + 5000
    expect(said.some((l) => /fault 2 \(sigkillChief to chief:0\) waits for chief:0 to run again/.test(l))).toBe(true);
    await clock.advance(500);
    const g2 = new FakeGroup(new Set(["chief:0", "worker:0"]));
    // The opError not yet raised still goes to the next group's chief.
    expect(run.opErrorsFor("chief:0")).toEqual([{ fault: 1, atMs: t0 + 3_000 }]);
    run.groupStarted(g2);
    expect(g2.sent).toEqual([["chief:0", "SIGKILL"]]);
    // The chief raised its opError (it says so on its status channel); an unknown or repeated id is ignored.
    run.status("chief:0", { type: "chaos", fault: 1 });
    run.status("chief:0", { type: "chaos", fault: 1 });
    run.status("worker:0", { type: "chaos", fault: 1 });
    run.status("chief:0", { type: "chaos", fault: 99 });
    expect(run.opErrorsFor("chief:0")).toEqual([]);
    g2.exit("chief:0");
    run.exited("chief:0", 137);
    g2.exit("worker:0");
    run.exited("worker:0", 1);
    expect(run.groupEnded()).toBe(true);
    const g3 = new FakeGroup(new Set(["chief:0", "worker:0"]));
    run.groupStarted(g3);
    await clock.advance(8_000 - 5_500);
    expect(g3.sent).toEqual([["worker:0", "SIGSTOP"]]);
    await clock.advance(2_000);
    expect(g3.sent).toEqual([
      ["worker:0", "SIGSTOP"],
      ["worker:0", "SIGCONT"],
    ]);
    expect(said.some((l) => /fault 3: SIGCONT to worker:0 \(the group trained on: nothing to recover\)/.test(l))).toBe(true);
    // The run ends before fault 4: it is never injected.
    expect(run.groupEnded()).toBe(false);
    run.stop();
    const report = await run.report(0, undefined);
    expect(report.faults.map((f) => [f.id, f.injectedMs, f.detectMs])).toEqual([
      [0, 1_500, 100],
      [1, 5_500, 0],
      [2, 5_500, 0],
      [3, 8_000, null],
      [4, null, null],
    ]);
    expect(report.groups).toBe(3);
    expect(report.goodput).toBeNull();
    expect(report.faults[3]).toMatchObject({ firstStepMs: null, stepsLost: 0, recovery: null });
    expect(report.faults[4]).toMatchObject({ injectedMs: null, recovery: null });
    expect(describeChaosReport(report).at(-1)).toMatch(/^chaos: 5 faults over 10\.0s and 3 groups; no goodput logs, so no recovery figures$/);
    expect(describeChaosReport(report)[4]).toBe("chaos: fault 4 sigkillWorker to worker:0: not injected (the run ended first)");
  });

  it("a SIGTERM held for a task that exits before it handles signals was never delivered: it lands on the next group", async () => {
    const clock = new VirtualClock();
    const run = new ChaosRun({ faults: [{ id: 0, atMs: 0, kind: "sigterm", target: "worker:1" }], clock, say: () => undefined });
    run.start();
    const g1 = new FakeGroup(new Set(["chief:0", "worker:1"]), true);
    run.groupStarted(g1);
    await clock.advance(0);
    expect(g1.held.has("worker:1")).toBe(true);
    g1.exit("worker:1");
    expect(run.groupEnded()).toBe(false);
    const g2 = new FakeGroup(new Set(["chief:0", "worker:1"]));
    await clock.advance(700);
    run.groupStarted(g2);
    expect(g2.sent).toEqual([["worker:1", "SIGTERM"]]);
    expect((await run.report(42, undefined)).faults[0]?.injectedMs).toBe(700);
  });

  it("a worker restarted alone: a fault that hit its process makes the restart free, an earlier one does not; the group did not fail, and a fault that waited for the worker lands on its new process", async () => {
    const clock = new VirtualClock();
    const run = new ChaosRun({
      faults: [
        { id: 0, atMs: 1_000, kind: "sigkillWorker", target: "worker:1" },
        { id: 1, atMs: 1_500, kind: "sigkillWorker", target: "worker:1" },
      ],
      clock,
      say: () => undefined,
    });
    run.start();
    const g = new FakeGroup(new Set(["chief:0", "worker:0", "worker:1"]));
    run.groupStarted(g);
    const started = clock.now();
    expect(run.hitSince("worker:1", started)).toBe(false);
    await clock.advance(1_000);
    expect(g.sent).toEqual([["worker:1", "SIGKILL"]]);
    g.exit("worker:1");
    run.exited("worker:1", 137);
    expect(run.hitSince("worker:1", started)).toBe(true);
    expect(run.hitSince("worker:0", started)).toBe(false);
    // Fault 1's time comes while worker:1 is down: it waits for the worker's new process.
    await clock.advance(500);
    expect(g.sent).toHaveLength(1);
    g.live.add("worker:1");
    const restartedAt = clock.now();
    run.taskRestarted("worker:1");
    expect(g.sent).toEqual([
      ["worker:1", "SIGKILL"],
      ["worker:1", "SIGKILL"],
    ]);
    // Fault 0 hit the earlier process: only fault 1 counts for the new one.
    expect(run.hitSince("worker:1", restartedAt)).toBe(true);
    expect(run.hitSince("worker:1", restartedAt + 1)).toBe(false);
    // Fault 1 ends that process too, and it is restarted alone again.
    g.exit("worker:1");
    run.exited("worker:1", 137);
    g.live.add("worker:1");
    run.taskRestarted("worker:1");
    // Both faults were recovered by restarts alone: a later failure of the group is not theirs (no free group restart).
    await clock.advance(100);
    g.exit("chief:0");
    run.exited("chief:0", 1);
    expect(run.groupEnded()).toBe(false);
    // The report says what recovered each: its target restarted alone.
    const report = await run.report(1, undefined);
    expect(report.faults.map((f) => f.recovery)).toEqual(["alone", "alone"]);
    expect(describeChaosReport(report)[0]).toMatch(/^chaos: fault 0 sigkillWorker to worker:1: at 1\.0s; detected \+\S+, saved \+-, training again \+- \(its target restarted alone\), steps lost -$/);

    // With the chief's goodput log: its one process waited for worker:1 twice, each time going on
    // with the state it had (a `ready` that kept it), so training resumed there and no step was lost.
    const dir = tempDir();
    mkdirSync(join(dir, "goodput"), { recursive: true });
    const records: GoodputRecord[] = [
      { v: 1, type: "start", t: started + 50, task: "chief:0", proc: "c", pid: 2, chief: true, processStartMs: started },
      { v: 1, type: "ready", t: started + 100, step: 0 },
      { v: 1, type: "mark", t: started + 900, step: 400 },
      { v: 1, type: "aborted", t: started + 1_010 },
      { v: 1, type: "ready", t: started + 1_400, step: null, kept: true, rejoined: "worker:1" },
      { v: 1, type: "mark", t: started + 1_450, step: 420 },
      { v: 1, type: "aborted", t: started + 1_520 },
      { v: 1, type: "ready", t: started + 1_580, step: null, kept: true, rejoined: "worker:1" },
      { v: 1, type: "end", t: started + 1_700, proc: "c", step: 450, exitCode: 1 },
    ];
    writeFileSync(join(dir, "goodput", "chief-0.jsonl"), records.map(line).join(""));
    const measured = await run.report(1, dir);
    expect(measured.faults.map((f) => [f.id, f.firstStepMs, f.stepsLost, f.recovery])).toEqual([
      [0, 400, 0, "alone"],
      [1, 80, 0, "alone"],
    ]);
    expect(describeChaosReport(measured)[0]).toMatch(/training again \+0\.4s \(its target restarted alone\), steps lost 0$/);
  });

  it("a group that stops takes no fault (it waits for the next group); a failure before any fault is no free restart; only a sign of its own target detects a fault", async () => {
    const clock = new VirtualClock();
    const said: string[] = [];
    const run = new ChaosRun({
      faults: [
        { id: 0, atMs: 1_000, kind: "sigkillWorker", target: "worker:1" },
        { id: 1, atMs: 3_000, kind: "sigterm", target: "worker:0" },
      ],
      clock,
      say: (l) => said.push(l),
    });
    run.start();
    const g1 = new FakeGroup(new Set(["chief:0", "worker:0", "worker:1"]));
    run.groupStarted(g1);
    // A genuine failure first: the group stops; the fault's time comes while it stops.
    await clock.advance(500);
    g1.exit("worker:0");
    run.exited("worker:0", 1);
    run.groupStopping();
    await clock.advance(500);
    expect(g1.sent).toEqual([]);
    expect(said.some((l) => /fault 0 \(sigkillWorker to worker:1\) waits for worker:1 to run again/.test(l))).toBe(true);
    g1.exit("chief:0");
    run.exited("chief:0", 143);
    g1.exit("worker:1");
    run.exited("worker:1", 143);
    // No fault was injected into it: its failure counts (no free restart).
    expect(run.groupEnded()).toBe(false);
    const g2 = new FakeGroup(new Set(["chief:0", "worker:0", "worker:1"]));
    run.groupStarted(g2);
    expect(g2.sent).toEqual([["worker:1", "SIGKILL"]]);
    // Another task's notice, or a peer lost that is not the target, is no sign of fault 0.
    await clock.advance(10);
    run.status("worker:0", { type: "notice", source: "SIGTERM" });
    run.status("chief:0", { type: "lost", tasks: ["/job:worker/replica:0/task:0"], why: "declaredFailed" });
    await clock.advance(30);
    run.status("chief:0", { type: "lost", tasks: ["/job:worker/replica:0/task:1"], why: "declaredFailed" });
    run.exited("worker:1", 137);
    expect(run.groupEnded()).toBe(true);
    run.stop();
    // Fault 1's time comes after the run stopped: never injected.
    await clock.advance(5_000);
    const report = await run.report(0, undefined);
    expect(report.faults.map((f) => [f.id, f.injectedMs, f.detectMs])).toEqual([
      [0, 1_000, 40],
      [1, null, null],
    ]);
  });

  it("steps lost are counted once: a fault that lands while a recovery is under way (no training running) costs none of its own", async () => {
    const dir = tempDir();
    const clock = new VirtualClock();
    const t0 = clock.now();
    mkdirSync(join(dir, "goodput"), { recursive: true });
    const records: GoodputRecord[] = [
      { v: 1, type: "start", t: t0 + 10, task: "chief:0", proc: "a", pid: 2, chief: true, processStartMs: t0 },
      { v: 1, type: "ready", t: t0 + 100, step: 0 },
      { v: 1, type: "mark", t: t0 + 900, step: 80 },
      // SIGKILLed at t0 + 1000; the second fault at t0 + 1500 lands before the restart trains.
      { v: 1, type: "start", t: t0 + 2_100, task: "chief:0", proc: "b", pid: 3, chief: true, processStartMs: t0 + 2_000 },
      { v: 1, type: "ready", t: t0 + 2_500, step: 0 },
      { v: 1, type: "end", t: t0 + 4_000, proc: "b", step: 300, exitCode: 0 },
    ];
    writeFileSync(join(dir, "goodput", "chief-0.jsonl"), records.map(line).join(""));
    const run = new ChaosRun({
      faults: [
        { id: 0, atMs: 1_000, kind: "sigkillChief", target: "chief:0" },
        { id: 1, atMs: 1_500, kind: "sigkillWorker", target: "worker:0" },
      ],
      clock,
      say: () => undefined,
    });
    run.start();
    const g1 = new FakeGroup(new Set(["chief:0", "worker:0"]));
    run.groupStarted(g1);
    await clock.advance(1_000);
    await clock.advance(500);
    run.stop();
    const report = await run.report(0, dir);
    expect(report.faults.map((f) => [f.id, f.firstStepMs, f.stepsLost])).toEqual([
      [0, 1_500, 80],
      [1, 1_000, 0],
    ]);
  });

  it("the report's recovery figures: the save of the process the fault hit, the chief's next ready, and the steps trained again (the summaries' steps between the goodput marks)", async () => {
    const dir = tempDir();
    const clock = new VirtualClock();
    const run = new ChaosRun({
      faults: [
        { id: 0, atMs: 1_000, kind: "sigterm", target: "worker:0" },
        { id: 1, atMs: 6_000, kind: "sigkillChief", target: "chief:0" },
      ],
      clock,
      say: () => undefined,
    });
    const t0 = clock.now();
    // An earlier run's records in the same directory: left out.
    mkdirSync(join(dir, "goodput"), { recursive: true });
    const old: GoodputRecord[] = [
      { v: 1, type: "start", t: t0 - 60_000, task: "chief:0", proc: "old", pid: 1, chief: true, processStartMs: t0 - 61_000 },
      { v: 1, type: "mark", t: t0 - 50_000, step: 9_999 },
    ];
    const a = "a";
    const b = "b";
    const records: GoodputRecord[] = [
      ...old,
      { v: 1, type: "start", t: t0 + 100, task: "chief:0", proc: a, pid: 2, chief: true, processStartMs: t0 },
      { v: 1, type: "ready", t: t0 + 500, step: 0 },
      { v: 1, type: "mark", t: t0 + 900, step: 40 },
      // The preemption's save: 300 ms after the SIGTERM (delivered at t0 + 1000).
      { v: 1, type: "mark", t: t0 + 1_300, step: 50, checkpoint: true },
      { v: 1, type: "end", t: t0 + 1_400, proc: a, step: 50, exitCode: 42 },
      { v: 1, type: "start", t: t0 + 2_500, task: "chief:0", proc: b, pid: 3, chief: true, processStartMs: t0 + 2_000 },
      // The restarted process's first save re-saves what it restored: not the fault's.
      { v: 1, type: "mark", t: t0 + 3_000, step: 50, checkpoint: true },
      { v: 1, type: "ready", t: t0 + 3_200, step: 50 },
      { v: 1, type: "mark", t: t0 + 4_000, step: 60, checkpoint: true },
      { v: 1, type: "mark", t: t0 + 5_000, step: 90 },
      // Killed at t0 + 6000: no end. The next process restores step 60.
      { v: 1, type: "start", t: t0 + 7_000, task: "chief:0", proc: "c", pid: 4, chief: true, processStartMs: t0 + 6_500 },
      { v: 1, type: "ready", t: t0 + 8_000, step: 60 },
      { v: 1, type: "end", t: t0 + 9_000, proc: "c", step: 200, exitCode: 0 },
    ];
    writeFileSync(join(dir, "goodput", "chief-0.jsonl"), records.map(line).join(""));
    writeFileSync(
      join(dir, "goodput", "worker-0.jsonl"),
      [
        { v: 1, type: "start", t: t0 + 200, task: "worker:0", proc: "w", pid: 5, chief: false, processStartMs: t0 },
        { v: 1, type: "end", t: t0 + 9_000, proc: "w", step: 200, exitCode: 0 },
      ]
        .map((r) => line(r as GoodputRecord))
        .join("") + "not a record\n",
    );
    // The chief's summaries: step 110 at t0 + 5900, just before the SIGKILL (the marks say only 90).
    const summaryClock = new VirtualClock({ startMs: t0 + 5_900 });
    const writer = new SummaryWriter(dir, { clock: summaryClock });
    writer.addScalar("loss", 0.5, 110);
    await summaryClock.advance(2_000);
    writer.addScalar("loss", 0.4, 150);
    await writer.close();

    run.start();
    const g1 = new FakeGroup(new Set(["chief:0", "worker:0"]));
    run.groupStarted(g1);
    await clock.advance(1_000);
    await clock.advance(50);
    run.status("worker:0", { type: "notice", source: "SIGTERM" });
    g1.exit("worker:0");
    g1.exit("chief:0");
    run.groupEnded();
    const g2 = new FakeGroup(new Set(["chief:0", "worker:0"]));
    run.groupStarted(g2);
    await clock.advance(4_950);
    expect(g2.sent).toEqual([["chief:0", "SIGKILL"]]);
    await clock.advance(20);
    run.exited("chief:0", 137);
    await clock.advance(3_000);
    run.stop();
    const report = await run.report(0, dir);
    expect(report.faults).toEqual([
      { id: 0, kind: "sigterm", target: "worker:0", atMs: 1_000, injectedMs: 1_000, detectMs: 50, savedMs: 300, firstStepMs: 2_200, stepsLost: 0, recovery: "group" },
      // Highest before the kill: 110 (the summaries); training again from 60.
      { id: 1, kind: "sigkillChief", target: "chief:0", atMs: 6_000, injectedMs: 6_000, detectMs: 20, savedMs: null, firstStepMs: 2_000, stepsLost: 50, recovery: "group" },
    ]);
    // The group's goodput from this run's records only: the first start (t0) to the last end (t0 + 9000).
    expect(report.goodput?.startMs).toBe(t0);
    expect(report.goodput?.endMs).toBe(t0 + 9_000);
    expect(report.goodput?.goodput).toBeGreaterThan(0);
    expect(report.goodput?.goodput).toBeLessThan(1);
    expect(report.logDir).toBe(dir);
    const path = join(dir, "report.json");
    writeChaosReport(path, report);
    expect(JSON.parse(readFileSync(path, "utf8"))).toEqual(JSON.parse(JSON.stringify(report)));
    expect(chaosLogDirOf("/x/y/chaos-report.json")).toBe("/x/y/chaos-report-logs");
    expect(chaosLogDirOf("/x/y/report")).toBe("/x/y/report-logs");
  });
});

describe("launch --chaos: the task's side", () => {
  const launched = { [LAUNCH_READY_ENV]: "1" };

  it("the opErrors and the goodput directory are read only under launch; a bad list is one line naming the variable", () => {
    const list = JSON.stringify([
      { fault: 4, atMs: 2_000 },
      { fault: 1, atMs: 1_000 },
    ]);
    expect(chaosOpErrorsOf({ [CHAOS_OP_ERRORS_ENV]: list })).toEqual([]);
    expect(chaosOpErrorsOf({ ...launched, [CHAOS_OP_ERRORS_ENV]: list })).toEqual([
      { fault: 1, atMs: 1_000 },
      { fault: 4, atMs: 2_000 },
    ]);
    expect(() => chaosOpErrorsOf({ ...launched, [CHAOS_OP_ERRORS_ENV]: '[{"fault": -1, "atMs": 0}]' })).toThrow(ValueError);
    expect(() => chaosOpErrorsOf({ ...launched, [CHAOS_OP_ERRORS_ENV]: "not json" })).toThrow(/^invalid MONITORED_SESSION_CHAOS_OP_ERRORS \(set by launch --chaos\): .*; unset it, or run under launch --chaos$/);
    expect(chaosGoodputDirOf({ [CHAOS_GOODPUT_DIR_ENV]: "/d" })).toBeUndefined();
    expect(chaosGoodputDirOf({ ...launched, [CHAOS_GOODPUT_DIR_ENV]: "" })).toBeUndefined();
    expect(chaosGoodputDirOf({ ...launched, [CHAOS_GOODPUT_DIR_ENV]: "/d" })).toBe("/d");
  });

  it("the hook raises each fault once, in the first step that begins at or after its time, telling launch first", async () => {
    const clock = new VirtualClock();
    const told: unknown[] = [];
    const t0 = clock.now();
    const hook = new ChaosOpErrorHook(
      [
        { fault: 1, atMs: t0 + 1_000 },
        { fault: 4, atMs: t0 + 1_000 },
      ],
      "worker:1",
      clock,
      (s) => told.push(s),
    );
    expect(() => hook.beforeRun()).not.toThrow();
    await clock.advance(1_000);
    expect(() => hook.beforeRun()).toThrow(InternalError);
    expect(told).toEqual([{ type: "chaos", fault: 1 }]);
    expect(() => hook.beforeRun()).toThrow(/^worker:1: fault 4 of launch --chaos: an OpError injected in this step/);
    expect(() => hook.beforeRun()).not.toThrow();
    expect(told).toEqual([
      { type: "chaos", fault: 1 },
      { type: "chaos", fault: 4 },
    ]);
  });
});

describe("from: training", () => {
  it("the schedule's clock starts once every task of the first group trains, not as the group starts; a later group's training does not move it", async () => {
    const clock = new VirtualClock();
    const said: string[] = [];
    const run = new ChaosRun({ faults: [{ id: 0, atMs: 1_000, kind: "sigterm", target: "worker:0" }], clock, say: (l) => said.push(l), fromTraining: true });
    run.start();
    const g = new FakeGroup(new Set(["chief:0", "worker:0"]));
    run.groupStarted(g);
    // The tasks start for a minute: no fault lands meanwhile.
    await clock.advance(60_000);
    expect(g.sent).toEqual([]);
    run.trainingBegan();
    expect(said).toContain("chaos: every task trains: the schedule's clock starts (from: training)");
    await clock.advance(999);
    expect(g.sent).toEqual([]);
    await clock.advance(1);
    expect(g.sent).toEqual([["worker:0", "SIGTERM"]]);
    run.trainingBegan();
    expect(said.filter((l) => l.includes("clock starts"))).toHaveLength(1);
    run.stop();
    const report = await run.report(42, undefined);
    expect(report.faults[0]?.injectedMs).toBe(1_000);
  });

  it("from: launch (the default) ignores the training signal: the clock started with the group", async () => {
    const clock = new VirtualClock();
    const said: string[] = [];
    const run = new ChaosRun({ faults: [{ id: 0, atMs: 1_000, kind: "sigterm", target: "worker:0" }], clock, say: (l) => said.push(l) });
    run.start();
    const g = new FakeGroup(new Set(["chief:0", "worker:0"]));
    run.groupStarted(g);
    await clock.advance(1_000);
    expect(g.sent).toEqual([["worker:0", "SIGTERM"]]);
    run.trainingBegan();
    expect(said.filter((l) => l.includes("clock starts"))).toEqual([]);
    run.stop();
    expect((await run.report(0, undefined)).startMs).toBe(clock.now() - 1_000);
  });

  it("a first group that fails before it trains starts no clock; the next group's training does", async () => {
    const clock = new VirtualClock();
    const run = new ChaosRun({ faults: [{ id: 0, atMs: 500, kind: "sigkillWorker", target: "worker:0" }], clock, say: () => undefined, fromTraining: true });
    run.start();
    const g1 = new FakeGroup(new Set(["chief:0", "worker:0"]));
    run.groupStarted(g1);
    await clock.advance(5_000);
    run.exited("worker:0", 1);
    g1.exit("worker:0");
    g1.exit("chief:0");
    expect(run.groupEnded()).toBe(false);
    expect(g1.sent).toEqual([]);
    const g2 = new FakeGroup(new Set(["chief:0", "worker:0"]));
    run.groupStarted(g2);
    await clock.advance(2_000);
    run.trainingBegan();
    await clock.advance(500);
    expect(g2.sent).toEqual([["worker:0", "SIGKILL"]]);
    run.stop();
  });

  it("the report reads the run's records from the first group's start, not from the clock's: a fault in the first group finds the chief process it hit", async () => {
    const dir = tempDir();
    const clock = new VirtualClock();
    const run = new ChaosRun({ faults: [{ id: 0, atMs: 1_000, kind: "sigkillChief", target: "chief:0" }], clock, say: () => undefined, fromTraining: true });
    const t0 = clock.now();
    mkdirSync(join(dir, "goodput"), { recursive: true });
    const records: GoodputRecord[] = [
      { v: 1, type: "start", t: t0 + 100, task: "chief:0", proc: "a", pid: 2, chief: true, processStartMs: t0 },
      { v: 1, type: "ready", t: t0 + 500, step: 0 },
      { v: 1, type: "mark", t: t0 + 1_000, step: 50, checkpoint: true },
      { v: 1, type: "mark", t: t0 + 1_500, step: 100 },
      // SIGKILLed at t0 + 1600 (the clock started at t0 + 600): no end. The next process restores step 50.
      { v: 1, type: "start", t: t0 + 2_500, task: "chief:0", proc: "b", pid: 3, chief: true, processStartMs: t0 + 2_000 },
      { v: 1, type: "ready", t: t0 + 3_000, step: 50 },
      { v: 1, type: "end", t: t0 + 4_000, proc: "b", step: 200, exitCode: 0 },
    ];
    writeFileSync(join(dir, "goodput", "chief-0.jsonl"), records.map(line).join(""));
    run.start();
    const g1 = new FakeGroup(new Set(["chief:0", "worker:0"]));
    run.groupStarted(g1);
    await clock.advance(600);
    run.trainingBegan();
    await clock.advance(1_000);
    expect(g1.sent).toEqual([["chief:0", "SIGKILL"]]);
    await clock.advance(20);
    run.exited("chief:0", 137);
    g1.exit("chief:0");
    g1.exit("worker:0");
    run.groupEnded();
    run.groupStarted(new FakeGroup(new Set(["chief:0", "worker:0"])));
    await clock.advance(2_380);
    run.stop();
    const report = await run.report(0, dir);
    expect(report.startMs).toBe(t0 + 600);
    expect(report.durationMs).toBe(4_000);
    expect(report.faults).toEqual([{ id: 0, kind: "sigkillChief", target: "chief:0", atMs: 1_000, injectedMs: 1_000, detectMs: 20, savedMs: null, firstStepMs: 1_400, stepsLost: 50, recovery: "group" }]);
    expect(report.goodput?.startMs).toBe(t0);
  });
});
