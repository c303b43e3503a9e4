/**
 * The logger every hook and service writes through. The default writes to the console; pass
 * your own (pino, winston, a test spy) through the options of `MonitoredSession` or a hook.
 *
 * @module
 */

/** Log levels, lowest first. */
export type LogLevel = "debug" | "info" | "warn" | "error";

/** A minimal structured logger. `fields` carry machine-readable context. */
export interface Logger {
  debug(message: string, fields?: Readonly<Record<string, unknown>>): void;
  info(message: string, fields?: Readonly<Record<string, unknown>>): void;
  warn(message: string, fields?: Readonly<Record<string, unknown>>): void;
  error(message: string, fields?: Readonly<Record<string, unknown>>): void;
}

const parseLevel = (s: string | undefined): LogLevel | undefined =>
  s === "debug" || s === "info" || s === "warn" || s === "error" ? s : undefined;

const rank: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

/** A `Logger` whose calls at or above `level` go to `write`; those below are dropped. */
export const levelLogger = (level: LogLevel, write: (level: LogLevel, message: string, fields: Readonly<Record<string, unknown>> | undefined) => void): Logger => {
  const min = rank[level];
  const at =
    (l: LogLevel) =>
    (message: string, fields?: Readonly<Record<string, unknown>>): void => {
      if (rank[l] >= min) write(l, message, fields);
    };
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
};

/** Where `console` prints each level. */
const consoleSinks: Record<LogLevel, (s: string) => void> = {
  debug: (s) => console.debug(s),
  info: (s) => console.info(s),
  warn: (s) => console.warn(s),
  error: (s) => console.error(s),
};

/**
 * A console logger that prints `LEVEL message` lines at or above `level`
 * (default: `MONITORED_SESSION_LOG_LEVEL`, else `info`).
 */
export const consoleLogger = (level: LogLevel = parseLevel(process.env["MONITORED_SESSION_LOG_LEVEL"]) ?? "info"): Logger =>
  levelLogger(level, (l, message, fields) => consoleSinks[l](`${l.toUpperCase()} ${message}${fields === undefined ? "" : ` ${JSON.stringify(fields)}`}`));

/** A logger that drops everything. */
export const silentLogger: Logger = {
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
};

/** The library's default logger: console, level `info`. */
export const defaultLogger: Logger = consoleLogger();
