/**
 * Importing the modules a configuration names (`module`, `plugins`): JavaScript, or TypeScript
 * through tsx when it is installed (Node 20 cannot strip types by itself). Every failure is one
 * line naming the file and the fix; a problem with the file itself (not JavaScript, a syntax
 * error, an import that cannot be found) is a usage error (exit 2), an error thrown by the
 * module's own top-level code is a failure (exit 1).
 *
 * @module
 */

import { left, right, type Either } from "fp-ts/lib/Either.js";
import { existsSync, readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, extname, isAbsolute, join, resolve, sep } from "node:path";
import { pathToFileURL } from "node:url";

import { ExitCodes } from "../runtime/exitCodes.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Why a module could not be imported: the exit code, one line, and the error (for `--verbose`). */
export interface ModuleFailure {
  readonly code: typeof ExitCodes.usage | typeof ExitCodes.failure;
  readonly message: string;
  readonly cause?: unknown;
}

/** Extensions Node imports as JavaScript. */
const JS_EXTENSIONS = [".js", ".mjs", ".cjs"] as const;
/** Extensions imported as TypeScript (through tsx). */
const TS_EXTENSIONS = [".ts", ".mts", ".cts"] as const;

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Imports the module `specifier` names for the configuration key `key` (`module`,
 * `plugins[0]`): a path relative to `baseDir`, or (when `packages` is true) a package name
 * resolved from `baseDir`. Resolves with its namespace.
 */
export const importModule = async (
  specifier: string,
  key: string,
  baseDir: string,
  options: { readonly packages?: boolean } = {},
): Promise<Either<ModuleFailure, unknown>> => {
  const usage = (message: string, cause?: unknown): Either<ModuleFailure, never> => left({ code: ExitCodes.usage, message: `${key}: ${message}`, cause });
  const isPath = specifier.startsWith(".") || isAbsolute(specifier);
  let file: string;
  if (isPath || options.packages !== true) {
    file = isAbsolute(specifier) ? specifier : resolve(baseDir, specifier);
    if (!existsSync(file)) return usage(`${file} does not exist`);
    if (statSync(file).isDirectory()) return usage(`${file} is a directory; name the module file (e.g. ${join(specifier, "index.js")})`);
  } else {
    try {
      file = createRequire(join(baseDir, "noop.js")).resolve(specifier);
    } catch (e) {
      return usage(`cannot find the package "${specifier}" from ${baseDir} (install it, or give a path starting with ./)`, e);
    }
  }
  const ext = extname(file).toLowerCase();
  const isTs = (TS_EXTENSIONS as readonly string[]).includes(ext);
  if (!isTs && !(JS_EXTENSIONS as readonly string[]).includes(ext)) {
    return usage(`${file} is not JavaScript or TypeScript (expected ${[...JS_EXTENSIONS, ...TS_EXTENSIONS].join(", ")})`);
  }
  if (isTs) {
    const loader = await enableTypeScript();
    if (loader !== undefined) {
      return usage(
        `${file} is TypeScript, which Node ${process.versions.node} cannot import by itself: install tsx in the project (npm i -D tsx) and run again, or run with node --import tsx, or compile the module to JavaScript`,
        loader,
      );
    }
  }
  try {
    return right(await import(pathToFileURL(file).href));
  } catch (e) {
    return left(classify(e, key, file));
  }
};

/** The first line of an error's message. */
export const firstLine = (e: unknown): string => (e instanceof Error ? e.message : String(e)).split("\n")[0] ?? "";

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

let typeScript: Promise<unknown> | undefined;

/**
 * Makes `.ts` imports work: nothing when a TypeScript loader is active already (`node --import
 * tsx`, the `tsx` command); else registers tsx (as `--import tsx` would), resolved from this
 * package's location, i.e. the project that installed it. Resolves with the error when tsx is
 * not installed, else `undefined`.
 */
const enableTypeScript = (): Promise<unknown> => {
  typeScript ??= (async () => {
    const flags = [...process.execArgv, process.env["NODE_OPTIONS"] ?? ""].join(" ");
    if (/\btsx\b|ts-node|--experimental-strip-types|--experimental-transform-types/.test(flags)) return undefined;
    try {
      await import("tsx" as string);
      return undefined;
    } catch (e) {
      return e;
    }
  })();
  return typeScript;
};

const USAGE_CODES = new Set([
  "ERR_UNKNOWN_FILE_EXTENSION",
  "ERR_MODULE_NOT_FOUND",
  "ERR_PACKAGE_PATH_NOT_EXPORTED",
  "ERR_UNSUPPORTED_DIR_IMPORT",
  "ERR_REQUIRE_ESM",
  "ERR_INVALID_PACKAGE_CONFIG",
  "MODULE_NOT_FOUND",
]);

/** A failed import: the file's problem (exit 2), or its top-level code threw (exit 1). */
const classify = (e: unknown, key: string, file: string): ModuleFailure => {
  const code = (e as { code?: unknown } | null)?.code;
  if (e instanceof SyntaxError) {
    return { code: ExitCodes.usage, message: `${key}: ${file} is not valid JavaScript or TypeScript: ${firstLine(e)}`, cause: e };
  }
  if (typeof code === "string" && USAGE_CODES.has(code)) {
    return { code: ExitCodes.usage, message: `${key}: importing ${file} failed: ${firstLine(e)} (${code})${unbuiltSelfReference(e, file)}`, cause: e };
  }
  // tsx reports TypeScript syntax errors as "Transform failed with N error(s)".
  if (e instanceof Error && /^Transform failed/.test(e.message)) {
    return { code: ExitCodes.usage, message: `${key}: ${file} is not valid TypeScript: ${e.message.split("\n").slice(0, 2).join(" ")}`, cause: e };
  }
  return { code: ExitCodes.failure, message: `${key}: importing ${file} failed: the module threw ${e instanceof Error ? `${e.name}: ${firstLine(e)}` : String(e)}`, cause: e };
};

/** The `exports` condition that resolves "monitored-session" to its sources (package.json; `npm run cli` sets it). */
const SOURCE_CONDITION = "monitored-session-source";

/**
 * The fix for a module inside a clone of this repository that imports the package by its name,
 * when that name resolved to dist/ (package.json `exports`), which exists only after a build:
 * run the command with the condition that resolves the name to src/, as `npm run cli` does.
 * Empty for any other missing module.
 */
const unbuiltSelfReference = (e: unknown, file: string): string => {
  const missing = /Cannot find module '([^']+)'/.exec(firstLine(e))?.[1];
  const root = missing === undefined ? undefined : ownPackageRoot(dirname(file));
  if (root === undefined || !(missing as string).startsWith(join(root, "dist") + sep)) return "";
  return `: inside this repository, run the command as npm run cli -- ... (node --conditions=${SOURCE_CONDITION} --import tsx src/cli/main.ts ...), which resolves "monitored-session" to src/ without a build`;
};

/** The directory of the package.json nearest `dir`, if that package is monitored-session itself. */
const ownPackageRoot = (dir: string): string | undefined => {
  for (let d = dir; ; d = dirname(d)) {
    const pkg = join(d, "package.json");
    if (existsSync(pkg)) {
      try {
        return (JSON.parse(readFileSync(pkg, "utf8")) as { name?: unknown }).name === "monitored-session" ? d : undefined;
      } catch {
        return undefined; // not this package's manifest
      }
    }
    if (dirname(d) === d) return undefined;
  }
};
