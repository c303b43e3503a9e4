/**
 * The `monitored-session` command line: `run <config>`, `launch --workers N <config>`,
 * `launch --workers N [cluster settings] -- <command> [args…]`, `manifest kubernetes <config>`
 * (or `-- <command>`), `inspect <checkpointDir>`, `board <logdir>` and `goodput <logdir>`, built with commander. Usage errors exit 2; see {@link ExitCodes}.
 * Each command's module, `inspect`'s excepted, loads when that command runs: `run` starts
 * without the modules of `launch`, `manifest` and the board (docs/performance.md, "Process start
 * to first step").
 *
 * @module
 */

import { Command, CommanderError, InvalidArgumentError, Option } from "commander";

import { ExitCodes, exitCodesHelp } from "../runtime/exitCodes.js";
import { addInspectCommand } from "./inspect.js";
import { DEFAULT_RESOURCES, MANIFEST_DEFAULTS } from "../kubernetes/manifestDefaults.js";
import type { ManifestFlags } from "./manifest.js";
import type { PlannedFault } from "./chaosSchedule.js";
import { CLUSTER_FLAGS, type ClusterFlags } from "./clusterFlags.js";
import type { CliIo } from "./cliIo.js";
import { jsonLineStream, LOG_FORMATS, type LogFormat } from "./logFormat.js";
import { systemClock } from "../time/Clock.js";

/** Parses `argv` (without `node` and the script) and runs the command; resolves with the exit code. */
export const main = async (argv: readonly string[], io: CliIo): Promise<number> => {
  let code: number = ExitCodes.done;
  // `launch … -- <command> [args…]` (and `manifest kubernetes … --`): everything after the first
  // `--` is the tasks' command, never the command's own arguments (commander would mix its
  // operands with <config>).
  const dashDash = argv[0] === "launch" || argv[0] === "manifest" ? argv.indexOf("--") : -1;
  const taskCommand = dashDash < 0 ? undefined : argv.slice(dashDash + 1);
  const ownArgv = dashDash < 0 ? argv : argv.slice(0, dashDash);
  // `--log-format json`: a usage error is an error record too (launch's name `launch` as their task).
  const json = ownArgv.some((a, i) => a === "--log-format=json" || (a === "--log-format" && ownArgv[i + 1] === "json"));
  const usageErr = json ? jsonLineStream(io.err, () => (io.clock ?? systemClock).now(), "error", argv[0] === "launch" ? { task: "launch" } : {}) : io.err;
  /** A usage error of `launch`, as commander wrote it (printed by the catch below, or replaced). */
  let launchError: string | undefined;
  const program = new Command("monitored-session")
    .description("Run a training job described by a configuration file, launch it as a local cluster or print its Kubernetes manifests, inspect its checkpoints, and serve its summaries.")
    .exitOverride()
    .configureOutput({ writeOut: (s) => io.out.write(s), writeErr: (s) => usageErr.write(s) })
    .showHelpAfterError("(run with --help for usage)")
    .addHelpText("after", `\n${exitCodesHelp}\n\nConfiguration reference: docs/configuration.md`);

  program
    .command("run")
    .description("Train: load <config> (JSON or YAML), import its module, run until a hook stops the session.")
    .argument("<config>", "the configuration file (.json, .yaml or .yml)")
    .option("--no-progress", "plain log lines even on a terminal")
    .option("--verbose", "print the stack trace of a failure (default: one line naming the problem and the fix)")
    .addOption(new Option("--log-level <level>", "library log messages at or above this level").choices(["debug", "info", "warn", "error"]).default("info"))
    .addOption(new Option("--log-format <format>", "text: lines for people; json: one JSON object a line (log records on stderr, progress records on stdout)").choices(LOG_FORMATS).default("text"))
    .option("--board [port]", "serve `monitored-session board` on the summaries beside training (the chief; default port 6006, 0 for a free one)")
    .addHelpText(
      "after",
      `\nOn a terminal a progress bar shows the step, steps/sec, loss (from a "loss" fetch) and ETA (when the last step is known); in a pipe or with CI=true, plain lines.\n\nBefore anything is written, the file, its plugins, the module, the output directories and every fetch and tensor name are checked. A TypeScript module (.ts, .mts, .cts) is loaded through tsx when the project has it (npm i -D tsx).\n\n${exitCodesHelp}`,
    )
    .exitOverride()
    .action(async (config: string, opts: { progress: boolean; verbose?: boolean; logLevel: "debug" | "info" | "warn" | "error"; logFormat: LogFormat; board?: string | true }) => {
      const board = opts.board === undefined ? undefined : opts.board === true ? 6006 : Number(opts.board);
      if (board !== undefined && !(Number.isInteger(board) && board >= 0 && board <= 65535)) {
        usageErr.write(`monitored-session run: --board ${String(opts.board)}: expected a port from 0 to 65535 (0 picks a free one)\n`);
        code = ExitCodes.usage;
        return;
      }
      code = await (await import("./run.js")).runCommand(config, { progress: opts.progress, logLevel: opts.logLevel, logFormat: opts.logFormat, verbose: opts.verbose === true, board }, io);
    });

  const launch = program
    .command("launch")
    .description(
      "Start a local cluster on loopback: <n> processes (the chief and n-1 workers), each with its TF_CONFIG, running `run <config>` or, after --, any <command> (as torchrun runs a script).",
    )
    .usage("--workers <n> [options] <config>\n       monitored-session launch --workers <n> [options] [cluster settings] -- <command> [args...]")
    .argument("[config]", "the configuration file every task runs (or, instead, -- <command> [args...])")
    .requiredOption("--workers <n>", "processes to start, the chief included", integerAtLeast(1))
    .option("--max-restarts <k>", "restart the whole group after a failure, at most k times (a preemption, exit 42, does not count)", integerAtLeast(0), 0)
    .option("--kill-after <secs>", "seconds between the SIGTERM that stops a task and its SIGKILL", positiveNumber, 30)
    .option("--verbose", "passed to each task's run (<config> only)")
    .addOption(new Option("--log-level <level>", "passed to each task's run (<config> only)").choices(["debug", "info", "warn", "error"]))
    .addOption(
      new Option("--log-format <format>", "text: each task's lines behind its name; json: one JSON object a line, each with its task (with <config>, passed to each task's run)").choices(LOG_FORMATS).default("text"),
    )
    .option("--chaos <file>", "inject the faults of a schedule (JSON or YAML: seed, durationSecs, meanIntervalSecs or times, kinds, freezeSecs; or faults) and report each recovery; see docs/goodput.md")
    .option("--chaos-report <path>", "where --chaos writes its recovery report (JSON)", "chaos-report.json")
    .option("--standby", "<config> only, and the default when <config> can restart (--max-restarts above 0, or --chaos): once the group trains, keep a process per task with run's modules loaded, so that a restart starts from it instead of loading them again")
    .option("--no-standby", "start every restarted task as a new process (no standby processes kept)")
    .optionsGroup("Cluster settings (-- <command> only; with <config>, its cluster: section holds them):");
  for (const f of CLUSTER_FLAGS) launch.option(f.flags, f.help);
  launch
    .option("--cluster-config <file>", "a JSON or YAML file with the cluster: section's keys at top level (the flags above override them)")
    .addHelpText(
      "after",
      `\nEach task gets TF_CONFIG (its task in a chief job of 1 and a worker job of n-1 on free loopback ports) and MONITORED_SESSION_LAUNCH_READY=1; a -- <command> also gets MONITORED_SESSION_CLUSTER, the cluster settings as JSON. Each task's lines are prefixed with its name ([chief:0], [worker:1], ...); with --log-format json, every line is a JSON object naming its task. Each task also gets a status channel on fd 3 (MONITORED_SESSION_LAUNCH_STATUS_FD) where it says which termination notice it got and which tasks it found lost. When a task fails the others get SIGTERM, then SIGKILL after --kill-after seconds; a task found lost (declared failed, or a chief whose service stopped answering) is SIGKILLed at once; when one is preempted (exits ${ExitCodes.preempted} or ${ExitCodes.chiefLost}) the others stop on its notice, and get SIGTERM only if still running --kill-after seconds later. SIGINT, SIGTERM and SIGHUP are forwarded to every task: to a run task once it reports that it handles signals, to a -- <command> at once. See docs/distributed.md.\n\nExit codes: 0 every task exited 0; the code of the task whose own termination notice started a preemption (${ExitCodes.preempted}, or preemption.exitCode, or ${ExitCodes.chiefLost}); else ${ExitCodes.chiefLost} if a task exited with it; otherwise the first other non-zero exit code of a task (after --max-restarts restarts; 1 when a command cannot be started); ${ExitCodes.usage} bad usage or cluster settings.`,
    )
    .showHelpAfterError(false)
    // Held until the error is known: an operand or option too many is a command without `--`.
    .configureOutput({ outputError: (s) => (launchError = s) })
    .exitOverride()
    .action(async (config: string | undefined, opts: LaunchFlags) => {
      let chaos: { faults: readonly PlannedFault[]; reportPath: string; fromTraining: boolean } | undefined;
      if (opts.chaos !== undefined) {
        const read = (await import("./chaosSchedule.js")).readChaosSchedule(opts.chaos, opts.workers - 1);
        if (read._tag === "Left") {
          for (const line of read.left) usageErr.write(`monitored-session launch: ${line}\n`);
          code = ExitCodes.usage;
          return;
        }
        chaos = { faults: read.right.faults, reportPath: opts.chaosReport, fromTraining: read.right.schedule.from === "training" };
      } else if (launch.getOptionValueSource("chaosReport") === "cli") {
        usageErr.write("monitored-session launch: --chaos-report is the report of --chaos; give --chaos <file> too, or leave --chaos-report out\n");
        code = ExitCodes.usage;
        return;
      }
      const options = { workers: opts.workers, maxRestarts: opts.maxRestarts, killAfterSecs: opts.killAfter, logFormat: opts.logFormat, chaos, standby: false };
      const settingsFlags = [...CLUSTER_FLAGS.filter((f) => opts[f.name] !== undefined).map((f) => f.flags.split(" ")[0] as string), ...(opts.clusterConfig === undefined ? [] : ["--cluster-config"])];
      const runFlags = [...(opts.verbose === true ? ["--verbose"] : []), ...(opts.logLevel === undefined ? [] : ["--log-level"])];
      const usage = (line: string): void => {
        usageErr.write(`${line}\n`);
        code = ExitCodes.usage;
      };
      if (taskCommand === undefined) {
        if (config === undefined) return usage("error: missing required argument 'config'");
        if (settingsFlags.length > 0) {
          return usage(`monitored-session launch: ${settingsFlags.join(", ")} ${settingsFlags.length === 1 ? "is" : "are"} for launch -- <command>; with a configuration file, put the settings in its cluster: section (${config})`);
        }
        if (opts.standby === true && opts.maxRestarts === 0 && chaos === undefined) {
          return usage("monitored-session launch: --standby keeps processes for a restart, and this launch never restarts its group; give --max-restarts <k> (a preemption then restarts it too) or --chaos <file>, or leave --standby out");
        }
        const runArgs = [...(opts.verbose === true ? ["--verbose"] : []), ...(opts.logLevel === undefined ? [] : ["--log-level", opts.logLevel])];
        const standby = standbyOf(opts.standby, opts.maxRestarts, chaos !== undefined);
        code = await (await import("./launch.js")).launchCommand(config, { ...options, standby, runArgs }, io);
        return;
      }
      if (config !== undefined) return usage(`monitored-session launch: give either <config> or -- <command> [args...], not both (${config} is before --)`);
      if (opts.standby === true) return usage("monitored-session launch: --standby is for launch <config> (a standby is run with its modules loaded); a command after -- starts as a new process each time");
      if (chaos?.fromTraining === true) {
        return usage(`monitored-session launch: --chaos ${opts.chaos ?? ""}: from: training is for launch <config> (its tasks say when they train); a command after -- does not say: use from: launch`);
      }
      if (runFlags.length > 0) return usage(`monitored-session launch: ${runFlags.join(" and ")} ${runFlags.length === 1 ? "is" : "are"} passed to each task's run (<config> only); after --, give your command its own flags`);
      code = await (await import("./launch.js")).launchProgram(taskCommand, opts, options, io);
    });

  const manifest = program
    .command("manifest")
    .description("Print the manifests that run a job as a cluster elsewhere (kubernetes).")
    .showHelpAfterError(false)
    .exitOverride();
  manifest
    .command("kubernetes")
    .description(
      "Print the YAML that `kubectl apply -f -` takes to run <config> (or, after --, any <command>) as <n> pods: a JobSet (default) or an indexed Job with a headless Service, the configuration as a ConfigMap. Secrets are named, never read or made.",
    )
    .usage("<config> --workers <n> --image <image> [options]\n       monitored-session manifest kubernetes --workers <n> --image <image> [options] -- <command> [args...]")
    .argument("[config]", "the configuration file every pod runs with `run` (or, instead, -- <command> [args...])")
    .requiredOption("--workers <n>", "pods to start, the chief included", integerAtLeast(1))
    .requiredOption("--image <image>", "the container image (holding the project at --workdir)")
    .option("--name <name>", "the JobSet's (or Job's) name (default: the configuration file's name, or training)")
    .option("--namespace <ns>", "the namespace", "default")
    .addOption(new Option("--jobset", "a JobSet (default): the pods restart together").conflicts("indexedJob"))
    .addOption(new Option("--indexed-job", "an indexed Job and a headless Service, for clusters without JobSet (no gang restart)").conflicts("jobset"))
    .option("--etcd <endpoints>", "coordinate through etcd at these comma-separated URLs (default: the chief's embedded service)")
    .option("--max-restarts <k>", "counted restarts (JobSet maxRestarts; an indexed Job's backoffLimit); preemption never counts", integerAtLeast(0), 3)
    .option("--checkpoint-pvc <claim>", "an existing PersistentVolumeClaim mounted at the checkpoint directory of the chief")
    .option("--checkpoint-pvc-on-workers", "also mount the claim read-only on the workers, for a custom loop whose workers restore (the claim must be ReadWriteMany)")
    .option("--checkpoint-dir <path>", `-- <command> only: where the claim is mounted (default ${"/checkpoints/train"})`)
    .option("--cpu <quantity>", `CPU request of each pod (2, 500m; default ${DEFAULT_RESOURCES.cpu}); no CPU limit`)
    .option("--memory <quantity>", `memory request and limit of each pod (4Gi; default ${DEFAULT_RESOURCES.memory})`)
    .option("--best-effort", "request no CPU or memory (QoS class BestEffort: the first pods evicted under node pressure; a warning); not with --cpu or --memory")
    .option("--token-secret <name>", "an existing Secret whose key `token` is the cluster token, mounted as a file (without it or --tls-secret: a warning, the tasks accept any caller)")
    .option("--no-network-policy", "leave out the NetworkPolicy that admits to the pods only this job's own pods (it needs a network plugin that enforces NetworkPolicies)")
    .option("--tls-secret <name>", "an existing Secret with tls.crt, tls.key and ca.crt for the cluster's TLS")
    .option("--grace-secs <s>", "terminationGracePeriodSeconds (default: the save time with a margin, the agreement allowance and preemption.gracePeriodSecs)", integerAtLeast(1))
    .option("--save-secs <s>", "the measured save time, for the grace period (a run's `Checkpoint saved: ... ms` line; default 10)", positiveNumber)
    .option("--workdir <dir>", "the project's directory in the image", MANIFEST_DEFAULTS.workdir)
    .option("--cli <path>", "the monitored-session CLI in the image, relative to --workdir (.ts runs through tsx)", MANIFEST_DEFAULTS.cli)
    .option("--port <port>", "the port of every task's server", integerAtLeast(1), MANIFEST_DEFAULTS.port)
    .addHelpText("after", `\nExit codes: 0 the manifest was printed, ${ExitCodes.usage} bad usage (one line naming the problem). See docs/kubernetes.md.`)
    .showHelpAfterError(false)
    .exitOverride()
    .action(async (config: string | undefined, opts: ManifestFlags) => {
      code = await (await import("./manifest.js")).manifestCommand(config, taskCommand, opts, io);
    });

  addInspectCommand(program, io, (c) => {
    code = c;
  });

  program
    .command("board")
    .description("Serve TensorBoard's HTTP data API for <logdir> (every scalar point, live), on 127.0.0.1 unless --host says otherwise, until Ctrl-C.")
    .argument("<logdir>", "the directory the summaries are written to (each subdirectory with event files is a run)")
    .option("--port <n>", "port to serve on (0: a free one)", integerAtLeast(0), 6006)
    .option("--host <address>", "address to bind; any other than loopback requires a token (generated unless --token)")
    .option("--token <token>", "the token requests must carry (?token=…, or the header Authorization: Token …)")
    .option("--image-mib-per-tag <mib>", "image bytes kept per run and tag before older steps are thinned out (the first and newest always kept; said on stderr)", positiveMib, 32)
    .option("--histogram-mib-per-tag <mib>", "histogram bytes kept per run and tag (24 a bucket) before older steps are thinned out, likewise", positiveMib, 16)
    .option("--text-mib-per-tag <mib>", "text bytes kept per run and tag (UTF-8) before older steps are thinned out, likewise", positiveMib, 4)
    .addHelpText(
      "after",
      `\nPrints the URL to open (with ?token=… when a token is required). TensorBoard's routes: /data/runs, /data/environment, /data/plugins_listing, /data/plugin/scalars/tags, /data/plugin/scalars/scalars?run=&tag=[&format=csv][&resolution=<pixels>], POST /data/plugin/scalars/scalars_multirun, /data/plugin/histograms/tags, /data/plugin/histograms/histograms?run=&tag=[&limit=], /data/plugin/images/tags, /data/plugin/images/images?run=&tag=[&sample=], /data/plugin/images/individualImage?…, /data/plugin/text/tags, /data/plugin/text/text?run=&tag=. Ours: /board/events (server-sent events), /board/series, /board/chart, /board/checkpoints[?run=], /board/thinned (series thinned to their budget), /board/timelines and /board/timelines/<file> (ProfilerHook's timelines, as downloads), /board/goodput[?run=] (where each run's time went, docs/goodput.md). See docs/tensorboard.md.\n\nExit codes: 0 stopped by SIGINT or SIGTERM, 2 bad usage (no such logdir, the port is in use).`,
    )
    .exitOverride()
    .action(async (logdir: string, opts: { port: number; host?: string; token?: string; imageMibPerTag: number; histogramMibPerTag: number; textMibPerTag: number }) => {
      code = await (await import("./board.js")).boardCommand(logdir, opts, io);
    });

  program
    .command("goodput")
    .description("Print where the time of the run logging to <logdir> went, across every restart of every task: productive step time and each badput bucket (from its goodput logs).")
    .argument("<logdir>", "the run's log directory (summaries.dir, else checkpoint.dir), whose goodput/ folder `run` writes")
    .option("--json", "one JSON document instead of the table")
    .addHelpText("after", "\nThe figures are defined in docs/goodput.md.\n\nExit codes: 0 printed, 2 bad usage (no such logdir, no goodput logs, an unreadable log).")
    .exitOverride()
    .action(async (logdir: string, opts: { json?: boolean }) => {
      code = (await import("./goodput.js")).goodputCommand(logdir, opts, io);
    });

  if (argv.length === 0) {
    // No command: the usage, on stderr, as a usage error (commander would report it as help).
    program.outputHelp({ error: true });
    return ExitCodes.usage;
  }
  if (argv.length === 1 && argv[0] === "manifest") {
    // `manifest` without its platform: the same.
    manifest.outputHelp({ error: true });
    return ExitCodes.usage;
  }
  try {
    await program.parseAsync([...ownArgv], { from: "user" });
  } catch (e) {
    if (e instanceof CommanderError) {
      if (e.code === "commander.helpDisplayed" || e.code === "commander.version" || e.code === "commander.help") return ExitCodes.done;
      if (launchError !== undefined) usageErr.write(commandWithoutDashDash(e, ownArgv, launch.args) ?? launchError);
      return ExitCodes.usage;
    }
    throw e;
  }
  return code;
};

/**
 * The line for `launch --workers 3 node train.js` (without `--`): an operand too many, or an
 * option of launch's own that commander does not know (`node --import tsx …`) after an operand,
 * or one of Node's flags where the command should start (`--import tsx train.ts`, with no
 * program). `undefined` for any other usage error (a misspelt option before the operands keeps
 * commander's line, with its "did you mean").
 */
const commandWithoutDashDash = (e: CommanderError, argv: readonly string[], operands: readonly string[]): string | undefined => {
  // Commander's operands of launch: its own operands, then from the first unknown option on, everything.
  const firstOption = operands.findIndex((a) => a.length > 1 && a.startsWith("-"));
  const before = firstOption < 0 ? operands.length : firstOption;
  // `launch --workers 3 --import tsx train.ts`: a Node flag with no command word before it.
  const nodeFlagFirst = e.code === "commander.unknownOption" && firstOption === 0 && isNodeFlag(operands[0] as string);
  if (!(nodeFlagFirst || e.code === "commander.excessArguments" || (e.code === "commander.unknownOption" && before > 0))) return undefined;
  // The launch flags stay before `--`: argv without the operands, matched from the end (they follow
  // any flag value equal to one of them).
  const flags = [...argv.slice(1)];
  for (let i = flags.length - 1, j = operands.length - 1; i >= 0 && j >= 0; i--) {
    if (flags[i] === operands[j]) {
      flags.splice(i, 1);
      j--;
    }
  }
  return nodeFlagFirst
    ? `monitored-session launch: unknown option '${operands[0] as string}', a flag of Node's: the command to run on each task goes after --, with its program first: monitored-session launch ${[...flags, "--", "node", ...operands].join(" ")}\n`
    : `monitored-session launch: a command to run on each task goes after --: monitored-session launch ${[...flags, "--", ...operands].join(" ")}\n`;
};

/** Whether `arg` (`--import`, `--require=x`, `-r`) is one of Node's own command-line flags. */
const isNodeFlag = (arg: string): boolean => process.allowedNodeEnvironmentFlags.has(arg.split("=")[0] as string);

/**
 * Whether `launch <config>` keeps standby processes: as `--standby`/`--no-standby` say
 * (`given`), and by default whenever the group can restart (`--max-restarts` above 0, or a
 * chaos schedule): a restart is then mostly the loading of modules a standby has done already.
 */
export const standbyOf = (given: boolean | undefined, maxRestarts: number, chaos: boolean): boolean => given ?? (maxRestarts > 0 || chaos);

/** The options of `launch`, as commander gives them. */
interface LaunchFlags extends ClusterFlags {
  readonly workers: number;
  readonly maxRestarts: number;
  readonly killAfter: number;
  readonly verbose?: boolean;
  readonly logLevel?: string;
  readonly logFormat: LogFormat;
  readonly chaos?: string;
  readonly chaosReport: string;
  readonly standby?: boolean;
}

/** A commander parser of integers >= `min`. */
const integerAtLeast =
  (min: number) =>
  (value: string): number => {
    const n = Number(value);
    if (!/^\s*[+-]?\d+\s*$/.test(value) || !Number.isSafeInteger(n) || n < min) throw new InvalidArgumentError(`expected an integer >= ${min}`);
    return n;
  };

/** A commander parser of a positive number of MiB. */
const positiveMib = (value: string): number => {
  const n = Number(value);
  if (value.trim() === "" || !(n > 0) || !Number.isFinite(n)) throw new InvalidArgumentError("expected a positive number of MiB");
  return n;
};

/** A commander parser of positive numbers. */
const positiveNumber = (value: string): number => {
  const n = Number(value);
  if (value.trim() === "" || !(n > 0) || !Number.isFinite(n)) throw new InvalidArgumentError("expected a positive number of seconds");
  return n;
};
