/**
 * The data routes of the views beyond scalars, with TensorBoard's shapes (its plugins'
 * `http_api.md`), over a {@link ViewStore}:
 *
 * | route | answer |
 * |---|---|
 * | `/data/plugin/histograms/tags` | `{run: {tag: {displayName, description}}}`, runs without histograms left out |
 * | `/data/plugin/histograms/histograms?run=&tag=[&limit=]` | `[[wall_time, step, [[left, right, count], …]], …]`: every histogram kept (TensorBoard: 51); ours, `limit=n`: at most n, evenly spread, the first and the newest among them |
 * | `/data/plugin/images/tags` | `{run: {tag: {displayName, description, samples}}}` |
 * | `/data/plugin/images/images?run=&tag=[&sample=0]` | `[{wall_time, step, query}]`, every step kept (TensorBoard: 10) |
 * | `/data/plugin/images/individualImage?<query>` | the image's bytes, `image/png`, `image/jpeg`, `image/gif`, `image/bmp` (sniffed) or `application/octet-stream` |
 * | `/data/plugin/text/tags` | `{run: [tag, …]}` |
 * | `/data/plugin/text/text?run=&tag=[&limit=]` | `[{wall_time, step, text}]`, `text` rendered to safe HTML ({@link renderText}); an unknown series is `[]`, as in TensorBoard; ours, `limit=n`: at most n steps, evenly spread, the first and the newest among them (only those are rendered) |
 *
 * And ours: `/board/checkpoints?run=` → `[{step, wall_time, path}]` (the run's
 * `SessionLog CHECKPOINT` events by step); without `run`, `{run: [...]}` for every run that has
 * some. `/board/thinned` → `[{plugin, run, tag, dropped, kept, budget_bytes}]`: the series that
 * lost older steps to their memory budget (the only place that says it for text, whose tags
 * route has no description).
 *
 * @module
 */

import type { BoardStore } from "./BoardStore.js";
import type { HistogramSeries } from "./HistogramSeries.js";
import { type Body, invalidArgument, notFound } from "./respond.js";
import { mibText } from "./thinning.js";
import { pyFloatJson, pyJson, pyRepr } from "./tensorBoardFormat.js";
import { renderText } from "./textRender.js";

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** The `plugins_listing` entries of the views: each enabled when some run has its data. */
export const viewPluginsListing = (store: BoardStore): Record<string, unknown> => ({
  histograms: listing(store.views.histogramRuns().length > 0, "histograms", "tf-histogram-dashboard"),
  images: listing(store.views.imageRuns().length > 0, "images", "tf-image-dashboard"),
  text: listing(store.views.textRuns().length > 0, "text", "tf-text-dashboard"),
});

/** Answers a view's data route, or `undefined` for a path that is none. Throws `HttpError` for bad input. */
export const answerViews = (store: BoardStore, path: string, query: URLSearchParams): Body | undefined => {
  const v = store.views;
  switch (path) {
    case "/data/plugin/histograms/tags":
      return json(
        tagInfo(v.histogramRuns(), (run) =>
          v.histogramTags(run).map((tag) => {
            const info = store.tagInfo(run, tag);
            const notice = droppedNotice(v.histograms(run, tag)?.droppedSteps ?? 0, "histograms", v.histogramBudgetBytes);
            return [tag, { displayName: info.displayName, description: [info.description, notice].filter((d) => d !== "").join("\n\n") }];
          }),
        ),
      );
    case "/data/plugin/histograms/histograms": {
      const { run, tag } = runAndTag(query);
      const limit = query.has("limit") ? intParam(query, "limit", 0, 1) : undefined;
      const series = v.histograms(run, tag);
      if (series === undefined) throw notFound(`No histogram tag ${pyRepr(tag)} for run ${pyRepr(run)}`);
      return { contentType: "application/json", body: histogramRowsJson(series, limit === undefined ? undefined : spreadIndices(series.length, limit)) };
    }
    case "/data/plugin/images/tags":
      return json(
        tagInfo(v.imageRuns(), (run) =>
          v.imageTags(run).map((tag) => {
            const s = v.images(run, tag);
            const info = store.tagInfo(run, tag);
            const notice = droppedNotice(s?.droppedSteps ?? 0, "images", v.imageBudgetBytes);
            const description = [info.description, notice].filter((d) => d !== "").join("\n\n");
            return [tag, { displayName: info.displayName, description, samples: s?.samples ?? 0 }];
          }),
        ),
      );
    case "/data/plugin/images/images": {
      const { run, tag } = runAndTag(query);
      const sample = intParam(query, "sample", 0);
      const series = v.images(run, tag);
      if (series === undefined) throw notFound(`No image data for run=${pyRepr(run)}, tag=${pyRepr(tag)}`);
      const rows = series.shots
        .filter((s) => s.samples[sample] !== undefined)
        .map((s) => `{"wall_time": ${pyFloatJson(s.wallTime)}, "step": ${s.step}, "query": ${pyJson(new URLSearchParams({ run, tag, sample: String(sample), id: String(s.id) }).toString())}}`);
      return { contentType: "application/json", body: `[${rows.join(", ")}]` };
    }
    case "/data/plugin/images/individualImage": {
      const run = query.get("run");
      const tag = query.get("tag");
      if (run === null || tag === null || !query.has("id")) throw invalidArgument("individualImage needs the query an images list gave (run, tag, sample, id)");
      const id = intParam(query, "id", 0);
      const sample = intParam(query, "sample", 0);
      const bytes = v.images(run, tag)?.find(id)?.samples[sample];
      if (bytes === undefined) throw notFound(`No image ${id} (sample ${sample}) for run=${pyRepr(run)}, tag=${pyRepr(tag)}: thinned out or purged by a restart; list the images again`);
      return { contentType: sniffImageType(bytes), body: bytes };
    }
    case "/data/plugin/text/tags":
      return json(Object.fromEntries(v.textRuns().map((run) => [run, v.textTags(run)])));
    case "/data/plugin/text/text": {
      const { run, tag } = runAndTag(query);
      const limit = query.has("limit") ? intParam(query, "limit", 0, 1) : undefined;
      const points = v.texts(run, tag)?.points ?? [];
      // Only the rows answered are rendered: `limit` bounds the work of a request too.
      const kept = limit === undefined ? points : spreadIndices(points.length, limit).map((i) => points[i] as (typeof points)[number]);
      const rows = kept.map((p) => `{"wall_time": ${pyFloatJson(p.wallTime)}, "step": ${p.step}, "text": ${pyJson(renderText(p))}}`);
      return { contentType: "application/json", body: `[${rows.join(", ")}]` };
    }
    case "/board/thinned":
      return {
        contentType: "application/json",
        body: `[${v
          .thinned()
          .map((t) => `{"plugin": ${pyJson(t.plugin)}, "run": ${pyJson(t.run)}, "tag": ${pyJson(t.tag)}, "dropped": ${t.dropped}, "kept": ${t.kept}, "budget_bytes": ${t.budgetBytes}}`)
          .join(", ")}]`,
      };
    case "/board/checkpoints": {
      const run = query.get("run");
      const marks = (r: string): string =>
        `[${v
          .checkpoints(r)
          .map((c) => `{"step": ${c.step}, "wall_time": ${pyFloatJson(c.wallTime)}, "path": ${pyJson(c.path)}}`)
          .join(", ")}]`;
      if (run === null) return { contentType: "application/json", body: `{${v.checkpointRuns().map((r) => `${pyJson(r)}: ${marks(r)}`).join(", ")}}` };
      if (!store.runs().includes(run)) throw notFound(`no run ${pyRepr(run)} (the runs are at /data/runs)`);
      return { contentType: "application/json", body: marks(run) };
    }
    default:
      return undefined;
  }
};

/** The type of an image, from its first bytes (as TensorBoard's `imghdr` guess): png, jpeg, gif, bmp, else `application/octet-stream`. */
export const sniffImageType = (b: Uint8Array): string => {
  const starts = (...sig: number[]): boolean => sig.every((x, i) => b[i] === x);
  if (starts(0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a)) return "image/png";
  if (starts(0xff, 0xd8, 0xff)) return "image/jpeg";
  if (starts(0x47, 0x49, 0x46, 0x38) && (b[4] === 0x37 || b[4] === 0x39) && b[5] === 0x61) return "image/gif";
  if (starts(0x42, 0x4d)) return "image/bmp";
  return "application/octet-stream";
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const json = (value: unknown): Body => ({ contentType: "application/json", body: pyJson(value) });

const listing = (enabled: boolean, tab: string, element: string): Record<string, unknown> => ({
  disable_reload: false,
  enabled,
  remove_dom: false,
  tab_name: tab,
  loading_mechanism: { type: "CUSTOM_ELEMENT", element_name: element },
});

const tagInfo = (runs: readonly string[], tags: (run: string) => [string, unknown][]): Record<string, unknown> =>
  Object.fromEntries(runs.map((run) => [run, Object.fromEntries(tags(run))]));

const runAndTag = (query: URLSearchParams): { run: string; tag: string } => {
  const run = query.get("run") ?? undefined;
  const tag = query.get("tag") ?? undefined;
  if (run === undefined || tag === undefined) throw invalidArgument(`Both run and tag must be specified: tag=${pyRepr(tag)}, run=${pyRepr(run)}`);
  return { run, tag };
};

/** An integer query parameter of at least `min` (`fallback` when absent); 400 otherwise. */
const intParam = (query: URLSearchParams, name: string, fallback: number, min = 0): number => {
  const raw = query.get(name);
  if (raw === null) return fallback;
  const n = Number(raw);
  if (raw.trim() === "" || !Number.isSafeInteger(n) || n < min) throw invalidArgument(`${name}: expected ${min === 0 ? "a non-negative integer" : `an integer >= ${min}`}, got ${JSON.stringify(raw)}`);
  return n;
};

/**
 * The indices of at most `max` of `n` rows, evenly spread, the first and the last among them
 * (the page's offset view picks its lines the same way).
 */
const spreadIndices = (n: number, max: number): number[] => {
  if (n <= max) return Array.from({ length: n }, (_, i) => i);
  if (max === 1) return [n - 1];
  const picked = new Set(Array.from({ length: max }, (_, k) => Math.round((k * (n - 1)) / (max - 1))));
  return [...picked].sort((a, b) => a - b);
};

const histogramRowsJson = (series: HistogramSeries, only?: readonly number[]): string => {
  const rows: string[] = [];
  series.forEach((wallTime, step, b) => {
    const buckets: string[] = [];
    for (let i = 0; i + 2 < b.length; i += 3) buckets.push(`[${pyFloatJson(b[i] as number)}, ${pyFloatJson(b[i + 1] as number)}, ${pyFloatJson(b[i + 2] as number)}]`);
    rows.push(`[${pyFloatJson(wallTime)}, ${step}, [${buckets.join(", ")}]]`);
  }, only);
  return `[${rows.join(", ")}]`;
};

/** What a tag's description says once its series lost steps to the budget ("" before). */
const droppedNotice = (dropped: number, what: string, budgetBytes: number): string =>
  dropped === 0 ? "" : `${dropped} older steps were dropped to keep this tag's ${what} within ${mibText(budgetBytes)} MiB (the steps kept are evenly spread; the first and the newest are kept).`;
