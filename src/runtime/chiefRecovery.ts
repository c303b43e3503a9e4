/**
 * How a worker of a cluster without data parallelism outlives its chief (`run` with TF_CONFIG,
 * a job that holds no replica group, not started by `launch`, which restarts the whole group).
 * When the coordination service says the chief is gone (its
 * heartbeats stopped, the embedded service it hosted is unreachable, or it started a new
 * generation), the worker does not fail: it registers again in the restarted chief's generation,
 * waits until the chief has published its restored model, and its monitored session is
 * re-created from those values (TensorFlow's recoverable session: an `UnavailableError` at the
 * next step). The wait is bounded by `maxWaitSecs`, the session's "how long a worker waits for the
 * chief", counted from the loss; past it the worker fails with one line naming the chief and the
 * setting.
 *
 * Any other failure of the cluster (another task declared failed, a reported error, a
 * preemption, etcd gone, a chief that stopped its service on purpose) is not a loss of the chief:
 * the runtime reports it as before. A data-parallel rank cannot rejoin alone: its collective's
 * ring is built once per generation from every rank's address and incarnation, so a restarted
 * chief means a restart of the group (`launch --max-restarts`).
 *
 * @module
 */

import type { ChiefModel, ChiefModelState } from "../session/ChiefModel.js";
import type { Clock } from "../time/Clock.js";
import type { CoordinationClient } from "../cluster/coordination/CoordinationClient.js";
import { AbortedError, DeadlineExceededError, OpError, UnavailableError, UnknownError } from "../errors.js";
import type { Logger } from "../Logger.js";
import type { RuntimeEmit } from "./events.js";
import { hook, type SessionRunHook } from "../hook/SessionRunHook.js";
import { ChiefLostError } from "../preemption/PreemptionCluster.js";
import { servedByChief } from "../cluster/coordination/backends.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link ChiefRecovery}. */
export interface ChiefRecoveryOptions {
  readonly client: CoordinationClient;
  /** This task, as logs name it (`worker:0`). */
  readonly name: string;
  /** The chief's task name (`/job:chief/replica:0/task:0`). */
  readonly chief: string;
  /** Every task of the cluster. */
  readonly tasks: readonly string[];
  /** How long the worker waits for the chief: after a loss, and for its first model (default 7200). */
  readonly maxWaitSecs: number;
  /** Registers again, again after each AbortedError, for at most `timeoutMs`. */
  readonly connect: (timeoutMs: number) => Promise<void>;
  /** Passes the cluster's start barrier (every task has its session). */
  readonly startBarrier: () => Promise<void>;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Emits the task's events (src/runtime/events.ts); default: none. */
  readonly emit?: RuntimeEmit | undefined;
}

/** The key the chief inserts, in each generation, once its session exists and its model is published. */
export const MODEL_READY_KEY = "monitored-session/run/model-ready";

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * A worker's recovery from the loss of its chief: the runtime's watch calls {@link recover};
 * the session takes {@link hook} (first of its hooks) and the chief model {@link chiefModel}
 * wraps.
 */
export class ChiefRecovery {
  /** Counts the losses of the chief. */
  #epoch = 0;
  /** The epoch of the chief's values the current session started from. */
  #sessionEpoch = 0;
  /** The epoch when the last successful pull began. */
  #pulledEpoch = 0;
  #recovering: Promise<void> | undefined;
  #reject: ((e: Error) => void) | undefined;
  /** Set once the worker gave up on the chief, or was told to leave: every later wait raises it. */
  #ended: Error | undefined;
  /** The loss a recovery under way waits out (for messages). */
  #cause: OpError | undefined;
  /** Told once the recovery under way registered the task in the chief's next generation (before the chief's model is published). */
  #onRegistered: (() => void)[] = [];
  /** Set once the task stops for a preemption (what it stops for): a loss of the chief is no longer waited out. */
  #noticed: string | undefined;
  /** Told (synchronously, once) when a loss of the chief ends that stop: see {@link noticed}. */
  #onChiefLost: ((error: ChiefLostError) => void) | undefined;
  /** Told each time a recovery registered this task in the chief's next generation (see {@link onRegistered}). */
  readonly #registeredListeners = new Set<() => void>();
  /** The generation in which this task passed the start barrier. */
  #passed: number | undefined;
  /** The generation in which the chief's model was seen published. */
  #ready: number | undefined;
  /**
   * Whether a session of this task can be re-created from a restarted chief's values: one is
   * made from the task's session targets (it asked for the chief's model) or runs its hooks. A
   * program that trains outside such a session (its own loop on a session of its own) cannot
   * be recovered: a loss of the chief then fails the task at once, as it says.
   */
  #inUse = false;

  constructor(private readonly o: ChiefRecoveryOptions) {}

  /**
   * Whether `e`, from the coordination service, means the chief is gone and may come back: a new
   * generation (AbortedError), the embedded service it hosts unreachable or replaced, or the chief
   * alone declared failed.
   */
  isChiefLoss(e: unknown): boolean {
    return isChiefLoss(e, this.o.chief);
  }

  /**
   * Starts a recovery after `cause`, seen by a call made in `generation` (or joins the one under
   * way): registers again, then waits for the chief's model in the new generation. Resolves once
   * the chief is back; rejects with DeadlineExceededError after `maxWaitSecs`, with any error that
   * is not a loss of the chief, or with the error given to {@link cancel}.
   */
  recover(cause: OpError, generation: number | undefined): Promise<void> {
    if (this.#ended !== undefined) return Promise.reject(this.#ended);
    if (this.#recovering !== undefined) return this.#recovering;
    // The task registered again since that call was made: that loss is over.
    if (generation !== this.o.client.generation) return Promise.resolve();
    const { clock, logger } = this.o;
    if (this.#noticed !== undefined) {
      // Preempted, and the chief is gone: nobody can write the checkpoint, and nothing is waited out.
      const lost = this.#chiefLost(this.#noticed, cause);
      this.o.emit?.({ type: "chiefLost", task: this.o.name, chief: this.o.chief, waiting: false, maxWaitSecs: this.o.maxWaitSecs });
      this.#ended = lost;
      this.#onChiefLost?.(lost);
      return Promise.reject(lost);
    }
    if (!this.#inUse) {
      logger.warn(
        `${this.o.name} lost the chief ${this.o.chief} (${describe(cause)}): no session of this task is made from its session targets and hooks (a monitored session with the task's master), so none can be re-created from a restarted chief's values; the task fails with the loss.`,
      );
      this.o.emit?.({ type: "chiefLost", task: this.o.name, chief: this.o.chief, waiting: false, maxWaitSecs: this.o.maxWaitSecs });
      this.#ended = cause;
      return Promise.reject(cause);
    }
    const timeoutMs = this.o.maxWaitSecs * 1000;
    this.#epoch += 1;
    this.#cause = cause;
    logger.warn(
      `${this.o.name} lost the chief ${this.o.chief} (${describe(cause)}): waiting up to ${this.o.maxWaitSecs} s (maxWaitSecs) for it to restart; this worker's session is then re-created from the chief's values.`,
    );
    this.o.emit?.({ type: "chiefLost", task: this.o.name, chief: this.o.chief, waiting: true, maxWaitSecs: this.o.maxWaitSecs });
    let last: unknown = cause;
    const recovering = new Promise<void>((resolve, reject) => {
      const timer = clock.setTimer(timeoutMs, () => reject(this.#gaveUp(last)));
      this.#reject = reject;
      this.#rejoin(clock.now() + timeoutMs, (e) => (last = e)).then(resolve, reject).finally(() => timer.cancel());
    });
    this.#recovering = recovering;
    recovering.then(
      () => {
        logger.info(`The chief is back: ${this.o.name} registered again (generation ${this.o.client.generation ?? "?"}) and the chief's model is published; re-creating this worker's session from it.`);
        this.o.emit?.({ type: "chiefReturned", task: this.o.name, generation: this.o.client.generation ?? null });
      },
      (e: unknown) => {
        this.#ended ??= e instanceof Error ? e : new UnknownError(String(e));
      },
    ).finally(() => {
      this.#recovering = undefined;
      this.#reject = undefined;
    });
    return recovering;
  }

  /**
   * Starts (or joins) a recovery after `cause` as {@link recover} does, but resolves as soon as
   * the task registered in the chief's next generation, before the chief's model is published:
   * what depends on the generation alone (the preemption agreement's keys, which a restarted
   * chief's handler may wait for before its session exists) moves there then. Rejects as the
   * recovery does.
   */
  registered(cause: OpError, generation: number | undefined): Promise<void> {
    const recovering = this.recover(cause, generation);
    if (this.#recovering === undefined) return recovering;
    return new Promise<void>((ok, fail) => {
      this.#onRegistered.push(ok);
      recovering.then(ok, fail);
    });
  }

  /** Whether a recovery is under way (the worker waits for its chief). */
  get recovering(): boolean {
    return this.#recovering !== undefined;
  }

  /** Ends any recovery, now and later, with `error` (a termination notice, the task leaving). Whether one was under way. */
  cancel(error: Error): boolean {
    this.#ended ??= error;
    const reject = this.#reject;
    reject?.(error);
    return reject !== undefined;
  }

  /**
   * This task stops for a preemption (`why`: `its termination notice`): from now on a loss of the
   * chief ends at once, with a `ChiefLostError` (nobody could write the checkpoint). A recovery
   * under way ends with it now, and it is returned; `undefined` when none was under way.
   * `onChiefLost` (the first one given is kept) is told of that error synchronously, before any
   * wait raises it, whether the loss was under way or comes later: the owner of the task's exit
   * (`startTask()` before a handler took its notices over) exits 43 before the program sees it.
   */
  noticed(why: string, onChiefLost?: (error: ChiefLostError) => void): ChiefLostError | undefined {
    this.#noticed ??= why;
    this.#onChiefLost ??= onChiefLost;
    const reject = this.#reject;
    if (reject === undefined || this.#ended !== undefined) return undefined;
    const error = this.#chiefLost(this.#noticed, this.#cause);
    this.#ended = error;
    this.#onChiefLost?.(error);
    reject(error);
    return error;
  }

  /**
   * Calls `listener` each time a recovery registered this task in the chief's next generation
   * (before the chief's model is published), for what must be there in each generation whether
   * or not anything of the task's waits (a closed preemption handler's keys). Returns the
   * unsubscribe.
   */
  onRegistered(listener: () => void): () => void {
    this.#registeredListeners.add(listener);
    return () => this.#registeredListeners.delete(listener);
  }

  /** The chief's model as the worker's session creator asks it: after a loss, only once the chief is back. */
  chiefModel(inner: ChiefModel): ChiefModel {
    this.#inUse = true;
    const waitForChange = inner.waitForChange;
    return { address: inner.address, pull: () => this.#pull(inner), ...(waitForChange === undefined ? {} : { waitForChange: (ms: number) => waitForChange.call(inner, ms) }) };
  }

  /**
   * The worker's hook: `beforeRun` raises UnavailableError after a loss of the chief, so that the
   * monitored session is re-created; `afterCreateSession` passes the start barrier in each new
   * generation (the chief waits there before it trains on).
   */
  readonly hook: SessionRunHook = hook("ChiefRecovery", {
    begin: () => {
      this.#inUse = true;
    },
    afterCreateSession: async () => {
      this.#inUse = true;
      this.#sessionEpoch = this.#pulledEpoch;
      const generation = this.o.client.generation;
      if (generation !== undefined && generation === this.#passed) return;
      try {
        await this.o.startBarrier();
      } catch (e) {
        if (this.#ended !== undefined) throw this.#ended;
        if (!(this.isChiefLoss(e) || this.#recovering !== undefined || generation !== this.o.client.generation)) throw e;
        this.recover(asOpError(e), generation).catch(() => undefined);
        throw this.#lost();
      }
      this.#passed = generation;
    },
    beforeRun: () => {
      if (this.#epoch !== this.#sessionEpoch) throw this.#lost();
    },
  });

  // -------------------------------------------------------------------------------------------
  // utils
  // -------------------------------------------------------------------------------------------

  async #pull(inner: ChiefModel): Promise<ChiefModelState> {
    const { client } = this.o;
    for (;;) {
      if (this.#ended !== undefined) throw this.#ended;
      if (this.#recovering !== undefined) {
        await this.#recovering;
        continue;
      }
      // The chief's model is published once its key is there: no poll every recoveryWaitSecs.
      const generation = client.generation;
      if (generation !== this.#ready) {
        try {
          await client.get(MODEL_READY_KEY, { timeoutMs: this.o.maxWaitSecs * 1000 });
          this.#ready = generation;
        } catch (e) {
          if (this.isChiefLoss(e) || this.#recovering !== undefined || this.#ended !== undefined) {
            this.recover(asOpError(e), generation).catch(() => undefined);
            continue;
          }
          if (e instanceof DeadlineExceededError) return { ready: false, reason: `it did not publish its model within ${this.o.maxWaitSecs} s (maxWaitSecs)` };
          throw e;
        }
      }
      const epoch = this.#epoch;
      const state = await inner.pull();
      if (state.ready) this.#pulledEpoch = epoch;
      else if (generation === this.#ready && this.#ended === undefined && (await this.#serviceLost(generation))) continue;
      return state;
    }
  }

  /** Registers again and waits for the chief's model, until `deadline`; `seen` is told each failed attempt's error. */
  async #rejoin(deadline: number, seen: (e: unknown) => void): Promise<void> {
    const { client, clock } = this.o;
    for (let backoffMs = 100; this.#ended === undefined; backoffMs = Math.min(2 * backoffMs, 1000)) {
      try {
        await this.o.connect(Math.max(1, deadline - clock.now()));
        const generation = client.generation;
        for (const registered of this.#onRegistered.splice(0)) registered();
        for (const listener of this.#registeredListeners) {
          // A listener's failure is its own: the recovery goes on.
          try {
            listener();
          } catch (e) {
            this.o.logger.warn(`${this.o.name}: a listener of the registration in generation ${generation ?? "?"} failed: ${describe(e)}`);
          }
        }
        await client.get(MODEL_READY_KEY, { timeoutMs: Math.max(1, deadline - clock.now()) });
        this.#ready = generation;
        return;
      } catch (e) {
        // The chief not back yet (nobody serves, its generation not started): try again.
        if (!(this.isChiefLoss(e) || e instanceof DeadlineExceededError)) throw e;
        seen(e);
      }
      await clock.sleep(Math.min(backoffMs, Math.max(0, deadline - clock.now())));
    }
  }

  /**
   * The chief did not answer after it had published its model in this generation: whether the
   * coordination service says it is lost too (with the embedded backend, its service went with
   * it). Then a recovery starts, so that waiting for the model is the recovery's wait (bounded by
   * `maxWaitSecs`, its message naming the chief) and not the session manager's, whichever
   * noticed the loss first. With etcd, or a chief only slow to answer, nothing changes.
   */
  async #serviceLost(generation: number | undefined): Promise<boolean> {
    try {
      await this.o.client.tryGet(MODEL_READY_KEY);
      return false;
    } catch (e) {
      if (!this.isChiefLoss(e)) return false;
      this.recover(asOpError(e), generation).catch(() => undefined);
      return true;
    }
  }

  #gaveUp(last: unknown): DeadlineExceededError {
    return new DeadlineExceededError(
      `${this.o.name} lost the chief ${this.o.chief}, which did not come back within ${this.o.maxWaitSecs} s (maxWaitSecs): ${describe(last)}`,
    );
  }

  #chiefLost(why: string, cause: OpError | undefined): ChiefLostError {
    return new ChiefLostError(
      `${this.o.name} stops for ${why} while its chief ${this.o.chief} is lost${cause === undefined ? "" : ` (${describe(cause)})`}: nobody can write the checkpoint`,
    );
  }

  #lost(): UnavailableError {
    return new UnavailableError(`lost the chief ${this.o.chief}: the session is re-created from its values once it is back`);
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/**
 * Whether `e` says a coordination service hosted by the chief (the embedded backend's) is gone: no answer
 * (unreachable, or a call it did not answer within its deadline: a frozen chief), or a new
 * instance. Decided on its failure, never its words.
 */
export const isServiceGone = (e: unknown): boolean =>
  (e instanceof UnavailableError || e instanceof DeadlineExceededError) && e.failure?.kind === "serviceGone" && servedByChief(e.failure.backend);

/**
 * Whether `e`, from the coordination service, means the chief (`chief`) is gone: a new
 * generation (AbortedError), the embedded service it hosts unreachable or replaced, or the chief
 * alone declared failed. Decided on the error's {@link ClusterFailure}, never on its words.
 */
export const isChiefLoss = (e: unknown, chief: string): boolean => {
  if (e instanceof AbortedError) return true;
  if (isServiceGone(e)) return true;
  if (!(e instanceof UnavailableError)) return false;
  const f = e.failure;
  return f?.kind === "declaredFailed" && f.tasks.length === 1 && f.tasks[0] === chief;
};

/** `Name: first line of the message`. */
export const describe = (e: unknown): string => (e instanceof Error ? `${e.name}: ${e.message.split("\n")[0] ?? ""}` : String(e));

const asOpError = (e: unknown): OpError => (e instanceof OpError ? e : new UnknownError(String(e)));
