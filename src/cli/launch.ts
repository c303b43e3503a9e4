/**
 * `monitored-session launch --workers N <config>`: a local cluster of N processes on loopback,
 * the chief included, each running this command's `run <config>` with its TF_CONFIG (a `chief`
 * job of 1 and a `worker` job of N−1 on free loopback ports). It streams their output line by
 * line behind a task prefix (`[chief:0] `, `[worker:1] `) and exits with the cluster's code:
 * 0 when every task exits 0; the preemption code (42) when a task exits 42 before any other
 * fails; otherwise the first other non-zero code. The local equivalent of
 * `torchrun --nproc-per-node`.
 *
 * When a task fails the others are stopped: SIGTERM, then SIGKILL after `killAfterSecs`. When
 * one is preempted (42) the others stop on its notice, which it reported to the cluster; those
 * still running `killAfterSecs` later get SIGTERM, then SIGKILL after `killAfterSecs` more.
 * `maxRestarts` restarts the whole group after a failure, as torchrun does; a preempted group
 * (42) is restarted without using up a restart. SIGINT, SIGTERM and SIGHUP to
 * `launch` (and its parent's death) are forwarded to every task, nothing is restarted after
 * them, and SIGKILL follows after the deadline. A signal for a task that is still starting (its
 * Node has not yet run the command's first lines, so the signal would kill it with 143) waits
 * until the task says it handles signals (launchReady.ts). Each task watches its parent: if `launch`
 * itself is killed, the tasks take it as a termination notice and exit (no orphans).
 *
 * @module
 */

import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer, type AddressInfo, type Server as NetServer } from "node:net";
import { constants } from "node:os";
import { createInterface } from "node:readline";

import { systemClock, type Clock, type TimerHandle } from "../Clock.js";
import { PREEMPTION_EXIT_CODE } from "../preemption/TerminationConfig.js";
import type { TerminationNotice, TerminationNotices } from "../preemption/TerminationNotices.js";
import { ExitCodes } from "./exitCodes.js";
import { LAUNCH_READY_ENV, LAUNCH_READY_LINE } from "../runtime/index.js";
import { watchNotices, type CliIo } from "./run.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link launchCommand}. */
export interface LaunchOptions {
  /** Processes to start, the chief included (≥ 1). */
  readonly workers: number;
  /** Restarts of the whole group after a failure (default 0). */
  readonly maxRestarts?: number;
  /** Seconds between the SIGTERM that stops a task and the SIGKILL (default 30, torchrun's). */
  readonly killAfterSecs?: number;
  /** More arguments for each task's `run` (`--verbose`, `--log-level debug`). */
  readonly runArgs?: readonly string[];
}

/** How `launch` starts a task: this program's `run` (default: the running node, its flags and script). */
export interface TaskCommand {
  readonly execPath: string;
  /** The arguments before `run` (node flags and the CLI's script). */
  readonly args: readonly string[];
}

/** One task of the local cluster. */
interface Task {
  readonly type: "chief" | "worker";
  readonly index: number;
  readonly name: string;
}

/** How a group of tasks ended. */
interface GroupOutcome {
  /** The cluster's exit code (see the module's rules). */
  readonly code: number;
  /** The task whose exit decided it, when one failed. */
  readonly decidedBy?: string;
}

/** The default deadline between SIGTERM and SIGKILL (torchrun's). */
const DEFAULT_KILL_AFTER_SECS = 30;

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Runs `launch`; resolves with its exit code. `io.err` gets launch's own lines (`[launch] …`). */
export const launchCommand = async (configPath: string, options: LaunchOptions, io: CliIo, command: TaskCommand = thisCommand()): Promise<number> => {
  const clock = io.clock ?? systemClock;
  const notices = watchNotices(io, clock);
  const say = (line: string): void => void io.err.write(`[launch] ${line}\n`);
  try {
    if (!existsSync(configPath)) {
      io.err.write(`monitored-session launch: the configuration file ${configPath} does not exist\n`);
      return ExitCodes.usage;
    }
    const maxRestarts = options.maxRestarts ?? 0;
    const killAfterMs = (options.killAfterSecs ?? DEFAULT_KILL_AFTER_SECS) * 1000;
    const tasks = tasksOf(options.workers);
    let restarts = 0;
    for (;;) {
      if (notices.first !== undefined) {
        say(`termination notice (${notices.describe(notices.first)}) before the tasks started: exiting with ${PREEMPTION_EXIT_CODE}`);
        return PREEMPTION_EXIT_CODE;
      }
      const outcome = await runGroup(tasks, configPath, options.runArgs ?? [], { io, clock, notices, killAfterMs, command, say });
      if (outcome.code === ExitCodes.done) {
        say("every task exited 0");
        return ExitCodes.done;
      }
      const why = outcome.decidedBy === undefined ? `exit ${outcome.code}` : `${outcome.decidedBy} exited with ${outcome.code}`;
      if (notices.first !== undefined) {
        say(`stopped by a termination notice (${notices.describe(notices.first)}); ${why}: exiting with ${outcome.code}`);
        return outcome.code;
      }
      if (outcome.code === PREEMPTION_EXIT_CODE && maxRestarts > 0) {
        say(`preempted (${why}): restarting the group (a preemption does not use up a restart; ${maxRestarts - restarts} left)`);
        continue;
      }
      if (outcome.code === PREEMPTION_EXIT_CODE || restarts >= maxRestarts) {
        say(`${why}: exiting with ${outcome.code}${maxRestarts > 0 && outcome.code !== PREEMPTION_EXIT_CODE ? ` after ${restarts} restart${restarts === 1 ? "" : "s"}` : ""}`);
        return outcome.code;
      }
      restarts += 1;
      say(`${why}: restarting the group (restart ${restarts} of ${maxRestarts})`);
    }
  } finally {
    notices.close();
  }
};

/** The tasks of `--workers n`: `chief:0`, then `worker:0` … `worker:n-2`. */
export const tasksOf = (workers: number): readonly Task[] => [
  { type: "chief", index: 0, name: "chief:0" },
  ...Array.from({ length: workers - 1 }, (_, i): Task => ({ type: "worker", index: i, name: `worker:${i}` })),
];

/** The TF_CONFIG of each task for the loopback addresses `addresses` (one per task, in order). */
export const tfConfigsOf = (tasks: readonly Task[], addresses: readonly string[]): string[] => {
  const chief = addresses.slice(0, 1);
  const workers = addresses.slice(1);
  const cluster = workers.length === 0 ? { chief } : { chief, worker: workers };
  return tasks.map((t) => JSON.stringify({ cluster, task: { type: t.type, index: t.index } }));
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

interface GroupContext {
  readonly io: CliIo;
  readonly clock: Clock;
  readonly notices: TerminationNotices;
  readonly killAfterMs: number;
  readonly command: TaskCommand;
  readonly say: (line: string) => void;
}

/**
 * Starts every task, streams their lines, and resolves once all have exited (and their output
 * is flushed). The first non-zero exit decides the outcome and stops the others; a termination
 * notice to `launch` is forwarded to every task.
 */
const runGroup = async (tasks: readonly Task[], configPath: string, runArgs: readonly string[], ctx: GroupContext): Promise<GroupOutcome> => {
  const { io, clock, notices, killAfterMs, command, say } = ctx;
  const addresses = (await freeLoopbackPorts(tasks.length)).map((p) => `127.0.0.1:${p}`);
  const tfConfigs = tfConfigsOf(tasks, addresses);
  const live = new Map<string, ChildProcess>();
  // A task handles signals once it has said so (launchReady.ts); until then a signal for it waits.
  const ready = new Set<ChildProcess>();
  const held = new Map<ChildProcess, NodeJS.Signals>();
  const signal = (child: ChildProcess, sig: NodeJS.Signals): void => {
    if (sig === "SIGKILL" || ready.has(child)) child.kill(sig);
    else held.set(child, sig);
  };
  const markReady = (child: ChildProcess): void => {
    ready.add(child);
    const sig = held.get(child);
    held.delete(child);
    if (sig !== undefined) child.kill(sig);
  };
  let first: { task: string; code: number } | undefined;
  let killTimer: TimerHandle | undefined;

  const armKill = (): void => {
    killTimer ??= clock.setTimer(killAfterMs, () => {
      if (live.size === 0) return;
      say(`${[...live.keys()].join(", ")} still running after ${killAfterMs / 1000} s: SIGKILL`);
      for (const child of live.values()) child.kill("SIGKILL");
    });
  };
  const stopOthers = (reason: string): void => {
    // Stopping already: the SIGKILL is armed.
    if (live.size === 0 || killTimer !== undefined) return;
    say(`${reason}: stopping ${[...live.keys()].join(", ")} (SIGTERM, SIGKILL after ${killAfterMs / 1000} s)`);
    for (const child of live.values()) signal(child, "SIGTERM");
    armKill();
  };
  /**
   * A preempted task reported its notice to the cluster, and the others stop on it by
   * themselves, at the step the replica group agrees on (the chief saves it). A SIGTERM now
   * would be their second notice, which ends a save under way at once (`exitOnRepeatedNotice`):
   * they get it only if they are still running `killAfterMs` later.
   */
  let othersTimer: TimerHandle | undefined;
  const awaitOthers = (preempted: string): void => {
    if (live.size === 0) return;
    say(`${preempted} was preempted (exit ${PREEMPTION_EXIT_CODE}): ${[...live.keys()].join(", ")} ${live.size === 1 ? "stops" : "stop"} on its notice (SIGTERM after ${killAfterMs / 1000} s if not)`);
    othersTimer = clock.setTimer(killAfterMs, () => stopOthers(`${[...live.keys()].join(", ")} still running ${killAfterMs / 1000} s after ${preempted}'s preemption`));
  };
  const forward = (n: TerminationNotice): void => {
    const sig: NodeJS.Signals = n.source === "SIGINT" || n.source === "SIGHUP" ? n.source : "SIGTERM";
    if (live.size === 0) return;
    say(`${notices.describe(n)}: forwarding ${sig} to ${[...live.keys()].join(", ")}`);
    for (const child of live.values()) signal(child, sig);
    armKill();
  };

  const exits = tasks.map((task, i) => {
    const child = spawn(command.execPath, [...command.args, "run", configPath, ...runArgs], {
      env: { ...io.env, TF_CONFIG: tfConfigs[i] as string, [LAUNCH_READY_ENV]: "1" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    live.set(task.name, child);
    say(`started ${task.name} at ${addresses[i] as string}${child.pid === undefined ? "" : ` (pid ${child.pid})`}`);
    const streamed = [
      prefixLines(child.stdout, io.out, `[${task.name}] `),
      prefixLines(child.stderr, io.err, `[${task.name}] `, (line) => {
        if (line !== LAUNCH_READY_LINE) return false;
        markReady(child);
        return true;
      }),
    ];
    const exited = new Promise<number>((resolve) => {
      child.once("error", (e) => {
        say(`${task.name} could not start: ${e.message}`);
        resolve(ExitCodes.failure);
      });
      child.once("exit", (code, signal) => resolve(code ?? 128 + (signal === null ? 0 : (constants.signals[signal] ?? 0))));
    });
    return Promise.all([exited, ...streamed]).then(([code]) => {
      live.delete(task.name);
      const signalled = child.signalCode === null ? "" : ` (killed by ${child.signalCode})`;
      say(`${task.name} exited with ${code}${signalled}`);
      if (code !== 0 && first === undefined) first = { task: task.name, code };
      if (code === 0 || notices.first !== undefined) return;
      if (code !== PREEMPTION_EXIT_CODE) stopOthers(`${task.name} failed (exit ${code})`);
      else if (first?.task === task.name) awaitOthers(task.name);
    });
  });
  // Notices before and during the group (a late subscriber gets the earlier ones first).
  const subscription = notices.notices$.subscribe(forward);
  try {
    await Promise.all(exits);
  } finally {
    subscription.unsubscribe();
    killTimer?.cancel();
    othersTimer?.cancel();
  }
  return first === undefined ? { code: ExitCodes.done } : { code: first.code, decidedBy: first.task };
};

/**
 * Copies `input` to `out` line by line, each behind `prefix`, except the lines `consume` takes;
 * resolves when `input` ends.
 */
const prefixLines = (input: NodeJS.ReadableStream | null, out: NodeJS.WritableStream, prefix: string, consume?: (line: string) => boolean): Promise<void> => {
  if (input === null) return Promise.resolve();
  const lines = createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY });
  lines.on("line", (line) => {
    if (consume?.(line) !== true) out.write(`${prefix}${line}\n`);
  });
  return new Promise((resolve) => lines.once("close", resolve));
};

/** `n` distinct free TCP ports on 127.0.0.1 (all held open until each is known, then released). */
const freeLoopbackPorts = async (n: number): Promise<number[]> => {
  const servers: NetServer[] = [];
  try {
    const ports: number[] = [];
    for (let i = 0; i < n; i++) {
      const server = createServer();
      servers.push(server);
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(0, "127.0.0.1", resolve);
      });
      ports.push((server.address() as AddressInfo).port);
    }
    return ports;
  } finally {
    await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
  }
};

/** This program's own command line: the running node, its flags (`--import tsx`) and script. */
const thisCommand = (): TaskCommand => ({ execPath: process.execPath, args: [...process.execArgv, process.argv[1] as string] });
