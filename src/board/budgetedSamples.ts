/**
 * `BudgetedSamples`: the samples of one (run, tag), a record a step in the order written, under a
 * byte budget, thinned by the board's policy (`thinning.ts`). Each sample is counted as the bytes
 * its series says (and more when it grows in place); the budget is checked after each write. What
 * it guarantees, from the policy:
 *
 * - {@link heldBytes} is at most the budget after each write, unless only two samples are held
 *   (the first and the newest, which are never dropped for the budget);
 * - the first sample written is kept (until a purge removes it), and so is the newest;
 * - the others kept are every `2^k`-th sample written (by arrival, not by step), `k` the number of
 *   thinnings so far, so they stay evenly spread over the whole run;
 * - every sample dropped is counted ({@link droppedSteps}) and each thinning returned.
 *
 * `TextSeries` and `ImageSeries` keep their samples here; `HistogramSeries` applies the same
 * {@link Thinner} to its typed-array columns.
 *
 * @module
 */

import { keepWhere } from "./keepWhere.js";
import { Thinner, type Thinning } from "./thinning.js";

/** Samples, oldest first, under a byte budget. */
export class BudgetedSamples<T extends { readonly step: number }> {
  private readonly list: T[] = [];
  /** What each sample of `list` counts. */
  private readonly sizes: number[] = [];
  /** Each sample's arrival number. */
  private readonly seqs: number[] = [];
  private bytes = 0;
  private readonly thinner: Thinner;

  /** `budgetBytes`: what the samples may hold ({@link heldBytes}) before they are thinned (default: no limit). */
  constructor(budgetBytes: number = Number.POSITIVE_INFINITY) {
    this.thinner = new Thinner(budgetBytes, {
      length: () => this.list.length,
      heldBytes: () => this.bytes,
      seqAt: (i) => this.seqs[i] as number,
      dropLast: () => {
        this.list.pop();
        this.seqs.pop();
        this.bytes -= this.sizes.pop() as number;
      },
      keep: (keep) => this.keep(keep),
    });
  }

  /** The samples kept, oldest first. */
  get items(): readonly T[] {
    return this.list;
  }

  /** Bytes the budget counts for the samples kept. */
  get heldBytes(): number {
    return this.bytes;
  }

  /** Samples dropped by thinning so far (a purge's are not counted). */
  get droppedSteps(): number {
    return this.thinner.droppedSteps;
  }

  /** Adds `item`, counting `bytes`, as the newest; returns what thinning it took to stay within the budget, if any. */
  add(item: T, bytes: number): Thinning | undefined {
    const seq = this.thinner.arrive();
    this.list.push(item);
    this.sizes.push(bytes);
    this.seqs.push(seq);
    this.bytes += bytes;
    return this.thinner.fit();
  }

  /**
   * Counts `bytes` more for the newest sample (its series grew it in place); returns what thinning
   * it took to stay within the budget, if any. There must be a sample.
   */
  grow(bytes: number): Thinning | undefined {
    const last = this.sizes.length - 1;
    this.sizes[last] = (this.sizes[last] as number) + bytes;
    this.bytes += bytes;
    return this.thinner.fit();
  }

  /** Removes the samples at step >= `step` (a restart); returns how many. */
  purgeFrom(step: number): number {
    return this.keep((i) => (this.list[i] as T).step < step);
  }

  /** Keeps, in place and in order, the samples whose index `keep` accepts; returns how many went. */
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
