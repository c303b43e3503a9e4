/**
 * TcpCollective at the big end, with real processes on loopback: 4 ranks and 64 MB buffers
 * (16 Mi float32). The CI-size suite (test/cluster/collective/) covers {1, 1 Ki, 1 Mi, 16 Mi}
 * elements × {2, 3} ranks with every fault; this adds the sizes the issue puts in the integration
 * project. Outcomes and names only, never timings.
 */
import { createHash } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { killRanks, type Rank, startRanks, task } from "../cluster/collective/rankProcesses.js";
import { rankInput, ringReferenceSha256 } from "../util/ringReference.js";

const RANKS = 4;
const ELEMENTS = 16 * 1024 * 1024; // 64 MB of float32, a segment of 16 MB per rank
const ROOT = 2;
/** Bound on any one wait: 4 tsx children starting, or one 64 MB collective, on a loaded 2-core machine (≥ 3×). */
const WAIT_MS = 180_000;

afterEach(killRanks);

const lineOf = async (r: Rank, tag: string): Promise<string> => (await r.waitFor(new RegExp(`^(${tag} |ERROR )`))).replace(/^ERROR /, "ERROR: ");

describe("TcpCollective at 4 ranks × 64 MB (real processes)", { timeout: 3 * WAIT_MS }, () => {
  it("sum and mean are bit-identical on every rank and equal the ring-order reference; broadcast gives the root's bits", async () => {
    const ranks = await startRanks("test/fixtures/collective/bigRank.ts", RANKS, (rank) => [String(rank), String(RANKS), String(ELEMENTS), String(ROOT)], WAIT_MS);
    // The references are computed here, a block at a time, while the ranks work.
    const sum = ringReferenceSha256(RANKS, ELEMENTS, 1, "sum");
    const mean = ringReferenceSha256(RANKS, ELEMENTS, 2, "mean");
    const root = rankInput(Float32Array, ELEMENTS, ROOT, 3);
    const broadcast = createHash("sha256").update(Buffer.from(root.buffer)).digest("hex");
    for (const r of ranks) {
      expect(await lineOf(r, "SUM")).toBe(`SUM ${sum}`);
      expect(await lineOf(r, "MEAN")).toBe(`MEAN ${mean}`);
      expect(await lineOf(r, "BROADCAST")).toBe(`BROADCAST ${broadcast}`);
      const stats = JSON.parse((await r.waitFor(/^STATS /)).slice("STATS ".length)) as { maxBufferedChunksPerPeer: number; bytesReceived: number };
      expect(stats.maxBufferedChunksPerPeer).toBeLessThanOrEqual(2);
      // Each all-reduce receives 2(N−1)/N of the buffer; the broadcast sends it down the ring once (the root receives nothing).
      expect(stats.bytesReceived).toBe(2 * ((2 * (RANKS - 1)) / RANKS) * ELEMENTS * 4 + (r === ranks[ROOT] ? 0 : ELEMENTS * 4));
    }
    expect(await Promise.all(ranks.map((r) => r.exited))).toEqual([0, 0, 0, 0]);
  });

  it("SIGKILL of rank 2 mid-all-reduce of 64 MB: ranks 0, 1 and 3 raise UnavailableError naming its task", async () => {
    const ranks = await startRanks(
      "test/fixtures/collective/rank.ts",
      RANKS,
      (rank) => [String(rank), String(RANKS), String(ELEMENTS), "1000000", "nogate", "120"],
      WAIT_MS,
    );
    await Promise.all(ranks.map((r) => r.waitFor(/^ROUND 1 /)));
    // Rank 2 has entered its second all-reduce (the counter counts calls when they start).
    await ranks[2]!.waitFor(/^STATS .*"collectives":2,/);
    ranks[2]!.child.kill("SIGKILL");
    for (const r of [ranks[0]!, ranks[1]!, ranks[3]!]) {
      const line = await r.waitFor(/^ERROR /);
      expect(line).toMatch(/^ERROR UnavailableError /);
      expect(line).toContain(`rank 2 (${task(2)})`);
      expect(await r.exited).toBe(3);
    }
  });
});
