/**
 * Checkpoint benchmark: sync save, async-save stall, restore, against plain-fs baselines
 * measured in the same run (write + fsync, and read, of the same bytes).
 *
 * - `syncSaveMs`: `CheckpointManager.save(snapshot)`: data, index and state file(s) written to
 *   temp names and fsynced concurrently, renamed, one directory fsync, sweep (see "How a save
 *   is written" in docs/checkpoints.md). `fileFsyncsPerSave` / `dirFsyncsPerSave` count the
 *   fsyncs of one sync save (a breakdown, not a target).
 * - `snapshotMs`: `VariableStore.snapshot()` of a `GraphSession` (the store's deep copy).
 * - `asyncStallMs`: how long `await AsyncCheckpointer.save(store)` blocks the loop (snapshot
 *   included); `asyncLoopMaxGapMs`: the longest event-loop stall while the save then runs in
 *   the background (a setImmediate ticker).
 * - `restoreMs`: `BundleSaver.restore` (read + verify every CRC32C).
 * - `rawWriteFsyncMs` / `rawReadMs`: the same data bytes with `fs.open/write/sync/close` and
 *   `fs.readFile`.
 */
import { mkdtemp, open, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { AsyncCheckpointer, BundleSaver, CheckpointManager, dataPath } from "../src/checkpoint/index.js";
import { syncCounters } from "../src/checkpoint/internal/files.js";
import { Graph } from "../src/session/Graph.js";
import { silentLogger } from "../src/Logger.js";
import type { TensorValue } from "../src/session/Tensor.js";
import { elapsedMs, median, round } from "./stats.js";

interface Case {
  readonly label: string;
  readonly tensors: number;
  readonly floatsPerTensor: number;
  readonly reps: number;
}

const CASES: readonly Case[] = [
  { label: "1MB", tensors: 4, floatsPerTensor: 65_536, reps: 25 },
  // 100 MB as 8 layers of 12.5 MB, a typical layout (one tensor per weight matrix).
  { label: "100MB", tensors: 8, floatsPerTensor: 3_276_800, reps: 7 },
];

const makeStore = (c: Case) => {
  const graph = new Graph();
  for (let t = 0; t < c.tensors; t++) {
    graph.variable<TensorValue>(`layer${t}/kernel`, () => {
      const data = new Float32Array(c.floatsPerTensor);
      for (let i = 0; i < data.length; i++) data[i] = Math.sin(i + t);
      return { dtype: "float32", shape: [c.floatsPerTensor], data };
    });
  }
  const session = graph.session();
  return session;
};

const rawWrite = async (path: string, snapshot: ReadonlyMap<string, TensorValue>): Promise<void> => {
  const fh = await open(path, "w");
  try {
    let pos = 0;
    for (const t of snapshot.values()) {
      const d = t.data as Float32Array;
      const { bytesWritten } = await fh.write(new Uint8Array(d.buffer, d.byteOffset, d.byteLength), 0, d.byteLength, pos);
      pos += bytesWritten;
    }
    await fh.sync();
  } finally {
    await fh.close();
  }
};

const runCase = async (c: Case): Promise<Record<string, number>> => {
  const dir = await mkdtemp(join(tmpdir(), "ms-ckpt-bench-"));
  try {
    const session = makeStore(c);
    await session.variables.initialize();
    const store = session.variables;
    const manager = await CheckpointManager.create({ directory: join(dir, "ckpts"), maxToKeep: 2, logger: silentLogger });
    const async = new AsyncCheckpointer(manager, { logger: silentLogger });
    const saver = new BundleSaver();
    const s = { syncSaveMs: [], snapshotMs: [], asyncStallMs: [], asyncLoopMaxGapMs: [], asyncTotalMs: [], restoreMs: [], rawWriteFsyncMs: [], rawReadMs: [] } as Record<string, number[]>;
    let n = 0;
    let fileFsyncs = 0;
    let dirFsyncs = 0;
    for (let rep = 0; rep < c.reps + 1; rep++) {
      const record = rep > 0; // the first round warms up
      let t = process.hrtime.bigint();
      const snapshot = store.snapshot();
      const snapMs = elapsedMs(t);

      const files0 = syncCounters.files;
      const dirs0 = syncCounters.directories;
      t = process.hrtime.bigint();
      const path = (await manager.save(snapshot, { checkpointNumber: ++n })) as string;
      const syncMs = elapsedMs(t);
      if (record) {
        fileFsyncs += syncCounters.files - files0;
        dirFsyncs += syncCounters.directories - dirs0;
      }

      t = process.hrtime.bigint();
      await rawWrite(join(dir, "raw.bin"), snapshot);
      const rawW = elapsedMs(t);

      t = process.hrtime.bigint();
      await saver.restore(path);
      const restore = elapsedMs(t);

      t = process.hrtime.bigint();
      await readFile(dataPath(path));
      const rawR = elapsedMs(t);

      // Async: a training loop of setImmediate ticks keeps running while the save persists.
      let maxGap = 0;
      let running = true;
      let last = process.hrtime.bigint();
      const ticker = (async () => {
        while (running) {
          await new Promise<void>((r) => setImmediate(r));
          const now = process.hrtime.bigint();
          maxGap = Math.max(maxGap, Number(now - last) / 1e6);
          last = now;
        }
      })();
      t = process.hrtime.bigint();
      await async.save(store, { checkpointNumber: ++n });
      const stall = elapsedMs(t);
      last = process.hrtime.bigint();
      await async.waitForPending();
      const total = elapsedMs(t);
      running = false;
      await ticker;

      if (record) {
        s["snapshotMs"]?.push(snapMs);
        s["syncSaveMs"]?.push(syncMs);
        s["rawWriteFsyncMs"]?.push(rawW);
        s["restoreMs"]?.push(restore);
        s["rawReadMs"]?.push(rawR);
        s["asyncStallMs"]?.push(stall);
        s["asyncLoopMaxGapMs"]?.push(maxGap);
        s["asyncTotalMs"]?.push(total);
      }
    }
    await async.close();
    const med = Object.fromEntries(Object.entries(s).map(([k, v]) => [k, median(v)])) as Record<string, number>;
    const out: Record<string, number> = {};
    for (const [k, v] of Object.entries(med)) out[k] = round(v, 2);
    out["bytes"] = c.tensors * c.floatsPerTensor * 4;
    out["reps"] = c.reps;
    out["fileFsyncsPerSave"] = round(fileFsyncs / c.reps, 2);
    out["dirFsyncsPerSave"] = round(dirFsyncs / c.reps, 2);
    out["asyncStallOverSyncSave"] = round((med["asyncStallMs"] as number) / (med["syncSaveMs"] as number), 3);
    out["asyncStallOverSyncSavePlusSnapshot"] = round(
      (med["asyncStallMs"] as number) / ((med["syncSaveMs"] as number) + (med["snapshotMs"] as number)),
      3,
    );
    out["syncSaveOverRawWriteFsync"] = round((med["syncSaveMs"] as number) / (med["rawWriteFsyncMs"] as number), 3);
    out["restoreOverRawRead"] = round((med["restoreMs"] as number) / (med["rawReadMs"] as number), 3);
    console.log(c.label, JSON.stringify(out));
    return out;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
};

export default async (): Promise<Record<string, unknown>> => {
  const results: Record<string, unknown> = {};
  for (const c of CASES) results[c.label] = await runCase(c);
  return {
    targets: {
      asyncStallOverSyncSave: "<= 0.10 at 100MB",
      syncSaveOverRawWriteFsync: "<= 1.4",
      restoreOverRawRead: "<= 1.2",
    },
    ...results,
  };
};
