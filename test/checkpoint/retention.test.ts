/**
 * Retention as a value (`Retention`): TensorFlow's `max_to_keep` and
 * `keep_checkpoint_every_n_hours` as policies, their union, and the manager applying the same
 * policy to its options. The pair is checked against a transcription of TensorFlow's sweep
 * (`CheckpointManager._sweep`: oldest first while more than `max_to_keep` are managed, each one
 * swept preserved when it is `n` hours past the last preserved) on seeded random histories.
 */
import { describe, expect, it } from "vitest";

import { CheckpointManager, Retention, type ManagedCheckpoint, type RetentionContext } from "../../src/checkpoint/index.js";
import { ValueError } from "../../src/errors.js";
import { Graph } from "../../src/session/Graph.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { seededRandom } from "../util/seed.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-retention-");

/** TensorFlow's sweep, step by step: what stays managed, what is preserved, the last preserved time. */
const tensorflowSweep = (managed: readonly ManagedCheckpoint[], maxToKeep: number | null, hours: number | null, lastPreserved: number) => {
  const queue = [...managed];
  const preserve: string[] = [];
  let last = lastPreserved;
  if (maxToKeep !== null) {
    while (queue.length > maxToKeep) {
      const c = queue.shift() as ManagedCheckpoint;
      if (hours !== null && c.timestamp - hours * 3600 >= last) {
        last = c.timestamp;
        preserve.push(c.path);
      }
    }
  }
  return { keep: queue.map((c) => c.path), preserve };
};

const history = (next: () => number, n: number): ManagedCheckpoint[] => {
  let ts = 1_700_000_000;
  return Array.from({ length: n }, (_, i) => {
    ts += Math.floor(next() * 3 * 3600);
    return { path: `/run/ckpt-${i + 1}`, timestamp: ts, checkpointNumber: i + 1 };
  });
};

describe("Retention: the built-in policies as values", () => {
  it("Retention.tensorflow decides exactly as TensorFlow's sweep, on 2,000 seeded histories", () => {
    const { next } = seededRandom("retention histories");
    for (let i = 0; i < 2000; i++) {
      const cps = history(next, 1 + Math.floor(next() * 12));
      const maxToKeep = next() < 0.15 ? null : 1 + Math.floor(next() * 5);
      const hours = next() < 0.4 ? null : 0.5 + next() * 4;
      const context: RetentionContext = { now: (cps.at(-1) as ManagedCheckpoint).timestamp, latest: (cps.at(-1) as ManagedCheckpoint).path, lastPreservedTimestamp: cps[0]!.timestamp - Math.floor(next() * 5 * 3600) };
      const ours = Retention.tensorflow({ maxToKeep, keepCheckpointEveryNHours: hours })(cps, context);
      const theirs = tensorflowSweep(cps, maxToKeep, hours, context.lastPreservedTimestamp);
      expect({ keep: ours.keep, preserve: ours.preserve ?? [] }, `history ${i}`).toEqual(theirs);
    }
  });

  it("union keeps what any keeps and preserves what any preserves and none keeps; descriptions say what each is", () => {
    const cps = history(() => 0.5, 6);
    const context: RetentionContext = { now: 0, latest: cps[5]!.path, lastPreservedTimestamp: 0 };
    const even = Object.assign((c: readonly ManagedCheckpoint[]) => ({ keep: c.filter((x) => (x.checkpointNumber ?? 1) % 2 === 0).map((x) => x.path), preserve: [c[0]!.path, c[1]!.path] }), { description: "the even ones" });
    const policy = Retention.union(Retention.maxToKeep(2), even);
    const d = policy(cps, context);
    expect([...d.keep].sort()).toEqual(["/run/ckpt-2", "/run/ckpt-4", "/run/ckpt-5", "/run/ckpt-6"]);
    expect(d.preserve).toEqual(["/run/ckpt-1"]);
    expect(policy.description).toBe("the 2 newest or the even ones");
    expect(Retention.keepCheckpointEveryNHours(2, Retention.maxToKeep(null)).description).toBe("keep all, and one per 2 h of the rest");
    expect(Retention.union((c) => ({ keep: c.map((x) => x.path) })).description).toBe("a custom policy");
  });

  it("bad settings are one-line ValueErrors", () => {
    expect(() => Retention.maxToKeep(0)).toThrow(ValueError);
    expect(() => Retention.maxToKeep(1.5)).toThrow("Retention.maxToKeep: a positive integer or null (keep all), got 1.5");
    expect(() => Retention.keepCheckpointEveryNHours(-1, Retention.maxToKeep(1))).toThrow("Retention.keepCheckpointEveryNHours: a positive number of hours, got -1");
    expect(() => Retention.keepCheckpointEveryNHours(Number.POSITIVE_INFINITY, Retention.maxToKeep(1))).toThrow(ValueError);
  });

  it("a manager's maxToKeep and keepCheckpointEveryNHours are that policy; a retentionPolicy given instead decides on disk", async () => {
    const clock = new VirtualClock();
    const fromOptions = await CheckpointManager.create({ directory: tempDir(), maxToKeep: 2, keepCheckpointEveryNHours: 1, clock });
    expect((fromOptions.retentionPolicy as { description?: string }).description).toBe("the 2 newest, and one per 1 h of the rest");
    await fromOptions.close();
    const dir = tempDir();
    const manager = await CheckpointManager.create({ directory: dir, retentionPolicy: Retention.union(Retention.maxToKeep(1), (c) => ({ keep: c.filter((x) => x.checkpointNumber === 1).map((x) => x.path) })), clock });
    const graph = new Graph();
    graph.variable<Float32Array>("w", () => new Float32Array(2));
    const s = graph.session();
    await s.variables.initialize();
    for (let i = 0; i < 4; i++) {
      await manager.save(s.variables);
      await clock.advanceSecs(60);
    }
    expect(manager.checkpoints.map((p) => p.slice(dir.length + 1))).toEqual(["ckpt-1", "ckpt-4"]);
    await manager.close();
  });
});
