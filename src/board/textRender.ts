/**
 * `renderText`: a text summary as the HTML the text view shows (TensorBoard's text plugin renders
 * on the server too). Markdown goes through `markdown-it` with `html: false`, so no HTML written
 * in a summary passes through: `<script>` or `<img onerror=…>` come out as text. Links are kept
 * only for `http:`, `https:`, `mailto:` and relative targets (never `javascript:`, `data:`,
 * `vbscript:`, however spelled); images only from the board itself (a relative path) or as a
 * `data:image/…` URL, since the page makes no request elsewhere; any other image becomes its alt
 * text. The page's Content-Security-Policy (no inline script) is a second wall behind this one.
 *
 * A rank-0 tensor (or one string) is one Markdown document; a rank-1 tensor a one-column table
 * and a rank-2 tensor a table, each cell Markdown, as TensorBoard shows them; a higher rank shows
 * its first 2-D slice, with a note.
 *
 * @module
 */

import MarkdownIt from "markdown-it";

import type { TextPoint } from "./TextSeries.js";

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** One Markdown document as safe HTML. */
export const renderMarkdown = (source: string): string => md.render(source);

/** A text summary (its strings and shape) as safe HTML. */
export const renderText = (point: Pick<TextPoint, "text" | "shape">): string => {
  const { text, shape } = point;
  if (shape.length === 0 || text.length <= 1) return renderMarkdown(text[0] ?? "");
  const rows = shape[0] as number;
  const cols = shape.length === 1 ? 1 : (shape[1] as number);
  // Row-major strides of the first two dimensions: element [r, c, 0, …].
  const colStride = shape.slice(2).reduce((n, d) => n * d, 1);
  const rowStride = cols * colStride;
  const cells = (r: number): string => Array.from({ length: cols }, (_, c) => `<td>${renderMarkdown(text[r * rowStride + c * colStride] ?? "")}</td>`).join("");
  const table = `<table class="text-table"><tbody>${Array.from({ length: rows }, (_, r) => `<tr>${cells(r)}</tr>`).join("")}</tbody></table>`;
  return shape.length > 2 ? `<p><em>A tensor of shape [${shape.join(", ")}]: its first 2-D slice is shown.</em></p>${table}` : table;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** An inline raster image (`data:image/svg+xml` is not one: an SVG can hold script). */
const RASTER_DATA = /^data:image\/(?:png|gif|jpeg|webp);/;

/** The schemes a link may have; a target without a scheme is relative. */
const LINK_SCHEMES = new Set(["http:", "https:", "mailto:"]);

/** `url` (percent-decoded where it decodes) without what browsers ignore in a URL (ASCII whitespace and controls), lower case. */
const canonical = (url: string): string => {
  let decoded = url;
  try {
    decoded = decodeURIComponent(url);
  } catch {
    // not percent-encoded throughout: judged as written
  }
  return decoded.replace(/[\u0000-\u0020\u007f]/g, "").toLowerCase();
};

const schemeOf = (url: string): string | undefined => /^[a-z][a-z0-9+.-]*:/.exec(canonical(url))?.[0];

const linkAllowed = (url: string): boolean => {
  const scheme = schemeOf(url);
  return scheme === undefined ? !canonical(url).startsWith("\\\\") : LINK_SCHEMES.has(scheme);
};

/** An image the page may load: the board's own (relative, not `//host`) or an inline raster image. */
const imageAllowed = (url: string): boolean => {
  const c = canonical(url);
  if (schemeOf(url) === undefined) return !c.startsWith("//") && !c.startsWith("\\") && !c.startsWith("/\\");
  return RASTER_DATA.test(c);
};

const md = new MarkdownIt({ html: false, linkify: false, typographer: false });
// One check for links and images (markdown-it's): an inline raster image passes it, and the image
// rule below narrows images further. (A link to a data: image is inert: browsers do not open one.)
md.validateLink = (url: string): boolean => linkAllowed(url) || RASTER_DATA.test(canonical(url));

const renderImage = md.renderer.rules.image;
md.renderer.rules.image = (tokens, idx, options, env, self) => {
  const token = tokens[idx];
  const src = String(token?.attrGet("src") ?? "");
  // An image the page may not load: its alt text instead.
  if (token === undefined || renderImage === undefined || !imageAllowed(src)) return md.utils.escapeHtml(token?.content ?? "");
  return renderImage(tokens, idx, options, env, self);
};

const renderLinkOpen = md.renderer.rules.link_open;
md.renderer.rules.link_open = (tokens, idx, options, env, self) => {
  // Opened elsewhere, without telling the target where from.
  tokens[idx]?.attrSet("rel", "noopener noreferrer nofollow");
  tokens[idx]?.attrSet("target", "_blank");
  return renderLinkOpen === undefined ? self.renderToken(tokens, idx, options) : renderLinkOpen(tokens, idx, options, env, self);
};
