/**
 * `TextSeries`: the text summaries of one (run, tag), by step, under a byte budget.
 *
 * The memory policy is the board's (`thinning.ts`): every step is kept until the series holds more
 * than `budgetBytes`; then the spacing of the steps kept doubles, the first and the newest always
 * kept, and again until it fits. A step counts the UTF-8 bytes of its strings (as many as V8
 * needs to hold their characters, or more), 16 bytes a string and {@link TEXT_POINT_BYTES} for
 * its record, so a flood of empty strings is bounded too. Each thinning is reported by the caller: nothing is dropped silently.
 *
 * @module
 */

import { keepWhere } from "./keepWhere.js";
import { overBudget, Spacing, type Thinning } from "./thinning.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** One text summary: the strings of its tensor, row-major, with its shape. */
export interface TextPoint {
  readonly step: number;
  readonly wallTime: number;
  readonly text: readonly string[];
  readonly shape: readonly number[];
}

/** What a step costs besides its strings: the record and its arrays. */
const TEXT_POINT_BYTES = 64;
/** What a string costs besides its characters. */
const TEXT_STRING_BYTES = 16;

/** The texts of one (run, tag), by step, under a byte budget. */
export class TextSeries {
  private readonly list: TextPoint[] = [];
  /** What each step of `list` counts. */
  private readonly sizes: number[] = [];
  /** Each step's arrival number. */
  private readonly seqs: number[] = [];
  private readonly spacing = new Spacing();
  private bytes = 0;
  /** Steps dropped by thinning so far. */
  droppedSteps = 0;

  /** `budgetBytes`: what the texts may hold ({@link heldBytes}) before they are thinned (default: no limit). */
  constructor(private readonly budgetBytes: number = Number.POSITIVE_INFINITY) {}

  /** The steps kept, in the order written. */
  get points(): readonly TextPoint[] {
    return this.list;
  }

  /** Bytes the budget counts for the steps kept. */
  get heldBytes(): number {
    return this.bytes;
  }

  /** Adds one step; returns what thinning it took to stay within the budget, if any. */
  add(point: TextPoint): Thinning | undefined {
    const seq = this.spacing.arrive();
    // The newest so far is kept only if it falls on the spacing.
    const last = this.seqs.length - 1;
    if (last > 0 && !this.spacing.keeps(this.seqs[last] as number)) {
      this.list.pop();
      this.seqs.pop();
      this.bytes -= this.sizes.pop() as number;
      this.droppedSteps++;
    }
    const size = pointBytes(point);
    this.list.push(point);
    this.sizes.push(size);
    this.seqs.push(seq);
    this.bytes += size;
    return this.bytes > this.budgetBytes ? this.thin() : undefined;
  }

  /** Removes the steps >= `step` (a restart); returns how many. */
  purgeFrom(step: number): number {
    return this.keep((i) => (this.list[i] as TextPoint).step < step);
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
    // One decision per index, taken before any array moves.
    const kept = this.list.map((_, i) => keep(i));
    keepWhere(this.sizes, (_, i) => kept[i] as boolean);
    keepWhere(this.seqs, (_, i) => kept[i] as boolean);
    const removed = keepWhere(this.list, (_, i) => kept[i] as boolean);
    if (removed > 0) this.bytes = this.sizes.reduce((n, b) => n + b, 0);
    return removed;
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const pointBytes = (p: TextPoint): number => p.text.reduce((n, s) => n + Buffer.byteLength(s, "utf8") + TEXT_STRING_BYTES, TEXT_POINT_BYTES);
