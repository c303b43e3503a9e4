/**
 * The views' data routes (histograms, images, text, our checkpoints), on files of our
 * SummaryWriter: TensorBoard's shapes (dashboards.md §1), the restart purge, the memory budgets
 * of images, histograms and text (and where each thinning is said), our `limit=`, and bad input. Virtual clock: no timing.
 */
import { join } from "node:path";
import { PNG } from "pngjs";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

import { type Board, startBoard } from "../../src/board/BoardServer.js";
import { sniffImageType } from "../../src/board/viewsApi.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { useTempDirs } from "../util/tempDirs.js";
import { send } from "./http.js";

const tempDir = useTempDirs("board-views-");
const boards: Board[] = [];
afterEach(async () => {
  for (const b of boards.splice(0)) await b.close();
});

const serve = async (logdir: string, options: { imageBytesPerTag?: number; histogramBytesPerTag?: number; textBytesPerTag?: number; onIssue?: (m: string) => void } = {}): Promise<string> => {
  const board = await startBoard(logdir, { port: 0, clock: new VirtualClock(), ...options });
  boards.push(board);
  await board.store.loaded;
  return `http://127.0.0.1:${board.port}`;
};

/** A PNG of one grey pixel of value `v`. */
const png = (v: number): Uint8Array => {
  const p = new PNG({ width: 1, height: 1 });
  p.data.set([v, v, v, 255]);
  return Uint8Array.from(PNG.sync.write(p));
};
const JPEG = Uint8Array.from([0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 0x4a, 0x46, 0x49, 0x46, 0x00, 0x01, 0xff, 0xd9]);

const json = async (url: string): Promise<unknown> => {
  const r = await send(url);
  expect(r.status, `${url}: ${r.text}`).toBe(200);
  expect(r.headers["content-type"]).toBe("application/json");
  return JSON.parse(r.text);
};

let logdir: string;
let base: string;
beforeEach(async () => {
  logdir = tempDir();
  const w = new SummaryWriter(join(logdir, "train"), { clock: new VirtualClock({ startMs: 1_700_000_000_000 }) });
  w.addHistogram("weights", [0, 1, 1, 2], 0, { buckets: 2 });
  w.addHistogram("weights", [5, 5, 5], 1, { buckets: 2 });
  w.addImage("sample", { png: png(10) }, 0);
  w.addImage("sample", { png: png(20) }, 5);
  w.addSummary([{ tag: "photo", image: { height: 1, width: 1, colorspace: 3, encodedImageString: JPEG } }], 2);
  w.addText("notes", "# Title\n\n**bold** <script>alert(1)</script>", 3);
  w.addText("table", ["a", "*b*", "c", "d"], 3);
  w.addSessionLog("CHECKPOINT", 100, { checkpointPath: "ckpt/model.ckpt-100" });
  w.addSessionLog("CHECKPOINT", 50, { checkpointPath: "ckpt/model.ckpt-50" });
  await w.close();
  const e = new SummaryWriter(join(logdir, "eval"), { clock: new VirtualClock({ startMs: 1_700_000_000_500 }) });
  e.addScalar("loss", 1, 0);
  await e.close();
  base = await serve(logdir);
});

describe("histograms (dashboards.md §1)", () => {
  it("tags: {run: {tag: {displayName, description}}}, runs without histograms left out; the plugin is enabled", async () => {
    expect(await json(`${base}/data/plugin/histograms/tags`)).toEqual({ train: { weights: { displayName: "", description: "" } } });
    const listing = (await json(`${base}/data/plugins_listing`)) as Record<string, { enabled: boolean; tab_name: string }>;
    expect(Object.keys(listing).sort()).toEqual(["histograms", "images", "scalars", "text"]);
    for (const p of ["histograms", "images", "text", "scalars"]) expect([p, listing[p]?.enabled, listing[p]?.tab_name]).toEqual([p, true, p]);
  });

  it("histograms: [[wall_time, step, [[left, right, count], …]], …], every histogram, floats as Python writes them", async () => {
    const r = await send(`${base}/data/plugin/histograms/histograms?run=train&tag=weights`);
    const rows = JSON.parse(r.text) as [number, number, [number, number, number][]][];
    expect(rows.map((row) => [row[0], row[1]])).toEqual([
      [1_700_000_000, 0],
      [1_700_000_000, 1],
    ]);
    for (const [, , buckets] of rows) {
      expect(buckets.length).toBeGreaterThan(0);
      for (const b of buckets) expect(b).toHaveLength(3);
    }
    expect(rows[0]?.[2].reduce((n, b) => n + b[2], 0)).toBe(4);
    expect(rows[1]?.[2].reduce((n, b) => n + b[2], 0)).toBe(3);
    expect(r.text.startsWith("[[1700000000.0, 0, [[")).toBe(true);
  });

  it("ours, limit=n: at most n histograms, evenly spread, the first and the newest among them, as the page draws them", async () => {
    const dir = tempDir();
    const w = new SummaryWriter(join(dir, "r"), { clock: new VirtualClock({ startMs: 1_700_000_000_000 }) });
    for (let s = 0; s < 250; s++) w.addHistogram("h", [s, s + 1, s + 2], s * 10, { buckets: 3 });
    await w.close();
    const at = await serve(dir);
    const steps = async (q: string): Promise<number[]> => ((await json(`${at}/data/plugin/histograms/histograms?run=r&tag=h${q}`)) as [number, number][]).map((r) => r[1]);
    expect(await steps("")).toHaveLength(250);
    const hundred = await steps("&limit=100");
    expect(hundred).toHaveLength(100);
    expect([hundred[0], hundred.at(-1)]).toEqual([0, 2490]);
    const gaps = new Set(hundred.slice(1).map((x, i) => x - (hundred[i] as number)));
    expect([...gaps].sort()).toEqual([20, 30]); // 249 / 99 ≈ 2.5 histograms apart
    expect(await steps("&limit=3")).toEqual([0, 1250, 2490]);
    expect(await steps("&limit=1")).toEqual([2490]);
    expect(await steps("&limit=1000")).toHaveLength(250);
    for (const bad of ["0", "-2", "x", ""]) {
      const r = await send(`${at}/data/plugin/histograms/histograms?run=r&tag=h&limit=${bad}`);
      expect([bad, r.status, r.text]).toEqual([bad, 400, `Invalid argument: limit: expected an integer >= 1, got ${JSON.stringify(bad)}`]);
    }
  });

  it("the memory policy: past the byte budget of a tag, the spacing of the steps kept doubles (first and newest kept); said on onIssue, in the tag's description and on /board/thinned", async () => {
    const dir = tempDir();
    const w = new SummaryWriter(join(dir, "r"), { clock: new VirtualClock({ startMs: 1_700_000_000_000 }) });
    for (let s = 0; s < 40; s++) w.addHistogram("h", [s, s + 1], s, { buckets: 30 });
    w.addHistogram("small", [1], 0);
    await w.close();
    const issues: string[] = [];
    // 30 buckets: 30 × 24 + 28 = 748 bytes a histogram; room for 10.
    const at = await serve(dir, { histogramBytesPerTag: 748 * 10, onIssue: (m) => issues.push(m) });
    const steps = ((await json(`${at}/data/plugin/histograms/histograms?run=r&tag=h`)) as [number, number][]).map((r) => r[1]);
    expect(steps).toEqual([0, 8, 16, 24, 32, 39]);
    expect(issues).toHaveLength(3); // three thinnings: every 2nd, every 4th, every 8th kept
    expect(issues[0]).toBe(
      'histograms of run "r", tag "h": over the 0.00713 MiB kept per tag; 5 older steps dropped so far (the steps kept stay evenly spread, the first and the newest always among them), 6 kept; raise --histogram-mib-per-tag (histogramBytesPerTag) to keep more',
    );
    const tags = (await json(`${at}/data/plugin/histograms/tags`)) as Record<string, Record<string, { description: string }>>;
    expect(tags["r"]?.["h"]?.description).toBe("34 older steps were dropped to keep this tag's histograms within 0.00713 MiB (the steps kept are evenly spread; the first and the newest are kept).");
    expect(tags["r"]?.["small"]?.description).toBe("");
    expect(await json(`${at}/board/thinned`)).toEqual([{ plugin: "histograms", run: "r", tag: "h", dropped: 34, kept: 6, budget_bytes: 7480 }]);
  });
});

describe("images", () => {
  it("tags with samples; images lists {wall_time, step, query}; individualImage serves the bytes with a sniffed type and nosniff", async () => {
    expect(await json(`${base}/data/plugin/images/tags`)).toEqual({
      // TF1 image values without a display name show their tag (TensorBoard's migration rule).
      train: { photo: { displayName: "photo", description: "", samples: 1 }, sample: { displayName: "sample", description: "", samples: 1 } },
    });
    const list = (await json(`${base}/data/plugin/images/images?run=train&tag=sample&sample=0`)) as { wall_time: number; step: number; query: string }[];
    expect(list.map((i) => i.step)).toEqual([0, 5]);
    expect(list.every((i) => i.wall_time === 1_700_000_000 && typeof i.query === "string")).toBe(true);
    const image = await fetch(`${base}/data/plugin/images/individualImage?${list[1]?.query}`, { headers: { "Accept-Encoding": "gzip" } });
    expect(image.status).toBe(200);
    expect(image.headers.get("content-type")).toBe("image/png");
    expect(image.headers.get("x-content-type-options")).toBe("nosniff");
    expect(image.headers.get("content-encoding")).toBeNull();
    expect(new Uint8Array(await image.arrayBuffer())).toEqual(png(20));
    const [photo] = (await json(`${base}/data/plugin/images/images?run=train&tag=photo`)) as { query: string }[];
    const jpeg = await fetch(`${base}/data/plugin/images/individualImage?${photo?.query}`);
    expect(jpeg.headers.get("content-type")).toBe("image/jpeg");
    expect(new Uint8Array(await jpeg.arrayBuffer())).toEqual(JPEG);
  });

  it("sniffs png, jpeg, gif and bmp from the bytes; anything else is application/octet-stream", () => {
    expect(sniffImageType(png(1))).toBe("image/png");
    expect(sniffImageType(JPEG)).toBe("image/jpeg");
    expect(sniffImageType(new TextEncoder().encode("GIF89a...."))).toBe("image/gif");
    expect(sniffImageType(new TextEncoder().encode("BM...."))).toBe("image/bmp");
    expect(sniffImageType(new TextEncoder().encode("<svg onload=alert(1)>"))).toBe("application/octet-stream");
    expect(sniffImageType(new Uint8Array(0))).toBe("application/octet-stream");
  });

  it("the memory policy: past the byte budget of a tag, the steps kept are evenly spread (first and newest kept); said on onIssue, in the tag's description and on /board/thinned", async () => {
    const dir = tempDir();
    const w = new SummaryWriter(join(dir, "r"), { clock: new VirtualClock({ startMs: 1_700_000_000_000 }) });
    const one = png(0).length;
    for (let s = 0; s < 20; s++) w.addImage("pic", { png: png(s) }, s);
    await w.close();
    const issues: string[] = [];
    const at = await serve(dir, { imageBytesPerTag: one * 10, onIssue: (m) => issues.push(m) });
    const steps = ((await json(`${at}/data/plugin/images/images?run=r&tag=pic`)) as { step: number }[]).map((i) => i.step);
    expect(steps[0]).toBe(0);
    expect(steps.at(-1)).toBe(19);
    expect(steps.length).toBeLessThanOrEqual(10);
    expect(steps.length).toBeGreaterThanOrEqual(5);
    expect(issues.length).toBeGreaterThan(0);
    expect(issues[0]).toMatch(/^images of run "r", tag "pic": over the .* MiB kept per tag; \d+ older steps dropped/);
    const tags = (await json(`${at}/data/plugin/images/tags`)) as Record<string, Record<string, { description: string }>>;
    expect(tags["r"]?.["pic"]?.description).toMatch(new RegExp(`^${20 - steps.length} older steps were dropped to keep this tag's images within`));
    expect(await json(`${at}/board/thinned`)).toEqual([{ plugin: "images", run: "r", tag: "pic", dropped: 20 - steps.length, kept: steps.length, budget_bytes: one * 10 }]);
  });
});

describe("text", () => {
  it("tags: {run: [tag]}; text: [{wall_time, step, text}] rendered to HTML, raw HTML escaped; a rank-1 tensor is a table", async () => {
    expect(await json(`${base}/data/plugin/text/tags`)).toEqual({ train: ["notes", "table"] });
    const [notes] = (await json(`${base}/data/plugin/text/text?run=train&tag=notes`)) as { wall_time: number; step: number; text: string }[];
    expect(notes?.step).toBe(3);
    expect(notes?.wall_time).toBe(1_700_000_000);
    expect(notes?.text).toContain("<h1>Title</h1>");
    expect(notes?.text).toContain("<strong>bold</strong> &lt;script&gt;alert(1)&lt;/script&gt;");
    expect(notes?.text).not.toContain("<script");
    const [table] = (await json(`${base}/data/plugin/text/text?run=train&tag=table`)) as { text: string }[];
    expect(table?.text).toMatch(/^<table class="text-table"><tbody><tr><td><p>a<\/p>\n<\/td><\/tr><tr><td><p><em>b<\/em>/);
    expect(table?.text.match(/<tr>/g)).toHaveLength(4);
  });

  it("ours, text limit=n: at most n steps, evenly spread, the first and the newest among them", async () => {
    const dir = tempDir();
    const w = new SummaryWriter(join(dir, "r"), { clock: new VirtualClock({ startMs: 1_700_000_000_000 }) });
    for (let s = 0; s < 50; s++) w.addText("log", `line ${s}`, s);
    await w.close();
    const at = await serve(dir);
    const steps = async (q: string): Promise<number[]> => ((await json(`${at}/data/plugin/text/text?run=r&tag=log${q}`)) as { step: number }[]).map((r) => r.step);
    expect(await steps("")).toHaveLength(50);
    expect(await steps("&limit=3")).toEqual([0, 25, 49]);
    expect(await steps("&limit=1")).toEqual([49]);
    expect(await steps("&limit=500")).toHaveLength(50);
    const rows = (await json(`${at}/data/plugin/text/text?run=r&tag=log&limit=2`)) as { step: number; text: string }[];
    expect(rows.map((r) => [r.step, r.text])).toEqual([
      [0, "<p>line 0</p>\n"],
      [49, "<p>line 49</p>\n"],
    ]);
    expect(await json(`${at}/data/plugin/text/text?run=r&tag=nope&limit=2`)).toEqual([]);
    const r = await send(`${at}/data/plugin/text/text?run=r&tag=log&limit=0`);
    expect([r.status, r.text]).toEqual([400, 'Invalid argument: limit: expected an integer >= 1, got "0"']);
  });

  it("the memory policy: past the byte budget of a tag, the steps kept are evenly spread (first and newest kept); said on onIssue and on /board/thinned", async () => {
    const dir = tempDir();
    const w = new SummaryWriter(join(dir, "r"), { clock: new VirtualClock({ startMs: 1_700_000_000_000 }) });
    const line = "x".repeat(920); // 920 + 16 + 64 = 1000 bytes a step
    for (let s = 0; s < 40; s++) w.addText("log", `${line.slice(String(s).length)}${s}`, s);
    await w.close();
    const issues: string[] = [];
    const at = await serve(dir, { textBytesPerTag: 10_000, onIssue: (m) => issues.push(m) });
    const rows = (await json(`${at}/data/plugin/text/text?run=r&tag=log`)) as { step: number; text: string }[];
    expect(rows.map((r) => r.step)).toEqual([0, 8, 16, 24, 32, 39]);
    expect(rows.at(-1)?.text).toContain("x39</p>");
    expect(issues.map((m) => m.replace(/; \d+ older.*/, ""))).toEqual(Array(3).fill('text of run "r", tag "log": over the 0.00954 MiB kept per tag'));
    expect(issues[2]).toMatch(/; 32 older steps dropped so far .*, 6 kept; raise --text-mib-per-tag \(textBytesPerTag\) to keep more$/);
    expect(await json(`${at}/board/thinned`)).toEqual([{ plugin: "text", run: "r", tag: "log", dropped: 34, kept: 6, budget_bytes: 10_000 }]);
    // Nothing thinned: an empty list.
    expect(await json(`${base}/board/thinned`)).toEqual([]);
  });

  it("an unknown series is 200 [] (as TensorBoard); without run or tag 400", async () => {
    expect((await send(`${base}/data/plugin/text/text?run=train&tag=nope`)).text).toBe("[]");
    expect((await send(`${base}/data/plugin/text/text?run=nope&tag=notes`)).text).toBe("[]");
    const r = await send(`${base}/data/plugin/text/text?run=train`);
    expect([r.status, r.text]).toEqual([400, "Invalid argument: Both run and tag must be specified: tag=None, run='train'"]);
  });
});

describe("checkpoints (ours)", () => {
  it("/board/checkpoints?run= lists the run's SessionLog CHECKPOINTs by step; without run, every run that has some", async () => {
    expect(await json(`${base}/board/checkpoints?run=train`)).toEqual([
      { step: 50, wall_time: 1_700_000_000, path: "ckpt/model.ckpt-50" },
      { step: 100, wall_time: 1_700_000_000, path: "ckpt/model.ckpt-100" },
    ]);
    expect(await json(`${base}/board/checkpoints?run=eval`)).toEqual([]);
    expect(Object.keys((await json(`${base}/board/checkpoints`)) as object)).toEqual(["train"]);
  });
});

describe("bad input: one-line errors", () => {
  it("unknown run or tag is 404, missing run or tag 400, bad numbers 400", async () => {
    const cases: [string, number, string][] = [
      ["/data/plugin/histograms/histograms?run=train&tag=nope", 404, "Not found: No histogram tag 'nope' for run 'train'"],
      ["/data/plugin/histograms/histograms?run=nope&tag=weights", 404, "Not found: No histogram tag 'weights' for run 'nope'"],
      ["/data/plugin/histograms/histograms?tag=weights", 400, "Invalid argument: Both run and tag must be specified: tag='weights', run=None"],
      ["/data/plugin/images/images?run=train&tag=nope", 404, "Not found: No image data for run='train', tag='nope'"],
      ["/data/plugin/images/images?run=train", 400, "Invalid argument: Both run and tag must be specified: tag=None, run='train'"],
      ["/data/plugin/images/images?run=train&tag=sample&sample=-1", 400, 'Invalid argument: sample: expected a non-negative integer, got "-1"'],
      ["/data/plugin/images/individualImage", 400, "Invalid argument: individualImage needs the query an images list gave (run, tag, sample, id)"],
      ["/data/plugin/images/individualImage?run=train&tag=sample&sample=0&id=999", 404, "Not found: No image 999 (sample 0) for run='train', tag='sample': thinned out or purged by a restart; list the images again"],
      ["/data/plugin/images/individualImage?run=train&tag=sample&id=x", 400, 'Invalid argument: id: expected a non-negative integer, got "x"'],
      ["/board/checkpoints?run=nope", 404, "Not found: no run 'nope' (the runs are at /data/runs)"],
    ];
    for (const [path, status, text] of cases) {
      const r = await send(`${base}${path}`);
      expect([path, r.status, r.text, r.headers["content-type"]]).toEqual([path, status, text, "text/plain; charset=utf-8"]);
    }
    // A sample no step has: an empty list, not an error.
    expect(await json(`${base}/data/plugin/images/images?run=train&tag=sample&sample=3`)).toEqual([]);
  });
});

describe("a restart's SessionLog START purges the views too", () => {
  it("histograms, images and text at step >= s go, checkpoints after s go (the one restored from stays), for that run only", async () => {
    const dir = tempDir();
    const clock = new VirtualClock({ startMs: 1_700_000_000_000 });
    const first = new SummaryWriter(join(dir, "r"), { clock, purgeStep: 0 });
    for (let s = 0; s < 10; s++) {
      first.addHistogram("h", [s, s + 1], s);
      first.addImage("i", { png: png(s) }, s);
      first.addText("t", `step ${s}`, s);
      if (s % 3 === 0) first.addSessionLog("CHECKPOINT", s, { checkpointPath: `ckpt-${s}` });
    }
    await first.close();
    const second = new SummaryWriter(join(dir, "r"), { clock: new VirtualClock({ startMs: 1_700_000_100_000 }), purgeStep: 6 });
    second.addHistogram("h", [60], 6);
    second.addText("t", "again", 6);
    await second.close();
    const at = await serve(dir);
    const hist = (await json(`${at}/data/plugin/histograms/histograms?run=r&tag=h`)) as [number, number][];
    expect(hist.map((r) => r[1])).toEqual([0, 1, 2, 3, 4, 5, 6]);
    expect(hist.at(-1)?.[0]).toBe(1_700_000_100);
    expect(((await json(`${at}/data/plugin/images/images?run=r&tag=i`)) as { step: number }[]).map((i) => i.step)).toEqual([0, 1, 2, 3, 4, 5]);
    const texts = (await json(`${at}/data/plugin/text/text?run=r&tag=t`)) as { step: number; text: string }[];
    expect(texts.map((t) => t.step)).toEqual([0, 1, 2, 3, 4, 5, 6]);
    expect(texts.at(-1)?.text).toBe("<p>again</p>\n");
    expect(((await json(`${at}/board/checkpoints?run=r`)) as { step: number }[]).map((c) => c.step)).toEqual([0, 3, 6]);
  });
});
