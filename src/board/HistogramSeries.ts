/**
 * `HistogramSeries`: the histograms of one (run, tag), in typed-array columns, under a byte
 * budget. A point is a step, a wall time and its buckets `(left, right, count)`; the buckets of
 * all points sit end to end in one `Float64Array`, with an offset column saying where each point's
 * start. A histogram of k buckets costs k × 24 + 28 bytes, and no object per point.
 *
 * The memory policy is the board's (`thinning.ts`, applied by a {@link Thinner}): every histogram
 * is kept until the series holds more than `budgetBytes`; then the spacing of the steps kept
 * doubles, the first and the newest always kept, and again until it fits. The columns never grow past what the budget needs (the
 * bucket column: the budget plus one histogram), so the budget bounds the memory held, spare
 * capacity included. Each thinning is reported by the caller: nothing is dropped silently.
 *
 * @module
 */

import { Thinner, type Thinning } from "./thinning.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Bytes a histogram costs besides its buckets: step, wall time, arrival number, offset. */
const POINT_BYTES = 8 + 8 + 8 + 4;
/** Bytes a bucket costs: left, right, count. */
const BUCKET_BYTES = 3 * 8;

/** The histograms of one (run, tag), in insertion order, under a byte budget. */
export class HistogramSeries {
  private n = 0;
  private steps = new Float64Array(8);
  private walls = new Float64Array(8);
  /** Each histogram's arrival number (for the {@link Thinner}). */
  private seqs = new Float64Array(8);
  /** `starts[i]` is the index in `buckets` of point i's first bucket, `starts[n]` the end. */
  private starts = new Uint32Array(9);
  /** `left, right, count` of every bucket, point after point. */
  private buckets = new Float64Array(8 * 3 * 30);
  private readonly thinner: Thinner;

  /** `budgetBytes`: what the histograms may hold ({@link heldBytes}) before they are thinned (default: no limit). */
  constructor(private readonly budgetBytes: number = Number.POSITIVE_INFINITY) {
    this.thinner = new Thinner(budgetBytes, {
      length: () => this.n,
      heldBytes: () => this.heldBytes,
      seqAt: (i) => this.seqs[i] as number,
      dropLast: () => void this.n--,
      keep: (keep) => this.keep(keep),
    });
  }

  /** Steps dropped by thinning so far. */
  get droppedSteps(): number {
    return this.thinner.droppedSteps;
  }

  /** Histograms held. */
  get length(): number {
    return this.n;
  }

  /** The step of the last histogram, or `null`. */
  get lastStep(): number | null {
    return this.n === 0 ? null : (this.steps[this.n - 1] as number);
  }

  /** Bytes of the histograms held: 28 a histogram and 24 a bucket (what the budget counts). */
  get heldBytes(): number {
    return this.n * POINT_BYTES + ((this.starts[this.n] as number) / 3) * BUCKET_BYTES;
  }

  /** Bytes held by the columns, spare capacity included. */
  get byteLength(): number {
    return this.steps.byteLength + this.walls.byteLength + this.seqs.byteLength + this.starts.byteLength + this.buckets.byteLength;
  }

  /**
   * Appends one histogram: buckets `(left[i], right[i]]` holding `count[i]`; returns what
   * thinning it took to stay within the budget, if any.
   */
  append(step: number, wallTime: number, left: ArrayLike<number>, right: ArrayLike<number>, count: ArrayLike<number>): Thinning | undefined {
    const k = Math.min(left.length, right.length, count.length);
    const seq = this.thinner.arrive();
    if (this.n === this.steps.length) this.growPoints(Math.max(this.n + 1, Math.min(this.n * 2, Math.floor(this.budgetBytes / POINT_BYTES) + 2)));
    const at = this.starts[this.n] as number;
    const need = at + 3 * k;
    if (need > this.buckets.length) this.growBuckets(Math.max(need, Math.min(this.buckets.length * 2, Math.floor(this.budgetBytes / 8))));
    const b = this.buckets;
    for (let i = 0; i < k; i++) {
      b[at + 3 * i] = left[i] as number;
      b[at + 3 * i + 1] = right[i] as number;
      b[at + 3 * i + 2] = count[i] as number;
    }
    this.steps[this.n] = step;
    this.walls[this.n] = wallTime;
    this.seqs[this.n] = seq;
    this.n++;
    this.starts[this.n] = need;
    return this.thinner.fit();
  }

  /** Removes every histogram at step >= `step` (a restart); returns how many. */
  purgeFrom(step: number): number {
    return this.keep((i) => (this.steps[i] as number) < step);
  }

  /**
   * Calls `row` for each histogram in order (or for those at the indices `only`, ascending), with
   * its buckets as a `[left, right, count, …]` view.
   */
  forEach(row: (wallTime: number, step: number, buckets: Float64Array) => void, only?: Iterable<number>): void {
    const at = (i: number): void => row(this.walls[i] as number, this.steps[i] as number, this.buckets.subarray(this.starts[i] as number, this.starts[i + 1] as number));
    if (only === undefined) for (let i = 0; i < this.n; i++) at(i);
    else for (const i of only) if (i >= 0 && i < this.n) at(i);
  }

  /** Keeps, in place and in order, the histograms whose index `keep` accepts; returns how many went. */
  private keep(keep: (i: number) => boolean): number {
    let kept = 0;
    let out = 0;
    for (let i = 0; i < this.n; i++) {
      if (!keep(i)) continue;
      const from = this.starts[i] as number;
      const to = this.starts[i + 1] as number;
      this.buckets.copyWithin(out, from, to);
      this.steps[kept] = this.steps[i] as number;
      this.walls[kept] = this.walls[i] as number;
      this.seqs[kept] = this.seqs[i] as number;
      this.starts[kept] = out;
      out += to - from;
      kept++;
    }
    this.starts[kept] = out;
    const removed = this.n - kept;
    this.n = kept;
    return removed;
  }

  private growPoints(capacity: number): void {
    const steps = new Float64Array(capacity);
    steps.set(this.steps.subarray(0, this.n));
    const walls = new Float64Array(capacity);
    walls.set(this.walls.subarray(0, this.n));
    const seqs = new Float64Array(capacity);
    seqs.set(this.seqs.subarray(0, this.n));
    const starts = new Uint32Array(capacity + 1);
    starts.set(this.starts.subarray(0, this.n + 1));
    this.steps = steps;
    this.walls = walls;
    this.seqs = seqs;
    this.starts = starts;
  }

  private growBuckets(capacity: number): void {
    const buckets = new Float64Array(capacity);
    buckets.set(this.buckets.subarray(0, this.starts[this.n] as number));
    this.buckets = buckets;
  }
}
