import * as tf from "@tensorflow/tfjs";
import { describe, expect, it } from "vitest";

import { InvalidArgumentError, OutOfRangeError, ValueError } from "../../src/errors.js";
import type { TensorValue } from "../../src/session/Tensor.js";
import { InMemoryDataSource, type TfjsBatch } from "../../src/tfjs/index.js";

tf.env().set("IS_TEST", true);

const N = 10;
const xs = Array.from({ length: N }, (_, i) => [i, 100 + i]);
const ys = Array.from({ length: N }, (_, i) => i);

/** The example ids of a batch (ys holds the id), disposing its tensors. */
const ids = (b: TfjsBatch): number[] => {
  const out = Array.from((b.ys as tf.Tensor).dataSync());
  tf.dispose([b.xs as tf.Tensor, b.ys as tf.Tensor]);
  return out;
};

const take = (src: InMemoryDataSource, batches: number): number[][] => Array.from({ length: batches }, () => ids(src.next()));

describe("InMemoryDataSource", () => {
  it("serves every example once per epoch, in a new seeded order each epoch, with the last batch smaller", () => {
    const src = new InMemoryDataSource({ xs, ys, batchSize: 4, seed: 3 });
    const epoch1 = take(src, 3);
    const epoch2 = take(src, 3);
    expect(epoch1.map((b) => b.length)).toEqual([4, 4, 2]);
    expect(epoch1.flat().sort((a, b) => a - b)).toEqual(ys);
    expect(epoch2.flat().sort((a, b) => a - b)).toEqual(ys);
    expect(epoch2.flat()).not.toEqual(epoch1.flat());
    // Same seed, same sequence; another seed, another.
    expect(take(new InMemoryDataSource({ xs, ys, batchSize: 4, seed: 3 }), 6)).toEqual([...epoch1, ...epoch2]);
    expect(take(new InMemoryDataSource({ xs, ys, batchSize: 4, seed: 4 }), 3).flat()).not.toEqual(epoch1.flat());
  });

  it("keeps xs rows with their ys", () => {
    const b = new InMemoryDataSource({ xs, ys, batchSize: 5, seed: 1 }).next();
    const x = (b.xs as tf.Tensor).arraySync() as number[][];
    const y = Array.from((b.ys as tf.Tensor).dataSync());
    expect(x).toEqual(y.map((i) => [i, 100 + i]));
    tf.dispose([b.xs as tf.Tensor, b.ys as tf.Tensor]);
  });

  it("serves in order without shuffle, drops the remainder when asked, and throws OutOfRangeError when finite", () => {
    const src = new InMemoryDataSource({ xs, ys, batchSize: 4, shuffle: false, epochs: 2, dropRemainder: true });
    expect(take(src, 4)).toEqual([
      [0, 1, 2, 3],
      [4, 5, 6, 7],
      [0, 1, 2, 3],
      [4, 5, 6, 7],
    ]);
    expect(() => src.next()).toThrow(OutOfRangeError);
    expect(() => src.next()).toThrow(OutOfRangeError);
  });

  it("resumes from a saved position exactly, across an epoch boundary", () => {
    const a = new InMemoryDataSource({ xs, ys, batchSize: 3, seed: 11 });
    take(a, 5); // mid second epoch
    const saved = a.state();
    const expected = take(a, 9);
    const b = new InMemoryDataSource({ xs, ys, batchSize: 3, seed: 999 });
    b.restore(saved);
    expect(take(b, 9)).toEqual(expected);
    expect([...saved.keys()]).toEqual(["epoch", "offset", "rng", "permutation"]);
  });

  it("mark() goes back to the marked position, across epoch boundaries and a restore in between", () => {
    const a = new InMemoryDataSource({ xs, ys, batchSize: 3, seed: 11 });
    take(a, 3); // the last batch of the first epoch is next
    const back = a.mark();
    const position = a.state();
    const expected = take(a, 9); // three epochs further
    back();
    expect(a.state()).toEqual(position);
    expect(take(a, 9)).toEqual(expected);
    // A restore to another position in between changes nothing the mark holds.
    const again = a.mark();
    const later = take(a, 2);
    a.restore(position);
    again();
    expect(take(a, 2)).toEqual(later);
  });

  it("state() is a deep copy", () => {
    const src = new InMemoryDataSource({ xs, ys, batchSize: 3, seed: 11 });
    const s = src.state();
    (s.get("permutation")?.data as Int32Array).fill(0);
    expect(() => src.restore(src.state())).not.toThrow();
    expect(take(src, 4).flat().sort((x, y) => x - y)).toEqual(ys);
  });

  it("rejects positions that do not fit, changing nothing", () => {
    const src = new InMemoryDataSource({ xs, ys, batchSize: 3, seed: 11, epochs: 3 });
    const good = src.state();
    const expected = take(new InMemoryDataSource({ xs, ys, batchSize: 3, seed: 11, epochs: 3 }), 2);
    const with_ = (name: string, t: TensorValue) => new Map([...good, [name, t]]);
    const bad: [Map<string, TensorValue>, RegExp][] = [
      [with_("permutation", { dtype: "int32", shape: [N], data: new Int32Array(N) }), /not a permutation/],
      [with_("permutation", { dtype: "int32", shape: [4], data: Int32Array.of(0, 1, 2, 3) }), /int32\[10\]/],
      [with_("offset", { dtype: "int64", shape: [], data: BigInt64Array.of(11n) }), /outside/],
      [with_("epoch", { dtype: "int64", shape: [], data: BigInt64Array.of(3n) }), /beyond the configured 3 epochs/],
      [with_("rng", { dtype: "int32", shape: [], data: Int32Array.of(1) }), /int64 scalar/],
      [with_("extra", { dtype: "int32", shape: [], data: Int32Array.of(1) }), /unknown entry "extra"/],
      [new Map([...good].filter(([k]) => k !== "rng")), /lacks "rng"/],
    ];
    for (const [state, message] of bad) {
      expect(() => src.restore(state)).toThrow(InvalidArgumentError);
      expect(() => src.restore(state)).toThrow(message);
    }
    expect(take(src, 2)).toEqual(expected);
  });

  it("rejects bad configuration", () => {
    expect(() => new InMemoryDataSource({ xs, ys: [1, 2], batchSize: 2 })).toThrow(ValueError);
    expect(() => new InMemoryDataSource({ xs, ys, batchSize: 0 })).toThrow(/batchSize/);
    expect(() => new InMemoryDataSource({ xs, ys, batchSize: 2, epochs: 0 })).toThrow(/epochs/);
    expect(() => new InMemoryDataSource({ xs: [[1, 2], [3]], ys: [0, 1], batchSize: 2 })).toThrow(/xs\[1\]/);
    expect(() => new InMemoryDataSource({ xs: [], ys: [], batchSize: 2 })).toThrow(/empty/);
  });
});

describe("InMemoryDataSource shards", () => {
  const M = 26; // 2 global batches of 12 (batchSize 4 × 3 shards) per epoch, 2 examples dropped
  const sxs = Array.from({ length: M }, (_, i) => [i]);
  const sys = Array.from({ length: M }, (_, i) => i);
  const shard = (index: number, count = 3): InMemoryDataSource =>
    new InMemoryDataSource({ xs: sxs, ys: sys, batchSize: 4, seed: 5, shard: { index, count } });

  it("gives example i of the shuffled order to rank i mod N, and the reference concatenates the shards in rank order", () => {
    // The unsharded source with the global batch shows the shared shuffled order.
    const order = take(new InMemoryDataSource({ xs: sxs, ys: sys, batchSize: 12, seed: 5, dropRemainder: true }), 4);
    const ranks = [0, 1, 2].map((r) => take(shard(r), 4));
    const reference = take(InMemoryDataSource.concatenatedShards({ xs: sxs, ys: sys, batchSize: 4, seed: 5 }, 3), 4);
    for (let step = 0; step < 4; step++) {
      const global = order[step] as number[];
      for (let r = 0; r < 3; r++) expect(ranks[r]?.[step]).toEqual(global.filter((_, i) => i % 3 === r));
      expect(reference[step]).toEqual([0, 1, 2].flatMap((r) => ranks[r]?.[step]));
    }
    // Two epochs: a new shuffle, the same on every rank; the shards of an epoch are disjoint.
    expect(new Set([0, 1, 2].flatMap((r) => ranks[r]?.slice(0, 2).flat())).size).toBe(24);
    expect(order[2]).not.toEqual(order[0]);
  });

  it("keeps the global position, the same on every rank and the reference, so one checkpoint restores every shard", () => {
    const sources = [shard(0), shard(1), shard(2), InMemoryDataSource.concatenatedShards({ xs: sxs, ys: sys, batchSize: 4, seed: 5 }, 3)];
    for (const s of sources) take(s, 3);
    const states = sources.map((s) => s.state());
    for (const st of states.slice(1)) expect(st).toEqual(states[0]);
    expect((states[0]?.get("offset")?.data as BigInt64Array)[0]).toBe(12n); // epoch 1, one global batch in

    // Rank 2 restored from rank 0's (the chief's) position continues exactly as rank 2 would.
    const fresh = shard(2);
    fresh.restore(states[0] as Map<string, TensorValue>);
    expect(take(fresh, 3)).toEqual(take(sources[2] as InMemoryDataSource, 3));
  });

  it("rejects bad shards, a kept remainder, a global batch larger than the data, and a position of another layout", () => {
    expect(() => shard(3)).toThrow(ValueError);
    expect(() => shard(3)).toThrow(/shard\.index: expected an integer rank in \[0, 2\], got 3/);
    expect(() => shard(0, 0)).toThrow(/shard\.count: expected a positive integer/);
    expect(() => new InMemoryDataSource({ xs: sxs, ys: sys, batchSize: 4, shard: { index: 0, count: 3 }, dropRemainder: false })).toThrow(
      /dropRemainder: false cannot shard/,
    );
    expect(() => new InMemoryDataSource({ xs: sxs, ys: sys, batchSize: 9, shard: { index: 0, count: 3 } })).toThrow(
      /the global batch \(batchSize 9 × 3 shards\) exceeds the 26 examples/,
    );
    const unsharded = new InMemoryDataSource({ xs: sxs, ys: sys, batchSize: 5, seed: 5 });
    take(unsharded, 1);
    expect(() => shard(0).restore(unsharded.state())).toThrow(InvalidArgumentError);
    expect(() => shard(0).restore(unsharded.state())).toThrow(/"offset" 5 is not a multiple of the global batch 12/);
  });
});
