/**
 * The exit codes of a task (the `monitored-session` command, or a program of your own that
 * starts a task) and of `launch`: one table, shown by `--help` ({@link exitCodesHelp}) and, as
 * Markdown ({@link exitCodesMarkdown}), in README.md and docs/. Both are written from
 * {@link ExitCodes}, so the numbers cannot drift; a test compares the docs with them.
 *
 * @module
 */

import { CHIEF_LOST_EXIT_CODE } from "../preemption/PreemptionCluster.js";
import { PREEMPTION_EXIT_CODE } from "../preemption/TerminationConfig.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The exit codes. */
export const ExitCodes = {
  /** Done (under `launch`: every task). */
  done: 0,
  /** Any other failure: an error while training, a cluster failure. */
  failure: 1,
  /** Bad usage or configuration, the checkpoint directory in use, replicas that build different models. */
  usage: 2,
  /** Preempted (or `preemption.exitCode`): the chief saved a checkpoint on the notice, or there was nothing to save. */
  preempted: PREEMPTION_EXIT_CODE,
  /** The chief was lost while a preemption was pending or being agreed: nothing was saved. */
  chiefLost: CHIEF_LOST_EXIT_CODE,
} as const;

/** What a task killed by a signal exits with under `launch` (128 + the signal's number). */
export const SignalExitCodes = {
  /** SIGKILL (9). */
  killed: 128 + 9,
  /** SIGTERM (15). */
  terminated: 128 + 15,
} as const;

/** A row of the table: the code and what it means, in the same words everywhere. */
interface ExitCodeRow {
  readonly code: number;
  readonly meaning: string;
}

/** The table, in order. Markdown code spans (backticks) are dropped in the help text. */
const ROWS: readonly ExitCodeRow[] = [
  { code: ExitCodes.done, meaning: "done (under `launch`: every task)" },
  { code: ExitCodes.failure, meaning: "any other failure: an error while training; a cluster failure (a task declared failed, an error reported by another task)" },
  { code: ExitCodes.usage, meaning: "bad usage or configuration (every problem is printed); the checkpoint directory in use; the replicas build different models" },
  {
    code: ExitCodes.preempted,
    meaning: "preempted (or `preemption.exitCode`): on a termination notice the chief saved a checkpoint (at one agreed step, or at its own next step when the tasks share no step; only the chief writes), or there was nothing to save (training had not started, or the chief had finished); run again to resume",
  },
  {
    code: ExitCodes.chiefLost,
    meaning: "the chief was lost (frozen, dead or its coordination service gone) while a preemption was pending or being agreed: nothing was saved by this task; run again to resume from the last checkpoint",
  },
  { code: SignalExitCodes.killed, meaning: "under `launch`: a task was SIGKILLed (by `launch` after its kill delay or when another task found it lost, or by the OS)" },
  { code: SignalExitCodes.terminated, meaning: "under `launch`: a task died of SIGTERM before it handled signals" },
];

/** `launch`'s own code when its tasks exit with different ones. */
const PRECEDENCE =
  `\`launch\` exits with the code of the task whose own termination notice started a preemption (${ExitCodes.preempted} or ${ExitCodes.chiefLost}), ` +
  `else with ${ExitCodes.chiefLost} if a task exited with it before \`launch\` stopped it, else with the first failure that \`launch\` did not cause ` +
  `(a ${ExitCodes.preempted} or ${ExitCodes.chiefLost} that answers its SIGTERM is one it caused), else with the code of the task it SIGKILLed as lost (${SignalExitCodes.killed}).`;

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** The exit codes as help text (`--help`), wrapped to 100 columns. */
export const exitCodesHelp = [
  "Exit codes:",
  ...ROWS.flatMap((r) => wrap(plain(r.meaning), 92).map((line, i) => (i === 0 ? `  ${String(r.code).padEnd(4)}${line}` : `      ${line}`))),
  "",
  ...wrap(plain(PRECEDENCE), 98).map((line) => `  ${line}`),
].join("\n");

/**
 * The exit codes as a Markdown table and the sentence on `launch`'s precedence: README.md and
 * the docs hold exactly this text (test/runtime/exitCodes.test.ts checks it).
 */
export const exitCodesMarkdown = (): string =>
  ["| Code | Meaning |", "|---|---|", ...ROWS.map((r) => `| ${r.code} | ${r.meaning} |`), "", ...wrap(PRECEDENCE, 100)].join("\n");

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

// Function declarations, not arrows: they are hoisted, and exitCodesHelp is built at load.

/** The text without Markdown code spans. */
function plain(markdown: string): string {
  return markdown.replace(/`/g, "");
}

/** `text` in lines of at most `width` characters, broken at spaces. */
function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = "";
  for (const word of text.split(" ")) {
    if (line !== "" && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line === "" ? word : `${line} ${word}`;
  }
  if (line !== "") lines.push(line);
  return lines;
}
