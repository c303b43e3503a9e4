/**
 * `TextSeries`: the text summaries of one (run, tag), by step, under a byte budget.
 *
 * The memory policy is the board's (`thinning.ts`, kept by {@link BudgetedSamples}): every step
 * is kept until the series holds more than `budgetBytes`; then the spacing of the steps kept
 * doubles, the first and the newest always kept, and again until it fits. A step counts the UTF-8 bytes of its strings (as many as V8
 * needs to hold their characters, or more), 16 bytes a string and {@link TEXT_POINT_BYTES} for
 * its record, so a flood of empty strings is bounded too. Each thinning is reported by the caller: nothing is dropped silently.
 *
 * @module
 */

import { BudgetedSamples } from "./budgetedSamples.js";
import type { Thinning } from "./thinning.js";

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
  private readonly kept: BudgetedSamples<TextPoint>;

  /** `budgetBytes`: what the texts may hold ({@link heldBytes}) before they are thinned (default: no limit). */
  constructor(budgetBytes: number = Number.POSITIVE_INFINITY) {
    this.kept = new BudgetedSamples(budgetBytes);
  }

  /** The steps kept, in the order written. */
  get points(): readonly TextPoint[] {
    return this.kept.items;
  }

  /** Bytes the budget counts for the steps kept. */
  get heldBytes(): number {
    return this.kept.heldBytes;
  }

  /** Steps dropped by thinning so far. */
  get droppedSteps(): number {
    return this.kept.droppedSteps;
  }

  /** Adds one step; returns what thinning it took to stay within the budget, if any. */
  add(point: TextPoint): Thinning | undefined {
    return this.kept.add(point, pointBytes(point));
  }

  /** Removes the steps >= `step` (a restart); returns how many. */
  purgeFrom(step: number): number {
    return this.kept.purgeFrom(step);
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const pointBytes = (p: TextPoint): number => p.text.reduce((n, s) => n + Buffer.byteLength(s, "utf8") + TEXT_STRING_BYTES, TEXT_POINT_BYTES);
