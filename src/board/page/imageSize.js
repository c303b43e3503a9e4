// The size an image is shown at in its card: small images (a 32 px sample) scaled up by a whole
// factor to at least MIN_WIDTH, drawn with `image-rendering: pixelated` so each pixel stays a
// sharp square; large ones scaled down to fit the card. The native size is shown beside it.

/** The narrowest an image is shown (px), when it fits the card at that width. */
export const MIN_WIDTH = 160;
/** The card's room for an image (px). */
export const MAX_WIDTH = 520;
export const MAX_HEIGHT = 520;

/**
 * `{width, height, scale, pixelated}` for an image of `w` × `h` pixels: scaled up by the smallest
 * whole factor that makes it MIN_WIDTH wide (no more than fits MAX_WIDTH × MAX_HEIGHT), or down to
 * fit that box; `pixelated` when scaled up.
 */
export const imageSize = (w, h) => {
  if (!(w > 0 && h > 0)) return { width: w, height: h, scale: 1, pixelated: false };
  if (w > MAX_WIDTH || h > MAX_HEIGHT) {
    const scale = Math.min(MAX_WIDTH / w, MAX_HEIGHT / h);
    return { width: Math.max(1, Math.round(w * scale)), height: Math.max(1, Math.round(h * scale)), scale, pixelated: false };
  }
  const scale = Math.max(1, Math.min(Math.ceil(MIN_WIDTH / w), Math.floor(MAX_WIDTH / w), Math.floor(MAX_HEIGHT / h)));
  return { width: w * scale, height: h * scale, scale, pixelated: scale > 1 };
};
