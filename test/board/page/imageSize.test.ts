import { describe, expect, it } from "vitest";

import { pageModule } from "./pageModule.js";

const { imageSize } = await pageModule<{ imageSize: (w: number, h: number) => { width: number; height: number; scale: number; pixelated: boolean } }>("imageSize.js");

describe("the size an image is shown at (src/board/page/imageSize.js)", () => {
  it("a small image is scaled up by the smallest whole factor that makes it 160 px wide, pixelated", () => {
    expect(imageSize(32, 32)).toEqual({ width: 160, height: 160, scale: 5, pixelated: true });
    expect(imageSize(4, 4)).toEqual({ width: 160, height: 160, scale: 40, pixelated: true });
    expect(imageSize(28, 28)).toEqual({ width: 168, height: 168, scale: 6, pixelated: true });
    expect(imageSize(100, 50)).toEqual({ width: 200, height: 100, scale: 2, pixelated: true });
  });

  it("no more than fits the card (520 × 520): a tall narrow image stays at its size", () => {
    expect(imageSize(3, 400)).toEqual({ width: 3, height: 400, scale: 1, pixelated: false });
    expect(imageSize(64, 200)).toEqual({ width: 128, height: 400, scale: 2, pixelated: true });
  });

  it("an image already wide enough keeps its size; a large one is scaled down to fit, smoothly", () => {
    expect(imageSize(160, 90)).toEqual({ width: 160, height: 90, scale: 1, pixelated: false });
    expect(imageSize(1000, 500)).toEqual({ width: 520, height: 260, scale: 0.52, pixelated: false });
    expect(imageSize(32, 1000)).toMatchObject({ width: 17, height: 520, pixelated: false });
    expect(imageSize(0, 0)).toEqual({ width: 0, height: 0, scale: 1, pixelated: false });
  });
});
