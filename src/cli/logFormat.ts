/**
 * `--log-format json` of `run` and `launch`: every line the command prints is one JSON object,
 * for a log collector (Loki, Elasticsearch, Cloud Logging) to take without parsing text.
 *
 * - A log line: `{"time":"2026-11-30T02:30:00.000Z","level":"info","message":"…"}`, with its
 *   structured `fields` (`step`, `path`, …) when the line has some.
 * - A progress line of `run` (stdout): `{"time":…,"type":"progress","step":…,"lastStep":…,
 *   "stepsPerSec":…,"loss":…,"etaSecs":…,"warnings":…}` (absent figures left out).
 * - What the command writes outside its logger (a configuration problem, a failure, a usage
 *   error) is an `error` record of the same shape, one per message (a stack trace stays one).
 * - While `run` runs, the global `console` writes records too: a job's `console.log` is an
 *   `info` record on stdout, a library's `console.warn` a `warn` record on stderr.
 * - A non-finite number (a diverged `loss`) is `null`.
 * - Under `launch`, a task's records gain `"task":"worker:1"`; `launch`'s own, `"task":"launch"`.
 *   A line of a task that is not a JSON object (a program's own `console.log`) becomes the
 *   `message` of an `info` record of that task.
 *
 * @module
 */

import { Console } from "node:console";
import { Writable } from "node:stream";

import { levelLogger, type Logger, type LogLevel } from "../Logger.js";

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
 * A stream that writes what each `write()` call gives it to `out` as one `level` record
 * ({@link jsonLogLine}, after `extra`'s keys), its final newline dropped, stamped with `now()`:
 * for the lines a command writes outside its logger. A message of several lines (a stack trace, a list of problems
 * written at once) stays one record.
 */
export const jsonLineStream = (out: NodeJS.WritableStream, now: () => number, level: LogLevel, extra: Readonly<Record<string, unknown>> = {}): Writable =>
  new Writable({
    write(chunk: Buffer | string, _encoding, done) {
      const message = String(chunk).replace(/\r?\n$/, "");
      if (message !== "") out.write(jsonLine(now(), { ...extra, level, message }));
      done();
    },
  });

/** A `Logger` that writes {@link jsonLogLine} records to `out`, dropping those below `minLevel` (default `info`). */
export const jsonLogger = (out: NodeJS.WritableStream, now: () => number, minLevel: LogLevel = "info"): Logger =>
  levelLogger(minLevel, (level, message, fields) => out.write(jsonLogLine(now(), level, message, fields)));

/**
 * While `body` runs, the global `console` writes JSON records: `console.log`/`info`/`debug` as
 * `info` records on `out`, `console.warn` as `warn` and `console.error` as `error` records on
 * `err` (a job's own lines, a library's notices), and Node's own process warnings (a
 * deprecation, too many listeners) are `warn` records on `err` instead of Node's plain line.
 * Restored afterwards.
 */
export const withJsonConsole = async <T>(out: NodeJS.WritableStream, err: NodeJS.WritableStream, now: () => number, body: () => Promise<T>): Promise<T> => {
  const saved = globalThis.console;
  const info = new Console({ stdout: jsonLineStream(out, now, "info"), stderr: jsonLineStream(err, now, "error") });
  const warn = new Console({ stdout: jsonLineStream(err, now, "warn"), stderr: jsonLineStream(err, now, "warn") });
  globalThis.console = Object.assign(Object.create(saved) as Console, {
    log: info.log.bind(info),
    info: info.info.bind(info),
    debug: info.debug.bind(info),
    warn: warn.warn.bind(warn),
    error: info.error.bind(info),
  });
  // Node's own warnings (a deprecation, too many listeners) are printed by its default listener
  // straight to stderr, past any console: while JSON is asked for, they are `warn` records too.
  const nodeListeners = process.listeners("warning");
  const onWarning = (w: Error): void => void err.write(jsonLine(now(), { level: "warn", message: `${w.name}: ${w.message}` }));
  process.removeAllListeners("warning");
  process.on("warning", onWarning);
  try {
    return await body();
  } finally {
    globalThis.console = saved;
    process.off("warning", onWarning);
    for (const l of nodeListeners) process.on("warning", l);
  }
};

/**
 * A task's output line under `launch --log-format json`: a JSON object gains `task` (its own
 * `task` key, if any, is kept); any other line becomes an `info` record whose `message` it is.
 */
export const taskJsonLine = (task: string, line: string, now: () => number): string => {
  const record = parseObject(line);
  if (record === undefined) return jsonLine(now(), { task, level: "info", message: line });
  // `time` first, as in launch's own records; launch's `task` wins (a record's own, when it
  // differs, is kept as `recordTask`), so that no task's line passes for another's or launch's.
  const own = record["task"];
  return `${JSON.stringify({ ...("time" in record ? { time: record["time"] } : {}), ...record, task, ...(own === undefined || own === task ? {} : { recordTask: own }) }, jsonSafe)}\n`;
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

/**
 * JSON.stringify's replacer: what JSON cannot say as text (a bigint, an error), a non-finite
 * number as `null` (a field keeps its type: a collector that maps `loss` as a float takes `null`,
 * not `"NaN"`; the message says which).
 */
const jsonSafe = (_key: string, value: unknown): unknown => {
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "number" && !Number.isFinite(value)) return null;
  if (value instanceof Error) return `${value.name}: ${value.message}`;
  return value;
};
