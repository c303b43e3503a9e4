/**
 * `HistogramSeries`: every histogram of one (run, tag), in typed-array columns. A point is a step,
 * a wall time and its buckets `(left, right, count)`; the buckets of all points sit end to end in
 * one `Float64Array`, with an offset column saying where each point's start. A histogram of 30
 * buckets costs 30 × 24 + 20 bytes, and no object per point.
 *
 * @module
 */

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Every histogram of one (run, tag), in insertion order. */
export class HistogramSeries {
  private n = 0;
  private steps = new Float64Array(8);
  private walls = new Float64Array(8);
  /** `starts[i]` is the index in `buckets` of point i's first bucket, `starts[n]` the end. */
  private starts = new Uint32Array(9);
  /** `left, right, count` of every bucket, point after point. */
  private buckets = new Float64Array(8 * 3 * 30);

  /** Histograms held. */
  get length(): number {
    return this.n;
  }

  /** The step of the last histogram, or `null`. */
  get lastStep(): number | null {
    return this.n === 0 ? null : (this.steps[this.n - 1] as number);
  }

  /** Bytes held by the columns, spare capacity included. */
  get byteLength(): number {
    return this.steps.byteLength + this.walls.byteLength + this.starts.byteLength + this.buckets.byteLength;
  }

  /** Appends one histogram: buckets `(left[i], right[i]]` holding `count[i]`. */
  append(step: number, wallTime: number, left: ArrayLike<number>, right: ArrayLike<number>, count: ArrayLike<number>): void {
    const k = Math.min(left.length, right.length, count.length);
    if (this.n === this.steps.length) this.growPoints(this.n * 2);
    const at = this.starts[this.n] as number;
    if (at + 3 * k > this.buckets.length) this.growBuckets(Math.max(this.buckets.length * 2, at + 3 * k));
    const b = this.buckets;
    for (let i = 0; i < k; i++) {
      b[at + 3 * i] = left[i] as number;
      b[at + 3 * i + 1] = right[i] as number;
      b[at + 3 * i + 2] = count[i] as number;
    }
    this.steps[this.n] = step;
    this.walls[this.n] = wallTime;
    this.n++;
    this.starts[this.n] = at + 3 * k;
  }

  /** Removes every histogram at step >= `step` (a restart); returns how many. */
  purgeFrom(step: number): number {
    let kept = 0;
    let out = 0;
    for (let i = 0; i < this.n; i++) {
      if ((this.steps[i] as number) >= step) continue;
      const from = this.starts[i] as number;
      const to = this.starts[i + 1] as number;
      this.buckets.copyWithin(out, from, to);
      this.steps[kept] = this.steps[i] as number;
      this.walls[kept] = this.walls[i] as number;
      this.starts[kept] = out;
      out += to - from;
      kept++;
    }
    this.starts[kept] = out;
    const removed = this.n - kept;
    this.n = kept;
    return removed;
  }

  /** Calls `row` for each histogram in order, with its buckets as a `[left, right, count, …]` view. */
  forEach(row: (wallTime: number, step: number, buckets: Float64Array) => void): void {
    for (let i = 0; i < this.n; i++) {
      row(this.walls[i] as number, this.steps[i] as number, this.buckets.subarray(this.starts[i] as number, this.starts[i + 1] as number));
    }
  }

  private growPoints(capacity: number): void {
    const steps = new Float64Array(capacity);
    steps.set(this.steps.subarray(0, this.n));
    const walls = new Float64Array(capacity);
    walls.set(this.walls.subarray(0, this.n));
    const starts = new Uint32Array(capacity + 1);
    starts.set(this.starts.subarray(0, this.n + 1));
    this.steps = steps;
    this.walls = walls;
    this.starts = starts;
  }

  private growBuckets(capacity: number): void {
    const buckets = new Float64Array(capacity);
    buckets.set(this.buckets.subarray(0, this.starts[this.n] as number));
    this.buckets = buckets;
  }
}
