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
 * `/proc/<pid>/stat` is `Z` (a zombie) or `X`, its flags say it is exiting (`PF_EXITING`: a
 * SIGKILL is being carried out, its files, sockets included, closing before it becomes a
 * zombie), or its entry is gone while procfs is there. `false` where there is no procfs (not
 * Linux) and for a stat that cannot be read as one. (A process whose main thread exited while
 * other threads run also shows `Z`: Node's tasks end their threads with the process, so for them
 * `Z` means ended.)
 */
export const hasEnded = (pid: number, procRoot = "/proc"): boolean => {
  const stat = statOf(pid, procRoot);
  if (stat === "gone") return existsSync(`${procRoot}/self/stat`) || existsSync(`${procRoot}/1/stat`);
  return stat !== undefined && (stat.state === "Z" || stat.state === "X" || (stat.flags & PF_EXITING) !== 0);
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** The kernel's `PF_EXITING` task flag (field 9 of `/proc/<pid>/stat`): the process is in its exit. */
const PF_EXITING = 0x4;

/** The state letter of `/proc/<pid>/stat`; `"gone"` when there is no such entry; `""` when it cannot be read as one. */
const stateOf = (pid: number, procRoot: string): string => {
  const stat = statOf(pid, procRoot);
  return stat === "gone" ? "gone" : (stat?.state ?? "");
};

/**
 * The state letter and the flags of `/proc/<pid>/stat`; `"gone"` when there is no such entry
 * (ENOENT, ESRCH); `undefined` when it is malformed or cannot be read for another reason
 * (EMFILE, EACCES: not known).
 */
const statOf = (pid: number, procRoot: string): { readonly state: string; readonly flags: number } | "gone" | undefined => {
  let stat: string;
  try {
    stat = readFileSync(`${procRoot}/${pid}/stat`, "latin1");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return code === "ENOENT" || code === "ESRCH" ? "gone" : undefined;
  }
  // `pid (comm) state ppid pgrp session tty_nr tpgid flags ...`: the command may hold spaces and
  // parentheses; the fields follow the last ")".
  const close = stat.lastIndexOf(")");
  if (close < 0) return undefined;
  const fields = stat.slice(close + 2).split(" ");
  const flags = Number(fields[6]);
  return { state: fields[0] ?? "", flags: Number.isSafeInteger(flags) ? flags : 0 };
};
