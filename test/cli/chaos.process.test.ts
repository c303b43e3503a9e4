/**
 * `launch --chaos` on what users run: the bundled TensorFlow.js job (data-parallel, no delay
 * between steps) under `monitored-session launch --workers 2 --chaos <file>`, on both coordination
 * backends (etcd skipped with a message without its binary). A fault lands wherever the run is
 * when its time comes (starting, training, stopping, restarting): the test asserts only what
 * holds wherever that is, never a duration.
 *
 * - Every fault is injected (a SIGTERM, a SIGKILL of the chief, a freeze longer than the heartbeat
 *   timeout, an opError raised in the chief's step), each group that a fault ended is restarted
 *   without `--max-restarts`, and the job still reaches its last step: `launch` exits 0.
 * - The report (`--chaos-report`) is recomputed here from the goodput logs' raw lines and the
 *   chief's event files: each fault's `firstStepMs`, `savedMs` and `stepsLost`; its goodput is
 *   within 1 percentage point of `computeGoodput` over the same records.
 */
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

import type { ChaosReport } from "../../src/cli/chaos.js";
import { computeGoodput } from "../../src/goodput/computeGoodput.js";
import { parseGoodputLog } from "../../src/goodput/goodputLog.js";
import { readEvents } from "../../src/summary/readEvents.js";
import { killLaunchTree, startCli, type CliChild } from "../util/cliChild.js";
import { coordinationBackends } from "../util/coordinationBackends.js";
import { exampleTree } from "../util/exampleTree.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-chaos-run-");

const launched: CliChild[] = [];
afterEach(async () => {
  for (const l of launched.splice(0)) await killLaunchTree(l);
});


const backends = coordinationBackends("chaos", "chaos");

/** One raw line of a goodput log, as this test reads it (its own parse, not the library's). */
interface Raw {
  readonly type: string;
  readonly t: number;
  readonly step?: number | null;
  readonly chief?: boolean;
  readonly checkpoint?: boolean;
  readonly processStartMs?: number;
}

const SCHEDULE = `# Four faults, a second apart: wherever each lands, the run must recover and finish.
faults:
  - { atSecs: 2, kind: sigterm, target: worker:0 }
  - { atSecs: 3, kind: opError, target: chief:0 }
  - { atSecs: 4, kind: sigkillChief }
  - { atSecs: 5, kind: freeze, target: worker:0 }
freezeSecs: 20
`;

for (const backend of backends) {
  describe.skipIf(backend.skip)(`launch --chaos on the bundled job (${backend.name} coordination)`, () => {
    backend.serve();

    /**
     * The bundled job to `lastStep` under `launch --workers 2 --chaos` with `schedule`, a heartbeat
     * timeout (4 s) below the freezes, so that a frozen task is declared failed; asserts that every
     * task exited 0 in the end.
     */
    const chaosRun = async (schedule: string, lastStep: number, timeoutMs: number): Promise<{ root: string; reportPath: string; out: string }> => {
      const root = tempDir();
      const yaml = exampleTree(root, (y) => `${y.replace(/^lastStep: \d+$/m, `lastStep: ${lastStep}`)}cluster:\n  timeouts:\n    heartbeatTimeoutSecs: 4\n${backend.lines()}`);
      const schedulePath = join(root, "chaos.yaml");
      writeFileSync(schedulePath, schedule);
      const reportPath = join(root, "report.json");
      const l = startCli(["launch", "--workers", "2", "--kill-after", "20", "--no-standby", "--chaos", schedulePath, "--chaos-report", reportPath, yaml], { timeoutMs });
      launched.push(l);
      const r = await l.done;
      const out = l.output();
      expect(r.code, out).toBe(0);
      expect(out).toMatch(/^\[launch\] every task exited 0$/m);
      return { root, reportPath, out };
    };

    it("injects every fault, restarts each group a fault ended, reaches the last step (exit 0), and reports each recovery as the logs say", { timeout: 600_000 }, async () => {
      const { root, reportPath, out } = await chaosRun(SCHEDULE, 3000, 580_000);
      expect(out).toMatch(new RegExp(`^\\[launch\\] chaos: the recovery report is in ${reportPath.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}$`, "m"));
      // Nothing the faults did used up a restart (there are none to use).
      expect(out).not.toMatch(/restart \d+ of/);
      const report = JSON.parse(readFileSync(reportPath, "utf8")) as ChaosReport;
      expect(report.exitCode).toBe(0);
      expect(report.faults.map((f) => [f.id, f.kind, f.target])).toEqual([
        [0, "sigterm", "worker:0"],
        [1, "opError", "chief:0"],
        [2, "sigkillChief", "chief:0"],
        [3, "freeze", "worker:0"],
      ]);
      for (const f of report.faults) {
        expect(f.injectedMs, JSON.stringify(f)).not.toBeNull();
        expect(f.injectedMs as number).toBeGreaterThanOrEqual(f.atMs);
      }
      expect(report.groups).toBeGreaterThanOrEqual(2);
      expect(report.groups).toBeLessThanOrEqual(report.faults.length + 1);

      // The recomputation, from the raw lines of the chief's goodput log and its event files.
      const logDir = join(root, "runs/tfjs-classifier");
      expect(report.logDir).toBe(logDir);
      const lines = (name: string): Raw[] =>
        readFileSync(join(logDir, "goodput", name), "utf8")
          .split("\n")
          .filter((x) => x !== "")
          .map((x) => JSON.parse(x) as Raw)
          .filter((x) => x.t >= report.startMs);
      expect(readdirSync(join(logDir, "goodput")).sort()).toEqual(["chief-0.jsonl", "launch.jsonl", "worker-0.jsonl"]);
      // launch's own log: each injected fault, at its injection (what the board marks).
      const recorded = (lines("launch.jsonl") as unknown as { type: string; t: number; id: number; kind: string; target: string }[]).sort((a, b) => a.t - b.t || a.id - b.id);
      expect(recorded).toEqual(
        report.faults
          .filter((f) => f.injectedMs !== null)
          .map((f) => ({ v: 1, type: "fault", t: report.startMs + (f.injectedMs as number), id: f.id, kind: f.kind, target: f.target }))
          .sort((a, b) => a.t - b.t || a.id - b.id),
      );
      const chief = lines("chief-0.jsonl");
      const summarySteps: { t: number; step: number }[] = [];
      for await (const e of readEvents(logDir)) if (e.kind !== "issue" && e.kind !== "fileVersion" && e.run === "." && e.wallTime * 1000 >= report.startMs) summarySteps.push({ t: e.wallTime * 1000, step: e.step });
      for (const f of report.faults) {
        const at = report.startMs + (f.injectedMs as number);
        if (f.kind === "freeze" && f.firstStepMs === null) {
          // Absorbed: the group trained on (it was frozen before it registered, say).
          expect(f.stepsLost).toBe(0);
          continue;
        }
        const ready = chief.find((x) => x.type === "ready" && x.t >= at);
        expect(ready, `fault ${f.id}: the chief trained again after it`).toBeDefined();
        expect(f.firstStepMs).toBe((ready as Raw).t - at);
        // The chief process running at the injection: the last to have started by then.
        const starts = chief.map((x, i) => [x, i] as const).filter(([x]) => x.type === "start");
        const current = [...starts].reverse().find(([x]) => (x.processStartMs ?? x.t) <= at)?.[1] ?? -1;
        const next = starts.find(([, i]) => i > current)?.[1] ?? chief.length;
        const running = current < 0 ? [] : chief.slice(current, next);
        const saved = running.find((x) => x.type === "mark" && x.checkpoint === true && x.t >= at && x.t <= (ready as Raw).t);
        expect(f.savedMs).toBe(saved === undefined ? null : saved.t - at);
        // Steps lost: trained since the running process's last `ready` before the injection (none
        // if a session failure came after it), beyond the step training resumed from; counted once
        // among faults that resume at the same first step (the earliest injected has them).
        const began = running.filter((x) => (x.type === "ready" || x.type === "aborted") && x.t <= at).at(-1);
        const sharedWithEarlier = report.faults.some(
          (g) => g.injectedMs !== null && g.firstStepMs !== null && (g.injectedMs < (f.injectedMs as number) || (g.injectedMs === f.injectedMs && g.id < f.id)) && g.injectedMs + g.firstStepMs === (f.injectedMs as number) + (f.firstStepMs as number),
        );
        const stepsLost =
          (ready as Raw).step === null || (ready as Raw).step === undefined
            ? null
            : began?.type !== "ready" || sharedWithEarlier
              ? 0
              : Math.max(
                  0,
                  Math.max(
                    (began.step as number | null) ?? 0,
                    ...running.filter((x) => x.t >= began.t && x.t <= at && typeof x.step === "number").map((x) => x.step as number),
                    ...summarySteps.filter((p) => p.t >= began.t && p.t <= at).map((p) => p.step),
                  ) - ((ready as Raw).step as number),
                );
        expect(f.stepsLost, `fault ${f.id}`).toBe(stepsLost);
      }
      // The group's goodput over this run's records: within 1 percentage point of the accounting's.
      const logs = ["chief-0.jsonl", "worker-0.jsonl"].map((name) => {
        const parsed = parseGoodputLog(readFileSync(join(logDir, "goodput", name), "utf8"));
        return { task: name.replace(".jsonl", ""), path: join(logDir, "goodput", name), records: parsed.records.filter((x) => x.t >= report.startMs), skippedLines: parsed.skippedLines };
      });
      const group = computeGoodput(logs).group;
      expect(report.goodput).not.toBeNull();
      expect(Math.abs((report.goodput?.goodput ?? 0) - (group?.goodput ?? -1))).toBeLessThanOrEqual(0.01);
      // Every fault has its line in launch's summary.
      for (const f of report.faults) expect(out).toMatch(new RegExp(`^\\[launch\\] chaos: fault ${f.id} ${f.kind} to ${f.target}: at `, "m"));
      expect(out).toMatch(/^\[launch\] chaos: 4 faults over \S+ and \d+ groups: goodput \d+\.\d% \(productive /m);
    });

    it("a freeze of the chief past the heartbeat timeout, once every task trains (from: training): found lost, SIGKILLed, the group restarted, the last step reached (exit 0)", { timeout: 400_000 }, async () => {
      // The schedule's clock starts once both tasks train: the freeze lands in training, however loaded the machine.
      const { reportPath, out } = await chaosRun("from: training\nfaults:\n  - { atSecs: 1, kind: freeze, target: chief:0 }\nfreezeSecs: 30\n", 6000, 380_000);
      expect(out).toMatch(/^\[launch\] chaos: every task trains: the schedule's clock starts \(from: training\)$/m);
      const report = JSON.parse(readFileSync(reportPath, "utf8")) as ChaosReport;
      const [freeze] = report.faults;
      expect(freeze?.injectedMs, JSON.stringify(freeze)).not.toBeNull();
      expect(freeze?.firstStepMs, JSON.stringify(freeze)).not.toBeNull();
      // The report read the first group's records (written before the schedule's clock started).
      expect(freeze?.stepsLost, JSON.stringify(freeze)).not.toBeNull();
      expect(report.goodput, JSON.stringify(report)).not.toBeNull();
      // Found lost by the worker (the service it hosts gone, or declared failed), or stopped when the group stopped: SIGKILLed, not waited out.
      expect(out).toMatch(/^\[launch\] chief:0 (is lost: the coordination service it hosts stopped answering|was declared failed by the coordination service) \(worker:0 says so\): SIGKILL$|^\[launch\] chief:0 is stopped \(SIGSTOP\): it can neither save nor exit: SIGKILL$/m);
      expect(out).toMatch(/^\[launch\] chaos: .*restarting the group/m);
      expect(report.groups).toBe(2);
      expect(freeze?.detectMs).not.toBeNull();
    });
  });
}
