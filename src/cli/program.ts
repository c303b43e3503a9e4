/**
 * The `monitored-session` command line: `run <config>`, `launch --workers N <config>` and
 * `inspect <checkpointDir>`, built with commander. Usage errors exit 2; see {@link ExitCodes}.
 *
 * @module
 */

import { Command, CommanderError, InvalidArgumentError, Option } from "commander";

import { ExitCodes, exitCodesHelp } from "./exitCodes.js";
import { inspectCommand } from "./inspect.js";
import { launchCommand } from "./launch.js";
import { runCommand, type CliIo } from "./run.js";

/** Parses `argv` (without `node` and the script) and runs the command; resolves with the exit code. */
export const main = async (argv: readonly string[], io: CliIo): Promise<number> => {
  let code: number = ExitCodes.done;
  const program = new Command("monitored-session")
    .description("Run a training job described by a configuration file, launch it as a local cluster, and inspect its checkpoints.")
    .exitOverride()
    .configureOutput({ writeOut: (s) => io.out.write(s), writeErr: (s) => io.err.write(s) })
    .showHelpAfterError("(run with --help for usage)")
    .addHelpText("after", `\n${exitCodesHelp}\n\nConfiguration reference: docs/configuration.md`);

  program
    .command("run")
    .description("Train: load <config> (JSON or YAML), import its module, run until a hook stops the session.")
    .argument("<config>", "the configuration file (.json, .yaml or .yml)")
    .option("--no-progress", "plain log lines even on a terminal")
    .option("--verbose", "print the stack trace of a failure (default: one line naming the problem and the fix)")
    .addOption(new Option("--log-level <level>", "library log messages at or above this level").choices(["debug", "info", "warn", "error"]).default("info"))
    .addHelpText(
      "after",
      `\nOn a terminal a progress bar shows the step, steps/sec, loss (from a "loss" fetch) and ETA (when the last step is known); in a pipe or with CI=true, plain lines.\n\nBefore anything is written, the file, its plugins, the module, the output directories and every fetch and tensor name are checked. A TypeScript module (.ts, .mts, .cts) is loaded through tsx when the project has it (npm i -D tsx).\n\n${exitCodesHelp}`,
    )
    .exitOverride()
    .action(async (config: string, opts: { progress: boolean; verbose?: boolean; logLevel: "debug" | "info" | "warn" | "error" }) => {
      code = await runCommand(config, { progress: opts.progress, logLevel: opts.logLevel, verbose: opts.verbose === true }, io);
    });

  program
    .command("launch")
    .description("Start a local cluster on loopback: <n> processes (the chief and n-1 workers), each running `run <config>` with its TF_CONFIG.")
    .argument("<config>", "the configuration file every task runs")
    .requiredOption("--workers <n>", "processes to start, the chief included", integerAtLeast(1))
    .option("--max-restarts <k>", "restart the whole group after a failure, at most k times (a preemption, exit 42, does not count)", integerAtLeast(0), 0)
    .option("--kill-after <secs>", "seconds between the SIGTERM that stops a task and its SIGKILL", positiveNumber, 30)
    .option("--verbose", "passed to each task's run")
    .addOption(new Option("--log-level <level>", "passed to each task's run").choices(["debug", "info", "warn", "error"]))
    .addHelpText(
      "after",
      `\nEach task's lines are prefixed with its name ([chief:0], [worker:1], ...). When a task fails the others get SIGTERM, then SIGKILL after --kill-after seconds; when one is preempted (exits ${ExitCodes.preempted}) the others stop on its notice, and get SIGTERM only if still running --kill-after seconds later. SIGINT, SIGTERM and SIGHUP are forwarded to every task. See docs/distributed.md.\n\nExit codes: 0 every task exited 0; ${ExitCodes.preempted} a task was preempted (exited ${ExitCodes.preempted}) before any other failed; otherwise the first other non-zero exit code of a task (after --max-restarts restarts); ${ExitCodes.usage} bad usage.`,
    )
    .showHelpAfterError(false)
    .exitOverride()
    .action(async (config: string, opts: { workers: number; maxRestarts: number; killAfter: number; verbose?: boolean; logLevel?: string }) => {
      const runArgs = [...(opts.verbose === true ? ["--verbose"] : []), ...(opts.logLevel === undefined ? [] : ["--log-level", opts.logLevel])];
      code = await launchCommand(config, { workers: opts.workers, maxRestarts: opts.maxRestarts, killAfterSecs: opts.killAfter, runArgs }, io);
    });

  program
    .command("inspect")
    .description("List the checkpoints of <checkpointDir> with their steps, sizes and checksum status.")
    .argument("<checkpointDir>", "a checkpoint directory")
    .option("--json", "print JSON")
    .addHelpText("after", `\nExit codes: 0 every checkpoint verified, 1 one failed verification or the state file is bad, 2 bad usage (no such directory).`)
    .exitOverride()
    .action(async (dir: string, opts: { json?: boolean }) => {
      code = await inspectCommand(dir, opts.json === true ? { json: true } : {}, io);
    });

  if (argv.length === 0) {
    // No command: the usage, on stderr, as a usage error (commander would report it as help).
    program.outputHelp({ error: true });
    return ExitCodes.usage;
  }
  try {
    await program.parseAsync([...argv], { from: "user" });
  } catch (e) {
    if (e instanceof CommanderError) {
      if (e.code === "commander.helpDisplayed" || e.code === "commander.version" || e.code === "commander.help") return ExitCodes.done;
      return ExitCodes.usage;
    }
    throw e;
  }
  return code;
};

/** A commander parser of integers >= `min`. */
const integerAtLeast =
  (min: number) =>
  (value: string): number => {
    const n = Number(value);
    if (!/^\s*[+-]?\d+\s*$/.test(value) || !Number.isSafeInteger(n) || n < min) throw new InvalidArgumentError(`expected an integer >= ${min}`);
    return n;
  };

/** A commander parser of positive numbers. */
const positiveNumber = (value: string): number => {
  const n = Number(value);
  if (value.trim() === "" || !(n > 0) || !Number.isFinite(n)) throw new InvalidArgumentError("expected a positive number of seconds");
  return n;
};
