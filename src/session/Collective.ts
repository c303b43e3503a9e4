/**
 * What synchronous data parallelism needs from the workers: all-reduce, broadcast and barrier
 * over a fixed group of ranks, each with a deadline. The interface says nothing about the
 * transport, so a native backend (Gloo, MPI) can implement it later; `TcpCollective`
 * (`monitored-session/cluster`) is the one shipped. It lives in the core so that the TensorFlow.js
 * adapter can all-reduce its gradients over any implementation without importing the cluster.
 *
 * @module
 */

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The buffers a collective works on. */
export type CollectiveBuffer = Float32Array | Float64Array;

/** How `allReduce` combines the ranks' buffers: their sum, or their sum divided by the group size. */
export type ReduceOp = "sum" | "mean";

/** Per-call options. */
export interface CollectiveCallOptions {
  /** This call's deadline in seconds, instead of the group's `collectiveTimeoutSecs`. */
  readonly timeoutSecs?: number | undefined;
}

/**
 * A group of `size` ranks that run collectives together. Every rank must make the same calls in
 * the same order with buffers of the same type and length; calls on one rank run one at a time,
 * in call order.
 *
 * Errors (every rank raises the same class, naming the same rank):
 * - `DeadlineExceededError`: the call did not finish in time; the message names the slowest rank.
 * - `UnavailableError`: a peer died, closed, froze (reported through {@link onPeerFailed}), or
 *   another rank failed; the message names its task.
 * - `AbortedError`: a peer of another generation or incarnation answered.
 * - `InvalidArgumentError`: the ranks disagree on the call (operation, type, length, root).
 *
 * After any of these the group is broken: every later call raises the same error. Build a new
 * group (the next generation) to continue.
 */
export interface Collective {
  /** This process's rank, `0 ≤ rank < size`. */
  readonly rank: number;
  /** The number of ranks. */
  readonly size: number;
  /** Every rank's task name (for error messages), if the implementation knows them. */
  readonly tasks?: readonly string[] | undefined;
  /**
   * Reduces `buffer` across the ranks **in place** and resolves with the same buffer. Every rank
   * ends with the same bits.
   */
  allReduce<B extends CollectiveBuffer>(buffer: B, op: ReduceOp, options?: CollectiveCallOptions): Promise<B>;
  /** Copies `root`'s buffer into every rank's `buffer` (in place) and resolves with it. */
  broadcast<B extends CollectiveBuffer>(buffer: B, root: number, options?: CollectiveCallOptions): Promise<B>;
  /** Resolves once every rank has called `barrier`. */
  barrier(options?: CollectiveCallOptions): Promise<void>;
  /**
   * The liveness source's entry point: the coordination service (or any watcher) calls it when
   * `task` is declared failed. Every pending and later collective raises an `UnavailableError`
   * naming the task. A task outside the group is ignored.
   */
  onPeerFailed(task: string, error?: Error): void;
  /** Leaves the group: pending calls raise `CancelledError`; a peer that still needs this rank raises `UnavailableError` naming it. */
  close(): Promise<void>;
  /**
   * Optional: where the group stops early. A trainer that all-reduces its gradients every step
   * (the TensorFlow.js adapter) carries each rank's {@link StopVote.requested} in that step's
   * all-reduce; after the first step in which any rank asked, it calls {@link StopVote.agreed} on
   * every rank, so that all ranks stop at the same step boundary (a preemption: the chief saves
   * that step, and nobody is left waiting in the next collective). `monitored-session run` gives
   * the job a group with a vote; a collective without one never asks.
   */
  readonly stopVote?: StopVote | undefined;
  /**
   * Optional: tells every rank, at once and outside any collective, that this rank got a
   * termination notice, so that a rank learns of it even when the group can no longer complete
   * a collective (a frozen rank). `TcpCollective` sends it around the ring both ways.
   */
  announceNotice?(): void;
  /** Optional: calls `f` with the task name and rank of each other rank whose {@link announceNotice} reaches this one, once per rank. */
  onNoticeHeard?(f: (task: string, rank: number) => void): void;
}

/** One rank's side of a group's agreement to stop at a step boundary (see {@link Collective.stopVote}). */
export interface StopVote {
  /** Whether this rank asks the group to stop after the step it contributes to next. */
  readonly requested: boolean;
  /** Every rank saw a request in the same step: called on every rank after that step's update. */
  agreed(): void;
}

/**
 * One rank's stop vote with its state: a collective that carries it ({@link Collective.stopVote})
 * lets a data-parallel loop stop every rank after the same step. {@link request} on a termination
 * notice; the trainer (the TensorFlow.js adapter) reads {@link requested} each step and calls
 * {@link agreed} on every rank after the first step in which any rank asked.
 */
export class RankStopVote implements StopVote {
  #requested = false;
  #agreed = false;
  #read = false;
  #onAgreed: (() => void)[] = [];

  get requested(): boolean {
    this.#read = true;
    return this.#requested;
  }

  agreed(): void {
    if (this.#agreed) return;
    this.#agreed = true;
    for (const f of this.#onAgreed.splice(0)) f();
  }

  /** This rank asks the group to stop after the step it contributes to next. */
  request(): void {
    this.#requested = true;
  }

  /** Whether the ranks agreed to stop (set on every rank after the same step). */
  get isAgreed(): boolean {
    return this.#agreed;
  }

  /** Whether the trainer carries the vote in its steps (it read it at least once): else a stop cannot be agreed on. */
  get carried(): boolean {
    return this.#read;
  }

  /** Calls `f` once the ranks agree (inside the step that agreed, before it returns). */
  onAgreed(f: () => void): void {
    if (this.#agreed) f();
    else this.#onAgreed.push(f);
  }
}

/**
 * A call of a group that re-formed its ring meanwhile (a rank was lost and came back, see
 * `monitored-session run`'s replica group): the call applied nothing on this rank. The trainer
 * joins the new ring as at the group's first join (signatures, then rank 0's state) and retries
 * its step.
 */
export class CollectiveReformedError extends Error {
  override readonly name = "CollectiveReformedError";
  constructor(readonly generation: number | undefined) {
    super(`the replica group re-formed its ring${generation === undefined ? "" : ` (collective generation ${generation})`}: join it again, taking rank 0's state`);
  }
}

/** The collective's deadline when neither the group nor the call gives one (seconds). */
export const DEFAULT_COLLECTIVE_TIMEOUT_SECS = 60;
