/**
 * The size the board's page shows images at, in Debian's Chromium (playwright-core): a small
 * image (a 32 px sample) scaled up by a whole factor to a readable width and drawn pixelated, a
 * large one scaled down to its card, each with its native size in its title and caption. Without
 * /usr/bin/chromium these tests skip with a message; under CI they fail instead. Waits are
 * bounded polls on `window.__board`.
 */
import { join } from "node:path";
import { PNG } from "pngjs";
import { describe, expect, it } from "vitest";

import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { haveChromium, requireChromiumUnderCi } from "../util/chromium.js";
import { useBoardPages } from "./boardPageInChromium.js";

/** A `width` × `height` PNG, a checkerboard of 1-pixel squares. */
const png = (width: number, height: number): Uint8Array => {
  const p = new PNG({ width, height });
  for (let y = 0; y < height; y++) for (let x = 0; x < width; x++) p.data.set((x + y) % 2 === 0 ? [0, 0, 0, 255] : [255, 255, 255, 255], (y * width + x) * 4);
  return Uint8Array.from(PNG.sync.write(p));
};

const { tempDir, open } = useBoardPages("board-image-size-");

requireChromiumUnderCi("the board's image size tests");

describe.skipIf(!haveChromium)("the size of images on the board's page in Chromium (playwright-core)", () => {
  it("a 32 px image is shown 160 px wide, pixelated; a 1000 × 500 one fits the card; each says its native size", async () => {
    const dir = tempDir();
    const w = new SummaryWriter(join(dir, "train"), {});
    w.addImage("small", { png: png(32, 32) }, 0);
    w.addImage("large", { png: png(1000, 500) }, 0);
    await w.close();
    const { page, errors } = await open(dir);
    await page.waitForFunction(() => {
      const images = Object.values((globalThis as any).__board?.images ?? {}) as { loaded: boolean; shownSize?: number[] }[];
      return images.length === 2 && images.every((i) => i.loaded && i.shownSize !== undefined);
    }, undefined, { timeout: 20_000, polling: 50 });

    const shown = async (tag: string) => {
      const img = page.locator(`.image-card[data-tag="${tag}"] img`);
      const box = (await img.boundingBox()) as { width: number; height: number };
      return {
        size: [box.width, box.height],
        rendering: await img.evaluate((e) => (globalThis as any).getComputedStyle(e).imageRendering as string),
        title: await img.getAttribute("title"),
        caption: await page.locator(`.image-card[data-tag="${tag}"] .image-size`).textContent(),
      };
    };
    expect(await shown("small")).toEqual({ size: [160, 160], rendering: "pixelated", title: "native size 32 × 32 px", caption: "32 × 32 px, shown at 5×" });
    expect(await shown("large")).toEqual({ size: [520, 260], rendering: "auto", title: "native size 1000 × 500 px", caption: "1000 × 500 px, shown at 0.52×" });
    expect(errors).toEqual([]);
  });
});
