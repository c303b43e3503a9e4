/**
 * The collective `run` hands to a job in a data-parallel cluster (TF_CONFIG set and
 * `cluster.dataParallel` not false): a {@link ReplicaGroup} whose rank and size are known from
 * TF_CONFIG as soon as the job module loads, and whose transport, a `TcpCollective` joined through
 * the coordination service (src/runtime/clusterRuntime.ts), is attached once the task has registered.
 *
 * Ranks: the chief is 0, then the `worker` tasks in index order (TensorFlow's `id_in_cluster`;
 * without a `chief` job, worker 0 is the chief and rank 0).
 *
 * A termination notice does not break the group: {@link ReplicaGroup.requestStop} sets this
 * rank's stop vote, which the next training step's all-reduce carries to every rank; after that
 * step every rank's `stopVote.agreed()` runs (`run` then has the chief save and every task exit
 * with the preemption code), so no rank is left waiting in a collective. {@link
 * ReplicaGroup.announceNotice} also tells every rank of the notice at once over the transport's
 * links (a rank frozen in the vote's all-reduce then hides it from nobody else).
 *
 * The group is a state machine ({@link GroupState}): `connecting` until its first transport is
 * attached, then `ready`. A failed collective either fails the group for good (`failed`: every
 * call then raises a {@link ReplicaGroupError} carrying the collective's error, so the monitored
 * session does not take the collective's `UnavailableError` or `AbortedError` for a recoverable
 * session error and build a new session on a broken group; `run` reports the carried error), or,
 * with a {@link Rejoin} (tasks started by hand or by a scheduler, see src/runtime/groupRejoin.ts),
 * starts `reforming`: the rejoin waits for the lost rank and builds the next ring, and every call
 * made on the old ring raises {@link CollectiveReformedError} once the group is `ready` again (the
 * call applied nothing; the trainer takes rank 0's state and retries its step).
 *
 * @module
 */

import { CollectiveReformedError, RankStopVote, type Collective, type CollectiveBuffer, type CollectiveCallOptions, type ReduceOp } from "../session/Collective.js";
import { taskName } from "../cluster/coordination/identity.js";
import { CancelledError } from "../errors.js";
import type { ResolvedCluster } from "../cluster/ClusterResolver.js";
import type { ReplicaContext } from "../config/index.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A collective of the replica group failed; `cause` is the collective's error (UnavailableError naming a task, ...). */
export class ReplicaGroupError extends Error {
  override readonly name = "ReplicaGroupError";
  constructor(override readonly cause: Error) {
    super(`the replica group failed: ${cause.name}: ${cause.message}`, { cause });
  }
}

/**
 * Where the group is: waiting for its first transport, training on one (its `epoch` counts the
 * rings), re-forming after a loss (calls wait for `next`), or failed for good.
 */
type GroupState =
  | { readonly kind: "connecting" }
  | { readonly kind: "ready"; readonly transport: Collective; readonly epoch: number }
  | { readonly kind: "reforming"; readonly epoch: number; readonly next: Promise<void> }
  | { readonly kind: "failed"; readonly error: ReplicaGroupError };

/**
 * Builds the group's next ring after `cause` (a failed call, or the cluster's word that a rank is
 * lost): resolves with the new transport once every rank is back, rejects if the group cannot go
 * on (the lost rank did not come back in time, the chief itself is lost, a termination notice).
 */
export type Rejoin = (cause: Error) => Promise<Collective>;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** A {@link Collective} whose transport is attached later; calls made before wait for it. */
export class ReplicaGroup implements Collective {
  readonly rank: number;
  readonly size: number;
  readonly tasks: readonly string[];
  #state: GroupState = { kind: "connecting" };
  #ready: Promise<Collective>;
  #attach!: (c: Collective) => void;
  #abandon!: (e: Error) => void;
  #rejoin: Rejoin | undefined;
  /** Failures reported before the transport existed, passed on at attach. */
  #pendingFailures: [string, Error | undefined][] = [];
  /** A collective call completed: every rank is past its session's creation and trains. */
  #joined = false;
  /** This rank's side of the group's stop agreement (read by the trainer each step). */
  readonly stopVote = new RankStopVote();
  /** This rank announced a termination notice: each later transport announces it too. */
  #announced = false;
  /** The tasks whose notice reached this rank, on any transport (each told once). */
  #heard = new Set<string>();
  #noticeListeners: ((task: string, rank: number) => void)[] = [];
  #reformListeners = new Set<() => void>();
  #reformedListeners = new Set<() => void>();

  constructor(rank: number, tasks: readonly string[]) {
    this.rank = rank;
    this.size = tasks.length;
    this.tasks = tasks;
    this.#ready = new Promise<Collective>((ok, fail) => {
      this.#attach = ok;
      this.#abandon = fail;
    });
    this.#ready.catch(() => undefined);
  }

  /** The group of `cluster`'s training tasks as this task sees it, or `undefined` for a task outside them (an evaluator). */
  static of(cluster: ResolvedCluster): ReplicaGroup | undefined {
    const rank = cluster.idInCluster;
    if (rank === undefined) return undefined;
    return new ReplicaGroup(rank, trainingTasks(cluster));
  }

  // -------------------------------------------------------------------------------------------
  // operations
  // -------------------------------------------------------------------------------------------

  /** What the job receives: this group and the shard its data source takes. */
  get context(): ReplicaContext {
    return { rank: this.rank, size: this.size, collective: this, shard: { index: this.rank, count: this.size } };
  }

  /** Gives the group its connected transport. */
  attach(transport: Collective): void {
    this.#state = { kind: "ready", transport, epoch: 0 };
    this.#wire(transport);
    for (const [task, error] of this.#pendingFailures) transport.onPeerFailed(task, error);
    this.#pendingFailures = [];
    this.#attach(transport);
  }

  /** From now on a lost rank is waited for: `rejoin` builds the next ring (see {@link Rejoin}). */
  rejoinWith(rejoin: Rejoin): void {
    this.#rejoin = rejoin;
  }

  /**
   * A rank is lost (the cluster says so, or a call failed): with a rejoin, starts re-forming the
   * ring (once; a loss seen while re-forming is part of it) and resolves when the group is ready
   * again; rejects, and fails the group for good, if it cannot be. Without a rejoin, fails the
   * group with `cause`.
   */
  reform(cause: Error): Promise<void> {
    const state = this.#state;
    if (state.kind === "failed") return Promise.reject(state.error);
    if (state.kind === "reforming") return state.next;
    if (state.kind === "connecting" || this.#rejoin === undefined) return Promise.reject(this.#fail(cause));
    const rejoin = this.#rejoin;
    const old = state.transport;
    const epoch = state.epoch + 1;
    const next = (async () => {
      // The old ring's pending calls end now (they apply nothing), not at their deadline.
      await old.close().catch(() => undefined);
      let transport: Collective;
      try {
        transport = await rejoin(cause);
      } catch (e) {
        throw this.#fail(e);
      }
      if (this.#state.kind === "failed") {
        await transport.close().catch(() => undefined);
        throw this.#state.error;
      }
      this.#state = { kind: "ready", transport, epoch };
      this.#wire(transport);
      for (const f of [...this.#reformedListeners]) f();
    })();
    next.catch(() => undefined);
    this.#state = { kind: "reforming", epoch, next };
    for (const f of [...this.#reformListeners]) f();
    return next;
  }

  /** Calls `f` each time the group starts re-forming its ring; returns the unsubscribe. */
  onReform(f: () => void): () => void {
    this.#reformListeners.add(f);
    return () => void this.#reformListeners.delete(f);
  }

  /** Calls `f` each time the group is ready again on its next ring (before its pending calls raise `CollectiveReformedError`); returns the unsubscribe. */
  onReformed(f: () => void): () => void {
    this.#reformedListeners.add(f);
    return () => void this.#reformedListeners.delete(f);
  }

  /** The group's state, for logs and tests: `connecting`, `ready`, `reforming` or `failed`. */
  get state(): GroupState["kind"] {
    return this.#state.kind;
  }

  /** Asks the group to stop at the next step boundary (a termination notice): this rank's vote in the next step. */
  requestStop(): void {
    this.stopVote.request();
  }

  /**
   * Tells every other rank at once, over the group's own links and outside any step, that this
   * rank got a termination notice (see `Collective.announceNotice`): a rank blocked in a
   * collective that can never complete (a frozen rank) still learns of it. A transport attached
   * later announces it too.
   */
  announceNotice(): void {
    this.#announced = true;
    const state = this.#state;
    if (state.kind === "ready") state.transport.announceNotice?.();
  }

  /** Calls `f` with the task and rank of each other rank whose notice reaches this one, once per task. */
  onNoticeHeard(f: (task: string, rank: number) => void): void {
    this.#noticeListeners.push(f);
  }

  /** Whether the ranks agreed to stop: set on every rank after the same step. */
  get stopAgreed(): boolean {
    return this.stopVote.isAgreed;
  }

  /** Calls `f` once the ranks agree to stop (inside the step that agreed, before it returns). */
  onStopAgreed(f: () => void): void {
    this.stopVote.onAgreed(f);
  }

  /** Whether the trainer carries the vote in its steps (it has read it): else a stop cannot be agreed on. */
  get votes(): boolean {
    return this.stopVote.carried;
  }

  /**
   * Whether a collective call has completed, so every rank has created its session and steps:
   * a stop vote reaches all of them. Before, a rank that leaves may never step.
   */
  get joined(): boolean {
    return this.#joined;
  }

  /** The transport could not be built: every call raises `error`. */
  abandon(error: Error): void {
    this.#abandon(error);
  }

  allReduce<B extends CollectiveBuffer>(buffer: B, op: ReduceOp, options?: CollectiveCallOptions): Promise<B> {
    return this.#call((c) => c.allReduce(buffer, op, options));
  }

  broadcast<B extends CollectiveBuffer>(buffer: B, root: number, options?: CollectiveCallOptions): Promise<B> {
    return this.#call((c) => c.broadcast(buffer, root, options));
  }

  barrier(options?: CollectiveCallOptions): Promise<void> {
    return this.#call((c) => c.barrier(options));
  }

  onPeerFailed(task: string, error?: Error): void {
    const state = this.#state;
    if (state.kind === "connecting") this.#pendingFailures.push([task, error]);
    else if (state.kind === "ready") state.transport.onPeerFailed(task, error);
  }

  async close(): Promise<void> {
    const state = this.#state;
    if (state.kind === "connecting") this.#abandon(new ReplicaGroupError(new Error("the replica group was closed before it connected")));
    if (state.kind === "reforming") this.#fail(new CancelledError("the replica group was closed while it re-formed its ring"));
    if (state.kind === "ready") {
      this.#fail(new CancelledError("the replica group was closed (this task is leaving)"));
      await state.transport.close();
    }
  }

  async #call<T>(f: (c: Collective) => Promise<T>): Promise<T> {
    let state = this.#state;
    if (state.kind === "connecting") {
      try {
        await this.#ready;
      } catch (e) {
        throw this.#fail(e);
      }
      state = this.#state;
    }
    if (state.kind === "failed") throw state.error;
    if (state.kind === "reforming") {
      // A call made on the ring being replaced: the trainer must join the new one first.
      await state.next;
      throw new CollectiveReformedError(state.epoch);
    }
    if (state.kind === "connecting") throw this.#fail(new Error("the replica group has no transport"));
    try {
      const result = await f(state.transport);
      this.#joined = true;
      return result;
    } catch (e) {
      if (this.#state.kind === "failed") throw this.#state.error;
      const cause = e instanceof Error ? e : new Error(String(e));
      // A close of this group (a termination notice) is not a loss.
      if (cause instanceof CancelledError && this.#state === state) throw this.#fail(cause);
      await this.reform(cause);
      throw new CollectiveReformedError(state.epoch + 1);
    }
  }

  /** Hears `transport`'s notices, and announces this rank's on it. */
  #wire(transport: Collective): void {
    transport.onNoticeHeard?.((task, rank) => {
      if (this.#heard.has(task)) return;
      this.#heard.add(task);
      for (const f of this.#noticeListeners) f(task, rank);
    });
    if (this.#announced) transport.announceNotice?.();
  }

  /** Fails the group for good with `e` (or keeps its first failure). */
  #fail(e: unknown): ReplicaGroupError {
    if (this.#state.kind === "failed") return this.#state.error;
    const error = e instanceof ReplicaGroupError ? e : new ReplicaGroupError(e instanceof Error ? e : new Error(String(e)));
    this.#state = { kind: "failed", error };
    return error;
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** The training tasks by rank: `chief` tasks, then `worker` tasks, each in index order. */
const trainingTasks = (cluster: ResolvedCluster): string[] => {
  const spec = cluster.clusterSpec;
  return ["chief", "worker"].flatMap((job) => (spec.jobs.includes(job) ? spec.taskIndices(job).map((i) => taskName(job, i)) : []));
};
