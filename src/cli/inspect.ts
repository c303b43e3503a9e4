/**
 * `monitored-session inspect <checkpointDir>`: lists the checkpoints of a directory with their
 * number, step, save time, size and checksum status (every CRC32C verified by the checkpoint
 * reader), and which one the `checkpoint` state file names as latest. A state file that is
 * invalid or names a missing checkpoint is reported too. The step is the checkpoint's global
 * step (its `global_step` tensor), else its run counter (`checkpointed_runs`, saved by a
 * `PreemptionCheckpointHandler`), else the step its index recorded (unknown when that tensor
 * fails its checksum); the number is the `<n>` of its name, which a handler counts in saves.
 * Either format is read: TensorFlow's V2 bundle (what this library writes, or TensorFlow did) and
 * this library's version 1; the table and the tensor listing say which.
 *
 * With `--all-tensor-names`, `--all-tensors` or `--tensor-name <name>` (TensorFlow's
 * `inspect_checkpoint` flags, in our spelling), it lists the tensors of one checkpoint instead:
 * the directory's latest, or the checkpoint prefix given (`runs/1/model.ckpt-200`).
 *
 * @module
 */

import type { Command } from "commander";
import { readdir, stat } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";

import {
  dataPath,
  getCheckpointState,
  INDEX_SUFFIX,
  indexPath,
  latestCheckpoint,
  readCheckpointInfo,
  readCheckpointState,
  type CheckpointFormat,
  type CheckpointInfo,
} from "../checkpoint/index.js";
import { readTensors, verifyCheckpoint } from "../checkpoint/checkpointFormat.js";
import { VARIABLE_VALUE_SUFFIX } from "../checkpoint/objectGraph.js";
import { checkpointNumberOf } from "../checkpoint/checkpointNumbers.js";
import { pathExists } from "../checkpoint/internal/files.js";
import { closest } from "../codec.js";
import { silentLogger } from "../Logger.js";
import { CHECKPOINTED_RUNS } from "../preemption/index.js";
import { GLOBAL_STEP_NAME } from "../session/Session.js";
import type { TensorValue } from "../session/Tensor.js";
import { ExitCodes } from "../runtime/exitCodes.js";
import type { CliIo } from "./cliIo.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** One checkpoint as `inspect` reports it. */
interface CheckpointReport {
  readonly prefix: string;
  /** The `<n>` of its name `<name>-<n>`. */
  readonly number: number | null;
  /** Its global step, else its run counter, else its recorded step (see the module comment). */
  readonly step: number | null;
  readonly createdAtMs: number | null;
  /** Which files it is (`null` when its index cannot be read). */
  readonly format: CheckpointFormat | null;
  readonly bytes: number;
  /** `ok` (every checksum verified) or the reader's error. */
  readonly status: "ok" | "corrupt";
  readonly error?: string;
  /** Listed in the state file. */
  readonly managed: boolean;
  /** The state file's latest. */
  readonly latest: boolean;
}

/** Options of {@link inspectCommand}. At most one of the tensor options. */
export interface InspectOptions {
  /** Print JSON. */
  readonly json?: boolean;
  /** Print this tensor of the checkpoint with its values (TensorFlow's `--tensor_name`). */
  readonly tensorName?: string | undefined;
  /** Print every tensor of the checkpoint with its values (`--all_tensors`). */
  readonly allTensors?: boolean;
  /** Print the name, dtype and shape of every tensor of the checkpoint (`--all_tensor_names`). */
  readonly allTensorNames?: boolean;
}

/** A tensor as `inspect` lists it. */
interface TensorReport {
  readonly name: string;
  /** As Python names it (`float32`, `bfloat16`...). */
  readonly dtype: string;
  readonly shape: readonly number[];
  readonly sizeBytes: number;
  /** The stored checksum, hex: TensorFlow's masked CRC-32C, or version 1's CRC32C. */
  readonly crc32c: string;
  /** Whether this library reads its values (a dtype it holds, not partitioned). */
  readonly supported: boolean;
}

/** How the table and the listing name a format. */
const FORMAT_NAMES: Record<CheckpointFormat, string> = { "tensorflow-v2": "TensorFlow V2 bundle", "monitored-session-v1": "monitored-session v1" };

/** The tensors that hold a checkpoint's step, first found first: the global step, then a handler's run counter. */
const STEP_TENSORS = [GLOBAL_STEP_NAME, CHECKPOINTED_RUNS] as const;

/** Elements beyond which a tensor's values are summarized in text, as numpy's `threshold`. */
const SUMMARY_THRESHOLD = 1000;
/** Values kept at each end of a summarized axis, as numpy's `edgeitems`. */
const EDGE_ITEMS = 3;

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Adds the `inspect` command to `program`: its arguments, options and help; `done` receives the
 * exit code (the program's entry point returns it).
 */
export const addInspectCommand = (program: Command, io: CliIo, done: (code: number) => void): Command =>
  program
    .command("inspect")
    .description("List the checkpoints of a directory with their steps, sizes and checksum status, or (with a tensor option) the tensors of one checkpoint.")
    .argument("<checkpoint>", "a checkpoint directory; with a tensor option, also a checkpoint prefix (runs/1/model.ckpt-200)")
    .option("--json", "print JSON")
    .option("--all-tensor-names", "list the name, dtype and shape of every tensor of the checkpoint (the directory's latest)")
    .option("--all-tensors", "print every tensor of the checkpoint with its values")
    .option("--tensor-name <name>", "print this tensor of the checkpoint with its values")
    .addHelpText(
      "after",
      `\nThe tensor options are TensorFlow's inspect_checkpoint flags. Values of more than ${SUMMARY_THRESHOLD} elements are summarized (the first and last ${EDGE_ITEMS} along each axis), as numpy prints them; --json prints every value (int64 as strings, non-finite floats as "NaN", "Infinity", "-Infinity").\n\nExit codes: 0 every checkpoint verified (or the tensors were printed), 1 one failed verification or the state file is bad, 2 bad usage (no such directory or checkpoint, no such tensor).`,
    )
    .exitOverride()
    .action(async (path: string, opts: { json?: boolean; allTensorNames?: boolean; allTensors?: boolean; tensorName?: string }) => {
      done(
        await inspectCommand(
          path,
          {
            ...(opts.json === true ? { json: true } : {}),
            ...(opts.allTensorNames === true ? { allTensorNames: true } : {}),
            ...(opts.allTensors === true ? { allTensors: true } : {}),
            ...(opts.tensorName === undefined ? {} : { tensorName: opts.tensorName }),
          },
          io,
        ),
      );
    });

/** The checkpoints of `dir`, oldest step first, each verified. */
const inspectCheckpoints = async (dir: string): Promise<CheckpointReport[]> => {
  const abs = resolve(dir);
  const names = await readdir(abs);
  const state = await getCheckpointState(abs, { logger: silentLogger }).catch(() => null);
  const managed = new Set((state?.allModelCheckpointPaths ?? []).map((p) => resolve(abs, p)));
  const latest = state === null ? null : resolve(abs, state.modelCheckpointPath);
  const prefixes = names.filter((n) => n.endsWith(INDEX_SUFFIX)).map((n) => join(abs, n.slice(0, -INDEX_SUFFIX.length)));
  const reports: CheckpointReport[] = [];
  for (const prefix of prefixes) {
    const bytes = (await sizeOf(indexPath(prefix))) + (await sizeOf(dataPath(prefix)));
    const number = numberOf(prefix);
    let info: CheckpointInfo | undefined;
    try {
      info = await readCheckpointInfo(prefix);
      // Every checksum, also of tensors of a dtype this library does not read (a bfloat16 of a
      // checkpoint TensorFlow wrote is not corruption).
      await verifyCheckpoint(prefix);
      const step = await readStep(info);
      reports.push({ prefix, number, step, createdAtMs: info.createdAtMs, format: info.format, bytes, status: "ok", managed: managed.has(prefix), latest: prefix === latest });
    } catch (e) {
      // A corrupt checkpoint still shows the step its step tensor holds, if that tensor verifies.
      const m = info;
      const step = m === undefined ? null : await readStep(m).catch(() => null);
      reports.push({
        prefix,
        number,
        step,
        createdAtMs: m?.createdAtMs ?? null,
        format: m?.format ?? null,
        bytes,
        status: "corrupt",
        error: e instanceof Error ? e.message : String(e),
        managed: managed.has(prefix),
        latest: prefix === latest,
      });
    }
  }
  return reports.sort((a, b) => (a.step ?? -1) - (b.step ?? -1) || (a.number ?? -1) - (b.number ?? -1) || a.prefix.localeCompare(b.prefix));
};

/** The step of a checkpoint whose `values` were read: see {@link STEP_TENSORS}, else the step its index recorded. */
const stepOf = (info: CheckpointInfo, values: ReadonlyMap<string, TensorValue>): number => {
  for (const name of STEP_TENSORS) {
    const n = scalarOf(values.get(name));
    if (n !== undefined) return n;
  }
  return info.step;
};

/**
 * The step of the checkpoint `info` describes, reading only its step tensors (their checksums
 * verified), not the whole data file. Throws `DataLossError` when one does not verify.
 */
const readStep = async (info: CheckpointInfo): Promise<number> => stepOf(info, await readTensors(info.prefix, STEP_TENSORS));

/**
 * The problems of `dir`'s state file: invalid (unparseable, a path outside the directory, an
 * empty latest), or an entry naming a checkpoint that does not exist. Empty when it is fine or
 * absent.
 */
const inspectState = async (dir: string): Promise<string[]> => {
  const abs = resolve(dir);
  let read;
  try {
    read = await readCheckpointState(abs);
  } catch (e) {
    return [`state file ${join(abs, "checkpoint")} is invalid: ${e instanceof Error ? e.message : String(e)}`];
  }
  if (read.status === "missing") return [];
  if (read.status === "invalid") return [`state file ${read.file} is invalid: ${read.problems.map(oneLine).join("; ")}`];
  const named = [...new Set([read.state.modelCheckpointPath, ...read.state.allModelCheckpointPaths])];
  const problems: string[] = [];
  for (const prefix of named) {
    if (!(await pathExists(indexPath(prefix)))) {
      problems.push(`state file ${read.file} names ${prefix}, which does not exist`);
    }
  }
  return problems;
};

/**
 * Runs the command; resolves with the exit code (1 if any checkpoint fails verification or the
 * state file is bad). With a tensor option, lists the tensors of one checkpoint instead.
 */
export const inspectCommand = async (dir: string, options: InspectOptions, io: CliIo): Promise<number> => {
  const tensorOptions = [
    ...(options.allTensorNames === true ? ["--all-tensor-names"] : []),
    ...(options.allTensors === true ? ["--all-tensors"] : []),
    ...(options.tensorName === undefined ? [] : ["--tensor-name"]),
  ];
  if (tensorOptions.length > 1) {
    io.err.write(`monitored-session inspect: give one of ${tensorOptions.join(", ")}, not ${tensorOptions.length === 2 ? "both" : "all"}\n`);
    return ExitCodes.usage;
  }
  if (tensorOptions.length === 1) return inspectTensors(dir, options, io);
  let st;
  try {
    st = await stat(dir);
  } catch {
    const checkpoint = await pathExists(indexPath(resolve(dir)));
    io.err.write(`${dir}: ${checkpoint ? "a checkpoint, not a directory: list its tensors with --all-tensor-names or --all-tensors, or inspect its directory" : "no such directory"}\n`);
    return ExitCodes.usage;
  }
  if (!st.isDirectory()) {
    io.err.write(`${dir}: not a directory\n`);
    return ExitCodes.usage;
  }
  const reports = await inspectCheckpoints(dir);
  const stateProblems = await inspectState(dir);
  if (options.json === true) {
    io.out.write(`${JSON.stringify(reports, null, 2)}\n`);
  } else if (reports.length === 0) {
    io.out.write(`No checkpoints in ${resolve(dir)}.\n`);
  } else {
    const rows = reports.map((r) => [
      `${r.latest ? "*" : " "} ${r.prefix.slice(r.prefix.lastIndexOf("/") + 1)}`,
      r.step === null ? "?" : String(r.step),
      formatBytes(r.bytes),
      r.createdAtMs === null ? "?" : new Date(r.createdAtMs).toISOString(),
      r.format === null ? "?" : FORMAT_NAMES[r.format],
      r.status === "ok" ? "ok" : `CORRUPT: ${oneLine(r.error ?? "")}`,
    ]);
    const header = ["  checkpoint", "step", "size", "saved at", "format", "checksums"];
    const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] as string).length)));
    const line = (cells: string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] as number))).join("  ");
    io.out.write(`Checkpoints in ${resolve(dir)} (* = latest in the state file):\n${line(header)}\n`);
    for (const r of rows) io.out.write(`${line(r)}\n`);
    const bad = reports.filter((r) => r.status !== "ok").length;
    io.out.write(`${reports.length} checkpoint${reports.length === 1 ? "" : "s"}, ${bad === 0 ? "all verified" : `${bad} failed verification`}.\n`);
  }
  // The next writer rebuilds a bad state file from the checkpoints that verify (docs/checkpoints.md).
  for (const p of stateProblems) (options.json === true ? io.err : io.out).write(`BAD STATE: ${p}\n`);
  return reports.some((r) => r.status !== "ok") || stateProblems.length > 0 ? ExitCodes.failure : ExitCodes.done;
};

/** `--all-tensor-names`, `--all-tensors`, `--tensor-name`: the tensors of one checkpoint. */
const inspectTensors = async (path: string, options: InspectOptions, io: CliIo): Promise<number> => {
  const found = await checkpointAt(path);
  if ("problem" in found) {
    io.err.write(`${found.problem}\n`);
    return ExitCodes.usage;
  }
  const { prefix } = found;
  let info: CheckpointInfo;
  try {
    info = await readCheckpointInfo(prefix);
  } catch (e) {
    io.err.write(`${prefix}: ${oneLine(e instanceof Error ? e.message : String(e))}\n`);
    return ExitCodes.failure;
  }
  // By name, as TensorFlow's inspect_checkpoint lists them (readCheckpointInfo sorts them).
  const entries: TensorReport[] = info.tensors.map((e) => ({
    name: e.name,
    dtype: e.dtype,
    shape: e.shape,
    sizeBytes: e.sizeBytes,
    crc32c: `0x${e.crc32c.toString(16).padStart(8, "0")}`,
    supported: e.supported,
  }));
  // A variable's name finds its key in a checkpoint with an object graph (`<name>/.ATTRIBUTES/VARIABLE_VALUE`).
  const has = (n: string): boolean => entries.some((e) => e.name === n);
  const asked = options.tensorName;
  const name = asked === undefined || has(asked) || !has(`${asked}${VARIABLE_VALUE_SUFFIX}`) ? asked : `${asked}${VARIABLE_VALUE_SUFFIX}`;
  if (name !== undefined && !has(name)) {
    const names = entries.map((e) => e.name);
    const hint = closest(name, names);
    io.err.write(`${prefix}: no tensor "${name}" in the checkpoint${hint === undefined ? "" : ` (did you mean "${hint}"?)`}; it has ${preview(names)}\n`);
    return ExitCodes.usage;
  }
  if (options.allTensorNames === true) {
    if (options.json === true) io.out.write(`${JSON.stringify(entries, null, 2)}\n`);
    else {
      const step = await readStep(info).catch(() => null);
      io.out.write(`Tensors of ${prefix} (step ${step ?? "?"}; ${FORMAT_NAMES[info.format]}):\n`);
      const rows = entries.map((e) => [e.name, e.dtype, formatShape(e.shape), `${e.crc32c}${e.supported ? "" : " (not read by this library)"}`]);
      const widths = [0, 1, 2].map((i) => Math.max(...rows.map((r) => (r[i] as string).length)));
      for (const r of rows) io.out.write(`${r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i] as number))).join("  ")}\n`);
    }
    return ExitCodes.done;
  }
  // Values: a tensor's checksum is verified before anything is printed. A tensor of a dtype this
  // library does not hold, or a string tensor of bytes that are not UTF-8 text (TensorFlow's
  // object graph is one), is listed without values, saying why.
  const shown = entries.filter((e) => name === undefined || e.name === name);
  const values = new Map<string, TensorValue>();
  const notes = new Map<string, string>();
  try {
    // One reader for them all; a tensor it refuses is listed with why.
    const read = await readTensors(
      prefix,
      shown.filter((e) => e.supported).map((e) => e.name),
      (n, x) => notes.set(n, `(${oneLine(x.message)})`),
    );
    for (const [n, v] of read) values.set(n, v);
  } catch (e) {
    io.err.write(`${prefix}: ${oneLine(e instanceof Error ? e.message : String(e))}\n`);
    return ExitCodes.failure;
  }
  const unread = (e: TensorReport): string => notes.get(e.name) ?? `(${e.dtype}: not read by this library)`;
  if (options.json === true) {
    const withValues = shown.map((e) => {
      const v = values.get(e.name);
      return { ...e, ...(v === undefined ? { values: null, note: unread(e) } : { values: jsonValues(v) }) };
    });
    io.out.write(`${JSON.stringify(name === undefined ? withValues : withValues[0], null, 2)}\n`);
    return ExitCodes.done;
  }
  for (const e of shown) {
    const v = values.get(e.name);
    io.out.write(`tensor_name: ${e.name} ${e.dtype} ${formatShape(e.shape)}\n${v === undefined ? unread(e) : formatValues(v)}\n`);
  }
  return ExitCodes.done;
};

/**
 * The checkpoint `path` names: a directory's latest (by its state file, else the highest step
 * among its checkpoints), or a checkpoint prefix. A problem is one line, with a suggestion for a
 * likely typo of a prefix.
 */
const checkpointAt = async (path: string): Promise<{ readonly prefix: string } | { readonly problem: string }> => {
  const abs = resolve(path);
  const st = await stat(abs).catch(() => undefined);
  if (st?.isDirectory() === true) {
    const latest = await latestCheckpoint(abs, { logger: silentLogger }).catch(() => null);
    if (latest !== null) return { prefix: resolve(abs, latest) };
    const prefixes = await prefixesIn(abs);
    const newest = (await Promise.all(prefixes.map(async (p) => [p, await readCheckpointInfo(p).then((m) => m.step, () => -1)] as const))).sort((a, b) => b[1] - a[1])[0];
    return newest === undefined ? { problem: `${abs}: no checkpoints in the directory` } : { prefix: newest[0] };
  }
  if (await pathExists(indexPath(abs))) return { prefix: abs };
  const parent = dirname(abs);
  const names = (await prefixesIn(parent)).map((p) => basename(p));
  if (names.length === 0) return { problem: `${abs}: no such checkpoint directory or checkpoint (no ${basename(indexPath(abs))} there)` };
  const hint = closest(basename(abs), names);
  return {
    problem: `${abs}: no such checkpoint${hint === undefined ? "" : ` (did you mean "${join(parent, hint)}"?)`}; ${parent} has ${preview(names)}`,
  };
};

/** The checkpoint prefixes of `dir` (those with an index file). */
const prefixesIn = async (dir: string): Promise<string[]> => {
  const names = await readdir(dir).catch(() => [] as string[]);
  return names.filter((n) => n.endsWith(INDEX_SUFFIX)).map((n) => join(dir, n.slice(0, -INDEX_SUFFIX.length))).sort();
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const formatShape = (shape: readonly number[]): string => `[${shape.join(", ")}]`;

/** The `<n>` of a checkpoint prefix `<name>-<n>`, or `null`. */
const numberOf = (prefix: string): number | null => {
  const base = basename(prefix);
  const dash = base.lastIndexOf("-");
  return dash <= 0 ? null : checkpointNumberOf(base, base.slice(0, dash));
};

/** A numeric scalar's value (a one-element tensor's), or `undefined`. */
const scalarOf = (t: TensorValue | undefined): number | undefined => {
  if (t === undefined || t.dtype === "string" || t.dtype === "bool" || t.data.length !== 1) return undefined;
  const n = Number(t.data[0]);
  return Number.isFinite(n) ? n : undefined;
};

const preview = (names: readonly string[]): string =>
  names.length <= 12 ? names.join(", ") : `${names.slice(0, 12).join(", ")} and ${names.length - 12} more`;

/** One element as text: the shortest decimal that reads back as the same float32, a bigint's digits, JSON for strings. */
const elementText = (t: TensorValue, i: number): string => {
  switch (t.dtype) {
    case "float32": {
      const v = (t.data as Float32Array)[i] as number;
      if (!Number.isFinite(v)) return String(v);
      for (let digits = 1; digits < 9; digits++) {
        const n = Number(v.toPrecision(digits));
        if (Math.fround(n) === v) return String(n);
      }
      return String(Number(v.toPrecision(9)));
    }
    case "float64":
      return String((t.data as Float64Array)[i]);
    case "int32":
      return String((t.data as Int32Array)[i]);
    case "int64":
      return String((t.data as BigInt64Array)[i]);
    case "bool":
      return (t.data as Uint8Array)[i] === 0 ? "false" : "true";
    case "string":
      return JSON.stringify((t.data as readonly string[])[i]);
  }
};

/**
 * A tensor's values as nested lists, row-major by its shape (a scalar is its value). Beyond
 * {@link SUMMARY_THRESHOLD} elements, each axis longer than twice {@link EDGE_ITEMS} shows its
 * ends around `...`, as numpy does.
 */
const formatValues = (t: TensorValue): string => {
  const total = t.shape.reduce((a, b) => a * b, 1);
  const summarize = total > SUMMARY_THRESHOLD;
  const strides = t.shape.map((_, axis) => t.shape.slice(axis + 1).reduce((a, b) => a * b, 1));
  const format = (axis: number, offset: number): string => {
    if (axis === t.shape.length) return elementText(t, offset);
    const n = t.shape[axis] as number;
    const stride = strides[axis] as number;
    const indices = summarize && n > 2 * EDGE_ITEMS ? [...range(0, EDGE_ITEMS), -1, ...range(n - EDGE_ITEMS, n)] : range(0, n);
    return `[${indices.map((i) => (i < 0 ? "..." : format(axis + 1, offset + i * stride))).join(", ")}]`;
  };
  return format(0, 0);
};

/** A tensor's values as JSON: nested arrays by its shape; int64 as strings, non-finite floats as "NaN", "Infinity", "-Infinity". */
const jsonValues = (t: TensorValue): unknown => {
  const element = (i: number): unknown => {
    switch (t.dtype) {
      case "float32":
      case "float64": {
        const v = (t.data as Float32Array | Float64Array)[i] as number;
        return Number.isFinite(v) ? (t.dtype === "float32" ? Number(elementText(t, i)) : v) : String(v);
      }
      case "int32":
        return (t.data as Int32Array)[i];
      case "int64":
        return String((t.data as BigInt64Array)[i]);
      case "bool":
        return (t.data as Uint8Array)[i] !== 0;
      case "string":
        return (t.data as readonly string[])[i];
    }
  };
  const strides = t.shape.map((_, axis) => t.shape.slice(axis + 1).reduce((a, b) => a * b, 1));
  const nest = (axis: number, offset: number): unknown =>
    axis === t.shape.length ? element(offset) : range(0, t.shape[axis] as number).map((i) => nest(axis + 1, offset + i * (strides[axis] as number)));
  return nest(0, 0);
};

const range = (from: number, to: number): number[] => Array.from({ length: Math.max(0, to - from) }, (_, i) => from + i);

const sizeOf = async (path: string): Promise<number> => {
  try {
    return (await stat(path)).size;
  } catch {
    return 0;
  }
};

/** A message as one printable line: readers quote the bad bytes, which may hold newlines or control characters. */
const oneLine = (s: string): string => s.replace(/[\u0000-\u001f\u007f-\u009f\ufffd]+/g, " ").replace(/ {2,}/g, " ").trim();

const formatBytes = (n: number): string =>
  n < 1024 ? `${n} B` : n < 1024 ** 2 ? `${(n / 1024).toFixed(1)} KiB` : n < 1024 ** 3 ? `${(n / 1024 ** 2).toFixed(1)} MiB` : `${(n / 1024 ** 3).toFixed(2)} GiB`;
