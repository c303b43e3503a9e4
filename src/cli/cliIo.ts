/**
 * The process a command talks to ({@link CliIo}): its streams, its environment, its clock, and
 * the hooks tests inject. Every command takes one.
 *
 * @module
 */

import type { NoticeProcess } from "../preemption/TerminationNotices.js";
import type { Clock } from "../time/Clock.js";

/** The process the command talks to (injected by tests). */
export interface CliIo {
  readonly out: NodeJS.WritableStream;
  readonly err: NodeJS.WritableStream;
  readonly env: NodeJS.ProcessEnv;
  /** Whether `out` is a terminal. */
  readonly isTTY: boolean;
  readonly clock?: Clock;
  /** Signals that arrived while the entry point was loading (replayed as termination notices). */
  readonly earlySignals?: readonly NodeJS.Signals[];
  /** Ends the process at once (default `process.exit`): used when a second Ctrl-C gives up on the save. */
  readonly exit?: (code: number) => void;
  /** Where notices come from (default `process`; tests pass a fake). */
  readonly noticeProcess?: NoticeProcess;
  /** Called once the command watches for notices itself (the entry point drops its early handlers). */
  readonly onStarted?: () => void;
  /** When this task's start began, Unix epoch ms, for its goodput log (default the process's start; a standby's go: src/cli/standby.ts). */
  readonly processStartMs?: number;
}
