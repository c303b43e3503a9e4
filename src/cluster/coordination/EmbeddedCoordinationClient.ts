/**
 * A task's client of the embedded coordination service ({@link EmbeddedCoordinationService}),
 * over any transport that carries its request/response API: the service object itself
 * ({@link inProcessTransport}), a `MessagePort` (`portTransport`), or gRPC to the chief's `Server`
 * (`grpcCoordinationTransport`).
 *
 * @example
 * ```ts
 * import { EmbeddedCoordinationClient, EmbeddedCoordinationService, inProcessTransport, taskName } from "monitored-session/cluster";
 *
 * const service = new EmbeddedCoordinationService();
 * const tasks = [taskName("chief", 0), taskName("worker", 0)];
 * const chief = new EmbeddedCoordinationClient(inProcessTransport(service), { task: tasks[0]!, tasks, isChief: true });
 * const worker = new EmbeddedCoordinationClient(inProcessTransport(service), { task: tasks[1]!, tasks, isChief: false });
 * await Promise.all([chief.connect(), worker.connect()]);
 * await chief.insert("ready", "1");
 * console.log(await worker.get("ready")); // "1"
 * await Promise.all([chief.shutdown(), worker.shutdown()]);
 * service.close();
 * ```
 *
 * @module
 */

import type { MessagePort } from "node:worker_threads";
import { systemClock, type Clock, type TimerHandle } from "../../time/Clock.js";
import { FailedPreconditionError, type OpError } from "../../errors.js";
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
import type { CallerIdentity, CoordinationServiceApi, EmbeddedCoordinationService } from "./EmbeddedCoordinationService.js";
import { HeartbeatWorker } from "./HeartbeatWorker.js";
import { ErrorLatch } from "./ErrorLatch.js";
import { checkKey, processIncarnationId } from "./identity.js";
import { openServicePort } from "./portTransport.js";
import { copyError, toStatus } from "./status.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** How a client reaches the embedded service. */
export interface EmbeddedTransport {
  readonly api: CoordinationServiceApi;
  /** A port onto the same service for the heartbeat thread (see `servePort`). */
  openPort(): Promise<MessagePort>;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** The service object itself as a transport (same thread; heartbeats through a port). */
export const inProcessTransport = (service: EmbeddedCoordinationService): EmbeddedTransport => ({
  api: service,
  openPort: () => Promise.resolve(openServicePort(service)),
});

/** One task's client of the embedded service. */
export class EmbeddedCoordinationClient implements CoordinationClient {
  readonly task: string;
  readonly incarnation: string;
  readonly timeouts: CoordinationTimeouts;
  private readonly tasks: readonly string[];
  private readonly isChief: boolean;
  private readonly heartbeats: "thread" | "inline";
  private readonly clock: Clock;
  private identity: CallerIdentity | undefined;
  /** The identity of the last registration (kept across `connect()`): what a final report is sent with. */
  private lastIdentity: CallerIdentity | undefined;
  /** The highest generation this client registered in, with any service instance. */
  private lastGeneration = 0;
  private readonly failure = new ErrorLatch();
  private worker: HeartbeatWorker | undefined;
  /** The current heartbeat thread's token (its errors are ignored once it is replaced). */
  private thread: object | undefined;
  private inlineTimer: TimerHandle | undefined;
  /**
   * Set while this task's shutdown call is under way: the service has recorded the task as left,
   * so a heartbeat that reaches it then is answered "has shut down" (AbortedError). That answer is
   * expected, not a failure; a failure of the cluster during the barrier comes back on the
   * shutdown call itself.
   */
  private leaving = false;

  constructor(
    private readonly transport: EmbeddedTransport,
    options: CoordinationClientOptions,
  ) {
    this.task = options.task;
    this.tasks = [...options.tasks];
    this.isChief = options.isChief;
    this.incarnation = options.incarnation ?? processIncarnationId;
    this.heartbeats = options.heartbeats ?? "thread";
    this.clock = options.clock ?? systemClock;
    this.timeouts = resolveCoordinationTimeouts(options.timeouts);
  }

  get generation(): number | undefined {
    return this.identity?.generation;
  }

  async connect(options: ConnectOptions = {}): Promise<void> {
    await this.stopHeartbeats();
    this.identity = undefined;
    this.failure.reset();
    // The heartbeat path (the port, and the thread that beats on it) is ready before the task
    // registers: the service expects the first heartbeat within the heartbeat timeout of the
    // registration, and starting a thread (one that loads a gRPC client, say) can take seconds
    // on a loaded machine.
    const worker = this.heartbeats === "thread" ? await this.startHeartbeatThread() : undefined;
    this.worker = worker;
    let registered: { generation: number; serviceId: string };
    try {
      registered = await this.transport.api.register({
        task: this.task,
        incarnation: this.incarnation,
        isChief: this.isChief,
        tasks: this.tasks,
        timeoutMs: this.timeouts.registrationTimeoutMs,
        lastGeneration: this.lastGeneration,
        ...(options.unreachableTimeoutMs === undefined ? {} : { unreachableTimeoutMs: options.unreachableTimeoutMs }),
      });
    } catch (e) {
      await this.stopHeartbeats();
      throw e;
    }
    const identity: CallerIdentity = { task: this.task, incarnation: this.incarnation, generation: registered.generation, serviceId: registered.serviceId };
    this.identity = identity;
    this.lastIdentity = identity;
    this.lastGeneration = Math.max(this.lastGeneration, registered.generation);
    if (worker !== undefined) worker.begin(identity);
    else this.beatInline(identity);
  }

  async insert(key: string, value: string): Promise<void> {
    checkKey(key);
    return this.call((id) => this.transport.api.insert({ ...id, key, value }));
  }

  async get(key: string, options: WaitOptions = {}): Promise<string> {
    checkKey(key);
    const timeoutMs = options.timeoutMs ?? this.timeouts.getTimeoutMs;
    return this.call((id) => this.transport.api.get({ ...id, key, timeoutMs }));
  }

  async tryGet(key: string): Promise<string | undefined> {
    checkKey(key);
    return this.call((id) => this.transport.api.tryGet({ ...id, key }));
  }

  async delete(key: string): Promise<void> {
    checkKey(key);
    return this.call((id) => this.transport.api.delete({ ...id, key }));
  }

  async listDir(dir: string): Promise<KeyValue[]> {
    checkKey(dir, "directory");
    return this.call((id) => this.transport.api.listDir({ ...id, dir }));
  }

  barrier(id: string, options: BarrierOptions = {}): Promise<void> {
    const tasks = [...(options.tasks ?? this.tasks)];
    const timeoutMs = options.timeoutMs ?? this.timeouts.barrierTimeoutMs;
    return this.call((me) => this.transport.api.barrier({ ...me, id, tasks, timeoutMs }));
  }

  reportErrorToCluster(error: Error, options: ReportOptions = {}): Promise<void> {
    if (options.final === true) {
      // Between generations (registering again) the client has no current identity: the
      // service takes a final report from the last one, and the latch is not in the way.
      const identity = this.identity ?? this.lastIdentity;
      if (identity === undefined) {
        return Promise.reject(new FailedPreconditionError(`coordination client of task ${this.task} never registered: it has no cluster to report to`));
      }
      return this.transport.api.reportError({ ...identity, status: toStatus(error), final: true });
    }
    return this.call((id) => this.transport.api.reportError({ ...id, status: toStatus(error) }));
  }

  async shutdown(): Promise<void> {
    try {
      await this.call((id) => {
        this.leaving = true;
        return this.transport.api.shutdown({ ...id, timeoutMs: this.timeouts.shutdownTimeoutMs });
      });
    } finally {
      await this.close();
      this.leaving = false;
    }
  }

  async close(): Promise<void> {
    this.identity = undefined;
    await this.stopHeartbeats();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  // -------------------------------------------------------------------------------------------
  // utils
  // -------------------------------------------------------------------------------------------

  /** Runs a request as this task; a heartbeat failure rejects it at once. */
  private call<T>(request: (identity: CallerIdentity) => Promise<T>): Promise<T> {
    const latched = this.failure.current;
    if (latched !== undefined) return Promise.reject(copyError(latched));
    const identity = this.identity;
    if (identity === undefined) {
      return Promise.reject(
        new FailedPreconditionError(`coordination client of task ${this.task} is not connected: call connect() first`),
      );
    }
    return this.failure.race(request(identity));
  }

  private onHeartbeatError(error: OpError): void {
    if (this.identity !== undefined && !this.leaving) this.failure.set(error);
  }

  private async startHeartbeatThread(): Promise<HeartbeatWorker> {
    const port = await this.transport.openPort();
    // The thread's errors count from its start (even before it begins beating), until the
    // next connect() or close() replaces it.
    const thread = {};
    this.thread = thread;
    const onError = (e: OpError): void => {
      if (this.thread === thread && !this.leaving) this.failure.set(e);
    };
    try {
      return await HeartbeatWorker.embedded(port, this.timeouts.heartbeatIntervalMs, onError);
    } catch (e) {
      port.close();
      throw e;
    }
  }

  private beatInline(identity: CallerIdentity): void {
    const intervalMs = this.timeouts.heartbeatIntervalMs;
    const beat = (): void => {
      this.inlineTimer = this.clock.setTimer(intervalMs, () => {
        this.transport.api.heartbeat(identity).then(
          () => {
            if (this.identity === identity) beat();
          },
          (e: unknown) => this.onHeartbeatError(copyError(e)),
        );
      });
    };
    beat();
  }

  private async stopHeartbeats(): Promise<void> {
    this.thread = undefined;
    this.inlineTimer?.cancel();
    this.inlineTimer = undefined;
    const worker = this.worker;
    this.worker = undefined;
    await worker?.stop();
  }
}
