/**
 * TensorBoard's HTTP data API over a {@link BoardStore}, with TensorBoard's shapes, orders and
 * error texts (its `http_api.md` and `core_plugin.py` / `scalars_plugin.py` for the rest):
 *
 * | route | answer |
 * |---|---|
 * | `/data/runs` | `["run", …]` by first-event time, then name |
 * | `/data/environment` | `{version, data_location, window_title, experiment_name, experiment_description, creation_time}` |
 * | `/data/plugins_listing` | `{scalars: {disable_reload, enabled, remove_dom, tab_name, loading_mechanism}, histograms: …, images: …, text: …}` |
 * | `/data/plugin/scalars/tags` | `{run: {tag: {displayName, description}}}`, runs without scalars left out |
 * | `/data/plugin/scalars/scalars?run=&tag=[&format=csv]` | `[[wall_time, step, value], …]`: **every** point (TensorBoard: 1,000) |
 * | `POST /data/plugin/scalars/scalars_multirun` (form: `tag` once, `runs` repeated) | `{run: [[w, s, v], …]}`, runs without the tag left out |
 *
 * Ours, never sent by TensorBoard's clients: `resolution=<pixels>` on both scalar routes asks for
 * the M4 decimation of the series for a chart that many pixels wide (at most 4 points a column,
 * spikes kept), over `min_step`..`max_step` when given (a zoom); `min_step`/`max_step` alone cut
 * the full series to that range.
 *
 * The histograms, images and text routes, and our `/board/checkpoints`, are answered by
 * {@link answerViews}.
 *
 * Paths may start with `/experiment/<id>` (ignored: one logdir is one experiment) and end with
 * `/`. Any other path is 404 `Not found`.
 *
 * @module
 */

import * as E from "fp-ts/lib/Either.js";
import type { IncomingMessage } from "node:http";
import * as t from "io-ts";

import { decode, formatIssue, PositiveInt, refined, SafeInt } from "../codec.js";
import type { BoardStore } from "./BoardStore.js";
import { decimateM4 } from "./decimateM4.js";
import { type Body, HttpError, invalidArgument, notFound } from "./respond.js";
import { remembered } from "./answerCache.js";
import { pyJson, pyRepr, scalarRowsCsv, scalarRowsJson } from "./tensorBoardFormat.js";
import { answerViews, viewPluginsListing } from "./viewsApi.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What `/data/environment` reports besides the logdir. */
export interface BoardEnvironment {
  /** The server's version (ours, e.g. `"0.2.0"`: TensorBoard reports its own). */
  readonly version: string;
  /** The page title (TensorBoard's `--window_title`, default `""`). */
  readonly windowTitle?: string;
}

/** The most pixel columns `resolution` may ask for (a 16K screen is 15,360 wide). */
const MAX_RESOLUTION = 65_536;

/** The largest POST body read (a multirun form), in bytes. */
const MAX_FORM_BYTES = 1 << 20;

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** The route path of a request path: without `/experiment/<id>` and without a trailing `/`. */
export const routePath = (pathname: string): string => {
  const m = /^\/experiment\/[^/]+(\/.*)?$/.exec(pathname);
  const path = m === null ? pathname : (m[1] ?? "/");
  return path !== "/" && path.endsWith("/") ? path.slice(0, -1) : path;
};

/**
 * Answers a data route (`path` as {@link routePath} gives it). Rejects with an {@link HttpError}
 * for a bad request, an unknown series or an unknown path.
 */
export const answerData = async (store: BoardStore, env: BoardEnvironment, req: IncomingMessage, path: string, query: URLSearchParams): Promise<Body> => {
  switch (path) {
    case "/data/runs":
      return json(store.runs());
    case "/data/environment":
      return json({
        version: env.version,
        data_location: store.logdir,
        window_title: env.windowTitle ?? "",
        experiment_name: "",
        experiment_description: "",
        creation_time: 0,
      });
    case "/data/plugins_listing":
      return json({
        scalars: {
          disable_reload: false,
          enabled: store.scalarRuns().length > 0,
          remove_dom: false,
          tab_name: "scalars",
          loading_mechanism: { type: "CUSTOM_ELEMENT", element_name: "tf-scalar-dashboard" },
        },
        ...viewPluginsListing(store),
      });
    case "/data/plugin/scalars/tags":
      // 20,000 tags are 1.2 MB of JSON: written once per change of the tags, not per request.
      return remembered(store, `tags\0${store.tagsVersion}`, "application/json", () => scalarTagsJson(store));
    case "/data/plugin/scalars/scalars":
      return scalars(store, query);
    case "/data/plugin/scalars/scalars_multirun":
      return scalarsMultirun(store, req, query);
    default: {
      const view = answerViews(store, path, query);
      if (view === undefined) throw notFound();
      return view;
    }
  }
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const json = (value: unknown): Body => ({ contentType: "application/json", body: pyJson(value) });

/**
 * `{run: {tag: {"displayName": …, "description": …}}}` as `pyJson` writes it, written directly:
 * the general `pyJson` walks and joins every nested object, which 20,000 tags make slow.
 */
const scalarTagsJson = (store: Pick<BoardStore, "scalarRuns" | "scalarTags" | "tagInfo">): string => {
  const runs: string[] = [];
  for (const run of store.scalarRuns()) {
    const tags: string[] = [];
    for (const tag of store.scalarTags(run)) {
      const info = store.tagInfo(run, tag);
      tags.push(`${pyJson(tag)}: {"displayName": ${pyJson(info.displayName)}, "description": ${pyJson(info.description)}}`);
    }
    runs.push(`${pyJson(run)}: {${tags.join(", ")}}`);
  }
  return `{${runs.join(", ")}}`;
};

const scalars = (store: BoardStore, query: URLSearchParams): Body => {
  const tag = query.get("tag") ?? undefined;
  const run = query.get("run") ?? undefined;
  if (tag === undefined || run === undefined) throw invalidArgument(`Both run and tag must be specified: tag=${pyRepr(tag)}, run=${pyRepr(run)}`);
  const decimation = decimationOf(query);
  const series = store.series(run, tag);
  if (series === undefined) throw notFound(`No scalar data for run=${pyRepr(run)}, tag=${pyRepr(tag)}`);
  const csv = query.get("format") === "csv";
  // Scripts poll the same series: an unchanged one is answered from memory.
  const key = ["scalars", store.scalarEpoch, run, tag, series.length, csv, decimation?.pixels, decimation?.minStep, decimation?.maxStep].join("\0");
  return remembered(store, key, csv ? "text/csv" : "application/json", () => {
    const indices = decimation === undefined ? undefined : pick(series, decimation);
    return csv ? scalarRowsCsv(series, indices) : scalarRowsJson(series, indices);
  });
};

const scalarsMultirun = async (store: BoardStore, req: IncomingMessage, query: URLSearchParams): Promise<Body> => {
  if (req.method !== "POST") throw new HttpError(405, "Method Not Allowed: The method is not allowed for the requested URL.", { Allow: "POST" });
  const form = await readForm(req);
  const tags = form.getAll("tag");
  if (tags.length !== 1) throw invalidArgument("tag must be specified exactly once");
  const tag = String(tags[0]);
  // Our decimation parameters may come in the form or in the query string.
  const params = new URLSearchParams(query);
  for (const key of ["resolution", "min_step", "max_step"]) {
    const v = form.get(key);
    if (typeof v === "string") params.set(key, v);
  }
  const decimation = decimationOf(params);
  const rows: string[] = [];
  const seen = new Set<string>();
  for (const r of form.getAll("runs")) {
    const run = String(r);
    const series = store.series(run, tag);
    if (series === undefined || seen.has(run)) continue;
    seen.add(run);
    rows.push(`${pyJson(run)}: ${scalarRowsJson(series, decimation === undefined ? undefined : pick(series, decimation))}`);
  }
  return { contentType: "application/json", body: `{${rows.join(", ")}}` };
};

/** A query value as a number, checked by `codec` (an absent value stays absent). */
const numberParam = <A extends number>(codec: t.Type<A, A, unknown>): t.Type<A, string, unknown> =>
  new t.Type<A, string, unknown>(
    codec.name,
    codec.is,
    (u, c) => (typeof u === "string" && u.trim() !== "" && codec.is(Number(u)) ? t.success(Number(u) as A) : t.failure(u, c)),
    String,
  );

const Resolution = numberParam(refined(`an integer from 1 to ${MAX_RESOLUTION}`, (u): u is number => PositiveInt.is(u) && u <= MAX_RESOLUTION));
const Step = numberParam(SafeInt);

/** Our decimation parameters (never sent by TensorBoard's clients). */
const DecimationQuery = t.partial({ resolution: Resolution, min_step: Step, max_step: Step });

interface Decimation {
  readonly pixels: number | undefined;
  readonly minStep: number | undefined;
  readonly maxStep: number | undefined;
}

const decimationOf = (query: URLSearchParams): Decimation | undefined => {
  const given = Object.fromEntries(["resolution", "min_step", "max_step"].flatMap((k) => (query.has(k) ? [[k, query.get(k)]] : [])));
  if (Object.keys(given).length === 0) return undefined;
  const decoded = decode(DecimationQuery, given);
  if (E.isLeft(decoded)) throw invalidArgument(decoded.left.map(formatIssue).join("; "));
  const { resolution, min_step: minStep, max_step: maxStep } = decoded.right;
  if (minStep !== undefined && maxStep !== undefined && minStep > maxStep) throw invalidArgument(`min_step (${minStep}) is above max_step (${maxStep})`);
  return { pixels: resolution, minStep, maxStep };
};

/** The indices a decimation keeps: M4 with a resolution, else every point in the step range. */
const pick = (series: { readonly steps: ArrayLike<number>; readonly values: ArrayLike<number> }, d: Decimation): Uint32Array => {
  if (d.pixels !== undefined) return decimateM4(series.steps, series.values, { pixels: d.pixels, minStep: d.minStep, maxStep: d.maxStep });
  const lo = d.minStep ?? Number.NEGATIVE_INFINITY;
  const hi = d.maxStep ?? Number.POSITIVE_INFINITY;
  const kept: number[] = [];
  for (let i = 0; i < series.steps.length; i++) {
    const s = series.steps[i] as number;
    if (s >= lo && s <= hi) kept.push(i);
  }
  return Uint32Array.from(kept);
};

/** The fields of a url-encoded or multipart form body (TensorBoard's `request.form`). */
const readForm = async (req: IncomingMessage): Promise<FormData> => {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_FORM_BYTES) throw new HttpError(413, `Request Entity Too Large: a form of at most ${MAX_FORM_BYTES} bytes`);
    chunks.push(chunk);
  }
  const contentType = req.headers["content-type"] ?? "";
  if (!/^(?:application\/x-www-form-urlencoded|multipart\/form-data)\b/i.test(contentType)) return new FormData();
  try {
    // The fetch API's form parser (Node's undici) reads both encodings.
    return await new Response(Buffer.concat(chunks), { headers: { "content-type": contentType } }).formData();
  } catch (e) {
    throw invalidArgument(`the form cannot be read: ${(e as Error).message}`);
  }
};
