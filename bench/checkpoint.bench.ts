/**
 * Checkpoint benchmark: sync save, async-save stall, restore, against plain-fs baselines
 * measured in the same run (write + fsync, and read, of the same bytes).
 *
 * - `syncSaveMs`: `CheckpointManager.save(snapshot)`: data, index and state file(s) written to
 *   temp names and fsynced, renamed, one directory fsync, sweep (see "How a save is written" in
 *   docs/checkpoints.md): up to 1 MiB of data as one job on the checkpoint writer thread (from
 *   2026-12-02), larger from the tensors' buffers; the files' fsyncs at once either way.
 *   `fileFsyncsPerSave` / `dirFsyncsPerSave` count the fsyncs of one sync save, on either path
 *   (a breakdown, not a target).
 * - `snapshotMs`: `VariableStore.snapshot()` of a `GraphSession` (the store's deep copy).
 * - `asyncStallMs`: how long `await AsyncCheckpointer.save(store)` blocks the loop (snapshot
 *   included; for a save of up to 1 MiB, its checksums and encoding too, done when it is
 *   requested); `asyncLoopMaxGapMs`: the longest event-loop stall while the save then runs in
 *   the background (a setImmediate ticker).
 * - `restoreMs`: `BundleSaver.restore` (read + verify every CRC32C).
 * - `rawWriteFsyncMs` / `rawReadMs`: the same data bytes with `fs.open/write/sync/close` and
 *   `fs.readFile`.
 * - `noFsyncSaveMs`: the same checkpoint (TensorFlow's V2 bundle, 8-byte aligned, the two
 *   reserved tensors) written by `TensorBundleWriter` with `fsync: false`, as TensorFlow writes.
 * - `tensorflow` (100 MB only, where the cached venv of scripts/tensorflow-venv.sh exists):
 *   TensorFlow's own `tf.train.Checkpoint.write` (no fsync) and `read` of the same variables
 *   (bench/tf_checkpoint.py), in the same run.
 *
 * Equal work: every checkpoint's variables must hold exactly the bytes of the raw baseline
 * (read from its index), and TensorFlow's the same, or the benchmark throws.
 */
import { execFile, spawnSync } from "node:child_process";
import { mkdtemp, open, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { AsyncCheckpointer, BundleSaver, CheckpointManager, CREATED_AT_TENSOR, dataPath, readCheckpointInfo, STEP_TENSOR, TensorBundleWriter } from "../src/checkpoint/index.js";
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

/** The checkpoint `BundleSaver` writes, by `TensorBundleWriter` without fsync (as TensorFlow writes). */
const writeWithoutFsync = async (prefix: string, snapshot: ReadonlyMap<string, TensorValue>, step: number): Promise<void> => {
  const w = new TensorBundleWriter(prefix, { alignmentBytes: 8, fsync: false });
  for (const [name, t] of snapshot) w.add(name, t);
  w.add(STEP_TENSOR, { dtype: "int64", shape: [], data: BigInt64Array.of(BigInt(step)) });
  w.add(CREATED_AT_TENSOR, { dtype: "int64", shape: [], data: BigInt64Array.of(BigInt(Date.now())) });
  await w.finish();
};

/** The bytes of a checkpoint's variables, from its index; throws unless they are `expected`. */
const checkVariableBytes = async (prefix: string, expected: number): Promise<void> => {
  const bytes = (await readCheckpointInfo(prefix)).tensors.reduce((n, t) => n + t.sizeBytes, 0);
  if (bytes !== expected) throw new Error(`unequal work: ${prefix} holds ${bytes} bytes of variables, the baseline ${expected}`);
};

const ROOT = fileURLToPath(new URL("../", import.meta.url));

/** TensorFlow's own write and read of the case's variables (bench/tf_checkpoint.py), or why not. */
const tensorflowCase = async (c: Case, dir: string): Promise<Record<string, unknown>> => {
  const venv = spawnSync("bash", [join(ROOT, "scripts/tensorflow-venv.sh"), "--find-only"], { encoding: "utf8" });
  if (venv.status !== 0) return { measured: false, why: `no TensorFlow venv (${venv.stderr.trim().split("\n")[0] ?? "scripts/tensorflow-venv.sh --find-only failed"}): run scripts/tensorflow-venv.sh` };
  const { stdout } = await promisify(execFile)(venv.stdout.trim(), [join(ROOT, "bench/tf_checkpoint.py"), dir, String(c.tensors), String(c.floatsPerTensor), String(c.reps)], {
    maxBuffer: 16 * 1024 * 1024,
    env: { ...process.env, TF_CPP_MIN_LOG_LEVEL: "3" },
  });
  const r = JSON.parse(stdout) as { tensorflow: string; writeMs: number[]; readMs: number[]; variableBytes: number };
  const expected = c.tensors * c.floatsPerTensor * 4;
  if (r.variableBytes !== expected) throw new Error(`unequal work: TensorFlow's checkpoint holds ${r.variableBytes} bytes of variables, ours ${expected}`);
  return { measured: true, version: r.tensorflow, writeMs: round(median(r.writeMs), 2), readMs: round(median(r.readMs), 2), writeSamples: r.writeMs.map((x) => round(x, 1)), readSamples: r.readMs.map((x) => round(x, 1)) };
};

const runCase = async (c: Case): Promise<Record<string, unknown>> => {
  const dir = await mkdtemp(join(tmpdir(), "ms-ckpt-bench-"));
  try {
    const session = makeStore(c);
    await session.variables.initialize();
    const store = session.variables;
    const manager = await CheckpointManager.create({ directory: join(dir, "ckpts"), maxToKeep: 2, logger: silentLogger });
    const async = new AsyncCheckpointer(manager, { logger: silentLogger });
    const saver = new BundleSaver();
    const s = { syncSaveMs: [], noFsyncSaveMs: [], snapshotMs: [], asyncStallMs: [], asyncLoopMaxGapMs: [], asyncTotalMs: [], restoreMs: [], rawWriteFsyncMs: [], rawReadMs: [] } as Record<string, number[]>;
    const variableBytes = c.tensors * c.floatsPerTensor * 4;
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

      await checkVariableBytes(path, variableBytes);

      t = process.hrtime.bigint();
      await writeWithoutFsync(join(dir, "nofsync", "model.ckpt-1"), snapshot, n);
      const noFsync = elapsedMs(t);
      await checkVariableBytes(join(dir, "nofsync", "model.ckpt-1"), variableBytes);

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
        s["noFsyncSaveMs"]?.push(noFsync);
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
    out["noFsyncSaveOverSyncSave"] = round((med["noFsyncSaveMs"] as number) / (med["syncSaveMs"] as number), 3);
    console.log(c.label, JSON.stringify(out));
    if (c.label !== "100MB") return out;
    // TensorFlow beside ours, on the same machine in the same run (after ours: its import takes seconds).
    const tf = await tensorflowCase(c, dir);
    const versus = tf["measured"] === true
      ? {
          ourSaveOverTensorflowWrite: round(med["syncSaveMs"] as number / (tf["writeMs"] as number), 3),
          ourNoFsyncSaveOverTensorflowWrite: round(med["noFsyncSaveMs"] as number / (tf["writeMs"] as number), 3),
          ourRestoreOverTensorflowRead: round(med["restoreMs"] as number / (tf["readMs"] as number), 3),
        }
      : {};
    console.log(c.label, "tensorflow", JSON.stringify({ ...tf, ...versus }));
    return { ...out, tensorflow: tf, ...versus };
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
      ourNoFsyncSaveOverTensorflowWrite: "<= 1.0 at 100MB",
    },
    ...results,
  };
};
