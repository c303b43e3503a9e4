/**
 * The TensorFlow.js session as one replica of a synchronous data-parallel group (the
 * MultiWorkerMirroredStrategy model): 3 in-process ranks over TcpCollective on loopback, each on
 * its shard, against a single session trained on the concatenated shards; mismatched models;
 * a NaN on one rank; the stop vote `run` uses on a preemption; a group that re-forms its ring
 * after losing a rank (src/runtime/replicaGroup.ts): a fresh rank takes rank 0's live state.
 */
import * as tf from "@tensorflow/tfjs";
import { afterEach, describe, expect, it } from "vitest";

import { buildModel, classifierLoss, NUM_CLASSES } from "../../examples/tfjs-classifier-data.js";
import { NanTensorHook } from "../../hooks/index.js";
import { ReplicaGroup } from "../../src/runtime/replicaGroup.js";
import { TcpCollective } from "../../src/cluster/collective/index.js";
import type { Collective } from "../../src/session/Collective.js";
import { InvalidArgumentError, NanLossDuringTrainingError } from "../../src/errors.js";
import { silentLogger } from "../../src/Logger.js";
import { withSession } from "../../src/pipeline/MonitoredSession.js";
import { tensor } from "../../src/session/Tensor.js";
import { InMemoryDataSource, tfjsSession, type TfjsDataSource, type TfjsSession } from "../../src/tfjs/index.js";
import { bits } from "../util/tensorBits.js";
import { dataset, train } from "../util/tfjsSessions.js";

tf.enableProdMode();

const RANKS = 3;
const BATCH = 16; // per rank: global batch 48, 3 steps an epoch of the 180 examples
const STEPS = 8;
/** Relative tolerance against the single session (see the test). */
const RELATIVE_TOLERANCE = 1e-5;

const open: TcpCollective[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((c) => c.close()));
});

/** `RANKS` TcpCollectives on loopback, connected. */
const group = async (): Promise<TcpCollective[]> => {
  const ranks = Array.from(
    { length: RANKS },
    (_, rank) => new TcpCollective({ rank, addresses: Array.from({ length: RANKS }, () => "127.0.0.1:0"), logger: silentLogger, collectiveTimeoutSecs: 30 }),
  );
  open.push(...ranks);
  const addresses = await Promise.all(ranks.map((c) => c.listen()));
  await Promise.all(ranks.map((c) => c.connect(addresses)));
  return ranks;
};

const dataOptions = { xs: dataset.xs, ys: dataset.ys, batchSize: BATCH, seed: 7 };

/** A data source without the optional `mark()`: the session falls back to `state()` and `restore()`. */
const withoutMark = (source: TfjsDataSource): TfjsDataSource => ({
  next: () => source.next(),
  stateNames: () => source.stateNames(),
  state: () => source.state(),
  restore: (state) => source.restore(state),
});

/** An initialized replica on rank `c.rank`'s shard. */
const replica = async (c: Collective, model: tf.LayersModel = buildModel(1), markable = true): Promise<TfjsSession> => {
  const data = new InMemoryDataSource({ ...dataOptions, shard: { index: c.rank, count: RANKS } });
  const s = await tfjsSession({
    model,
    optimizer: tf.train.adam(0.02),
    data: markable ? data : withoutMark(data),
    lossFn: classifierLoss,
    collective: c,
  });
  await s.variables.initialize();
  return s;
};

/** A 2 → hidden → 3 classifier, for a model that differs from the example's. */
const otherModel = (hidden: number): tf.Sequential =>
  tf.sequential({ layers: [tf.layers.dense({ inputShape: [2], units: hidden, activation: "relu" }), tf.layers.dense({ units: NUM_CLASSES })] });

const weightsOf = (s: TfjsSession): Float32Array[] => s.model.getWeights().map((w) => w.dataSync() as Float32Array);

describe("TfjsSession with a collective (synchronous data parallelism)", () => {
  it("keeps 3 replicas bit-identical (weights, Adam's state, step, data position) and equal to one session on the global batch", async () => {
    const collectives = await group();
    // Rank 2 starts from other weights: the first step gives it the chief's...
    const sessions = await Promise.all(collectives.map((c) => replica(c, buildModel(c.rank === 2 ? 99 : 1))));
    // ... and another global step, restored: the chief's step is broadcast with the weights.
    await sessions[2]?.variables.restore(new Map([["global_step", tensor("int64", [], BigInt64Array.of(5n))]]));
    const losses = await Promise.all(sessions.map((s) => train(s, STEPS - 2)));
    // No tensor leaks per replicated step (Adam's slots exist by now).
    const tensors = tf.memory().numTensors;
    const last = await Promise.all(sessions.map((s) => train(s, 2)));
    expect(tf.memory().numTensors).toBe(tensors);
    losses.forEach((l, i) => l.push(...(last[i] as number[])));

    const snapshots = sessions.map((s) => bits(s.variables.snapshot()));
    expect(Object.keys(snapshots[0] as object)).toContain("optimizer/slot_4/0_dense/kernel/v");
    for (const snap of snapshots.slice(1)) expect(snap).toEqual(snapshots[0]);
    for (const l of losses.slice(1)) expect(l).toEqual(losses[0]); // the global mean loss, same bits
    expect(sessions[0]?.variables.snapshot().get("global_step")?.data[0]).toBe(BigInt(STEPS));

    // The single-process reference: the same global batches (the shards concatenated in rank
    // order), one session. Not bit-exact: its gradient is the mean over 48 examples in one sum,
    // the replicas' the mean of 3 means of 16 (float32 rounding differs with summation order;
    // measured worst after 8 steps: 6e-8 relative, about one float32 ulp).
    const single = await tfjsSession({
      model: buildModel(1),
      optimizer: tf.train.adam(0.02),
      data: InMemoryDataSource.concatenatedShards(dataOptions, RANKS),
      lossFn: classifierLoss,
    });
    await single.variables.initialize();
    const singleLosses = await train(single, STEPS);
    const mine = weightsOf(sessions[0] as TfjsSession);
    const ref = weightsOf(single);
    let worst = 0;
    ref.forEach((r, i) => r.forEach((v, j) => (worst = Math.max(worst, Math.abs(v - ((mine[i] as Float32Array)[j] as number)) / Math.max(1, Math.abs(v))))));
    expect(worst).toBeLessThanOrEqual(RELATIVE_TOLERANCE);
    singleLosses.forEach((l, i) => expect(Math.abs(l - ((losses[0] as number[])[i] as number))).toBeLessThanOrEqual(RELATIVE_TOLERANCE * Math.max(1, Math.abs(l))));
    // The replicas did learn something (the test is not comparing untouched weights).
    expect((losses[0] as number[])[STEPS - 1]).toBeLessThan((losses[0] as number[])[0] as number);
    // A replica's step waits for its peers: runMaybeSync answers with a promise, every step.
    const next = sessions.map((s) => s.runMaybeSync("train"));
    for (const p of next) expect(p).toBeInstanceOf(Promise);
    expect(new Set(await Promise.all(next)).size).toBe(1);
  });

  it("rejects mismatched models on every rank before step 1, naming the worker and both shapes", async () => {
    const collectives = await group();
    const sessions = await Promise.all(collectives.map((c) => replica(c, c.rank === 1 ? otherModel(8) : buildModel(1))));
    const before = sessions.map((s) => weightsOf(s));
    const errors = await Promise.all(sessions.map((s) => s.run("train").then(() => undefined, (e: unknown) => e as Error)));
    for (const e of errors) {
      expect(e).toBeInstanceOf(InvalidArgumentError);
      expect(e?.message).toMatch(
        /The replicas' models differ: rank 1 \(\/job:worker\/replica:0\/task:1\) has model\/0_dense\/kernel float32\[2, 8\] where rank 0 \(\/job:worker\/replica:0\/task:0\) has float32\[2, 16\]/,
      );
    }
    sessions.forEach((s, i) => {
      expect(s.variables.snapshot().get("global_step")?.data[0]).toBe(0n);
      expect(weightsOf(s)).toEqual(before[i]);
    });
    // The group stays failed: a retry raises the same error, without a collective.
    await expect(sessions[0]?.run("train")).rejects.toThrow(/The replicas' models differ/);
  });

  it("refuses a data source sharded for another number of ranks", async () => {
    const [c] = await group();
    await expect(
      tfjsSession({
        model: buildModel(1),
        optimizer: tf.train.adam(0.02),
        data: new InMemoryDataSource({ ...dataOptions, shard: { index: 0, count: 2 } }),
        lossFn: classifierLoss,
        collective: c as TcpCollective,
      }),
    ).rejects.toThrow(/the data source has 2 shards but the collective 3 ranks/);
  });

  it("makes a NaN on one rank stop every rank at the same step (NanTensorHook)", async () => {
    const collectives = await group();
    const sessions = await Promise.all(collectives.map((c) => replica(c)));
    const NAN_STEP = 2;
    const poisoned = { xs: tf.fill([BATCH, 2], NaN), ys: tf.zeros([BATCH], "int32") };
    const outcomes = await Promise.all(
      sessions.map(async (sess, rank) => {
        const lossesSeen: number[] = [];
        const error = await withSession(
          { sessionCreator: { createSession: () => Promise.resolve(sess) }, hooks: [new NanTensorHook({ lossTensor: "loss" })], logger: silentLogger },
          async (s) => {
            for (let step = 0; step < 5; step++) {
              const feeds = rank === 1 && step === NAN_STEP ? poisoned : {};
              lossesSeen.push((await s.run("train", feeds)) as number);
            }
          },
        ).then(() => undefined, (e: unknown) => e);
        return { error, lossesSeen, step: sess.variables.snapshot().get("global_step")?.data[0] };
      }),
    );
    tf.dispose([poisoned.xs, poisoned.ys]);
    for (const o of outcomes) {
      expect(o.error).toBeInstanceOf(NanLossDuringTrainingError);
      expect(o.lossesSeen).toHaveLength(NAN_STEP); // steps 0 and 1 finished; step 2 raised
      expect(o.lossesSeen.every(Number.isFinite)).toBe(true);
      expect(o.step).toBe(BigInt(NAN_STEP + 1));
    }
  });

  it("carries a stop vote in the step's all-reduce: after one rank asks, every rank's group agrees after the same step", async () => {
    const collectives = await group();
    const groups = collectives.map((c) => {
      const g = new ReplicaGroup(c.rank, ["/job:chief/replica:0/task:0", "/job:worker/replica:0/task:0", "/job:worker/replica:0/task:1"]);
      g.attach(c);
      return g;
    });
    const sessions = await Promise.all(groups.map(async (g, rank) => {
      const s = await tfjsSession({ model: buildModel(1), optimizer: tf.train.adam(0.02), data: new InMemoryDataSource({ ...dataOptions, shard: { index: rank, count: RANKS } }), lossFn: classifierLoss, collective: g });
      await s.variables.initialize();
      return s;
    }));
    const agreedAt: (number | undefined)[] = [undefined, undefined, undefined];
    groups.forEach((g, rank) => g.onStopAgreed(() => (agreedAt[rank] = Number(sessions[rank]?.variables.snapshot().get("global_step")?.data[0]))));
    await Promise.all(sessions.map((s) => train(s, 2)));
    expect(groups.map((g) => [g.votes, g.stopAgreed])).toEqual([[true, false], [true, false], [true, false]]);
    expect(agreedAt).toEqual([undefined, undefined, undefined]);
    // Rank 2 (a worker) got a termination notice: its next step carries the vote.
    groups[2]?.requestStop();
    await Promise.all(sessions.map((s) => train(s, 1)));
    expect(groups.map((g) => g.stopAgreed)).toEqual([true, true, true]);
    // Seen after the step's update: every rank at global step 3.
    expect(agreedAt).toEqual([3, 3, 3]);
    // The vote changes nothing else: the replicas are still bit-identical.
    const snapshots = sessions.map((s) => bits(s.variables.snapshot()));
    for (const snap of snapshots.slice(1)) expect(snap).toEqual(snapshots[0]);
  });
  it("a plain TcpCollective carries the stop vote too: a custom data-parallel loop stops every rank after the same step", async () => {
    const collectives = await group();
    const sessions = await Promise.all(collectives.map((c) => replica(c, buildModel(1))));
    await Promise.all(sessions.map((s) => train(s, 2)));
    expect(collectives.map((c) => [c.votes, c.stopAgreed])).toEqual([[true, false], [true, false], [true, false]]);
    collectives[1]?.requestStop();
    // Each rank trains until its collective says the ranks agreed: they all stop after one more step.
    const steps = await Promise.all(
      sessions.map(async (s, rank) => {
        let n = 0;
        while (!(collectives[rank] as TcpCollective).stopAgreed && n < 5) {
          await train(s, 1);
          n += 1;
        }
        return n;
      }),
    );
    expect(steps).toEqual([1, 1, 1]);
  });

  it.each([
    ["mark()", true],
    ["state() and restore(), without mark()", false],
  ])("a group that re-forms its ring after losing rank 2: a fresh rank 2 joins, every rank takes rank 0's live state (weights, Adam's slots, step, data position) and they train on bit-identical; the failed step's batch is given back (data source: %s)", async (_, markable) => {
    const tasks = ["/job:chief/replica:0/task:0", "/job:worker/replica:0/task:0", "/job:worker/replica:0/task:1"];
    const first = await group();
    let second: Promise<TcpCollective[]> | undefined;
    // The next ring, built once every rank asks for it (here: in-process, at once).
    const nextRing = (rank: number) => async (): Promise<TcpCollective> => ((await (second ??= group()))[rank] as TcpCollective);
    const groups = first.map((c) => {
      const g = new ReplicaGroup(c.rank, tasks);
      g.attach(c);
      g.rejoinWith(nextRing(c.rank));
      return g;
    });
    const sessions = await Promise.all(groups.map((g) => replica(g, buildModel(1), markable)));
    await Promise.all(sessions.map((s) => train(s, 3)));
    // Rank 2 is lost: its ring closes, its session is gone.
    await first[2]?.close();
    // A new process for rank 2: other initial weights, no optimizer slots, step 0, its own data position.
    const fresh = new ReplicaGroup(2, tasks);
    fresh.attach(await nextRing(2)());
    const restarted = await replica(fresh, buildModel(99), markable);
    const survivors = sessions.slice(0, 2);
    const losses = await Promise.all([...survivors, restarted].map((s) => train(s, 3)));
    for (const l of losses.slice(1)) expect(l).toEqual(losses[0]);
    const snapshots = [...survivors, restarted].map((s) => bits(s.variables.snapshot()));
    expect(Object.keys(snapshots[0] as object)).toContain("optimizer/slot_4/0_dense/kernel/v");
    for (const snap of snapshots.slice(1)) expect(snap).toEqual(snapshots[0]);
    // The failed step applied nothing: 3 steps, then 3 more...
    expect(restarted.variables.snapshot().get("global_step")?.data[0]).toBe(6n);
    // ... and used up no batch: the step ran again on the same batch, so every rank's data
    // position is that of 6 batches.
    const reference = new InMemoryDataSource({ ...dataOptions, shard: { index: 0, count: RANKS } });
    for (let i = 0; i < 6; i++) {
      const b = reference.next();
      tf.dispose([b.xs, b.ys] as tf.Tensor[]);
    }
    const position = bits(new Map([...reference.state()].map(([name, t]) => [`data/${name}`, t])));
    for (const snap of snapshots) expect(Object.fromEntries(Object.entries(snap).filter(([name]) => name.startsWith("data/")))).toEqual(position);
    expect(groups.slice(0, 2).map((g) => g.state)).toEqual(["ready", "ready"]);
  });
});
