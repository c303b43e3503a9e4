/**
 * What `launch` reads of its tasks' processes beyond their exits: whether one is stopped by a
 * signal (SIGSTOP, SIGTSTP: a frozen task), and whether one has ended before its exit was read.
 * A stopped task can neither save nor exit until it is continued, so once the group stops,
 * waiting out a kill delay for it gains nothing. A task that ended (a zombie not yet reaped) did
 * not fail because `launch` killed it, even when `launch` is told it is lost before it reads the
 * exit.
 *
 * @module
 */

import { existsSync, readFileSync } from "node:fs";

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Whether process `pid` is stopped by a signal: its state in `/proc/<pid>/stat` is `T`. `false`
 * where there is no procfs (not Linux), for a process gone, and for one stopped by a tracer
 * (`t`: a debugger holds it on purpose).
 */
export const isStopped = (pid: number, procRoot = "/proc"): boolean => stateOf(pid, procRoot) === "T";

/**
 * Whether process `pid` (a child of this process) has ended, its exit not yet read: its state in
 * `/proc/<pid>/stat` is `Z` (a zombie) or `X`, or its entry is gone while procfs is there.
 * `false` where there is no procfs (not Linux) and for a stat that cannot be read as one. (A
 * process whose main thread exited while other threads run also shows `Z`: Node's tasks end
 * their threads with the process, so for them `Z` means ended.)
 */
export const hasEnded = (pid: number, procRoot = "/proc"): boolean => {
  const state = stateOf(pid, procRoot);
  if (state === "gone") return existsSync(`${procRoot}/self/stat`) || existsSync(`${procRoot}/1/stat`);
  return state === "Z" || state === "X";
};

/**
 * The state letter of `/proc/<pid>/stat`; `"gone"` when there is no such entry (ENOENT, ESRCH);
 * `""` when it is malformed or cannot be read for another reason (EMFILE, EACCES: not known).
 */
const stateOf = (pid: number, procRoot: string): string => {
  let stat: string;
  try {
    stat = readFileSync(`${procRoot}/${pid}/stat`, "latin1");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return code === "ENOENT" || code === "ESRCH" ? "gone" : "";
  }
  // `pid (comm) state ...`: the command may hold spaces and parentheses; the state follows the last ")".
  const close = stat.lastIndexOf(")");
  return close < 0 ? "" : stat.charAt(close + 2);
};
