/**
 * `--log-format json` of `run` and `launch`: every line the command prints is one JSON object,
 * for a log collector (Loki, Elasticsearch, Cloud Logging) to take without parsing text.
 *
 * - A log line: `{"time":"2026-11-30T02:30:00.000Z","level":"info","message":"…"}`, with its
 *   structured `fields` (`step`, `path`, …) when the line has some.
 * - A progress line of `run` (stdout): `{"time":…,"type":"progress","step":…,"lastStep":…,
 *   "stepsPerSec":…,"loss":…,"etaSecs":…,"warnings":…}` (absent figures left out).
 * - A line the command writes outside its logger (a configuration problem, a failure) is an
 *   `error` record of the same shape.
 * - Under `launch`, a task's records gain `"task":"worker:1"`; `launch`'s own, `"task":"launch"`.
 *   A line of a task that is not a JSON object (a program's own `console.log`) becomes the
 *   `message` of an `info` record of that task.
 *
 * @module
 */

import { Writable } from "node:stream";

import type { LogLevel } from "../Logger.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The formats of `--log-format`. */
export const LOG_FORMATS = ["text", "json"] as const;

/** `text` (lines for people, the default) or `json` (one JSON object a line). */
export type LogFormat = (typeof LOG_FORMATS)[number];

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** One JSON line: `time` (ISO 8601, from `timeMs`) first, then `record`'s keys. */
export const jsonLine = (timeMs: number, record: Readonly<Record<string, unknown>>): string => `${JSON.stringify({ time: new Date(timeMs).toISOString(), ...record }, jsonSafe)}\n`;

/** One log record as a JSON line: `level`, `message`, and `fields` when there are some. */
export const jsonLogLine = (timeMs: number, level: LogLevel, message: string, fields?: Readonly<Record<string, unknown>>): string =>
  jsonLine(timeMs, fields === undefined || Object.keys(fields).length === 0 ? { level, message } : { level, message, fields });

/**
 * A stream that writes each complete line written to it to `out` as a `level` record
 * ({@link jsonLogLine}), stamped with `now()`: for the lines a command writes outside its logger.
 * A last line without its newline is written when the stream ends.
 */
export const jsonLineStream = (out: NodeJS.WritableStream, now: () => number, level: LogLevel): Writable => {
  let pending = "";
  const emit = (line: string): void => {
    if (line !== "") out.write(jsonLogLine(now(), level, line));
  };
  return new Writable({
    write(chunk: Buffer | string, _encoding, done) {
      const lines = (pending + String(chunk)).split("\n");
      pending = lines.pop() ?? "";
      for (const line of lines) emit(line);
      done();
    },
    final(done) {
      emit(pending);
      pending = "";
      done();
    },
  });
};

/**
 * A task's output line under `launch --log-format json`: a JSON object gains `task` (its own
 * `task` key, if any, is kept); any other line becomes an `info` record whose `message` it is.
 */
export const taskJsonLine = (task: string, line: string, now: () => number): string => {
  const record = parseObject(line);
  if (record === undefined) return jsonLine(now(), { task, level: "info", message: line });
  // `time` first, as in launch's own records, when the task's record has one.
  return `${JSON.stringify({ ...("time" in record ? { time: record["time"] } : {}), task, ...record }, jsonSafe)}\n`;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** A JSON object on one line, else `undefined` (never throws). */
const parseObject = (line: string): Record<string, unknown> | undefined => {
  if (!line.startsWith("{")) return undefined;
  try {
    const v: unknown = JSON.parse(line);
    return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
};

/** JSON.stringify's replacer: what JSON cannot say (a bigint, an error, a non-finite number) as text. */
const jsonSafe = (_key: string, value: unknown): unknown => {
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "number" && !Number.isFinite(value)) return String(value);
  if (value instanceof Error) return `${value.name}: ${value.message}`;
  return value;
};
