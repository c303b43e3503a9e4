/**
 * The exit codes of the `monitored-session` command, shown by `--help` and documented in
 * docs/configuration.md.
 *
 * @module
 */

import { PREEMPTION_EXIT_CODE } from "../preemption/TerminationConfig.js";

/** The exit codes. */
export const ExitCodes = {
  /** Training finished (or `inspect` found every checkpoint valid). */
  done: 0,
  /** Any other failure (an error while training; `inspect` found a corrupt checkpoint or a bad state file). */
  failure: 1,
  /** Bad usage, an invalid configuration or job module (every problem is printed), or a checkpoint directory in use. */
  usage: 2,
  /** Preempted: a checkpoint was saved at a step boundary (or training had not started); restart the same command to resume. */
  preempted: PREEMPTION_EXIT_CODE,
} as const;

/** The exit codes as help text. */
export const exitCodesHelp = `Exit codes:
  ${ExitCodes.done}   done
  ${ExitCodes.failure}   any other failure
  ${ExitCodes.usage}   bad usage or configuration (every problem is printed), or the checkpoint directory is in use
  ${ExitCodes.preempted}  preempted: a termination notice (SIGTERM, SIGINT, SIGHUP, the watched file, the
      parent's exit) saved a checkpoint at the next step; run again to resume
      (preemption.exitCode in the configuration changes it)`;
