/**
 * `ImageSeries`: the images of one (run, tag), every step's encoded bytes as written (PNG,
 * JPEG...), under a byte budget.
 *
 * The memory policy is the board's (`thinning.ts`): every step is kept until the series holds
 * more than `budgetBytes` of image bytes; then the spacing of the steps kept doubles, the first and
 * the newest always kept, and again until it fits. The steps kept stay evenly spread over the
 * whole run, as a slider over them needs. Each thinning is reported by the caller (the board prints it, and the
 * images route's tag description says it): nothing is dropped silently.
 *
 * Each step gets an `id`, unique in the board, that the images route hands out in its opaque
 * `query`; an image thinned out or purged by a restart is then simply not found.
 *
 * @module
 */

import { keepWhere } from "./keepWhere.js";
import { overBudget, Spacing, type Thinning } from "./thinning.js";

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
  private readonly list: ImageShot[] = [];
  /** Each step's arrival number (for the {@link Spacing}). */
  private readonly seqs: number[] = [];
  private readonly spacing = new Spacing();
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
      const seq = this.spacing.arrive();
      // The newest so far is kept only if it falls on the spacing: else this one takes its place.
      if (this.list.length > 1 && !this.spacing.keeps(this.seqs.at(-1) as number)) {
        this.bytes -= shotBytes(this.list.pop() as ImageShot);
        this.seqs.pop();
        this.droppedSteps++;
      }
      shot = { id: id(), step, wallTime, samples: [] };
      this.list.push(shot);
      this.seqs.push(seq);
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
    return this.keep((i) => (this.list[i] as ImageShot).step < step);
  }

  private thin(): Thinning | undefined {
    let dropped = 0;
    while (overBudget(this.bytes, this.budgetBytes, this.list.length)) {
      this.spacing.widen();
      const last = this.list.length - 1;
      dropped += this.keep((i) => i === last || this.spacing.keeps(this.seqs[i] as number));
    }
    if (dropped === 0) return undefined;
    this.droppedSteps += dropped;
    return { dropped, kept: this.list.length };
  }

  /** Keeps, in place and in order, the steps whose index `keep` accepts; returns how many went. */
  private keep(keep: (i: number) => boolean): number {
    const kept = this.list.map((_, i) => keep(i));
    keepWhere(this.seqs, (_, i) => kept[i] as boolean);
    const removed = keepWhere(this.list, (_, i) => kept[i] as boolean);
    if (removed > 0) this.bytes = this.list.reduce((n, s) => n + shotBytes(s), 0);
    return removed;
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const shotBytes = (s: ImageShot): number => s.samples.reduce((n, b) => n + (b?.length ?? 0), 0);
