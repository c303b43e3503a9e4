/**
 * How a started task of a cluster leaves (clusterRuntime.ts `startClusterTask`): its
 * {@link TaskExit} holds what the leaving shares with the rest of the task (whether it is
 * leaving, the report of a termination notice under way, whether its service drains, the rings
 * it built) and does the leaving once, by the first call's decision:
 *
 * - `finish(true)`: through the shutdown barrier, so that the others do not take this exit for a
 *   failure; a task that hosts the service then serves it until the others left (the drain).
 * - `finish(false)`: at once (the process is about to exit), after its report was sent and, on
 *   the host, after the others heard a final report the service holds.
 * - `untilErrorHeard()`: the host of a service that holds a final report (the cluster's error)
 *   keeps it up until the others heard it, then leaves.
 *
 * And {@link startBarrierOnce}: the start barrier, passed once per generation of the service.
 *
 * @module
 */

import type { CoordinationClient } from "../cluster/coordination/CoordinationClient.js";
import type { CoordinationHost } from "../cluster/coordination/backend.js";
import { CancelledError } from "../errors.js";
import type { Logger } from "../Logger.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What a {@link TaskExit} leaves: the task's coordination and server, and whom it tells. */
export interface TaskExitParts {
  /** `worker:1`, for the messages. */
  readonly name: string;
  /** This task's and every task's coordination name (`/job:worker/task:1`). */
  readonly me: string;
  readonly tasks: readonly string[];
  readonly client: CoordinationClient;
  /** Present when this task hosts the coordination service. */
  readonly host: CoordinationHost | undefined;
  /** Stops the task's server (and a service it hosts). */
  readonly stopServer: () => Promise<void>;
  /** How long the host serves the others after a clean exit (cluster.timeouts.drainTimeoutSecs). */
  readonly drainMs: number;
  /** How long the host waits for the others to hear a final report: three heartbeat timeouts. */
  readonly tellBoundMs: number;
  readonly logger: Logger;
}

/** Something the task ends when it leaves: a wait for a lost chief or rank, the parent watch. */
export interface Cancellable {
  cancel(reason: CancelledError): unknown;
}

/** A ring (a `TcpCollective`), or the group that owns one: closed once when the task leaves. */
export interface Closable {
  close(): Promise<unknown>;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** The leaving of one started task (see the module doc). */
export class TaskExit {
  private leavingNow = false;
  private drainingNow = false;
  /** The leaving under way: the first call decided how. */
  private closing: Promise<Error | undefined> | undefined;
  /** This task's report of its termination notice, while its call is under way (bounded by the call's deadline). */
  private reporting: Promise<void> | undefined;
  private readonly closables: Closable[] = [];
  /** The ring of the group's latest re-form, if it re-formed. */
  private ring: Closable | undefined;
  private readonly cancellables: Cancellable[] = [];
  /** The rank the group waits for, not waited for at the exit. */
  private lostRank: () => string | undefined = () => undefined;

  constructor(private readonly parts: TaskExitParts) {}

  /** The task leaves (or left): a failure heard now is the leaving's, not the cluster's. */
  get leaving(): boolean {
    return this.leavingNow;
  }

  /** The host serves the others after its own clean exit: its client is gone, it reports through the service. */
  get draining(): boolean {
    return this.drainingNow;
  }

  /** Closes `c` when the task leaves (every ring it built: the first, and a re-form's). */
  closeOnLeave(c: Closable | undefined): void {
    if (c !== undefined) this.closables.push(c);
  }

  /** The ring of the group's latest re-form: closed when the task leaves (the group closes the earlier ones). */
  ringFormed<R extends Closable>(ring: R): R {
    this.ring = ring;
    return ring;
  }

  /** Cancels `c` when the task leaves. */
  cancelOnLeave(c: Cancellable | undefined): void {
    if (c !== undefined) this.cancellables.push(c);
  }

  /** The lost rank a group waits for (not waited for to hear a report when this task leaves). */
  skipWhenTelling(lost: () => string | undefined): void {
    this.lostRank = lost;
  }

  /** A report of this task's notice is under way: a failing exit lets it finish first. */
  reported(sent: Promise<void>): void {
    this.reporting = sent;
  }

  /** Leaves once: the first call decides how (see the module doc); later calls are the first's. */
  finish(clean: boolean): Promise<Error | undefined> {
    return (this.closing ??= clean ? this.leaveCleanly() : this.leaveAtOnce());
  }

  /**
   * On the host of a service that holds a final report: waits (up to three heartbeat timeouts)
   * until the others heard it, then leaves. Elsewhere: nothing (the service goes on without this task).
   */
  async untilErrorHeard(): Promise<void> {
    const { host, tasks, me, tellBoundMs, logger, client, stopServer } = this.parts;
    if (host?.hasFinalReport() !== true) return;
    const untold = await host.waitUntilTold(
      tasks.filter((t) => t !== me),
      tellBoundMs,
    );
    if (untold.length > 0) logger.warn(`${untold.join(", ")} did not hear of the cluster's error within ${tellBoundMs / 1000} s; they learn of the chief's exit from the missing service.`);
    // The answers are on their way: the server stops once they are written (its stop grace).
    this.closing ??= (async () => {
      this.leavingNow = true;
      await client.close().catch(() => undefined);
      await stopServer().catch(() => undefined);
      return undefined;
    })();
    await this.closing;
  }

  /** What every leaving does first: stop watching, end the waits, close the rings. */
  private async beginLeaving(): Promise<void> {
    this.leavingNow = true;
    const reason = new CancelledError(`task ${this.parts.name} is leaving the cluster`);
    for (const c of this.cancellables) c.cancel(reason);
    // An open ring would keep the process alive after the task left. A ring closes once; a failed
    // group leaves its ring to this.
    await Promise.all([...this.closables, ...(this.ring === undefined ? [] : [this.ring])].map((c) => c.close().catch(() => undefined)));
  }

  /** The shutdown barrier, then the drain on the host; resolves with the barrier's error, if any. */
  private async leaveCleanly(): Promise<Error | undefined> {
    await this.beginLeaving();
    const { client, stopServer } = this.parts;
    let error: Error | undefined;
    try {
      await client.shutdown();
    } catch (e) {
      error = e instanceof Error ? e : new Error(String(e));
      await client.close().catch(() => undefined);
    }
    this.drainingNow = true;
    await this.drain(error !== undefined);
    await stopServer().catch(() => undefined);
    return error;
  }

  /** A failing or preempted task leaves at once: the others learn why from its report, or from its missing heartbeats. */
  private async leaveAtOnce(): Promise<undefined> {
    await this.beginLeaving();
    const { host, tasks, me, tellBoundMs, logger, client, stopServer } = this.parts;
    // The others learn of this task's notice from its report: let the call finish before the
    // client closes (a worker leaves right after its notice).
    await this.reporting;
    if (host?.hasFinalReport() === true) {
      // The others were between generations when the notice came (this task's, or another
      // rank's final report, whose sender counts as told): keep the service up until each
      // surviving rank has heard of it (they exit with the preemption code). A rank calls again
      // within seconds (it registers again, after starting its heartbeat thread, which takes
      // seconds on a loaded machine); three heartbeat timeouts bound the wait for one that froze
      // meanwhile. The lost rank is not waited for.
      const lost = this.lostRank();
      const others = tasks.filter((t) => t !== me && t !== lost);
      logger.info(`Telling ${others.length === 1 ? "the other task" : `the ${others.length} other tasks`} of the termination notice through the coordination service (up to ${tellBoundMs / 1000} s).`);
      const untold = await host.waitUntilTold(others, tellBoundMs);
      if (untold.length > 0) logger.warn(`${untold.join(", ")} did not hear of the termination notice within ${tellBoundMs / 1000} s; they learn of the chief's exit from the missing service.`);
    }
    void client.close().then(stopServer).catch(() => undefined);
    return undefined;
  }

  /** The host of the service keeps serving it, after a clean exit, until the others left. */
  private async drain(barrierFailed: boolean): Promise<void> {
    const { host, drainMs, logger } = this.parts;
    if (host === undefined) return;
    // After a passed shutdown barrier every task has left: nothing to wait for.
    if (barrierFailed) logger.info(`Serving the coordination service until every other task has left (up to ${drainMs / 1000} s, cluster.timeouts.drainTimeoutSecs).`);
    const left = await host.waitUntilAllLeft(drainMs);
    if (left.length > 0) logger.warn(`Stopping the coordination service after ${drainMs / 1000} s (cluster.timeouts.drainTimeoutSecs) with ${left.join(", ")} still in the cluster: they fail with UnavailableError.`);
  }
}

/**
 * The start barrier as `sessionsCreated` passes it: once per generation of the coordination
 * service (`run`, the session and a re-forming group's preemption handler may each call it; the
 * later calls in a generation are the first's), and again after a failed pass (a session's retry).
 * `pass` is one pass (the chief's publish, the barrier).
 */
export const startBarrierOnce = (client: Pick<CoordinationClient, "generation">, pass: () => Promise<void>): (() => Promise<void>) => {
  let passing: { readonly generation: number | undefined; readonly passed: Promise<void> } | undefined;
  return () => {
    const generation = client.generation;
    const earlier = passing;
    if (earlier !== undefined && generation !== undefined && earlier.generation === generation) return earlier.passed;
    const passed = pass();
    passing = { generation, passed };
    passed.catch(() => {
      if (passing?.passed === passed) passing = undefined;
    });
    return passed;
  };
};
