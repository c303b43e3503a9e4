/**
 * Upgrading across the change of format: a directory of checkpoints in this library's version 1
 * format (test/checkpoint/fixtures/monitored-session-v1, as a release before 0.2.0 left it)
 * restores, the next save writes TensorFlow's V2 bundle beside them, and retention deletes the
 * old ones like any other.
 */
import { cp, readFile, writeFile } from "node:fs/promises";
import { basename, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";

import type { VariableStore } from "../../src/session/Session.js";
import type { TensorValue } from "../../src/session/Tensor.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import {
  CheckpointManager,
  dataPath,
  getCheckpointState,
  readCheckpointInfo,
  updateCheckpointState,
  type CheckpointManagerOptions,
} from "../../src/checkpoint/index.js";
import { ls, v1FixtureValues } from "./helpers.js";
import { bits } from "../util/tensorBits.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-ckpt-migration-");
const FIXTURES = fileURLToPath(new URL("./fixtures/monitored-session-v1/", import.meta.url));

let dir: string;
let clock: VirtualClock;
let events: EventRecorder;
beforeEach(async () => {
  dir = tempDir();
  await cp(FIXTURES, dir, { recursive: true });
  clock = new VirtualClock({ startMs: 1_800_000_000_000 });
  events = new EventRecorder();
});
afterEach(async () => {
  await previous?.close();
  previous = undefined;
});

/** A store that records what is restored into it. */
const store = (): VariableStore & { restored: Map<string, TensorValue>[] } => {
  const restored: Map<string, TensorValue>[] = [];
  return {
    restored,
    snapshot: () => new Map<string, TensorValue>(),
    restore: (v: ReadonlyMap<string, TensorValue>) => void restored.push(new Map(v)),
  } as unknown as VariableStore & { restored: Map<string, TensorValue>[] };
};

/** A new manager on `dir`, as a restarted process makes it: the previous one (its process) is closed first. */
let previous: CheckpointManager | undefined;
const create = async (options: Partial<CheckpointManagerOptions> = {}): Promise<CheckpointManager> => {
  await previous?.close();
  previous = await CheckpointManager.create({ directory: dir, checkpointName: "model.ckpt", clock, logger: events.logger(() => clock.now()), ...options });
  return previous;
};

const warnings = (): string[] => events.messages("warn");
const ckpt = (n: number): string => join(dir, `model.ckpt-${n}`);

/**
 * Gives the copied state file the save times a manager records with each checkpoint (the
 * committed one lists paths only; see the first test).
 */
const recordTimestamps = (): Promise<void> =>
  updateCheckpointState(dir, {
    modelCheckpointPath: "model.ckpt-7",
    allModelCheckpointPaths: ["model.ckpt-3", "model.ckpt-7"],
    allModelCheckpointTimestamps: [1_790_000_000.003, 1_790_000_000.007],
    lastPreservedTimestamp: 1_789_999_999,
  });

const checkpointFiles = async (): Promise<string[]> => (await ls(dir)).filter((f) => f.startsWith("model.ckpt-"));
const listed = async (): Promise<string[] | undefined> => (await getCheckpointState(dir))?.allModelCheckpointPaths.map((p) => basename(p));

describe("a directory of version 1 checkpoints", () => {
  it("restores model.ckpt-7 (init not called), then saves a TensorFlow V2 bundle beside the old ones, which stay version 1", async () => {
    const s = store();
    const init = vi.fn();
    expect(await (await create()).restoreOrInitialize(s, init)).toBe(ckpt(7));
    expect(init).not.toHaveBeenCalled();
    expect(s.restored).toHaveLength(1);
    expect(bits(s.restored[0] as Map<string, TensorValue>)).toEqual(bits(v1FixtureValues(7)));

    expect(await (previous as CheckpointManager).save(v1FixtureValues(8), { checkpointNumber: 8, step: 800 })).toBe(ckpt(8));
    expect(await readCheckpointInfo(ckpt(8))).toMatchObject({ format: "tensorflow-v2", step: 800, createdAtMs: 1_800_000_000_000 });
    for (const n of [3, 7]) {
      expect(await readCheckpointInfo(ckpt(n))).toMatchObject({ format: "monitored-session-v1", step: n * 100, createdAtMs: 1_790_000_000_000 + n });
      expect(await readFile(dataPath(ckpt(n)))).toEqual(await readFile(join(FIXTURES, `model.ckpt-${n}.data-00000-of-00001`)));
    }
    // The committed state file has no timestamps: as TensorFlow's CheckpointManager does, the
    // manager takes its checkpoints as preserved (kept on disk, never deleted, no longer listed).
    expect(await listed()).toEqual(["model.ckpt-8"]);
    expect(await checkpointFiles()).toHaveLength(6);

    const fresh = store();
    expect(await (await create()).restoreOrInitialize(fresh)).toBe(ckpt(8));
    expect(bits(fresh.restored[0] as Map<string, TensorValue>)).toEqual(bits(v1FixtureValues(8)));
    expect(warnings()).toEqual([]);
  });

  it("with the save times a manager records, the state lists the old and the new checkpoints; a fresh manager restores the new one", async () => {
    await recordTimestamps();
    const s = store();
    expect(await (await create()).restoreOrInitialize(s)).toBe(ckpt(7));
    expect(bits(s.restored[0] as Map<string, TensorValue>)).toEqual(bits(v1FixtureValues(7)));
    await (previous as CheckpointManager).save(v1FixtureValues(8), { checkpointNumber: 8, step: 800 });
    expect(await listed()).toEqual(["model.ckpt-3", "model.ckpt-7", "model.ckpt-8"]);
    expect(basename((await getCheckpointState(dir))?.modelCheckpointPath ?? "")).toBe("model.ckpt-8");
    expect((await readCheckpointInfo(ckpt(8))).format).toBe("tensorflow-v2");
    expect(await readCheckpointInfo(ckpt(7))).toMatchObject({ format: "monitored-session-v1", step: 700 });
    expect(await readCheckpointInfo(ckpt(3))).toMatchObject({ format: "monitored-session-v1", step: 300 });

    const fresh = store();
    const init = vi.fn();
    expect(await (await create()).restoreOrInitialize(fresh, init)).toBe(ckpt(8));
    expect(init).not.toHaveBeenCalled();
    expect(bits(fresh.restored[0] as Map<string, TensorValue>)).toEqual(bits(v1FixtureValues(8)));
    // And an old one still restores by name.
    expect(await (previous as CheckpointManager).restore(store(), "model.ckpt-3")).toBe(300);
    expect(warnings()).toEqual([]);
  });

  it("retention (maxToKeep) deletes an old-format checkpoint's two files like any other", async () => {
    await recordTimestamps();
    const mgr = await create({ maxToKeep: 2 });
    expect(await mgr.restoreOrInitialize(store())).toBe(ckpt(7));
    await mgr.save(v1FixtureValues(8), { checkpointNumber: 8, step: 800 });
    expect(await checkpointFiles()).toEqual(["model.ckpt-7.data-00000-of-00001", "model.ckpt-7.index", "model.ckpt-8.data-00000-of-00001", "model.ckpt-8.index"]);
    await mgr.save(v1FixtureValues(9), { checkpointNumber: 9, step: 900 });
    expect(await checkpointFiles()).toEqual(["model.ckpt-8.data-00000-of-00001", "model.ckpt-8.index", "model.ckpt-9.data-00000-of-00001", "model.ckpt-9.index"]);
    expect(await listed()).toEqual(["model.ckpt-8", "model.ckpt-9"]);
    expect(warnings()).toEqual([]);
  });

  it("a corrupt newest version 1 checkpoint is skipped with a warning for the previous one", async () => {
    const data = await readFile(dataPath(ckpt(7)));
    data[0] = (data[0] as number) ^ 1;
    await writeFile(dataPath(ckpt(7)), data);
    const s = store();
    expect(await (await create()).restoreOrInitialize(s)).toBe(ckpt(3));
    expect(bits(s.restored[0] as Map<string, TensorValue>)).toEqual(bits(v1FixtureValues(3)));
    expect(warnings()[0]).toMatch(/model\.ckpt-7 is corrupt or incomplete and was skipped; trying the previous one\. .*CRC32C mismatch for "dense\/kernel"/);
    expect(warnings()[1]).toMatch(/Restored the previous valid checkpoint .*model\.ckpt-3 \(step 300\)/);
    expect(warnings()).toHaveLength(2);
  });
});
