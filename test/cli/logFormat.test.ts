/**
 * `--log-format json` (src/cli/logFormat.ts and the progress display): every line is one JSON
 * object; log records carry their level, message and structured fields; progress records their
 * figures; a line written outside the logger is an error record; a task's line under `launch`
 * names its task, whether it was JSON or not. In this process, on a virtual clock; then `run`
 * itself, in this process too, on the tiny Graph job.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Writable } from "node:stream";

import { describe, expect, it } from "vitest";

import { jsonLine, jsonLineStream, jsonLogLine, taskJsonLine, withJsonConsole } from "../../src/cli/logFormat.js";
import { createProgress } from "../../src/cli/progress.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { cliInProcess, linearJob } from "../util/cli.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-log-format-");

/** A stream that keeps what is written to it. */
const sink = (): Writable & { text: () => string } => {
  let text = "";
  const w = new Writable({
    write(chunk: Buffer | string, _encoding, done) {
      text += String(chunk);
      done();
    },
  });
  return Object.assign(w, { text: () => text });
};

const records = (text: string): Record<string, unknown>[] =>
  text
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as Record<string, unknown>);

const T0 = Date.UTC(2026, 10, 30, 2, 30, 0);

describe("JSON lines", () => {
  it("a log record: time (ISO 8601) first, level, message, and fields only when there are some", () => {
    expect(jsonLogLine(T0, "info", "Saving checkpoints for 5.", { step: 5 })).toBe(`{"time":"2026-11-30T02:30:00.000Z","level":"info","message":"Saving checkpoints for 5.","fields":{"step":5}}\n`);
    expect(jsonLogLine(T0, "warn", "slow", {})).toBe(`{"time":"2026-11-30T02:30:00.000Z","level":"warn","message":"slow"}\n`);
  });

  it("what JSON cannot say: a bigint and an error as text, a non-finite number as null; a message with a newline stays one line", () => {
    const line = jsonLine(T0, { n: 2n ** 64n, error: new RangeError("too far"), loss: Number.NaN, message: "a\nb" });
    expect(line.split("\n")).toHaveLength(2);
    expect(JSON.parse(line)).toEqual({ time: "2026-11-30T02:30:00.000Z", n: "18446744073709551616", error: "RangeError: too far", loss: null, message: "a\nb" });
  });

  it("a stream of what is written outside the logger: each write one record, its final newline dropped, a multi-line message (a stack) one record", () => {
    const out = sink();
    const s = jsonLineStream(out, () => T0, "error", { task: "launch" });
    s.write("config.yaml: lastStep: expected a positive integer\n");
    s.write("Training failed: Error: boom\n    at step (job.ts:3:9)\n");
    s.write("");
    expect(records(out.text())).toEqual([
      { time: "2026-11-30T02:30:00.000Z", task: "launch", level: "error", message: "config.yaml: lastStep: expected a positive integer" },
      { time: "2026-11-30T02:30:00.000Z", task: "launch", level: "error", message: "Training failed: Error: boom\n    at step (job.ts:3:9)" },
    ]);
  });

  it("a task's line under launch: a JSON object gains its task (time kept first); anything else, arrays and broken JSON included, becomes an info record", () => {
    const now = (): number => T0;
    expect(taskJsonLine("worker:1", `{"time":"x","level":"warn","message":"m"}`, now)).toBe(`{"time":"x","level":"warn","message":"m","task":"worker:1"}\n`);
    for (const line of ["hello from console.log", "[1,2]", `{"broken":`, ""]) {
      expect(JSON.parse(taskJsonLine("chief:0", line, now))).toEqual({ time: "2026-11-30T02:30:00.000Z", task: "chief:0", level: "info", message: line });
    }
  });

  it("a task's record cannot pass for another task's or launch's: launch's task wins, the record's own is kept as recordTask", () => {
    expect(JSON.parse(taskJsonLine("worker:1", `{"task":"launch","level":"error","message":"m"}`, () => T0))).toEqual({ task: "worker:1", recordTask: "launch", level: "error", message: "m" });
    expect(JSON.parse(taskJsonLine("worker:1", `{"task":"worker:1","message":"m"}`, () => T0))).toEqual({ task: "worker:1", message: "m" });
  });

  it("while run runs, the global console writes records: log on out (info), warn and error on err; the console is restored after", async () => {
    const out = sink();
    const err = sink();
    const saved = globalThis.console;
    await withJsonConsole(out, err, () => T0, async () => {
      console.log("from the job");
      console.warn("Hi, looks like you are running TensorFlow.js in Node.js");
      console.error("a library's error");
    });
    expect(globalThis.console).toBe(saved);
    expect(records(out.text())).toEqual([{ time: "2026-11-30T02:30:00.000Z", level: "info", message: "from the job" }]);
    expect(records(err.text()).map((r) => [r["level"], r["message"]])).toEqual([
      ["warn", "Hi, looks like you are running TensorFlow.js in Node.js"],
      ["error", "a library's error"],
    ]);
  });
});

describe("Node's own warnings under JSON", () => {
  it("a process warning while run runs is a warn record on err, not Node's plain line; Node's listeners are back after", async () => {
    const out = sink();
    const err = sink();
    const before = process.listeners("warning");
    await withJsonConsole(out, err, () => T0, async () => {
      expect(process.listeners("warning")).toHaveLength(1);
      expect(before.every((l) => !process.listeners("warning").includes(l))).toBe(true);
      const emitted = new Promise<void>((resolve) => process.once("warning", () => resolve()));
      process.emitWarning("the old API is going away", "DeprecationWarning");
      // A warning is emitted on the next tick.
      await emitted;
    });
    expect(records(err.text())).toEqual([{ time: "2026-11-30T02:30:00.000Z", level: "warn", message: "DeprecationWarning: the old API is going away" }]);
    expect(out.text()).toBe("");
    expect(process.listeners("warning")).toEqual(before);
  });
});

describe("the progress display with format json", () => {
  it("logs records with their fields on err, progress records on out, and never a bar (even on a terminal)", async () => {
    const clock = new VirtualClock({ startMs: T0 });
    const out = sink();
    const err = sink();
    const p = createProgress({ tty: true, out, err, clock, format: "json", logLevel: "info" });
    p.logger.debug("dropped below the level");
    p.logger.info("Saving checkpoints for 0.", { step: 0 });
    p.start(0, 100);
    await clock.advanceSecs(2);
    p.warning();
    p.update(50, 0.25);
    p.stop();
    expect(records(err.text())).toEqual([{ time: "2026-11-30T02:30:00.000Z", level: "info", message: "Saving checkpoints for 0.", fields: { step: 0 } }]);
    expect(records(out.text())).toEqual([{ time: "2026-11-30T02:30:02.000Z", type: "progress", step: 50, lastStep: 100, stepsPerSec: 25, loss: 0.25, etaSecs: 2, warnings: 1 }]);
  });
});

describe("run --log-format json", () => {
  const job = (dir: string, extra = ""): string => {
    const file = join(dir, "c.yaml");
    writeFileSync(file, `module: ${linearJob}\ncheckpoint: { dir: ckpt, saveSteps: 5 }\nsummaries: { dir: logs }\nlastStep: 20\nlogStepCountSteps: 5\n${extra}`);
    return file;
  };

  it("every line on stderr is a log record and every line on stdout a progress record; the last progress record is at the last step", async () => {
    const r = await cliInProcess(["run", job(tempDir()), "--log-format", "json"]);
    expect(r.code, r.stderr).toBe(0);
    const log = records(r.stderr);
    for (const rec of log) expect(Object.keys(rec).slice(0, 3)).toEqual(["time", "level", "message"]);
    expect(log).toContainEqual(expect.objectContaining({ level: "info", message: expect.stringMatching(/^Starting at global step 0; last step 20\.$/) as unknown }));
    expect(log).toContainEqual(expect.objectContaining({ level: "info", message: expect.stringMatching(/^Saving checkpoints for 5 into /) as unknown, fields: { step: 5 } }));
    const progress = records(r.stdout);
    expect(progress.every((rec) => rec["type"] === "progress")).toBe(true);
    expect(progress.at(-1)).toMatchObject({ step: 20, lastStep: 20 });
  });

  it("a bad configuration is one error record per problem, exit 2", async () => {
    const r = await cliInProcess(["run", job(tempDir(), "saveSummariesSteps: -3\n"), "--log-format", "json"]);
    expect(r.code).toBe(2);
    const log = records(r.stderr);
    expect(log.length).toBeGreaterThan(0);
    for (const rec of log) expect(rec).toMatchObject({ level: "error" });
    expect(log.map((rec) => rec["message"]).join("\n")).toContain("saveSummariesSteps");
    expect(r.stdout).toBe("");
  });

  it("--log-format with another value is a usage error naming the choices", async () => {
    const r = await cliInProcess(["run", "c.yaml", "--log-format", "xml"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("error: option '--log-format <format>' argument 'xml' is invalid. Allowed choices are text, json.");
  });

  it("with --log-format json, a usage error is an error record too (launch's name their task)", async () => {
    const r = await cliInProcess(["run", "c.yaml", "--log-format", "json", "--log-level", "loud"]);
    expect(r.code).toBe(2);
    const log = records(r.stderr);
    expect(log[0]).toMatchObject({ level: "error", message: expect.stringContaining("error: option '--log-level <level>' argument 'loud' is invalid.") as unknown });
    const l = await cliInProcess(["launch", "--workers", "2", "--log-format", "json", "--verbose", "--", "node", "x.js"]);
    expect(l.code).toBe(2);
    expect(records(l.stderr)).toEqual([expect.objectContaining({ task: "launch", level: "error", message: expect.stringContaining("--verbose is passed to each task's run") as unknown })]);
  });
});
