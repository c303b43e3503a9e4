/**
 * A replica group that outlives a lost rank (src/runtime/groupRejoin.ts), and a preemption
 * (clusterRuntime.ts `startClusterTask`): while the group waits for a lost rank, the preemption
 * agreement cannot step together, so a known preemption ends the wait and is told to every rank
 * through the coordination service ({@link GroupPreemption}); and the group's stop vote as the
 * preemption agreement sees it, following the group into its next generation
 * ({@link rejoiningReplicaStop}).
 *
 * Also the cluster's preemption reports: the typed error every task takes as a termination
 * notice of its own ({@link preemptionReport}).
 *
 * @module
 */

import type { CoordinationHost } from "../cluster/coordination/backend.js";
import type { CoordinationClient } from "../cluster/coordination/CoordinationClient.js";
import { AbortedError, CancelledError, UnavailableError } from "../errors.js";
import type { Logger } from "../Logger.js";
import type { ReplicaStop } from "../preemption/PreemptionCluster.js";
import type { Collective } from "../session/Collective.js";
import type { Clock } from "../time/Clock.js";
import type { GroupRejoin } from "./groupRejoin.js";
import type { ReplicaGroup } from "./replicaGroup.js";
import type { TaskExit } from "./taskExit.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A preemption a rank knows of: its own notice (`claimant` undefined), or another rank's claim it heard. */
export interface KnownPreemption {
  readonly why: string;
  readonly claimant: string | undefined;
}

/** What a {@link GroupPreemption} tells through. */
export interface GroupPreemptionParts {
  /** `worker:1`, the reporter the others read. */
  readonly name: string;
  readonly client: CoordinationClient;
  /** Present when this task hosts the coordination service: it reports through the service itself. */
  readonly host: CoordinationHost | undefined;
  /** The group's wait for a lost rank, when the group outlives one. */
  readonly rejoin: GroupRejoin | undefined;
  /** Where a report under way is recorded (a failing exit lets it finish). */
  readonly exit: Pick<TaskExit, "reported">;
  readonly logger: Logger;
}

/** The message every preemption report starts with. */
const PREEMPTION_REPORT = "cluster preemption:";

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** The cluster's error that tells every task of `task`'s termination notice `what` (typed: its failure is a `preemption`). */
export const preemptionReport = (task: string, what: string): CancelledError =>
  new CancelledError(`${PREEMPTION_REPORT} task ${task} got a termination notice (${what}): every task exits with the preemption code`, {
    failure: { kind: "preemption", reporter: task, notice: what },
  });

/** The cluster's error that tells every task that `task` stops for `what` (another task's termination notice) while its group waits for a lost rank. */
const relayedPreemptionReport = (task: string, what: string): CancelledError =>
  new CancelledError(`${PREEMPTION_REPORT} task ${task} stops for ${what} while its replica group waits for a lost rank: every task exits with the preemption code`, {
    failure: { kind: "preemption", reporter: task, notice: what },
  });

/** What one rank knows of a preemption, and whether the others were told (see the module doc). */
export class GroupPreemption {
  /** The preemption this rank knows of: the group no longer waits for a lost rank. */
  private knownNow: KnownPreemption | undefined;
  /** This rank told the others through the service (once), or the cluster told it of one. */
  private toldNow = false;

  constructor(private readonly parts: GroupPreemptionParts) {}

  /** The preemption this rank knows of, if any. */
  get known(): KnownPreemption | undefined {
    return this.knownNow;
  }

  /** Every rank knows: this one told them, or another's report reached it. */
  get told(): boolean {
    return this.toldNow;
  }

  /** Another rank's preemption report reached this one: nothing more to tell. */
  heard(): void {
    this.toldNow = true;
  }

  /**
   * The agreement knows of a preemption (`ReplicaStop.preempted`): the first one counts. A wait
   * for a lost rank under way ends, and every rank is told.
   */
  preempted(why: string, claimant: string | undefined): void {
    if (this.knownNow !== undefined) return;
    this.knownNow = { why, claimant };
    if (this.parts.rejoin?.waiting === true) this.tell(this.knownNow);
  }

  /**
   * The group waits for a lost rank (or is about to) while a preemption is known: ends the wait,
   * and tells every rank through the coordination service, which reaches a rank in any
   * generation (one waiting to register again hears nothing else). The service names the sender
   * as the reporter; a claim heard from another rank is its notice (`worker:1's termination
   * notice`). The report is final: this rank exits. Returns the report.
   */
  private tell(p: KnownPreemption): CancelledError {
    const { name, client, host, rejoin, exit, logger } = this.parts;
    const report = p.claimant === undefined ? preemptionReport(name, p.why) : relayedPreemptionReport(name, p.why);
    rejoin?.cancel(report);
    if (this.toldNow) return report;
    this.toldNow = true;
    if (host !== undefined) host.report(report, { final: true });
    else {
      exit.reported(
        client.reportErrorToCluster(report, { final: true }).catch((e: unknown) => {
          logger.warn(`${name} could not tell the other ranks of its termination notice through the coordination service (${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}); they learn of its exit from its missing heartbeats.`);
        }),
      );
    }
    return report;
  }

  /**
   * How the group answers a lost rank (`ReplicaGroup.rejoinWith`): waits for it to come back,
   * unless the group stopped (its vote agreed: not waited for) or a preemption is under way. Then
   * a loss the group would wait for is told to every rank; anything else, the chief's loss
   * included, fails the step as it is (nobody can save: 43). A group that does not rejoin (no
   * `rejoin` part) fails the step as it is.
   */
  answerLoss(group: Pick<ReplicaGroup, "stopAgreed">, cause: Error): Promise<Collective> {
    const { rejoin } = this.parts;
    if (group.stopAgreed || rejoin === undefined) return Promise.reject(cause);
    const known = this.knownNow;
    if (known === undefined) return rejoin.rejoin(cause);
    return Promise.reject(rejoin.underPreemption(cause) === "tell" ? this.tell(known) : cause);
  }
}

/**
 * The group's stop vote as the preemption agreement of a group that outlives a lost rank sees
 * it: the group's, and the agreement's keys follow the group into its next generation.
 */
export const rejoiningReplicaStop = (
  group: ReplicaGroup,
  client: Pick<CoordinationClient, "generation">,
  rejoin: GroupRejoin,
  preemption: GroupPreemption,
  unreachableMs: number,
  clock: Clock,
): ReplicaStop => ({
  requestStop: () => group.requestStop(),
  get stopAgreed() {
    return group.stopAgreed;
  },
  get votes() {
    return group.votes;
  },
  announceNotice: () => group.announceNotice(),
  onNoticeHeard: (f) => group.onNoticeHeard(f),
  // The agreement's keys follow the group into its next generation.
  onReformed: (f) => group.onReformed(f),
  follow: (e, generation) => {
    if (group.state === "reforming") return group.reform(e instanceof Error ? e : new Error(String(e)));
    if (group.state !== "ready") return undefined;
    // Re-formed since the call was made: its keys are in the next generation already.
    if (client.generation !== undefined && client.generation !== generation) return Promise.resolve();
    if (rejoin.isLoss(e)) return group.reform(e as Error);
    // A coordination call may fail before the group hears of the loss (the chief's service
    // between generations says so in words of its own): the group's own word decides, within
    // the heartbeat timeout; else the error stands.
    return e instanceof UnavailableError || e instanceof AbortedError ? reformWithin(group, e, unreachableMs, clock) : undefined;
  },
  // A wait under way (for a loss the group waits for: see `GroupPreemption.answerLoss`) ends, and every rank is told.
  preempted: (why, claimant) => preemption.preempted(why, claimant),
});

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** Resolves as the group's next re-form does, if one starts within `ms`; else rejects with `error`. */
const reformWithin = (group: ReplicaGroup, error: Error, ms: number, clock: Clock): Promise<void> =>
  new Promise<void>((ok, fail) => {
    let stop = (): void => undefined;
    const timer = clock.setTimer(ms, () => {
      stop();
      fail(error);
    });
    stop = group.onReform(() => {
      timer.cancel();
      stop();
      group.reform(error).then(ok, fail);
    });
  });
