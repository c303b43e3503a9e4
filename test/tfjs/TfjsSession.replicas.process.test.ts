/**
 * Data-parallel replicas as real processes (test/fixtures/tfjs/replica.ts): 3 ranks, each with a
 * TcpCollective on loopback and a TfjsSession on its shard, train 20 steps. Every replica ends
 * with the same bits, and the same seed gives the same bits again; a rank with another model
 * makes every rank exit 2 naming it. Outcomes only, never timings.
 */
import { describe, expect, it } from "vitest";

import { useTempDirs } from "../util/tempDirs.js";
import { runFixture, type FixtureRun } from "../util/runFixture.js";

const FIXTURE = "test/fixtures/tfjs/replica.ts";
const RANKS = 3;
const STEPS = 20;
/** Bound on one child: a tsx start, TensorFlow.js's load and 20 tiny steps on a loaded machine, ≥ 3×. */
const CHILD_MS = 120_000;

const tempDir = useTempDirs("tfjs-replicas-");

/** Runs the 3 ranks; `hidden(rank)` is each rank's first-layer width. */
const runGroup = async (seed: number, hidden: (rank: number) => number = () => 16): Promise<FixtureRun[]> => {
  const dir = tempDir();
  return Promise.all(
    Array.from({ length: RANKS }, (_, r) => runFixture(FIXTURE, [String(r), String(RANKS), dir, String(seed), String(STEPS), String(hidden(r))], CHILD_MS)),
  );
};

const line = (run: FixtureRun, prefix: string): string | undefined =>
  run.output
    .split("\n")
    .find((l) => l.startsWith(`${prefix} `))
    ?.slice(prefix.length + 1);

describe("TfjsSession replicas across processes", { timeout: 4 * CHILD_MS }, () => {
  it("3 processes train 20 steps on their shards: every replica has the same bits, again with the same seed, others with another", async () => {
    const first = await runGroup(5);
    for (const r of first) expect({ code: r.code, killed: r.killed }, r.output).toEqual({ code: 0, killed: false });
    const digests = first.map((r) => line(r, "DIGEST"));
    expect(digests[0]).toMatch(/^[0-9a-f]{64}$/);
    expect(new Set(digests).size).toBe(1);
    expect(new Set(first.map((r) => line(r, "LOSS"))).size).toBe(1);

    const again = await runGroup(5);
    expect(again.map((r) => line(r, "DIGEST"))).toEqual(digests);

    // Another shuffle seed trains on other batches: the digest is not a constant.
    const other = await runGroup(6);
    expect(line(other[0] as FixtureRun, "DIGEST")).not.toBe(digests[0]);
  });

  it("a rank with another model: every rank exits 2 before step 1, naming the worker and both shapes", async () => {
    const runs = await runGroup(5, (r) => (r === 2 ? 8 : 16));
    for (const r of runs) {
      expect(r.code, r.output).toBe(2);
      expect(line(r, "ERROR")).toMatch(
        /^ModelMismatchError The replicas' models differ: rank 2 \(\/job:worker\/replica:0\/task:2\) has model\/0_dense\/kernel float32\[2, 8\] where rank 0 \(\/job:worker\/replica:0\/task:0\) has float32\[2, 16\]/,
      );
    }
  });
});
