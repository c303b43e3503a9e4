/**
 * `monitored-session goodput <logdir> [--json]`: recomputes a run's goodput across every restart
 * of every task from the goodput logs alone (`<logdir>/goodput/*.jsonl`, which `run` writes),
 * and prints it as a table (one row a task, then the group), or as one JSON document with
 * `--json`. A logdir without goodput logs, or a log that cannot be read, is one line on stderr
 * and exit 2; lines that are not valid records are skipped and counted (said on stderr).
 *
 * @module
 */

import { existsSync, statSync } from "node:fs";

import { ValueError } from "../errors.js";
import { computeGoodput, formatSecs, type GoodputFigures, type RunGoodput } from "../goodput/computeGoodput.js";
import { BADPUT_BUCKETS, GOODPUT_DIR, readGoodputLogs } from "../goodput/goodputLog.js";
import { ExitCodes } from "../runtime/exitCodes.js";
import type { CliIo } from "./cliIo.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The options of `goodput`, as commander gives them. */
export interface GoodputFlags {
  readonly json?: boolean;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Prints the goodput of the run whose log directory is `logdir`; resolves with the exit code. */
export const goodputCommand = (logdir: string, flags: GoodputFlags, io: Pick<CliIo, "out" | "err">): number => {
  const fail = (line: string): number => {
    io.err.write(`monitored-session goodput: ${line}\n`);
    return ExitCodes.usage;
  };
  if (!existsSync(logdir) || !statSync(logdir).isDirectory()) return fail(`${logdir} is not a directory; give the log directory of a run (summaries.dir, else checkpoint.dir)`);
  let run: RunGoodput;
  try {
    run = computeGoodput(readGoodputLogs(logdir));
  } catch (e) {
    if (e instanceof ValueError) return fail(e.message);
    throw e;
  }
  if (run.group === null) return fail(`no goodput logs in ${logdir}/${GOODPUT_DIR}; \`monitored-session run\` writes them (a run of an older version wrote none)`);
  if (run.skippedLines > 0) {
    const what = run.skippedLines === 1 ? "1 line that is not a goodput record" : `${run.skippedLines} lines that are not goodput records`;
    io.err.write(`monitored-session goodput: skipped ${what} (a torn last line of a killed process is one)\n`);
  }
  io.out.write(flags.json === true ? `${JSON.stringify(run, null, 2)}\n` : table(run));
  return ExitCodes.done;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** The table: a row per task and one for the group; a column per figure. */
const table = (run: RunGoodput): string => {
  const header = ["task", "processes", "total", "goodput", "productive", ...BADPUT_BUCKETS];
  const row = (name: string, processes: string, f: GoodputFigures): string[] => [
    name,
    processes,
    formatSecs(f.totalSecs),
    `${(f.goodput * 100).toFixed(1)}%`,
    formatSecs(f.productiveSecs),
    ...BADPUT_BUCKETS.map((b) => formatSecs(f.badput[b])),
  ];
  const rows = [header, ...run.tasks.map((t) => row(t.task, String(t.processes), t))];
  if (run.group !== null) rows.push(row(`group${run.group.chief === null ? " (no chief)" : ` (${run.group.chief})`}`, String(run.tasks.reduce((n, t) => n + t.processes, 0)), run.group));
  const widths = header.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length)));
  const faults = run.faults.length === 0 ? "" : `${faultsLine(run.faults)}\n`;
  const rejoins = run.rejoins.length === 0 ? "" : `${rejoinsLine(run.rejoins)}\n`;
  return rows.map((r) => r.map((cell, i) => (i === 0 ? cell.padEnd(widths[i] ?? 0) : cell.padStart(widths[i] ?? 0))).join("  ")).join("\n") + "\n" + faults + rejoins;
};

/** `Rejoined the group while the chief trained on: 2 (worker:1 at step 4100, worker:0 at step 9020)`. */
const rejoinsLine = (rejoins: RunGoodput["rejoins"]): string =>
  `Rejoined the group while the chief trained on: ${rejoins.length} (${rejoins.map((r) => `${r.task ?? "a rank"} at step ${r.step ?? "?"}`).join(", ")})`;

/** `Faults injected (launch --chaos): 3 (sigterm 2, sigkillChief 1)`. */
const faultsLine = (faults: RunGoodput["faults"]): string => {
  const counts = new Map<string, number>();
  for (const f of faults) counts.set(f.kind, (counts.get(f.kind) ?? 0) + 1);
  return `Faults injected (launch --chaos): ${faults.length} (${[...counts].map(([k, n]) => `${k} ${n}`).join(", ")})`;
};
