/**
 * `loadConfig`: reads a configuration file (JSON or YAML, by extension, else by content),
 * reports syntax errors with their line and column, and decodes it, locating each problem in
 * the file. It only reads: nothing is created on disk. `readConfig` reads a file as far as it
 * decodes, for `run`, which checks what decoded (directories, the module, names) in the same pass
 * and places those problems in the file too.
 *
 * @example
 * ```ts
 * import { isLeft } from "fp-ts/lib/Either.js";
 * import { formatIssue, loadConfig } from "monitored-session/config";
 *
 * const r = await loadConfig("train.yaml")();
 * if (isLeft(r)) { r.left.forEach((i) => console.error(formatIssue(i))); process.exit(2); }
 * const { config, baseDir } = r.right;
 * ```
 *
 * @module
 */

import * as E from "fp-ts/lib/Either.js";
import { left, right, type Either } from "fp-ts/lib/Either.js";
import { pipe } from "fp-ts/lib/function.js";
import * as TE from "fp-ts/lib/TaskEither.js";
import type { TaskEither } from "fp-ts/lib/TaskEither.js";
import { readFile } from "node:fs/promises";
import { dirname, extname, resolve } from "node:path";
import { isNode, LineCounter, parseDocument, type Document } from "yaml";

import { HookRegistry } from "./HookRegistry.js";
import type { Issue } from "../codec.js";
import { decodeConfig, decodeConfigParts, type PartialConfig, type TrainingConfig } from "./TrainingConfig.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A decoded configuration file. */
export interface LoadedConfig {
  readonly config: TrainingConfig;
  /** The file's absolute path. */
  readonly file: string;
  /** The directory relative paths of the file are resolved against. */
  readonly baseDir: string;
  readonly format: "json" | "yaml";
}

/** A configuration file read as far as it decodes: see {@link readConfig}. */
export interface ReadConfig {
  /** The file's absolute path. */
  readonly file: string;
  /** The directory relative paths of the file are resolved against. */
  readonly baseDir: string;
  readonly format: "json" | "yaml";
  /** The decoded configuration, or every decoding problem, located in the file. */
  readonly decoded: Either<Issue[], TrainingConfig>;
  /** What decoded on its own (see `decodeConfigParts`), for the checks that follow. */
  readonly parts: PartialConfig;
  /** Adds the line and column of the value at a later problem's path (a name, a directory), where the file has it. */
  readonly locate: (issue: Issue) => Issue;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Makes the hook registry for a configuration from its `plugins` (as written, before decoding;
 * `[]` when absent or malformed, which decoding then reports) and the file's directory.
 * `Left` lists the plugins' problems. See `loadConfig`.
 */
export type RegistryFor = (plugins: readonly string[], baseDir: string) => TaskEither<Issue[], HookRegistry>;

/**
 * Reads and decodes the configuration file at `path`. `Left` lists every problem: a read
 * failure, syntax errors (with line and column), or every decoding problem (with its path and,
 * where the file has the value, its line and column). Hooks are decoded with `registry`, or with
 * the registry `registry(plugins, baseDir)` makes from the file's `plugins`. Nothing happens
 * until the task runs.
 */
export const loadConfig = (path: string, registry: HookRegistry | RegistryFor = HookRegistry.builtins): TaskEither<Issue[], LoadedConfig> =>
  pipe(
    readConfig(path, registry),
    TE.chainEitherK(({ decoded, format, file, baseDir }) => pipe(decoded, E.map((config): LoadedConfig => ({ config, format, file, baseDir })))),
  );

/**
 * Reads the configuration file at `path` as far as it decodes, for a caller that checks more
 * than the file (`run` checks the directories, the module and the names too, and reports every
 * problem at once). `Left` only when there is nothing to decode: a read failure, syntax errors,
 * or the problems of `registry`'s plugins. Used by {@link loadConfig}.
 */
export const readConfig = (path: string, registry: HookRegistry | RegistryFor = HookRegistry.builtins): TaskEither<Issue[], ReadConfig> => {
  const file = resolve(path);
  const baseDir = dirname(file);
  return pipe(
    readText(file),
    TE.chainEitherK((text) => {
      const format = formatOf(file, text);
      return pipe(
        parseText(text, format),
        E.map((parsed) => ({ parsed, format })),
      );
    }),
    TE.chain(({ parsed, format }) =>
      pipe(
        registry instanceof HookRegistry ? TE.right(registry) : registry(pluginsOf(parsed.value), baseDir),
        TE.map(
          (reg): ReadConfig => ({
            file,
            baseDir,
            format,
            decoded: decodeParsed(parsed, reg),
            parts: decodeConfigParts(parsed.value === undefined ? null : parsed.value, reg),
            locate: (issue) => locate(issue, parsed.doc, parsed.lineCounter),
          }),
        ),
      ),
    ),
  );
};

/**
 * Parses and decodes configuration text in `format` (default: guessed from the content, JSON
 * if it starts with `{`). Used by {@link loadConfig}.
 */
export const parseConfigText = (
  text: string,
  format: "json" | "yaml" = guessFormat(text),
  registry: HookRegistry = HookRegistry.builtins,
): Either<Issue[], { config: TrainingConfig; format: "json" | "yaml" }> => {
  return pipe(
    parseText(text, format),
    E.chain((parsed) => decodeParsed(parsed, registry)),
    E.map((config) => ({ config, format })),
  );
};

/** YAML aliases a file may expand: more is an "alias bomb" (billion laughs), refused cleanly. */
export const MAX_ALIAS_COUNT = 100;

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** The text of `file`; a missing or unreadable file is one problem at `(file)`. */
const readText = (file: string): TaskEither<Issue[], string> =>
  TE.tryCatch(
    () => readFile(file, "utf8"),
    (e): Issue[] => [
      {
        path: "(file)",
        message: (e as NodeJS.ErrnoException).code === "ENOENT" ? `${file} does not exist` : `cannot read ${file}: ${(e as Error).message}`,
      },
    ],
  );

interface Parsed {
  readonly value: unknown;
  /** For locating decode problems (absent when the text cannot be located). */
  readonly doc: Document | undefined;
  readonly lineCounter: LineCounter;
}

const parseText = (text: string, format: "json" | "yaml"): Either<Issue[], Parsed> => {
  const lineCounter = new LineCounter();
  if (format === "json") {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (e) {
      return left([jsonSyntaxIssue(text, e as Error)]);
    }
    // Only for locating decode problems: JSON is YAML, so the YAML parser gives node offsets.
    const d = parseDocument(text, { lineCounter, uniqueKeys: false });
    return right({ value, doc: d.errors.length === 0 ? d : undefined, lineCounter });
  }
  const d = parseDocument(text, { lineCounter, prettyErrors: true });
  if (d.errors.length > 0) {
    return left(
      d.errors.map((e) => {
        const pos = e.linePos?.[0];
        return {
          path: "(file)",
          message: `YAML syntax error: ${(e.message.split("\n")[0] ?? e.code).replace(/ at line \d+, column \d+:?$/, "")}`,
          ...(pos === undefined ? {} : { line: pos.line, column: pos.col }),
        };
      }),
    );
  }
  try {
    return right({ value: d.toJS({ maxAliasCount: MAX_ALIAS_COUNT }), doc: d, lineCounter });
  } catch (e) {
    // The yaml package throws a ReferenceError for too many alias expansions.
    if (e instanceof ReferenceError && /alias/i.test(e.message)) {
      return left([
        {
          path: "(file)",
          message: `YAML aliases expand too much (more than ${MAX_ALIAS_COUNT} alias uses, as in an "alias bomb"): write the values out, or use fewer aliases`,
        },
      ]);
    }
    throw e;
  }
};

const decodeParsed = (p: Parsed, registry: HookRegistry): Either<Issue[], TrainingConfig> => {
  const decoded = decodeConfig(p.value === undefined ? null : p.value, registry);
  return pipe(
    decoded,
    E.mapLeft((issues) => issues.map((issue) => locate(issue, p.doc, p.lineCounter))),
  );
};

/** The `plugins` of a parsed (not yet decoded) configuration: its non-empty strings. */
const pluginsOf = (value: unknown): string[] => {
  const p = typeof value === "object" && value !== null ? (value as { plugins?: unknown }).plugins : undefined;
  return Array.isArray(p) ? p.filter((x): x is string => typeof x === "string" && x.length > 0) : [];
};

const formatOf = (file: string, text: string): "json" | "yaml" => {
  const ext = extname(file).toLowerCase();
  if (ext === ".json") return "json";
  if (ext === ".yaml" || ext === ".yml") return "yaml";
  return guessFormat(text);
};

const guessFormat = (text: string): "json" | "yaml" => (/^\s*[{[]/.test(text) ? "json" : "yaml");

/** A JSON syntax error with its line and column (from V8's "at position N" or "line L column C"). */
const jsonSyntaxIssue = (text: string, e: Error): Issue => {
  const message = e.message.replace(/^JSON\.parse: /, "");
  const lc = /line (\d+) column (\d+)/.exec(message);
  if (lc !== null) return { path: "(file)", message: `JSON syntax error: ${message}`, line: Number(lc[1]), column: Number(lc[2]) };
  const pos = /position (\d+)/.exec(message);
  if (pos !== null) {
    const offset = Number(pos[1]);
    const before = text.slice(0, offset);
    const line = before.split("\n").length;
    const column = offset - before.lastIndexOf("\n");
    return { path: "(file)", message: `JSON syntax error: ${message}`, line, column };
  }
  if (/end of (JSON )?input/i.test(message)) {
    const lines = text.split("\n");
    return { path: "(file)", message: `JSON syntax error: ${message}`, line: lines.length, column: (lines[lines.length - 1]?.length ?? 0) + 1 };
  }
  // Node 20's V8 names no position for some errors ("Unexpected token '}', ... is not valid
  // JSON"). A prefix that ends before the bad character fails only with "end of input", so the
  // shortest prefix failing otherwise ends at it (found by bisection).
  const short = message.replace(/, (\.\.\.)?"[\s\S]*" is not valid JSON$/, "");
  const offset = firstBadOffset(text);
  if (offset === undefined) return { path: "(file)", message: `JSON syntax error: ${short}` };
  const before = text.slice(0, offset);
  return { path: "(file)", message: `JSON syntax error: ${short}`, line: before.split("\n").length, column: offset - before.lastIndexOf("\n") };
};

const failsOnlyAtEnd = (prefix: string): boolean => {
  try {
    JSON.parse(prefix);
    return true;
  } catch (e) {
    const m = (e as Error).message;
    const pos = /at position (\d+)/.exec(m);
    return /end of (JSON )?input|Unterminated string/i.test(m) || (pos !== null && Number(pos[1]) >= prefix.length);
  }
};

const firstBadOffset = (text: string): number | undefined => {
  let lo = 0; // failsOnlyAtEnd(text.slice(0, lo)) holds
  let hi = text.length; // failsOnlyAtEnd(text.slice(0, hi)) does not
  if (failsOnlyAtEnd(text)) return undefined;
  while (hi - lo > 1) {
    const mid = (lo + hi) >>> 1;
    if (failsOnlyAtEnd(text.slice(0, mid))) lo = mid;
    else hi = mid;
  }
  return hi - 1;
};

/** Adds the line and column of the value (or, for an unknown key, the key) at the issue's path. */
const locate = (issue: Issue, doc: Document | undefined, lines: LineCounter): Issue => {
  if (doc === undefined || issue.path === "(root)") return issue;
  const segments: (string | number)[] = [];
  for (const m of issue.path.matchAll(/([^.[\]]+)|\[(\d+)\]/g)) segments.push(m[2] !== undefined ? Number(m[2]) : (m[1] as string));
  let node: unknown = doc.getIn(segments, true);
  if (!isNode(node)) {
    // A missing value (a required field): point at its parent.
    node = doc.getIn(segments.slice(0, -1), true);
  }
  const range = isNode(node) ? node.range : undefined;
  if (range === undefined || range === null) return issue;
  const pos = lines.linePos(range[0]);
  return { ...issue, line: pos.line, column: pos.col };
};
