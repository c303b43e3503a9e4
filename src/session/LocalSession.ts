/**
 * `LocalSession`: the base of the sessions that evaluate in this process (`GraphSession` and
 * the TensorFlow.js adapter's `TfjsSession`). A subclass implements `evaluate`; `run` and the
 * synchronous fast path `runMaybeSync` are written once here, so that both sessions answer
 * synchronously where they can and refuse a closed session alike.
 *
 * @module
 */

import { RuntimeError } from "../errors.js";
import { promiseOf } from "../util/promise.js";
import type { Feeds, FetchResult, Fetches, RunMetadata, RunOptions, Session } from "./Session.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A {@link Session} that evaluates in this process, synchronously unless a step has to wait. */
export abstract class LocalSession implements Session {
  /** Set by the subclass's `close()`: every later run throws. */
  protected closed = false;

  run<const F extends Fetches>(
    fetches: F,
    feeds: Feeds = {},
    _options?: RunOptions,
    _runMetadata?: RunMetadata,
  ): Promise<FetchResult<F>> {
    return promiseOf(() => this.runMaybeSync(fetches, feeds));
  }

  /**
   * {@link run}, answered synchronously when the step completes in this call, or with a
   * promise when it has to wait (an op answered with a promise, a replica waiting for its
   * peers). Throws what `run` rejects with.
   */
  runMaybeSync<const F extends Fetches>(
    fetches: F,
    feeds: Feeds = {},
    _options?: RunOptions,
    _runMetadata?: RunMetadata,
  ): FetchResult<F> | Promise<FetchResult<F>> {
    this.assertOpen();
    return this.evaluate(fetches, feeds) as FetchResult<F> | Promise<FetchResult<F>>;
  }

  /** Throws `RuntimeError` once the session is closed. */
  protected assertOpen(): void {
    if (this.closed) throw new RuntimeError("Attempted to use a closed Session.");
  }

  /** The run's results (mirroring `fetches`), or a promise of them when the step has to wait. */
  protected abstract evaluate(fetches: Fetches, feeds: Feeds): unknown;
}
