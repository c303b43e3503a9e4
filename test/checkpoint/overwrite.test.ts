/**
 * Re-saving a checkpoint number that already exists (CheckpointSaverHook saves at the restored
 * step after every restart): a save that fails or is killed before its index rename must not
 * lose the checkpoint that was there. Both ways a manager commits a save are covered: on its
 * writer thread (small saves, the default; here the same job runner on this thread, with a file
 * system that fails) and streamed on the calling thread (`fileCommitter: null`).
 */

import * as fs from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";

import { DataLossError } from "../../src/errors.js";
import { CheckpointManager } from "../../src/checkpoint/index.js";
import { inProcessCommitter, type FileCommitter } from "../../src/checkpoint/internal/fileJobs.js";
import type { TensorValue } from "../../src/session/Tensor.js";
import { useTempDirs } from "../util/tempDirs.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";

/** When set, renaming a temporary file onto a `.index` name fails (as a crash there would stop the save). */
const fault = vi.hoisted(() => ({ failIndexRename: false }));

vi.mock("node:fs/promises", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:fs/promises")>();
  const rename: typeof actual.rename = async (from, to) => {
    if (fault.failIndexRename && String(to).endsWith(".index")) throw Object.assign(new Error(`EIO: injected, rename '${String(to)}'`), { code: "EIO" });
    return actual.rename(from, to);
  };
  return { ...actual, default: { ...actual, rename }, rename };
});

/** The writer thread's job runner, with a file system whose renames onto `.index` fail while the fault is set. */
const faultyThread: FileCommitter = inProcessCommitter({
  ...fs,
  renameSync: (from, to) => {
    if (fault.failIndexRename && String(to).endsWith(".index")) throw Object.assign(new Error(`EIO: injected, rename '${String(to)}'`), { code: "EIO" });
    fs.renameSync(from, to);
  },
});

const tempDir = useTempDirs("ms-ckpt-");

let dir: string;
beforeEach(async () => {
  dir = tempDir();
  fault.failIndexRename = false;
});
afterEach(async () => {
  await previous?.close();
  previous = undefined;
  fault.failIndexRename = false;
});

const values = (x: number): Map<string, TensorValue> =>
  new Map<string, TensorValue>([["w", { dtype: "float32", shape: [2], data: Float32Array.of(x, x + 1) }]]);

/** A store that records what is restored into it. */
const store = () => {
  const restored: Map<string, TensorValue>[] = [];
  return {
    restored,
    snapshot: () => new Map<string, TensorValue>(),
    restore: (v: ReadonlyMap<string, TensorValue>) => void restored.push(new Map(v)),
  } as unknown as import("../../src/session/Session.js").VariableStore & { restored: Map<string, TensorValue>[] };
};

/** A new manager, as a restarted process makes it: the previous one (its process) is closed first. */
let previous: CheckpointManager | undefined;
let committer: FileCommitter | null = null;
const create = async () => {
  await previous?.close();
  previous = await CheckpointManager.create({ directory: dir, checkpointName: "model.ckpt", maxToKeep: 1, logger: new EventRecorder().logger(), fileCommitter: committer });
  return previous;
};

describe.each([
  ["on the writer thread", faultyThread],
  ["streamed on the calling thread", null],
])("re-saving an existing checkpoint number, %s", (_, how) => {
  beforeEach(() => {
    committer = how;
  });

  it("a save of the same values that fails before its index rename leaves the checkpoint restorable", async () => {
    const path = (await (await create()).save(values(100), { checkpointNumber: 100, step: 100 })) as string;
    fault.failIndexRename = true;
    await expect((await create()).save(values(100), { checkpointNumber: 100, step: 100 })).rejects.toThrow(/injected/);
    fault.failIndexRename = false;

    const s = store();
    const init = vi.fn();
    expect(await (await create()).restoreOrInitialize(s, init)).toBe(path);
    expect(init).not.toHaveBeenCalled();
    expect(s.restored[0]?.get("w")?.data).toEqual(Float32Array.of(100, 101));
    expect(path).toBe(join(dir, "model.ckpt-100"));
  });

  it("with different values, the half-replaced checkpoint is reported as corrupt, never silently re-initialized", async () => {
    await (await create()).save(values(100), { checkpointNumber: 100, step: 100 });
    fault.failIndexRename = true;
    await expect((await create()).save(values(7), { checkpointNumber: 100, step: 100 })).rejects.toThrow(/injected/);
    fault.failIndexRename = false;

    const init = vi.fn();
    await expect((await create()).restoreOrInitialize(store(), init)).rejects.toThrow(DataLossError);
    expect(init).not.toHaveBeenCalled();
  });
});
