/**
 * The chief's side of a `grpc://` session target: a {@link ModelPublisher} serves the chief's
 * model to the workers through the chief's {@link Server} (the `monitored_session.v1`
 * `ModelService`). It is a hook: after the chief's session is initialized or restored
 * (`afterCreateSession`, also after each recovery) it reports ready, and it hands out snapshots
 * of the global variables taken between two steps, so a worker never sees half a step.
 *
 * @example
 * ```ts
 * import { clusterSessionTargets, ModelPublisher, Server } from "monitored-session/cluster";
 * import { monitoredTrainingSession } from "monitored-session";
 *
 * const publisher = new ModelPublisher();
 * const server = new Server({ chief: ["localhost:2222"], worker: ["localhost:2223"] }, { jobName: "chief", services: [publisher.registration] });
 * await server.start();
 * // The chief's session publishes through the target's hooks; workers read it.
 * const session = await monitoredTrainingSession({ master: server.target, isChief: true, sessionTargets: clusterSessionTargets({ publisher }) });
 * ```
 *
 * @module
 */

import { crc32c } from "@node-rs/crc32";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter, type HandlerContext } from "@connectrpc/connect";
import { tensorBytes } from "../checkpoint/BundleFormat.js";
import { ValueError } from "../errors.js";
import { isPromiseLike } from "../util/promise.js";
import { defaultLogger, type Logger } from "../Logger.js";
import type { Session } from "../session/Session.js";
import type { HookEnv, SessionRunHook } from "../hook/SessionRunHook.js";
import type { TensorValue } from "../session/Tensor.js";
import {
  GetReadinessResponseSchema,
  GetVariablesResponseSchema,
  ModelService,
  type GetReadinessResponse,
  type GetVariablesRequest,
  type GetVariablesResponse,
} from "./proto/gen/monitored_session/v1/model_pb.js";
import { processIncarnation, type ServiceRegistration } from "./Server.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link ModelPublisher}. */
export interface ModelPublisherOptions {
  /** The chief's task name in readiness answers (default `/job:chief/replica:0/task:0`). */
  readonly taskName?: string | undefined;
  /** Default upper bound on one data chunk of a snapshot, in bytes (default 1 MiB; at most 4 MiB, gRPC's usual message limit). */
  readonly maxChunkBytes?: number | undefined;
  /**
   * Writes the publisher's lines until a session begins it as a hook (default: the process's
   * default logger); from `begin` on, they go to the session's logger, as every hook's do
   * (events on its `events$`).
   */
  readonly logger?: Logger | undefined;
  /** Called after each publish (the task runtime tells waiting workers through the coordination service). */
  readonly onPublished?: (() => void) | undefined;
}

/** One snapshot, encoded once and streamed to every worker that asked for it during the same step. */
interface EncodedSnapshot {
  readonly generation: bigint;
  readonly globalStep: bigint;
  readonly variables: readonly EncodedVariable[];
  readonly totalBytes: number;
}

interface EncodedVariable {
  readonly name: string;
  readonly value: TensorValue;
  readonly bytes: Uint8Array;
  readonly crc32c: number;
}

interface Waiter {
  resolve(s: EncodedSnapshot): void;
  reject(e: unknown): void;
}

const DEFAULT_CHUNK_BYTES = 1 << 20;
const MAX_CHUNK_BYTES = 4 << 20;
const MIN_CHUNK_BYTES = 1 << 10;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** Publishes the chief's model: readiness and consistent snapshots. See the module documentation. */
export class ModelPublisher implements SessionRunHook {
  readonly #taskName: string;
  readonly #maxChunkBytes: number;
  #logger: Logger;
  #session: Session | undefined;
  #notReady = "has not created its session yet";
  #generation = 0n;
  #globalStep = -1n;
  #inStep = false;
  /** The running step waits, having changed no variable (its replica group re-forms): snapshots are taken at once. */
  #stepWaits = false;
  #waiters: Waiter[] = [];
  readonly #onPublished: (() => void) | undefined;

  /** @throws ValueError for a `maxChunkBytes` outside 1 KiB..4 MiB. */
  constructor(options: ModelPublisherOptions = {}) {
    this.#taskName = options.taskName ?? "/job:chief/replica:0/task:0";
    this.#maxChunkBytes = chunkBytes(options.maxChunkBytes ?? DEFAULT_CHUNK_BYTES, "maxChunkBytes");
    this.#logger = options.logger ?? defaultLogger;
    this.#onPublished = options.onPublished;
  }

  /** Serves the `ModelService` on a server: pass it in `ServerOptions.services`. */
  readonly registration: ServiceRegistration = (router: ConnectRouter) => {
    router.service(ModelService, {
      getReadiness: () => this.readiness(),
      getVariables: (req, ctx) => this.#stream(req, ctx),
    });
  };

  // -------------------------------------------------------------------------------------------
  // operations
  // -------------------------------------------------------------------------------------------

  /** Whether a session is published, which one (`generation`), and the global step last seen. */
  readiness(): GetReadinessResponse {
    return create(GetReadinessResponseSchema, {
      ready: this.#session !== undefined,
      reason: this.#session === undefined ? this.#notReady : "",
      incarnation: processIncarnation,
      generation: this.#generation,
      globalStep: this.#globalStep,
      taskName: this.#taskName,
    });
  }

  /**
   * Publishes `session`, initialized or restored: workers may start from it. The hook calls this
   * after each creation; call it yourself where no hooks run (the `Supervisor`'s chief).
   */
  publish(session: Session): void {
    this.#session = session;
    this.#generation += 1n;
    this.#inStep = false;
    this.#logger.info(`${this.#taskName}: model published to the workers (session ${this.#generation})`);
    this.#flushWaiters();
    this.#onPublished?.();
  }

  /** Stops publishing: workers are told the chief is not ready, with `reason`. */
  unpublish(reason: string): void {
    this.#session = undefined;
    this.#notReady = reason;
    const waiters = this.#waiters.splice(0);
    for (const w of waiters) w.reject(new ConnectError(`the chief ${reason}`, Code.Unavailable));
  }

  /** Its lines are the session's from now on: whoever hands a hook its environment prints them. */
  begin(env: HookEnv): void {
    this.#logger = env.logger;
  }

  afterCreateSession(session: Session): void {
    this.publish(session);
  }

  beforeRun(): undefined {
    this.#inStep = true;
    return undefined;
  }

  afterRun(): void | Promise<void> {
    this.#inStep = false;
    return this.#waiters.length === 0 ? undefined : this.#flushWaiters();
  }

  end(): void {
    this.unpublish("has ended its session");
  }

  /**
   * Whether the running step waits without having changed a variable (a data-parallel chief whose
   * replica group re-forms its ring, waiting for a worker that asks for this model): snapshots are
   * then taken at once, not at the step's end, which waits for that worker.
   */
  stepWaits(waits: boolean): void {
    this.#stepWaits = waits;
    if (waits) void Promise.resolve(this.#flushWaiters()).catch(() => undefined);
  }

  // -------------------------------------------------------------------------------------------
  // internals
  // -------------------------------------------------------------------------------------------

  /** Takes a snapshot for the waiting calls now (a step boundary); the next step waits for an asynchronous store. */
  #flushWaiters(): void | Promise<void> {
    if (this.#waiters.length === 0) return undefined;
    const waiters = this.#waiters.splice(0);
    const settle = (s: EncodedSnapshot | undefined, e: unknown): void => {
      for (const w of waiters) (s === undefined ? w.reject(e) : w.resolve(s));
    };
    try {
      const s = this.#take();
      if (!isPromiseLike(s)) return settle(s, undefined);
      return s.then(
        (v) => settle(v, undefined),
        (e: unknown) => settle(undefined, e),
      );
    } catch (e) {
      return settle(undefined, e);
    }
  }

  /** A snapshot at a step boundary: now if no step is running, else at the end of the running one. */
  #snapshot(signal: AbortSignal): EncodedSnapshot | Promise<EncodedSnapshot> {
    if (this.#session === undefined) throw new ConnectError(`the chief ${this.#notReady}`, Code.Unavailable);
    if (!this.#inStep || this.#stepWaits) return this.#take();
    return new Promise<EncodedSnapshot>((resolve, reject) => {
      const waiter: Waiter = {
        resolve: (s) => {
          signal.removeEventListener("abort", onAbort);
          resolve(s);
        },
        reject: (e) => {
          signal.removeEventListener("abort", onAbort);
          reject(e);
        },
      };
      const onAbort = (): void => {
        this.#waiters = this.#waiters.filter((w) => w !== waiter);
        reject(ConnectError.from(signal.reason));
      };
      signal.addEventListener("abort", onAbort, { once: true });
      this.#waiters.push(waiter);
    });
  }

  /** Reads and encodes the published session's global variables. */
  #take(): EncodedSnapshot | Promise<EncodedSnapshot> {
    const session = this.#session;
    if (session === undefined) throw new ConnectError(`the chief ${this.#notReady}`, Code.Unavailable);
    const store = session.variables;
    if (store === undefined) {
      throw new ConnectError("the chief's session exposes no variables (session.variables is undefined)", Code.FailedPrecondition);
    }
    const generation = this.#generation;
    const encode = (values: ReadonlyMap<string, TensorValue>): EncodedSnapshot => {
      const s = encodeSnapshot(values, generation, session.globalStepName);
      if (generation === this.#generation) this.#globalStep = s.globalStep;
      return s;
    };
    let values: ReturnType<typeof store.snapshot>;
    try {
      values = store.snapshot("global");
    } catch (e) {
      throw snapshotFailed(e);
    }
    return isPromiseLike(values) ? values.then(encode, (e: unknown) => Promise.reject(snapshotFailed(e))) : encode(values);
  }

  async *#stream(req: GetVariablesRequest, ctx: HandlerContext): AsyncGenerator<GetVariablesResponse> {
    const chunk = req.maxChunkBytes === 0 ? this.#maxChunkBytes : Math.min(Math.max(req.maxChunkBytes, MIN_CHUNK_BYTES), MAX_CHUNK_BYTES);
    const s = await this.#snapshot(ctx.signal);
    yield create(GetVariablesResponseSchema, {
      part: {
        case: "header",
        value: {
          incarnation: processIncarnation,
          generation: s.generation,
          globalStep: s.globalStep,
          variableCount: s.variables.length,
          totalBytes: BigInt(s.totalBytes),
        },
      },
    });
    for (const v of s.variables) {
      yield create(GetVariablesResponseSchema, {
        part: {
          case: "variable",
          value: {
            name: v.name,
            dtype: v.value.dtype,
            shape: v.value.shape.map(BigInt),
            byteLength: BigInt(v.bytes.byteLength),
            crc32c: v.crc32c,
          },
        },
      });
      for (let at = 0; at < v.bytes.byteLength; at += chunk) {
        yield create(GetVariablesResponseSchema, { part: { case: "data", value: v.bytes.subarray(at, at + chunk) } });
      }
    }
    yield create(GetVariablesResponseSchema, {
      part: { case: "trailer", value: { variableCount: s.variables.length, totalBytes: BigInt(s.totalBytes) } },
    });
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const encodeSnapshot = (values: ReadonlyMap<string, TensorValue>, generation: bigint, globalStepName: string | undefined): EncodedSnapshot => {
  const variables: EncodedVariable[] = [];
  let totalBytes = 0;
  for (const [name, value] of values) {
    const bytes = tensorBytes(name, value);
    variables.push({ name, value, bytes, crc32c: crc32c(bytes) });
    totalBytes += bytes.byteLength;
  }
  const step = globalStepName === undefined ? undefined : values.get(globalStepName);
  const first = step?.dtype === "string" ? undefined : (step?.data[0] as number | bigint | undefined);
  const globalStep = first === undefined ? -1n : typeof first === "bigint" ? first : BigInt(Math.trunc(first));
  return { generation, globalStep, variables, totalBytes };
};

const snapshotFailed = (e: unknown): ConnectError =>
  new ConnectError(`the chief could not snapshot its variables: ${e instanceof Error ? e.message : String(e)}`, Code.Unavailable, undefined, undefined, e);

const chunkBytes = (n: number, what: string): number => {
  if (!(Number.isInteger(n) && n >= MIN_CHUNK_BYTES && n <= MAX_CHUNK_BYTES)) {
    throw new ValueError(`ModelPublisher: ${what} must be an integer from ${MIN_CHUNK_BYTES} to ${MAX_CHUNK_BYTES}, got ${String(n)}`);
  }
  return n;
};
