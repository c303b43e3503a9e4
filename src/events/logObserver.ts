/**
 * How the session's events become log lines. Hooks, the session pipeline and the services a
 * hook opens write their lines to the session's event logger, which emits each as a `log` event
 * on `events$` (beside the typed events that carry data, such as `stepRate` or `warning`), and
 * one observer, {@link logObserver}, prints the `log` events. `MonitoredSession` subscribes one to its
 * stream before anything happens (its `logger` option says where it writes; its `logObserver`
 * option replaces it); a second observer sees every line the first does.
 *
 * - {@link eventLogger} is the `Logger` a session gives its hooks (`HookEnv.logger`): each call
 *   emits a `log` event.
 * - {@link logObserver} prints `log` events at their level. Every other event prints nothing:
 *   it is data for the observers that want it (a progress display, a profiler, a UI). An
 *   emitter with a line to show (a `warning`'s message, `StepCounterHook`'s
 *   `global_step/sec: <rate>` beside its `stepRate`) writes it to its logger, which in a session
 *   is an {@link eventLogger}: one rule, and nothing is printed twice.
 *
 * @example
 * ```ts
 * import { consoleLogger, logObserver, MonitoredSession, type Graph } from "monitored-session";
 *
 * declare const graph: Graph;
 * // Every line of the session twice: on the console at info, and as JSON lines (debug included).
 * const json = {
 *   debug: (message: string) => process.stderr.write(`${JSON.stringify({ level: "debug", message })}\n`),
 *   info: (message: string) => process.stderr.write(`${JSON.stringify({ level: "info", message })}\n`),
 *   warn: (message: string) => process.stderr.write(`${JSON.stringify({ level: "warn", message })}\n`),
 *   error: (message: string) => process.stderr.write(`${JSON.stringify({ level: "error", message })}\n`),
 * };
 * const session = await MonitoredSession.create({ graph, logObserver: [logObserver(consoleLogger("info")), logObserver(json)] });
 * await session.close();
 * ```
 *
 * @module
 */

import type { Logger, LogLevel } from "../Logger.js";
import type { SessionEvent } from "./SessionEvent.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A function that hears a session's events (usable as an rxjs observer: `events$.subscribe(f)`). */
export type SessionEventListener = (event: SessionEvent) => void;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * A `Logger` whose every call emits a `log` event through `emit`, stamped with `now()` (and with
 * `source`, when given: see the `log` event). A session gives one to its hooks (`HookEnv.logger`)
 * and its own layers, so that their lines reach every observer of `events$`.
 */
export const eventLogger = (emit: SessionEventListener, now: () => number, source?: string): Logger => {
  const logger = loggerOf((level, message, fields) =>
    emit({ type: "log", time: now(), level, message, ...(fields === undefined ? {} : { fields }), ...(source === undefined ? {} : { source }) }),
  );
  eventSinks.set(logger, emit);
  return logger;
};

/**
 * Where an {@link eventLogger}'s events go, for a component handed one as its printer: it passes
 * its own `log` events on whole (its `source` kept) instead of logging them again as lines of
 * the logger's owner. `undefined` for any other logger.
 */
export const eventSinkOf = (logger: Logger): SessionEventListener | undefined => eventSinks.get(logger);

/**
 * The log observer: writes a session's `log` events to `logger` (the same text, level and
 * fields as the emitter's logger call). Every other event is data and prints nothing.
 */
export const logObserver =
  (logger: Logger): SessionEventListener =>
  (e) => {
    if (e.type === "log") write(logger, e.level, e.message, e.fields);
  };

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

type Fields = Readonly<Record<string, unknown>>;

/** The event loggers made here, by the listener their events go to (see {@link eventSinkOf}). */
const eventSinks = new WeakMap<Logger, SessionEventListener>();

/** A `Logger` whose four levels call `line`. */
const loggerOf = (line: (level: LogLevel, message: string, fields?: Fields) => void): Logger => {
  const at =
    (level: LogLevel) =>
    (message: string, fields?: Fields): void =>
      line(level, message, fields);
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
};

/** Writes a line to `logger` at `level`, passing `fields` only when there are some (as the caller did). */
const write = (logger: Logger, level: LogLevel, message: string, fields: Fields | undefined): void => {
  if (fields === undefined) logger[level](message);
  else logger[level](message, fields);
};
