/**
 * The board's web page and its assets, served from the package itself (no CDN, no build step):
 * `src/board/page/` (plain ES modules and CSS, shipped in the package's `files`) and uPlot's
 * `dist/` files, found with Node's module resolution (`require.resolve("uplot/dist/…")`) in the
 * installed `uplot` package. Only the listed paths are served: no path from a request ever
 * reaches the file system.
 *
 * @module
 */

import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

import type { Body } from "./respond.js";

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** The page or asset at route `path` (`/`, `/board/page/board.js`, `/board/uplot/uPlot.esm.js`...), or `undefined`. */
export const pageAsset = async (path: string): Promise<Body | undefined> => {
  const asset = ASSETS.get(path === "/index.html" ? "/" : path);
  if (asset === undefined) return undefined;
  return { contentType: asset.contentType, body: await readFile(asset.file(), "utf8") };
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** `src/board/page/`, from this module in `src/board/` (tsx) or in `dist/src/board/` (built). */
const pageDir = (): string => {
  const here = fileURLToPath(new URL("./page/", import.meta.url));
  return existsSync(here) ? here : fileURLToPath(new URL("../../../src/board/page/", import.meta.url));
};

const require = createRequire(import.meta.url);

const pageFile = (name: string) => (): string => `${pageDir()}${name}`;

const ASSETS = new Map<string, { readonly contentType: string; readonly file: () => string }>([
  ["/", { contentType: "text/html", file: pageFile("index.html") }],
  ["/board/page/board.js", { contentType: "text/javascript", file: pageFile("board.js") }],
  ["/board/page/views.js", { contentType: "text/javascript", file: pageFile("views.js") }],
  ["/board/page/histograms.js", { contentType: "text/javascript", file: pageFile("histograms.js") }],
  ["/board/page/checkpoints.js", { contentType: "text/javascript", file: pageFile("checkpoints.js") }],
  ["/board/page/goodput.js", { contentType: "text/javascript", file: pageFile("goodput.js") }],
  ["/board/page/colors.js", { contentType: "text/javascript", file: pageFile("colors.js") }],
  ["/board/page/requestQueue.js", { contentType: "text/javascript", file: pageFile("requestQueue.js") }],
  ["/board/page/tagGroups.js", { contentType: "text/javascript", file: pageFile("tagGroups.js") }],
  ["/board/page/imageSize.js", { contentType: "text/javascript", file: pageFile("imageSize.js") }],
  ["/board/page/board.css", { contentType: "text/css", file: pageFile("board.css") }],
  ["/board/uplot/uPlot.esm.js", { contentType: "text/javascript", file: () => require.resolve("uplot/dist/uPlot.esm.js") }],
  ["/board/uplot/uPlot.min.css", { contentType: "text/css", file: () => require.resolve("uplot/dist/uPlot.min.css") }],
]);
