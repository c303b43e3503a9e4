/**
 * The collective `run` hands to a job in a data-parallel cluster (TF_CONFIG set and
 * `cluster.dataParallel` not false): a {@link ReplicaGroup} whose rank and size are known from
 * TF_CONFIG as soon as the job module loads, and whose transport, a `TcpCollective` joined through
 * the coordination service (src/cli/clusterRuntime.ts), is attached once the task has registered.
 *
 * Ranks: the chief is 0, then the `worker` tasks in index order (TensorFlow's `id_in_cluster`;
 * without a `chief` job, worker 0 is the chief and rank 0).
 *
 * A termination notice does not break the group: {@link ReplicaGroup.requestStop} sets this
 * rank's stop vote, which the next training step's all-reduce carries to every rank; after that
 * step every rank's `stopVote.agreed()` runs (`run` then has the chief save and every task exit
 * with the preemption code), so no rank is left waiting in a collective.
 *
 * A failed collective fails the group for good, and every call then raises a
 * {@link ReplicaGroupError} carrying the collective's error: the monitored session must not take
 * the collective's `UnavailableError` or `AbortedError` for a recoverable session error and build
 * a new session on a broken group. `run` reports the carried error.
 *
 * @module
 */

import type { Collective, CollectiveBuffer, CollectiveCallOptions, ReduceOp, StopVote } from "../Collective.js";
import { taskName } from "../cluster/coordination/identity.js";
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

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** A {@link Collective} whose transport is attached later; calls made before wait for it. */
export class ReplicaGroup implements Collective {
  readonly rank: number;
  readonly size: number;
  readonly tasks: readonly string[];
  #transport: Collective | undefined;
  #ready: Promise<Collective>;
  #attach!: (c: Collective) => void;
  #abandon!: (e: Error) => void;
  #broken: ReplicaGroupError | undefined;
  /** Failures reported before the transport existed, passed on at attach. */
  #pendingFailures: [string, Error | undefined][] = [];
  #stopRequested = false;
  #stopAgreed = false;
  #onStopAgreed: (() => void)[] = [];
  /** A collective call completed: every rank is past its session's creation and trains. */
  #joined = false;
  /** The trainer read the vote: its steps carry it. */
  #votes = false;
  /** This rank's side of the group's stop agreement (read by the trainer each step). */
  readonly stopVote: StopVote = ((group: ReplicaGroup): StopVote => ({
    get requested() {
      group.#votes = true;
      return group.#stopRequested;
    },
    agreed: () => {
      if (group.#stopAgreed) return;
      group.#stopAgreed = true;
      for (const f of group.#onStopAgreed.splice(0)) f();
    },
  }))(this);

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
    this.#transport = transport;
    for (const [task, error] of this.#pendingFailures) transport.onPeerFailed(task, error);
    this.#pendingFailures = [];
    this.#attach(transport);
  }

  /** Asks the group to stop at the next step boundary (a termination notice): this rank's vote in the next step. */
  requestStop(): void {
    this.#stopRequested = true;
  }

  /** Whether the ranks agreed to stop: set on every rank after the same step. */
  get stopAgreed(): boolean {
    return this.#stopAgreed;
  }

  /** Calls `f` once the ranks agree to stop (inside the step that agreed, before it returns). */
  onStopAgreed(f: () => void): void {
    if (this.#stopAgreed) f();
    else this.#onStopAgreed.push(f);
  }

  /** Whether the trainer carries the vote in its steps (it has read it): else a stop cannot be agreed on. */
  get votes(): boolean {
    return this.#votes;
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
    if (this.#transport === undefined) this.#pendingFailures.push([task, error]);
    else this.#transport.onPeerFailed(task, error);
  }

  async close(): Promise<void> {
    if (this.#transport === undefined) this.#abandon(new ReplicaGroupError(new Error("the replica group was closed before it connected")));
    await this.#transport?.close();
  }

  async #call<T>(f: (c: Collective) => Promise<T>): Promise<T> {
    if (this.#broken !== undefined) throw this.#broken;
    try {
      const result = await f(await this.#ready);
      this.#joined = true;
      return result;
    } catch (e) {
      this.#broken ??= e instanceof ReplicaGroupError ? e : new ReplicaGroupError(e instanceof Error ? e : new Error(String(e)));
      throw this.#broken;
    }
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
