/**
 * The checks `monitored-session run` makes after the configuration and the job decoded and
 * before anything is created: the output directories can be created and written, and every
 * fetch, op and tensor name the configuration and the job use exists in the session (built in
 * memory for the check). Each problem is a {@link ConfigIssue}; the command prints them all and
 * exits 2.
 *
 * @module
 */

import { isLeft, isRight, left, right, type Either } from "fp-ts/lib/Either.js";
import { accessSync, constants, statSync } from "node:fs";
import { dirname, isAbsolute, resolve } from "node:path";

import {
  applyPlugins,
  checkNames,
  decodeJob,
  decodePlugin,
  formatIssue,
  HookRegistry,
  type ConfigIssue,
  type Job,
  type JobContext,
  type Plugin,
  type TrainingConfig,
} from "../config/index.js";
import { readConfig } from "../config/loadConfig.js";
import type { PartialConfig } from "../config/TrainingConfig.js";
import type { Session } from "../session/Session.js";
import { ExitCodes } from "../runtime/exitCodes.js";
import { firstLine, importModule, type ModuleFailure } from "./loadModule.js";
import { applyTfjsBackend } from "./tfjsBackend.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A configuration and its job that passed every check: training may create things now. */
export interface PreparedRun {
  readonly config: TrainingConfig;
  readonly file: string;
  readonly baseDir: string;
  readonly job: Job;
  /** The built-in hook types and the plugins'. */
  readonly registry: HookRegistry;
  /** What `tfjs.backend` selected ("TensorFlow.js backend: wasm (1 thread)."), if the config has a tfjs section. */
  readonly backendNote?: string;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Prints the problems of a configuration: one line for one problem, else a header naming the file and one line each. */
export const printIssues = (err: NodeJS.WritableStream, file: string, issues: readonly ConfigIssue[]): void => {
  if (issues.length === 1) {
    err.write(`${file}: ${formatIssue(issues[0] as ConfigIssue)}\n`);
    return;
  }
  err.write(`${file}: ${issues.length} problems:\n`);
  for (const i of issues) err.write(`  ${formatIssue(i)}\n`);
};

/**
 * Everything `run` checks before it creates anything: the file (syntax, YAML alias bombs, every
 * decoding problem), its `plugins`, the `module` and its job, the output directories, and the
 * names used against the session. Prints the problems and resolves with the exit code, or
 * resolves with the prepared run. With `verbose`, import failures print their stack.
 *
 * Past the file's syntax and its plugins, one pass finds every problem: a part of the file that
 * decoded is checked even when another did not (a misspelled tensor name is reported beside a
 * type error), each problem of the file with its line and column.
 */
export const prepareRun = async (
  configPath: string,
  err: NodeJS.WritableStream,
  verbose: boolean,
  /** A cluster's worker (from TF_CONFIG): it never writes `checkpoint.dir` or `summaries.dir`, so they are not checked. */
  worker = false,
  /** What the job module's default export, if a function, receives (from the configuration, as far as it decoded). */
  contextOf: (config: PartialConfig) => JobContext = () => ({}),
  /** More problems of the file the caller knows of (`isChief` or `master` given with TF_CONFIG), from what decoded and the file's directory. */
  moreIssues: (config: PartialConfig, baseDir: string) => readonly ConfigIssue[] = () => [],
): Promise<Either<number, PreparedRun>> => {
  const printStack = (cause: unknown): void => {
    if (verbose && cause instanceof Error && cause.stack !== undefined) err.write(`${cause.stack}\n`);
  };
  let registry = HookRegistry.withBuiltins();
  let pluginFailure: ModuleFailure | undefined;
  const read = await readConfig(configPath, (plugins, baseDir) => async () => {
    const issues: ConfigIssue[] = [];
    const loadedPlugins: [string, Plugin][] = [];
    for (const [i, p] of plugins.entries()) {
      const key = `plugins[${i}]`;
      const ns = await importModule(p, key, baseDir, { packages: true });
      if (isLeft(ns)) {
        if (ns.left.code !== ExitCodes.usage) pluginFailure ??= ns.left;
        issues.push({ path: key, message: ns.left.message.slice(key.length + 2) });
        continue;
      }
      const plugin = decodePlugin(ns.right, key);
      if (isLeft(plugin)) issues.push(...plugin.left);
      else loadedPlugins.push([key, plugin.right]);
    }
    if (issues.length > 0) return left(issues);
    const applied = await applyPlugins(registry, loadedPlugins)();
    if (isLeft(applied)) return applied;
    registry = applied.right;
    return right(registry);
  })();
  if (pluginFailure !== undefined) {
    err.write(`${configPath}: ${pluginFailure.message}\n`);
    printStack(pluginFailure.cause);
    return left(pluginFailure.code);
  }
  // Nothing to decode (unreadable, a syntax error) or no registry for the hooks (a plugin's problem).
  if (isLeft(read)) {
    printIssues(err, configPath, read.left);
    return left(ExitCodes.usage);
  }
  const { decoded, parts, locate, baseDir, file } = read.right;
  /** The file's problems, in the order found. */
  const problems: ConfigIssue[] = isLeft(decoded) ? [...decoded.left] : [];
  /** The module's problems (its default export), printed under its own path. */
  let jobProblems: { readonly file: string; readonly issues: readonly ConfigIssue[] } | undefined;
  /** A failure of user code (the module's top level, a session factory): exit 1 when the file has no problem. */
  let failure: ModuleFailure | undefined;
  /** The errors behind the module's problem, for `--verbose`. */
  let moduleCause: unknown;

  problems.push(...moreIssues(parts, baseDir).map(locate));
  problems.push(...checkOutputDirs(outputDirsOf(parts, baseDir).filter(([key]) => !(worker && (key === "checkpoint.dir" || key === "summaries.dir")))).map(locate));

  // Before the import: the module may build its model at load time (src/cli/tfjsBackend.ts).
  const backend = await applyTfjsBackend(parts);
  if (backend !== undefined && "issue" in backend) problems.push(locate(backend.issue));
  // Without the backend the file asks for, the module is not imported: it would build its model
  // on another one, and its own failures would follow from the same missing package.
  const backendFailed = (backend !== undefined && "issue" in backend) || (isLeft(decoded) && decoded.left.some((i) => i.path === "tfjs" || i.path.startsWith("tfjs.")));

  let job: Job | undefined;
  if (parts.module !== undefined && !backendFailed) {
    const namespace = await importModule(parts.module, "module", baseDir);
    if (isLeft(namespace)) {
      if (namespace.left.code === ExitCodes.usage) {
        problems.push(locate({ path: "module", message: namespace.left.message.slice("module: ".length) }));
        moduleCause = namespace.left.cause;
      } else failure = namespace.left;
    } else {
      const decodedJob = await decodeJob(namespace.right, contextOf(parts));
      if (isLeft(decodedJob)) jobProblems = { file: isAbsolute(parts.module) ? parts.module : resolve(baseDir, parts.module), issues: decodedJob.left };
      else job = decodedJob.right;
    }
  }

  if (job !== undefined) {
    const names = await checkSessionNames(parts, job, registry);
    if ("failure" in names) failure = { code: ExitCodes.failure, message: names.failure, cause: names.cause };
    // The job's own names (`default.fetches`) are in the module, not in the file.
    else problems.push(...names.issues.map((i) => (i.path.startsWith("hooks[") ? locate(i) : i)));
  }

  if (problems.length === 0 && jobProblems === undefined && failure === undefined && isRight(decoded) && job !== undefined) {
    return right({ config: decoded.right, file, baseDir, job, registry, ...(backend === undefined || "issue" in backend ? {} : { backendNote: backend.note }) });
  }
  // The file as the user named it, as for a file that does not decode at all.
  if (problems.length > 0) printIssues(err, configPath, problems);
  if (jobProblems !== undefined) printIssues(err, jobProblems.file, jobProblems.issues);
  printStack(moduleCause);
  if (failure !== undefined) {
    err.write(`${configPath}: ${failure.message}\n`);
    printStack(failure.cause);
  }
  // A bad file or job is a usage error even when user code also failed: both are printed.
  return left(problems.length > 0 || jobProblems !== undefined || failure === undefined ? ExitCodes.usage : failure.code);
};

/**
 * The directories a configuration writes to, with their keys: `checkpoint.dir`, `summaries.dir`,
 * and hooks' `outputDir` and `checkpointDir` (absolute).
 */
const outputDirsOf = (config: PartialConfig, baseDir: string): [key: string, dir: string][] => {
  const abs = (p: string): string => (isAbsolute(p) ? p : resolve(baseDir, p));
  const dirs: [string, string][] = [];
  if (config.checkpoint !== undefined) dirs.push(["checkpoint.dir", abs(config.checkpoint.dir)]);
  if (config.summaries?.dir !== undefined) dirs.push(["summaries.dir", abs(config.summaries.dir)]);
  (config.hooks ?? []).forEach((h, i) => {
    for (const key of ["outputDir", "checkpointDir"]) {
      const v = h?.[key];
      if (typeof v === "string" && v.length > 0) dirs.push([`hooks[${i}].${key}`, abs(v)]);
    }
  });
  return dirs;
};

/**
 * Problems of directories that will be created or written: an existing file in the way, or a
 * directory (the nearest existing one, for a directory still to be created) the process cannot
 * write to.
 */
const checkOutputDirs = (dirs: readonly (readonly [key: string, dir: string])[]): ConfigIssue[] =>
  dirs.flatMap(([key, dir]): ConfigIssue[] => {
    let existing = dir;
    for (;;) {
      const st = statOrUndefined(existing);
      if (st !== undefined) {
        if (!st.isDirectory()) {
          return [
            existing === dir
              ? { path: key, message: `${dir} is an existing file, not a directory: choose another directory, or move the file away` }
              : { path: key, message: `${existing} is a file, so ${dir} cannot be created: choose another directory, or move the file away` },
          ];
        }
        break;
      }
      const parent = dirname(existing);
      if (parent === existing) break;
      existing = parent;
    }
    try {
      // An existing output directory is also read (the latest checkpoint is restored from it).
      accessSync(existing, constants.W_OK | constants.X_OK | (existing === dir ? constants.R_OK : 0));
      return [];
    } catch {
      const uid = typeof process.getuid === "function" ? ` by uid ${process.getuid()}` : "";
      return [
        {
          path: key,
          message: `${existing} is not ${existing === dir ? "readable and writable" : "writable"}${uid}${existing === dir ? "" : `, so ${dir} cannot be created there`}: choose a directory you can write to, or fix its permissions (chmod/chown)`,
        },
      ];
    }
  });

/**
 * Builds the job's session in memory (its `sessionFactory`, or a session on its graph), lists
 * its names and checks the configuration's and job's names against them. A session without
 * `names()` is not checked. Resolves with the problems, or `{ failure }` when the factory threw.
 */
const checkSessionNames = async (
  config: PartialConfig,
  job: Job,
  registry: HookRegistry = HookRegistry.builtins,
): Promise<{ readonly issues: ConfigIssue[] } | { readonly failure: string; readonly cause: unknown }> => {
  let session: Session | undefined;
  try {
    session = job.sessionFactory !== undefined ? await job.sessionFactory() : (job.graph ?? job.scaffold?.graph)?.session();
  } catch (e) {
    return { failure: `default.sessionFactory: making the session (to check its names) failed: ${firstLine(e)}`, cause: e };
  }
  try {
    if (session?.names === undefined) return { issues: [] };
    const known = session.names();
    try {
      return { issues: checkNames(config, job, known, registry) };
    } catch (e) {
      // A plugin's `names` is user code.
      return { failure: `hooks: listing the names a hook type uses failed: ${firstLine(e)}`, cause: e };
    }
  } finally {
    await session?.close?.();
  }
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const statOrUndefined = (p: string): ReturnType<typeof statSync> | undefined => {
  try {
    return statSync(p);
  } catch {
    return undefined; // absent (or unreachable): look at the parent
  }
};
