/**
 * `ImageSeries`: the images of one (run, tag), every step's encoded bytes as written (PNG,
 * JPEG...), under a byte budget.
 *
 * The memory policy: every step is kept until the series holds more than `budgetBytes` of image
 * bytes. Then it is thinned: every other step is dropped, except the first and the newest, and
 * again until it fits (or two steps are left). The steps kept stay spread over the whole run, as
 * a slider over them needs, and the newest is always there. Each thinning is reported by the
 * caller (the board prints it, and the images route's tag description says it): nothing is
 * dropped silently.
 *
 * Each step gets an `id`, unique in the board, that the images route hands out in its opaque
 * `query`; an image thinned out or purged by a restart is then simply not found.
 *
 * @module
 */

import { keepWhere } from "./keepWhere.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The images of one step: one per sample (a TF2 summary of k images has samples 0 to k-1). */
export interface ImageShot {
  readonly id: number;
  readonly step: number;
  readonly wallTime: number;
  readonly samples: (Uint8Array | undefined)[];
}

/** What one thinning did. */
export interface Thinning {
  readonly dropped: number;
  readonly kept: number;
}

/** The images of one (run, tag), by step, under a byte budget. */
export class ImageSeries {
  private readonly list: ImageShot[] = [];
  private bytes = 0;
  /** Steps dropped by thinning so far. */
  droppedSteps = 0;

  constructor(private readonly budgetBytes: number) {}

  /** The steps kept, oldest first. */
  get shots(): readonly ImageShot[] {
    return this.list;
  }

  /** Image bytes held. */
  get byteLength(): number {
    return this.bytes;
  }

  /** The most samples any step has. */
  get samples(): number {
    let m = 0;
    for (const s of this.list) m = Math.max(m, s.samples.length);
    return m;
  }

  /**
   * Adds image `sample` of `step` (joining the last step when it is the same write), with `id`
   * for a new step; returns what thinning it took to stay within the budget, if any.
   */
  add(step: number, wallTime: number, sample: number, encoded: Uint8Array, id: () => number): Thinning | undefined {
    const last = this.list.at(-1);
    let shot = last;
    if (shot === undefined || shot.step !== step || shot.wallTime !== wallTime || shot.samples[sample] !== undefined) {
      shot = { id: id(), step, wallTime, samples: [] };
      this.list.push(shot);
    }
    // A copy: the decoder's bytes may be a view of a whole read chunk, which must not be kept alive.
    shot.samples[sample] = encoded.slice();
    this.bytes += encoded.length;
    return this.bytes > this.budgetBytes ? this.thin() : undefined;
  }

  /** The step with `id`, or `undefined`. */
  find(id: number): ImageShot | undefined {
    let lo = 0;
    let hi = this.list.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const s = this.list[mid] as ImageShot;
      if (s.id === id) return s;
      if (s.id < id) lo = mid + 1;
      else hi = mid - 1;
    }
    return undefined;
  }

  /** Removes the steps >= `step` (a restart); returns how many. */
  purgeFrom(step: number): number {
    const removed = keepWhere(this.list, (s) => s.step < step);
    this.bytes = this.list.reduce((n, s) => n + shotBytes(s), 0);
    return removed;
  }

  private thin(): Thinning | undefined {
    let dropped = 0;
    while (this.bytes > this.budgetBytes && this.list.length > 2) {
      const last = this.list.length - 1;
      dropped += keepWhere(this.list, (_, i) => i === 0 || i === last || i % 2 === 0);
      this.bytes = this.list.reduce((n, s) => n + shotBytes(s), 0);
    }
    if (dropped === 0) return undefined;
    this.droppedSteps += dropped;
    return { dropped, kept: this.list.length };
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const shotBytes = (s: ImageShot): number => s.samples.reduce((n, b) => n + (b?.length ?? 0), 0);
