/**
 * The embedded coordination service: all coordination state of a cluster in one object, in the
 * process that hosts it (the chief's `Server`, or any process in tests). Tasks reach it through
 * the request/response API {@link CoordinationServiceApi}, which carries only structured-clone
 * data, so the same object serves an in-process client, a `MessagePort` (another thread, see
 * `servePort`) or one RPC per method of a gRPC server.
 *
 * Its state is not persisted: when the host stops, every key is lost and clients get
 * `UnavailableError` (the service id they registered with is gone). The generation counter
 * goes on all the same: the tasks that register again report the highest generation they
 * saw, and the new service numbers its generation above it.
 *
 * @module
 */

import { systemClock, type Clock, type TimerHandle } from "../../time/Clock.js";
import {
  AbortedError,
  type ClusterFailure,
  AlreadyExistsError,
  DeadlineExceededError,
  ErrorCode,
  InvalidArgumentError,
  type OpError,
  UnavailableError,
} from "../../errors.js";
import type { KeyValue } from "./CoordinationClient.js";
import { defaultCoordinationTimeouts } from "./CoordinationConfig.js";
import { newIncarnation } from "./identity.js";
import { copyError, EMBEDDED_SERVICE_GONE, fromStatus, reportedStatus, type Status } from "./status.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Who calls: every request after `register` carries it. */
export interface CallerIdentity {
  readonly task: string;
  readonly incarnation: string;
  readonly generation: number;
  /** The id of the service instance the task registered with. */
  readonly serviceId: string;
}

/** A registration. */
export interface RegisterRequest {
  readonly task: string;
  readonly incarnation: string;
  readonly isChief: boolean;
  /** Every task of the cluster. */
  readonly tasks: readonly string[];
  /** How long to wait for the chief's generation and for every task to register. */
  readonly timeoutMs: number;
  /** A transport's bound on trying while nobody answers (see `ConnectOptions`); the service ignores it. */
  readonly unreachableTimeoutMs?: number;
  /**
   * The highest generation this task registered in before, with any service (0 or absent:
   * none). The generation being registered is numbered above it.
   */
  readonly lastGeneration?: number;
}

/** What a registration returns: the identity to send with every later request. */
export interface RegisterResponse {
  readonly generation: number;
  readonly serviceId: string;
}

/**
 * The service's methods as plain requests and responses (structured-clone data only). Errors
 * are the project's error classes; a transport carries them as a `Status`.
 */
export interface CoordinationServiceApi {
  register(req: RegisterRequest): Promise<RegisterResponse>;
  heartbeat(req: CallerIdentity): Promise<void>;
  insert(req: CallerIdentity & { readonly key: string; readonly value: string }): Promise<void>;
  get(req: CallerIdentity & { readonly key: string; readonly timeoutMs: number }): Promise<string>;
  tryGet(req: CallerIdentity & { readonly key: string }): Promise<string | undefined>;
  delete(req: CallerIdentity & { readonly key: string }): Promise<void>;
  listDir(req: CallerIdentity & { readonly dir: string }): Promise<KeyValue[]>;
  barrier(
    req: CallerIdentity & { readonly id: string; readonly tasks: readonly string[]; readonly timeoutMs: number },
  ): Promise<void>;
  /** `final`: see {@link ReportOptions.final}; taken from the task's last registration, in any generation. */
  reportError(req: CallerIdentity & { readonly status: Status; readonly final?: boolean }): Promise<void>;
  shutdown(req: CallerIdentity & { readonly timeoutMs: number }): Promise<void>;
}

/** Options of {@link EmbeddedCoordinationService}. */
export interface EmbeddedCoordinationServiceOptions {
  /** A task silent for this long is declared failed (default 10 s, TensorFlow's). */
  readonly heartbeatTimeoutMs?: number;
  /** How often heartbeats are checked (default 1 s, TensorFlow's, or a quarter of the timeout if less). */
  readonly stalenessCheckMs?: number;
  /**
   * A staleness check later than this (default a quarter of `stalenessCheckMs`) means the
   * service's own thread was stalled: the lateness is added to every task's deadline.
   */
  readonly stallToleranceMs?: number;
  readonly clock?: Clock;
  /**
   * The backend whose service this is, named in its `serviceGone` failures (default
   * `embedded`; the memory backend's says `memory`, whose loss is not its chief's).
   */
  readonly backend?: string;
}

interface Pending {
  /** The task whose call waits. */
  readonly task: string;
  reject(error: OpError): void;
}

interface Registration {
  readonly incarnation: string;
  lastHeartbeatMs: number;
  left: boolean;
}

interface Barrier {
  readonly tasks: readonly string[];
  readonly arrived: Set<string>;
  readonly first: string;
  readonly waiters: Set<{ resolve(): void; reject(e: OpError): void }>;
  timer: TimerHandle | undefined;
  outcome: Status | "ok" | undefined;
}

interface Generation {
  /** Raised while tasks register (see `register`); fixed once every task registered. */
  number: number;
  readonly tasks: readonly string[];
  readonly registered: Map<string, Registration>;
  readonly kv: Map<string, string>;
  readonly keyWaiters: Map<string, Set<(value: string) => void>>;
  readonly registrationWaiters: Set<() => void>;
  readonly barriers: Map<string, Barrier>;
  readonly pending: Set<Pending>;
  error: OpError | undefined;
}

const SHUTDOWN_BARRIER = "monitored-session/shutdown";

/**
 * Event-loop turns the staleness check lets pass before it declares a task failed: a heartbeat
 * read from a socket reaches the service after a few callbacks (HTTP/2 frames, then the handler).
 */
const DRAIN_TURNS = 3;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * The in-memory coordination service. Start one per cluster (in the chief), hand each task a
 * client (`EmbeddedCoordinationClient`), and `close()` it when the host stops.
 */
export class EmbeddedCoordinationService implements CoordinationServiceApi {
  /** This instance's id: a client of an older instance gets `UnavailableError`. */
  readonly serviceId = newIncarnation();
  readonly heartbeatTimeoutMs: number;
  private readonly clock: Clock;
  private readonly checkMs: number;
  private readonly stallToleranceMs: number;
  private current: Generation | undefined;
  private lastNumber = 0;
  private closed = false;
  private readonly chiefWaiters = new Set<() => void>();
  private readonly leaveWaiters = new Set<() => void>();
  /** The report that ends the cluster for every generation (see {@link reportHostError} and a final `reportError`). */
  private finalReport: OpError | undefined;
  /** Each task's incarnation as it last registered, in any generation: who may send a final report. */
  private readonly incarnations = new Map<string, string>();
  /** The tasks answered with {@link finalReport}, and who waits for more of them. */
  private readonly told = new Set<string>();
  private readonly toldWaiters = new Set<() => void>();
  private checkTimer: TimerHandle | undefined;
  private nextCheckAt = 0;

  /** The failure of a call to this service once it is gone. */
  private readonly gone: ClusterFailure;

  constructor(options: EmbeddedCoordinationServiceOptions = {}) {
    this.gone = options.backend === undefined ? EMBEDDED_SERVICE_GONE : { kind: "serviceGone", backend: options.backend };
    this.clock = options.clock ?? systemClock;
    this.heartbeatTimeoutMs = options.heartbeatTimeoutMs ?? defaultCoordinationTimeouts.heartbeatTimeoutMs;
    this.checkMs = options.stalenessCheckMs ?? Math.min(1000, this.heartbeatTimeoutMs / 4);
    this.stallToleranceMs = options.stallToleranceMs ?? this.checkMs / 4;
    this.scheduleCheck();
  }

  /** The current generation's number (0 before the chief registered). */
  get generation(): number {
    return this.current?.number ?? 0;
  }

  async register(req: RegisterRequest): Promise<RegisterResponse> {
    this.checkOpen();
    this.checkFinal(req.task);
    if (!req.tasks.includes(req.task)) {
      throw new InvalidArgumentError(`task ${req.task} is not one of the cluster's tasks (${req.tasks.join(", ")})`);
    }
    const deadline = this.clock.now() + req.timeoutMs;
    if (req.isChief) this.startGeneration(req.tasks);
    else if (this.current === undefined) await this.waitForChief(req.task, req.timeoutMs);
    const g = this.current as Generation;
    if (g.tasks.join("\n") !== req.tasks.join("\n")) {
      throw new InvalidArgumentError(
        `task ${req.task} names the cluster's tasks as [${req.tasks.join(", ")}] but the chief named [${g.tasks.join(", ")}]`,
      );
    }
    // A restarted task is told so even when its generation has failed already (say its old
    // incarnation was declared failed): it waits for the next generation instead of exiting.
    const known = g.registered.get(req.task);
    if (known !== undefined && known.incarnation !== req.incarnation) {
      this.fail(
        g,
        new UnavailableError(
          `task ${req.task} restarted (incarnation ${known.incarnation} is gone, ${req.incarnation} registered); the cluster must restart`,
          { failure: { kind: "declaredFailed", tasks: [req.task] } },
        ),
      );
      throw new AbortedError(
        `task ${req.task} restarted (new incarnation ${req.incarnation}) in generation ${g.number}, where incarnation ${known.incarnation} was registered; it cannot rejoin silently`,
      );
    }
    if (g.error !== undefined) throw copyError(g.error);
    // Generations increase across chief restarts: a restarted chief's service starts counting
    // again, but the tasks that outlived it report the highest generation they saw.
    if (g.registered.size < g.tasks.length && (req.lastGeneration ?? 0) >= g.number) {
      g.number = (req.lastGeneration ?? 0) + 1;
      this.lastNumber = Math.max(this.lastNumber, g.number);
    }
    this.incarnations.set(req.task, req.incarnation);
    if (known === undefined) {
      g.registered.set(req.task, { incarnation: req.incarnation, lastHeartbeatMs: this.clock.now(), left: false });
      // The heartbeat deadlines start when the last task registers.
      if (g.registered.size === g.tasks.length) for (const r of g.registered.values()) r.lastHeartbeatMs = this.clock.now();
      for (const wake of [...g.registrationWaiters]) wake();
    } else {
      // The same process again (a reconnect): registering is a sign of life.
      known.lastHeartbeatMs = Math.max(known.lastHeartbeatMs, this.clock.now());
    }
    await this.waitFor(
      g,
      req.task,
      () => g.tasks.every((t) => g.registered.has(t)),
      g.registrationWaiters,
      deadline - this.clock.now(),
      () =>
        new DeadlineExceededError(
          `registration timed out after ${req.timeoutMs} ms: ${g.registered.size}/${g.tasks.length} tasks registered; missing: ${g.tasks.filter((t) => !g.registered.has(t)).join(", ")}`,
        ),
    );
    return { generation: g.number, serviceId: this.serviceId };
  }

  async heartbeat(req: CallerIdentity): Promise<void> {
    const r = this.check(req).registered.get(req.task) as Registration;
    r.lastHeartbeatMs = Math.max(r.lastHeartbeatMs, this.clock.now());
  }

  async insert(req: CallerIdentity & { key: string; value: string }): Promise<void> {
    const g = this.check(req);
    if (g.kv.has(req.key)) throw new AlreadyExistsError(`coordination key ${JSON.stringify(req.key)} already exists`);
    g.kv.set(req.key, req.value);
    const waiters = g.keyWaiters.get(req.key);
    g.keyWaiters.delete(req.key);
    for (const wake of waiters ?? []) wake(req.value);
  }

  async get(req: CallerIdentity & { key: string; timeoutMs: number }): Promise<string> {
    const g = this.check(req);
    const value = g.kv.get(req.key);
    if (value !== undefined) return value;
    return new Promise<string>((resolve, reject) => {
      let waiters = g.keyWaiters.get(req.key);
      if (waiters === undefined) g.keyWaiters.set(req.key, (waiters = new Set()));
      const onValue = (v: string): void => {
        settle();
        resolve(v);
      };
      const pending: Pending = {
        task: req.task,
        reject: (e) => {
          settle();
          reject(e);
        },
      };
      const timer = this.clock.setTimer(req.timeoutMs, () =>
        pending.reject(
          new DeadlineExceededError(
            `get of coordination key ${JSON.stringify(req.key)} timed out after ${req.timeoutMs} ms`,
          ),
        ),
      );
      const settle = (): void => {
        timer.cancel();
        waiters.delete(onValue);
        g.pending.delete(pending);
      };
      waiters.add(onValue);
      g.pending.add(pending);
    });
  }

  async tryGet(req: CallerIdentity & { key: string }): Promise<string | undefined> {
    return this.check(req).kv.get(req.key);
  }

  async delete(req: CallerIdentity & { key: string }): Promise<void> {
    const g = this.check(req);
    const dir = `${req.key}/`;
    for (const key of [...g.kv.keys()]) if (key === req.key || key.startsWith(dir)) g.kv.delete(key);
  }

  async listDir(req: CallerIdentity & { dir: string }): Promise<KeyValue[]> {
    const g = this.check(req);
    const dir = req.dir.endsWith("/") ? req.dir : `${req.dir}/`;
    return [...g.kv.entries()]
      .filter(([key]) => key.startsWith(dir))
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([key, value]) => ({ key, value }));
  }

  async barrier(req: CallerIdentity & { id: string; tasks: readonly string[]; timeoutMs: number }): Promise<void> {
    const g = this.check(req);
    return this.arrive(g, req.task, req.id, req.tasks, req.timeoutMs);
  }

  async reportError(req: CallerIdentity & { status: Status; final?: boolean }): Promise<void> {
    const reported = (): OpError => fromStatus(reportedStatus(req.status, req.task));
    if (req.final === true) return this.reportFinal(req, reported);
    const g = this.check(req);
    this.fail(g, reported());
  }

  /**
   * A final report (a task leaving for good, its client perhaps between generations): taken from
   * the task's incarnation as it last registered with this service, in any generation. Every
   * pending and later call, in any generation, raises it, as with the host's own final report.
   */
  private reportFinal(req: CallerIdentity, reported: () => OpError): void {
    this.checkOpen();
    if (req.serviceId !== this.serviceId) {
      throw new UnavailableError(`task ${req.task} registered with a coordination service that is gone (it restarted and lost its state); its report cannot be taken`, { failure: this.gone });
    }
    if (this.incarnations.get(req.task) !== req.incarnation) {
      throw new AbortedError(`task ${req.task} (incarnation ${req.incarnation}) is not registered with this coordination service; its report cannot be taken`);
    }
    // The first final report stands; the reporter knows it.
    this.finalReport ??= reported();
    this.markTold(req.task);
    if (this.current !== undefined) this.fail(this.current, this.finalReport);
  }

  /** Whether a final report (the host's or a task's) ends the cluster. */
  get hasFinalReport(): boolean {
    return this.finalReport !== undefined;
  }

  async shutdown(req: CallerIdentity & { timeoutMs: number }): Promise<void> {
    const g = this.check(req);
    const r = g.registered.get(req.task) as Registration;
    try {
      await this.arrive(g, req.task, SHUTDOWN_BARRIER, g.tasks, req.timeoutMs);
    } finally {
      r.left = true;
      this.wakeLeaveWaiters();
    }
  }

  /**
   * Waits until no task of the current generation is still in the cluster: every task passed
   * (or gave up on) the shutdown barrier, or the generation failed (a task declared failed, an
   * error reported), or the service closed. The host waits for this before it stops, so that a
   * task that finishes after the host (the chief) keeps its service.
   *
   * @returns the tasks still in the cluster after `timeoutMs` (empty when every task left).
   */
  waitUntilAllLeft(timeoutMs: number): Promise<readonly string[]> {
    return this.waitUntilNone(() => this.remaining(), this.leaveWaiters, timeoutMs);
  }

  /**
   * The host's own report, when its task's client has left (say a termination notice while it
   * waits for the others to leave): the current generation fails with `error`, so every task's
   * pending and next call raises it.
   */
  reportHostError(error: OpError, options: { readonly final?: boolean } = {}): void {
    // Final: also every later call, in any generation, raises it (the host is leaving while the
    // others are between generations: they must hear it when they register again).
    if (options.final === true) this.finalReport ??= error;
    if (this.current !== undefined) this.fail(this.current, error);
  }

  /**
   * Waits until every task of `tasks` was answered with the host's final report (see
   * {@link reportHostError}): a call of theirs it rejected, pending or new.
   *
   * @returns the tasks not told after `timeoutMs` (empty when every one was).
   */
  waitUntilTold(tasks: readonly string[], timeoutMs: number): Promise<readonly string[]> {
    return this.waitUntilNone(() => tasks.filter((t) => !this.told.has(t)), this.toldWaiters, timeoutMs);
  }

  /** Stops the service: every pending and later call fails with `UnavailableError`. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.checkTimer?.cancel();
    if (this.current !== undefined) this.fail(this.current, this.stoppedError());
    this.wakeLeaveWaiters();
  }

  // -------------------------------------------------------------------------------------------
  // utils
  // -------------------------------------------------------------------------------------------

  /**
   * Resolves with `[]` once `pending()` is empty (checked whenever a waiter of `waiters` is
   * woken), or with what it still holds after `timeoutMs`.
   */
  private waitUntilNone(pending: () => readonly string[], waiters: Set<() => void>, timeoutMs: number): Promise<readonly string[]> {
    if (pending().length === 0) return Promise.resolve([]);
    return new Promise<readonly string[]>((resolve) => {
      const wake = (): void => {
        if (pending().length > 0) return;
        settle();
        resolve([]);
      };
      const timer = this.clock.setTimer(Math.max(0, timeoutMs), () => {
        settle();
        resolve(pending());
      });
      const settle = (): void => {
        timer.cancel();
        waiters.delete(wake);
      };
      waiters.add(wake);
    });
  }

  /** The current generation's tasks that have not left (none once it failed or the service closed). */
  private remaining(): string[] {
    const g = this.current;
    if (this.closed || g === undefined || g.error !== undefined) return [];
    return g.tasks.filter((t) => g.registered.get(t)?.left !== true);
  }

  private wakeLeaveWaiters(): void {
    for (const wake of [...this.leaveWaiters]) wake();
  }

  private stoppedError(): UnavailableError {
    return new UnavailableError("the coordination service stopped (its host exited); its state is lost", { failure: this.gone });
  }

  private checkOpen(): void {
    if (this.closed) throw this.stoppedError();
  }

  /** Throws the host's final report, if any, to `task`, and counts it as told. */
  private checkFinal(task: string): void {
    if (this.finalReport === undefined) return;
    this.markTold(task);
    throw copyError(this.finalReport);
  }

  private markTold(task: string): void {
    this.told.add(task);
    for (const wake of [...this.toldWaiters]) wake();
  }

  /** The caller's generation, after checking who calls; throws the cluster's error if any. */
  private check(req: CallerIdentity): Generation {
    this.checkOpen();
    this.checkFinal(req.task);
    if (req.serviceId !== this.serviceId) {
      throw new UnavailableError(
        `task ${req.task} registered with a coordination service that is gone (it restarted and lost its state); connect again`,
        { failure: this.gone },
      );
    }
    const g = this.current;
    if (g === undefined || req.generation !== g.number) {
      throw new AbortedError(
        `task ${req.task} is in generation ${req.generation} but the cluster is in generation ${g?.number ?? 0} (the chief restarted); connect again`,
      );
    }
    const r = g.registered.get(req.task);
    if (r === undefined || r.incarnation !== req.incarnation) {
      throw new AbortedError(
        `task ${req.task} incarnation ${req.incarnation} is not the one registered in generation ${g.number}${r === undefined ? "" : ` (${r.incarnation})`}; connect again`,
      );
    }
    if (g.error !== undefined) throw copyError(g.error);
    if (r.left) throw new AbortedError(`task ${req.task} has shut down its coordination client`);
    return g;
  }

  private startGeneration(tasks: readonly string[]): void {
    const old = this.current;
    this.lastNumber += 1;
    this.current = {
      number: this.lastNumber,
      tasks: [...tasks],
      registered: new Map(),
      kv: new Map(),
      keyWaiters: new Map(),
      registrationWaiters: new Set(),
      barriers: new Map(),
      pending: new Set(),
      error: undefined,
    };
    if (old !== undefined) {
      this.fail(old, new AbortedError(`generation ${old.number} ended: the chief started a new generation; connect again`));
    }
    for (const wake of [...this.chiefWaiters]) wake();
  }

  private waitForChief(task: string, timeoutMs: number): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const wake = (): void => {
        timer.cancel();
        this.chiefWaiters.delete(wake);
        if (this.closed) reject(this.stoppedError());
        else resolve();
      };
      const timer = this.clock.setTimer(timeoutMs, () => {
        this.chiefWaiters.delete(wake);
        reject(new DeadlineExceededError(`task ${task} waited ${timeoutMs} ms for the chief to register; it did not`));
      });
      this.chiefWaiters.add(wake);
    });
  }

  /** Waits until `done()`, re-checked each time one of `wakers` fires, or fails on timeout. */
  private waitFor(
    g: Generation,
    task: string,
    done: () => boolean,
    wakers: Set<() => void>,
    timeoutMs: number,
    onTimeout: () => OpError,
  ): Promise<void> {
    if (done()) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const wake = (): void => {
        if (!done()) return;
        settle();
        resolve();
      };
      const pending: Pending = {
        task,
        reject: (e) => {
          settle();
          reject(e);
        },
      };
      const timer = this.clock.setTimer(Math.max(0, timeoutMs), () => pending.reject(onTimeout()));
      const settle = (): void => {
        timer.cancel();
        wakers.delete(wake);
        g.pending.delete(pending);
      };
      wakers.add(wake);
      g.pending.add(pending);
    });
  }

  private arrive(g: Generation, task: string, id: string, tasks: readonly string[], timeoutMs: number): Promise<void> {
    if (!tasks.includes(task)) {
      return Promise.reject(
        new InvalidArgumentError(`barrier ${JSON.stringify(id)}: task ${task} is not one of its tasks (${tasks.join(", ")})`),
      );
    }
    let b = g.barriers.get(id);
    if (b === undefined) {
      b = { tasks: [...tasks].sort(), arrived: new Set(), first: task, waiters: new Set(), timer: undefined, outcome: undefined };
      g.barriers.set(id, b);
      const barrier = b;
      barrier.timer = this.clock.setTimer(timeoutMs, () => {
        const stragglers = barrier.tasks.filter((t) => !barrier.arrived.has(t));
        this.settleBarrier(barrier, {
          code: ErrorCode.DEADLINE_EXCEEDED,
          message: `barrier ${JSON.stringify(id)} timed out after ${timeoutMs} ms: ${barrier.arrived.size}/${barrier.tasks.length} tasks arrived (first: ${barrier.first}); stragglers: ${stragglers.join(", ")}`,
        });
      });
    }
    const barrier = b;
    if (barrier.outcome !== undefined) {
      return barrier.outcome === "ok" ? Promise.resolve() : Promise.reject(fromStatus(barrier.outcome));
    }
    if ([...tasks].sort().join("\n") !== barrier.tasks.join("\n")) {
      const mismatch: Status = {
        code: ErrorCode.INVALID_ARGUMENT,
        message: `barrier ${JSON.stringify(id)}: task ${task} names tasks [${[...tasks].join(", ")}] but task ${barrier.first} named [${barrier.tasks.join(", ")}]`,
      };
      this.settleBarrier(barrier, mismatch);
      return Promise.reject(fromStatus(mismatch));
    }
    barrier.arrived.add(task);
    const result = new Promise<void>((resolve, reject) => {
      const waiter = {
        resolve: () => {
          g.pending.delete(pending);
          resolve();
        },
        reject: (e: OpError) => {
          g.pending.delete(pending);
          reject(e);
        },
      };
      const pending: Pending = {
        task,
        reject: (e) => {
          barrier.waiters.delete(waiter);
          waiter.reject(e);
        },
      };
      barrier.waiters.add(waiter);
      g.pending.add(pending);
    });
    if (barrier.arrived.size === barrier.tasks.length) this.settleBarrier(barrier, "ok");
    return result;
  }

  private settleBarrier(b: Barrier, outcome: Status | "ok"): void {
    if (b.outcome !== undefined) return;
    b.outcome = outcome;
    b.timer?.cancel();
    const waiters = [...b.waiters];
    b.waiters.clear();
    for (const w of waiters) {
      if (outcome === "ok") w.resolve();
      else w.reject(fromStatus(outcome));
    }
  }

  /** Puts the generation in error: every pending call fails now, every later call too. */
  private fail(g: Generation, error: OpError): void {
    if (g.error !== undefined) return;
    g.error = error;
    for (const b of g.barriers.values()) b.timer?.cancel();
    const pending = [...g.pending];
    g.pending.clear();
    for (const p of pending) {
      if (error === this.finalReport) this.markTold(p.task);
      p.reject(copyError(error));
    }
    this.wakeLeaveWaiters();
  }

  private scheduleCheck(): void {
    this.nextCheckAt = this.clock.now() + this.checkMs;
    this.checkTimer = this.clock.setTimer(this.checkMs, () => void this.checkHeartbeats());
  }

  /**
   * Credits the time this thread did not run since `expectedAt` to every task. A late tick
   * means the thread was blocked (a synchronous step, a save, a machine short of CPU): the
   * tasks' heartbeats may sit unread in its queue, so that time does not count against anyone.
   */
  private creditStall(expectedAt: number): void {
    const lateMs = this.clock.now() - expectedAt;
    const g = this.current;
    if (g === undefined || lateMs <= this.stallToleranceMs) return;
    for (const r of g.registered.values()) r.lastHeartbeatMs += lateMs;
  }

  /** The tasks of `g` silent for longer than the heartbeat timeout (none before all registered). */
  private stale(g: Generation): string[] {
    if (g.error !== undefined || g.registered.size < g.tasks.length) return [];
    const now = this.clock.now();
    return [...g.registered.entries()]
      .filter(([, r]) => !r.left && now - r.lastHeartbeatMs > this.heartbeatTimeoutMs)
      .map(([t]) => t);
  }

  private async checkHeartbeats(): Promise<void> {
    this.creditStall(this.nextCheckAt);
    const g = this.current;
    if (g !== undefined && this.stale(g).length > 0) {
      // Before any verdict, let the event loop read the heartbeats already received (they wait
      // behind this timer after a stall); a stall during that drain is credited too.
      const drainStart = this.clock.now();
      for (let i = 0; i < DRAIN_TURNS; i++) await this.yieldTurn();
      this.creditStall(drainStart);
      const names = this.closed || g !== this.current ? [] : this.stale(g);
      if (names.length > 0) {
        this.fail(
          g,
          new UnavailableError(
            `${names.length === 1 ? "task" : "tasks"} ${names.join(", ")} declared failed: no heartbeat within the heartbeat timeout (${this.heartbeatTimeoutMs} ms); failed, preempted or crashed`,
            { failure: { kind: "declaredFailed", tasks: names } },
          ),
        );
      }
    }
    if (!this.closed) this.scheduleCheck();
  }

  /** One full turn of the event loop (its I/O callbacks included). */
  private yieldTurn(): Promise<void> {
    return this.clock.yieldTurn?.() ?? new Promise<void>((resolve) => setImmediate(resolve));
  }
}
