/**
 * The goodput log on disk: what GoodputRecorder appends (from its own calls and from a session's
 * events, on the virtual clock) reads back record for record; a second process appends to the
 * same file; and every file is hostile input: a log cut at every byte offset, random bytes and
 * lines, a directory in a log's place, and a file over the size bound never crash the reader
 * or yield a record that was not written.
 */
import { appendFileSync, mkdirSync, readFileSync, rmSync, symlinkSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { GoodputRecorder, parseGoodputLog, readGoodputLogs, type GoodputRecord, type SessionEvent } from "../../src/index.js";
import { ValueError } from "../../src/errors.js";
import { GoodputLogFollower, MAX_GOODPUT_LOG_BYTES, MAX_GOODPUT_LOGS } from "../../src/goodput/goodputLog.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { seededRandom } from "../util/seed.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-goodput-");

/** A log of one process: its start, a phase, training, a save (its blocking part), a mark, a notice, its end. */
const writeOneProcess = async (dir: string, clock: VirtualClock): Promise<GoodputRecorder> => {
  const r = GoodputRecorder.open({ logDir: dir, task: "chief:0", chief: true, clock, processStartMs: clock.now() - 2_000 });
  await clock.advance(3_000);
  r.phase("clusterJoin", 3_000);
  r.ready(0);
  await clock.advance(10_000);
  const saved: SessionEvent = { type: "checkpointSaved", time: clock.now(), globalStep: 100, path: join(dir, "model.ckpt-100"), durationMs: 900, blockingMs: 40 };
  r.listener(saved);
  await clock.advance(500);
  // Within 10 s of the save's mark: not written.
  r.listener({ type: "stepRate", time: clock.now(), globalStep: 105, stepsPerSec: 10 });
  await clock.advance(10_000);
  r.listener({ type: "summaryWritten", time: clock.now(), globalStep: 120, durationMs: 1, hook: "SummarySaverHook" });
  r.notice();
  r.notice();
  await clock.advance(1_000);
  r.end(130, 42);
  r.end(131, 0);
  return r;
};

describe("the goodput log", () => {
  it("records what the recorder was told and what the session's events say, one line each, under <logdir>/goodput/<task>.jsonl", async () => {
    const dir = tempDir();
    const clock = new VirtualClock();
    const t0 = clock.now();
    const r = await writeOneProcess(dir, clock);
    expect(r.path).toBe(join(dir, "goodput", "chief-0.jsonl"));
    const records = parseGoodputLog(readFileSync(r.path, "utf8")).records;
    expect(records).toEqual([
      { v: 1, type: "start", t: t0, task: "chief:0", proc: r.proc, pid: process.pid, chief: true, processStartMs: t0 - 2_000 },
      { v: 1, type: "phase", t: t0 + 3_000, bucket: "clusterJoin", ms: 3_000 },
      { v: 1, type: "ready", t: t0 + 3_000, step: 0 },
      { v: 1, type: "phase", t: t0 + 13_000, bucket: "checkpointSave", ms: 40 },
      { v: 1, type: "mark", t: t0 + 13_000, step: 100, checkpoint: true },
      { v: 1, type: "mark", t: t0 + 23_500, step: 120 },
      { v: 1, type: "notice", t: t0 + 23_500 },
      { v: 1, type: "end", t: t0 + 24_500, proc: r.proc, step: 130, exitCode: 42 },
    ] satisfies GoodputRecord[]);
  });

  it("a replica group's wait for a lost rank and its re-formed ring (the task's events, forwarded by the session) are `aborted` and `ready`: training is down between them", async () => {
    const dir = tempDir();
    const clock = new VirtualClock();
    const r = GoodputRecorder.open({ logDir: dir, task: "chief:0", chief: true, clock, processStartMs: clock.now() });
    r.ready(0);
    await clock.advance(5_000);
    const lostAt = clock.now();
    r.listener({ type: "replicaRankLost", time: lostAt, task: "chief:0", lost: "/job:worker/replica:0/task:1", maxWaitSecs: 7200 });
    await clock.advance(12_000);
    r.listener({ type: "replicaGroupReformed", time: clock.now(), task: "chief:0", generation: 2, rejoined: "/job:worker/replica:0/task:1" });
    r.end(null, 0);
    const records = parseGoodputLog(readFileSync(r.path, "utf8")).records;
    expect(records.map((x) => [x.type, x.t - lostAt])).toEqual([
      ["start", -5_000],
      ["ready", -5_000],
      ["aborted", 0],
      ["ready", 12_000],
      ["end", 12_000],
    ]);
    // The re-formed ring's `ready` says the state was kept (nothing restored) and who rejoined, by launch's name.
    expect(records[3]).toEqual({ v: 1, type: "ready", t: lostAt + 12_000, step: null, kept: true, rejoined: "worker:1" });
  });

  it("a re-formed ring whose rejoined rank is not known, or has a name no record holds, keeps its state without a name; a record that says `kept` reads back, one with a bad `rejoined` is skipped", () => {
    const dir = tempDir();
    const clock = new VirtualClock();
    const r = GoodputRecorder.open({ logDir: dir, task: "chief:0", chief: true, clock, processStartMs: clock.now() });
    r.kept(null);
    r.kept("x".repeat(65));
    r.kept("/job:evaluator/replica:0/task:0");
    r.end(null, 0);
    const text = readFileSync(r.path, "utf8");
    expect(parseGoodputLog(text).records.filter((x) => x.type === "ready")).toEqual([
      { v: 1, type: "ready", t: clock.now(), step: null, kept: true },
      { v: 1, type: "ready", t: clock.now(), step: null, kept: true },
      { v: 1, type: "ready", t: clock.now(), step: null, kept: true, rejoined: "evaluator:0" },
    ]);
    const hostile = `${JSON.stringify({ v: 1, type: "ready", t: 1, step: null, kept: true, rejoined: "" })}\n${JSON.stringify({ v: 1, type: "ready", t: 1, step: null, kept: "yes" })}\n`;
    expect(parseGoodputLog(hostile)).toMatchObject({ records: [], skippedLines: 2 });
  });

  it("a session's recoverable failure and its re-created session are `aborted` and `ready`; a failed save's blocking part is a phase", async () => {
    const dir = tempDir();
    const clock = new VirtualClock();
    const r = GoodputRecorder.open({ logDir: dir, task: "local", chief: true, clock, processStartMs: clock.now() });
    r.listener({ type: "sessionAborted", time: clock.now(), error: new Error("x"), cause: "Error: x" });
    await clock.advance(2_000);
    r.listener({ type: "sessionCreated", time: clock.now(), session: undefined as never, coord: undefined as never, recovery: 1, restoredFrom: null });
    r.listener({ type: "checkpointFailed", time: clock.now(), globalStep: 3, error: new Error("disk"), durationMs: 5 });
    r.end(null, 1);
    expect(parseGoodputLog(readFileSync(r.path, "utf8")).records.map((x) => [x.type, "ms" in x ? x.ms : "step" in x ? x.step : null])).toEqual([
      ["start", null],
      ["aborted", null],
      ["ready", null],
      ["phase", 5],
      ["end", null],
    ]);
  });

  it("each process of a task appends to the same file; readGoodputLogs reads every task's, sorted, and none without the folder", async () => {
    const dir = tempDir();
    expect(readGoodputLogs(dir)).toEqual([]);
    const clock = new VirtualClock();
    await writeOneProcess(dir, clock);
    await clock.advance(5_000);
    await writeOneProcess(dir, clock);
    const w = GoodputRecorder.open({ logDir: dir, task: "worker:0", chief: false, clock });
    w.end(null, 0);
    const logs = readGoodputLogs(dir);
    expect(logs.map((l) => [l.task, l.records.filter((x) => x.type === "start").length, l.skippedLines])).toEqual([
      ["chief:0", 2, 0],
      ["worker:0", 1, 0],
    ]);
  });

  it("a follower reads only what was appended: a line still being written waits until it is whole; a file replaced is read again", () => {
    const dir = tempDir();
    mkdirSync(join(dir, "goodput"));
    const path = join(dir, "goodput", "local.jsonl");
    const line = (r: GoodputRecord): string => `${JSON.stringify(r)}\n`;
    const start = { v: 1, type: "start", t: 1, task: "local", proc: "a", pid: 7, chief: true, processStartMs: 0 } as const satisfies GoodputRecord;
    writeFileSync(path, line(start));
    const follower = new GoodputLogFollower(dir);
    expect(follower.read()[0]?.records).toEqual([start]);
    const mark = line({ v: 1, type: "mark", t: 2, step: 5 });
    // Half a line: not a record yet (nor skipped for good).
    appendFileSync(path, mark.slice(0, 10));
    expect(follower.read()[0]).toMatchObject({ records: [start] });
    appendFileSync(path, mark.slice(10));
    expect(follower.read()[0]?.records).toEqual([start, { v: 1, type: "mark", t: 2, step: 5 }]);
    expect(follower.read()[0]?.skippedLines).toBe(0);
    // Replaced by a shorter file: read from its start.
    rmSync(path);
    writeFileSync(path, line({ ...start, pid: 8 }));
    expect(follower.read()[0]?.records).toEqual([{ ...start, pid: 8 }]);
  });

  it("a directory with more logs than a run can have is refused, naming it (the board reads no unbounded number of files)", () => {
    const dir = tempDir();
    mkdirSync(join(dir, "goodput"));
    for (let i = 0; i <= MAX_GOODPUT_LOGS; i++) writeFileSync(join(dir, "goodput", `t${i}.jsonl`), "");
    expect(() => readGoodputLogs(dir)).toThrow(new RegExp(`holds ${MAX_GOODPUT_LOGS + 1} goodput logs, more than the ${MAX_GOODPUT_LOGS} a run can have`));
  });

  it("a torn last line (a process killed in mid-write) is ended by the next process before it writes: only that line is lost", async () => {
    const dir = tempDir();
    const clock = new VirtualClock();
    const first = GoodputRecorder.open({ logDir: dir, task: "local", chief: true, clock });
    first.ready(0);
    appendFileSync(first.path, `{"v":1,"type":"mark","t":`);
    const second = GoodputRecorder.open({ logDir: dir, task: "local", chief: true, clock });
    second.ready(5);
    second.end(7, 0);
    const log = readGoodputLogs(dir)[0];
    expect(log?.skippedLines).toBe(1);
    expect(log?.records.map((r) => r.type)).toEqual(["start", "ready", "start", "ready", "end"]);
    expect(log?.records.filter((r) => r.type === "start").map((r) => r.type === "start" && r.proc)).toEqual([first.proc, second.proc]);
  });

  it("a follower's answers are its own: a later read never changes the records an earlier one returned; a log rewritten from its start is read again", () => {
    const dir = tempDir();
    const clock = new VirtualClock();
    const r = GoodputRecorder.open({ logDir: dir, task: "local", chief: true, clock });
    const follower = new GoodputLogFollower(dir);
    const held = follower.read()[0]?.records ?? [];
    expect(held).toHaveLength(1);
    r.ready(0);
    expect(follower.read()[0]?.records).toHaveLength(2);
    expect(held).toHaveLength(1);
    // Rewritten in place (same file, longer than before): another process's log now.
    const other = { v: 1, type: "start", t: 9, task: "local", proc: "other", pid: 9, chief: true, processStartMs: 9 } as const satisfies GoodputRecord;
    writeFileSync(r.path, `${JSON.stringify(other)}\n${JSON.stringify({ v: 1, type: "mark", t: 10, step: 1 })}\n${JSON.stringify({ v: 1, type: "mark", t: 11, step: 2 })}\n`);
    expect(follower.read()[0]?.records.map((x) => x.type === "start" ? x.proc : x.type)).toEqual(["other", "mark", "mark"]);
  });

  it("cut at every byte offset: never throws, and the records read are exactly the whole lines before the cut", async () => {
    const dir = tempDir();
    const r = await writeOneProcess(dir, new VirtualClock());
    const bytes = readFileSync(r.path);
    const full = parseGoodputLog(bytes.toString("utf8")).records;
    for (let n = 0; n <= bytes.length; n++) {
      const text = bytes.subarray(0, n).toString("utf8");
      const { records, skippedLines } = parseGoodputLog(text);
      const wholeLines = text.split("\n").length - 1;
      // A cut inside a line's last bytes may still parse (`...}` lost its newline only).
      expect(records.length === wholeLines || records.length === wholeLines + 1, `cut at ${n}`).toBe(true);
      expect(records).toEqual(full.slice(0, records.length));
      expect(skippedLines, `cut at ${n}`).toBeLessThanOrEqual(1);
    }
  });

  it("random bytes and lines that are JSON but not records are skipped and counted, never records", () => {
    const random = seededRandom("goodput log fuzz");
    for (let i = 0; i < 300; i++) {
      const bytes = Buffer.from(Array.from({ length: Math.floor(random.next() * 400) }, () => Math.floor(random.next() * 256)));
      const { records } = parseGoodputLog(bytes.toString("utf8"));
      expect(records).toEqual([]);
    }
    const foreign = [
      `{"v":1,"type":"start","t":1,"task":"x","pid":1,"chief":true}`,
      `{"v":2,"type":"mark","t":1,"step":1}`,
      `{"v":1,"type":"mark","t":-1,"step":1}`,
      `{"v":1,"type":"mark","t":1,"step":1.5}`,
      `{"v":1,"type":"phase","t":1,"bucket":"other","ms":1}`,
      `{"v":1,"type":"phase","t":1,"bucket":"restore","ms":1e400}`,
      `[1,2,3]`,
      `null`,
      `"mark"`,
    ].join("\n");
    expect(parseGoodputLog(foreign)).toEqual({ records: [], skippedLines: 9 });
    // A field a later version adds is dropped, not an error (the log stays readable forward).
    expect(parseGoodputLog(`{"v":1,"type":"mark","t":1,"step":1,"later":true}`)).toEqual({ records: [{ v: 1, type: "mark", t: 1, step: 1 }], skippedLines: 0 });
    // A checkpoint's mark says so; any other value there is not a record the writer makes.
    expect(parseGoodputLog(`{"v":1,"type":"mark","t":1,"step":1,"checkpoint":true}\n{"v":1,"type":"mark","t":1,"step":1,"checkpoint":"yes"}`)).toEqual({
      records: [{ v: 1, type: "mark", t: 1, step: 1, checkpoint: true }],
      skippedLines: 1,
    });
  });

  it("a directory in a log's place, or a log over the size bound, is a one-line ValueError naming it (a FIFO: goodputLog.process.test.ts)", () => {
    const dir = tempDir();
    mkdirSync(join(dir, "goodput", "chief-0.jsonl"), { recursive: true });
    expect(() => readGoodputLogs(dir)).toThrow(ValueError);
    expect(() => readGoodputLogs(dir)).toThrow(/chief-0\.jsonl is not a regular file; remove it/);
    const big = tempDir();
    mkdirSync(join(big, "goodput"));
    const path = join(big, "goodput", "local.jsonl");
    writeFileSync(path, "");
    truncateSync(path, MAX_GOODPUT_LOG_BYTES + 1);
    expect(() => readGoodputLogs(big)).toThrow(new RegExp(`local\\.jsonl is larger than the ${MAX_GOODPUT_LOG_BYTES} bytes a log can be`));
  });

  it.skipIf(process.platform !== "linux")("a log that cannot be written (a full disk) is said once, and training's calls go on", () => {
    const dir = tempDir();
    const warnings: string[] = [];
    const logger = { debug: () => undefined, info: () => undefined, warn: (m: string) => void warnings.push(m), error: () => undefined };
    // A full disk: the log is /dev/full, where every write fails with ENOSPC (the start record's included).
    mkdirSync(join(dir, "goodput"));
    symlinkSync("/dev/full", join(dir, "goodput", "local.jsonl"));
    const r = GoodputRecorder.open({ logDir: dir, task: "local", chief: true, logger, clock: new VirtualClock() });
    r.ready(0);
    r.mark(1);
    r.end(1, 0);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/^the goodput log .*local\.jsonl could not be written \(ENOSPC: .*\); this process records no more goodput \(training goes on\)$/);
  });
});
