/**
 * The `checkpoint` state file: TensorFlow's `CheckpointState` proto in protobuf text format,
 * naming the latest checkpoint and the ones still managed. Files written here are read by
 * TensorFlow and vice versa.
 *
 * ```text
 * model_checkpoint_path: "ckpt-5"
 * all_model_checkpoint_paths: "ckpt-4"
 * all_model_checkpoint_paths: "ckpt-5"
 * all_model_checkpoint_timestamps: 1672531201.0
 * all_model_checkpoint_timestamps: 1672531202.0
 * last_preserved_timestamp: 1672531000.0
 * ```
 *
 * Parsing is strict (unknown fields are errors), as `text_format.Merge` is; the parsed fields
 * are then decoded with an io-ts codec. As in TensorFlow, an unreadable state file is logged
 * and treated as missing, while an empty `model_checkpoint_path` is an error.
 *
 * @module
 */

import * as E from "fp-ts/lib/Either.js";
import { isLeft, left, right, type Either } from "fp-ts/lib/Either.js";
import { pipe } from "fp-ts/lib/function.js";
import * as t from "io-ts";
import { readFile } from "node:fs/promises";
import { isAbsolute, join, relative, resolve } from "node:path";

import { ValueError, RuntimeError } from "../errors.js";
import { defaultLogger, type Logger } from "../Logger.js";
import { decodeLines, strictType } from "../codec.js";
import { indexPath } from "./BundleFormat.js";
import { assertValidPath, mkdirDurable, pathExists, resolveInside } from "./internal/files.js";
import { writeFileAtomic } from "./writeFileAtomic.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The default name of the state file inside a checkpoint directory. */
export const CHECKPOINT_STATE_FILENAME = "checkpoint";

/** TensorFlow's `CheckpointState`, with camelCase field names. Timestamps are Unix seconds. */
export interface CheckpointState {
  /** The most recent checkpoint's prefix. */
  readonly modelCheckpointPath: string;
  /** Managed checkpoints, oldest first; the last one is `modelCheckpointPath`. */
  readonly allModelCheckpointPaths: readonly string[];
  /** Save times parallel to `allModelCheckpointPaths` (Unix seconds). */
  readonly allModelCheckpointTimestamps: readonly number[];
  /** The time of the last checkpoint kept by `keepCheckpointEveryNHours` (Unix seconds). */
  readonly lastPreservedTimestamp: number;
}

/** A text-format scalar: a quoted string or a number. */
type Scalar = { readonly kind: "string"; readonly value: string } | { readonly kind: "number"; readonly value: number };

const StringScalar = new t.Type<string, string, unknown>(
  "a quoted string",
  (u): u is string => typeof u === "string",
  (u, c) => (isScalar(u) && u.kind === "string" ? t.success(u.value) : t.failure(scalarValue(u), c)),
  (a) => a,
);
const NumberScalar = new t.Type<number, number, unknown>(
  "a number",
  (u): u is number => typeof u === "number",
  (u, c) => (isScalar(u) && u.kind === "number" ? t.success(u.value) : t.failure(scalarValue(u), c)),
  (a) => a,
);
/** A singular field: text-format `Merge` keeps the last occurrence. */
const singular = <A>(codec: t.Type<A, A, unknown>) =>
  new t.Type<A | undefined, A | undefined, unknown>(
    codec.name,
    (u): u is A | undefined => u === undefined || codec.is(u),
    (u, c) => {
      if (u === undefined) return t.success(undefined);
      const all = u as readonly unknown[];
      return codec.validate(all[all.length - 1], c);
    },
    (a) => a,
  );

/** A repeated field: absent means empty. */
const repeated = <A>(codec: t.Type<A, A, unknown>) => {
  const array = t.array(codec);
  return new t.Type<A[], A[], unknown>(
    `repeated ${codec.name}`,
    (u): u is A[] => array.is(u),
    (u, c) => (u === undefined ? t.success([]) : array.validate(u, c)),
    (a) => a,
  );
};

/** The fields of a parsed state file (field name → occurrences), decoded strictly. */
const StateFieldsCodec = strictType(
  {
    model_checkpoint_path: singular(StringScalar),
    all_model_checkpoint_paths: repeated(StringScalar),
    all_model_checkpoint_timestamps: repeated(NumberScalar),
    last_preserved_timestamp: singular(NumberScalar),
  },
  "CheckpointState",
);

/** What {@link readCheckpointState} found. Paths in `state` are absolute. */
export type CheckpointStateRead =
  | { readonly status: "missing"; readonly file: string }
  | { readonly status: "invalid"; readonly file: string; readonly problems: readonly string[]; readonly unreadable: boolean }
  | { readonly status: "ok"; readonly file: string; readonly state: CheckpointState };

/** Options shared by the state-file functions. */
export interface CheckpointStateOptions {
  /** The state file's name (TensorFlow's `latest_filename`, default `checkpoint`). */
  readonly latestFilename?: string;
  /** Where "checkpoint ignored" warnings go. */
  readonly logger?: Logger;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Builds a state (TensorFlow's `generate_checkpoint_state_proto`): appends `modelPath` to the
 * list unless it is already last. Throws `ValueError` if timestamps and paths differ in length.
 */
export const generateCheckpointState = (
  modelCheckpointPath: string,
  allModelCheckpointPaths: readonly string[] = [],
  allModelCheckpointTimestamps?: readonly number[],
  lastPreservedTimestamp?: number,
): CheckpointState => {
  const paths = [...allModelCheckpointPaths];
  if (paths[paths.length - 1] !== modelCheckpointPath) paths.push(modelCheckpointPath);
  const stamps = allModelCheckpointTimestamps === undefined ? [] : [...allModelCheckpointTimestamps];
  if (stamps.length > 0 && stamps.length !== paths.length) {
    throw new ValueError(
      `Checkpoint timestamps, if provided, must match checkpoint paths (got paths ${JSON.stringify(paths)} and timestamps ${JSON.stringify(stamps)})`,
    );
  }
  return {
    modelCheckpointPath,
    allModelCheckpointPaths: paths,
    allModelCheckpointTimestamps: stamps,
    lastPreservedTimestamp: lastPreservedTimestamp ?? 0,
  };
};

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Parses the text of a state file. `Left` lists every problem (syntax, unknown fields, wrong
 * types), each with its field path. Paths are returned as written (not joined onto a dir).
 */
export const parseCheckpointState = (text: string): Either<string[], CheckpointState> => {
  return pipe(
    tokenizeFields(text),
    E.chain((fields) => decodeLines(StateFieldsCodec, fields)),
    E.map((f) => ({
      modelCheckpointPath: f.model_checkpoint_path ?? "",
      allModelCheckpointPaths: f.all_model_checkpoint_paths,
      allModelCheckpointTimestamps: f.all_model_checkpoint_timestamps,
      lastPreservedTimestamp: f.last_preserved_timestamp ?? 0,
    })),
  );
};

/**
 * Formats a state as TensorFlow's `text_format.MessageToString` does: one `field: value` per
 * line, default values omitted, strings C-escaped with non-ASCII bytes as octal, doubles in
 * Python's `repr` style (`1672531200.0`).
 */
export const formatCheckpointState = (s: CheckpointState): string => {
  const lines: string[] = [];
  if (s.modelCheckpointPath !== "") lines.push(`model_checkpoint_path: ${quote(s.modelCheckpointPath)}`);
  for (const p of s.allModelCheckpointPaths) lines.push(`all_model_checkpoint_paths: ${quote(p)}`);
  for (const ts of s.allModelCheckpointTimestamps) lines.push(`all_model_checkpoint_timestamps: ${formatDouble(ts)}`);
  if (s.lastPreservedTimestamp !== 0) lines.push(`last_preserved_timestamp: ${formatDouble(s.lastPreservedTimestamp)}`);
  return lines.map((l) => `${l}\n`).join("");
};

/**
 * Reads `<dir>/checkpoint` (TensorFlow's `get_checkpoint_state`). Resolves to `null` if the
 * file is missing, or unreadable or unparseable (logged as a warning "checkpoint ignored",
 * listing the problems). Relative paths are joined onto `dir`; a path that resolves outside
 * `dir` makes the state invalid (warning, `null`). Throws `ValueError` if
 * `model_checkpoint_path` is empty, as TensorFlow does.
 */
export const getCheckpointState = async (
  dir: string,
  options: CheckpointStateOptions = {},
): Promise<CheckpointState | null> => {
  const logger = options.logger ?? defaultLogger;
  const read = await readCheckpointState(dir, options);
  if (read.status === "ok") return read.state;
  if (read.status === "invalid") {
    logger.warn(`${read.file}: ${read.unreadable ? "cannot read the checkpoint state" : "invalid checkpoint state"}; checkpoint ignored:\n  ${read.problems.join("\n  ")}`, {
      path: read.file,
      problems: read.problems,
    });
  }
  return null;
};

/**
 * Reads `<dir>/checkpoint` and tells a missing file from an invalid one (unreadable,
 * unparseable, or naming a path outside `dir`), listing the problems. Logs nothing. Throws
 * `ValueError` if `model_checkpoint_path` is empty, as {@link getCheckpointState} does.
 */
export const readCheckpointState = async (dir: string, options: Pick<CheckpointStateOptions, "latestFilename"> = {}): Promise<CheckpointStateRead> => {
  const file = statePath(dir, options.latestFilename);
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return { status: "missing", file };
    return { status: "invalid", file, problems: [(e as Error).message], unreadable: true };
  }
  const parsed = parseCheckpointState(text);
  if (isLeft(parsed)) return { status: "invalid", file, problems: parsed.left, unreadable: false };
  const s = parsed.right;
  if (s.modelCheckpointPath === "") {
    throw new ValueError(`Invalid checkpoint state loaded from ${dir}: model_checkpoint_path is empty`);
  }
  const problems: string[] = [];
  const absolutize = (p: string, field: string): string => {
    try {
      return resolveInside(dir, p);
    } catch (e) {
      problems.push(`${field}: ${(e as Error).message}`);
      return p;
    }
  };
  const state: CheckpointState = {
    ...s,
    modelCheckpointPath: absolutize(s.modelCheckpointPath, "model_checkpoint_path"),
    allModelCheckpointPaths: s.allModelCheckpointPaths.map((p, i) => absolutize(p, `all_model_checkpoint_paths[${i}]`)),
  };
  if (problems.length > 0) return { status: "invalid", file, problems, unreadable: false };
  return { status: "ok", file, state };
};

/**
 * Writes `<dir>/checkpoint` atomically (temp + fsync + rename + fsync dir), with paths inside
 * `dir` written relative to it (TensorFlow's `save_relative_paths=True`). Throws
 * `RuntimeError` if the model path is the state file itself, `ValueError` for mismatched
 * timestamps, `InvalidArgumentError` for a path with a NUL byte.
 */
export const updateCheckpointState = async (
  dir: string,
  state: CheckpointState,
  options: Pick<CheckpointStateOptions, "latestFilename"> = {},
): Promise<void> => {
  const { file, text } = renderCheckpointState(dir, state, options);
  await mkdirDurable(dir);
  await writeFileAtomic(file, text);
};

/**
 * The state file's path and text for `state`, validated as {@link updateCheckpointState}
 * does, without writing anything.
 */
export const renderCheckpointState = (
  dir: string,
  state: CheckpointState,
  options: Pick<CheckpointStateOptions, "latestFilename"> = {},
): { file: string; text: string } => {
  const file = statePath(dir, options.latestFilename);
  const normalized = generateCheckpointState(
    state.modelCheckpointPath,
    state.allModelCheckpointPaths,
    state.allModelCheckpointTimestamps,
    state.lastPreservedTimestamp,
  );
  for (const p of normalized.allModelCheckpointPaths) assertValidPath(p);
  if (resolve(dir, normalized.modelCheckpointPath) === resolve(file)) {
    throw new RuntimeError(
      `Save path '${normalized.modelCheckpointPath}' conflicts with path used for checkpoint state.  Please use a different save path.`,
    );
  }
  const rel = (p: string): string => {
    const full = resolve(dir, p);
    const r = relative(resolve(dir), full);
    return r !== "" && !r.startsWith("..") && !isAbsolute(r) ? r : full;
  };
  return {
    file,
    text: formatCheckpointState({
      ...normalized,
      modelCheckpointPath: rel(normalized.modelCheckpointPath),
      allModelCheckpointPaths: normalized.allModelCheckpointPaths.map(rel),
    }),
  };
};

/**
 * The latest checkpoint's prefix in `dir` (TensorFlow's `latest_checkpoint`), only if its
 * `<prefix>.index` exists; otherwise logs an error and resolves to `null`. `null` too when
 * there is no (valid) state file.
 */
export const latestCheckpoint = async (dir: string, options: CheckpointStateOptions = {}): Promise<string | null> => {
  const logger = options.logger ?? defaultLogger;
  const state = await getCheckpointState(dir, options);
  if (state === null) return null;
  const prefix = state.modelCheckpointPath;
  if (await pathExists(indexPath(prefix))) return prefix;
  logger.error(`Couldn't match files for checkpoint ${prefix}`, { path: prefix });
  return null;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** The state file's path. */
const statePath = (dir: string, latestFilename: string = CHECKPOINT_STATE_FILENAME): string => {
  assertValidPath(latestFilename, "state file name");
  return join(dir, latestFilename);
};

const isScalar = (u: unknown): u is Scalar => typeof u === "object" && u !== null && "kind" in u && "value" in u;
const scalarValue = (u: unknown): unknown => (isScalar(u) ? u.value : u);

/**
 * Splits text format into fields: `name: scalar`, `name: [a, b]`, `#` comments. Nested
 * messages (`name { ... }`) are reported as errors: `CheckpointState` has none.
 */
const tokenizeFields = (text: string): Either<string[], Record<string, Scalar[]>> => {
  const fields: Record<string, Scalar[]> = Object.create(null) as Record<string, Scalar[]>;
  const errors: string[] = [];
  let i = 0;
  let line = 1;
  const at = (): string => `line ${line}`;
  const skipSpace = (): void => {
    while (i < text.length) {
      const c = text[i] as string;
      if (c === "\n") {
        line++;
        i++;
      } else if (c === " " || c === "\t" || c === "\r" || c === "\f" || c === "\v") i++;
      else if (c === "#") while (i < text.length && text[i] !== "\n") i++;
      else break;
    }
  };
  const readScalar = (): Scalar | string => {
    const c = text[i];
    if (c === '"' || c === "'") {
      const r = readQuoted(text, i);
      if (typeof r === "string") return r;
      i = r.end;
      let value = r.value;
      // Adjacent string literals concatenate, as in text format.
      for (;;) {
        const save = i;
        const saveLine = line;
        skipSpace();
        if (text[i] !== '"' && text[i] !== "'") {
          i = save;
          line = saveLine;
          break;
        }
        const more = readQuoted(text, i);
        if (typeof more === "string") return more;
        value += more.value;
        i = more.end;
      }
      return { kind: "string", value };
    }
    const m = /^[-+]?(?:inf(?:inity)?|nan|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?)/i.exec(text.slice(i));
    if (m === null) return `expected a value, found ${JSON.stringify(text.slice(i, i + 20))}`;
    i += m[0].length;
    const raw = m[0].replace(/[fF]$/, "").toLowerCase();
    const sign = raw.startsWith("-") ? -1 : 1;
    const body = raw.replace(/^[-+]/, "");
    const value = body.startsWith("inf") ? sign * Infinity : body === "nan" ? Number.NaN : sign * Number(body);
    return { kind: "number", value };
  };
  while (true) {
    skipSpace();
    if (i >= text.length) break;
    const name = /^[A-Za-z_][A-Za-z0-9_]*/.exec(text.slice(i));
    if (name === null) {
      errors.push(`${at()}: expected a field name, found ${JSON.stringify(text.slice(i, i + 20))}`);
      break;
    }
    const field = name[0];
    i += field.length;
    skipSpace();
    if (text[i] === "{" || text[i] === "<") {
      errors.push(`${at()}: ${field}: unexpected message value`);
      break;
    }
    if (text[i] !== ":") {
      errors.push(`${at()}: ${field}: expected ":"`);
      break;
    }
    i++;
    skipSpace();
    const values: Scalar[] = [];
    if (text[i] === "[") {
      i++;
      skipSpace();
      let first = true;
      while (text[i] !== "]") {
        if (!first) {
          if (text[i] !== ",") {
            errors.push(`${at()}: ${field}: expected "," or "]" in list`);
            return left(errors);
          }
          i++;
          skipSpace();
        }
        first = false;
        const v = readScalar();
        if (typeof v === "string") {
          errors.push(`${at()}: ${field}: ${v}`);
          return left(errors);
        }
        values.push(v);
        skipSpace();
        if (i >= text.length) {
          errors.push(`${at()}: ${field}: unterminated list`);
          return left(errors);
        }
      }
      i++;
    } else {
      const v = readScalar();
      if (typeof v === "string") {
        errors.push(`${at()}: ${field}: ${v}`);
        break;
      }
      values.push(v);
    }
    skipSpace();
    if (text[i] === "," || text[i] === ";") i++;
    (fields[field] ??= []).push(...values);
  }
  return errors.length > 0 ? left(errors) : right({ ...fields });
};

/** Reads a C-escaped quoted string starting at `start`; returns an error message on failure. */
const readQuoted = (text: string, start: number): { value: string; end: number } | string => {
  const q = text[start];
  const bytes: number[] = [];
  let i = start + 1;
  const pushUtf8 = (s: string): void => {
    for (const b of Buffer.from(s, "utf8")) bytes.push(b);
  };
  while (i < text.length && text[i] !== q) {
    const c = text[i] as string;
    if (c === "\n") return "unterminated string";
    if (c !== "\\") {
      const cp = text.codePointAt(i) as number;
      pushUtf8(String.fromCodePoint(cp));
      i += cp > 0xffff ? 2 : 1;
      continue;
    }
    const e = text[i + 1];
    i += 2;
    const simple: Record<string, number> = { n: 10, r: 13, t: 9, '"': 34, "'": 39, "\\": 92, a: 7, b: 8, f: 12, v: 11, "?": 63 };
    if (e !== undefined && e in simple) bytes.push(simple[e] as number);
    else if (e !== undefined && /[0-7]/.test(e)) {
      const m = /^[0-7]{1,3}/.exec(text.slice(i - 1)) as RegExpExecArray;
      const v = parseInt(m[0], 8);
      if (v > 255) return `octal escape \\${m[0]} is out of range`;
      bytes.push(v);
      i += m[0].length - 1;
    } else if (e === "x" || e === "X") {
      const m = /^[0-9a-fA-F]{1,2}/.exec(text.slice(i));
      if (m === null) return "\\x escape without hex digits";
      bytes.push(parseInt(m[0], 16));
      i += m[0].length;
    } else return `unknown escape \\${e ?? ""}`;
  }
  if (i >= text.length) return "unterminated string";
  try {
    return { value: new TextDecoder("utf-8", { fatal: true }).decode(Uint8Array.from(bytes)), end: i + 1 };
  } catch {
    return "string is not valid UTF-8";
  }
};

/** C-escapes a string as text_format does with `as_utf8=False`. */
const quote = (s: string): string => {
  let out = '"';
  for (const b of Buffer.from(s, "utf8")) {
    if (b === 10) out += "\\n";
    else if (b === 13) out += "\\r";
    else if (b === 9) out += "\\t";
    else if (b === 34) out += '\\"';
    else if (b === 39) out += "\\'";
    else if (b === 92) out += "\\\\";
    else if (b < 32 || b >= 127) out += `\\${b.toString(8).padStart(3, "0")}`;
    else out += String.fromCharCode(b);
  }
  return `${out}"`;
};

/** Python's `repr` of a float for the values that occur here (integral values get `.0`). */
const formatDouble = (x: number): string => {
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  if (Number.isInteger(x) && Math.abs(x) < 1e16) return `${x}.0`;
  return String(x).replace(/e([+-])(\d)$/, "e$10$2");
};
