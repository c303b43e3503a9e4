/**
 * TcpCollective across real processes on loopback (test/fixtures/collective/rank.ts): the ranks
 * agree on the bits and on the ring-order reference; a SIGKILLed rank is named in the others'
 * UnavailableError; a SIGSTOPped rank makes its sender wait with at most 2 chunks outstanding; a
 * partition of the link from rank 0 to rank 1 (through the userspace TcpProxy) makes every rank
 * raise an error naming an end of that link. Outcomes and names only, never timings.
 */
import { createHash } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { rankInput, ringReference } from "../../util/ringReference.js";
import { TcpProxy } from "../../util/TcpProxy.js";
import { killRanks, type Rank, startRanks, task } from "./rankProcesses.js";

const FIXTURE = "test/fixtures/collective/rank.ts";
/** Bound on any one wait: a child start (tsx) or a collective of at most 1 Mi elements, on a loaded machine, ≥ 3×. */
const WAIT_MS = 60_000;

let proxy: TcpProxy | undefined;
afterEach(async () => {
  killRanks();
  await proxy?.stop();
  proxy = undefined;
});

/**
 * Starts `size` ranks and gives each the addresses the others bound; with `proxied`, the link
 * from rank 0 to rank 1 goes through {@link proxy} (rank 1, the receiver, dials rank 0 through it).
 */
const startGroup = (size: number, elements: number, rounds: number, gate = false, timeoutSecs = 60, proxied = false): Promise<Rank[]> =>
  startRanks(FIXTURE, size, (rank) => [String(rank), String(size), String(elements), String(rounds), gate ? "gate" : "nogate", String(timeoutSecs)], WAIT_MS, async (rank, bound) => {
    if (!proxied || rank !== 1) return bound;
    const at = bound[0] as string;
    proxy = await TcpProxy.start({ host: at.slice(0, at.lastIndexOf(":")), port: Number(at.slice(at.lastIndexOf(":") + 1)) });
    return bound.map((a, i) => (i === 0 ? `127.0.0.1:${(proxy as TcpProxy).port}` : a));
  });

const checksum = (size: number, elements: number, round: number): string => {
  const reference = ringReference(
    Array.from({ length: size }, (_, r) => rankInput(Float32Array, elements, r, round)),
    "sum",
  );
  return createHash("sha256").update(Buffer.from(reference.buffer)).digest("hex");
};

describe("TcpCollective across processes", { timeout: 3 * WAIT_MS }, () => {
  it("3 processes all-reduce 1 Mi float32 twice: every rank prints the reference's checksum", async () => {
    const ranks = await startGroup(3, 1024 * 1024, 2);
    for (const round of [1, 2]) {
      const expected = checksum(3, 1024 * 1024, round);
      for (const r of ranks) expect(await r.waitFor(new RegExp(`^ROUND ${round} `))).toBe(`ROUND ${round} ${expected}`);
    }
    expect(await Promise.all(ranks.map((r) => r.exited))).toEqual([0, 0, 0]);
  });

  it("SIGKILL of rank 1 mid-run: ranks 0 and 2 raise UnavailableError naming its task", async () => {
    const ranks = await startGroup(3, 1024 * 1024, 1_000_000);
    await Promise.all(ranks.map((r) => r.waitFor(/^ROUND 2 /)));
    ranks[1]!.child.kill("SIGKILL");
    for (const r of [ranks[0]!, ranks[2]!]) {
      const line = await r.waitFor(/^ERROR /);
      expect(line).toMatch(/^ERROR UnavailableError /);
      expect(line).toContain(`rank 1 (${task(1)})`);
      expect(await r.exited).toBe(3);
    }
  });

  it("SIGSTOP of rank 1: rank 0 waits for credit with at most 2 chunks outstanding; after SIGCONT all finish with the reference", async () => {
    const elements = 1024 * 1024; // 1/3 of it is 21 chunks of 64 KiB per ring step
    const ranks = await startGroup(3, elements, 2, true);
    await Promise.all(ranks.map((r) => r.waitFor(/^ROUND 1 /)));
    ranks[1]!.child.kill("SIGSTOP");
    const mark = ranks[0]!.lines.length;
    for (const r of ranks) r.child.stdin!.write("GO\n");
    // Rank 0 entered round 2 and sends to the stopped rank 1: it can only wait for credit.
    const stalled = await ranks[0]!.waitFor(/^STATS .*"collectives":2,.*"unacknowledgedChunks":2/, mark);
    const stats = JSON.parse(stalled.slice("STATS ".length)) as { maxBufferedChunksPerPeer: number; bufferedChunks: number };
    expect(stats.maxBufferedChunksPerPeer).toBeLessThanOrEqual(2);
    expect(stats.bufferedChunks).toBeLessThanOrEqual(2);
    ranks[1]!.child.kill("SIGCONT");
    const expected = checksum(3, elements, 2);
    for (const r of [ranks[1]!, ranks[0]!, ranks[2]!]) {
      expect(await r.waitFor(/^ROUND 2 /)).toBe(`ROUND 2 ${expected}`);
      const last = await r.waitFor(/^DONE$/);
      expect(last).toBe("DONE");
      const final = r.lines.filter((l) => l.startsWith("STATS ")).map((l) => JSON.parse(l.slice(6)) as { maxBufferedChunksPerPeer: number });
      for (const s of final) expect(s.maxBufferedChunksPerPeer).toBeLessThanOrEqual(2);
    }
  });

  it("a frozen rank (SIGSTOP) that never enters the call: the others raise DeadlineExceededError naming it", async () => {
    const ranks = await startGroup(3, 1024, 2, true, 5);
    await Promise.all(ranks.map((r) => r.waitFor(/^ROUND 1 /)));
    ranks[1]!.child.kill("SIGSTOP");
    for (const r of ranks) r.child.stdin!.write("GO\n");
    for (const r of [ranks[0]!, ranks[2]!]) {
      const line = await r.waitFor(/^ERROR /);
      expect(line).toMatch(/^ERROR DeadlineExceededError allReduce\(sum\) #2 over 1024 float32 elements did not finish within 5 s/);
      expect(line).toContain(`the slowest rank is rank 1 (${task(1)})`);
      expect(await r.exited).toBe(3);
    }
  });

  describe("a partition of the link from rank 0 to rank 1 (userspace proxy); round 1 passes through it", () => {
    const ends = [0, 1].map((r) => `rank ${r} (${task(r)})`);

    it("blackhole: every rank raises DeadlineExceededError naming an end of the cut link, never rank 2", async () => {
      const ranks = await startGroup(3, 1024, 2, true, 3, true);
      const expected = checksum(3, 1024, 1);
      for (const r of ranks) expect(await r.waitFor(/^ROUND 1 /)).toBe(`ROUND 1 ${expected}`);
      proxy!.blackhole();
      for (const r of ranks) r.child.stdin!.write("GO\n");
      for (const r of ranks) {
        const line = await r.waitFor(/^ERROR /);
        expect(line).toMatch(/^ERROR DeadlineExceededError allReduce\(sum\) #2 over 1024 float32 elements did not finish within 3 s/);
        expect(ends.some((end) => line.includes(`the slowest rank is ${end},`)), line).toBe(true);
        expect(await r.exited).toBe(3);
      }
    });

    it("connections reset: every rank raises UnavailableError naming both ends of the cut link", async () => {
      const ranks = await startGroup(3, 1024, 2, true, 60, true);
      for (const r of ranks) await r.waitFor(/^ROUND 1 /);
      proxy!.drop();
      for (const r of ranks) r.child.stdin!.write("GO\n");
      for (const r of ranks) {
        const line = await r.waitFor(/^ERROR /);
        expect(line).toMatch(/^ERROR UnavailableError rank [01] \(.*\) closed its connection to rank [01] \(.*\).*or the network between them failed/);
        for (const end of ends) expect(line).toContain(end);
        expect(await r.exited).toBe(3);
      }
    });
  });
});
