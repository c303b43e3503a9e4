import { isLeft, isRight } from "fp-ts/lib/Either.js";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { beforeEach, describe, expect, it } from "vitest";

import { RuntimeError, ValueError } from "../../src/errors.js";
import {
  generateCheckpointState,
  getCheckpointState,
  latestCheckpoint,
  updateCheckpointState,
  writeBundle,
  type CheckpointState,
} from "../../src/checkpoint/index.js";
import { formatCheckpointState, parseCheckpointState } from "../../src/checkpoint/CheckpointState.js";
import { syncCounters } from "../../src/checkpoint/internal/files.js";
import { ls } from "./helpers.js";
import { useTempDirs } from "../util/tempDirs.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";

const tempDir = useTempDirs("ms-ckpt-");

let dir: string;
beforeEach(async () => {
  dir = tempDir();
});
/** The example of formats-and-style.md A.4, as written by tf.train.CheckpointManager. */
const TF_EXAMPLE = `model_checkpoint_path: "ckpt-5"
all_model_checkpoint_paths: "ckpt-3"
all_model_checkpoint_paths: "ckpt-4"
all_model_checkpoint_paths: "ckpt-5"
all_model_checkpoint_timestamps: 1672531200.0
all_model_checkpoint_timestamps: 1672531201.0
all_model_checkpoint_timestamps: 1672531202.0
last_preserved_timestamp: 1672531000.0
`;

describe("CheckpointState text format", () => {
  it("parses TensorFlow's example (A.4) and formats it back byte for byte", () => {
    const parsed = parseCheckpointState(TF_EXAMPLE);
    if (!isRight(parsed)) throw new Error(parsed.left.join("\n"));
    expect(parsed.right).toEqual({
      modelCheckpointPath: "ckpt-5",
      allModelCheckpointPaths: ["ckpt-3", "ckpt-4", "ckpt-5"],
      allModelCheckpointTimestamps: [1672531200, 1672531201, 1672531202],
      lastPreservedTimestamp: 1672531000,
    });
    expect(formatCheckpointState(parsed.right)).toBe(TF_EXAMPLE);
  });

  it("round-trips escapes, non-ASCII (octal, as text_format writes it) and fractional timestamps", () => {
    const state: CheckpointState = {
      modelCheckpointPath: 'dir "q"/ckpt\\x-1\té',
      allModelCheckpointPaths: ['dir "q"/ckpt\\x-1\té'],
      allModelCheckpointTimestamps: [1672531200.25],
      lastPreservedTimestamp: 0,
    };
    const text = formatCheckpointState(state);
    expect(text).toBe(
      'model_checkpoint_path: "dir \\"q\\"/ckpt\\\\x-1\\t\\303\\251"\n' +
        'all_model_checkpoint_paths: "dir \\"q\\"/ckpt\\\\x-1\\t\\303\\251"\n' +
        "all_model_checkpoint_timestamps: 1672531200.25\n",
    );
    const back = parseCheckpointState(text);
    expect(isRight(back) && back.right).toEqual(state);
  });

  it("accepts the rest of text format: comments, list syntax, single quotes, hex escapes, last singular wins", () => {
    const parsed = parseCheckpointState(
      `# a comment\nmodel_checkpoint_path: 'old'\nmodel_checkpoint_path : "c\\x6b" "pt-2" # trailing\n` +
        `all_model_checkpoint_paths: ["ckpt-1", "ckpt-2"]\nall_model_checkpoint_timestamps: [1e9, 2.5E9]\n`,
    );
    expect(isRight(parsed) && parsed.right).toEqual({
      modelCheckpointPath: "ckpt-2",
      allModelCheckpointPaths: ["ckpt-1", "ckpt-2"],
      allModelCheckpointTimestamps: [1e9, 2.5e9],
      lastPreservedTimestamp: 0,
    });
  });

  it("is strict: unknown fields, wrong types and syntax errors are listed with their paths", () => {
    const r = parseCheckpointState(
      `model_checkpoint_path: 5\nall_model_checkpoint_paths: "a"\nall_model_checkpoint_paths: 7\nsave_counter: 3\n`,
    );
    expect(isLeft(r) && r.left).toEqual([
      "model_checkpoint_path: expected a quoted string, got 5",
      "all_model_checkpoint_paths[1]: expected a quoted string, got 7",
      'save_counter: unknown field "save_counter"; CheckpointState accepts model_checkpoint_path, all_model_checkpoint_paths, all_model_checkpoint_timestamps, last_preserved_timestamp',
    ]);
    const syntax = parseCheckpointState(`model_checkpoint_path "x"\n`);
    expect(isLeft(syntax) && syntax.left).toEqual(['line 1: model_checkpoint_path: expected ":"']);
    const unterminated = parseCheckpointState(`model_checkpoint_path: "x\n`);
    expect(isLeft(unterminated) && unterminated.left).toEqual(["line 1: model_checkpoint_path: unterminated string"]);
  });

  it("is strict about field names that are Object.prototype members (toString, constructor, __proto__)", () => {
    for (const field of ["toString", "constructor", "__proto__", "hasOwnProperty"]) {
      const r = parseCheckpointState(`model_checkpoint_path: "ckpt-1"\n${field}: "x"\n`);
      expect(isLeft(r) && r.left, field).toEqual([`${field}: unknown field "${field}"; CheckpointState accepts model_checkpoint_path, all_model_checkpoint_paths, all_model_checkpoint_timestamps, last_preserved_timestamp`]);
    }
  });

  it("generateCheckpointState appends the model path and rejects mismatched timestamps (ValueError)", () => {
    expect(generateCheckpointState("c-2", ["c-1"]).allModelCheckpointPaths).toEqual(["c-1", "c-2"]);
    expect(generateCheckpointState("c-2", ["c-1", "c-2"]).allModelCheckpointPaths).toEqual(["c-1", "c-2"]);
    expect(() => generateCheckpointState("c-2", ["c-1"], [1])).toThrow(ValueError);
  });
});

describe("getCheckpointState / updateCheckpointState", () => {
  it("makes each directory it creates durable in its parent before the state file's own fsyncs", async () => {
    const nested = join(dir, "a", "b");
    const before = syncCounters.directories;
    await updateCheckpointState(nested, generateCheckpointState(join(nested, "ckpt-1")));
    // dir (gained a), a (gained b), then b itself after the state file's rename.
    expect(syncCounters.directories - before).toBe(3);
    expect((await getCheckpointState(nested))?.modelCheckpointPath).toBe(join(nested, "ckpt-1"));
  });

  it("writes paths relative to the directory, atomically, and reads them back joined onto it", async () => {
    await updateCheckpointState(dir, {
      modelCheckpointPath: join(dir, "ckpt-2"),
      allModelCheckpointPaths: [join(dir, "ckpt-1"), join(dir, "ckpt-2")],
      allModelCheckpointTimestamps: [10, 20],
      lastPreservedTimestamp: 5,
    });
    expect(await readFile(join(dir, "checkpoint"), "utf8")).toBe(
      'model_checkpoint_path: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-2"\n' +
        "all_model_checkpoint_timestamps: 10.0\nall_model_checkpoint_timestamps: 20.0\nlast_preserved_timestamp: 5.0\n",
    );
    expect(await ls(dir)).toEqual(["checkpoint"]); // no temporary file left
    expect(await getCheckpointState(dir)).toEqual({
      modelCheckpointPath: join(dir, "ckpt-2"),
      allModelCheckpointPaths: [join(dir, "ckpt-1"), join(dir, "ckpt-2")],
      allModelCheckpointTimestamps: [10, 20],
      lastPreservedTimestamp: 5,
    });
  });

  it("reads TensorFlow's file, with a custom latest_filename", async () => {
    await writeFile(join(dir, "state"), TF_EXAMPLE);
    const s = await getCheckpointState(dir, { latestFilename: "state" });
    expect(s?.modelCheckpointPath).toBe(join(dir, "ckpt-5"));
    expect(s?.lastPreservedTimestamp).toBe(1672531000);
  });

  it("a missing file is null; an unparseable one is a warning and null (checkpoint ignored)", async () => {
    const events = new EventRecorder();
    expect(await getCheckpointState(dir, { logger: events.logger() })).toBeNull();
    expect(events.lines()).toEqual([]);
    await writeFile(join(dir, "checkpoint"), 'model_checkpoint_path: "a"\nnot_a_field: 1\n');
    expect(await getCheckpointState(dir, { logger: events.logger() })).toBeNull();
    expect(events.messages("warn")).toHaveLength(1);
    expect(events.messages("warn")[0]).toContain("checkpoint ignored");
    expect(events.messages("warn")[0]).toContain("not_a_field: unknown field");
  });

  it("the warning says whether the state file could not be read or is invalid, names it and lists each problem", async () => {
    const events = new EventRecorder();
    const file = join(dir, "checkpoint");
    await writeFile(file, 'model_checkpoint_path: "a"\nnot_a_field: 1\nall_model_checkpoint_paths: 2\n');
    expect(await getCheckpointState(dir, { logger: events.logger() })).toBeNull();
    // A directory where the file should be: it exists, but cannot be read.
    const other = join(dir, "other");
    await mkdir(join(other, "checkpoint"), { recursive: true });
    expect(await getCheckpointState(other, { logger: events.logger() })).toBeNull();
    const problems = [
      "all_model_checkpoint_paths[0]: expected a quoted string, got 2",
      'not_a_field: unknown field "not_a_field"; CheckpointState accepts model_checkpoint_path, all_model_checkpoint_paths, all_model_checkpoint_timestamps, last_preserved_timestamp',
    ];
    expect(events.lines()).toEqual([
      {
        type: "log",
        time: 0,
        level: "warn",
        message: `${file}: invalid checkpoint state; checkpoint ignored:\n  ${problems.join("\n  ")}`,
        fields: { path: file, problems },
      },
      {
        type: "log",
        time: 0,
        level: "warn",
        message: `${join(other, "checkpoint")}: cannot read the checkpoint state; checkpoint ignored:\n  EISDIR: illegal operation on a directory, read`,
        fields: { path: join(other, "checkpoint"), problems: ["EISDIR: illegal operation on a directory, read"] },
      },
    ]);
  });

  it("an empty model_checkpoint_path is a ValueError, as in TensorFlow", async () => {
    await writeFile(join(dir, "checkpoint"), 'all_model_checkpoint_paths: "a"\n');
    await expect(getCheckpointState(dir)).rejects.toThrow(ValueError);
    await expect(getCheckpointState(dir)).rejects.toThrow(/Invalid checkpoint state loaded from/);
  });

  it("a state naming paths outside the directory is rejected with a warning naming them", async () => {
    const events = new EventRecorder();
    await writeFile(join(dir, "checkpoint"), 'model_checkpoint_path: "../../etc/passwd"\nall_model_checkpoint_paths: "/etc/x"\n');
    expect(await getCheckpointState(dir, { logger: events.logger() })).toBeNull();
    expect(events.messages("warn")[0]).toContain('model_checkpoint_path: checkpoint path "../../etc/passwd" resolves to');
    expect(events.messages("warn")[0]).toContain('all_model_checkpoint_paths[0]: checkpoint path "/etc/x"');
  });

  it("refuses a save path equal to the state file (RuntimeError) and NUL bytes", async () => {
    await expect(
      updateCheckpointState(dir, generateCheckpointState(join(dir, "checkpoint"))),
    ).rejects.toThrow(RuntimeError);
    await expect(updateCheckpointState(dir, generateCheckpointState("a\0b"))).rejects.toThrow(/NUL byte/);
  });
});

describe("latestCheckpoint", () => {
  it("returns the state's path only if its index exists (TensorFlow semantics), else logs and returns null", async () => {
    const events = new EventRecorder();
    expect(await latestCheckpoint(dir, { logger: events.logger() })).toBeNull();
    await updateCheckpointState(dir, generateCheckpointState("ckpt-1"));
    expect(await latestCheckpoint(dir, { logger: events.logger() })).toBeNull();
    expect(events.messages("error")).toEqual([`Couldn't match files for checkpoint ${join(dir, "ckpt-1")}`]);
    await writeBundle(join(dir, "ckpt-1"), new Map(), { step: 1, createdAtMs: 0 });
    expect(await latestCheckpoint(dir, { logger: events.logger() })).toBe(join(dir, "ckpt-1"));
  });

  it("works with a nested directory that does not exist yet", async () => {
    const sub = join(dir, "a", "b");
    expect(await latestCheckpoint(sub)).toBeNull();
    await mkdir(sub, { recursive: true });
    await updateCheckpointState(sub, generateCheckpointState("model.ckpt-3"));
    await writeBundle(join(sub, "model.ckpt-3"), new Map(), { step: 3, createdAtMs: 0 });
    expect(await latestCheckpoint(sub)).toBe(join(sub, "model.ckpt-3"));
  });
});
