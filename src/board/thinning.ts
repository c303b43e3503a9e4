/**
 * The board's memory policy for what it keeps per run and tag beyond scalars (images,
 * histograms, text): every step is kept until the tag's series holds more than its byte budget.
 * Then it is *thinned*: the spacing of the steps kept doubles (every other one of them is
 * dropped), and again until the series fits (or two steps are left). From then on a new step is
 * kept only when it falls on that spacing, except the newest, which is always there until a newer
 * one comes. So the steps kept stay evenly spread over the whole run, the first is never dropped,
 * and the newest is always there; a series thins a handful of times over a run, not at each step.
 * Each series applies the policy to its own storage ({@link ImageSeries}, {@link HistogramSeries},
 * {@link TextSeries}) with a {@link Spacing}; the store reports each thinning, so nothing is
 * dropped silently.
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
export class Spacing {
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
export const overBudget = (heldBytes: number, budgetBytes: number, steps: number): boolean => heldBytes > budgetBytes && steps > 2;

/** `bytes` in MiB, to 3 significant digits, for messages: `32`, `0.5`, `0.00713`. */
export const mibText = (bytes: number): string => String(Number((bytes / (1 << 20)).toPrecision(3)));
