/**
 * `monitored-session goodput <logdir>` in process: the table and the JSON of logs written by
 * hand (every figure checked against the records), the lines it skips said once on stderr, and
 * bad input (no such directory, no logs, a log that is a directory, a log over the size bound)
 * one line on stderr and exit 2, nothing on stdout.
 */
import { mkdirSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { goodputCommand } from "../../src/cli/goodput.js";
import { MAX_GOODPUT_LOG_BYTES } from "../../src/goodput/goodputLog.js";
import type { GoodputRecord } from "../../src/index.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-goodput-command-");

const T0 = 1_700_000_000_000;
const at = (secs: number): number => T0 + secs * 1000;

/** Runs the command; its exit code and what it wrote. */
const goodput = (logdir: string, json = false): { code: number; out: string; err: string } => {
  let out = "";
  let err = "";
  const io = { out: { write: (s: string) => ((out += s), true) }, err: { write: (s: string) => ((err += s), true) } } as unknown as Parameters<typeof goodputCommand>[2];
  const code = goodputCommand(logdir, { json }, io);
  return { code, out, err };
};

const writeLog = (dir: string, task: string, records: readonly GoodputRecord[], extra = ""): void => {
  mkdirSync(join(dir, "goodput"), { recursive: true });
  writeFileSync(join(dir, "goodput", `${task.replace(":", "-")}.jsonl`), records.map((r) => `${JSON.stringify(r)}\n`).join("") + extra);
};

describe("monitored-session goodput", () => {
  it("a worker restarted alone: the chief's down time while its group waited, and a line under the table naming who rejoined at which step", () => {
    const dir = tempDir();
    writeLog(dir, "chief:0", [
      { v: 1, type: "start", t: at(0), task: "chief:0", proc: "c", pid: 1, chief: true, processStartMs: at(0) },
      { v: 1, type: "ready", t: at(10), step: 0 },
      { v: 1, type: "mark", t: at(40), step: 3000 },
      // The group lost worker:1 at 50 s and re-formed its ring around it at 55 s: the chief's process trained on.
      { v: 1, type: "aborted", t: at(50) },
      { v: 1, type: "ready", t: at(55), step: null, kept: true, rejoined: "worker:1" },
      { v: 1, type: "mark", t: at(60), step: 4000 },
      { v: 1, type: "end", t: at(100), proc: "c", step: 8000, exitCode: 0 },
    ]);
    writeLog(dir, "worker:1", [
      { v: 1, type: "start", t: at(0), task: "worker:1", proc: "w1", pid: 2, chief: false, processStartMs: at(0) },
      { v: 1, type: "ready", t: at(10), step: 0 },
      { v: 1, type: "start", t: at(52), task: "worker:1", proc: "w2", pid: 3, chief: false, processStartMs: at(51) },
      { v: 1, type: "ready", t: at(55), step: null },
      { v: 1, type: "end", t: at(100), proc: "w2", step: 8000, exitCode: 0 },
    ]);
    const rows = goodput(dir).out.trimEnd().split("\n");
    // Interpolated between the chief's steps recorded before and after the loss.
    expect(rows.at(-1)).toBe("Rejoined the group while the chief trained on: 1 (worker:1 at step 3500)");
    // The chief's 5 s of waiting are not productive: 85 of its 100 s are.
    expect(rows[1]?.split(/\s{2,}/).slice(0, 5)).toEqual(["chief:0", "1", "1m40s", "85.0%", "1m25s"]);
    const run = JSON.parse(goodput(dir, true).out) as { rejoins: unknown; tasks: { task: string; processes: number }[] };
    expect(run.rejoins).toEqual([{ t: at(55), task: "worker:1", step: 3500 }]);
    expect(run.tasks.map((t) => [t.task, t.processes])).toEqual([
      ["chief:0", 1],
      ["worker:1", 2],
    ]);
  });

  it("prints a row per task and one for the group; --json gives the same figures", () => {
    const dir = tempDir();
    writeLog(dir, "chief:0", [
      { v: 1, type: "start", t: at(0), task: "chief:0", proc: "c", pid: 1, chief: true, processStartMs: at(0) },
      { v: 1, type: "ready", t: at(10), step: 0 },
      { v: 1, type: "phase", t: at(50), bucket: "checkpointSave", ms: 5_000 },
      { v: 1, type: "end", t: at(100), proc: "c", step: 900, exitCode: 0 },
    ]);
    writeLog(
      dir,
      "worker:0",
      [
        { v: 1, type: "start", t: at(0), task: "worker:0", proc: "w", pid: 2, chief: false, processStartMs: at(0) },
        { v: 1, type: "end", t: at(100), proc: "w", step: 900, exitCode: 0 },
      ],
      // A torn last line (a process killed in mid-write): skipped, and said.
      `{"v":1,"type":"ma`,
    );
    // launch --chaos's faults: a line under the table.
    writeFileSync(
      join(dir, "goodput", "launch.jsonl"),
      [
        { v: 1, type: "fault", t: at(30), id: 0, kind: "sigterm", target: "worker:0" },
        { v: 1, type: "fault", t: at(40), id: 1, kind: "sigkillChief", target: "chief:0" },
        { v: 1, type: "fault", t: at(60), id: 2, kind: "sigterm", target: "chief:0" },
      ]
        .map((r) => `${JSON.stringify(r)}\n`)
        .join(""),
    );
    const table = goodput(dir);
    expect(table.code).toBe(0);
    expect(table.err).toBe("monitored-session goodput: skipped 1 line that is not a goodput record (a torn last line of a killed process is one)\n");
    const rows = table.out.trimEnd().split("\n");
    expect(rows).toHaveLength(5);
    expect(rows[4]).toBe("Faults injected (launch --chaos): 3 (sigterm 2, sigkillChief 1)");
    expect(rows[1]?.split(/\s{2,}/)).toEqual(["chief:0", "1", "1m40s", "85.0%", "1m25s", "10.0s", "0.0s", "0.0s", "5.0s", "0.0s", "0.0s", "0.0s", "0.0s", "0.0s"]);
    expect(rows[3]?.split(/\s{2,}/).slice(0, 5)).toEqual(["group (chief:0)", "2", "1m40s", "85.0%", "1m25s"]);
    const json = goodput(dir, true);
    expect(json.code).toBe(0);
    const run = JSON.parse(json.out) as { group: { goodput: number; productiveSecs: number; badput: Record<string, number> }; skippedLines: number };
    expect(run.group.goodput).toBeCloseTo(0.85, 10);
    expect(run.group.badput).toMatchObject({ startup: 10, checkpointSave: 5 });
    expect(run.skippedLines).toBe(1);
  });

  it("bad input: one line on stderr, exit 2, nothing on stdout", () => {
    const dir = tempDir();
    const cases: [string, RegExp][] = [];
    cases.push([join(dir, "nope"), /^monitored-session goodput: .*nope is not a directory; give the log directory of a run \(summaries\.dir, else checkpoint\.dir\)\n$/]);
    cases.push([dir, /^monitored-session goodput: no goodput logs in .*; `monitored-session run` writes them \(a run of an older version wrote none\)\n$/]);
    const withDir = tempDir();
    mkdirSync(join(withDir, "goodput", "chief-0.jsonl"), { recursive: true });
    cases.push([withDir, /^monitored-session goodput: the goodput log .*chief-0\.jsonl is not a regular file; remove it\n$/]);
    const big = tempDir();
    mkdirSync(join(big, "goodput"));
    writeFileSync(join(big, "goodput", "local.jsonl"), "");
    truncateSync(join(big, "goodput", "local.jsonl"), MAX_GOODPUT_LOG_BYTES + 1);
    cases.push([big, /^monitored-session goodput: the goodput log .*local\.jsonl is larger than the \d+ bytes a log can be; .*move it away\n$/]);
    for (const [logdir, line] of cases) {
      const r = goodput(logdir);
      expect([r.code, r.out], logdir).toEqual([2, ""]);
      expect(r.err, logdir).toMatch(line);
    }
  });
});
