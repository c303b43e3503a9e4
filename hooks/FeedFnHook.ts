/**
 * `FeedFnHook`: feeds inputs to every run from a function (TensorFlow's
 * `tf.estimator.FeedFnHook`).
 *
 * @module
 */

import { ValueError } from "../src/errors.js";
import type { Feeds } from "../src/session/Session.js";
import { SessionRunArgs, SessionRunHook, type SessionRunContext } from "../src/hook/SessionRunHook.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link FeedFnHook}. */
export interface FeedFnHookOptions {
  /** Called before every run; returns the feeds to add to it. */
  readonly feedFn: () => Feeds;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Adds `feedFn()` to the feeds of every run. Feeding an input the caller or another hook also
 * feeds is an error of the run.
 *
 * @example
 * ```ts
 * import { FeedFnHook } from "monitored-session/hooks";
 *
 * function* makeBatchIterator(): Iterator<Float32Array> {
 *   for (;;) yield Float32Array.from({ length: 32 }, () => Math.random());
 * }
 * const batches = makeBatchIterator();
 * const hooks = [new FeedFnHook({ feedFn: () => ({ x: batches.next().value }) })];
 * ```
 */
export class FeedFnHook extends SessionRunHook {
  /** The function called before every run (TensorFlow's `feed_fn` attribute). */
  readonly feedFn: () => Feeds;

  constructor(options: FeedFnHookOptions) {
    super();
    if (typeof options?.feedFn !== "function") {
      throw new ValueError(`feedFn must be a function returning the feeds, got ${typeof options?.feedFn}`);
    }
    this.feedFn = options.feedFn;
  }

  override beforeRun(_ctx: SessionRunContext): SessionRunArgs {
    return SessionRunArgs(null, this.feedFn());
  }
}
