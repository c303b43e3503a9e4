/**
 * What `launch` reads of its tasks' processes beyond their exits: whether one is stopped by a
 * signal (SIGSTOP, SIGTSTP: a frozen task). A stopped task can neither save nor exit until it is
 * continued, so once the group stops, waiting out a kill delay for it gains nothing.
 *
 * @module
 */

import { readFileSync } from "node:fs";

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Whether process `pid` is stopped by a signal: its state in `/proc/<pid>/stat` is `T`. `false`
 * where there is no procfs (not Linux), for a process gone, and for one stopped by a tracer
 * (`t`: a debugger holds it on purpose).
 */
export const isStopped = (pid: number, procRoot = "/proc"): boolean => {
  let stat: string;
  try {
    stat = readFileSync(`${procRoot}/${pid}/stat`, "latin1");
  } catch {
    return false;
  }
  // `pid (comm) state ...`: the command may hold spaces and parentheses; the state follows the last ")".
  const close = stat.lastIndexOf(")");
  return close >= 0 && stat.charAt(close + 2) === "T";
};
