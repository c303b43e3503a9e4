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
 * @module
 */

import { createRequire } from "node:module";
import { noop } from "cockatiel";
import type { Etcd3, IKeyValue, Watcher } from "etcd3";
import { systemClock, type Clock } from "../../Clock.js";
import {
  AbortedError,
  AlreadyExistsError,
  CancelledError,
  DataLossError,
  DeadlineExceededError,
  ErrorCode,
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
import { type CoordinationTimeouts, etcdLeaseTtlSecs, resolveCoordinationTimeouts } from "./CoordinationConfig.js";
import { ErrorLatch } from "./ErrorLatch.js";
import { ETCD_LOST_FIX, HeartbeatWorker } from "./HeartbeatWorker.js";
import { checkKey, processIncarnationId } from "./identity.js";
import { copyError, decodeStatusJson, fromStatus, type Status, toStatus } from "./status.js";

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

type Outcome = { readonly ok: true } | Status;

/** A barrier's recorded success. */
const OK = "ok";

const SHUTDOWN_BARRIER = "monitored-session/shutdown";

/** The key (under the prefix) of the cluster's final report. */
const FINAL = "final";

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
  private readonly root: string;
  private readonly clock: Clock;
  private readonly etcd: Etcd3;
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
    this.timeouts = resolveCoordinationTimeouts(options.timeouts, "etcd");
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
    this.root = options.prefix ?? "monitored-session/";
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
      gen = await this.op(() => (this.isChief ? this.startGeneration() : this.waitForGeneration(deadline, options.unreachableTimeoutMs)));
      await this.op(() => this.claimTask(gen));
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
      await this.heartbeat.attach(this.genKey(gen, `alive/${enc(this.task)}`));
      const { revision } = await this.op(() => this.whileChiefAlive(gen, options.unreachableTimeoutMs, this.waitForAll(gen, "alive", deadline)));
      // Seeing every liveness key is not enough: the keys of a previous launch's tasks that died
      // less than a lease ago are still there. Only tasks that are alive now confirm that they
      // saw every other one, so a task that joined a dead launch waits here, until the new
      // chief's generation aborts the wait (it then registers there) or the registration times out.
      const confirmed = await this.op(() => this.etcd.put(this.genKey(gen, `ready/${enc(this.task)}`)).value(this.incarnation).exec());
      const { lateError } = await this.op(() => this.waitForAll(gen, "ready", deadline, confirmed.header.revision));
      await this.op(() => this.watchGeneration(gen, revision));
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
      if (!(await this.insertIfAbsent(this.genKey(gen, `kv/${key}`), value))) {
        throw new AlreadyExistsError(`coordination key ${JSON.stringify(key)} already exists`);
      }
    });
  }

  async get(key: string, options: WaitOptions = {}): Promise<string> {
    checkKey(key);
    const timeoutMs = options.timeoutMs ?? this.timeouts.getTimeoutMs;
    return this.call(async (gen) => {
      const full = this.genKey(gen, `kv/${key}`);
      const found = await this.waitUntil(full, false, timeoutMs, (kvs) => kvs.find((kv) => kv.key.toString() === full), () =>
        new DeadlineExceededError(`get of coordination key ${JSON.stringify(key)} timed out after ${timeoutMs} ms`),
      );
      return found.value.toString();
    });
  }

  async tryGet(key: string): Promise<string | undefined> {
    checkKey(key);
    return this.call(async (gen) => (await this.etcd.get(this.genKey(gen, `kv/${key}`)).string()) ?? undefined);
  }

  async delete(key: string): Promise<void> {
    checkKey(key);
    return this.call(async (gen) => {
      const full = this.genKey(gen, `kv/${key}`);
      await Promise.all([this.etcd.delete().key(full), this.etcd.delete().prefix(`${full}/`)]);
    });
  }

  async listDir(dir: string): Promise<KeyValue[]> {
    checkKey(dir, "directory");
    return this.call(async (gen) => {
      const base = this.genKey(gen, "kv/");
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
    return this.call((gen) => this.arrive(gen, id, tasks, timeoutMs));
  }

  /**
   * With `options.final`, the report also goes to the cluster's `final` key (see the module's
   * layout), sent from this task's last registration: it needs no current generation.
   */
  reportErrorToCluster(error: Error, options: ReportOptions = {}): Promise<void> {
    if (options.final === true) return this.reportFinal(error);
    return this.call(async (gen) => {
      const reported = this.reported(error);
      await this.insertIfAbsent(this.genKey(gen, "error"), JSON.stringify(reported));
      // Not raced: the error this call publishes may come back on the watch before its reply.
    }, false);
  }

  async shutdown(): Promise<void> {
    const gen = this.gen;
    try {
      await this.call((g) => this.arrive(g, SHUTDOWN_BARRIER, [...this.tasks].sort(), this.timeouts.shutdownTimeoutMs));
    } finally {
      if (gen !== undefined) await this.etcd.put(this.genKey(gen, `left/${enc(this.task)}`)).value(this.incarnation).catch(() => {});
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

  private genKey(gen: number, rest: string): string {
    return `${this.root}g/${gen}/${rest}`;
  }

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
        if (!(e instanceof loadEtcd3().GRPCUnavailableError)) throw new UnavailableError(`etcd (${this.hosts.join(", ")}) failed: ${message}`);
        since ??= this.clock.now();
        const waitedMs = this.clock.now() - since;
        if (waitedMs >= this.timeouts.heartbeatTimeoutMs) {
          throw new UnavailableError(
            `etcd (${this.hosts.join(", ")}) unreachable for ${waitedMs} ms (heartbeat timeout ${this.timeouts.heartbeatTimeoutMs} ms; ${message}): ${ETCD_LOST_FIX}`,
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
    if (!(e instanceof UnavailableError) || !e.message.startsWith("etcd (")) throw e;
    const stored = await this.etcd
      .get(this.genKey(gen, "error"))
      .exec()
      .then((r) => r.kvs[0], () => undefined);
    throw stored === undefined ? e : this.storedError(stored);
  }

  /** `error` as the status this task reports, naming it. */
  private reported(error: Error): Status {
    const status = toStatus(error);
    return { code: status.code, message: `${status.message} (reported by task ${this.task})` };
  }

  private async insertIfAbsent(key: string, value: string): Promise<boolean> {
    const r = await this.etcd.if(key, "Create", "==", 0).then(this.etcd.put(key).value(value)).commit();
    return r.succeeded;
  }

  private async startGeneration(): Promise<number> {
    const key = `${this.root}generation`;
    for (;;) {
      const r = await this.etcd.get(key).exec();
      const kv = r.kvs[0];
      const next = kv === undefined ? 1 : parseGeneration(kv) + 1;
      const txn = kv === undefined ? this.etcd.if(key, "Create", "==", 0) : this.etcd.if(key, "Mod", "==", kv.mod_revision);
      // A chief's first generation in its process is a new launch: an old launch's final report goes.
      const cleanup = this.firstGen === undefined ? [this.etcd.delete().key(`${this.root}${FINAL}`)] : [];
      const done = await txn
        .then(this.etcd.put(key).value(String(next)), this.etcd.delete().prefix(`${this.root}g/`), ...cleanup)
        .commit();
      if (done.succeeded) return next;
    }
  }

  /**
   * The chief's generation: the current one, or, for a task that registered before, the first
   * one newer than its last (the chief opens it). Meanwhile, with `unreachableTimeoutMs`, the
   * chief's liveness in the last generation is watched (see {@link watchChief}).
   */
  private async waitForGeneration(deadline: number, unreachableTimeoutMs: number | undefined): Promise<number> {
    const key = `${this.root}generation`;
    const after = this.lastGen ?? 0;
    const timeoutMs = deadline - this.clock.now();
    const found = this.waitUntil(
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
    const chiefGone = this.watchChief(gen, unreachableTimeoutMs);
    try {
      return await chiefGone.race(work);
    } finally {
      chiefGone.stop();
    }
  }

  /**
   * Watches the chief's liveness key in generation `gen` (the chief records its name there as
   * `g/<gen>/chief` when it claims its task): the returned latch is set to `UnavailableError`
   * naming the chief, while `gen` is still the current generation (a chief that opened a newer
   * one is alive), once its key was deleted (its lease expired), or once the key has not been
   * there for `timeoutMs` since the watch started (it never attached one). `stop()` ends the
   * watch.
   */
  private watchChief(gen: number, timeoutMs: number): ErrorLatch & { stop(): void } {
    const latch = new ErrorLatch();
    const stop = new AbortController();
    const base = this.genKey(gen, "");
    const generationKey = `${this.root}generation`;
    let timer: { cancel(): void } | undefined;
    let seen = false;
    let chief = "the chief";
    const onTimeout = (): void => {
      // A newer generation deleted this one's keys: the chief opened it, it is alive.
      void this.etcd
        .get(generationKey)
        .string()
        .then((current) => {
          if (stop.signal.aborted || Number(current) !== gen) return;
          latch.set(
            new UnavailableError(
              seen
                ? `task ${chief} declared failed: its liveness lease in generation ${gen} expired, no heartbeat within the heartbeat timeout; the replica group cannot re-form without its chief`
                : `task ${chief} declared failed: no liveness key of it in etcd for ${timeoutMs} ms in generation ${gen}; the replica group cannot re-form without its chief`,
            ),
          );
        }, () => undefined);
    };
    this.waitUntil(
      base,
      true,
      this.timeouts.registrationTimeoutMs + timeoutMs,
      (kvs) => {
        const name = kvs.find((kv) => kv.key.toString() === `${base}chief`)?.value.toString();
        if (name !== undefined) chief = name;
        const alive = name !== undefined && kvs.some((kv) => kv.key.toString() === `${base}alive/${enc(name)}`);
        if (alive) {
          seen = true;
          timer?.cancel();
          timer = undefined;
        } else if (seen) {
          onTimeout();
        } else {
          timer ??= this.clock.setTimer(timeoutMs, onTimeout);
        }
        return undefined;
      },
      () => new DeadlineExceededError(`watch of the chief's liveness in generation ${gen} ended`),
      stop.signal,
    ).catch(() => undefined);
    return Object.assign(latch, {
      stop: () => {
        timer?.cancel();
        stop.abort(new AbortedError("chief watch stopped"));
      },
    });
  }

  /** Sends `error` as this task's final report, from its current or last registration. */
  private async reportFinal(error: Error): Promise<void> {
    const gen = this.gen ?? this.lastGen;
    if (gen === undefined) {
      throw new FailedPreconditionError(`coordination client of task ${this.task} never registered: it has no generation to send a final report from`);
    }
    const reported = this.reported(error);
    await this.op(async () => {
      await this.insertIfAbsent(`${this.root}${FINAL}`, JSON.stringify({ ...reported, generation: gen }));
      // The tasks still in that generation hear it from their watch of it at once.
      await this.insertIfAbsent(this.genKey(gen, "error"), JSON.stringify(reported));
    });
  }

  /** Watches the cluster's final report (from this client's first registration on; never stopped before close). */
  private async watchFinal(): Promise<void> {
    const key = `${this.root}${FINAL}`;
    const heed = (kv: IKeyValue): void => {
      const text = kv.value.toString();
      let generation: unknown;
      try {
        generation = (JSON.parse(text) as { generation?: unknown }).generation;
      } catch {
        generation = undefined;
      }
      // A report from before this process's first registration belongs to an older launch.
      if (typeof generation !== "number" || this.firstGen === undefined || generation < this.firstGen) return;
      this.finalReport.set(this.storedError(kv));
    };
    const r = await this.etcd.get(key).exec();
    const w = await this.etcd.watch().key(key).startRevision(String(BigInt(r.header.revision) + 1n)).create();
    this.finalWatcher = w;
    w.on("error", () => {});
    w.on("put", heed);
    const kv = r.kvs[0];
    if (kv !== undefined) heed(kv);
  }

  /** Claims this task's name for this incarnation in `gen`; a different incarnation there is a restart. */
  private async claimTask(gen: number): Promise<void> {
    const key = this.genKey(gen, `tasks/${enc(this.task)}`);
    const claim = [this.etcd.put(key).value(this.incarnation), ...(this.isChief ? [this.etcd.put(this.genKey(gen, "chief")).value(this.task)] : [])];
    const r = await this.etcd
      .if(key, "Create", "==", 0)
      .then(...claim)
      .else(this.etcd.get(key))
      .commit();
    if (r.succeeded) return;
    const known = r.responses[0]?.response_range?.kvs[0]?.value.toString();
    if (known === undefined || known === this.incarnation) return;
    const gone: Status = {
      code: ErrorCode.UNAVAILABLE,
      message: `task ${this.task} restarted (incarnation ${known} is gone, ${this.incarnation} registered); the cluster must restart`,
    };
    await this.insertIfAbsent(this.genKey(gen, "error"), JSON.stringify(gone));
    throw new AbortedError(
      `task ${this.task} restarted (new incarnation ${this.incarnation}) in generation ${gen}, where incarnation ${known} was registered; it cannot rejoin silently`,
    );
  }

  /**
   * Waits until every task has a key under `g/<gen>/<dir>/`: `alive` (its liveness key) or
   * `ready` (it saw every liveness key; `confirmedAt` is the revision of this task's own ready
   * key). Returns the revision it saw them at, and the generation's error if it was recorded
   * after `confirmedAt`.
   */
  private async waitForAll(
    gen: number,
    dir: "alive" | "ready",
    deadline: number,
    confirmedAt = "0",
  ): Promise<{ revision: string; lateError: OpError | undefined }> {
    const prefix = this.genKey(gen, `${dir}/`);
    // The ready wait also reads the generation's error: a generation that failed before this task
    // confirmed never completes (a task that joins one waits for the next, as it does for a dead
    // launch's). An error recorded after it confirmed is this launch's: a peer that saw every
    // ready key first already reported it. Registration completes, and the error is raised by
    // this task's first call.
    const watched = dir === "alive" ? prefix : this.genKey(gen, "");
    const errorKey = this.genKey(gen, "error");
    const timeoutMs = deadline - this.clock.now();
    let revision = "0";
    let failed: OpError | undefined;
    let lateError: OpError | undefined;
    const missing = (kvs: IKeyValue[]): string[] => {
      const stored = kvs.find((kv) => kv.key.toString() === errorKey);
      const error = stored === undefined ? undefined : this.storedError(stored);
      const late = stored !== undefined && BigInt(stored.mod_revision) > BigInt(confirmedAt);
      failed = late ? undefined : error;
      lateError = late ? error : undefined;
      const present = new Set(
        kvs.filter((kv) => kv.key.toString().startsWith(prefix)).map((kv) => dec(kv.key.toString().slice(prefix.length))),
      );
      return this.tasks.filter((t) => !present.has(t));
    };
    let last: string[] = [...this.tasks];
    // A task of a new launch may have joined the previous launch's generation (its chief not
    // started yet): when the new chief starts its generation (deleting this one's keys), stop
    // waiting with AbortedError, so that the task registers again in the new generation.
    const stop = new AbortController();
    const generationKey = `${this.root}generation`;
    // Its own deadline comes after the registration's, which names the missing tasks.
    const superseded = this.waitUntil(
      generationKey,
      false,
      timeoutMs + this.timeouts.heartbeatTimeoutMs,
      (kvs) => {
        const kv = kvs.find((k) => k.key.toString() === generationKey);
        return kv === undefined || kv.value.toString() !== String(gen) ? true : undefined;
      },
      () => new DeadlineExceededError(`registration timed out after ${this.timeouts.registrationTimeoutMs} ms`),
      stop.signal,
    ).then(() => {
      throw this.superseded(gen);
    });
    const all = this.waitUntil(
      watched,
      true,
      timeoutMs,
      (kvs, rev) => {
        last = missing(kvs);
        revision = rev;
        return last.length === 0 && failed === undefined ? true : undefined;
      },
      () =>
        new DeadlineExceededError(
          dir === "alive"
            ? `registration timed out after ${this.timeouts.registrationTimeoutMs} ms: ${this.tasks.length - last.length}/${this.tasks.length} tasks registered; missing: ${last.join(", ")}`
            : failed !== undefined
              ? `registration timed out after ${this.timeouts.registrationTimeoutMs} ms: generation ${gen} had failed (${failed.message}) and no chief started a new one`
              : `registration timed out after ${this.timeouts.registrationTimeoutMs} ms in generation ${gen}: every task's liveness key was there, but ${last.join(", ")} never confirmed the registration (tasks of an earlier launch that died less than a heartbeat timeout ago, whose chief has not started a new generation)`,
        ),
      stop.signal,
    );
    // The loser is cancelled by the abort: its rejection is nobody's failure.
    superseded.catch(() => undefined);
    all.catch(() => undefined);
    try {
      await Promise.race([all, superseded]);
    } finally {
      stop.abort(new AbortedError("registration wait cancelled"));
    }
    return { revision, lateError };
  }

  /**
   * Watches the generation from `revision`: a peer's liveness key deleted without a `left/`
   * mark is a failure (published as the cluster's error), the cluster's error is latched, and
   * a newer generation (the chief restarted) aborts this one.
   */
  private async watchGeneration(gen: number, revision: string): Promise<void> {
    const base = this.genKey(gen, "");
    const next = String(BigInt(revision) + 1n);
    const latch = this.latchFor(this.epoch);
    const w = await this.etcd.watch().prefix(base).startRevision(next).create();
    const g = await this.etcd.watch().key(`${this.root}generation`).startRevision(next).create();
    this.watchers.push(w, g);
    w.on("error", () => {});
    g.on("error", () => {});
    w.on("put", (kv) => {
      if (kv.key.toString() === `${base}error`) latch(this.storedError(kv));
    });
    w.on("delete", (kv) => {
      const key = kv.key.toString();
      if (key.startsWith(`${base}alive/`)) void this.onAliveDeleted(gen, dec(key.slice(`${base}alive/`.length)), latch);
      else if (key.startsWith(`${base}tasks/`)) latch(this.superseded(gen));
    });
    g.on("put", (kv) => {
      if (Number(kv.value.toString()) !== gen) latch(this.superseded(gen));
    });
    // Keys deleted before the watch started (a peer that died while this task registered).
    const alive = await this.etcd.getAll().prefix(`${base}alive/`).keys();
    const aliveTasks = new Set(alive.map((k) => dec(k.slice(`${base}alive/`.length))));
    for (const t of this.tasks) if (!aliveTasks.has(t)) void this.onAliveDeleted(gen, t, latch);
  }

  /** The cluster's error as recorded in etcd (a malformed record is itself the error). */
  private storedError(kv: IKeyValue): OpError {
    try {
      return fromStatus(decodeStatusJson(kv.value.toString(), `etcd key ${kv.key.toString()}`));
    } catch (e) {
      return e as OpError;
    }
  }

  private superseded(gen: number): AbortedError {
    return new AbortedError(
      `generation ${gen} ended: the chief restarted and started a new generation; task ${this.task} must connect again`,
    );
  }

  /** Latches errors while the registration of `epoch` lasts. */
  private latchFor(epoch: number): (e: OpError) => void {
    return (e) => {
      if (this.epoch === epoch) this.failure.set(e);
    };
  }

  private async onAliveDeleted(gen: number, task: string, latch: (e: OpError) => void): Promise<void> {
    try {
      // A new generation deletes the old one's keys: that is not a failure of the task.
      const current = await this.etcd.get(`${this.root}generation`).string();
      if (Number(current) !== gen) return latch(this.superseded(gen));
      const left = await this.etcd.get(this.genKey(gen, `left/${enc(task)}`)).string();
      if (left !== null) return;
      const failed: Status = {
        code: ErrorCode.UNAVAILABLE,
        message: `task ${task} declared failed: its liveness lease expired, no heartbeat within the heartbeat timeout (${this.timeouts.heartbeatTimeoutMs} ms); failed, preempted or crashed`,
      };
      await this.insertIfAbsent(this.genKey(gen, "error"), JSON.stringify(failed));
      // The watch delivers the error; latch it here too in case it already fired.
      const stored = (await this.etcd.get(this.genKey(gen, "error")).exec()).kvs[0];
      if (stored !== undefined) latch(this.storedError(stored));
    } catch (e) {
      latch(new UnavailableError(`etcd (${this.hosts.join(", ")}) failed: ${e instanceof Error ? e.message : String(e)}`));
    }
  }

  /**
   * Reads `key` (or the prefix) and re-reads on every change until `test` gives a value, or
   * fails with `onTimeout()` after `timeoutMs`, or with the signal's reason when it aborts.
   */
  /** Ends every pending wait: a closed client leaves no etcd watch (and its socket) behind. */
  private abortWaits(): void {
    if (!this.closing.signal.aborted) this.closing.abort(new CancelledError(`the coordination client of task ${this.task} closed`));
  }

  private waitUntil<T>(
    key: string,
    isPrefix: boolean,
    timeoutMs: number,
    test: (kvs: IKeyValue[], revision: string) => T | undefined,
    onTimeout: () => OpError,
    given?: AbortSignal,
  ): Promise<T> {
    const signal = given === undefined ? this.closing.signal : AbortSignal.any([given, this.closing.signal]);
    return new Promise<T>((resolve, reject) => {
      if (signal.aborted) {
        reject(signal.reason);
        return;
      }
      let watcher: Watcher | undefined;
      let done = false;
      const onAbort = (): void => finish(() => reject(signal?.reason));
      const finish = (f: () => void): void => {
        if (done) return;
        done = true;
        timer.cancel();
        signal?.removeEventListener("abort", onAbort);
        void watcher?.cancel().catch(() => {});
        f();
      };
      const timer = this.clock.setTimer(Math.max(0, timeoutMs), () => finish(() => reject(onTimeout())));
      signal?.addEventListener("abort", onAbort, { once: true });
      const read = async (): Promise<string> => {
        const r = isPrefix ? await this.etcd.getAll().prefix(key).exec() : await this.etcd.get(key).exec();
        const v = test(r.kvs, r.header.revision);
        if (v !== undefined) finish(() => resolve(v));
        return r.header.revision;
      };
      const onChange = (): void => {
        read().catch((e: unknown) => finish(() => reject(e)));
      };
      read()
        .then(async (revision) => {
          if (done) return;
          const b = this.etcd.watch();
          const w = await (isPrefix ? b.prefix(key) : b.key(key)).startRevision(String(BigInt(revision) + 1n)).create();
          if (done) {
            void w.cancel().catch(() => {});
            return;
          }
          watcher = w;
          w.on("error", () => {});
          w.on("put", onChange);
          w.on("delete", onChange);
          onChange();
        })
        .catch((e: unknown) => finish(() => reject(e)));
    });
  }

  private async arrive(gen: number, id: string, tasks: readonly string[], timeoutMs: number): Promise<void> {
    if (!tasks.includes(this.task)) {
      throw new InvalidArgumentError(`barrier ${JSON.stringify(id)}: task ${this.task} is not one of its tasks (${tasks.join(", ")})`);
    }
    const base = this.genKey(gen, `barrier/${enc(id)}/`);
    const tasksJson = JSON.stringify(tasks);
    const claimed = await this.etcd
      .if(`${base}tasks`, "Create", "==", 0)
      .then(this.etcd.put(`${base}tasks`).value(tasksJson), this.etcd.put(`${base}first`).value(this.task))
      .else(this.etcd.get(`${base}tasks`))
      .commit();
    const known = claimed.succeeded ? tasksJson : claimed.responses[0]?.response_range?.kvs[0]?.value.toString();
    if (known !== tasksJson) {
      await this.insertIfAbsent(
        `${base}outcome`,
        JSON.stringify({
          code: ErrorCode.INVALID_ARGUMENT,
          message: `barrier ${JSON.stringify(id)}: task ${this.task} names tasks [${tasks.join(", ")}] but another task named ${known ?? "none"}`,
        } satisfies Status),
      );
    } else {
      await this.etcd.put(`${base}arrived/${enc(this.task)}`).value(this.incarnation);
    }
    const outcomeKey = `${base}outcome`;
    // The deadline runs from this task's arrival; at it, a `tick/` write wakes the waiter below,
    // which records the timeout (the first arrival's deadline comes first).
    let timedOut = false;
    const timer = this.clock.setTimer(timeoutMs, () => {
      timedOut = true;
      void this.etcd.put(`${base}tick/${enc(this.task)}`).value("1").catch(() => {});
    });
    const outcome = await this.waitUntil<Outcome>(
      base,
      true,
      timeoutMs + this.timeouts.heartbeatTimeoutMs,
      (kvs) => {
        const stored = kvs.find((kv) => kv.key.toString() === outcomeKey);
        if (stored !== undefined) {
          const text = stored.value.toString();
          return text === OK ? { ok: true } : decodeStatusJson(text, `etcd key ${outcomeKey}`);
        }
        const arrived = new Set(
          kvs.filter((kv) => kv.key.toString().startsWith(`${base}arrived/`)).map((kv) => dec(kv.key.toString().slice(`${base}arrived/`.length))),
        );
        const stragglers = tasks.filter((t) => !arrived.has(t));
        if (stragglers.length === 0) void this.insertIfAbsent(outcomeKey, OK);
        else if (timedOut) {
          const first = kvs.find((kv) => kv.key.toString() === `${base}first`)?.value.toString() ?? "?";
          void this.insertIfAbsent(
            outcomeKey,
            JSON.stringify({
              code: ErrorCode.DEADLINE_EXCEEDED,
              message: `barrier ${JSON.stringify(id)} timed out after ${timeoutMs} ms: ${arrived.size}/${tasks.length} tasks arrived (first: ${first}); stragglers: ${stragglers.join(", ")}`,
            } satisfies Status),
          );
        }
        return undefined;
      },
      () => new DeadlineExceededError(`barrier ${JSON.stringify(id)}: no outcome recorded in etcd within ${timeoutMs} ms`),
    ).finally(() => timer.cancel());
    if ("ok" in outcome) return;
    throw fromStatus(outcome);
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

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** The generation counter's value; anything but a positive integer is `DataLossError`. */
const parseGeneration = (kv: IKeyValue): number => {
  const text = kv.value.toString();
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 1) {
    throw new DataLossError(
      `etcd key ${kv.key.toString()}: expected a positive integer generation, got ${JSON.stringify(text.slice(0, 80))}; delete the key to start from 1`,
    );
  }
  return n;
};

/** A task name or barrier id as one key segment (task names hold "/"). */
const enc = (s: string): string => encodeURIComponent(s);
const dec = (s: string): string => decodeURIComponent(s);
