/**
 * The coordination service on etcd v3, for production clusters whose chief may itself restart:
 * the state lives in etcd, not in a task. Built on the `etcd3` client:
 * - liveness: each task's heartbeat thread keeps a lease alive with its `alive/<task>` key
 *   attached, and every task WATCHES its peers' keys, because the client itself reports a lost
 *   lease only after 2 × TTL. A deleted key of a task that did not shut down means it failed;
 * - insert-if-absent: a transaction on the key's create revision;
 * - blocking gets and barriers: watches from the revision of the read that missed;
 * - registration: every task's liveness key, then every task's `ready/` key (written once it saw
 *   the liveness keys), so that the unexpired keys of a dead launch's tasks never complete it.
 *
 * Layout under `prefix` (default `monitored-session/`):
 * - `generation`: the launch counter, incremented by the chief at `connect()` (kept forever);
 * - `g/<n>/...`: everything of launch n (keys, registrations, liveness, barriers, the cluster's
 *   error, the chief's name). The chief deletes every older `g/` at the start of a launch.
 * - `final`: a task's final report (`reportErrorToCluster(error, { final: true })`, a
 *   termination notice while its replica group re-forms), with the generation it was sent from;
 *   every client registered in that generation or earlier in this process raises it, in any
 *   generation. A chief's first `connect()` in its process deletes it.
 *
 * The layout and its codecs are in etcdKeys.ts, the etcd primitives (insert-if-absent, waits)
 * in etcdOps.ts, generations (opening one, claiming a task, the registration waits, the watch
 * of a generation) in etcdGenerations.ts, barriers in etcdBarriers.ts; this class is the
 * {@link CoordinationClient} on top of them.
 *
 * @module
 */

import { createRequire } from "node:module";
import { noop } from "cockatiel";
import type { Etcd3, IKeyValue, Watcher } from "etcd3";
import { systemClock, type Clock } from "../../time/Clock.js";
import {
  AbortedError,
  AlreadyExistsError,
  CancelledError,
  DeadlineExceededError,
  FailedPreconditionError,
  InvalidArgumentError,
  OpError,
  UnavailableError,
} from "../../errors.js";
import type {
  BarrierOptions,
  ConnectOptions,
  CoordinationClient,
  CoordinationClientOptions,
  KeyValue,
  ReportOptions,
  WaitOptions,
} from "./CoordinationClient.js";
import { type CoordinationTimeouts, resolveCoordinationTimeouts } from "./CoordinationConfig.js";
import { ETCD_HEARTBEAT_FLOOR, etcdLeaseTtlSecs } from "./etcdLease.js";
import { ErrorLatch } from "./ErrorLatch.js";
import { ETCD_LOST_FIX, HeartbeatWorker } from "./HeartbeatWorker.js";
import { checkKey, processIncarnationId } from "./identity.js";
import { copyError, ETCD_GONE, reportedStatus, type Status, toStatus } from "./status.js";
import { arrive, SHUTDOWN_BARRIER } from "./etcdBarriers.js";
import { claimTask, startGeneration, waitForAll, watchChief, watchGeneration } from "./etcdGenerations.js";
import { enc, EtcdKeys, finalReportGeneration, parseGeneration, storedError } from "./etcdKeys.js";
import { insertIfAbsent, waitUntil, type EtcdTaskContext } from "./etcdOps.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link EtcdCoordinationClient}. */
export interface EtcdCoordinationClientOptions extends CoordinationClientOptions {
  /** etcd endpoints, e.g. `["http://127.0.0.1:2379"]`. */
  readonly hosts: readonly string[];
  /** The key prefix of this cluster (default `monitored-session/`); one per cluster. */
  readonly prefix?: string;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

// Loaded on first use, so that users of the embedded backend do not load etcd3 and grpc-js.
const loadEtcd3 = (): typeof import("etcd3") => createRequire(import.meta.url)("etcd3") as typeof import("etcd3");

/** One task's client of the etcd backend. */
export class EtcdCoordinationClient implements CoordinationClient {
  readonly task: string;
  readonly incarnation: string;
  readonly timeouts: CoordinationTimeouts;
  private readonly tasks: readonly string[];
  private readonly isChief: boolean;
  private readonly hosts: readonly string[];
  private readonly keys: EtcdKeys;
  private readonly clock: Clock;
  private readonly etcd: Etcd3;
  /** What the generation and barrier protocols and the waits run with. */
  private readonly context: EtcdTaskContext;
  private readonly failure = new ErrorLatch();
  /** Aborted by `shutdown()` and `close()`: every wait still pending ends (its etcd watch cancelled) with CancelledError. */
  private readonly closing = new AbortController();
  /** A final report this client heeds (see the module's layout): never reset. */
  private readonly finalReport = new ErrorLatch();
  private finalWatcher: Watcher | undefined;
  private gen: number | undefined;
  /** The generation of this client's first and of its last completed registration. */
  private firstGen: number | undefined;
  private lastGen: number | undefined;
  private heartbeat: HeartbeatWorker | undefined;
  private watchers: Watcher[] = [];
  /** Bumped when liveness stops: callbacks of an older registration are ignored. */
  private epoch = 0;

  constructor(options: EtcdCoordinationClientOptions) {
    this.timeouts = resolveCoordinationTimeouts(options.timeouts, { name: "etcd", heartbeat: ETCD_HEARTBEAT_FLOOR });
    if (options.hosts.length === 0) {
      throw new InvalidArgumentError("etcd coordination backend: no endpoints; give hosts such as http://127.0.0.1:2379");
    }
    if ((options.heartbeats ?? "thread") !== "thread") {
      throw new InvalidArgumentError('etcd coordination backend: heartbeats run on a thread only (heartbeats: "thread")');
    }
    this.task = options.task;
    this.tasks = [...options.tasks];
    this.isChief = options.isChief;
    this.incarnation = options.incarnation ?? processIncarnationId;
    this.hosts = [...options.hosts];
    this.keys = new EtcdKeys(options.prefix ?? "monitored-session/");
    this.clock = options.clock ?? systemClock;
    const callTimeoutMs = this.timeouts.heartbeatTimeoutMs;
    const { Etcd3 } = loadEtcd3();
    this.etcd = new Etcd3({
      hosts: [...this.hosts],
      dialTimeout: callTimeoutMs,
      // Unary calls get a deadline; streams (watches) none. No circuit breaker: whether etcd is
      // lost is decided by the heartbeat timeout, not by three failed calls.
      defaultCallOptions: (ctx) => (ctx.isStream ? {} : { deadline: Date.now() + callTimeoutMs }),
      faultHandling: { host: () => noop, global: noop },
    });
    this.context = {
      etcd: this.etcd,
      keys: this.keys,
      clock: this.clock,
      closing: this.closing.signal,
      task: this.task,
      tasks: this.tasks,
      hosts: this.hosts,
      incarnation: this.incarnation,
      timeouts: this.timeouts,
    };
  }

  get generation(): number | undefined {
    return this.gen;
  }

  /**
   * Registers in the chief's generation. A task that registered before (it re-joins: its
   * replica group re-forms, or its chief restarted) waits for a generation newer than its last
   * one. With `options.unreachableTimeoutMs`, such a task gives up when the chief has had no
   * liveness key in etcd for that long (its lease expired, or it never attached one in its new
   * generation): the chief is gone.
   */
  async connect(options: ConnectOptions = {}): Promise<void> {
    await this.stopLiveness();
    this.gen = undefined;
    this.failure.reset();
    const registration = this.register(options, this.epoch);
    try {
      await this.finalReport.race(registration);
    } catch (e) {
      if (this.finalReport.current !== undefined) {
        // The registration goes on in the background until its next step sees it was cancelled.
        registration.catch(() => undefined);
        await this.stopLiveness();
      }
      throw e;
    }
  }

  private async register(options: ConnectOptions, epoch: number): Promise<void> {
    const deadline = this.clock.now() + this.timeouts.registrationTimeoutMs;
    // The heartbeat thread starts (and gets its lease) while this thread finds the generation
    // and claims the task's name: the two are independent, and the thread is the slower.
    const thread = HeartbeatWorker.etcd(
      {
        task: this.task,
        hosts: this.hosts,
        ttlSecs: etcdLeaseTtlSecs(this.timeouts.heartbeatTimeoutMs),
        incarnation: this.incarnation,
        intervalMs: this.timeouts.heartbeatIntervalMs,
        timeoutMs: this.timeouts.heartbeatTimeoutMs,
      },
      this.latchFor(this.epoch),
    );
    let gen: number;
    try {
      gen = await this.op(() => (this.isChief ? startGeneration(this.etcd, this.keys, this.firstGen === undefined) : this.waitForGeneration(deadline, options.unreachableTimeoutMs)));
      await this.op(() => claimTask(this.context, gen, this.isChief));
    } catch (e) {
      void thread.then((w) => w.stop(), () => undefined);
      throw e;
    }
    const worker = await thread;
    if (this.epoch !== epoch) {
      // Cancelled meanwhile (a final report): this registration's thread is nobody's.
      await worker.stop();
      throw new AbortedError(`registration of task ${this.task} cancelled`);
    }
    this.heartbeat = worker;
    try {
      await this.heartbeat.attach(this.keys.inGeneration(gen, `alive/${enc(this.task)}`));
      const { revision } = await this.op(() => this.whileChiefAlive(gen, options.unreachableTimeoutMs, waitForAll(this.context, gen, "alive", deadline)));
      // Seeing every liveness key is not enough: the keys of a previous launch's tasks that died
      // less than a lease ago are still there. Only tasks that are alive now confirm that they
      // saw every other one, so a task that joined a dead launch waits here, until the new
      // chief's generation aborts the wait (it then registers there) or the registration times out.
      const confirmed = await this.op(() => this.etcd.put(this.keys.inGeneration(gen, `ready/${enc(this.task)}`)).value(this.incarnation).exec());
      const { lateError } = await this.op(() => waitForAll(this.context, gen, "ready", deadline, confirmed.header.revision));
      await this.op(() => watchGeneration(this.context, gen, revision, this.latchFor(this.epoch), (...ws) => this.watchers.push(...ws)));
      // The watch would deliver it too, but maybe after this task's first call.
      if (lateError !== undefined) this.failure.set(lateError);
    } catch (e) {
      await this.stopLiveness();
      throw e;
    }
    if (this.epoch !== epoch) throw new AbortedError(`registration of task ${this.task} cancelled`);
    this.gen = gen;
    this.lastGen = gen;
    if (this.firstGen === undefined) {
      this.firstGen = gen;
      await this.op(() => this.watchFinal());
    }
  }

  async insert(key: string, value: string): Promise<void> {
    checkKey(key);
    return this.call(async (gen) => {
      if (!(await insertIfAbsent(this.etcd, this.keys.inGeneration(gen, `kv/${key}`), value))) {
        throw new AlreadyExistsError(`coordination key ${JSON.stringify(key)} already exists`);
      }
    });
  }

  async get(key: string, options: WaitOptions = {}): Promise<string> {
    checkKey(key);
    const timeoutMs = options.timeoutMs ?? this.timeouts.getTimeoutMs;
    return this.call(async (gen) => {
      const full = this.keys.inGeneration(gen, `kv/${key}`);
      const found = await waitUntil(this.context, full, false, timeoutMs, (kvs) => kvs.find((kv) => kv.key.toString() === full), () =>
        new DeadlineExceededError(`get of coordination key ${JSON.stringify(key)} timed out after ${timeoutMs} ms`),
      );
      return found.value.toString();
    });
  }

  async tryGet(key: string): Promise<string | undefined> {
    checkKey(key);
    return this.call(async (gen) => (await this.etcd.get(this.keys.inGeneration(gen, `kv/${key}`)).string()) ?? undefined);
  }

  async delete(key: string): Promise<void> {
    checkKey(key);
    return this.call(async (gen) => {
      const full = this.keys.inGeneration(gen, `kv/${key}`);
      await Promise.all([this.etcd.delete().key(full), this.etcd.delete().prefix(`${full}/`)]);
    });
  }

  async listDir(dir: string): Promise<KeyValue[]> {
    checkKey(dir, "directory");
    return this.call(async (gen) => {
      const base = this.keys.inGeneration(gen, "kv/");
      const prefix = `${base}${dir.endsWith("/") ? dir : `${dir}/`}`;
      const all = await this.etcd.getAll().prefix(prefix).strings();
      return Object.entries(all)
        .map(([key, value]) => ({ key: key.slice(base.length), value }))
        .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    });
  }

  barrier(id: string, options: BarrierOptions = {}): Promise<void> {
    const tasks = [...(options.tasks ?? this.tasks)].sort();
    const timeoutMs = options.timeoutMs ?? this.timeouts.barrierTimeoutMs;
    return this.call((gen) => arrive(this.context, gen, id, tasks, timeoutMs));
  }

  /**
   * With `options.final`, the report also goes to the cluster's `final` key (see the module's
   * layout), sent from this task's last registration: it needs no current generation.
   */
  reportErrorToCluster(error: Error, options: ReportOptions = {}): Promise<void> {
    if (options.final === true) return this.reportFinal(error);
    return this.call(async (gen) => {
      const reported = this.reported(error);
      await insertIfAbsent(this.etcd, this.keys.inGeneration(gen, "error"), JSON.stringify(reported));
      // Not raced: the error this call publishes may come back on the watch before its reply.
    }, false);
  }

  async shutdown(): Promise<void> {
    const gen = this.gen;
    try {
      await this.call((g) => arrive(this.context, g, SHUTDOWN_BARRIER, [...this.tasks].sort(), this.timeouts.shutdownTimeoutMs));
    } finally {
      if (gen !== undefined) await this.etcd.put(this.keys.inGeneration(gen, `left/${enc(this.task)}`)).value(this.incarnation).catch(() => {});
      await this.stopLiveness({ revoke: true });
      await this.finalWatcher?.cancel().catch(() => {});
      this.abortWaits();
      this.etcd.close();
    }
  }

  async close(): Promise<void> {
    this.abortWaits();
    await this.stopLiveness();
    await this.finalWatcher?.cancel().catch(() => {});
    this.etcd.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  // -------------------------------------------------------------------------------------------
  // utils
  // -------------------------------------------------------------------------------------------

  /**
   * Runs an etcd operation; a failure of etcd itself becomes `UnavailableError` naming etcd. An
   * etcd that is unreachable (restarting) is tried again, with backoff, until the heartbeat
   * timeout has passed since the first failure: a restart within the heartbeat timeout fails no
   * call, as it fails no lease. Past it, the error names etcd and the fix.
   */
  private async op<T>(f: () => Promise<T>): Promise<T> {
    let since: number | undefined;
    for (let backoffMs = 100; ; backoffMs = Math.min(2 * backoffMs, 1000)) {
      try {
        return await f();
      } catch (e) {
        if (e instanceof OpError) throw e;
        const message = e instanceof Error ? e.message : String(e);
        if (!(e instanceof loadEtcd3().GRPCUnavailableError)) throw new UnavailableError(`etcd (${this.hosts.join(", ")}) failed: ${message}`, { failure: ETCD_GONE });
        since ??= this.clock.now();
        const waitedMs = this.clock.now() - since;
        if (waitedMs >= this.timeouts.heartbeatTimeoutMs) {
          throw new UnavailableError(
            `etcd (${this.hosts.join(", ")}) unreachable for ${waitedMs} ms (heartbeat timeout ${this.timeouts.heartbeatTimeoutMs} ms; ${message}): ${ETCD_LOST_FIX}`,
            { failure: ETCD_GONE },
          );
        }
        // The cluster's error (the heartbeat thread's verdict on etcd, say) ends the retries.
        const latched = this.failure.current;
        if (latched !== undefined) throw copyError(latched);
        await this.clock.sleep(Math.min(backoffMs, this.timeouts.heartbeatTimeoutMs - waitedMs));
      }
    }
  }

  /** Runs a call as this task in its generation; the cluster's error rejects it at once. */
  private call<T>(f: (gen: number) => Promise<T>, raced = true): Promise<T> {
    const latched = this.finalReport.current ?? this.failure.current;
    if (latched !== undefined) return Promise.reject(copyError(latched));
    const gen = this.gen;
    if (gen === undefined) {
      return Promise.reject(
        new FailedPreconditionError(`coordination client of task ${this.task} is not connected: call connect() first`),
      );
    }
    const result = this.op(() => f(gen)).catch((e: unknown) => this.preferClusterError(gen, e));
    return raced ? this.finalReport.race(this.failure.race(result)) : result;
  }

  /**
   * A call that failed on etcd itself (a deadline that passed while this process was frozen,
   * say): the generation's recorded error, when there is one, is the cause (this task was
   * declared failed meanwhile), so it is raised instead; else `e`. One read, which may fail too.
   */
  private async preferClusterError(gen: number, e: unknown): Promise<never> {
    if (!(e instanceof UnavailableError) || e.failure?.kind !== "serviceGone") throw e;
    const stored = await this.etcd
      .get(this.keys.inGeneration(gen, "error"))
      .exec()
      .then((r) => r.kvs[0], () => undefined);
    throw stored === undefined ? e : storedError(stored);
  }

  /** `error` as the status this task reports, naming it. */
  private reported(error: Error): Status {
    return reportedStatus(toStatus(error), this.task);
  }

  /**
   * The chief's generation: the current one, or, for a task that registered before, the first
   * one newer than its last (the chief opens it). Meanwhile, with `unreachableTimeoutMs`, the
   * chief's liveness in the last generation is watched (see {@link watchChief}).
   */
  private async waitForGeneration(deadline: number, unreachableTimeoutMs: number | undefined): Promise<number> {
    const key = this.keys.generation;
    const after = this.lastGen ?? 0;
    const timeoutMs = deadline - this.clock.now();
    const found = waitUntil(
      this.context,
      key,
      false,
      timeoutMs,
      (kvs) => {
        const kv = kvs.find((k) => k.key.toString() === key);
        return kv !== undefined && parseGeneration(kv) > after ? kv : undefined;
      },
      () =>
        new DeadlineExceededError(
          after === 0
            ? `task ${this.task} waited ${timeoutMs} ms for the chief to register; it did not`
            : `task ${this.task} waited ${timeoutMs} ms for the chief to open a generation after ${after}; it did not`,
        ),
    );
    return parseGeneration(await this.whileChiefAlive(this.lastGen, unreachableTimeoutMs, found));
  }

  /**
   * `work`, or the chief's loss in generation `gen` (see {@link watchChief}) if that comes first:
   * for a task registering again with `unreachableTimeoutMs`; otherwise `work` alone.
   */
  private async whileChiefAlive<T>(gen: number | undefined, unreachableTimeoutMs: number | undefined, work: Promise<T>): Promise<T> {
    if (this.isChief || gen === undefined || this.lastGen === undefined || unreachableTimeoutMs === undefined) return work;
    const chiefGone = watchChief(this.context, gen, unreachableTimeoutMs);
    try {
      return await chiefGone.race(work);
    } finally {
      chiefGone.stop();
    }
  }

  /** Sends `error` as this task's final report, from its current or last registration. */
  private async reportFinal(error: Error): Promise<void> {
    const gen = this.gen ?? this.lastGen;
    if (gen === undefined) {
      throw new FailedPreconditionError(`coordination client of task ${this.task} never registered: it has no generation to send a final report from`);
    }
    const reported = this.reported(error);
    await this.op(async () => {
      await insertIfAbsent(this.etcd, this.keys.final, JSON.stringify({ ...reported, generation: gen }));
      // The tasks still in that generation hear it from their watch of it at once.
      await insertIfAbsent(this.etcd, this.keys.inGeneration(gen, "error"), JSON.stringify(reported));
    });
  }

  /** Watches the cluster's final report (from this client's first registration on; never stopped before close). */
  private async watchFinal(): Promise<void> {
    const key = this.keys.final;
    const heed = (kv: IKeyValue): void => {
      const generation = finalReportGeneration(kv);
      // A report from before this process's first registration belongs to an older launch.
      if (generation === undefined || this.firstGen === undefined || generation < this.firstGen) return;
      this.finalReport.set(storedError(kv));
    };
    const r = await this.etcd.get(key).exec();
    const w = await this.etcd.watch().key(key).startRevision(String(BigInt(r.header.revision) + 1n)).create();
    this.finalWatcher = w;
    w.on("error", () => {});
    w.on("put", heed);
    const kv = r.kvs[0];
    if (kv !== undefined) heed(kv);
  }

  /** Latches errors while the registration of `epoch` lasts. */
  private latchFor(epoch: number): (e: OpError) => void {
    return (e) => {
      if (this.epoch === epoch) this.failure.set(e);
    };
  }

  /** Ends every pending wait: a closed client leaves no etcd watch (and its socket) behind. */
  private abortWaits(): void {
    if (!this.closing.signal.aborted) this.closing.abort(new CancelledError(`the coordination client of task ${this.task} closed`));
  }

  private async stopLiveness(options: { revoke?: boolean } = {}): Promise<void> {
    this.epoch += 1;
    this.gen = undefined;
    const watchers = this.watchers;
    this.watchers = [];
    await Promise.all(watchers.map((w) => w.cancel().catch(() => {})));
    const hb = this.heartbeat;
    this.heartbeat = undefined;
    await hb?.stop(options);
  }
}
