/**
 * How a data-parallel replica group outlives a lost non-chief rank (`run` with TF_CONFIG, tasks
 * started by hand or by a scheduler, or by a `launch` that restarts a lost worker alone). When a
 * worker dies or is declared failed, the chief and the other ranks (same processes) do not exit:
 * the {@link ReplicaGroup} re-forms (src/runtime/replicaGroup.ts), and its {@link GroupRejoin}
 *
 * 1. logs one line naming the lost worker and `maxWaitSecs`;
 * 2. registers again: the chief opens a new generation of the coordination service (its
 *    `connect()`: the old generation ends with AbortedError), the other ranks register in it
 *    (again after each AbortedError, or the old generation's UnavailableError, until the chief's
 *    generation is there). The restarted worker (a new incarnation) gets AbortedError if it
 *    registers in the old generation, and registers in the new one; a frozen worker that resumes
 *    is told its generation ended, and rejoins like any survivor;
 * 3. builds the next ring (a new collective generation) and passes the new generation's start
 *    barrier (the restarted worker's session exists), in the order of a task's start.
 *
 * The trainer's pending call then raises `CollectiveReformedError` (it applied nothing), and
 * every rank takes rank 0's live state as at the group's first join. Past `maxWaitSecs` from the
 * loss, the rejoin fails with one line naming the worker and the setting; a termination notice
 * ends it at once. A loss of the chief is not waited for: the group fails, as before, also when
 * the chief goes while the group waits (its service stops answering for the heartbeat timeout).
 *
 * @module
 */

import type { Clock } from "../time/Clock.js";
import type { Collective } from "../session/Collective.js";
import type { CoordinationClient } from "../cluster/coordination/CoordinationClient.js";
import { AbortedError, clusterFailureOf, DeadlineExceededError, OpError, UnavailableError } from "../errors.js";
import type { Logger } from "../Logger.js";
import type { RuntimeEmit } from "./events.js";
import { describe, isServiceGone } from "./chiefRecovery.js";
import type { ReplicaGroup } from "./replicaGroup.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link GroupRejoin}. */
export interface GroupRejoinOptions {
  readonly client: CoordinationClient;
  readonly group: ReplicaGroup;
  /** This task, as logs name it (`worker:0`). */
  readonly name: string;
  readonly isChief: boolean;
  /** How long the group waits for a lost rank, from the loss (the configuration's `maxWaitSecs`). */
  readonly maxWaitSecs: number;
  /**
   * How long a rank goes on registering while nobody answers at the chief's service (the
   * heartbeat timeout): the service keeps serving through a new generation, so silence means
   * the chief is gone, and the group fails instead of waiting `maxWaitSecs`.
   */
  readonly unreachableTimeoutMs: number;
  /** Passes the cluster's start barrier in the current generation, for at most `timeoutMs`. */
  readonly startBarrier: (timeoutMs: number) => Promise<void>;
  /** Builds this rank's transport of the current generation. */
  readonly join: () => Promise<Collective>;
  /** Told when the wait starts (`true`: the step under way changes nothing until the ring is back) and ends. */
  readonly waiting?: (waiting: boolean) => void;
  /**
   * Told of what ended a wait that was under way, when it was not the task leaving: the chief's
   * loss (its service gone, or it declared failed) found while the group waited (a task of
   * `launch` tells `launch`, which then ends a frozen chief at once).
   */
  readonly ended?: (cause: OpError) => void;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Emits the task's events (src/runtime/events.ts); default: none. */
  readonly emit?: RuntimeEmit | undefined;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** A rank's way back into its group after a loss: give {@link rejoin} to {@link ReplicaGroup.rejoinWith}. */
export class GroupRejoin {
  #reject: ((e: Error) => void) | undefined;
  #ended: Error | undefined;
  #lost: string | undefined;

  constructor(private readonly o: GroupRejoinOptions) {}

  /** Whether a wait is under way (from the loss until the ring is back or the wait failed). */
  get waiting(): boolean {
    return this.#reject !== undefined;
  }

  /** The rank the last wait was for, when the loss named it. */
  get lost(): string | undefined {
    return this.#lost;
  }

  /**
   * The task `cause` names as lost, among the group's other ranks: the first one it names, or
   * `undefined` (a new generation the chief opened, a loss without a name).
   */
  lostTask(cause: Error): string | undefined {
    const { group } = this.o;
    const mine = group.tasks[group.rank];
    return lostTasksOf(cause).find((t) => t !== mine && group.tasks.includes(t));
  }

  /**
   * Whether `e` is the loss of a rank the group waits for: a rank declared failed, restarted, or
   * gone from the ring (UnavailableError), or the chief's new generation (AbortedError). Not the
   * chief's own loss (its service gone, or it declared failed), nor a reported error or any
   * other failure: those fail the group, as before.
   */
  isLoss(e: unknown): boolean {
    if (e instanceof AbortedError) return true;
    if (!(e instanceof UnavailableError) || isServiceGone(e)) return false;
    const f = e.failure;
    switch (f?.kind) {
      case undefined:
      case "peerLost":
        return true;
      case "declaredFailed":
        // The chief hosts the group's generation: its loss is not waited for.
        return !f.tasks.includes(this.o.group.tasks[0] as string);
      default:
        return false;
    }
  }

  /**
   * What a failure `cause` of the group does while a preemption is under way (the group no longer
   * waits for a rank): a loss the group would wait for (`"tell"`: every rank is told through the
   * coordination service that the group stops; a rank between generations hears nothing else),
   * or anything else, the chief's loss included (`"fail"`: the step fails with it as it is; with
   * the chief lost nobody can save, 43). A dropped link to the chief is a loss the group waits
   * for: the chief closes its ring to re-form it, and its loss is told by the service (declared
   * failed, or gone).
   */
  underPreemption(cause: Error): "tell" | "fail" {
    return this.isLoss(cause) ? "tell" : "fail";
  }

  /** Waits for the lost rank and builds the next ring (see the module's steps); rejects if the group cannot go on. */
  readonly rejoin = (cause: Error): Promise<Collective> => {
    if (this.#ended !== undefined) return Promise.reject(this.#ended);
    const { clock, group, logger, maxWaitSecs } = this.o;
    // The chief hosts the group's generation: a rank that lost it fails, as before (a group restart).
    if (!this.isLoss(cause)) return Promise.reject(cause);
    const lost = this.lostTask(cause);
    this.#lost = lost;
    // This task was declared failed (it froze, and resumed): it rejoins like any rank.
    const itself = lostTasksOf(cause).includes(group.tasks[group.rank] as string);
    const who = lost ?? (itself ? "its place in the replica group (it was declared failed)" : "a rank (the chief opened a new generation)");
    logger.warn(`${this.o.name} lost ${who} (${describe(cause)}): waiting up to ${maxWaitSecs} s (maxWaitSecs) for it to rejoin the replica group.`);
    this.o.emit?.({ type: "replicaRankLost", task: this.o.name, lost: lost ?? null, maxWaitSecs });
    const deadline = clock.now() + maxWaitSecs * 1000;
    let last: unknown = cause;
    return new Promise<Collective>((resolve, reject) => {
      const timer = clock.setTimer(maxWaitSecs * 1000, () =>
        reject(new DeadlineExceededError(`${this.o.name} lost ${who}, which did not rejoin the replica group within ${maxWaitSecs} s (maxWaitSecs): ${describe(last)}`)),
      );
      this.#reject = reject;
      this.o.waiting?.(true);
      this.#reform(lost, cause, deadline, (e) => (last = e))
        .catch((e: unknown) => {
          if (this.#ended === undefined && e instanceof OpError) this.o.ended?.(e);
          throw e;
        })
        .then((transport) => {
          logger.info(`The replica group re-formed its ring in generation ${this.o.client.generation ?? "?"} (${lost ?? "every rank"} rejoined): every rank takes rank 0's state and trains on.`);
          this.o.emit?.({ type: "replicaGroupReformed", task: this.o.name, generation: this.o.client.generation ?? null, rejoined: lost ?? null });
          resolve(transport);
        }, reject)
        .finally(() => {
          this.o.waiting?.(false);
          timer.cancel();
          this.#reject = undefined;
        });
    });
  };

  /** Ends any rejoin, now and later, with `error` (a termination notice, the task leaving). */
  cancel(error: Error): void {
    this.#ended ??= error;
    this.#reject?.(error);
    // The wait is over now, though its registration loop notices at its next turn.
    this.#reject = undefined;
  }

  // -------------------------------------------------------------------------------------------
  // utils
  // -------------------------------------------------------------------------------------------

  async #reform(lost: string | undefined, cause: Error, deadline: number, seen: (e: unknown) => void): Promise<Collective> {
    const { client, clock } = this.o;
    // The chief tells the ranks that have not seen the loss which rank is lost, before it opens
    // the next generation (the old one fails naming it; one that failed already keeps its error).
    if (this.o.isChief && lost !== undefined) {
      const relayed = new UnavailableError(`${lost} left the replica group (${describe(cause)}); the group waits for it`, { failure: { kind: "peerLost", task: lost } });
      await client.reportErrorToCluster(relayed).catch(() => undefined);
    }
    const left = (): number => Math.max(1, deadline - clock.now());
    for (let backoffMs = 100; ; backoffMs = Math.min(2 * backoffMs, 1000)) {
      if (this.#ended !== undefined) throw this.#ended;
      try {
        // The chief opens the next generation; the others wait for it (its registration waits for every task).
        await client.connect({ unreachableTimeoutMs: this.o.unreachableTimeoutMs });
        // In the order of a task's start: the ring (a returning worker joins it before it creates
        // its session), then the start barrier (it passes it once its session exists).
        const transport = await this.o.join();
        try {
          await this.o.startBarrier(left());
          if (this.#ended !== undefined) throw this.#ended;
        } catch (e) {
          await transport.close().catch(() => undefined);
          throw e;
        }
        return transport;
      } catch (e) {
        // The old generation (failed, or ended by the chief), or a generation the lost rank broke
        // again: try again. The chief gone (its service, or it declared failed) ends the wait.
        if (!(this.isLoss(e) || e instanceof DeadlineExceededError) || this.#ended !== undefined) throw e;
        seen(e);
      }
      await clock.sleep(Math.min(backoffMs, left()));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** The tasks a loss is of: those the service declared failed, or the peer a rank lost its link to. */
const lostTasksOf = (e: Error): readonly string[] => {
  const f = clusterFailureOf(e);
  return f?.kind === "declaredFailed" ? f.tasks : f?.kind === "peerLost" ? [f.task] : [];
};
