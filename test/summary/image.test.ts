import { PNG } from "pngjs";
import { describe, expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/errors.js";
import { encodeSummary } from "../../src/summary/EventProto.js";
import { imageValue } from "../../src/summary/image.js";
import { decodeSummary } from "./decoder.js";

const decodeImage = (tag: string, value: ReturnType<typeof imageValue>) => {
  const [v] = decodeSummary(encodeSummary({ value: [value] })).value ?? [];
  expect(v?.tag).toBe(tag);
  return v?.image;
};

describe("imageValue", () => {
  it("encodes raw RGB pixels to a PNG that decodes back to the same pixels", () => {
    const pixels = Uint8Array.from({ length: 2 * 3 * 3 }, (_, i) => i * 10);
    const img = decodeImage("rgb", imageValue("rgb", { pixels, height: 2, width: 3, channels: 3 }));
    expect(img).toMatchObject({ height: 2, width: 3, colorspace: 3 });
    const png = PNG.sync.read(Buffer.from(img?.encodedImageString ?? []));
    expect(png.width).toBe(3);
    expect(png.height).toBe(2);
    // pngjs decodes to RGBA.
    for (let p = 0; p < 6; p++) {
      expect([...png.data.subarray(p * 4, p * 4 + 3)]).toEqual([...pixels.subarray(p * 3, p * 3 + 3)]);
    }
  });

  it("encodes grey, grey+alpha and RGBA with the matching colorspace", () => {
    for (const channels of [1, 2, 4] as const) {
      const pixels = new Uint8Array(4 * 5 * channels).fill(200);
      const img = decodeImage("c", imageValue("c", { pixels, height: 4, width: 5, channels }));
      expect(img).toMatchObject({ height: 4, width: 5, colorspace: channels });
      expect(PNG.sync.read(Buffer.from(img?.encodedImageString ?? [])).width).toBe(5);
    }
  });

  it("passes PNG bytes through as they are, reading size and colorspace from the header", () => {
    const src = new PNG({ width: 7, height: 3 });
    src.data.fill(255);
    const bytes = new Uint8Array(PNG.sync.write(src));
    const img = decodeImage("png", imageValue("png", { png: bytes }));
    expect(img).toMatchObject({ height: 3, width: 7, colorspace: 4 });
    expect(Buffer.from(img?.encodedImageString ?? []).equals(Buffer.from(bytes))).toBe(true);
  });

  it("rejects a pixel buffer of the wrong size, naming the expected size", () => {
    expect(() => imageValue("bad", { pixels: new Uint8Array(10), height: 2, width: 2, channels: 3 })).toThrow(InvalidArgumentError);
    expect(() => imageValue("bad", { pixels: new Uint8Array(10), height: 2, width: 2, channels: 3 })).toThrow(
      'image "bad": expected 2x2x3 = 12 bytes of pixels, got 10',
    );
  });

  it("rejects bad sizes, channel counts and non-PNG bytes", () => {
    expect(() => imageValue("x", { pixels: new Uint8Array(0), height: 0, width: 2, channels: 1 })).toThrow(/positive integers/);
    expect(() => imageValue("x", { pixels: new Uint8Array(4), height: 1, width: 1, channels: 5 as 4 })).toThrow(/channels must be 1, 2, 3 or 4/);
    expect(() => imageValue("x", { png: Uint8Array.of(1, 2, 3) })).toThrow(/png must hold PNG bytes/);
  });
});
