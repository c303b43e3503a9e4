/**
 * A large logdir through the board: the board benchmark's 1 million scalars (10 runs × 10 tags ×
 * 10,000 points, written by bench/board.bench.ts's own writer). Every point is served (no
 * sampling), the server answers while it loads, and, with Debian's chromium, the page draws
 * every chart with every run's full series. Nothing here is timed: the bounds are deadlines.
 */
import { afterEach, describe, expect, it } from "vitest";

import { untilAllDrawn, writeLogdir } from "../../bench/board.bench.js";
import { type Board, startBoard } from "../../src/board/BoardServer.js";
import { CHROMIUM, haveChromium, launchChromium } from "../util/chromium.js";
import { useTempDirs } from "../util/tempDirs.js";

if (!haveChromium && process.env.CI === undefined) console.warn(`board large-logdir page check SKIPPED: no ${CHROMIUM} (apt-get install chromium; under CI it fails instead)`);

const tempDir = useTempDirs("board-large-");
const boards: Board[] = [];
afterEach(async () => {
  for (const b of boards.splice(0)) await b.close();
});

const getJson = async (board: Board, path: string): Promise<unknown> => {
  const res = await fetch(`http://127.0.0.1:${board.port}${path}`);
  expect(res.status, path).toBe(200);
  return res.json();
};

describe("monitored-session board on 1 million scalars", () => {
  it("serves every point of every series, answers while it loads, and the page draws every chart in full", { timeout: 600_000 }, async () => {
    const dir = tempDir();
    await writeLogdir(dir, 10, 10, 10_000);
    const board = await startBoard(dir, { port: 0 });
    boards.push(board);
    // While loading, the routes answer (streamed loading leaves the event loop free).
    expect(await getJson(board, "/data/runs")).toEqual(expect.any(Array));
    await board.store.loaded;
    const runs = (await getJson(board, "/data/runs")) as string[];
    expect(runs).toHaveLength(10);
    const tags = (await getJson(board, "/data/plugin/scalars/tags")) as Record<string, Record<string, unknown>>;
    expect(Object.values(tags).map((t) => Object.keys(t).length)).toEqual(Array(10).fill(10));
    let points = 0;
    for (const run of runs) {
      for (const tag of Object.keys(tags[run] ?? {})) {
        const series = (await getJson(board, `/data/plugin/scalars/scalars?${new URLSearchParams({ run, tag })}`)) as [number, number, number][];
        expect(series[0]?.[1]).toBe(0);
        expect(series.at(-1)?.[1]).toBe(9_999);
        points += series.length;
      }
    }
    expect(points).toBe(1_000_000);

    if (!haveChromium) {
      expect(process.env.CI, `${CHROMIUM} is missing under CI`).toBeUndefined();
      return;
    }
    const browser = await launchChromium();
    try {
      const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
      const errors: string[] = [];
      page.on("pageerror", (e) => errors.push(e.message));
      const [drawnAt] = await Promise.all([untilAllDrawn(page, 10, 10, 10_000), page.goto(board.url)]);
      expect(drawnAt).toBeGreaterThan(0);
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
    }
  });
});
