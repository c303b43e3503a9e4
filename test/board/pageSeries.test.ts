import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

import { type Board, startBoard } from "../../src/board/BoardServer.js";
import { classicSmoothing } from "../../src/board/classicSmoothing.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { useTempDirs } from "../util/tempDirs.js";
import { send } from "./http.js";

const tempDir = useTempDirs("board-page-series-");
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

interface PageSeries {
  points: number;
  steps: number[];
  wallTimes: number[];
  values: (number | null)[];
  smoothed: (number | null)[];
}

const N = 10_000;
const SPIKE = 7_777;
const value = (s: number): number => Math.fround(s === SPIKE ? 100 : Math.sin(s / 500));

/** A board on one run `r` with tag `y`: N points, a spike, and a NaN at step 10. */
const serve = async (): Promise<Board> => {
  const dir = tempDir();
  const w = new SummaryWriter(join(dir, "r"), { clock: new VirtualClock({ startMs: 1_700_000_000_000 }) });
  for (let s = 0; s < N; s++) w.addScalar("y", s === 10 ? Number.NaN : value(s), s);
  await w.close();
  const board = await startBoard(dir, { port: 0, clock: new VirtualClock() });
  cleanups.push(() => board.close());
  await board.store.loaded;
  return board;
};

const get = async (board: Board, query: string): Promise<PageSeries> => {
  const r = await send(`http://127.0.0.1:${board.port}/board/series?${query}`);
  expect(r.status, r.text).toBe(200);
  expect(r.headers["content-type"]).toBe("application/json");
  return JSON.parse(r.text) as PageSeries;
};

describe("/board/series: what the page draws, smoothed on every point and then decimated", () => {
  it("without resolution: every point, smoothed with TensorBoard's EMA over the full series; NaN is null", async () => {
    const board = await serve();
    const s = await get(board, "run=r&tag=y&smoothing=0.9");
    expect(s.points).toBe(N);
    expect(s.steps).toHaveLength(N);
    const full = Array.from({ length: N }, (_, i) => (i === 10 ? Number.NaN : value(i)));
    const reference = classicSmoothing(full, 0.9);
    s.smoothed.forEach((v, i) => expect(v).toBe(Number.isFinite(reference[i]) ? reference[i] : null));
    expect(s.values[10]).toBeNull();
  });

  it("with resolution: at most 4 raw + 4 smoothed points a column, the spike kept, smoothed values those of the full series", async () => {
    const board = await serve();
    const full = classicSmoothing(Array.from({ length: N }, (_, i) => (i === 10 ? Number.NaN : value(i))), 0.6);
    const s = await get(board, "run=r&tag=y&smoothing=0.6&resolution=300");
    expect(s.points).toBe(N);
    expect(s.steps.length).toBeLessThanOrEqual(8 * 300);
    expect(s.steps.length).toBeGreaterThan(300);
    expect(s.values[s.steps.indexOf(SPIKE)]).toBe(value(SPIKE));
    s.steps.forEach((step, i) => expect(s.smoothed[i]).toBe(Number.isFinite(full[step]) ? full[step] : null));
    expect([...s.steps].sort((a, b) => a - b)).toEqual(s.steps);
    expect(new Set(s.steps).size).toBe(s.steps.length);
    // Without smoothing: M4 of the raw series alone.
    expect((await get(board, "run=r&tag=y&resolution=300")).steps.length).toBeLessThanOrEqual(4 * 300);
  });

  it("min_step/max_step zoom: only that range, at the chart's resolution", async () => {
    const board = await serve();
    const s = await get(board, "run=r&tag=y&smoothing=0.6&resolution=300&min_step=7000&max_step=7999");
    expect(s.steps[0]).toBeGreaterThanOrEqual(7000);
    expect(s.steps.at(-1)).toBeLessThanOrEqual(7999);
    expect(s.steps.length).toBeGreaterThan(300);
  });

  it("bad input: 400 with what was expected; an unknown series is 404", async () => {
    const board = await serve();
    const base = `http://127.0.0.1:${board.port}/board/series`;
    expect((await send(`${base}?run=r`)).status).toBe(400);
    const bad = await send(`${base}?run=r&tag=y&smoothing=2`);
    expect([bad.status, bad.text]).toEqual([400, 'Invalid argument: smoothing: expected a number from 0 to 1, got "2"']);
    expect((await send(`${base}?run=r&tag=y&resolution=0`)).status).toBe(400);
    expect((await send(`${base}?run=r&tag=y&min_step=1.5`)).status).toBe(400);
    expect((await send(`${base}?run=nope&tag=y`)).status).toBe(404);
  });
});

describe("/board/series answers from memory only while the series is unchanged", () => {
  it("a series that grew, or lost points to a purge and grew back to the same length, is answered afresh", async () => {
    const { answerPageSeries } = await import("../../src/board/pageSeries.js");
    let epoch = 0;
    let series = { length: 3, steps: new Float64Array([0, 1, 2]), wallTimes: new Float64Array([1, 2, 3]), values: new Float32Array([1, 2, 3]) };
    const store = { series: () => series, get scalarEpoch() { return epoch; } } as unknown as Parameters<typeof answerPageSeries>[0];
    const ask = (): { values: number[]; points: number } => JSON.parse(String(answerPageSeries(store, new URLSearchParams({ run: "r", tag: "t", resolution: "100" })).body)) as { values: number[]; points: number };
    expect(ask().values).toEqual([1, 2, 3]);
    expect(ask().values).toEqual([1, 2, 3]); // the same answer, from memory
    series = { length: 4, steps: new Float64Array([0, 1, 2, 3]), wallTimes: new Float64Array([1, 2, 3, 4]), values: new Float32Array([1, 2, 3, 4]) };
    expect(ask().values).toEqual([1, 2, 3, 4]);
    // A restart purged step 3 and wrote it again with another value: same length, new epoch.
    series = { length: 4, steps: new Float64Array([0, 1, 2, 3]), wallTimes: new Float64Array([1, 2, 3, 9]), values: new Float32Array([1, 2, 3, 7]) };
    epoch++;
    expect(ask().values).toEqual([1, 2, 3, 7]);
  });
});

describe("/board/chart: every run of a chart in one response", () => {
  it("answers {run: what /board/series answers}, leaves out a run without the tag, and wants a tag and a run", async () => {
    const board = await serve();
    const base = `http://127.0.0.1:${board.port}`;
    const one = await get(board, "run=r&tag=y&smoothing=0.6&resolution=200");
    const chart = await send(`${base}/board/chart?tag=y&run=r&run=gone&smoothing=0.6&resolution=200`);
    expect(chart.status, chart.text).toBe(200);
    expect(JSON.parse(chart.text)).toEqual({ r: one });
    for (const bad of ["tag=y", "run=r", "tag=y&run=r&smoothing=2"]) {
      const r = await send(`${base}/board/chart?${bad}`);
      expect(r.status, bad).toBe(400);
      expect(r.text, bad).toMatch(/^Invalid argument: /);
    }
  });
});
