/**
 * `ImageSeries`: the images of one (run, tag), every step's encoded bytes as written (PNG,
 * JPEG...), under a byte budget.
 *
 * The memory policy is the board's (`thinning.ts`, kept by {@link BudgetedSamples}): every step
 * is kept until the series holds more than `budgetBytes` of image bytes; then the spacing of the
 * steps kept doubles, the first and the newest always kept, and again until it fits. The steps kept stay evenly spread over the
 * whole run, as a slider over them needs. Each thinning is reported by the caller (the board prints it, and the
 * images route's tag description says it): nothing is dropped silently.
 *
 * Each step gets an `id`, unique in the board, that the images route hands out in its opaque
 * `query`; an image thinned out or purged by a restart is then simply not found.
 *
 * @module
 */

import { BudgetedSamples } from "./budgetedSamples.js";
import type { Thinning } from "./thinning.js";

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

/** The images of one (run, tag), by step, under a byte budget. */
export class ImageSeries {
  private readonly kept: BudgetedSamples<ImageShot>;

  constructor(budgetBytes: number) {
    this.kept = new BudgetedSamples(budgetBytes);
  }

  /** The steps kept, oldest first. */
  get shots(): readonly ImageShot[] {
    return this.kept.items;
  }

  /** Image bytes held. */
  get byteLength(): number {
    return this.kept.heldBytes;
  }

  /** Steps dropped by thinning so far. */
  get droppedSteps(): number {
    return this.kept.droppedSteps;
  }

  /** The most samples any step has. */
  get samples(): number {
    let m = 0;
    for (const s of this.shots) m = Math.max(m, s.samples.length);
    return m;
  }

  /**
   * Adds image `sample` of `step` (joining the last step when it is the same write), with `id`
   * for a new step; returns what thinning it took to stay within the budget, if any.
   */
  add(step: number, wallTime: number, sample: number, encoded: Uint8Array, id: () => number): Thinning | undefined {
    // A copy: the decoder's bytes may be a view of a whole read chunk, which must not be kept alive.
    const copy = encoded.slice();
    const last = this.shots.at(-1);
    if (last !== undefined && last.step === step && last.wallTime === wallTime && last.samples[sample] === undefined) {
      last.samples[sample] = copy;
      return this.kept.grow(copy.length);
    }
    const shot: ImageShot = { id: id(), step, wallTime, samples: [] };
    shot.samples[sample] = copy;
    return this.kept.add(shot, copy.length);
  }

  /** The step with `id`, or `undefined`. */
  find(id: number): ImageShot | undefined {
    const list = this.shots;
    let lo = 0;
    let hi = list.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const s = list[mid] as ImageShot;
      if (s.id === id) return s;
      if (s.id < id) lo = mid + 1;
      else hi = mid - 1;
    }
    return undefined;
  }

  /** Removes the steps >= `step` (a restart); returns how many. */
  purgeFrom(step: number): number {
    return this.kept.purgeFrom(step);
  }
}
