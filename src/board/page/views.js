// The board's views beyond scalars: histograms (offset view), images (a step slider; small
// images scaled up by a whole factor, drawn pixelated, their native size in a caption), text
// (HTML rendered and made safe by the server: markdown-it without raw HTML), and the profiler
// timelines to download. Each card refetches when the live stream names its series.
// What the tests read goes on `exposed` (window.__board): histograms, images, texts, timelines.
import { drawOffset, MAX_LINES } from "./histograms.js";
import { imageSize } from "./imageSize.js";

/**
 * `fn` (async) run one call at a time: a call while it runs does not run it then, but has it run
 * exactly once more when it ends, however many calls came meanwhile. The promise of the call that
 * started the runs settles when they end (rejects on the first error, which ends them); that of a
 * call meanwhile resolves at once. The views' cards use it, and board.js for its runs and charts.
 */
export const coalesce = (fn) => {
  let running = false;
  let again = false;
  const run = async () => {
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      do {
        again = false;
        await fn();
      } while (again);
    } finally {
      running = false;
    }
  };
  return run;
};

/** A new `tag` element with `props` assigned and `children` appended (board.js builds with it too). */
export const el = (tag, props = {}, ...children) => {
  const e = document.createElement(tag);
  Object.assign(e, props);
  e.append(...children);
  return e;
};

/** The views, on the page's sections; `ctx` gives `getJson`, `q`, `colorOf`, `isHidden(run)`, `runs()` (in order). */
export const createViews = (exposed, ctx) => {
  exposed.histograms = {};
  exposed.images = {};
  exposed.texts = {};
  exposed.timelines = [];
  const $ = (id) => document.getElementById(id);
  const cards = { histograms: new Map(), images: new Map(), text: new Map() };

  // ----- histograms: a card per tag, a run chosen in it -----

  const histogramCard = (tag) => {
    const select = el("select", { ariaLabel: `run of ${tag}` });
    const canvas = el("canvas");
    const note = el("p", { className: "hint" });
    const section = el("section", { className: "view-card histogram-card" }, el("h3", { textContent: tag }), select, canvas, note);
    section.dataset.tag = tag;
    const card = { section, runs: [], notes: new Map(), refresh: undefined };
    card.refresh = coalesce(async () => {
      const run = select.value;
      if (run === "") return;
      // Only the lines drawn: the server picks them as the offset view would (limit=).
      const rows = await ctx.getJson(`data/plugin/histograms/histograms?${ctx.q({ run, tag, limit: String(MAX_LINES) })}`).catch(() => []);
      const drawn = drawOffset(canvas, rows, ctx.colorOf(run));
      note.textContent = card.notes.get(run) ?? "";
      exposed.histograms[tag] = { run, steps: rows.map((r) => r[1]), drawnSteps: drawn, note: note.textContent, renders: (exposed.histograms[tag]?.renders ?? 0) + 1 };
    });
    select.addEventListener("change", () => card.refresh());
    return card;
  };

  const loadHistograms = async () => {
    const tags = await ctx.getJson("data/plugin/histograms/tags");
    const byTag = new Map();
    const notes = new Map();
    for (const [run, t] of Object.entries(tags)) {
      for (const [tag, info] of Object.entries(t)) {
        byTag.set(tag, [...(byTag.get(tag) ?? []), run]);
        if (info.description) notes.set(JSON.stringify([run, tag]), info.description);
      }
    }
    sync(cards.histograms, [...byTag.keys()].sort(), histogramCard, $("histograms"), (tag) => delete exposed.histograms[tag]);
    for (const [tag, card] of cards.histograms) {
      // In the run list's order (first event first), as the charts list them.
      const order = ctx.runs();
      const runs = (byTag.get(tag) ?? []).filter((r) => !ctx.isHidden(r)).sort((a, b) => order.indexOf(a) - order.indexOf(b));
      const select = card.section.querySelector("select");
      const chosen = runs.includes(select.value) ? select.value : (runs[0] ?? "");
      select.replaceChildren(...runs.map((r) => el("option", { value: r, textContent: r })));
      select.value = chosen;
      card.runs = runs;
      card.notes = new Map(runs.map((r) => [r, notes.get(JSON.stringify([r, tag])) ?? ""]));
      card.refresh();
    }
    $("histograms-view").hidden = cards.histograms.size === 0;
  };

  // ----- images: a card per (run, tag), a slider over its steps -----

  const imageCard = (key) => {
    const [run, tag] = JSON.parse(key);
    const slider = el("input", { type: "range", min: "0", max: "0", value: "0", ariaLabel: `step of ${tag} in ${run}` });
    const label = el("span", { className: "step-label" });
    const note = el("p", { className: "hint" });
    const img = el("img", { alt: `${tag} (${run})` });
    const size = el("p", { className: "image-size" });
    const section = el("section", { className: "view-card image-card" }, el("h3", { textContent: `${tag}` }, el("small", { textContent: ` ${run}` })), el("div", { className: "slider" }, slider, label), img, size, note);
    section.dataset.run = run;
    section.dataset.tag = tag;
    let list = [];
    const view = () => (exposed.images[key] ??= { run, tag, steps: [], index: -1, step: null, src: "", loaded: false });
    const show = (index) => {
      const item = list[index];
      if (item === undefined) return;
      label.textContent = `step ${item.step}`;
      const src = `data/plugin/images/individualImage?${item.query}`;
      Object.assign(view(), { index, step: item.step, loaded: img.getAttribute("src") === src && view().loaded });
      if (img.getAttribute("src") !== src) img.src = src;
      view().src = src;
    };
    img.addEventListener("load", () => {
      const { naturalWidth: w, naturalHeight: h } = img;
      const shown = imageSize(w, h);
      img.width = shown.width;
      img.height = shown.height;
      img.classList.toggle("pixelated", shown.pixelated);
      img.title = `native size ${w} × ${h} px`;
      size.textContent = `${w} × ${h} px${shown.scale === 1 ? "" : `, shown at ${Number(shown.scale.toFixed(2))}×`}`;
      Object.assign(view(), { loaded: true, naturalSize: [w, h], shownSize: [shown.width, shown.height], pixelated: shown.pixelated });
    });
    img.addEventListener("error", () => (view().loaded = false));
    slider.addEventListener("input", () => show(Number(slider.value)));
    const card = { section, note, refresh: undefined };
    card.refresh = coalesce(async () => {
      const atEnd = Number(slider.value) >= list.length - 1;
      list = await ctx.getJson(`data/plugin/images/images?${ctx.q({ run, tag, sample: "0" })}`).catch(() => []);
      slider.max = String(Math.max(0, list.length - 1));
      // Following the newest step unless the user moved back.
      if (atEnd) slider.value = slider.max;
      view().steps = list.map((i) => i.step);
      show(Math.min(Number(slider.value), list.length - 1));
    });
    return card;
  };

  const loadImages = async () => {
    const tags = await ctx.getJson("data/plugin/images/tags");
    const keys = [];
    const notes = new Map();
    for (const [run, t] of Object.entries(tags)) {
      if (ctx.isHidden(run)) continue;
      for (const [tag, info] of Object.entries(t)) {
        const key = JSON.stringify([run, tag]);
        keys.push(key);
        notes.set(key, [info.samples > 1 ? `sample 0 of ${info.samples} shown.` : "", info.description].filter(Boolean).join(" "));
      }
    }
    sync(cards.images, keys, imageCard, $("images"), (key) => delete exposed.images[key]);
    for (const [key, card] of cards.images) {
      card.note.textContent = notes.get(key) ?? "";
      card.refresh();
    }
    $("images-view").hidden = cards.images.size === 0;
  };

  // ----- text: a card per (run, tag), newest step first -----

  const textCard = (key) => {
    const [run, tag] = JSON.parse(key);
    const body = el("div", { className: "text-steps" });
    const note = el("p", { className: "hint" });
    const section = el("section", { className: "view-card text-card" }, el("h3", { textContent: `${tag}` }, el("small", { textContent: ` ${run}` })), note, body);
    section.dataset.run = run;
    section.dataset.tag = tag;
    const card = { section, refresh: undefined };
    card.refresh = coalesce(async () => {
      const [rows, thinned] = await Promise.all([ctx.getJson(`data/plugin/text/text?${ctx.q({ run, tag })}`).catch(() => []), ctx.getJson("board/thinned").catch(() => [])]);
      const t = thinned.find((s) => s.plugin === "text" && s.run === run && s.tag === tag);
      note.textContent = t === undefined ? "" : `${t.dropped} older steps were dropped to keep this tag's text within ${mib(t.budget_bytes)} MiB (the steps kept are evenly spread; the first and the newest are kept).`;
      body.replaceChildren(
        ...rows
          .slice()
          .reverse()
          .map((r) => {
            const html = el("div", { className: "text-body" });
            // Rendered by the server with markdown-it, raw HTML disabled and links checked
            // (textRender.ts); the page's CSP forbids inline script besides.
            html.innerHTML = r.text;
            return el("article", {}, el("h4", { textContent: `step ${r.step}` }), html);
          }),
      );
      exposed.texts[key] = { run, tag, steps: rows.map((r) => r.step), html: rows.map((r) => r.text), note: note.textContent, renders: (exposed.texts[key]?.renders ?? 0) + 1 };
    });
    return card;
  };

  const loadTexts = async () => {
    const tags = await ctx.getJson("data/plugin/text/tags");
    const keys = Object.entries(tags).flatMap(([run, list]) => (ctx.isHidden(run) ? [] : list.map((tag) => JSON.stringify([run, tag]))));
    sync(cards.text, keys, textCard, $("texts"), (key) => delete exposed.texts[key]);
    for (const card of cards.text.values()) card.refresh();
    $("text-view").hidden = cards.text.size === 0;
  };

  // ----- profiler timelines: links to download -----

  const loadTimelines = async () => {
    const list = await ctx.getJson("board/timelines");
    $("timelines").replaceChildren(
      ...list.map((t) => {
        const a = el("a", { href: `board/timelines/${t.file.split("/").map(encodeURIComponent).join("/")}`, textContent: t.file });
        a.setAttribute("download", "");
        return el("li", {}, a, ` (run ${t.run}, step ${t.step}, ${kib(t.bytes)})`);
      }),
    );
    exposed.timelines = list;
    $("timelines-view").hidden = list.length === 0;
  };

  const loadAll = coalesce(() => Promise.all([loadHistograms(), loadImages(), loadTexts(), loadTimelines()]));

  return {
    /** Fetches every view's list again (runs changed, the logdir was loaded, a run was hidden). */
    load: loadAll,
    /** The live stream's `views` changes: refetch the cards named, or the lists for a new one. */
    changed(changes) {
      for (const c of changes) {
        if (c.plugin === "histograms") {
          const card = cards.histograms.get(c.tag);
          if (card === undefined || !card.runs.includes(c.run)) return void loadAll();
          if (card.section.querySelector("select").value === c.run) card.refresh();
        } else if (c.plugin === "images" || c.plugin === "text") {
          const card = cards[c.plugin].get(JSON.stringify([c.run, c.tag]));
          if (card === undefined) return void loadAll();
          card.refresh();
        }
      }
    },
    /** A restart purged `run` (every tag, or `tag`): its cards refetch. */
    purged(run, tag) {
      for (const [t, card] of cards.histograms) if ((tag === undefined || tag === t) && card.section.querySelector("select").value === run) card.refresh();
      for (const group of [cards.images, cards.text]) {
        for (const [key, card] of group) {
          const [r, t] = JSON.parse(key);
          if (r === run && (tag === undefined || tag === t)) card.refresh();
        }
      }
    },
    timelines: loadTimelines,
  };
};

/** Makes `map` hold a card for each of `keys` (in order, in `parent`), removing the others. */
const sync = (map, keys, make, parent, onRemove) => {
  for (const [key, card] of map) {
    if (keys.includes(key)) continue;
    card.section.remove();
    map.delete(key);
    onRemove(key);
  }
  for (const key of keys) if (!map.has(key)) map.set(key, make(key));
  parent.replaceChildren(...keys.map((k) => map.get(k).section));
};

const mib = (bytes) => String(Number((bytes / (1 << 20)).toPrecision(3)));

const kib = (bytes) => (bytes < 1024 ? `${bytes} B` : bytes < 1 << 20 ? `${(bytes / 1024).toFixed(1)} KiB` : `${(bytes / (1 << 20)).toFixed(1)} MiB`);
