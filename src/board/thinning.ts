/**
 * The board's memory policy for what it keeps per run and tag beyond scalars (images,
 * histograms, text): every step is kept until the tag's series holds more than its byte budget.
 * Then it is *thinned*: the spacing of the steps kept doubles (every other one of them is
 * dropped), and again until the series fits (or two steps are left). From then on a new step is
 * kept only when it falls on that spacing, except the newest, which is always there until a newer
 * one comes. So the steps kept stay evenly spread over the whole run, the first is never dropped,
 * and the newest is always there; a series thins a handful of times over a run, not at each step.
 * Each series applies the policy to its own storage with a {@link Thinner} (`ImageSeries` and
 * `TextSeries` through `BudgetedSamples`, `HistogramSeries` on its columns); the store reports
 * each thinning, so nothing is dropped silently.
 *
 * The spacing counts arrivals (the n-th step written to the tag), not step numbers: a tag written
 * every 100 steps thins the same as one written every step.
 *
 * @module
 */

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What one thinning did. */
export interface Thinning {
  /** Steps dropped by this thinning. */
  readonly dropped: number;
  /** Steps kept after it. */
  readonly kept: number;
}

/** Which arrivals of a series are kept: every `every`-th, and the newest. */
class Spacing {
  private arrivals = 0;
  private stride = 1;

  /** Kept steps are this many arrivals apart (1 until the first thinning, then 2, 4, 8…). */
  get every(): number {
    return this.stride;
  }

  /** The arrival number of a new step (0 for the first). */
  arrive(): number {
    return this.arrivals++;
  }

  /** Whether the step that arrived as `seq` stays once it is no longer the newest. */
  keeps(seq: number): boolean {
    return seq % this.stride === 0;
  }

  /** Doubles the spacing (a thinning). */
  widen(): void {
    this.stride *= 2;
  }
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Whether a thinning pass is due: the series holds more than `budgetBytes` and more than the two
 * steps (the first and the newest) that are never dropped.
 */
const overBudget = (heldBytes: number, budgetBytes: number, steps: number): boolean => heldBytes > budgetBytes && steps > 2;

/** `bytes` in MiB, to 3 significant digits, for messages: `32`, `0.5`, `0.00713`. */
export const mibText = (bytes: number): string => String(Number((bytes / (1 << 20)).toPrecision(3)));

/**
 * The steps of one series as {@link Thinner} sees them, whatever the series stores (an array of
 * records, typed-array columns): in the order they arrived, each with its arrival number.
 */
export interface ThinnableSteps {
  /** Steps held. */
  length(): number;
  /** Bytes the budget counts for the steps held. */
  heldBytes(): number;
  /** The arrival number of step `i` (what {@link Thinner.arrive} returned for it). */
  seqAt(i: number): number;
  /** Removes the newest step. */
  dropLast(): void;
  /** Keeps, in place and in order, the steps whose index `keep` accepts; returns how many went. */
  keep(keep: (i: number) => boolean): number;
}

/**
 * The policy (this module's) applied to one series' `steps` under `budgetBytes`: its
 * {@link Spacing} and the count of steps it dropped. A series calls {@link arrive} before it
 * stores a new step, and {@link fit} once the step (and its bytes) are held.
 */
export class Thinner {
  private readonly spacing = new Spacing();
  private dropped = 0;

  constructor(
    private readonly budgetBytes: number,
    private readonly steps: ThinnableSteps,
  ) {}

  /** Steps dropped so far: by thinning, and newest steps replaced off the spacing (not purges). */
  get droppedSteps(): number {
    return this.dropped;
  }

  /**
   * A new step arrives: the newest held is dropped unless it falls on the spacing (the new one
   * takes its place; the first step is never dropped so). Returns the new step's arrival number.
   */
  arrive(): number {
    const seq = this.spacing.arrive();
    const last = this.steps.length() - 1;
    if (last > 0 && !this.spacing.keeps(this.steps.seqAt(last))) {
      this.steps.dropLast();
      this.dropped++;
    }
    return seq;
  }

  /**
   * Thins while the steps are {@link overBudget}: each pass doubles the spacing and keeps the steps
   * on it and the newest. Returns what it dropped, or `undefined` when nothing was.
   */
  fit(): Thinning | undefined {
    let dropped = 0;
    while (overBudget(this.steps.heldBytes(), this.budgetBytes, this.steps.length())) {
      this.spacing.widen();
      const last = this.steps.length() - 1;
      dropped += this.steps.keep((i) => i === last || this.spacing.keeps(this.steps.seqAt(i)));
    }
    if (dropped === 0) return undefined;
    this.dropped += dropped;
    return { dropped, kept: this.steps.length() };
  }
}
