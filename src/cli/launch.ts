/**
 * `monitored-session launch`: a local cluster of N processes on loopback, the chief included,
 * each with its own TF_CONFIG (a `chief` job of 1 and a `worker` job of N−1 on free loopback
 * ports). The local equivalent of `torchrun --nproc-per-node`, in two forms:
 *
 * - `launch --workers N <config>`: each task runs this command's `run <config>`; the
 *   configuration's `cluster:` section holds the cluster settings.
 * - `launch --workers N [cluster flags] -- <command> [args…]`: each task runs any command,
 *   spawned without a shell, as torchrun runs a script. The cluster settings come from flags
 *   (`--backend`, `--etcd-endpoints`, `--token-file`, `--tls-*`, `--heartbeat-timeout`,
 *   `--collective-timeout`) and `--cluster-config <file>`, are decoded with the `cluster:`
 *   section's codec before anything starts, and reach every task as JSON in
 *   `MONITORED_SESSION_CLUSTER` (clusterSettings.ts), which the library's task reads.
 *
 * Every task also gets `MONITORED_SESSION_LAUNCH_READY=1` and a status channel on fd 3
 * (launchStatus.ts): the task tells `launch` which notice it got and which tasks it found lost,
 * as JSON lines, never through its log text. `launch` streams the tasks' output line by line
 * behind a task prefix (`[chief:0] `, `[worker:1] `) and exits with the cluster's code
 * ({@link groupOutcome}): 0 when every task exits 0; the code of the task whose own notice
 * started a preemption (the preemption code, 42 or `preemption.exitCode`, or 43); else 43;
 * otherwise the first other non-zero code.
 *
 * When a task fails the others are stopped: SIGTERM, then SIGKILL after `killAfterSecs`; a task
 * another one found lost (declared failed, or a chief whose service stopped answering) is
 * SIGKILLed at once, and so, once the group stops, is a task stopped by a signal (SIGSTOP,
 * processState.ts). When one is preempted (42 or 43) the others stop on its notice, which it
 * reported to the cluster; those still running `killAfterSecs` later get SIGTERM, then SIGKILL
 * after `killAfterSecs` more. `maxRestarts` restarts the whole group after a failure, as
 * torchrun does, on the same addresses while their ports are free; a preempted group (42 or 43)
 * is restarted without using up a restart. A worker of a data-parallel group that dies (a signal
 * ends it) while the group trains is restarted alone instead, with the same TF_CONFIG, and the
 * group waits for it to rejoin (src/runtime/groupRejoin.ts): launch tells the tasks so
 * (LAUNCH_RESTARTS_ALONE_ENV) whenever it has a restart to give, and does so once every task
 * said its group waits (`rejoins`). Each such restart uses one of `maxRestarts` (a fault of
 * `--chaos` none); the chief's loss, a task's own failure and a preemption restart the group. SIGINT, SIGTERM and SIGHUP to
 * `launch` (and its parent's death) are forwarded to every task, nothing is restarted after
 * them, and SIGKILL follows after the deadline. A task says it handles signals by printing
 * LAUNCH_READY_LINE on stderr (launchReady.ts; `launch` removes the line from its output). A
 * `run` task always prints it, so its signal waits for the line (before it, the task's Node has
 * not yet run the command's first lines and the signal would kill it with 143); a `--` command
 * may never print it, so its signals go at once. Each `run` task watches its parent: if `launch`
 * itself is killed, the tasks take it as a termination notice and exit (no orphans).
 *
 * @module
 */

import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { constants } from "node:os";
import { dirname, resolve } from "node:path";
import { createInterface } from "node:readline";

import { isLeft, left, right, type Either } from "fp-ts/lib/Either.js";
import { parseDocument } from "yaml";

import { systemClock, type Clock, type TimerHandle } from "../time/Clock.js";
import { ClusterConfigCodec, type ClusterConfig } from "../cluster/ClusterConfig.js";
import { processPerTaskProblem } from "../cluster/coordination/backends.js";
import { decode, formatIssue, show, type Issue } from "../codec.js";
import { loopbackPorts, takenPorts } from "../cluster/loopbackPorts.js";
import { MAX_ALIAS_COUNT } from "../config/index.js";
import { PreemptionExitCode } from "../config/TrainingConfig.js";
import { PREEMPTION_EXIT_CODE } from "../preemption/TerminationConfig.js";
import type { TerminationNotice, TerminationNotices } from "../preemption/TerminationNotices.js";
import { clusterSettingsEnv, LAUNCH_READY_ENV, LAUNCH_READY_LINE, withAbsolutePaths } from "../runtime/index.js";
import { decodeLaunchStatus, LAUNCH_RESTARTS_ALONE_ENV, LAUNCH_STATUS_FD_ENV, launchTaskName, type LaunchStatus } from "../runtime/launchStatus.js";
import { ExitCodes } from "../runtime/exitCodes.js";
import { hasEnded, isStopped } from "./processState.js";
import type { CliIo } from "./cliIo.js";
import { watchNotices } from "./run.js";
import { jsonLine, jsonLogger, taskJsonLine, type LogFormat } from "./logFormat.js";
import type { LogLevel } from "../Logger.js";
import { CLUSTER_FLAGS, type ClusterFlag, type ClusterFlags } from "./clusterFlags.js";
import { ChaosRun, chaosLogDirOf, describeChaosReport, writeChaosReport, type ChaosGroup } from "./chaos.js";
import type { PlannedFault } from "./chaosSchedule.js";
import { CHAOS_GOODPUT_DIR_ENV, CHAOS_OP_ERRORS_ENV } from "../runtime/chaosOpErrors.js";
import { STANDBY_ENV, standbyGoLine } from "./standby.js";
import { GoodputLogWriter, LAUNCH_LOG_TASK } from "../goodput/goodputLog.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link launchCommand} and {@link launchProgram}. */
export interface LaunchOptions {
  /** Processes to start, the chief included (≥ 1). */
  readonly workers: number;
  /** Restarts after a failure (default 0): of the whole group, or of a lost worker of a data-parallel group alone (see the module doc). */
  readonly maxRestarts?: number;
  /** Seconds between the SIGTERM that stops a task and the SIGKILL (default 30, torchrun's). */
  readonly killAfterSecs?: number;
  /** More arguments for each task's `run` (`--verbose`, `--log-level debug`): the config form only. */
  readonly runArgs?: readonly string[];
  /** What the settings flags' relative paths are relative to (default the working directory). */
  readonly cwd?: string;
  /**
   * `json`: launch's own lines and its tasks' are JSON objects, each with its `task` (`launch`
   * for launch's own); a task's line that is not one becomes an `info` record (src/cli/logFormat.ts).
   * The config form also passes `--log-format json` to each task's `run`. Default `text`.
   */
  readonly logFormat?: LogFormat | undefined;
  /** `--chaos`: the faults to inject (chaos.ts), and where the recovery report goes (`--chaos-report`). */
  readonly chaos?: { readonly faults: readonly PlannedFault[]; readonly reportPath: string; readonly fromTraining?: boolean } | undefined;
  /**
   * Standbys (the config form): once a group trains, a standby process per task loads `run`'s
   * modules and waits (src/cli/standby.ts); a restarted group starts from them instead of from
   * new processes. Default `false` here; the command line turns it on when the group can
   * restart (`standbyOf` in program.ts) unless `--no-standby` is given.
   */
  readonly standby?: boolean | undefined;
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

/** What every task of the group runs, and how `launch` signals it. */
interface TaskProgram {
  readonly file: string;
  readonly args: readonly string[];
  /** Environment for every task, beside launch's own, TF_CONFIG and {@link LAUNCH_READY_ENV}. */
  readonly env: Readonly<Record<string, string>>;
  /**
   * Whether a signal for a task waits until the task printed {@link LAUNCH_READY_LINE}. `run`
   * always prints it; any other command may never print it, and then a held SIGTERM would never
   * reach it.
   */
  readonly holdSignalsUntilReady: boolean;
  /** Whether the group may start from standbys (the config form: `run` reads {@link STANDBY_ENV}). */
  readonly standby: boolean;
  /** The tasks' preemption exit code: the configuration's `preemption.exitCode` (`<config>`), else 42. */
  readonly preemptionCode: number;
  /**
   * Where the tasks' goodput logs are (the chaos report reads them): the configuration's log
   * directory (`<config>`), or the directory `launch` names in the tasks' environment (`--`).
   */
  readonly logDir?: string | undefined;
}

/** How a group of tasks ended. */
interface GroupOutcome {
  /** The cluster's exit code (see the module's rules). */
  readonly code: number;
  /** The task whose exit decided it, when one failed. */
  readonly decidedBy?: string;
  /** The task whose own termination notice started the preemption, when one did. */
  readonly noticeFrom?: string;
}

/** The default deadline between SIGTERM and SIGKILL (torchrun's). */
const DEFAULT_KILL_AFTER_SECS = 30;


// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Runs `launch <config>`; resolves with its exit code. `io.err` gets launch's own lines (`[launch] …`). */
export const launchCommand = async (configPath: string, options: LaunchOptions, io: CliIo, command: TaskCommand = thisCommand()): Promise<number> => {
  if (!existsSync(configPath)) {
    usageLine(io, options, `monitored-session launch: the configuration file ${configPath} does not exist`);
    return ExitCodes.usage;
  }
  // Each task's run would refuse it too, once per task and restart: say it once, before anything starts.
  const backend = (peekConfig(configPath) as { cluster?: { backend?: unknown } } | undefined)?.cluster?.backend;
  const perProcess = typeof backend === "string" ? processPerTaskProblem(backend, options.workers, "launch") : undefined;
  if (perProcess !== undefined) {
    usageLine(io, options, `monitored-session launch: ${configPath}: ${perProcess}`);
    return ExitCodes.usage;
  }
  const program: TaskProgram = {
    file: command.execPath,
    args: [...command.args, "run", configPath, ...(options.runArgs ?? []), ...(options.logFormat === "json" ? ["--log-format", "json"] : [])],
    env: {},
    holdSignalsUntilReady: true,
    standby: options.standby === true,
    preemptionCode: preemptionCodeOf(configPath),
    logDir: logDirOf(configPath),
  };
  return superviseGroups(program, options, io);
};

/**
 * Runs `launch -- <argv>`: each task runs `argv` (without a shell) with the cluster settings of
 * `flags` in `MONITORED_SESSION_CLUSTER`; resolves with the exit code. Invalid settings exit 2,
 * one line per problem, before anything starts.
 */
export const launchProgram = async (argv: readonly string[], flags: ClusterFlags, options: LaunchOptions, io: CliIo): Promise<number> => {
  const [file, ...args] = argv;
  if (file === undefined || file === "") {
    usageLine(io, options, "monitored-session launch: no command after --; give one: launch --workers <n> -- <command> [args...]");
    return ExitCodes.usage;
  }
  const settings = clusterSettingsOf(flags, options.cwd ?? process.cwd());
  if (isLeft(settings)) {
    for (const line of settings.left) usageLine(io, options, `monitored-session launch: ${line}`);
    return ExitCodes.usage;
  }
  const perProcess = processPerTaskProblem(settings.right.backend, options.workers, "launch");
  if (perProcess !== undefined) {
    usageLine(io, options, `monitored-session launch: ${perProcess}`);
    return ExitCodes.usage;
  }
  // Under --chaos, the tasks' sessions write their goodput logs where the report reads them.
  const logDir = options.chaos === undefined ? undefined : chaosLogDirOf(resolve(options.cwd ?? process.cwd(), options.chaos.reportPath));
  const env = { ...clusterSettingsEnv(settings.right), ...(logDir === undefined ? {} : { [CHAOS_GOODPUT_DIR_ENV]: logDir }) };
  if (logDir !== undefined) {
    try {
      mkdirSync(logDir, { recursive: true });
    } catch (e) {
      usageLine(io, options, `monitored-session launch: --chaos-report ${options.chaos?.reportPath ?? ""}: the tasks' goodput log directory ${logDir} cannot be made (${(e as Error).message}); give --chaos-report a path in a writable directory`);
      return ExitCodes.usage;
    }
  }
  return superviseGroups({ file, args, env, holdSignalsUntilReady: false, standby: false, preemptionCode: PREEMPTION_EXIT_CODE, logDir }, options, io);
};

/**
 * The `cluster:` section that `flags` describe: the `--cluster-config` file's keys with the
 * flags' over them, decoded with the section's codec, every path absolute (a flag's against
 * `cwd`, the file's against its directory). `Left`: one line per problem, naming the flag, or
 * the file and its key.
 */
const clusterSettingsOf = (flags: ClusterFlags, cwd: string): Either<string[], ClusterConfig> => {
  const file = flags.clusterConfig === undefined ? undefined : readSettingsFile(flags.clusterConfig, cwd);
  if (file !== undefined && isLeft(file)) return file;
  const fromFile = file?.right ?? {};
  const given = CLUSTER_FLAGS.filter((f) => flags[f.name] !== undefined);
  let merged: Record<string, unknown> = { ...fromFile };
  for (const f of given) merged = withKey(merged, f.key, f.value(flags[f.name] as string, cwd));
  /** A problem names the flag that gave the value; else the file, when its key is there; else the flag that would fix it. */
  const where = (issue: Issue): string => {
    const flag = CLUSTER_FLAGS.find((f) => covers(f.key, issue.path));
    const fromFlag = flag !== undefined && given.includes(flag);
    const top = issue.path.split(/[.[]/)[0] as string;
    if (!fromFlag && flags.clusterConfig !== undefined && (flag === undefined || Object.hasOwn(fromFile, top))) return `${flags.clusterConfig}: ${formatIssue(issue)}`;
    return flag === undefined ? formatIssue(issue) : `${flagName(flag)}: ${issue.message}`;
  };
  const r = decode(ClusterConfigCodec, merged);
  if (isLeft(r)) return left(r.left.map(where));
  // The flags' paths are absolute already: only the file's can still be relative.
  return right(withAbsolutePaths(r.right, flags.clusterConfig === undefined ? cwd : dirname(resolve(cwd, flags.clusterConfig))));
};

/** Runs groups until one ends the launch (restarting per `maxRestarts`); resolves with the exit code. */
const superviseGroups = async (program: TaskProgram, options: LaunchOptions, io: CliIo): Promise<number> => {
  const clock = io.clock ?? systemClock;
  const notices = watchNotices(io, clock, options.logFormat === "json" ? jsonLogger(io.err, () => clock.now()) : undefined);
  const json = options.logFormat === "json";
  // `level` for JSON records: a failure of the group is an `error` a collector can alert on.
  const say = (line: string, level: LogLevel = "info"): void => void io.err.write(json ? jsonLine(clock.now(), { task: "launch", level, message: line }) : `[launch] ${line}\n`);
  // A task's line: behind its name, or (JSON) as a record that names it.
  const lineOf = (task: string, line: string): string => (json ? taskJsonLine(task, line, () => clock.now()) : `[${task}] ${line}\n`);
  // The faults injected, in launch's own goodput log of the run (the board marks them on its charts).
  let faultLog: GoodputLogWriter | undefined;
  let faultLogFailed = false;
  const injected = (fault: PlannedFault, t: number): void => {
    if (program.logDir === undefined || faultLogFailed) return;
    try {
      faultLog ??= GoodputLogWriter.open(program.logDir, LAUNCH_LOG_TASK, (m) => say(`chaos: ${m}`, "warn"));
    } catch (e) {
      faultLogFailed = true;
      say(`chaos: the faults cannot be recorded in ${program.logDir} (${e instanceof Error ? e.message : String(e)}); the report still has them`, "warn");
      return;
    }
    faultLog.write({ v: 1, type: "fault", t, id: fault.id, kind: fault.kind, target: fault.target });
  };
  const chaos = options.chaos === undefined ? undefined : new ChaosRun({ faults: options.chaos.faults, clock, say, injected, fromTraining: options.chaos.fromTraining });
  const standbys = program.standby ? new Standbys(program, io.env, say) : undefined;
  let code: number = ExitCodes.failure;
  try {
    code = await supervise(program, options, { io, clock, notices, say, lineOf, chaos, standbys });
    return code;
  } finally {
    await standbys?.close();
    faultLog?.close();
    notices.close();
    chaos?.stop();
    if (chaos !== undefined && options.chaos !== undefined) {
      const report = await chaos.report(code, program.logDir);
      for (const line of describeChaosReport(report)) say(line);
      try {
        writeChaosReport(resolve(options.cwd ?? process.cwd(), options.chaos.reportPath), report);
        say(`chaos: the recovery report is in ${options.chaos.reportPath}`);
      } catch (e) {
        say(`chaos: the recovery report could not be written to ${options.chaos.reportPath} (${e instanceof Error ? e.message : String(e)}); give --chaos-report a writable path`, "error");
      }
    }
  }
};

/** The groups of {@link superviseGroups}, one after another; resolves with the exit code. */
const supervise = async (program: TaskProgram, options: LaunchOptions, ctx: Omit<GroupContext, "killAfterMs">): Promise<number> => {
  const { io, clock, notices, say, lineOf, chaos, standbys } = ctx;
  const maxRestarts = options.maxRestarts ?? 0;
  const killAfterMs = (options.killAfterSecs ?? DEFAULT_KILL_AFTER_SECS) * 1000;
  const tasks = tasksOf(options.workers);
  let restarts = 0;
  // A worker restarted alone uses up a restart as a group's restart does; a fault of --chaos does not.
  const restartAlone =
    maxRestarts > 0 || chaos !== undefined
      ? (faultHit: boolean): string | undefined => {
          if (faultHit) return "a fault of --chaos does not use up a restart";
          if (restarts >= maxRestarts) return undefined;
          restarts += 1;
          return `restart ${restarts} of ${maxRestarts}`;
        }
      : undefined;
  let ports: readonly number[] | undefined;
  for (;;) {
    if (notices.first !== undefined) {
      say(`termination notice (${notices.describe(notices.first)}) before the tasks started: exiting with ${program.preemptionCode}`);
      return program.preemptionCode;
    }
    ports = await groupPorts(tasks.length, ports, say);
    const outcome = await runGroup(tasks, program, ports.map((p) => `127.0.0.1:${p}`), { io, clock, notices, killAfterMs, say, lineOf, chaos, standbys, restartAlone });
    const injected = chaos?.groupEnded() === true;
    if (outcome.code === ExitCodes.done) {
      say("every task exited 0");
      return ExitCodes.done;
    }
    const why =
      (outcome.decidedBy === undefined ? `exit ${outcome.code}` : `${outcome.decidedBy} exited with ${outcome.code}`) +
      (outcome.noticeFrom === undefined || outcome.noticeFrom === outcome.decidedBy ? "" : `; the preemption started with ${outcome.noticeFrom}'s termination notice`);
    if (notices.first !== undefined) {
      say(`stopped by a termination notice (${notices.describe(notices.first)}); ${why}: exiting with ${outcome.code}`);
      return outcome.code;
    }
    // A fault of the chaos schedule: the plan, not a failure; the group restarts.
    if (injected) {
      say(`chaos: ${why}, after a fault of the schedule: restarting the group (a fault of --chaos does not use up a restart)`, "warn");
      continue;
    }
    // A preemption, or a chief lost during one: nothing the job did wrong, so no restart is used up.
    const preempted = outcome.code === program.preemptionCode || outcome.code === ExitCodes.chiefLost;
    if (preempted && maxRestarts > 0) {
      say(`preempted (${why}): restarting the group (a preemption does not use up a restart; ${maxRestarts - restarts} left)`);
      continue;
    }
    if (preempted || restarts >= maxRestarts) {
      say(`${why}: exiting with ${outcome.code}${maxRestarts > 0 && !preempted ? ` after ${restarts} restart${restarts === 1 ? "" : "s"}` : ""}`, preempted ? "warn" : "error");
      return outcome.code;
    }
    restarts += 1;
    say(`${why}: restarting the group (restart ${restarts} of ${maxRestarts})`, "error");
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

/**
 * The tasks' loopback ports for the next group: the previous group's, as torchrun keeps its
 * rendezvous endpoint, so that a restarted group is the same cluster (the same TF_CONFIG; on
 * etcd the same default key prefix, where its generation counter goes on); new ones when one of
 * those ports was taken meanwhile, with a line saying so.
 */
const groupPorts = async (n: number, previous: readonly number[] | undefined, say: (line: string) => void): Promise<readonly number[]> => {
  if (previous !== undefined) {
    const taken = await takenPorts(previous);
    if (taken.length === 0) return previous;
    say(`port${taken.length === 1 ? "" : "s"} ${taken.join(", ")} of the group ${taken.length === 1 ? "was" : "were"} taken meanwhile: the restarted group gets new addresses (with etcd and no cluster.etcdPrefix, a new key prefix too, where it starts at generation 1)`);
  }
  return loopbackPorts(n);
};

interface GroupContext {
  readonly io: CliIo;
  readonly clock: Clock;
  readonly notices: TerminationNotices;
  readonly killAfterMs: number;
  readonly say: (line: string, level?: LogLevel) => void;
  /** How task `task`'s output line is written (its newline included). */
  readonly lineOf: (task: string, line: string) => string;
  /** `--chaos`: the faults to inject into the group. */
  readonly chaos?: ChaosRun | undefined;
  /** Standbys (unless `--no-standby`): the tasks' standbys, which the group starts from and refills once it trains. */
  readonly standbys?: Standbys | undefined;
  /**
   * Whether a worker of a data-parallel group that dies may be restarted alone, while the group
   * waits for it (`--max-restarts` above 0, or `--chaos`), and if so its restart: `faultHit` when a
   * fault of `--chaos` hit it (free); the result describes the restart, or is `undefined` when
   * none is left (the group stops, as without).
   */
  readonly restartAlone?: ((faultHit: boolean) => string | undefined) | undefined;
}

/**
 * Starts every task, streams their lines, and resolves once all have exited (and their output
 * is flushed). The first non-zero exit decides the outcome and stops the others; a termination
 * notice to `launch` is forwarded to every task.
 */
const runGroup = async (tasks: readonly Task[], program: TaskProgram, addresses: readonly string[], ctx: GroupContext): Promise<GroupOutcome> => {
  const { io, clock, notices, killAfterMs, say, lineOf, chaos, standbys, restartAlone } = ctx;
  const tfConfigs = tfConfigsOf(tasks, addresses);
  const live = new Map<string, ChildProcess>();
  // A `run` task handles signals once it has said so (launchReady.ts); until then a signal for it waits.
  const ready = new Set<ChildProcess>();
  /**
   * What waits for a task to handle signals: launch's own signal, and a fault's SIGTERM with what
   * to tell the chaos run when it goes (or never can).
   */
  const held = new Map<ChildProcess, { launch?: NodeJS.Signals; fault?: { readonly delivered: () => void; readonly undelivered: () => void } }>();
  const signal = (child: ChildProcess, sig: NodeJS.Signals): void => {
    // Not started (its spawn failed, or the failure is not reported yet): Node's kill() would
    // signal pid 0, launch's own process group.
    if (child.pid === undefined) return;
    if (sig !== "SIGKILL") signalledByLaunch.add(child);
    if (sig === "SIGKILL" || ready.has(child) || !program.holdSignalsUntilReady) child.kill(sig);
    else held.set(child, { ...held.get(child), launch: sig });
  };
  /** Tasks of the group that said their training began (their status channel). */
  const training = new Set<string>();
  /** Tasks that said their replica group waits for a lost worker (`rejoins`): once every task did, a worker that dies is restarted alone. */
  const rejoining = new Set<string>();
  /** Workers restarted alone that have not rejoined yet: a loss reported of one may be its previous process's. */
  const restartingAlone = new Set<string>();
  const markReady = (child: ChildProcess): void => {
    ready.add(child);
    const waiting = held.get(child);
    held.delete(child);
    if (waiting?.fault !== undefined) {
      // A signal of launch's own that was held too goes first (it stops the group anyway).
      child.kill("SIGTERM");
      waiting.fault.delivered();
      if (waiting.launch !== undefined && waiting.launch !== "SIGTERM") child.kill(waiting.launch);
      return;
    }
    if (waiting?.launch !== undefined) child.kill(waiting.launch);
  };
  /**
   * The chaos run's way into the group: a fault's signal, as the task's own notice (not one of
   * launch's). A SIGTERM waits until the task handles signals; `delivered` says when it went.
   */
  const chaosGroup: ChaosGroup = {
    isLive: (name) => {
      const child = live.get(name);
      return child !== undefined && child.pid !== undefined && child.exitCode === null && child.signalCode === null;
    },
    inject: (name, sig, delivery) => {
      const child = live.get(name);
      // Gone (its exit not yet read, or not yet reaped): nothing to signal.
      if (child === undefined || child.pid === undefined || child.exitCode !== null || child.signalCode !== null || hasEnded(child.pid)) return false;
      if (sig === "SIGTERM" && program.holdSignalsUntilReady && !ready.has(child)) {
        const waiting = held.get(child);
        if (waiting?.fault !== undefined) return false;
        held.set(child, { ...waiting, fault: delivery });
        return true;
      }
      if (!child.kill(sig)) return false;
      delivery.delivered();
      return true;
    },
  };
  /** Every exit so far, in order. */
  const exitsSeen: { task: string; code: number }[] = [];
  /** The task whose own termination notice came first (its status channel said so). */
  let noticeFrom: string | undefined;
  /** Tasks `launch` SIGKILLed because a peer found them lost (killed once). */
  const killedAsLost = new Set<string>();
  /** Tasks that said on their status channel that they exit on their own (`exiting`). */
  const leaving = new Set<string>();
  /** Tasks `launch` itself sent a termination signal: their notice did not start a preemption. */
  const signalledByLaunch = new Set<ChildProcess>();
  let killTimer: TimerHandle | undefined;

  const armKill = (): void => {
    killTimer ??= clock.setTimer(killAfterMs, () => {
      if (live.size === 0) return;
      say(`${[...live.keys()].join(", ")} still running after ${killAfterMs / 1000} s: SIGKILL`, "warn");
      for (const child of live.values()) signal(child, "SIGKILL");
    });
  };
  /**
   * A task stopped by a signal (SIGSTOP: frozen) can neither save nor exit: once the group
   * stops, it is SIGKILLed at once, as a task a peer found lost is, instead of being waited out.
   * `why` is the line's text between `<task> is stopped (SIGSTOP)` and `SIGKILL`.
   */
  const killStopped = (why = ": it can neither save nor exit:", level: "warn" | "error" = "warn"): void => {
    for (const [name, child] of live) {
      if (killedAsLost.has(name) || child.pid === undefined || !isStopped(child.pid)) continue;
      killedAsLost.add(name);
      say(`${name} is stopped (SIGSTOP)${why} SIGKILL`, level);
      signal(child, "SIGKILL");
    }
  };
  /**
   * While a worker restarted alone has not rejoined, the group waits for it: a task that freezes
   * meanwhile (the chief, whose service then cannot say it is lost) would hold the group for its
   * wait (`maxWaitSecs`). Each second, a task found stopped is SIGKILLed as lost, which ends the
   * group as any loss outside a wait does.
   */
  let frozenWatch: TimerHandle | undefined;
  const watchFrozen = (): void => {
    frozenWatch = undefined;
    if (restartingAlone.size === 0 || killTimer !== undefined || notices.first !== undefined) return;
    killStopped(` while the group waits for ${[...restartingAlone].join(", ")} to rejoin: it would hold the group;`, "error");
    frozenWatch = clock.setTimer(FROZEN_WATCH_MS, watchFrozen);
  };
  const stopOthers = (reason: string): void => {
    chaos?.groupStopping();
    killStopped();
    // Stopping already: the SIGKILL is armed.
    if (live.size === 0 || killTimer !== undefined) return;
    say(`${reason}: stopping ${[...live.keys()].join(", ")} (SIGTERM, SIGKILL after ${killAfterMs / 1000} s)`, "warn");
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
  const awaitOthers = (exited: string, code: number): void => {
    chaos?.groupStopping();
    killStopped();
    if (live.size === 0 || othersTimer !== undefined) return;
    const preempted = noticeFrom ?? exited;
    const what =
      code === ExitCodes.chiefLost
        ? `${exited} lost the chief during a preemption (exit ${code})`
        : `${preempted} was preempted (${preempted === exited ? `exit ${code}` : `${exited} exited ${code} first`})`;
    // Those SIGKILLed as lost are going: the others stop on the notice.
    const waiting = [...live.keys()].filter((n) => !killedAsLost.has(n));
    if (waiting.length === 0) return;
    say(`${what}: ${waiting.join(", ")} ${waiting.length === 1 ? "stops" : "stop"} on its notice (SIGTERM after ${killAfterMs / 1000} s if not)`);
    othersTimer = clock.setTimer(killAfterMs, () => stopOthers(`${[...live.keys()].join(", ")} still running ${killAfterMs / 1000} s after ${preempted}'s preemption`));
  };
  /** What a task says on its status channel (launchStatus.ts). */
  const heard = (task: Task, status: LaunchStatus, child: ChildProcess): void => {
    chaos?.status(task.name, status);
    if (status.type === "chaos") return;
    if (status.type === "rejoins") {
      rejoining.add(task.name);
      restartingAlone.delete(task.name);
      if (rejoining.size === tasks.length) say("every task joined the replica group, which waits for a lost worker: a worker that dies is restarted alone");
      return;
    }
    if (status.type === "training") {
      // A worker restarted alone trains again: the group's training began before; the standby it took is made again.
      if (training.has(task.name)) {
        standbys?.fill(tasks);
        return;
      }
      training.add(task.name);
      // The whole group trains: the standbys for its restart load now, off its start; a schedule from training starts its clock.
      if (training.size === tasks.length) {
        standbys?.fill(tasks);
        chaos?.trainingBegan();
      }
      return;
    }
    if (status.type === "notice") {
      // A notice launch sent (stopping the group after a failure, forwarding its own) started nothing.
      if (noticeFrom !== undefined || signalledByLaunch.has(child) || notices.first !== undefined) return;
      noticeFrom = task.name;
      say(`${task.name} got a termination notice (${status.source})`);
      return;
    }
    if (status.type === "exiting") {
      // It leaves on its own: a peer that finds its service gone meanwhile does not get it killed.
      leaving.add(task.name);
      return;
    }
    // A lost task (declared failed, or the chief whose service stopped answering) is frozen or
    // gone: nothing is gained by waiting out a kill delay for it.
    for (const name of status.tasks.map(launchTaskName)) {
      const child = live.get(name);
      // Gone already (its exit not yet read, or not yet reaped): nothing to kill, and its exit is its own.
      if (child === undefined || child.exitCode !== null || child.signalCode !== null || name === task.name || killedAsLost.has(name) || leaving.has(name)) continue;
      if (child.pid !== undefined && hasEnded(child.pid)) continue;
      // Restarted alone and not rejoined yet: the service may still be declaring its previous
      // process failed (an etcd lease that outlived it). Killed only if this one is frozen too.
      if (restartingAlone.has(name) && !(child.pid !== undefined && isStopped(child.pid))) {
        say(`${name} was reported lost (${task.name} says so), but it was restarted alone since and has not rejoined yet: the report is of its previous process; not killed`, "warn");
        continue;
      }
      killedAsLost.add(name);
      say(`${name} ${status.why === "declaredFailed" ? "was declared failed by the coordination service" : "is lost: the coordination service it hosts stopped answering"} (${task.name} says so): SIGKILL`, "error");
      signal(child, "SIGKILL");
    }
  };
  const forward = (n: TerminationNotice): void => {
    const sig: NodeJS.Signals = n.source === "SIGINT" || n.source === "SIGHUP" ? n.source : "SIGTERM";
    // No more faults; a task frozen (by a fault, or otherwise) can neither save nor exit.
    chaos?.stop();
    if (live.size === 0) return;
    killStopped();
    say(`${notices.describe(n)}: forwarding ${sig} to ${[...live.keys()].join(", ")}`);
    for (const child of live.values()) signal(child, sig);
    armKill();
  };

  const children = new Map<string, ChildProcess>();
  // The schedule's clock starts with the first group; each task gets the opError faults still to come that hit it.
  chaos?.start();
  const chaosEnvOf = (name: string): Record<string, string> => {
    const faults = chaos?.opErrorsFor(name) ?? [];
    return faults.length === 0 ? {} : { [CHAOS_OP_ERRORS_ENV]: JSON.stringify(faults) };
  };
  /** The tasks' processes until they exit; a worker restarted alone adds its own. */
  const running = new Set<Promise<void>>();
  const start = (task: Task, i: number, alone?: string): void => {
    // The group's own variables; the rest is every group's (taskEnvOf).
    const groupEnv = { ...chaosEnvOf(task.name), TF_CONFIG: tfConfigs[i] as string, ...(restartAlone === undefined ? {} : { [LAUNCH_RESTARTS_ALONE_ENV]: "1" }) };
    // A restart (the group's, or a worker's alone) starts from the task's standby, when one waits.
    const standby = standbys?.take(task.name);
    standby?.go(groupEnv);
    const child = standby?.child ?? spawn(program.file, [...program.args], { env: { ...taskEnvOf(program, io.env), ...groupEnv }, stdio: TASK_STDIO });
    const startedAt = clock.now();
    live.set(task.name, child);
    children.set(task.name, child);
    const how = `${standby === undefined ? "" : ", its standby"}${alone === undefined ? "" : `, alone: ${alone}`}`;
    say(`started ${task.name} at ${addresses[i] as string}${child.pid === undefined ? "" : ` (pid ${child.pid}${how})`}`);
    let badStatus = false;
    const streamed = [
      readLines(child.stdio[STATUS_FD] as NodeJS.ReadableStream | null | undefined, (line) => {
        try {
          heard(task, decodeLaunchStatus(line, task.name), child);
        } catch (e) {
          // Once per task: a program that writes to fd 3 for its own reasons is not launch's concern.
          if (!badStatus) say(`${(e as Error).message} (ignored from now on)`, "warn");
          badStatus = true;
        }
      }),
      copyLines(child.stdout, io.out, (line) => lineOf(task.name, line)),
      copyLines(child.stderr, io.err, (line) => lineOf(task.name, line), (line) => {
        if (line !== LAUNCH_READY_LINE) return false;
        markReady(child);
        return true;
      }),
    ];
    const exited = standby?.exited ?? exitCodeOf(child, (e) => say(`${task.name} could not start: ${e.message}`, "error"));
    running.add(
      Promise.all([exited, ...streamed]).then(([code]) => {
        live.delete(task.name);
        chaos?.exited(task.name, code);
        // A fault's SIGTERM that waited for this task: it never went; the fault waits for the next group.
        held.get(child)?.fault?.undelivered();
        held.delete(child);
        const signalled = child.signalCode === null ? "" : ` (killed by ${child.signalCode})`;
        say(`${task.name} exited with ${code}${signalled}`, code === 0 ? "info" : "warn");
        if (code !== 0 && restartedAlone(task, i, child, startedAt)) return;
        exitsSeen.push({ task: task.name, code });
        if (code === 0 || notices.first !== undefined) return;
        if (code === program.preemptionCode || code === ExitCodes.chiefLost) awaitOthers(task.name, code);
        else stopOthers(`${task.name} failed (exit ${code})`);
      }),
    );
  };
  /**
   * A worker of a data-parallel group that waits for a lost worker (every task said `rejoins`)
   * died (a signal ended it: SIGKILL, a crash, launch's SIGKILL as lost) while the group trains
   * on: it starts again alone and rejoins, if a restart is left. A task that exited on its own
   * reported its failure to the group, which fails with it; the chief's loss, a preemption or a
   * group that stops restart the group instead.
   */
  const restartedAlone = (task: Task, i: number, child: ChildProcess, startedAt: number): boolean => {
    if (restartAlone === undefined || task.type === "chief" || child.signalCode === null) return false;
    if (notices.first !== undefined || noticeFrom !== undefined || killTimer !== undefined || othersTimer !== undefined || signalledByLaunch.has(child)) return false;
    if (!tasks.every((t) => rejoining.has(t.name))) return false;
    const restart = restartAlone(chaos?.hitSince(task.name, startedAt) === true);
    if (restart === undefined) return false;
    // It says `rejoins` again once it rejoined; until then, another loss restarts the group.
    rejoining.delete(task.name);
    restartingAlone.add(task.name);
    if (frozenWatch === undefined) frozenWatch = clock.setTimer(FROZEN_WATCH_MS, watchFrozen);
    killedAsLost.delete(task.name);
    leaving.delete(task.name);
    say(`${task.name} died (${child.signalCode}): restarting it alone; the group waits for it to rejoin (${restart})`, "warn");
    start(task, i, restart);
    chaos?.taskRestarted(task.name);
    return true;
  };
  tasks.forEach((task, i) => start(task, i));
  // The faults that waited for this group land now (a SIGTERM once its task handles signals).
  chaos?.groupStarted(chaosGroup);
  // Notices before and during the group (a late subscriber gets the earlier ones first).
  const subscription = notices.notices$.subscribe(forward);
  try {
    // A worker restarted alone joins the set before its predecessor's exit settles.
    while (running.size > 0) {
      const now = [...running];
      await Promise.all(now);
      for (const p of now) running.delete(p);
    }
  } finally {
    subscription.unsubscribe();
    killTimer?.cancel();
    othersTimer?.cancel();
    frozenWatch?.cancel();
  }
  const signalled = new Set(tasks.filter((t) => signalledByLaunch.has(children.get(t.name) as ChildProcess)).map((t) => t.name));
  return groupOutcome(exitsSeen, noticeFrom, program.preemptionCode, { killedAsLost, signalled });
};

/** What `launch` itself did to the tasks, for {@link groupOutcome}. */
export interface LaunchActions {
  /** Tasks SIGKILLed because another task found them lost. */
  readonly killedAsLost: ReadonlySet<string>;
  /** Tasks `launch` sent a termination signal (stopping the group after a failure, or forwarding its own notice). */
  readonly signalled: ReadonlySet<string>;
}

/**
 * The group's exit code from its tasks' exits: the code of the task whose own termination notice
 * started the preemption, when it is the preemption code or 43 (the chief lost during it); else
 * 43 from a task `launch` did not stop itself; else the first failure that `launch` did not cause
 * (a task it SIGKILLed as lost counts only when no other failed). 0 when every task exited 0.
 */
export const groupOutcome = (
  exits: readonly { readonly task: string; readonly code: number }[],
  noticeFrom: string | undefined,
  preemptionCode: number,
  actions: LaunchActions = { killedAsLost: new Set(), signalled: new Set() },
): GroupOutcome => {
  const failed = exits.filter((e) => e.code !== 0);
  const from = noticeFrom === undefined ? {} : { noticeFrom };
  if (failed.length === 0) return { code: ExitCodes.done, ...from };
  const noticed = failed.find((e) => e.task === noticeFrom);
  if (noticed !== undefined && (noticed.code === preemptionCode || noticed.code === ExitCodes.chiefLost)) return { code: noticed.code, decidedBy: noticed.task, ...from };
  const lostChief = failed.find((e) => e.code === ExitCodes.chiefLost && !actions.signalled.has(e.task));
  if (lostChief !== undefined) return { code: lostChief.code, decidedBy: lostChief.task, ...from };
  // The cause: a task that failed on its own; else one found lost. A task that exited with the
  // preemption code (or 43) after launch's SIGTERM only answered it: the group stopped because of
  // the cause.
  const answered = (e: { task: string; code: number }): boolean => actions.signalled.has(e.task) && (e.code === preemptionCode || e.code === ExitCodes.chiefLost);
  const first =
    failed.find((e) => !actions.killedAsLost.has(e.task) && !answered(e)) ??
    failed.find((e) => actions.killedAsLost.has(e.task)) ??
    (failed[0] as { task: string; code: number });
  return { code: first.code, decidedBy: first.task, ...from };
};

/** How often `launch` looks for a frozen task while a worker restarted alone has not rejoined. */
const FROZEN_WATCH_MS = 1_000;

/** The descriptor of a task's status channel (launchStatus.ts). */
const STATUS_FD = 3;

/** Calls `onLine` with each line of `input`; resolves when `input` ends. */
const readLines = (input: NodeJS.ReadableStream | null | undefined, onLine: (line: string) => void): Promise<void> => {
  if (input === null || input === undefined) return Promise.resolve();
  const lines = createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY });
  lines.on("line", onLine);
  return new Promise((resolve) => lines.once("close", resolve));
};

/**
 * The preemption exit code of the configuration at `path` (`preemption.exitCode`), or 42 when it
 * says none or cannot be read: the task's `run` reports a bad file itself (exit 2).
 */
const preemptionCodeOf = (path: string): number => {
  const code = (peekConfig(path) as { preemption?: { exitCode?: unknown } } | undefined)?.preemption?.exitCode;
  return PreemptionExitCode.is(code) ? code : PREEMPTION_EXIT_CODE;
};

/**
 * The configuration at `path` as plain data, for the few keys `launch` reads itself; `undefined`
 * when it cannot be read or parsed (each task's `run` then says why).
 */
const peekConfig = (path: string): unknown => {
  try {
    return parseDocument(readFileSync(path, "utf8")).toJS({ maxAliasCount: MAX_ALIAS_COUNT }) ?? undefined;
  } catch {
    return undefined;
  }
};

/** `env` without the variables `launch --chaos` sets for its tasks (see src/runtime/chaosOpErrors.ts). */
const withoutChaosEnv = (env: NodeJS.ProcessEnv): NodeJS.ProcessEnv => {
  const { [CHAOS_OP_ERRORS_ENV]: _ops, [CHAOS_GOODPUT_DIR_ENV]: _dir, ...rest } = env;
  return rest;
};

/**
 * The log directory of the configuration at `path`, where its tasks write their goodput logs
 * (`summaries.dir`, else `checkpoint.dir`, relative to the file), or `undefined` when it names
 * none or cannot be read (the task's `run` reports a bad file itself).
 */
const logDirOf = (path: string): string | undefined => {
  const value = peekConfig(path) as { summaries?: { dir?: unknown }; checkpoint?: { dir?: unknown } } | undefined;
  const dir = value?.summaries?.dir ?? value?.checkpoint?.dir;
  return typeof dir === "string" && dir !== "" ? resolve(dirname(resolve(path)), dir) : undefined;
};

/**
 * Copies `input` to `out` line by line, each as `format` writes it, except the lines `consume`
 * takes; resolves when `input` ends.
 */
const copyLines = (input: NodeJS.ReadableStream | null, out: NodeJS.WritableStream, format: (line: string) => string, consume?: (line: string) => boolean): Promise<void> => {
  if (input === null) return Promise.resolve();
  const lines = createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY });
  lines.on("line", (line) => {
    if (consume?.(line) !== true) out.write(format(line));
  });
  return new Promise((resolve) => lines.once("close", resolve));
};

/** A usage problem found before anything started: one line, or (JSON) one error record. */
const usageLine = (io: CliIo, options: LaunchOptions, line: string): void =>
  void io.err.write(options.logFormat === "json" ? jsonLine((io.clock ?? systemClock).now(), { task: "launch", level: "error", message: line }) : `${line}\n`);

/** `record` with the dotted `key` set to `value` (the objects on the way copied, or made when absent or not objects). */
const withKey = (record: Readonly<Record<string, unknown>>, key: string, value: unknown): Record<string, unknown> => {
  const [head, ...rest] = key.split(".") as [string, ...string[]];
  if (rest.length === 0) return { ...record, [head]: value };
  const inner = record[head];
  const innerRecord = typeof inner === "object" && inner !== null && !Array.isArray(inner) ? (inner as Record<string, unknown>) : {};
  return { ...record, [head]: withKey(innerRecord, rest.join("."), value) };
};

/** Whether an issue at `path` is about `key` (`etcdEndpoints[0]` is about `etcdEndpoints`). */
const covers = (key: string, path: string): boolean => path === key || path.startsWith(`${key}.`) || path.startsWith(`${key}[`);

/** A flag's name without its value (`--backend`). */
const flagName = (flag: ClusterFlag): string => flag.flags.split(" ")[0] as string;

/**
 * The keys of a `--cluster-config` file (JSON or YAML: YAML reads JSON), as written; an empty
 * file is an empty section. `Left`: one line per problem, naming the file.
 */
const readSettingsFile = (path: string, cwd: string): Either<string[], Record<string, unknown>> => {
  let text: string;
  try {
    text = readFileSync(resolve(cwd, path), "utf8");
  } catch (e) {
    const why = (e as NodeJS.ErrnoException).code === "ENOENT" ? "does not exist" : `cannot be read (${(e as Error).message})`;
    return left([`--cluster-config ${path} ${why}: give a JSON or YAML file holding the cluster: section's keys`]);
  }
  const doc = parseDocument(text, { prettyErrors: true });
  if (doc.errors.length > 0) {
    return left(
      doc.errors.map((e) => {
        const at = e.linePos?.[0];
        const message = `YAML syntax error: ${(e.message.split("\n")[0] ?? e.code).replace(/ at line \d+, column \d+:?$/, "")}`;
        return `${path}: ${formatIssue({ path: "(file)", message, ...(at === undefined ? {} : { line: at.line, column: at.col }) })}`;
      }),
    );
  }
  let value: unknown;
  try {
    value = doc.toJS({ maxAliasCount: MAX_ALIAS_COUNT });
  } catch (e) {
    return left([`${path}: ${(e as Error).message}`]);
  }
  if (value === null || value === undefined) return right({});
  if (typeof value !== "object" || Array.isArray(value)) {
    return left([`${path}: (root): expected the cluster: section's keys (backend, etcdEndpoints, tokenFile, tls, timeouts, ...), got ${show(value)}`]);
  }
  const section = value as Record<string, unknown>;
  const inner = section["cluster"];
  if (Object.keys(section).length === 1 && typeof inner === "object" && inner !== null && !Array.isArray(inner)) {
    return left([`${path}: cluster: the file holds the cluster: section's content, its keys at top level; move the keys under cluster: up one level`]);
  }
  return right(section);
};

/** This program's own command line: the running node, its flags (`--import tsx`) and script. */
const thisCommand = (): TaskCommand => ({ execPath: process.execPath, args: [...process.execArgv, process.argv[1] as string] });

/** A task's stdio: stdin only for a standby's go, stdout and stderr, and fd 3, the status channel (launchStatus.ts). */
const TASK_STDIO: ["ignore" | "pipe", "pipe", "pipe", "pipe"] = ["ignore", "pipe", "pipe", "pipe"];

/** Every group's environment of a task: launch's own (without the chaos and standby variables it inherited; a task honours them under launch), the program's, and launch's channel. */
const taskEnvOf = (program: TaskProgram, env: NodeJS.ProcessEnv): NodeJS.ProcessEnv => ({
  ...withoutStandbyEnv(withoutChaosEnv(env)),
  ...program.env,
  [LAUNCH_READY_ENV]: "1",
  [LAUNCH_STATUS_FD_ENV]: String(STATUS_FD),
});

/** The exit code of `child` (128 + the signal's number when a signal ended it; 1 when it could not start, after `onError`). Listens from the call on. */
const exitCodeOf = (child: ChildProcess, onError: (e: Error) => void): Promise<number> =>
  new Promise<number>((resolve) => {
    child.once("error", (e) => {
      onError(e);
      resolve(ExitCodes.failure);
    });
    child.once("exit", (code, signal) => resolve(code ?? 128 + (signal === null ? 0 : (constants.signals[signal] ?? 0))));
  });

/** A task's standby (src/cli/standby.ts): `run` with its modules loaded, waiting for its go on stdin. */
interface Standby {
  readonly child: ChildProcess;
  /** Its exit code (listened for from its spawn on: an exit before its group is not missed). */
  readonly exited: Promise<number>;
  /** Hands it the group's variables: from now on it is the task. */
  go(groupEnv: Readonly<Record<string, string>>): void;
}

/**
 * Standbys (unless `--no-standby`): at most one standby per task, made once a group trains (so that loading them does
 * not slow the group's own start), taken by the next group, and ended with `launch`.
 */
class Standbys {
  readonly #waiting = new Map<string, Standby>();

  constructor(
    private readonly program: TaskProgram,
    private readonly env: NodeJS.ProcessEnv,
    private readonly say: (line: string, level?: LogLevel) => void,
  ) {}

  /** Makes a standby for each of `tasks` that has none. */
  fill(tasks: readonly Task[]): void {
    const made: string[] = [];
    for (const task of tasks) {
      if (this.#waiting.has(task.name)) continue;
      const child = spawn(this.program.file, [...this.program.args], { env: { ...taskEnvOf(this.program, this.env), [STANDBY_ENV]: "1" }, stdio: ["pipe", "pipe", "pipe", "pipe"] });
      // A go to a standby that died meanwhile: its exit is what the group sees.
      child.stdin?.on("error", () => undefined);
      const standby: Standby = {
        child,
        exited: exitCodeOf(child, (e) => this.say(`the standby for ${task.name} could not start: ${e.message}`, "warn")),
        go: (groupEnv) => void child.stdin?.end(standbyGoLine(groupEnv)),
      };
      void standby.exited.then(() => {
        if (this.#waiting.get(task.name) === standby) this.#waiting.delete(task.name);
      });
      this.#waiting.set(task.name, standby);
      made.push(`${task.name}${child.pid === undefined ? "" : ` (pid ${child.pid})`}`);
    }
    if (made.length > 0) this.say(`standby for a restart: ${made.join(", ")} loading run's modules`);
  }

  /** The standby of `task`, if one is waiting and alive (it is no longer a standby). */
  take(task: string): Standby | undefined {
    const standby = this.#waiting.get(task);
    this.#waiting.delete(task);
    const child = standby?.child;
    if (child === undefined || child.pid === undefined || child.exitCode !== null || child.signalCode !== null || hasEnded(child.pid)) return undefined;
    return standby;
  }

  /** Ends every standby still waiting (they hold nothing) and waits for their exits. */
  async close(): Promise<void> {
    const waiting = [...this.#waiting.values()];
    this.#waiting.clear();
    for (const standby of waiting) standby.child.kill("SIGKILL");
    await Promise.all(waiting.map((standby) => standby.exited));
  }
}

/** `env` without {@link STANDBY_ENV}: only launch's own standbys are standbys. */
const withoutStandbyEnv = (env: NodeJS.ProcessEnv): NodeJS.ProcessEnv => {
  const { [STANDBY_ENV]: _standby, ...rest } = env;
  return rest;
};
