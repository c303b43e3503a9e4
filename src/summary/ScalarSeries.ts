/**
 * `ScalarSeries`: every point of one (run, tag) scalar series, no sampling, in three columns of
 * typed arrays that grow by doubling:
 *
 * | column | array | bytes | why |
 * |---|---|---|---|
 * | steps | `Int32Array`, switched to `Float64Array` at the first step outside ±2^31 | 4 (8) | steps are int64 in the file, but almost every run stays below 2^31; a `Float64Array` is exact up to 2^53 |
 * | wall times | `Float64Array` | 8 | seconds since the epoch with a fraction: float32 would round them to about 2 minutes |
 * | values | `Float32Array`, switched to `Float64Array` at the first value float32 cannot hold | 4 (8) | scalars are float32 in the file (`simple_value`, TF2's `DT_FLOAT` tensor): nothing is lost |
 *
 * So a point costs 16 bytes, 20 or 24 after a switch; with doubling, the arrays hold between 1
 * and 2 times that (1M points: 16.8 MB allocated, `bench/reader.bench.ts`). Objects would cost
 * about 50 to 80 bytes a point.
 *
 * @module
 */

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The points of one scalar series, in arrival order. */
export class ScalarSeries {
  private stepCol: Int32Array | Float64Array;
  private wallCol: Float64Array;
  private valueCol: Float32Array | Float64Array;
  private n = 0;

  constructor(initialCapacity = 64) {
    const c = Math.max(1, Math.floor(initialCapacity));
    this.stepCol = new Int32Array(c);
    this.wallCol = new Float64Array(c);
    this.valueCol = new Float32Array(c);
  }

  /** The number of points. */
  get length(): number {
    return this.n;
  }

  /** The steps, a view of the first `length` entries (valid until the next append or purge). */
  get steps(): Int32Array | Float64Array {
    return this.stepCol.subarray(0, this.n);
  }

  /** The wall times in seconds, a view like {@link steps}. */
  get wallTimes(): Float64Array {
    return this.wallCol.subarray(0, this.n);
  }

  /** The values, a view like {@link steps}. */
  get values(): Float32Array | Float64Array {
    return this.valueCol.subarray(0, this.n);
  }

  /** Bytes per point in the current columns: 16, or 20 / 24 after a switch to float64. */
  get bytesPerPoint(): number {
    return this.stepCol.BYTES_PER_ELEMENT + 8 + this.valueCol.BYTES_PER_ELEMENT;
  }

  /** Bytes the columns hold, spare capacity included. */
  get byteLength(): number {
    return this.stepCol.byteLength + this.wallCol.byteLength + this.valueCol.byteLength;
  }

  /** Appends one point (amortized O(1)). */
  append(step: number, wallTime: number, value: number): void {
    if (this.n === this.wallCol.length) this.grow(this.n * 2);
    if (this.stepCol instanceof Int32Array && (step | 0) !== step) this.stepCol = Float64Array.from(this.stepCol);
    if (this.valueCol instanceof Float32Array && Math.fround(value) !== value && !Number.isNaN(value)) {
      this.valueCol = Float64Array.from(this.valueCol);
    }
    const i = this.n++;
    this.stepCol[i] = step;
    this.wallCol[i] = wallTime;
    this.valueCol[i] = value;
  }

  /**
   * Removes every point with step `>= step`, keeping the order of the others (TensorBoard's
   * purge after a restart). Returns how many were removed.
   */
  purgeFrom(step: number): number {
    const s = this.stepCol;
    const w = this.wallCol;
    const v = this.valueCol;
    let kept = 0;
    for (let i = 0; i < this.n; i++) {
      if ((s[i] as number) >= step) continue;
      s[kept] = s[i] as number;
      w[kept] = w[i] as number;
      v[kept] = v[i] as number;
      kept++;
    }
    const removed = this.n - kept;
    this.n = kept;
    return removed;
  }

  /** Shrinks the columns to the points they hold (after loading, to give back spare capacity). */
  trim(): void {
    this.grow(Math.max(1, this.n));
  }

  private grow(capacity: number): void {
    const steps = new (this.stepCol.constructor as Int32ArrayConstructor | Float64ArrayConstructor)(capacity);
    steps.set(this.stepCol.subarray(0, this.n));
    const walls = new Float64Array(capacity);
    walls.set(this.wallCol.subarray(0, this.n));
    const values = new (this.valueCol.constructor as Float32ArrayConstructor | Float64ArrayConstructor)(capacity);
    values.set(this.valueCol.subarray(0, this.n));
    this.stepCol = steps;
    this.wallCol = walls;
    this.valueCol = values;
  }
}
