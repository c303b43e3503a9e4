/**
 * `/board/series`: what the board's page draws of one (run, tag), columnar for uPlot. The series
 * is smoothed with {@link classicSmoothing} on **every** point first, then decimated: smoothing
 * before downsampling, so the smoothed curve does not change with the chart's width or the zoom
 * (TensorBoard smooths its 1,000 sampled points: its issues 1518 and 6829).
 *
 * Query: `run`, `tag`, `smoothing` (0 to 1, default 0), `resolution` (chart width in pixels:
 * the points kept are the union of the M4 picks of the raw and of the smoothed series, so both
 * lines are drawn pixel-exact and spikes survive), `min_step`/`max_step` (a zoom). Answer:
 * `{"points": n, "steps": […], "wallTimes": […], "values": […], "smoothed": […]}` where `points`
 * is the series' full length and a non-finite value is `null`.
 *
 * @module
 */

import * as E from "fp-ts/lib/Either.js";
import * as t from "io-ts";

import { decode, formatIssue } from "../codec.js";
import { classicSmoothing } from "./classicSmoothing.js";
import type { ScalarSeries } from "../summary/index.js";
import { remembered } from "./answerCache.js";
import type { BoardStore } from "./BoardStore.js";
import { decimateM4 } from "./decimateM4.js";
import { type Body, invalidArgument, notFound } from "./respond.js";

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Answers `/board/series?run=&tag=[&smoothing=][&resolution=][&min_step=&max_step=]`. */
export const answerPageSeries = (store: BoardStore, query: URLSearchParams): Body => {
  const run = query.get("run");
  const tag = query.get("tag");
  if (run === null || tag === null) throw invalidArgument("Both run and tag must be specified");
  const params = paramsOf(query);
  const series = store.series(run, tag);
  if (series === undefined) throw notFound(`No scalar data for run='${run}', tag='${tag}'`);
  // Every page view asks for every chart's series again: unchanged ones are answered from memory.
  return remembered(store, seriesKey(store, run, tag, series.length, params), "application/json", () => pageSeriesJson(series, params));
};

/**
 * Answers `/board/chart?tag=&run=…&run=…[&smoothing=][&resolution=][&min_step=&max_step=]`: what
 * `/board/series` answers for each run, in one response `{run: series}` (one request per chart,
 * not per run). A run without the tag (deleted meanwhile, say) is left out.
 */
export const answerChartSeries = (store: BoardStore, query: URLSearchParams): Body => {
  const tag = query.get("tag");
  const runs = query.getAll("run");
  if (tag === null || runs.length === 0) throw invalidArgument("A tag and at least one run must be specified");
  const params = paramsOf(query);
  const present = runs.flatMap((run) => {
    const series = store.series(run, tag);
    return series === undefined ? [] : [{ run, series }];
  });
  const key = ["chart", present.map(({ run, series }) => seriesKey(store, run, tag, series.length, params)).join("\u0001")].join("\0");
  return remembered(store, key, "application/json", () => {
    const parts = present.map(({ run, series }) => {
      const one = remembered(store, seriesKey(store, run, tag, series.length, params), "application/json", () => pageSeriesJson(series, params));
      return `${JSON.stringify(run)}:${one.body as string}`;
    });
    return `{${parts.join(",")}}`;
  });
};

interface SeriesParams {
  readonly smoothing: number;
  readonly pixels: number | undefined;
  readonly minStep: number | undefined;
  readonly maxStep: number | undefined;
}

const paramsOf = (query: URLSearchParams): SeriesParams => {
  const params = decode(
    PageSeriesQuery,
    Object.fromEntries(["smoothing", "resolution", "min_step", "max_step"].flatMap((k) => (query.has(k) ? [[k, query.get(k)]] : []))),
  );
  if (E.isLeft(params)) throw invalidArgument(params.left.map(formatIssue).join("; "));
  const { smoothing = 0, resolution: pixels, min_step: minStep, max_step: maxStep } = params.right;
  return { smoothing, pixels, minStep, maxStep };
};

/** Names the content of one page series exactly (see answerCache.ts). */
const seriesKey = (store: BoardStore, run: string, tag: string, length: number, p: SeriesParams): string =>
  ["page", store.scalarEpoch, run, tag, length, p.smoothing, p.pixels, p.minStep, p.maxStep].join("\0");

/** What the page draws of `series`: columns of the points M4 keeps (of the raw and the smoothed line). */
const pageSeriesJson = (series: ScalarSeries, { smoothing, pixels, minStep, maxStep }: SeriesParams): string => {
  const smoothed = smoothing === 0 ? series.values : classicSmoothing(series.values, smoothing);
  const kept = pixels === undefined ? inRange(series.steps, minStep, maxStep) : union(decimateM4(series.steps, series.values, { pixels, minStep, maxStep }), smoothing === 0 ? new Uint32Array(0) : decimateM4(series.steps, smoothed, { pixels, minStep, maxStep }));
  const column = (xs: ArrayLike<number>): string => {
    const out: string[] = new Array<string>(kept.length);
    for (let i = 0; i < kept.length; i++) {
      const x = xs[kept[i] as number] as number;
      out[i] = Number.isFinite(x) ? String(x) : "null";
    }
    return `[${out.join(",")}]`;
  };
  return `{"points":${series.steps.length},"steps":${column(series.steps)},"wallTimes":${column(series.wallTimes)},"values":${column(series.values)},"smoothed":${column(smoothed)}}`;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** A query value as a number that `is` accepts (named `name` in errors). */
const numberParam = (name: string, is: (v: number) => boolean): t.Type<number, string, unknown> =>
  new t.Type<number, string, unknown>(
    name,
    (u): u is number => typeof u === "number" && is(u),
    (u, c) => (typeof u === "string" && u.trim() !== "" && is(Number(u)) ? t.success(Number(u)) : t.failure(u, c)),
    String,
  );

const PageSeriesQuery = t.partial({
  smoothing: numberParam("a number from 0 to 1", (v) => Number.isFinite(v) && v >= 0 && v <= 1),
  resolution: numberParam("an integer from 1 to 65536", (v) => Number.isSafeInteger(v) && v >= 1 && v <= 65_536),
  min_step: numberParam("a safe integer", Number.isSafeInteger),
  max_step: numberParam("a safe integer", Number.isSafeInteger),
});

const inRange = (steps: ArrayLike<number>, lo = Number.NEGATIVE_INFINITY, hi = Number.POSITIVE_INFINITY): Uint32Array => {
  const kept: number[] = [];
  for (let i = 0; i < steps.length; i++) {
    const s = steps[i] as number;
    if (s >= lo && s <= hi) kept.push(i);
  }
  return Uint32Array.from(kept);
};

/** The sorted union of two ascending index lists. */
const union = (a: Uint32Array, b: Uint32Array): Uint32Array => {
  const out = new Uint32Array(a.length + b.length);
  let i = 0;
  let j = 0;
  let n = 0;
  while (i < a.length || j < b.length) {
    const x = j >= b.length || (i < a.length && (a[i] as number) <= (b[j] as number)) ? (a[i++] as number) : (b[j++] as number);
    if (n === 0 || out[n - 1] !== x) out[n++] = x;
  }
  return out.subarray(0, n);
};
