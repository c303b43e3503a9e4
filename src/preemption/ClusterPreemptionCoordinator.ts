/**
 * The multi-worker {@link PreemptionCoordinator}: TensorFlow's agreement on the run at which
 * every worker saves (`failure_handling.py`), over the coordination service's key-value store,
 * so that it works on either backend (embedded or etcd).
 *
 * The protocol, in rounds (round 0 is the save; with a grace period, round 1 is the last save):
 * 1. **Claim and proposal, at once.** A task that gets a termination notice inserts `claim`
 *    (TensorFlow's `TERMINATED_WORKER`) and, in the same moment, its proposal to every task:
 *    `P = L + 1`, where `L` is the boundary its loop reaches next (TensorFlow's rule). With a
 *    deadline that leaves no time for one more step and the save, it proposes `P = L` (the
 *    deadline budget). The first claimant leads; a later one logs that it leaves it to the leader.
 *    TensorFlow's leader proposes only once its claim is stored and it reached a boundary: two
 *    message hops, each read when a process's event loop turns, which a synchronous step delays.
 *    Two claimants may both propose: each task holds by the first proposal it got, which is safe,
 *    since the agreed run is decided by the holds (step 3), never by a proposal.
 * 2. **Holds.** Each task, as soon as it reads a proposal (its watcher answers from where the
 *    loop is, `r`: the boundary it reaches next), answers with its hold `h = max(P, r)`, the
 *    earliest run it can save at, and does not pass `h` before it knows the agreed run.
 * 3. **Agreed run.** The chief, as soon as it heard a proposal, and the leader collect the holds
 *    and publish `S = max(h)` to every task (the same run: the holds are write-once; the first
 *    insert stays). With the embedded backend the chief hosts the service, so the holds reach it
 *    and `S` leaves it in one turn of its event loop. TensorFlow sets
 *    `S = L + 1` and relies on workers being at most one step apart; workers that train apart
 *    drift, and a worker already past `L + 1` would never save. Each task acknowledges `S`.
 * 4. **Save.** Every task saves when its run counter reaches `S`. The acknowledgement's insert
 *    is off the step's path (the loop goes on as soon as `S` is known), but every task waits for
 *    it before it exits, so that it is stored before the process goes; the chief also waits for
 *    every other task's (with the embedded backend it hosts the service). Each wait ends at the
 *    liveness deadline at the latest.
 *
 * Round 1 (the last save of a grace period) is proposed by the leader alone, at the boundary
 * where the grace period's end is near; the rest is the same.
 *
 * The check before each step reads local state that the watcher (one pending `get` per task)
 * sets: it makes no remote call. Every key lives under the coordination generation, so a
 * restarted cluster never reads an old agreement. A task that closes inserts its own keys of the
 * current round ("closed"): its watcher ends, and the leader does not wait for it; the shared
 * keys stay free for the others (TensorFlow writes `STOP_WATCHER` into the shared key instead).
 *
 * A peer that never answers is declared failed by the coordination service after its liveness
 * deadline, which fails every pending call: during an agreement, the tasks then save at the
 * boundary they are at and exit, unless the chief is the one lost (nobody could write the
 * checkpoint): they exit with {@link CHIEF_LOST_EXIT_CODE} without saving.
 *
 * Tasks that share no step take the `"chiefSaves"` agreement instead ({@link PreemptionAgreement}):
 * no proposal and no holds. The claim stops each task at its own next boundary; the chief saves
 * there, as a single process does, and once its last save is stored inserts `chief-saved`; each
 * other task waits for that key, acknowledges it, and exits with the preemption code without
 * saving, or with {@link CHIEF_LOST_EXIT_CODE} when the chief is lost first. A chief that closes
 * without a preemption save inserts `chief-saved` as "closed", so that a later notice ends the
 * others at once.
 *
 * @module
 */

import * as t from "io-ts";

import { Bool, decodeOrThrow, JsonText, NonNegativeInt } from "../codec.js";
import type { Clock, TimerHandle } from "../time/Clock.js";
import { AlreadyExistsError, clusterFailureErrorOf, clusterFailureOf, DataLossError, DeadlineExceededError, OpError, ValueError } from "../errors.js";
import type { Logger } from "../Logger.js";
import { CHIEF_LOST_EXIT_CODE, ChiefLostError, type ChiefLossRecovery, type PreemptionKeyValueStore, type ReplicaStop } from "./PreemptionCluster.js";
import { PREEMPTION_EXIT_CODE } from "./TerminationConfig.js";
import { shortTaskName } from "../util/taskNames.js";
import { LocalPreemptionCoordinator, type PreemptionCoordinator, type PreemptionDecision } from "./PreemptionCoordinator.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A step of the agreement, as the handler puts it on its `events$`. */
export type AgreementEvent =
  | { readonly type: "preemptionClaimed"; readonly leader: string; readonly task: string }
  | { readonly type: "preemptionClaimHeard"; readonly claimant: string }
  | { readonly type: "preemptionStepAgreed"; readonly run: number; readonly round: number; readonly exit: boolean; readonly leader: boolean }
  | { readonly type: "preemptionAcknowledged"; readonly run: number; readonly round: number; readonly tasks: number };

/** Options of {@link ClusterPreemptionCoordinator}. */
export interface ClusterPreemptionCoordinatorOptions {
  readonly store: PreemptionKeyValueStore;
  /** This task's id among the training tasks (TensorFlow's `id_in_cluster`, the chief is 0). */
  readonly id: number;
  /** The training tasks' names by id (`chief:0`, `worker:0`, …): for messages. */
  readonly workers: readonly string[];
  readonly isChief: boolean;
  /** See `TerminationConfig.gracePeriodSecs` (default 0). */
  readonly gracePeriodSecs?: number | undefined;
  /** Whether a coordination error says the chief is lost (see `PreemptionClusterResolver.isChiefLoss`). */
  readonly isChiefLoss?: ((e: unknown) => boolean) | undefined;
  /** The chief's task name as the replica group names its ranks (a lost link to it is the chief's loss). */
  readonly chiefTask?: string | undefined;
  /** How long a silent task takes to be declared failed, ms (for messages). */
  readonly livenessTimeoutMs?: number | undefined;
  /** The replica group's stop vote, when the tasks share a collective (a plain stop takes it). */
  readonly replicaStop?: ReplicaStop | undefined;
  /**
   * `"chiefSaves"`, a worker that outlives the loss of its chief (see `ChiefLossRecovery`): its
   * agreement follows it into the chief's next generation, and a notice while the chief is lost
   * exits with {@link CHIEF_LOST_EXIT_CODE}.
   */
  readonly chiefRecovery?: ChiefLossRecovery | undefined;
  /** How the tasks stop (default `"agreedRun"`); see {@link PreemptionAgreement}. */
  readonly agreement?: PreemptionAgreement | undefined;
  /**
   * Where this task's loop is now: runs completed, and whether a step is running. The watcher
   * answers a proposal at once from it (a task blocked in a step's collective cannot reach a
   * boundary until the others step too: data-parallel ranks would wait on each other).
   */
  readonly position?: (() => { readonly runCounter: number; readonly inStep: boolean } | undefined) | undefined;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly emit?: ((e: AgreementEvent) => void) | undefined;
}

/**
 * How the tasks of a cluster stop on a termination notice:
 * - `"agreedRun"` (the default): TensorFlow's rule, every task saves at one agreed run (tasks
 *   that step together: a data-parallel group, or workers at most a few steps apart).
 * - `"chiefSaves"`: for tasks that share no step (each trains its own replica at its own pace,
 *   and only the chief's values are kept, as `monitored-session run` does without data
 *   parallelism): on a claim, each task stops at its own next step boundary; the chief saves
 *   there; every other task waits until the chief's save is done, then exits with the
 *   preemption code, or with {@link CHIEF_LOST_EXIT_CODE} without a save when the chief is lost
 *   first. An agreed run would hold the chief to the fastest task's count.
 */
export type PreemptionAgreement = "agreedRun" | "chiefSaves";

/** A proposal or an agreed run, as stored. */
interface RunValue {
  readonly step: number;
  readonly exit: boolean;
  /** A proposal's: the task that proposed it (the claimant, or the leader of a later round). */
  readonly by?: string | undefined;
}

/** A stored {@link RunValue}: JSON `{"step": <run>, "exit": <boolean>}`, a proposal's with `"by": <task>`. */
const RunValueJson: t.Decoder<unknown, RunValue> = JsonText.pipe(
  t.type({ step: NonNegativeInt, exit: Bool, by: t.union([t.string, t.undefined]) }),
  '{"step": an integer >= 0, "exit": true or false}',
);

/** A stored hold: JSON `{"hold": <run it saves at, earliest>, "run": <the boundary it answered from>}`. */
const HoldJson: t.Decoder<unknown, { readonly hold: number; readonly run: number }> = JsonText.pipe(
  t.type({ hold: NonNegativeInt, run: NonNegativeInt }),
  '{"hold": an integer >= 0, "run": an integer >= 0}',
);

/** The chief's stored preemption checkpoint under `"chiefSaves"`: JSON `{"run": <the chief's run>}`. */
const ChiefSavedJson: t.Decoder<unknown, { readonly run: number }> = JsonText.pipe(t.type({ run: NonNegativeInt }), '{"run": an integer >= 0}');

/** The key of the chief's stored preemption checkpoint under `"chiefSaves"` ({@link ChiefSavedJson}, or {@link CLOSED} when it left without one). */
const CHIEF_SAVED = "chief-saved";

/** How long one wait for the claim lasts before it is asked again. */
const CLAIM_WATCH_MS = 600_000;

/** The value a task inserts into its own keys of a round when it closes. */
const CLOSED = "closed";

/** The chief's id among the training tasks (TensorFlow's `id_in_cluster`). */
const CHIEF_ID = 0;

/** The liveness deadline assumed when the resolver does not give one (the coordination service's default), ms. */
const DEFAULT_LIVENESS_MS = 10_000;

/** Where the agreement's keys live (under the generation). */
const PREFIX = "monitored-session/preemption";

/**
 * The newest coordinator of each task, keyed by the task's recovery: a closed one answers for its
 * task in the chief's next generations only while no newer handler was created on the task (that
 * one answers, or takes part, itself).
 */
const newestOfTask = new WeakMap<ChiefLossRecovery, ClusterPreemptionCoordinator>();

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** Agrees with the other tasks on the run every task saves at. */
export class ClusterPreemptionCoordinator implements PreemptionCoordinator {
  private readonly o: ClusterPreemptionCoordinatorOptions;
  /** Where this generation's keys live (a worker that outlives its chief moves to the chief's next generation). */
  private prefix: string;
  private readonly graceMs: number;
  private readonly me: string;
  private noticeAtMs: number | undefined;
  private deadlineMs: number | undefined;
  /** This task claimed the preemption: it proposes the runs. */
  private leads = false;
  /** The round this task is in (0: the save; 1: the last save of a grace period). */
  private round = 0;
  /** The round this task proposed last (−1: none). */
  private proposedRound = -1;
  /** The round whose holds this task collects (−1: none). */
  private leadingRound = -1;
  /** Settles once this task's claim is decided (won or lost). */
  private claiming: Promise<unknown> = Promise.resolve();
  /** This task claimed (its notice took the key-value path, not the group's stop vote). */
  private claimed = false;
  /** The proposal heard for {@link round}. */
  private proposal: RunValue | undefined;
  /** This task's hold in {@link round}, once it answered. */
  private hold: number | undefined;
  /** The agreed run of {@link round}, once heard. */
  private agreed: RunValue | undefined;
  /** This task's acknowledgement of an agreed run: `stored` settles once it is stored or failed (it never rejects). */
  private acknowledgement: { readonly round: number; readonly run: number; readonly stored: Promise<void> } | undefined;
  /** The last round whose acknowledgement this task warned about: one line per round. */
  private ackWarnedRound = -1;
  /** A peer was lost during the agreement and this task saves at its own boundary (see {@link afterLoss}). */
  private savedAfterLoss = false;
  private agreedWaiters: { ok: () => void; fail: (e: unknown) => void }[] = [];
  /** In a grace period, after the first save: the leader proposes the last save once `targetTimeMs` passed. */
  private countdown = false;
  private targetTimeMs = 0;
  private lastSaveMs = 0;
  /** The mean run time the handler gave at the last check. */
  private lastEstimateMs = 0;
  /** A failure of the cluster, raised by the next step (an error another task reported, a task lost). */
  private failure: Error | undefined;
  /** A peer was lost during an agreement: save where this task is (or exit, when the chief is lost). */
  private lostDuringAgreement: { readonly chief: boolean; readonly error: Error } | undefined;
  private closed = false;
  private reported = false;
  /** The leader's side of the current round. */
  private leading: Promise<void> = Promise.resolve();
  /** The replica group's stop was acted on. */
  private voted = false;
  /** The task whose claim this task heard (logged once), without a notice of its own. */
  private heardFrom: string | undefined;
  /** Who claimed the preemption, as this task heard it (data-parallel: the stop vote writes the claim too). */
  private claimSeen: string | undefined;
  private watching: Promise<void>;
  /** `"chiefSaves"` (see {@link PreemptionAgreement}). */
  private readonly chiefSaves: boolean;
  /** `"chiefSaves"`, the chief: its own stop, decided as a single process decides (the next boundary, the grace period). */
  private local: LocalPreemptionCoordinator | undefined;
  /** `"chiefSaves"`, the chief: the run of the save it is making, and whether the process exits after it. */
  private saving: { readonly run: number; readonly exit: boolean } | undefined;
  /** `"chiefSaves"`, the chief: the insert of {@link CHIEF_SAVED} (settles once stored or failed). */
  private published: Promise<void> | undefined;
  /** `"chiefSaves"`, a non-chief: what it does once the chief's save is done (or the chief lost). */
  private chiefOutcome: Promise<PreemptionDecision> | undefined;
  /** `"chiefSaves"`, a non-chief: the chief's stored save as heard, watched from the moment the claim is known. */
  private chiefSavedHeard: Promise<{ readonly stored: string } | { readonly error: unknown }> | undefined;
  /** `"chiefSaves"`: the claim is known to be in the service (this task's insert, another's, or read from it). */
  private claimStored = false;
  /** `"chiefSaves"`: the task whose preemption report (the cluster's error, not a key) carried the claim. */
  private reportedClaim: string | undefined;
  /**
   * A data-parallel group that outlives a lost rank: the preemption report that ended its wait
   * for the rank (told through the coordination service, which reaches a rank in any generation).
   * The next check saves at the boundary this task is at, its last completed step, and exits.
   */
  private stoppedByReport: { readonly reporter: string; readonly notice: string } | undefined;
  /** The watches' epoch: a watch of an earlier one (an earlier generation of a re-formed group) ends quietly. */
  private watchEpoch = 0;
  /** Stops following the group's re-forms (see {@link followGroup}). */
  private unfollowGroup: (() => void) | undefined;
  /**
   * `"chiefSaves"`, a worker: a termination notice came while it waited for its lost chief (the
   * wait ended with this error): it exits with {@link CHIEF_LOST_EXIT_CODE} without a save.
   */
  private chiefLostOnNotice: ChiefLostError | undefined;
  /** This task inserted its `restored/<id>` key (inserted again in each later generation it follows the chief into). */
  private restoredOnce = false;

  constructor(options: ClusterPreemptionCoordinatorOptions) {
    this.o = options;
    this.prefix = `${PREFIX}/${options.store.generation ?? 0}`;
    if (options.chiefRecovery !== undefined) newestOfTask.set(options.chiefRecovery, this);
    this.graceMs = (options.gracePeriodSecs ?? 0) * 1000;
    this.me = options.workers[options.id] ?? `task ${options.id}`;
    this.chiefSaves = options.agreement === "chiefSaves";
    if (this.chiefSaves && options.replicaStop !== undefined) {
      throw new ValueError('PreemptionCheckpointHandler: agreement "chiefSaves" is for tasks that share no step; a data-parallel group stops through its stop vote (leave agreement out)');
    }
    if (this.chiefSaves) {
      // No proposal, no holds: each task hears the claim, and a non-chief the chief's save.
      this.watching = Promise.resolve();
      void this.watchClaim();
      return;
    }
    this.watching = this.watch();
    // A data-parallel group: a rank that freezes stops the stop vote's all-reduce, and the group
    // fails. Every live rank still learns that a preemption was under way: from the notice the
    // noticed rank sends around the group's own links, and from the claim it writes (the first
    // to come; the claim alone does not come when the frozen rank is the chief hosting the
    // embedded service).
    if (options.replicaStop !== undefined) {
      // The group's ranks are the tasks' ids in the cluster: the claim's name for the rank.
      options.replicaStop.onNoticeHeard?.((task, rank) => this.claimFrom(options.workers[rank] ?? task));
      void this.watchClaim();
      // A group that outlives a lost rank: the agreement follows it into its next generation.
      this.unfollowGroup = options.replicaStop.onReformed?.(() => void this.followGroup());
    }
  }

  // -------------------------------------------------------------------------------------------
  // PreemptionCoordinator
  // -------------------------------------------------------------------------------------------

  get terminationReceived(): boolean {
    return this.noticeAtMs !== undefined || this.proposal !== undefined || this.agreed !== undefined || (this.chiefSaves && this.claimSeen !== undefined);
  }

  /** `"chiefSaves"`: this task's own notice still counts after another's claim (its deadline bounds the chief's save). */
  get ignoresNotices(): boolean {
    return this.chiefSaves ? this.noticeAtMs !== undefined : this.terminationReceived;
  }

  get onNotice(): string {
    if (this.chiefLostOnNotice !== undefined) return "its chief is lost, so nobody can save: it exits with 43 at its next step";
    if (!this.chiefSaves) return "the tasks agree on the run to save at";
    return this.o.isChief ? "every task stops at its next step boundary, and the chief saves there" : "every task stops at its next step boundary; this one exits once the chief's save is done";
  }

  get claimHeardFrom(): string | undefined {
    return this.heardFrom;
  }

  /** The failure the next step raises, if any (another task's reported error, a lost task). */
  get pendingFailure(): Error | undefined {
    // A notice while the chief was lost: the next check exits with 43, whatever else failed meanwhile.
    if (this.chiefLostOnNotice !== undefined) return undefined;
    // "chiefSaves": a non-chief that stops waits for the chief's save, whose wait decides (see untilChiefSaved).
    if (this.chiefSaves && !this.o.isChief && (this.claimSeen !== undefined || this.noticeAtMs !== undefined)) return undefined;
    return this.lostDuringAgreement === undefined ? this.failure : undefined;
  }

  notifyTermination(nowMs: number, deadlineMs?: number, source?: string): void {
    if (this.noticeAtMs !== undefined) return;
    this.noticeAtMs = nowMs;
    this.deadlineMs = deadlineMs;
    // "chiefSaves": a chief already stopping for another task's claim keeps its own notice's deadline.
    this.local?.tightenDeadline(deadlineMs);
    // A worker that waits for its lost chief: nobody can save, and the wait ends (a later loss
    // is not waited out either). There is no chief to claim from, nor to agree with.
    const lost = this.o.isChief ? undefined : this.o.chiefRecovery?.noticed("its termination notice");
    if (lost !== undefined) {
      this.claimSeen ??= this.me;
      this.chiefLostOnNotice = lost;
      return;
    }
    if (this.chiefSaves) return this.claimAlone();
    const vote = this.o.replicaStop;
    // Every rank of the group hears of it now over the group's links, whatever the path below;
    // a group that outlives a lost rank no longer waits for one (see ReplicaStop.preempted).
    vote?.announceNotice?.();
    vote?.preempted?.(source ?? "a termination notice");
    if (vote?.votes === true && this.graceMs <= 0 && deadlineMs === undefined) {
      // A plain stop of a data-parallel group: the vote rides the next step's all-reduce. The
      // claim is written too (off the step's path): if the group fails before the vote completes
      // (a rank froze), every live rank knows a preemption was under way (see afterStepFailure).
      vote.requestStop();
      this.claimSeen ??= this.me;
      this.o.store.insert(this.key("claim"), this.me).catch(() => undefined);
      return;
    }
    // Claim (TensorFlow's TERMINATED_WORKER): the earliest claimant leads.
    const claim = this.o.store.insert(this.key("claim"), this.me);
    this.claimed = true;
    this.claiming = claim.catch(() => undefined);
    // The proposal goes out with the claim, from the boundary the loop reaches next (without a
    // position, the loop has not started: it proposes at its first boundary).
    const at = this.o.position?.();
    if (at !== undefined && this.proposal === undefined) {
      const next = at.runCounter + (at.inStep ? 1 : 0);
      this.propose(next, this.lastEstimateMs);
      this.answer(next);
    }
    claim.then(
      () => {
        this.leads = true;
        this.o.logger.info(`PreemptionCheckpointHandler: ${this.me} claimed the preemption; it collects every task's hold and publishes the run every task saves at.`);
        this.o.emit?.({ type: "preemptionClaimed", leader: this.me, task: this.me });
        if (this.proposedRound >= this.round) this.startLeading();
        // Closed meanwhile, before it proposed: it proposes now for the others.
        else if (this.closed) void this.handOver();
      },
      (e: unknown) => {
        if (!(e instanceof AlreadyExistsError)) return this.onWatchError(e);
        // Who leads, for the message (the key exists: the read does not block).
        void this.o.store.get(this.key("claim"), { timeoutMs: 1000 }).then(
          (leader) => {
            this.o.logger.info(`PreemptionCheckpointHandler: ${this.me} got a termination notice, but ${leader} claimed the preemption first: leaving it to ${leader}.`);
            this.o.emit?.({ type: "preemptionClaimed", leader, task: this.me });
          },
          (f: unknown) => this.o.logger.warn(`PreemptionCheckpointHandler: ${this.me} got a termination notice, but another task claimed the preemption first (reading who failed: ${describe(f)}).`),
        );
      },
    );
  }

  beforeStep(runCounter: number, estimatedRunTimeMs: number): PreemptionDecision | Promise<PreemptionDecision> {
    this.lastEstimateMs = estimatedRunTimeMs;
    if (this.chiefLostOnNotice !== undefined) return this.exitChiefLost(this.chiefLostOnNotice);
    if (this.chiefSaves) return this.stopAlone(runCounter, estimatedRunTimeMs);
    const vote = this.o.replicaStop;
    if (vote?.stopAgreed === true && !this.voted) {
      // Data-parallel: the group agreed in the last step's all-reduce to stop after it.
      this.voted = true;
      this.o.logger.info(`PreemptionCheckpointHandler: the replica group agreed in its last step's all-reduce to stop; every rank saves at run ${runCounter}.`);
      this.o.emit?.({ type: "preemptionStepAgreed", run: runCounter, round: 0, exit: true, leader: this.noticeAtMs !== undefined });
      return this.saveNow(true);
    }
    if (this.stoppedByReport !== undefined && !this.voted) return this.afterReport(runCounter, this.stoppedByReport.reporter, this.stoppedByReport.notice);
    if (this.lostDuringAgreement !== undefined) return this.afterLoss(runCounter);
    if (this.failure !== undefined && this.agreed === undefined) throw this.failure;
    const agreed = this.agreed;
    if (agreed !== undefined && this.hold !== undefined && runCounter >= agreed.step) {
      if (runCounter > agreed.step) this.o.logger.warn(`PreemptionCheckpointHandler: ${this.me} is at run ${runCounter}, past the agreed run ${agreed.step}: saving here.`);
      return this.saveNow(agreed.exit);
    }
    if (this.proposal !== undefined && this.hold === undefined) this.answer(runCounter);
    // Round 0: a claimant whose notice came before its loop's first boundary; later rounds: the leader.
    const proposes = this.round === 0 ? this.claimed && this.proposal === undefined : this.leads;
    if (proposes && this.proposedRound < this.round && this.shouldPropose(estimatedRunTimeMs)) this.propose(runCounter, estimatedRunTimeMs);
    if (this.proposal !== undefined && this.hold === undefined) this.answer(runCounter);
    // At its hold, a task waits for the agreed run (the leader's answer is a round trip away).
    if (this.hold !== undefined && this.agreed === undefined && runCounter >= this.hold) {
      return this.agreedRun().then(() => this.beforeStep(runCounter, estimatedRunTimeMs));
    }
    return CONTINUE;
  }

  /** Reports an `OpError` of a step to every task (TensorFlow reports `OpError`s only); a failed report is logged. */
  async reportError(error: unknown): Promise<void> {
    if (!(error instanceof OpError) || this.reported || this.failure !== undefined) return;
    this.reported = true;
    try {
      // Final: this task raises it and leaves (the host of an embedded service keeps serving until every task heard it).
      await this.o.store.reportErrorToCluster(error, { final: true });
    } catch (e) {
      this.o.logger.warn(`PreemptionCheckpointHandler: reporting ${error.name} to the other tasks failed (${e instanceof Error ? e.message : String(e)}); they are not told.`);
    }
  }

  /**
   * A data-parallel step failed because the group lost a rank (declared failed, its link gone,
   * the embedded service gone) while a preemption was under way: this task got the notice, or
   * heard the claim the stop vote writes. The step applied nothing (gradients are applied only
   * after a complete all-reduce), so the values are those of the last completed run: the chief
   * saves them, every live task exits with the preemption code; with the chief lost, 43 without
   * a save. Under `"chiefSaves"`, a worker's step that waited for its lost chief when a notice
   * came (it ends with `ChiefLostError`): 43 without a save. Anything else: `undefined`, the
   * step's error stands.
   */
  afterStepFailure(error: unknown, runCounter: number): PreemptionDecision | undefined {
    // A worker whose step waited for its lost chief when a notice came (the wait ended with ChiefLostError).
    if (!this.o.isChief && !this.closed) {
      this.chiefLostOnNotice ??= error instanceof ChiefLostError ? error : undefined;
      if (this.chiefLostOnNotice !== undefined) return this.exitChiefLost(this.chiefLostOnNotice);
    }
    if (this.o.replicaStop === undefined || this.closed) return undefined;
    const f = clusterFailureOf(error);
    // A preemption told through the coordination service (a group re-forming after a lost rank
    // cannot carry the stop vote): the step applied nothing; the chief saves the last completed run.
    if (f?.kind === "preemption") return this.voted ? undefined : this.afterReport(runCounter, shortTaskName(f.reporter), f.notice);
    if (this.noticeAtMs === undefined && this.claimSeen === undefined) return undefined;
    if (f === undefined || f.kind === "reported") return undefined;
    const cause = clusterFailureErrorOf(error) ?? error;
    const who = this.noticeAtMs !== undefined ? `${this.me}'s termination notice` : `${this.claimSeen ?? "a task"}'s termination notice`;
    if (!this.o.isChief && (this.o.isChiefLoss?.(cause) === true || (f.kind === "peerLost" && this.o.chiefTask !== undefined && f.task === this.o.chiefTask))) {
      return {
        save: false,
        exitWithoutSave: {
          code: CHIEF_LOST_EXIT_CODE,
          reason: `the chief was lost while the replica group stopped for ${who} (${describe(cause)}); nobody can write the checkpoint: exiting with ${CHIEF_LOST_EXIT_CODE} without saving (the restart resumes from the last checkpoint)`,
        },
      };
    }
    this.o.logger.warn(
      `PreemptionCheckpointHandler: the replica group lost a rank while it stopped for ${who} (${describe(cause)}); ${this.me} saves at run ${runCounter}, its last completed step, and exits.`,
    );
    return this.saveHereAndExit(runCounter);
  }

  /** The save took `ms`: the deadline budget counts it for the next proposal. */
  saved(ms: number): void {
    this.lastSaveMs = ms;
    // "chiefSaves": the chief's last save is stored; the others may go.
    if (this.chiefSaves && this.saving?.exit === true) this.publishChiefSaved(this.saving.run);
  }

  /**
   * Before this task exits after its last save, every task waits until its acknowledgement of
   * the agreed run is stored (its insert left the step's path, and would go with the process);
   * the chief also waits until every other task acknowledged, since with the embedded backend
   * the service goes with it. Each wait ends at the liveness deadline at the latest; what did not
   * come is one warning line, and the exit goes on. Never rejects.
   */
  async beforeExit(): Promise<void> {
    const timeoutMs = this.o.livenessTimeoutMs ?? DEFAULT_LIVENESS_MS;
    // "chiefSaves": the others wait for this insert; it is stored before the chief goes.
    if (this.published !== undefined) await this.bounded(this.published, timeoutMs);
    // "chiefSaves": a live worker acknowledges as soon as its event loop turns, which a long
    // synchronous step delays: three liveness deadlines (a frozen or dead one is declared failed
    // within one, which ends the wait for it).
    const othersMs = this.chiefSaves ? 3 * timeoutMs : timeoutMs;
    await Promise.all([this.untilAcknowledged(timeoutMs), this.o.isChief ? this.untilOthersAcknowledged(othersMs) : undefined]);
  }

  /**
   * The start barrier: resolves once every task restored. Until then the chief must not save:
   * with `maxToKeep: 1` its save removes the checkpoint a worker may still be reading.
   */
  async restored(): Promise<number | undefined> {
    this.restoredOnce = true;
    // "chiefSaves": a worker never saves, so it waits for nobody; its key tells the chief, in
    // each generation it follows the chief into.
    if (this.chiefSaves && !this.o.isChief) {
      await this.insertRestored();
      return undefined;
    }
    const recovery = this.o.isChief ? undefined : this.o.chiefRecovery;
    if (recovery === undefined) {
      await this.o.store.insert(this.key(`restored/${this.o.id}`), this.runsNow());
      const runs = await this.othersRestored();
      // A data-parallel rank counts the chief's runs: after a start from one checkpoint they are
      // its own; a rank that returns to a group that trained on without it restored an older one.
      return this.o.replicaStop !== undefined && !this.o.isChief ? runs.get(CHIEF_ID) : undefined;
    }
    // A worker that outlives its chief: a loss while it waits for the others is followed into the
    // chief's next generation, where it inserts its key and waits again.
    for (;;) {
      await this.insertRestored();
      const generation = this.o.store.generation;
      try {
        await this.othersRestored();
        return undefined;
      } catch (e) {
        const follow = this.noticeAtMs === undefined && this.claimSeen === undefined && !this.closed ? recovery.follow(e, generation) : undefined;
        if (follow === undefined) throw e;
        await follow;
        this.moveToCurrentGeneration();
      }
    }
  }

  /**
   * Waits until every other task inserted its `restored/<id>` key in the current generation:
   * their run counters by id (a value that is no count is left out).
   */
  private async othersRestored(): Promise<ReadonlyMap<number, number>> {
    const values = await Promise.all(this.others().map(async (id) => [id, await this.waitLong(`restored/${id}`, `${this.o.workers[id] ?? id} to restore its checkpoint (create its PreemptionCheckpointHandler)`)] as const));
    const runs = new Map<number, number>();
    for (const [id, value] of values) {
      const n = /^\d{1,15}$/.test(value) ? Number(value) : undefined;
      if (n !== undefined) runs.set(id, n);
    }
    return runs;
  }

  /** The value of this task's `restored/<id>` key: the runs its handler completed (restored, and trained since). */
  private runsNow(): string {
    return String(this.o.position?.()?.runCounter ?? 0);
  }

  /** Ends this task's watch: inserts its own keys of the current round, so that neither its watcher nor the leader waits for it. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.unfollowGroup?.();
    this.failAgreedWaiters(new Error("the preemption handler closed"));
    // "chiefSaves": a chief that leaves without a preemption checkpoint (its training ended) tells the others not to wait for one.
    const leaving = this.chiefSaves && this.o.isChief && this.published === undefined ? this.o.store.insert(this.key(CHIEF_SAVED), CLOSED).catch(() => undefined) : undefined;
    // A worker that outlives its chief after its handler closed (its task goes on: an evaluation,
    // the shutdown barrier): in each of the chief's next generations it answers for the closed
    // handler there, or the restarted chief's handler would wait for it (its restore, its holds).
    const recovery = this.o.isChief ? undefined : this.o.chiefRecovery;
    if (recovery?.onRegistered !== undefined) {
      const stop = recovery.onRegistered(() => {
        if (newestOfTask.get(recovery) === this) void this.closedIn(true);
        else stop();
      });
    }
    // The task may have registered in the chief's next generation before this handler's own
    // follower moved its keys there (its continuation not yet run): the marks go there, with the
    // restored key the restarted chief waits for.
    const moved = recovery !== undefined && this.moveToCurrentGeneration();
    const ending = (async () => {
      await Promise.all([this.closedIn(moved), leaving]);
      await this.handOver();
      // A leader sees its round through: the others wait for the run it publishes.
      await this.leading;
      await this.watching;
    })();
    // A service that stopped answering (frozen, or its client closed first) must not keep the
    // process from exiting: the close waits at most twice the liveness deadline.
    const boundMs = 2 * (this.o.livenessTimeoutMs ?? DEFAULT_LIVENESS_MS);
    let timer: TimerHandle | undefined;
    const late = await Promise.race([
      ending.then(
        () => false,
        () => false,
      ),
      new Promise<boolean>((ok) => {
        timer = this.o.clock.setTimer(boundMs, () => ok(true));
      }),
    ]);
    timer?.cancel();
    if (late) this.o.logger.warn(`PreemptionCheckpointHandler: ${this.me} closed before its coordination calls settled (none answered within ${secs(boundMs)} s).`);
  }

  /**
   * Inserts this closed handler's marks of the current round, so that neither its watcher nor the
   * leader waits for it; in a generation it followed the chief into (`moved`), its `restored/<id>`
   * too, since the restarted chief waits for every task's. Never rejects.
   */
  private async closedIn(moved: boolean): Promise<void> {
    if (moved) this.moveToCurrentGeneration();
    const r = this.round;
    const insert = (k: string, value: string): Promise<void> => this.o.store.insert(this.key(k), value).catch(() => undefined);
    const mark = (k: string): Promise<void> => insert(`round${r}/${k}/${this.o.id}`, CLOSED);
    await Promise.all([
      ...(this.chiefSaves ? [mark("ack")] : [mark("proposal"), mark("hold"), mark("step"), mark("ack")]),
      ...(moved ? [insert(`restored/${this.o.id}`, this.runsNow())] : []),
    ]);
  }

  /**
   * A leader that closes before it proposed (its loop ended right after its claim): it proposes
   * its last run for the others and sees the round through, so that a claim never leaves them
   * waiting for a proposal that would not come. It saves nothing itself.
   */
  private async handOver(): Promise<void> {
    if (!this.leads || this.proposedRound >= this.round || !this.shouldPropose(this.lastEstimateMs)) return;
    const at = this.o.position?.()?.runCounter ?? 0;
    this.o.logger.info(`PreemptionCheckpointHandler: ${this.me} closes before it proposed: proposing run ${at} for the other tasks.`);
    this.propose(at, this.lastEstimateMs);
  }

  // -------------------------------------------------------------------------------------------
  // internals
  // -------------------------------------------------------------------------------------------

  private key(k: string): string {
    return `${this.prefix}/${k}`;
  }

  /**
   * The value `text` of key `k`, decoded with `codec`; a malformed one (another version of the
   * library wrote it, or the key is corrupted) is a one-line `DataLossError` naming the key,
   * `what` it holds, and each problem with its path.
   */
  private decodeStored<A>(codec: t.Decoder<unknown, A>, k: string, what: string, text: string): A {
    return decodeOrThrow(
      codec,
      text,
      (problems) => new DataLossError(`PreemptionCheckpointHandler: ${what} at coordination key ${this.key(k)} is malformed (written by another version of monitored-session, or corrupted): ${problems}`),
    );
  }

  private others(): number[] {
    return this.o.workers.map((_, i) => i).filter((i) => i !== this.o.id);
  }

  private shouldPropose(estimatedRunTimeMs: number): boolean {
    if (this.round === 0) return this.noticeAtMs !== undefined;
    // TensorFlow's target: the end of the grace period less 3 × 2 mean run times.
    return this.countdown && this.o.clock.now() > this.targetTimeMs - 3 * estimatedRunTimeMs * 2;
  }

  /** This task's proposal for the current round, from the boundary `runCounter` (see the module comment, step 1). */
  private propose(runCounter: number, estimatedRunTimeMs: number): void {
    const round = this.round;
    this.proposedRound = round;
    const exit = this.graceMs <= 0 || round > 0;
    let step = runCounter + 1;
    const deadline = this.deadlineMs;
    if (deadline !== undefined) {
      const now = this.o.clock.now();
      const needMs = estimatedRunTimeMs + this.lastSaveMs;
      if (now + needMs >= deadline) {
        step = runCounter;
        this.o.logger.info(
          `PreemptionCheckpointHandler: the notice's deadline is ${Math.max(0, Math.round(deadline - now))} ms away, less than one more step and the save (${Math.round(needMs)} ms): proposing run ${runCounter}, the boundary ${this.me} reaches next, instead of run ${runCounter + 1}.`,
        );
      }
    }
    if (round > 0) this.o.logger.info("PreemptionCheckpointHandler: grace period almost ended. Final call to save a checkpoint!");
    const proposal: RunValue = { step, exit, by: this.me };
    this.proposal = proposal;
    const value = JSON.stringify(proposal);
    // Every task's own key (a task's close marks its own; two claimants' proposals race per key: the first stays).
    Promise.all(this.o.workers.map((_, id) => this.insertUnlessClosed(`round${round}/proposal/${id}`, value))).catch((e: unknown) => this.onWatchError(e));
    if (this.leads) this.startLeading();
  }

  /**
   * Collects the current round's holds and publishes the agreed run (once per round). The leader
   * does, and so does the chief as soon as it hears a proposal: with the embedded backend the
   * service is in the chief's process, so the holds reach it and the agreed run leaves it in
   * one turn of its event loop, two message hops fewer than through the leader. Both compute
   * `S = max(h)` from the same write-once holds, so both publish the same run (the first
   * insert stays). The leader alone logs the run and waits for the acknowledgements.
   */
  private startLeading(): void {
    const round = this.round;
    if (this.leadingRound >= round) return;
    this.leadingRound = round;
    this.leading = this.lead(round).catch((e: unknown) => this.onWatchError(e));
  }

  /** The collector's side of a round: every task's hold, the agreed run to every task; the leader's: the acknowledgements. */
  private async lead(round: number): Promise<void> {
    const all = this.o.workers.map((_, i) => i);
    // The same on every task: the first save of a grace period trains on, any other exits.
    const exit = this.graceMs <= 0 || round > 0;
    const proposed = this.proposal?.step;
    // A live task answers a proposal from its watcher, in a turn of its event loop; one whose
    // loop stays blocked (a step that never ends) is alive to the service, which never declares it
    // failed: the holds are waited for up to twice the liveness deadline (a dead task is declared
    // failed first, which fails the wait: see onWatchError), and one that did not come is left out
    // (that task saves where it is once it reads the agreed run, if it ever does).
    const boundMs = 2 * (this.o.livenessTimeoutMs ?? DEFAULT_LIVENESS_MS);
    const holds = await Promise.all(all.map((id) => this.waitBounded(`round${round}/hold/${id}`, boundMs)));
    const silent = holds.flatMap((h, id) => (h === undefined ? [this.o.workers[id] ?? String(id)] : []));
    if (silent.length > 0) {
      this.o.logger.warn(
        `PreemptionCheckpointHandler: ${silent.join(", ")} did not answer the proposal within ${secs(boundMs)} s (alive to the coordination service, its event loop blocked?): the run is agreed without ${silent.length === 1 ? "its hold" : "their holds"}.`,
      );
    }
    const live = holds
      .map((h, id) => ({ id, h }))
      .filter((x): x is { id: number; h: string } => x.h !== undefined && x.h !== CLOSED)
      .map(({ id, h }) => ({ id, ...this.decodeStored(HoldJson, `round${round}/hold/${id}`, `${this.o.workers[id] ?? id}'s hold`, h) }));
    // Every task may have closed or gone silent: the proposal is the run.
    if (live.length === 0 && proposed !== undefined) live.push({ id: this.o.id, hold: proposed, run: proposed });
    if (live.length === 0) return;
    const step = Math.max(...live.map(({ hold }) => hold));
    const drift = step - Math.min(...live.map(({ run }) => run));
    // The leader and the chief may have seen different holds (one came between their deadlines):
    // the first decision stored is the one both publish.
    await this.insertUnlessClosed(`round${round}/decision`, JSON.stringify({ step, exit } satisfies RunValue));
    const agreed = await this.o.store.get(this.key(`round${round}/decision`), { timeoutMs: boundMs });
    const decided = this.decodeStored(RunValueJson, `round${round}/decision`, "the agreed preemption run", agreed).step;
    await Promise.all(all.map((id) => this.insertUnlessClosed(`round${round}/step/${id}`, agreed)));
    // The chief that does not lead only relays; the leader says what was agreed.
    await this.claiming;
    if (!this.leads) return;
    this.o.logger.info(
      `PreemptionCheckpointHandler: every task saves at run ${decided}${proposed === undefined || decided === proposed ? "" : ` (proposed ${proposed}; a task had trained past it)`}${drift > 1 ? `; the furthest task is ${drift} runs behind it` : ""}${exit ? ", then exits" : ", then trains on for the grace period"}.`,
    );
    const deadline = this.deadlineMs;
    if (deadline !== undefined) {
      // No earlier run can be agreed: every task holds at its own boundary or the proposal, and S is the furthest of them.
      const lateMs = this.o.clock.now() + drift * this.lastEstimateMs + this.lastSaveMs - deadline;
      if (lateMs > 0) {
        this.o.logger.warn(
          `PreemptionCheckpointHandler: the furthest-behind task needs ${drift} more runs to reach run ${step}; at the mean run time (${Math.round(this.lastEstimateMs)} ms) its save ends about ${Math.round(lateMs)} ms after the notice's deadline. No earlier run is possible: each task already holds at its own boundary or later.`,
        );
      }
    }
    const acks = await Promise.all(live.map(({ id }) => this.waitBounded(`round${round}/ack/${id}`, boundMs)));
    this.o.emit?.({ type: "preemptionAcknowledged", run: step, round, tasks: acks.filter((a) => a !== undefined && a !== CLOSED).length });
  }

  private async insertUnlessClosed(k: string, value: string): Promise<void> {
    try {
      await this.o.store.insert(this.key(k), value);
    } catch (e) {
      if (!(e instanceof AlreadyExistsError)) throw e;
    }
  }

  /** This task's hold for the proposal (see the module comment, step 3). */
  private answer(runCounter: number): void {
    const proposal = this.proposal as RunValue;
    const hold = Math.max(proposal.step, runCounter);
    this.hold = hold;
    this.o.store.insert(this.key(`round${this.round}/hold/${this.o.id}`), JSON.stringify({ hold, run: runCounter })).catch((e: unknown) => {
      if (!(e instanceof AlreadyExistsError)) this.onWatchError(e);
    });
  }

  private saveNow(exit: boolean): PreemptionDecision {
    const deadlineMs = this.deadlineMs ?? (this.graceMs > 0 && this.noticeAtMs !== undefined ? this.noticeAtMs + this.graceMs : undefined);
    if (!exit) {
      // The grace period: train on, and the leader proposes the last save near its end.
      this.o.logger.info("PreemptionCheckpointHandler: continue training for the grace period.");
      this.countdown = true;
      const start = this.noticeAtMs ?? this.o.clock.now();
      const end = this.deadlineMs === undefined ? start + this.graceMs : Math.min(start + this.graceMs, this.deadlineMs);
      this.targetTimeMs = end;
      this.round += 1;
      this.proposal = undefined;
      this.hold = undefined;
      this.agreed = undefined;
      this.watching = this.watching.then(() => (this.closed ? undefined : this.watch()));
    }
    return { save: true, exit, deadlineMs };
  }

  /**
   * A data-parallel group that outlives a lost rank stopped for `reporter`'s termination notice,
   * told through the coordination service (its report ended the group's wait, or came instead of
   * the stop vote): this task saves at `runCounter`, its last completed step (the chief writes the
   * checkpoint), and exits.
   */
  private afterReport(runCounter: number, reporter: string, notice: string): PreemptionDecision {
    this.claimFrom(reporter);
    this.voted = true;
    this.stoppedByReport = undefined;
    this.o.logger.warn(
      `PreemptionCheckpointHandler: the replica group stopped for a termination notice (${notice}), told through the coordination service by ${reporter === this.me ? "this task" : reporter} while the group could not step together; ${this.me} saves at run ${runCounter}, its last completed step, and exits.`,
    );
    this.o.emit?.({ type: "preemptionStepAgreed", run: runCounter, round: 0, exit: true, leader: reporter === this.me });
    return this.saveHereAndExit(runCounter);
  }

  /** After a peer was lost during an agreement: save here and exit, or exit without saving when the chief is lost. */
  private afterLoss(runCounter: number): PreemptionDecision {
    const lost = this.lostDuringAgreement as { chief: boolean; error: Error };
    if (lost.chief) {
      return {
        save: false,
        exitWithoutSave: {
          code: CHIEF_LOST_EXIT_CODE,
          reason: `the chief was lost during the preemption agreement (${lost.error.message}); nobody can write the checkpoint: exiting with ${CHIEF_LOST_EXIT_CODE} without saving (the restart resumes from the last checkpoint)`,
        },
      };
    }
    this.o.logger.warn(`PreemptionCheckpointHandler: a task was lost during the preemption agreement (${lost.error.message}); ${this.me} saves at run ${runCounter}, the boundary it is at, and exits.`);
    return this.saveHereAndExit(runCounter);
  }

  /** Saves at `runCounter`, this task's own boundary (nobody else acknowledges it), and exits; any failure or loss heard is settled by it. */
  private saveHereAndExit(runCounter: number): PreemptionDecision {
    this.lostDuringAgreement = undefined;
    this.failure = undefined;
    this.agreed = { step: runCounter, exit: true };
    this.hold = runCounter;
    this.savedAfterLoss = true;
    return this.saveNow(true);
  }

  // -------------------------------------------------------------------------------------------
  // "chiefSaves" (see PreemptionAgreement)
  // -------------------------------------------------------------------------------------------

  /** A worker that stopped for a notice while its chief was lost: exits with {@link CHIEF_LOST_EXIT_CODE}, nobody having saved. */
  private exitChiefLost(lost: ChiefLostError): PreemptionDecision {
    return { save: false, exitWithoutSave: { code: CHIEF_LOST_EXIT_CODE, reason: `${lost.message}: exiting with ${CHIEF_LOST_EXIT_CODE} without saving (the restart resumes from the last checkpoint)` } };
  }

  /** This task's notice under `"chiefSaves"`: the claim tells every other task (the first claimant's stays). */
  private claimAlone(): void {
    this.claimSeen ??= this.me;
    this.watchChiefSaved();
    this.o.store.insert(this.key("claim"), this.me).then(
      () => {
        this.claimStored = true;
        this.o.logger.info(
          `PreemptionCheckpointHandler: ${this.me} claimed the preemption; every task stops at its next step boundary, the chief saves there${this.o.isChief ? "" : ", and the others exit once its save is done"}.`,
        );
        this.o.emit?.({ type: "preemptionClaimed", leader: this.me, task: this.me });
      },
      (e: unknown) => {
        // Another task claimed first: the stop is the same.
        if (e instanceof AlreadyExistsError) this.claimStored = true;
        else this.onWatchError(e);
      },
    );
  }

  /** The check before a step under `"chiefSaves"`: the chief stops as a single process does; any other task waits for the chief's save. */
  private stopAlone(runCounter: number, estimatedRunTimeMs: number): PreemptionDecision | Promise<PreemptionDecision> {
    const stopping = this.claimSeen !== undefined || this.noticeAtMs !== undefined;
    if (!this.o.isChief) {
      if (!stopping) {
        if (this.failure !== undefined) throw this.failure;
        return CONTINUE;
      }
      // What the chief's save became is watched since the claim was known: the answer decides.
      return (this.chiefOutcome ??= this.untilChiefSaved(runCounter));
    }
    if (this.lostDuringAgreement !== undefined) return this.afterLoss(runCounter);
    if (this.failure !== undefined) throw this.failure;
    if (!stopping) return CONTINUE;
    if (this.local === undefined) {
      // No peer shares the chief's steps: it saves at the boundary where it learns of the notice.
      this.local = new LocalPreemptionCoordinator({ gracePeriodSecs: this.graceMs / 1000, saveAtNextBoundary: true, clock: this.o.clock, logger: this.o.logger });
      this.local.notifyTermination(this.noticeAtMs ?? this.o.clock.now(), this.deadlineMs);
    }
    const d = this.local.beforeStep(runCounter, estimatedRunTimeMs);
    if (d.save) this.saving = { run: runCounter, exit: d.exit };
    return d;
  }

  /** The chief's last save is durable: tells the others (they exit once they read it), and waits for their acknowledgements before it exits. */
  private publishChiefSaved(run: number): void {
    if (this.published !== undefined) return;
    // A claim that came as a report (the cluster's error): nobody can be told through the service any more.
    if (this.reportedClaim !== undefined) {
      this.savedAfterLoss = true;
      return;
    }
    this.agreed = { step: run, exit: true };
    this.published = this.o.store.insert(this.key(CHIEF_SAVED), JSON.stringify({ run })).catch((e: unknown) => {
      if (e instanceof AlreadyExistsError) return;
      this.o.logger.warn(`PreemptionCheckpointHandler: the chief could not tell the other tasks that its preemption save is done (${describe(e)}); they learn of its exit from the coordination service.`);
    });
  }

  /**
   * A non-chief under `"chiefSaves"`, from the moment it knows of the claim: waits for the
   * chief's save (a live chief is waited for across the get's deadlines; a dead or frozen one is
   * declared failed, or its service goes, which fails the wait), and acknowledges it as soon as
   * it is heard, whether or not this task's loop is at a boundary, so that the chief need not
   * wait for this task's step to end.
   */
  private watchChiefSaved(): void {
    if (!this.chiefSaves || this.o.isChief || this.chiefSavedHeard !== undefined) return;
    this.chiefSavedHeard = this.waitLong(CHIEF_SAVED, "the chief's preemption save").then(
      (stored) => {
        void this.acknowledge(this.round, { step: this.o.position?.()?.runCounter ?? 0, exit: true });
        return { stored };
      },
      (error: unknown) => ({ error }),
    );
  }

  /**
   * A non-chief under `"chiefSaves"`, stopped at its boundary `runCounter`: once the chief's save
   * is done, exits with the preemption code without saving (its acknowledgement stored first); when
   * the chief is lost before this task heard of its save, 43 without a save; when the cluster
   * failed for another reason after the claim was stored, the preemption code (the chief was alive
   * and saves at its own boundary), and before that, the failure itself (nobody heard the claim).
   */
  private async untilChiefSaved(runCounter: number): Promise<PreemptionDecision> {
    this.o.logger.info(`PreemptionCheckpointHandler: ${this.me} stopped at run ${runCounter}; it exits once the chief's preemption save is done.`);
    this.watchChiefSaved();
    const heard = await (this.chiefSavedHeard as NonNullable<typeof this.chiefSavedHeard>);
    if ("error" in heard) {
      const e = heard.error;
      // A claim that came as a report: the chief's own (its training over, nothing to save, and its
      // service may be gone by now), or a worker's (the chief saves, unless it is lost).
      const reporter = this.reportedClaim;
      if (reporter === this.o.workers[0]) {
        return this.leaveWithoutSave("the chief got a termination notice after its training ended (reported to the cluster): no preemption save; a restart resumes from its last checkpoint");
      }
      if (this.losesChief(e)) {
        return {
          save: false,
          exitWithoutSave: {
            code: CHIEF_LOST_EXIT_CODE,
            reason: `the chief was lost before ${this.me} heard that its preemption save was done (${describe(clusterFailureErrorOf(e) ?? e)}); nobody can write the checkpoint: exiting with ${CHIEF_LOST_EXIT_CODE} without saving (the restart resumes from the last checkpoint)`,
          },
        };
      }
      if (reporter !== undefined) return this.leaveWithoutSave(`${reporter} got a termination notice after its training ended (reported to the cluster); the chief saves at its own step boundary`);
      // The cluster failed before the claim reached the service: nobody stops for it, and the failure stands.
      if (!this.claimStored) throw e;
      return this.leaveWithoutSave(`${this.me} cannot learn whether the chief saved (${describe(e)}), but the chief had the claim and saves at its own step boundary`);
    }
    if (heard.stored === CLOSED) return this.leaveWithoutSave("the chief left the cluster without a preemption save (its training ended); a restart resumes from its last checkpoint");
    const { run } = this.decodeStored(ChiefSavedJson, CHIEF_SAVED, "the chief's stored preemption save", heard.stored);
    return this.leaveWithoutSave(`the chief's preemption save is done (at its run ${run})`);
  }

  /** A non-chief under `"chiefSaves"` exits with the preemption code, writing nothing (only the chief's checkpoint is kept). */
  private leaveWithoutSave(why: string): PreemptionDecision {
    return { save: false, exitWithoutSave: { code: PREEMPTION_EXIT_CODE, reason: `${why}: ${this.me} exits with the preemption code without saving (only the chief's checkpoint is kept)` } };
  }

  /** Whether `e` (a coordination call's) says this non-chief lost its chief: frozen, dead, its service gone, or failed with an error it reported. */
  private losesChief(e: unknown): boolean {
    const cause = clusterFailureErrorOf(e) ?? e;
    if (this.o.isChiefLoss?.(cause) === true) return true;
    const f = clusterFailureOf(e);
    const chief = this.o.chiefTask;
    return chief !== undefined && ((f?.kind === "peerLost" && f.task === chief) || (f?.kind === "reported" && f.reporter === chief) || (f?.kind === "declaredFailed" && f.tasks.includes(chief)));
  }

  /** `promise`, or nothing after `timeoutMs` (never rejects). */
  private async bounded(promise: Promise<void>, timeoutMs: number): Promise<void> {
    let timer: TimerHandle | undefined;
    await Promise.race([promise.catch(() => undefined), new Promise<void>((ok) => (timer = this.o.clock.setTimer(timeoutMs, ok)))]);
    timer?.cancel();
  }

  /** Waits for the claim (a data-parallel group's stop vote writes it), again after each timeout, until this task closes or the cluster fails. */
  private async watchClaim(epoch = this.watchEpoch): Promise<void> {
    while (!this.closed && this.claimSeen === undefined && epoch === this.watchEpoch) {
      const generation = this.o.store.generation;
      try {
        const claimant = await this.o.store.get(this.key("claim"), { timeoutMs: CLAIM_WATCH_MS });
        if (epoch === this.watchEpoch) this.claimFrom(claimant);
      } catch (e) {
        if (e instanceof DeadlineExceededError || epoch !== this.watchEpoch) continue;
        if (!this.chiefSaves) {
          // A group that outlives a lost rank: the re-form restarts the watch in the next generation (see followGroup).
          const reform = this.outsideAgreement() ? this.o.replicaStop?.follow?.(e, generation) : undefined;
          if (reform !== undefined) return this.untilReformed(reform);
          // The failure reaches the group's steps through its collective; a preemption report is a claim.
          if (clusterFailureOf(e)?.kind === "preemption") this.onWatchError(e);
          return;
        }
        // A worker that outlives its chief: the watch goes on in the chief's next generation.
        const follow = this.o.isChief || this.claimSeen !== undefined || this.noticeAtMs !== undefined ? undefined : this.o.chiefRecovery?.follow(e, generation);
        if (follow !== undefined && (await this.followedChief(follow))) continue;
        // "chiefSaves": the claim's watch is the task's one pending call, which hears the cluster's failure (a group hears it in its collective).
        this.onWatchError(e);
        return;
      }
    }
  }

  /**
   * `"chiefSaves"`, a worker whose chief was lost outside any preemption: waits with the task's
   * recovery until it registered in the chief's next generation, then moves its keys there (its
   * `restored/<id>` inserted again, since the restarted chief's handler waits for it). Whether it
   * did; when the recovery failed, its failure is this coordinator's, unless a notice already
   * decided (see {@link notifyTermination}).
   */
  private async followedChief(follow: Promise<void>): Promise<boolean> {
    try {
      await follow;
    } catch (f) {
      if (this.lostDuringAgreement === undefined) this.failure ??= f instanceof Error ? f : new Error(String(f));
      return false;
    }
    // Moved before any notice can come (a signal waits for this turn's microtasks): a claim goes to the new generation.
    if (this.moveToCurrentGeneration() && this.restoredOnce && !this.closed) {
      // The restarted chief's handler waits for this key: without it, it would wait until this task is declared failed.
      await this.insertRestored().catch((e: unknown) => {
        this.failure ??= e instanceof Error ? e : new Error(String(e));
      });
    }
    return true;
  }

  /**
   * A data-parallel group that outlives a lost rank: a watch's call failed as the group re-forms.
   * The re-form restarts the watches ({@link followGroup}); one that fails is this coordinator's
   * failure (a preemption report a claim).
   */
  private async untilReformed(reform: Promise<void>): Promise<void> {
    await reform.catch((f: unknown) => this.onWatchError(f));
  }

  /**
   * A data-parallel group that outlives a lost rank trains again in its next generation: outside
   * any agreement, the keys move there, this task's `restored/<id>` is stored there (the
   * returning rank's handler waits for every other task's restore), and the watches start again
   * there; those of the old generation end quietly. Inside one, the agreement decides (a
   * preemption ends any re-form, see `ReplicaStop.preempted`).
   */
  private async followGroup(): Promise<void> {
    if (this.closed || !this.moveToCurrentGeneration()) return;
    // A notice that came as the re-form ended (too late to end it): its claim goes to the new generation too.
    if (!this.outsideAgreement()) {
      if (this.leads || this.claimSeen === this.me) this.o.store.insert(this.key("claim"), this.me).catch(() => undefined);
      return;
    }
    this.watchEpoch += 1;
    this.watching = this.watch();
    void this.watchClaim();
    if (!this.restoredOnce) return;
    const generation = this.o.store.generation;
    // Its value, the runs this rank completed, is the count a returning rank takes (the chief's).
    await this.o.store.insert(this.key(`restored/${this.o.id}`), this.runsNow()).catch((e: unknown) => {
      if (e instanceof AlreadyExistsError) return;
      // Another loss as it stored it: the next re-form stores it again.
      const reform = this.o.replicaStop?.follow?.(e, generation);
      return reform === undefined ? this.onWatchError(e) : this.untilReformed(reform);
    });
  }

  /** No preemption is under way as far as this task knows (no notice, no claim, no proposal). */
  private outsideAgreement(): boolean {
    return this.proposal === undefined && this.noticeAtMs === undefined && this.claimSeen === undefined && this.stoppedByReport === undefined && !this.closed;
  }

  /** Keys live under the coordination client's current generation from now on: whether they moved. */
  private moveToCurrentGeneration(): boolean {
    const next = `${PREFIX}/${this.o.store.generation ?? 0}`;
    const moved = next !== this.prefix;
    this.prefix = next;
    return moved;
  }

  /**
   * `"chiefSaves"`, a worker: inserts `restored/<id>` in the current generation. A loss of the
   * chief on the way is waited out with the task's recovery, and the key inserted in the chief's
   * next generation; any other failure (or a failed recovery) rejects.
   */
  private async insertRestored(): Promise<void> {
    for (;;) {
      // A closed handler's task restores nothing more (the restarted chief learns of its exit).
      if (this.closed) return;
      const generation = this.o.store.generation;
      try {
        await this.o.store.insert(this.key(`restored/${this.o.id}`), this.runsNow());
        return;
      } catch (e) {
        if (e instanceof AlreadyExistsError) return;
        const follow = this.claimSeen !== undefined || this.noticeAtMs !== undefined ? undefined : this.o.chiefRecovery?.follow(e, generation);
        if (follow === undefined) throw e;
        await follow;
        this.moveToCurrentGeneration();
      }
    }
  }

  /** `claimant`'s claim reached this task (the stored claim, or its notice over the group's links): the first one counts. */
  private claimFrom(claimant: string): void {
    if (this.claimSeen === undefined && claimant !== this.me && !this.closed) {
      this.heardClaim(claimant);
      // A group that outlives a lost rank no longer waits for one (see ReplicaStop.preempted).
      if (!this.chiefSaves) this.o.replicaStop?.preempted?.(`${claimant}'s termination notice`, claimant);
    }
    this.claimSeen ??= claimant;
    if (this.chiefSaves) {
      // A worker that knows of a preemption no longer waits out a loss of its chief: the chief's save decides.
      if (!this.o.isChief) this.o.chiefRecovery?.noticed(claimant === this.me ? "its termination notice" : `${claimant}'s termination notice`);
      // Read from the service (or carried by a report it holds): stored.
      this.claimStored = true;
      this.watchChiefSaved();
    }
  }

  /** Another task's claim reached this one, without a notice of its own (its proposal, or the claim a stop vote writes): one line, one event. */
  private heardClaim(claimant: string): void {
    if (this.heardFrom !== undefined || this.noticeAtMs !== undefined) return;
    this.heardFrom = claimant;
    const where = !this.chiefSaves
      ? "stops where the tasks agree"
      : this.o.isChief
        ? "saves at its next step boundary"
        : "stops at its next step boundary and exits once the chief's save is done";
    this.o.logger.info(`PreemptionCheckpointHandler: ${claimant} got a termination notice; ${this.me} ${where}.`);
    this.o.emit?.({ type: "preemptionClaimHeard", claimant });
  }

  /** One round of the watch: the proposal, then the agreed run, then the acknowledgement (see the module comment). */
  private async watch(epoch = this.watchEpoch): Promise<void> {
    const round = this.round;
    const generation = this.o.store.generation;
    try {
      const proposal = await this.waitFor(`round${round}/proposal/${this.o.id}`);
      if (proposal === undefined || proposal === CLOSED || this.closed || epoch !== this.watchEpoch) return;
      if (round === this.round) {
        const proposed = this.decodeStored(RunValueJson, `round${round}/proposal/${this.o.id}`, `the preemption proposal for ${this.me}`, proposal);
        if (this.proposal === undefined && round === 0 && proposed.by !== undefined && proposed.by !== this.me) this.heardClaim(proposed.by);
        // A worker that knows of a preemption no longer waits out a loss of its chief: the agreement decides.
        if (this.proposal === undefined && round === 0 && !this.o.isChief) this.o.chiefRecovery?.noticed(proposed.by === undefined || proposed.by === this.me ? "its termination notice" : `${proposed.by}'s termination notice`);
        this.proposal ??= proposed;
        if (this.o.isChief) this.startLeading();
        // Answer now, from where the loop is: the boundary it reaches next.
        const at = this.o.position?.();
        if (this.hold === undefined && at !== undefined) this.answer(at.runCounter + (at.inStep ? 1 : 0));
      }
      const agreed = await this.waitFor(`round${round}/step/${this.o.id}`);
      if (agreed === undefined || agreed === CLOSED || this.closed || epoch !== this.watchEpoch) return;
      const value = this.decodeStored(RunValueJson, `round${round}/step/${this.o.id}`, `the agreed preemption run for ${this.me}`, agreed);
      if (round !== this.round) return;
      this.agreed = value;
      this.o.emit?.({ type: "preemptionStepAgreed", run: value.step, round, exit: value.exit, leader: this.leads });
      // The loop goes on at once: the acknowledgement stays off the step's path, and off the
      // watch's (a close does not wait for it); only the exit waits for it (beforeExit).
      for (const w of this.agreedWaiters.splice(0)) w.ok();
      void this.acknowledge(round, value);
    } catch (e) {
      if (epoch !== this.watchEpoch) return;
      // A worker that outlives its chief, outside any agreement: the watch goes on in the chief's next generation.
      const outside = round === 0 && this.proposal === undefined && this.noticeAtMs === undefined && this.claimSeen === undefined && !this.o.isChief && !this.closed;
      const follow = outside ? this.o.chiefRecovery?.follow(e, generation) : undefined;
      if (follow !== undefined && (await this.followedChief(follow))) return this.closed ? undefined : this.watch();
      // A data-parallel group that outlives a lost rank, outside any agreement: the re-form restarts the watch in the next generation (see followGroup).
      const reform = round === 0 && this.outsideAgreement() ? this.o.replicaStop?.follow?.(e, generation) : undefined;
      if (reform !== undefined) return this.untilReformed(reform);
      this.onWatchError(e);
    }
  }

  /** Stores this task's acknowledgement of the agreed run of `round`; settles once stored or failed (a failure is one warning line). */
  private acknowledge(round: number, agreed: RunValue): Promise<void> {
    const stored = this.o.store.insert(this.key(`round${round}/ack/${this.o.id}`), "1").catch((e: unknown) => {
      // Only this task writes its key (its close() marks it too): present is as good as stored.
      if (e instanceof AlreadyExistsError) return;
      this.warnAcknowledgement(
        round,
        this.chiefSaves
          ? `PreemptionCheckpointHandler: ${this.me} could not acknowledge the chief's preemption checkpoint (${describe(e)}); it exits all the same.`
          : `PreemptionCheckpointHandler: ${this.me} could not acknowledge the agreed run ${agreed.step} (${describe(e)}); it saves there${agreed.exit ? " and exits" : ""} all the same.`,
      );
    });
    this.acknowledgement = { round, run: agreed.step, stored };
    return stored;
  }

  /** Waits (up to `timeoutMs`) until this task's acknowledgement of the current round is stored. */
  private async untilAcknowledged(timeoutMs: number): Promise<void> {
    const ack = this.acknowledgement;
    if (ack === undefined || ack.round !== this.round) return;
    let timer: TimerHandle | undefined;
    const late = await Promise.race([
      ack.stored.then(() => false),
      new Promise<boolean>((ok) => {
        timer = this.o.clock.setTimer(timeoutMs, () => ok(true));
      }),
    ]);
    timer?.cancel();
    if (late) {
      this.warnAcknowledgement(
        ack.round,
        `PreemptionCheckpointHandler: ${this.me}'s acknowledgement of ${this.chiefSaves ? "the chief's preemption checkpoint" : `the agreed run ${ack.run}`} was not stored within ${secs(timeoutMs)} s; it exits all the same (the chief waits for it up to its liveness deadline).`,
      );
    }
  }

  /**
   * The chief: waits (up to `timeoutMs`) until every other task acknowledged the agreed run; one
   * line names exactly those that did not, why, and how long the chief waited (on the clock).
   */
  private async untilOthersAcknowledged(timeoutMs: number): Promise<void> {
    const agreed = this.agreed;
    // After a loss the run is this task's own boundary, which nobody acknowledges (and the generation failed).
    if (agreed === undefined || this.savedAfterLoss) return;
    const round = this.round;
    const startedMs = this.o.clock.now();
    const missing = await Promise.all(
      this.others().map((id) =>
        this.o.store.get(this.key(`round${round}/ack/${id}`), { timeoutMs }).then(
          () => undefined,
          (e: unknown) => ({ task: this.o.workers[id] ?? String(id), why: e instanceof DeadlineExceededError ? `nothing within the ${secs(timeoutMs)} s deadline` : describe(e) }),
        ),
      ),
    );
    const untold = missing.filter((m) => m !== undefined);
    if (untold.length === 0) return;
    this.o.logger.warn(
      `PreemptionCheckpointHandler: ${untold.map((m) => m.task).join(", ")} did not acknowledge ${this.chiefSaves ? `the chief's preemption checkpoint (its run ${agreed.step})` : `the agreed run ${agreed.step}`}; the chief waited ${secs(this.o.clock.now() - startedMs)} s (${untold.map((m) => `${m.task}: ${m.why}`).join("; ")}) and exits all the same.`,
    );
  }

  /** Logs `line` unless this task already warned about its acknowledgement of `round`. */
  private warnAcknowledgement(round: number, line: string): void {
    if (this.ackWarnedRound >= round) return;
    this.ackWarnedRound = round;
    this.o.logger.warn(line);
  }

  /**
   * The value of `k`, across the get's deadlines (a live task may take long to get there: a slow
   * step, an evaluation); a dead one is declared failed by the service, which fails the call.
   * Each expired deadline is logged, naming what is awaited.
   */
  private async waitLong(k: string, what: string): Promise<string> {
    for (;;) {
      try {
        return await this.o.store.get(this.key(k));
      } catch (e) {
        if (!(e instanceof DeadlineExceededError)) throw e;
        this.o.logger.warn(`PreemptionCheckpointHandler: ${this.me} still waits for ${what} (the task is alive: the coordination service has not declared it failed).`);
      }
    }
  }

  /** The value of `k`, or `undefined` when it does not come within `timeoutMs`. */
  private async waitBounded(k: string, timeoutMs: number): Promise<string | undefined> {
    try {
      return await this.o.store.get(this.key(k), { timeoutMs });
    } catch (e) {
      if (e instanceof DeadlineExceededError) return undefined;
      throw e;
    }
  }

  /** The value of `k`, waiting across the get's deadlines; `undefined` once closed. */
  private async waitFor(k: string): Promise<string | undefined> {
    for (;;) {
      if (this.closed) return undefined;
      try {
        return await this.o.store.get(this.key(k));
      } catch (e) {
        if (!(e instanceof DeadlineExceededError)) throw e;
      }
    }
  }

  /**
   * Resolves once the agreed run is known, or the agreement failed (the next check acts on it).
   * The publishers (the leader and the chief) decide within twice the liveness deadline of their
   * proposal; a third is slack. Past that, both are alive to the service but silent (their event
   * loops blocked): this task takes it as a loss during the agreement and saves where it is.
   */
  private agreedRun(): Promise<void> {
    if (this.agreed !== undefined) return Promise.resolve();
    const failure = this.lostDuringAgreement?.error ?? this.failure;
    if (failure !== undefined) return Promise.resolve();
    const boundMs = 3 * (this.o.livenessTimeoutMs ?? DEFAULT_LIVENESS_MS);
    return new Promise((ok, fail) => {
      const waiter = {
        ok: () => {
          timer.cancel();
          ok();
        },
        fail: (e: unknown) => {
          timer.cancel();
          fail(e);
        },
      };
      const timer = this.o.clock.setTimer(boundMs, () => {
        this.agreedWaiters = this.agreedWaiters.filter((w) => w !== waiter);
        this.lostDuringAgreement ??= {
          chief: false,
          error: new DeadlineExceededError(
            `${this.me} held at run ${this.hold ?? "?"} and the agreed run did not come within ${secs(boundMs)} s (the leader and the chief alive to the coordination service, but silent)`,
          ),
        };
        ok();
      });
      this.agreedWaiters.push(waiter);
    });
  }

  private failAgreedWaiters(e: unknown): void {
    for (const w of this.agreedWaiters.splice(0)) w.fail(e);
  }

  /** A coordination call failed: another task's reported error, or a task (or the service) lost. */
  private onWatchError(e: unknown): void {
    if (this.closed) return;
    const error = e instanceof Error ? e : new Error(String(e));
    const f = clusterFailureOf(e);
    if (this.chiefSaves && f?.kind === "preemption") {
      // A task whose handler had closed (its training over) reported its notice: a claim, which the service holds.
      // A report names its reporter as the coordination service does (`/job:chief/replica:0/task:0`).
      const reporter = shortTaskName(f.reporter);
      this.reportedClaim = reporter;
      this.claimFrom(reporter);
      return;
    }
    if (this.o.replicaStop !== undefined && f?.kind === "preemption") {
      // A data-parallel group that outlives a lost rank stopped for a notice the service told
      // (the group could not carry the stop vote): the next check saves where this task is.
      if (!this.voted && this.agreed === undefined) this.stoppedByReport ??= { reporter: shortTaskName(f.reporter), notice: f.notice };
      for (const w of this.agreedWaiters.splice(0)) w.ok();
      return;
    }
    // The agreed run is known: nothing more is needed from the cluster (a task that saved and exited is not a failure).
    if (this.agreed !== undefined && this.hold !== undefined) {
      if (e instanceof OpError && !isLoss(e)) this.o.logger.warn(`PreemptionCheckpointHandler: after the agreement, another task reported ${describe(e)}; ${this.me} saves at the agreed run ${this.agreed.step} all the same.`);
      return;
    }
    const inAgreement = this.noticeAtMs !== undefined || this.proposal !== undefined || this.countdown || (this.chiefSaves && this.claimSeen !== undefined);
    if (inAgreement && !(e instanceof OpError && !isLoss(e))) {
      this.lostDuringAgreement ??= { chief: !this.o.isChief && this.o.isChiefLoss?.(e) === true, error };
    } else {
      this.failure ??= error;
    }
    // A task waiting at its hold goes on: the next check acts on the failure.
    for (const w of this.agreedWaiters.splice(0)) w.ok();
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const CONTINUE: PreemptionDecision = Object.freeze({ save: false });

/** Milliseconds as seconds, to a tenth: `6.4`, `10`. */
const secs = (ms: number): string => String(Math.round(ms / 100) / 10);

/** `Name: first line of the message`. */
const describe = (e: unknown): string => (e instanceof Error ? `${e.name}: ${e.message.split("\n")[0] ?? ""}` : String(e));

/** A task or the service lost (not an error a task reported on purpose). */
const isLoss = (e: OpError): boolean => e.name === "UnavailableError" || e.name === "AbortedError" || e.name === "DeadlineExceededError";
