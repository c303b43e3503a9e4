import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

import { startBoard } from "../../src/board/BoardServer.js";
import { useTempDirs } from "../util/tempDirs.js";
import { send } from "./http.js";

const tempDir = useTempDirs("board-page-assets-");
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const serve = async (): Promise<{ port: number }> => {
  const dir = tempDir();
  mkdirSync(join(dir, "empty-run"));
  const board = await startBoard(dir, { port: 0 });
  cleanups.push(() => board.close());
  return board;
};

describe("the page and its assets, from the package (no CDN)", () => {
  it("/ is the page, with a CSP that allows no inline or foreign script; its scripts and styles are served from the package", async () => {
    const board = await serve();
    const base = `http://127.0.0.1:${board.port}`;
    const page = await send(`${base}/`);
    expect(page.status).toBe(200);
    expect(page.headers["content-type"]).toBe("text/html; charset=utf-8");
    const csp = String(page.headers["content-security-policy"]);
    expect(csp).toContain("script-src 'self'");
    expect(csp).not.toMatch(/script-src[^;]*unsafe-(?:inline|eval)/);
    // Every script is a file of ours: no inline script, nothing from another origin.
    const scripts = [...page.text.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)];
    expect(scripts.map((m) => [/src="([^"]+)"/.exec(m[1] as string)?.[1], (m[2] as string).trim()])).toEqual([["board/page/board.js", ""]]);
    expect(page.text).not.toMatch(/(?:src|href)="(?:https?:)?\/\//);
    for (const [path, type] of [
      ["/board/page/board.js", "text/javascript; charset=utf-8"],
      ["/board/page/views.js", "text/javascript; charset=utf-8"],
      ["/board/page/histograms.js", "text/javascript; charset=utf-8"],
      ["/board/page/checkpoints.js", "text/javascript; charset=utf-8"],
      ["/board/page/goodput.js", "text/javascript; charset=utf-8"],
      ["/board/page/colors.js", "text/javascript; charset=utf-8"],
      ["/board/page/requestQueue.js", "text/javascript; charset=utf-8"],
      ["/board/page/tagGroups.js", "text/javascript; charset=utf-8"],
      ["/board/page/imageSize.js", "text/javascript; charset=utf-8"],
      ["/board/page/board.css", "text/css; charset=utf-8"],
      ["/board/uplot/uPlot.esm.js", "text/javascript; charset=utf-8"],
      ["/board/uplot/uPlot.min.css", "text/css; charset=utf-8"],
    ] as const) {
      const r = await send(`${base}${path}`);
      expect([path, r.status, r.headers["content-type"]]).toEqual([path, 200, type]);
      expect(r.text.length).toBeGreaterThan(100);
    }
    expect((await send(`${base}/board/page/../../package.json`)).status).toBe(404);
    expect((await send(`${base}/board/uplot/uPlot.cjs.js`)).status).toBe(404);
  });
});
