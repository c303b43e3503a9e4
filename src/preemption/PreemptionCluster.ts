/**
 * What {@link PreemptionCheckpointHandler} needs to know of a cluster: this task's place in it
 * and its handle on the coordination service. TensorFlow passes `strategy.cluster_resolver`,
 * a resolver whose process is already joined to the coordination service; here the task object
 * of `monitored-session/runtime` (`startTask()`) implements this interface. It is defined in the
 * preemption layer, below the runtime and the cluster, so that the handler imports neither.
 *
 * A plain resolver (`resolveCluster()` from `monitored-session/cluster`) has the place but no
 * {@link PreemptionClusterResolver.coordination}: the handler refuses it, saying how to start
 * the task.
 *
 * @module
 */

import type { Observable } from "rxjs";

import { CancelledError } from "../errors.js";
import type { TerminationNotice } from "./TerminationNotices.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/**
 * The coordination service's key-value store, as the agreement uses it (a `CoordinationClient`
 * of `monitored-session/cluster` is one). Keys are this generation's: a restarted cluster never
 * reads an earlier agreement.
 */
export interface PreemptionKeyValueStore {
  /** The launch this task registered in (keys are namespaced by it). */
  readonly generation: number | undefined;
  /** Inserts `key` if absent; `AlreadyExistsError` when present. */
  insert(key: string, value: string): Promise<void>;
  /** The value of `key`, waiting for it; `DeadlineExceededError` after `timeoutMs`. */
  get(key: string, options?: { readonly timeoutMs?: number }): Promise<string>;
  /**
   * Makes every task's pending and later calls raise `error`, naming this task. `final`: this
   * task leaves for good with it (the host of an embedded service then knows who heard it).
   */
  reportErrorToCluster(error: Error, options?: { readonly final?: boolean }): Promise<void>;
}

/**
 * A data-parallel group's stop vote, when the tasks share a collective: a plain stop is agreed
 * in the next step's all-reduce, with no extra round trip.
 */
export interface ReplicaStop {
  /** This rank asks the group to stop after the step it contributes to next. */
  requestStop(): void;
  /** Every rank saw a request in the same step, and that step ended. */
  readonly stopAgreed: boolean;
  /** The trainer carries the vote in its steps (it read the vote at least once). */
  readonly votes: boolean;
  /** Tells every other rank at once, over the group's own links, that this rank got a termination notice. */
  announceNotice?(): void;
  /** Calls `f` with the task name and rank (its id in the cluster) of each other rank whose notice reaches this one over the group's links, once per rank. */
  onNoticeHeard?(f: (task: string, rank: number) => void): void;
  /**
   * A group that outlives a lost rank (tasks started by hand, see `GroupRejoin` of the runtime):
   * calls `listener` each time the group trains again in its next generation of the
   * coordination service, where the agreement's keys then live; returns the unsubscribe.
   */
  onReformed?(listener: () => void): () => void;
  /**
   * Such a group: when `error`, seen by a coordination call made in `generation`, is part of a
   * re-form (a lost rank, or the chief's next generation that ends the old one), a promise that
   * resolves once the group trains again, and rejects when it cannot (the rank did not come back
   * within `maxWaitSecs`, the chief lost, a preemption). `undefined` when the group does not
   * wait `error` out.
   */
  follow?(error: unknown, generation: number | undefined): Promise<void> | undefined;
  /**
   * This rank knows of a preemption: its own notice (`why`: what it was, `SIGTERM`), or a claim
   * it heard from `claimant` (`why`: `worker:1's termination notice`). A group that outlives a
   * lost rank then no longer waits for one: a wait under way, or a later loss, ends at once, and
   * every rank is told through the coordination service, which reaches a rank in any generation
   * (a rank waiting to register again hears nothing else); the step under way raises that
   * report, which the agreement takes as the claim (`afterStepFailure`). A loss of the chief
   * fails the step as it is (nobody can save). A group without a re-form ignores it: its vote
   * stops it.
   */
  preempted?(why: string, claimant?: string): void;
}

/**
 * How a worker outlives the loss of its chief, where it does (a worker of a cluster without data
 * parallelism, started by hand, whose monitored session is made from the task's session targets:
 * it registers again in the restarted chief's generation and re-creates its session from the
 * chief's values). The agreement follows the task into that generation; a termination notice
 * while the chief is lost ends the wait, since nobody could write the checkpoint.
 */
export interface ChiefLossRecovery {
  /**
   * When `error` (seen by a coordination call made in `generation`) is a loss of the chief that
   * this task waits out (or any error while it waits): a promise that resolves once the task
   * registered in the chief's next generation (the chief's model may not be published yet), and
   * rejects when the wait fails (the chief did not come back within `maxWaitSecs`, a termination
   * notice, the task leaving). `undefined` when the task does not wait `error` out.
   */
  follow(error: unknown, generation: number | undefined): Promise<void> | undefined;
  /**
   * This task stops for a preemption (`why`: `its termination notice`, `worker:1's termination
   * notice`): from now on a loss of the chief is not waited out. A wait under way ends with a
   * {@link ChiefLostError}, which this returns (`undefined` when none was under way: a loss that
   * comes later ends the same way at once). `onChiefLost` is told of that error synchronously,
   * before any wait raises it, now or at the later loss (the first listener given is kept).
   */
  noticed(why: string, onChiefLost?: (error: ChiefLostError) => void): ChiefLostError | undefined;
  /**
   * Calls `listener` each time this task registered in the chief's next generation (a recovery
   * under way, whoever waits on it); returns the unsubscribe. A closed handler answers there for
   * its task, which the restarted chief's handler would otherwise wait for.
   */
  onRegistered?(listener: () => void): () => void;
}

/**
 * A worker's wait for its lost chief ended by a termination notice (or a notice followed by the
 * loss): nobody can write the checkpoint, and the task exits with {@link CHIEF_LOST_EXIT_CODE}
 * without saving. Told apart by its class, never by its message.
 */
export class ChiefLostError extends CancelledError {
  override readonly name: string = "ChiefLostError";
}

/** This task's place in the cluster, and (once joined) its handle on the coordination service. */
export interface PreemptionClusterResolver {
  /** The cluster's jobs (a `ps` job is refused, as TensorFlow does). */
  readonly clusterSpec: { readonly jobs: readonly string[] };
  readonly taskType: string;
  readonly taskIndex: number;
  /** TensorFlow's rule: the `chief` task, else `worker` 0. */
  readonly isChief: boolean;
  /** The tasks that train (`chief` and `worker` jobs). */
  readonly numWorkers: number;
  /** This task's id among the training tasks (the chief is 0), TensorFlow's `id_in_cluster`. */
  readonly idInCluster: number | undefined;
  /** The coordination service, once this task joined it; absent on a plain resolver. */
  readonly coordination?: PreemptionKeyValueStore | undefined;
  /** How long a silent task takes to be declared failed (for messages), in ms. */
  readonly livenessTimeoutMs?: number | undefined;
  /** Whether `error` (from a coordination call) says the chief is lost: frozen, dead, or its service gone. */
  isChiefLoss?(error: unknown): boolean;
  /** The chief's name as the coordination service and the replica group name it (`/job:chief/replica:0/task:0`). */
  readonly chiefTaskName?: string | undefined;
  /**
   * Resolves once every other task heard the error reported to the cluster, or left, within a
   * bound (the host of the embedded coordination service must not exit before: its service goes
   * with it). Called before a step raises such an error; absent where nothing needs waiting for.
   */
  untilErrorHeard?(): Promise<void>;
  /** The replica group's stop vote, when the job is data-parallel. */
  readonly replicaStop?: ReplicaStop | undefined;
  /** How this task outlives the loss of its chief, where it does (see {@link ChiefLossRecovery}). */
  readonly chiefRecovery?: ChiefLossRecovery | undefined;
  /**
   * The task's termination notices, watched since the task started (`startTask()`), for the
   * handler to act on instead of installing signal handlers of its own; a notice that came
   * before is delivered first. Absent where the handler watches signals itself.
   */
  takeOverNotices?(): Observable<TakenNotice>;
  /**
   * The task's start barrier (`TaskRuntime.sessionsCreated`, once per generation): a handler of a
   * replica group that re-forms around a returning rank passes it as it is created (the session
   * exists), since the group's re-form waits there for the returning rank.
   */
  sessionsCreated?(): Promise<void>;
}

/** A notice a handler takes over from its task, with how people say it (`TerminationNotices.describe`: the file that appeared, the platform's detail). */
export interface TakenNotice extends TerminationNotice {
  readonly description?: string | undefined;
}

/** The exit code of a task whose chief was lost during a preemption agreement: nobody could write the checkpoint. */
export const CHIEF_LOST_EXIT_CODE = 43;
