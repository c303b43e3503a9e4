/**
 * `monitored-session run <config>`: loads and checks the configuration and the job module
 * (printing every problem and exiting 2 before anything is created), builds the session with
 * `monitoredTrainingSession`, and runs the job's fetches until `shouldStop()`.
 *
 * SIGTERM and SIGINT go through a `PreemptionCheckpointHandler`: a checkpoint is saved at the
 * next step boundary, then the command exits with 42 (or `preemption.exitCode`), and running it
 * again resumes at that step.
 *
 * With TF_CONFIG set, the process is one task of a cluster (src/runtime/clusterTask.ts): the task
 * decides `isChief` and `master`, the start line names it, and only the chief takes the
 * checkpoint directory's lock and writes there (a worker exits with the preemption code without
 * saving). The task starts its server and joins the cluster before training
 * (src/runtime/clusterRuntime.ts); a worker starts from the chief's values. A cluster failure (a
 * task declared failed, a reported error) stops training with exit 1; a termination notice of any
 * task makes every task exit with the preemption code. Under `launch` every task stops through
 * its multi-worker `PreemptionCheckpointHandler`: a data-parallel group's ranks by their stop vote
 * and claim, tasks without a group by the claim and the chief's stored save ("chiefSaves"); tasks
 * started by hand report the notice to the cluster, which the others take as their own.
 * A worker without data parallelism outlives its chief: its session is re-created from the
 * restarted chief's values (src/runtime/chiefRecovery.ts).
 *
 * This module is the command line's part: the notices watched from the start, the plan (TF_CONFIG,
 * the configuration, the job module, the cluster task; every exit 2 before anything is created),
 * and the goodput line at the end. Training itself, in named steps, is in runTraining.ts; the
 * preemption exit and the chief's preemption handler in runPreemption.ts; joining the cluster and
 * creating the session while notices or the cluster's failure may come first, in clusterJoin.ts;
 * the run's state and the exit code of training that ended with an error, in runOutcome.ts.
 *
 * @module
 */

import { resolve } from "node:path";

import { systemClock, type Clock } from "../time/Clock.js";
import type { Logger } from "../Logger.js";
import { TerminationNotices } from "../preemption/TerminationNotices.js";
import { describeGoodput, computeGoodput } from "../goodput/computeGoodput.js";
import { GoodputLogFollower } from "../goodput/goodputLog.js";
import { launchStatusWriter } from "../runtime/launchStatus.js";
import type { CliIo } from "./cliIo.js";
import { jsonLineStream, jsonLogger, withJsonConsole } from "./logFormat.js";
import { planRun, type LogSink, type RunCommandOptions } from "./runPlan.js";
import type { Accounting } from "./runResources.js";
import { train } from "./runTraining.js";

export type { RunCommandOptions } from "./runPlan.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Runs the command; resolves with the exit code. Termination notices (SIGTERM, SIGINT, SIGHUP,
 * the parent's death, `preemption.watchFile`) are watched from the start: before the session
 * exists a notice makes the command exit 42 once the configuration is checked (exit 2 if it is
 * bad), without saving; after, the preemption handler saves at the next step boundary and the
 * command exits 42.
 */
export const runCommand = async (configPath: string, options: RunCommandOptions, io: CliIo): Promise<number> => {
  const clock = io.clock ?? systemClock;
  // JSON lines: the log and the progress write their own records to the streams; every other
  // line (a configuration problem, a failure) becomes an error record.
  const json = options.logFormat === "json";
  const now = (): number => clock.now();
  const runIo = json ? { ...io, err: jsonLineStream(io.err, now, "error") } : io;
  // JSON: the notices' own lines (a platform's poller, a watched file) and the global console (a
  // job's own lines, a library's notices) write records too.
  const notices = watchNotices(runIo, clock, json ? jsonLogger(io.err, now, options.logLevel) : undefined);
  const body = (): Promise<number> => runWithNotices(configPath, options, runIo, clock, notices, { format: json ? "json" : "text", out: io.out, err: io.err });
  try {
    return await (json ? withJsonConsole(io.out, io.err, now, body) : body());
  } finally {
    notices.close();
  }
};

/**
 * Starts watching the command's termination notices (signals, replaying the early ones, and the
 * parent's death), then tells the entry point to drop its early handlers.
 */
export const watchNotices = (io: CliIo, clock: Clock, logger?: Logger): TerminationNotices => {
  const notices = TerminationNotices.start({
    clock,
    ...(logger === undefined ? {} : { logger }),
    earlier: io.earlySignals,
    ...(io.noticeProcess === undefined ? {} : { process: io.noticeProcess }),
  });
  // Under launch: which task's own notice started a preemption, on the status channel.
  const toLaunch = launchStatusWriter(io.env);
  notices.notices$.subscribe((n) => {
    if (n.count === 1) toLaunch({ type: "notice", source: notices.describe(n) });
  });
  io.onStarted?.();
  return notices;
};

const runWithNotices = async (configPath: string, options: RunCommandOptions, io: CliIo, clock: Clock, notices: TerminationNotices, sink: LogSink): Promise<number> => {
  const plan = await planRun(configPath, options, io, clock, notices, sink);
  if (typeof plan === "number") return plan;
  const goodput: Accounting = { recorder: undefined, step: null };
  let code: number | null = null;
  try {
    code = await train(plan, io, clock, notices, goodput);
    return code;
  } finally {
    // Also when training threw (its exit code is then the entry point's: none recorded).
    endAccounting(goodput, code, plan.logger);
  }
};

/** Writes the goodput log's `end` record and prints the task's goodput across its restarts (one line). */
const endAccounting = (goodput: Accounting, code: number | null, logger: Logger): void => {
  const recorder = goodput.recorder;
  if (recorder === undefined) return;
  recorder.end(goodput.step, code);
  if (code === null) return;
  try {
    const dir = resolve(recorder.path, "..", "..");
    // This task's log only: another task's (unreadable, say) is no concern of this line.
    const own = new GoodputLogFollower(dir).readOne(recorder.path);
    const task = computeGoodput(own === undefined ? [] : [own]).tasks[0];
    if (task !== undefined) logger.info(`${describeGoodput(task)} Every task: monitored-session goodput ${dir}`);
  } catch (e) {
    logger.warn(`The goodput summary could not be computed: ${e instanceof Error ? e.message : String(e)}`);
  }
};

