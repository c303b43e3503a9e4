import { mkdir, readFile, truncate, unlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

import { DataLossError, InvalidArgumentError, ValueError } from "../../src/errors.js";
import { Graph, type GraphSession, type Variable } from "../../src/session/Graph.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import {
  CheckpointManager,
  dataPath,
  getCheckpointState,
  indexPath,
  latestCheckpoint,
  TensorBundleReader,
  type CheckpointManagerOptions,
  type RetentionPolicy,
} from "../../src/checkpoint/index.js";
import { ls } from "./helpers.js";
import { useTempDirs } from "../util/tempDirs.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";

const tempDir = useTempDirs("ms-ckpt-");

let dir: string;
let clock: VirtualClock;
beforeEach(async () => {
  dir = tempDir();
  clock = new VirtualClock();
});
afterEach(async () => {
  await previous?.close();
  previous = undefined;
});

/**
 * A graph with a float vector, a nested name and an int64 step. (The step is a bigint
 * variable: `Graph.globalStep()`'s number-valued int64 cannot be restored by GraphSession,
 * see the report.)
 */
const model = (): { graph: Graph; w: Variable<Float32Array>; step: Variable<bigint> } => {
  const graph = new Graph();
  const step = graph.variable<bigint>("global_step", 0n);
  const w = graph.variable<Float32Array>("dense/kernel", () => new Float32Array(4));
  graph.variable("a/b/c", { initialValue: "init" });
  return { graph, w, step };
};

const session = async (graph: Graph): Promise<GraphSession> => {
  const s = graph.session();
  await s.variables.initialize();
  return s;
};

const setValues = (s: GraphSession, m: ReturnType<typeof model>, step: number): Promise<unknown> => {
  m.graph.op(`set${step}`, (ctx) => {
    ctx.assign(m.w, Float32Array.of(step, step + 0.5, -step, step * 2));
    ctx.assign(m.step, BigInt(step));
  });
  return s.run(`set${step}`);
};

/** A new manager on `dir`, as a restarted process makes it: the previous one (its process) is closed first. */
let previous: CheckpointManager | undefined;
const create = async (options: Partial<CheckpointManagerOptions> = {}) => {
  await previous?.close();
  previous = await CheckpointManager.create({ directory: dir, clock, logger: new EventRecorder().logger(), ...options });
  return previous;
};

const ckptFiles = async (): Promise<string[]> => (await ls(dir)).filter((f) => f.endsWith(".index")).map((f) => f.slice(0, -6));

describe("CheckpointManager options", () => {
  it("maxToKeep <= 0 and checkpointInterval without stepCounter are ValueErrors", async () => {
    await expect(create({ maxToKeep: 0 })).rejects.toThrow(ValueError);
    await expect(create({ maxToKeep: -1 })).rejects.toThrow(ValueError);
    await expect(create({ checkpointInterval: 5 })).rejects.toThrow("`stepCounter` should be passed if `checkpointInterval` is not None.");
  });

  it("rejects checkpoint names and restore paths that escape the directory, naming them", async () => {
    await expect(create({ checkpointName: "../x" })).rejects.toThrow(InvalidArgumentError);
    await expect(create({ checkpointName: "../x" })).rejects.toThrow('checkpoint name "../x"');
    await expect(create({ checkpointName: "a\0b" })).rejects.toThrow(/NUL byte/);
    const m = await create();
    const s = await session(model().graph);
    await expect(m.restore(s.variables, "../outside-1")).rejects.toThrow(/checkpoint path "..\/outside-1" resolves to .* outside the checkpoint directory/);
    await expect(m.restore(s.variables, "/etc/passwd")).rejects.toThrow(InvalidArgumentError);
  });
});

describe("CheckpointManager save and retention", () => {
  it("numbers checkpoints with the save counter, keeps maxToKeep, and records TF's state file", async () => {
    const m = model();
    const s = await session(m.graph);
    const mgr = await create({ maxToKeep: 2 });
    for (let i = 1; i <= 4; i++) {
      clock.set(1_700_000_000_000 + i * 1000);
      expect(await mgr.save(s.variables)).toBe(join(dir, `ckpt-${i}`));
    }
    expect(mgr.checkpoints).toEqual([join(dir, "ckpt-3"), join(dir, "ckpt-4")]);
    expect(mgr.latestCheckpoint).toBe(join(dir, "ckpt-4"));
    expect(await ckptFiles()).toEqual(["ckpt-3", "ckpt-4"]);
    expect(await ls(dir)).toEqual(["checkpoint", "checkpoint.lock", "ckpt-3.data-00000-of-00001", "ckpt-3.index", "ckpt-4.data-00000-of-00001", "ckpt-4.index"]);
    expect(await readFile(join(dir, "checkpoint"), "utf8")).toBe(
      'model_checkpoint_path: "ckpt-4"\nall_model_checkpoint_paths: "ckpt-3"\nall_model_checkpoint_paths: "ckpt-4"\n' +
        "all_model_checkpoint_timestamps: 1700000003.0\nall_model_checkpoint_timestamps: 1700000004.0\n" +
        "last_preserved_timestamp: 1699999999.0\n",
    );
    expect(await latestCheckpoint(dir)).toBe(join(dir, "ckpt-4"));
  });

  it("uses an explicit checkpoint number (the counter still increments) and model.ckpt names", async () => {
    const s = await session(model().graph);
    const mgr = await create({ checkpointName: "model.ckpt" });
    expect(await mgr.save(s.variables, { checkpointNumber: 100 })).toBe(join(dir, "model.ckpt-100"));
    expect(mgr.saveCounter).toBe(1);
    // re-saving an existing number moves it to the end
    await mgr.save(s.variables, { checkpointNumber: 50 });
    await mgr.save(s.variables, { checkpointNumber: 100 });
    expect(mgr.checkpoints).toEqual([join(dir, "model.ckpt-50"), join(dir, "model.ckpt-100")]);
  });

  it("creates a missing (nested) directory on the first save", async () => {
    const s = await session(model().graph);
    const nested = join(dir, "run", "ckpts");
    const mgr = await create({ directory: nested });
    expect(await mgr.save(s.variables)).toBe(join(nested, "ckpt-1"));
    expect(await latestCheckpoint(nested)).toBe(join(nested, "ckpt-1"));
  });

  it("a checkpoint that cannot be deleted is a warning naming it and why; the save succeeds and retention goes on", async () => {
    const s = await session(model().graph);
    const events = new EventRecorder();
    const mgr = await create({ maxToKeep: 1, logger: events.logger(() => clock.now()) });
    expect(await mgr.save(s.variables)).toBe(join(dir, "ckpt-1"));
    // A directory where ckpt-1's data file was: unlink refuses it (EISDIR), whoever runs the test.
    const data = dataPath(join(dir, "ckpt-1"));
    await unlink(data);
    await mkdir(join(data, "sub"), { recursive: true });
    expect(await mgr.save(s.variables)).toBe(join(dir, "ckpt-2"));
    expect(events.lines("warn")).toEqual([
      { type: "log", time: clock.now(), level: "warn", message: `Could not delete checkpoint ${join(dir, "ckpt-1")}: EISDIR: illegal operation on a directory, unlink '${data}'`, fields: { path: join(dir, "ckpt-1") } },
    ]);
    expect(mgr.checkpoints).toEqual([join(dir, "ckpt-2")]);
    expect(await ckptFiles()).toEqual(["ckpt-2"]); // its index went first, so it is no checkpoint any more
  });

  it("maxToKeep null keeps everything", async () => {
    const s = await session(model().graph);
    const mgr = await create({ maxToKeep: null });
    for (let i = 0; i < 7; i++) await mgr.save(s.variables);
    expect(await ckptFiles()).toHaveLength(7);
  });

  it("keepCheckpointEveryNHours preserves one checkpoint per period, never deleted, even by a new manager", async () => {
    const s = await session(model().graph);
    const mgr = await create({ maxToKeep: 2, keepCheckpointEveryNHours: 1 });
    const saveAt = async (minutes: number) => {
      clock.set(1_700_000_000_000 + minutes * 60_000);
      return mgr.save(s.variables);
    };
    await saveAt(0); // ckpt-1: 0 min
    await saveAt(20); // ckpt-2
    await saveAt(40); // ckpt-3 → sweep ckpt-1: 0 min - 1 h < last_preserved (start - 1 s) → deleted
    expect(await ckptFiles()).toEqual(["ckpt-2", "ckpt-3"]);
    await saveAt(70); // ckpt-4 → sweep ckpt-2 (20 min): 20 min - 60 min < last preserved → deleted
    await saveAt(90); // ckpt-5 → sweep ckpt-3 (40 min): 40 - 60 >= -1 s? no → deleted
    await saveAt(130); // ckpt-6 → sweep ckpt-4 (70 min): 70 min - 60 min = 10 min >= start - 1 s → preserved
    expect(await ckptFiles()).toEqual(["ckpt-4", "ckpt-5", "ckpt-6"]);
    expect(mgr.checkpoints).toEqual([join(dir, "ckpt-5"), join(dir, "ckpt-6")]);
    expect(mgr.lastPreservedTimestamp).toBe(1_700_000_000 + 70 * 60);
    // A new manager treats ckpt-4 as preserved: not managed, never deleted.
    const again = await create({ maxToKeep: 1 });
    expect(again.checkpoints).toEqual([join(dir, "ckpt-5"), join(dir, "ckpt-6")]);
    clock.set(1_700_000_000_000 + 140 * 60_000);
    await again.save(s.variables);
    expect(await ckptFiles()).toEqual(["ckpt-4", "ckpt-7"]);
  });

  it("state entries at or before last_preserved_timestamp are never managed or deleted (TF edge case 25)", async () => {
    await writeFile(
      join(dir, "checkpoint"),
      'model_checkpoint_path: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-2"\n' +
        "all_model_checkpoint_timestamps: 1699999000.0\nall_model_checkpoint_timestamps: 1699999500.0\n" +
        "last_preserved_timestamp: 1699999000.0\n",
    );
    const s = await session(model().graph);
    const seed = await create({ maxToKeep: null });
    await seed.save(s.variables, { checkpointNumber: 1 });
    await seed.save(s.variables, { checkpointNumber: 2 });
    await writeFile(
      join(dir, "checkpoint"),
      'model_checkpoint_path: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-2"\n' +
        "all_model_checkpoint_timestamps: 1699999000.0\nall_model_checkpoint_timestamps: 1699999500.0\n" +
        "last_preserved_timestamp: 1699999000.0\n",
    );
    const mgr = await create({ maxToKeep: 1 });
    expect(mgr.checkpoints).toEqual([join(dir, "ckpt-2")]);
    expect(mgr.saveCounter).toBe(2);
    await mgr.save(s.variables);
    expect(await ckptFiles()).toEqual(["ckpt-1", "ckpt-3"]);
  });

  it("warns and clamps when the clock is behind last_preserved_timestamp", async () => {
    await writeFile(join(dir, "checkpoint"), 'model_checkpoint_path: "ckpt-1"\nlast_preserved_timestamp: 1800000000.0\n');
    const events = new EventRecorder();
    const mgr = await create({ logger: events.logger(() => clock.now()) });
    expect(mgr.lastPreservedTimestamp).toBe(1_700_000_000);
    expect(events.messages("warn").some((w) => w.includes("is behind the last preserved checkpoint timestamp"))).toBe(true);
  });

  it("a custom retention policy decides; the latest is never deleted", async () => {
    const s = await session(model().graph);
    const seen: number[][] = [];
    const policy: RetentionPolicy = (cps) => {
      seen.push(cps.map((c) => c.checkpointNumber ?? -1));
      return {
        keep: cps.filter((c) => (c.checkpointNumber ?? 0) % 10 === 0).map((c) => c.path),
        preserve: cps.filter((c) => c.checkpointNumber === 15).map((c) => c.path),
      };
    };
    // Beside the two options it replaces, a policy is refused (one line), as by the hook and monitoredTrainingSession.
    for (const both of [{ maxToKeep: 1 }, { keepCheckpointEveryNHours: null }]) {
      await expect(create({ retentionPolicy: policy, ...both })).rejects.toThrow(
        new ValueError("CheckpointManager: give retentionPolicy or maxToKeep and keepCheckpointEveryNHours, not both (Retention.tensorflow makes the policy of the two)"),
      );
    }
    const mgr = await create({ retentionPolicy: policy });
    for (const n of [10, 15, 17, 20, 23]) await mgr.save(s.variables, { checkpointNumber: n });
    expect(await ckptFiles()).toEqual(["ckpt-10", "ckpt-15", "ckpt-20", "ckpt-23"]);
    expect(mgr.checkpoints).toEqual([join(dir, "ckpt-10"), join(dir, "ckpt-20"), join(dir, "ckpt-23")]);
    // 15 was the latest when first seen (never touched); preserved at the next save, deleted 17 at the one after.
    expect(seen[2]).toEqual([10, 15, 17]);
    expect(seen[3]).toEqual([10, 17, 20]);
  });
});

describe("CheckpointManager interval gating", () => {
  it("saves at most once per checkpointInterval steps and never twice at the same step (TF edge case 25)", async () => {
    const s = await session(model().graph);
    let step = 0;
    const mgr = await create({ stepCounter: () => BigInt(step), checkpointInterval: 10 });
    const saved: (string | null)[] = [];
    for (step = 0; step <= 25; step += 5) saved.push(await mgr.save(s.variables, { checkpointNumber: step }));
    expect(saved).toEqual([join(dir, "ckpt-0"), null, join(dir, "ckpt-10"), null, join(dir, "ckpt-20"), null]);
    step = 20;
    expect(await mgr.save(s.variables, { checkInterval: false })).toBeNull(); // same step
    step = 21;
    expect(await mgr.save(s.variables, { checkpointNumber: 21, checkInterval: false })).toBe(join(dir, "ckpt-21"));
    expect(mgr.saveCounter).toBe(4);
  });
});

describe("CheckpointManager restore", () => {
  it("restoreOrInitialize calls initFn when there is nothing, else restores the latest exactly", async () => {
    const m = model();
    const s = await session(m.graph);
    let inits = 0;
    const mgr = await create();
    expect(await mgr.restoreOrInitialize(s.variables, () => void inits++)).toBeNull();
    expect(inits).toBe(1);
    await setValues(s, m, 3);
    await mgr.save(s.variables, { checkpointNumber: 3 });
    await setValues(s, m, 4);
    await mgr.save(s.variables, { checkpointNumber: 4 });

    const fresh = m.graph.session();
    const mgr2 = await create({ initFn: () => void inits++ });
    expect(await mgr2.restoreOrInitialize(fresh.variables)).toBe(join(dir, "ckpt-4"));
    expect(inits).toBe(1);
    expect(await fresh.run(["dense/kernel", "global_step", "a/b/c"])).toEqual([Float32Array.of(4, 4.5, -4, 8), 4n, "init"]);
    expect(mgr2.saveCounter).toBe(4);
  });

  it.each([
    ["a flipped byte in the data", async (p: string) => {
      // The first byte of a variable (not of the save time, which is advisory: see checkpointFormat.ts).
      const first = (await TensorBundleReader.open(p)).entries.find((e) => !e.name.startsWith("_MONITORED_SESSION/"));
      const b = await readFile(dataPath(p));
      b[first?.offset as number] = (b[first?.offset as number] as number) ^ 1;
      await writeFile(dataPath(p), b);
    }],
    ["truncated data", (p: string) => truncate(dataPath(p), 5)],
    ["a truncated index", (p: string) => truncate(indexPath(p), 40)],
    ["an empty index", (p: string) => writeFile(indexPath(p), "")],
  ])("falls back to the previous checkpoint, with a warning, when the latest has %s", async (_what, corrupt) => {
    const m = model();
    const s = await session(m.graph);
    const mgr = await create();
    await setValues(s, m, 1);
    await mgr.save(s.variables, { checkpointNumber: 1 });
    await setValues(s, m, 2);
    await mgr.save(s.variables, { checkpointNumber: 2 });
    await corrupt(join(dir, "ckpt-2"));

    const events = new EventRecorder();
    const fresh = m.graph.session();
    const mgr2 = await create({ logger: events.logger(() => clock.now()) });
    expect(await mgr2.restoreOrInitialize(fresh.variables)).toBe(join(dir, "ckpt-1"));
    expect(await fresh.run(["dense/kernel", "global_step"])).toEqual([Float32Array.of(1, 1.5, -1, 2), 1n]);
    expect(events.messages("warn")[0]).toMatch(/^Checkpoint .*ckpt-2 is corrupt or incomplete and was skipped; trying the previous one/);
    expect(events.messages("warn")[1]).toContain("Restored the previous valid checkpoint");
    // A direct restore of the corrupt one fails loudly.
    await expect(mgr2.restore(fresh.variables, join(dir, "ckpt-2"))).rejects.toThrow(DataLossError);
  });

  it("finds checkpoints on disk when the state file is missing, and refuses to start over when none verifies", async () => {
    const m = model();
    const s = await session(m.graph);
    const mgr = await create();
    await setValues(s, m, 5);
    await mgr.save(s.variables, { checkpointNumber: 5 });
    await writeFile(join(dir, "checkpoint"), "garbage: [");
    const fresh = m.graph.session();
    expect(await (await create()).restoreOrInitialize(fresh.variables)).toBe(join(dir, "ckpt-5"));
    await truncate(dataPath(join(dir, "ckpt-5")), 1);
    let inits = 0;
    await expect((await create()).restoreOrInitialize(m.graph.session().variables, () => void inits++)).rejects.toThrow(
      /No valid checkpoint in .*every candidate failed verification/,
    );
    expect(inits).toBe(0);
  });

  it("sets the interval anchor from the step counter after a restore", async () => {
    const m = model();
    const s = await session(m.graph);
    await setValues(s, m, 30);
    await (await create()).save(s.variables, { checkpointNumber: 30 });
    const fresh = m.graph.session();
    const mgr = await create({ stepCounter: () => (fresh.variables.snapshot().get("global_step")?.data[0] as bigint), checkpointInterval: 10 });
    await mgr.restoreOrInitialize(fresh.variables);
    expect(await mgr.save(fresh.variables, { checkpointNumber: 30 })).toBeNull();
  });
});

describe("CheckpointManager leftovers", () => {
  it("removes temp files of dead writers and data files without an index at creation, keeping complete checkpoints", async () => {
    const s = await session(model().graph);
    const mgr = await create();
    await mgr.save(s.variables);
    const leftovers = [
      "ckpt-2.data-00000-of-00001.tmp-999999999-abcdef",
      "ckpt-2.index.tmp-999999999-abcdef",
      "ckpt-3.data-00000-of-00001", // renamed data, crash before the index rename
      "checkpoint.tmp-999999999-0123ab",
    ];
    for (const f of leftovers) await writeFile(join(dir, f), "partial");
    await writeFile(join(dir, "unrelated.tmp-999999999-abc"), "not ours");
    const events = new EventRecorder();
    const mgr2 = await create({ logger: events.logger(() => clock.now()) });
    expect(await ls(dir)).toEqual(["checkpoint", "checkpoint.lock", "ckpt-1.data-00000-of-00001", "ckpt-1.index", "unrelated.tmp-999999999-abc"]);
    expect(events.messages("warn")[0]).toMatch(/^Removed 4 leftover file\(s\) of interrupted checkpoint saves/);
    expect(await mgr2.cleanup()).toEqual([]);
  });

  it("keeps temp files of a live foreign process", async () => {
    const live = `ckpt-9.index.tmp-${process.ppid}-abcdef`;
    await writeFile(join(dir, live), "in progress");
    await create();
    expect(await ls(dir)).toEqual(["checkpoint.lock", live]);
  });

  it("leaves no temporary files after saves, and the state file stays parseable", async () => {
    const s = await session(model().graph);
    const mgr = await create({ maxToKeep: 1 });
    for (let i = 0; i < 3; i++) await mgr.save(s.variables);
    expect((await ls(dir)).filter((f) => f.includes(".tmp"))).toEqual([]);
    expect((await getCheckpointState(dir))?.allModelCheckpointPaths).toEqual([join(dir, "ckpt-3")]);
  });
});

describe("CheckpointManager after a power cut during the directory fsync", () => {
  // One directory fsync covers the data, index and state renames (docs/checkpoints.md, "Why
  // one directory fsync is enough"): a power cut may persist the state rename without the
  // checkpoint's. These reproduce the resulting disk states and check the fallback.
  const powerCutAfter = async (maxToKeep: number, lose: "data+index" | "data") => {
    const m = model();
    const s = await session(m.graph);
    await setValues(s, m, 1);
    await (await create({ maxToKeep })).save(s.variables, { checkpointNumber: 1 });
    await setValues(s, m, 2);
    await (await create({ maxToKeep: null })).save(s.variables, { checkpointNumber: 2 });
    // Save 2's first state (before its sweep): it names ckpt-2, listing the managed ones; with
    // maxToKeep 1 the list is [ckpt-2] only. ckpt-1 is still on disk: nothing is deleted
    // before the directory fsync completes.
    const listed = maxToKeep === 1 ? ["ckpt-2"] : ["ckpt-1", "ckpt-2"];
    await writeFile(
      join(dir, "checkpoint"),
      `model_checkpoint_path: "ckpt-2"\n${listed.map((p) => `all_model_checkpoint_paths: "${p}"\n`).join("")}`,
    );
    await unlink(dataPath(join(dir, "ckpt-2")));
    if (lose === "data+index") await unlink(indexPath(join(dir, "ckpt-2")));
    const events = new EventRecorder();
    const fresh = m.graph.session();
    const mgr = await create({ logger: events.logger(() => clock.now()), maxToKeep });
    const restored = await mgr.restoreOrInitialize(fresh.variables);
    return { restored, events, fresh };
  };

  it("the state names a checkpoint whose files are missing: the previous one is restored, the state rebuilt with a warning", async () => {
    for (const maxToKeep of [3, 1]) {
      dir = tempDir();
      const { restored, events, fresh } = await powerCutAfter(maxToKeep, "data+index");
      expect(restored).toBe(join(dir, "ckpt-1"));
      expect(fresh.variables.snapshot().get("global_step")?.data[0]).toBe(1n);
      expect(events.messages("warn")).toEqual([expect.stringMatching(/checkpoint names .*ckpt-2, which does not exist; kept it as .*checkpoint\.corrupt-/)]);
    }
  });

  it("the state names a checkpoint whose index survived but not its data: warned, previous one restored", async () => {
    const { restored, events, fresh } = await powerCutAfter(3, "data");
    expect(restored).toBe(join(dir, "ckpt-1"));
    expect(fresh.variables.snapshot().get("global_step")?.data[0]).toBe(1n);
    expect(events.messages("warn").join("\n")).toMatch(/ckpt-2 is corrupt or incomplete.*data-00000-of-00001: missing/s);
  });
});

describe("CheckpointManager and a bad state file (an improvement on TensorFlow, which starts over)", () => {
  /** Five checkpoints whose global steps are not in number order (ckpt-4 has the highest step). */
  const fiveCheckpoints = async () => {
    const m = model();
    const s = await session(m.graph);
    const mgr = await create({ maxToKeep: 5 });
    const steps = [10, 20, 30, 50, 40];
    for (const [i, step] of steps.entries()) {
      await setValues(s, m, step);
      await mgr.save(s.variables, { checkpointNumber: i + 1, step });
    }
    await mgr.close();
    return m;
  };
  const files = async () => (await ls(dir)).filter((f) => f.startsWith("ckpt-"));
  const restart = async (m: ReturnType<typeof model>) => {
    const events = new EventRecorder();
    const mgr = await create({ logger: events.logger(() => clock.now()), maxToKeep: 5 });
    const fresh = m.graph.session();
    let inits = 0;
    const restored = await mgr.restoreOrInitialize(fresh.variables, () => void inits++);
    return { mgr, events, restored, inits, step: fresh.variables.snapshot().get("global_step")?.data[0] };
  };

  it("a garbage state file with 5 valid checkpoints: resumes from the highest verified step, rewrites the state, keeps the bad file, deletes nothing", async () => {
    const m = await fiveCheckpoints();
    const before = await files();
    await writeFile(join(dir, "checkpoint"), "model_checkpoint_path: \"ckpt-5\"\n\u0000\u0007garbage {{{");
    const { restored, events, inits, step, mgr } = await restart(m);
    expect(inits).toBe(0);
    expect(restored).toBe(join(dir, "ckpt-4"));
    expect(step).toBe(50n);
    expect(await files()).toEqual(before);
    const kept = (await ls(dir)).filter((f) => f.startsWith("checkpoint.corrupt-"));
    expect(kept).toHaveLength(1);
    expect(await readFile(join(dir, kept[0] as string), "utf8")).toContain("garbage {{{");
    const state = await getCheckpointState(dir);
    expect(state?.modelCheckpointPath).toBe(join(dir, "ckpt-4"));
    expect(state?.allModelCheckpointPaths).toEqual(["ckpt-1", "ckpt-2", "ckpt-3", "ckpt-5", "ckpt-4"].map((p) => join(dir, p)));
    expect(events.messages("warn")).toEqual([expect.stringMatching(/checkpoint is invalid .*; kept it as .*checkpoint\.corrupt-.* rewrote it from the 5 checkpoint\(s\) that verify: resuming from .*ckpt-4 \(step 50\)/)]);
    // Training goes on from there: the next save is recorded after the rebuilt list.
    expect(mgr.latestCheckpoint).toBe(join(dir, "ckpt-4"));
  });

  it("skips a checkpoint that does not verify: the newest verified one is restored, the corrupt one left on disk", async () => {
    const m = await fiveCheckpoints();
    // A byte of a variable (the padding between tensors is not checksummed, as in TensorFlow).
    const at = (await TensorBundleReader.open(join(dir, "ckpt-4"))).entry("global_step")?.offset as number;
    const data = await readFile(dataPath(join(dir, "ckpt-4")));
    data[at] = (data[at] as number) ^ 0xff;
    await writeFile(dataPath(join(dir, "ckpt-4")), data);
    await writeFile(join(dir, "checkpoint"), "not a state file");
    const { restored, step, events } = await restart(m);
    expect(restored).toBe(join(dir, "ckpt-5"));
    expect(step).toBe(40n);
    expect((await getCheckpointState(dir))?.allModelCheckpointPaths).toEqual(["ckpt-1", "ckpt-2", "ckpt-3", "ckpt-5"].map((p) => join(dir, p)));
    expect(await files()).toContain("ckpt-4.index");
    expect(events.messages("warn")[0]).toMatch(/ckpt-4 does not verify and is left out of the rebuilt state/);
  });

  it("a state file naming a missing checkpoint (a dangling entry): the same recovery", async () => {
    const m = await fiveCheckpoints();
    await writeFile(join(dir, "checkpoint"), 'model_checkpoint_path: "ckpt-9"\nall_model_checkpoint_paths: "ckpt-5"\nall_model_checkpoint_paths: "ckpt-9"\n');
    const { restored, step, events } = await restart(m);
    expect(restored).toBe(join(dir, "ckpt-4"));
    expect(step).toBe(50n);
    expect((await getCheckpointState(dir))?.allModelCheckpointPaths).toHaveLength(5);
    expect(events.messages("warn")[0]).toMatch(/names .*ckpt-9, which does not exist; kept it as/);
  });

  it("a manager that only restores (no lock) changes nothing on disk", async () => {
    const m = await fiveCheckpoints();
    await writeFile(join(dir, "checkpoint"), "garbage");
    const reader = await CheckpointManager.create({ directory: dir, lock: false, removeLeftovers: false, logger: new EventRecorder().logger(), maxToKeep: 5 });
    expect(await reader.restoreOrInitialize(m.graph.session().variables)).toBe(join(dir, "ckpt-5")); // by number, as before
    expect(await readFile(join(dir, "checkpoint"), "utf8")).toBe("garbage");
    expect((await ls(dir)).filter((f) => f.includes("corrupt") || f.includes("lock"))).toEqual([]);
  });
});
