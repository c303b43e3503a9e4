/**
 * `Server`: one task's gRPC server, as TensorFlow's `tf.distribute.Server` (`tf.train.Server`).
 * It binds only its own task's address (or an explicit bind address, for NAT and Kubernetes),
 * serves the `monitored_session.v1` services over gRPC (HTTP/2, through connect-node), and can
 * require a shared cluster token on every call and TLS. Its `target` (`grpc://host:port`) is
 * the session target (`master`) of the task.
 *
 * Differences from TensorFlow, where Node forces them: binding is asynchronous, so `start()`
 * returns a promise, a port already in use is reported by `start()` (and `join()`), and
 * `createLocalServer()` resolves once the port is known. `join()` resolves when the server stops
 * (TensorFlow's blocks forever).
 *
 * @example
 * ```ts
 * import { Server } from "monitored-session/cluster";
 *
 * await using server = await Server.createLocalServer();
 * console.log(server.target); // grpc://localhost:<port>
 * ```
 *
 * @module
 */

import * as http2 from "node:http2";
import { createRequire } from "node:module";
import type { AddressInfo } from "node:net";
import { clone, create, isMessage } from "@bufbuild/protobuf";
import { Code, ConnectError, createContextKey, createContextValues, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { Observable } from "rxjs";
import { ComponentEvents } from "../events/componentEvents.js";
import type { SessionEvent } from "../events/SessionEvent.js";
import { systemClock, type Clock } from "../time/Clock.js";
import {
  DeadlineExceededError,
  InternalError,
  InvalidArgumentError,
  NotFoundError,
  UnknownError,
  ValueError,
} from "../errors.js";
import { defaultLogger, type Logger } from "../Logger.js";
import { processIncarnationId } from "./coordination/identity.js";
import { ClusterSpec, type ClusterSpecLike } from "./ClusterSpec.js";
import { ClusterDefSchema, ServerDefSchema, type ServerDef } from "./proto/gen/monitored_session/v1/cluster_pb.js";
import { GetStatusResponseSchema, StatusService } from "./proto/gen/monitored_session/v1/status_pb.js";
import { loadTlsCredentials, TOKEN_HEADER, tokenMatches, type TlsFiles } from "./security.js";
import { parseAddress } from "./TfConfig.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link Server}. TensorFlow's `job_name`, `task_index`, `protocol`, `start`, and this project's security and deadlines. */
export interface ServerOptions {
  /** This server's job. Default: the cluster's only job; with several, required. */
  readonly jobName?: string | undefined;
  /** This server's index in its job. Default: the job's only task; with several, required. */
  readonly taskIndex?: number | undefined;
  /** The transport. Default `"grpc"`, the only one served. */
  readonly protocol?: string | undefined;
  /** Start serving at once (default `true`); otherwise call {@link Server.start}. */
  readonly start?: boolean | undefined;
  /** When set, every call must carry `authorization: Bearer <token>`; others get Unauthenticated. See `loadClusterToken`. */
  readonly token?: string | undefined;
  /** Serve TLS from these PEM files (mutual TLS when `caFile` is given). Default: plaintext HTTP/2. */
  readonly tls?: TlsFiles | undefined;
  /**
   * Listen here instead of the task's own address: `host` (keeping the task's port) or
   * `host:port`, e.g. `0.0.0.0` in a Kubernetes pod whose cluster address is a Service name.
   * `target` still names the task's cluster address.
   */
  readonly bindAddress?: string | undefined;
  /** Deadline for binding the port, in ms (default 10 000). */
  readonly startTimeoutMs?: number | undefined;
  /** How long `stop()` lets calls in flight finish before it closes their connections, in ms (default 5 000). */
  readonly stopGraceMs?: number | undefined;
  /**
   * More gRPC services to serve next to the status service, each registered on the server's
   * router when it starts (the coordination service and the model service are served this way).
   * They are behind the same token check and TLS as every call.
   */
  readonly services?: readonly ServiceRegistration[] | undefined;
  /**
   * Prints the server's lines (default: the process's default logger) until a session adopts
   * its {@link Server.events$}. Given a task runtime's or a session's logger, the lines join
   * that stream as events instead.
   */
  readonly logger?: Logger | undefined;
  readonly clock?: Clock | undefined;
}

/** Registers one or more services on a server's router (`router.service(Def, impl)`). */
export type ServiceRegistration = (router: ConnectRouter) => void;

/**
 * A random 64-bit id drawn once per process start; a restarted task has a new one. The same
 * number as the process's coordination incarnation (`processIncarnationId`).
 */
export const processIncarnation: bigint = BigInt(processIncarnationId);

/** This package's version, as servers report it. */
export const serverVersion: string = (createRequire(import.meta.url)("monitored-session/package.json") as { version: string }).version;

type State = "new" | "starting" | "serving" | "stopping" | "stopped";

/** One task's server. See the module documentation. */
export class Server implements AsyncDisposable {
  /** What this server is: its cluster, job, task index and protocol (a fresh copy each read). */
  get serverDef(): ServerDef {
    return clone(ServerDefSchema, this.#serverDef);
  }

  /**
   * The server's lines as `log` events (source `server`): that it serves, a call it rejected
   * (a wrong token, an unknown caller), a server error. Its `logger` option prints them until a
   * session adopts them (`session.forwardEvents(server)`).
   */
  get events$(): Observable<SessionEvent> {
    return this.#events.events$;
  }

  /** The caller prints the server's lines from now on; the function returned hands them back. */
  adopt(): () => void {
    return this.#events.adopt();
  }

  readonly #serverDef: ServerDef;
  readonly #address: { readonly host: string; readonly port: number };
  readonly #bind: { readonly host: string; readonly port: number };
  readonly #taskName: string;
  readonly #options: ServerOptions;
  readonly #events: ComponentEvents;
  readonly #logger: Logger;
  readonly #clock: Clock;
  #state: State = "new";
  #http: http2.Http2Server | undefined;
  #port: number | undefined;
  #starting: Promise<void> | undefined;
  #stopping: Promise<void> | undefined;
  readonly #sessions = new Set<http2.ServerHttp2Session>();
  readonly #stopped: Promise<void>;
  #resolveStopped!: () => void;
  #rejectStopped!: (e: unknown) => void;

  /**
   * Defines the server and, unless `start: false`, starts it (await {@link start} to know it is
   * serving: the same promise).
   *
   * @throws TypeError when `serverOrClusterDef` is neither a ServerDef nor something a ClusterSpec accepts.
   * @throws ValueError when the job or task index is left out and cannot be inferred.
   * @throws NotFoundError for a protocol other than `grpc`; InternalError for a job the cluster
   *   does not define; InvalidArgumentError for a task the job does not define or an address without a port.
   */
  constructor(serverOrClusterDef: ClusterSpecLike | ServerDef, options: ServerOptions = {}) {
    this.#options = options;
    this.#clock = options.clock ?? systemClock;
    const clock = this.#clock;
    this.#events = new ComponentEvents(options.logger ?? defaultLogger, () => clock.now(), "server");
    this.#logger = this.#events.logger;
    this.#serverDef = makeServerDef(serverOrClusterDef, options);
    const { jobName, taskIndex, protocol } = this.#serverDef;
    if (protocol !== "grpc") {
      throw new NotFoundError(`No server factory registered for protocol ${JSON.stringify(protocol)}; the only protocol is "grpc"`);
    }
    const cluster = new ClusterSpec(this.#serverDef.cluster ?? create(ClusterDefSchema));
    if (!cluster.jobs.includes(jobName)) throw new InternalError(`Job "${jobName}" was not defined in cluster`);
    if (!cluster.taskIndices(jobName).includes(taskIndex)) throw new InvalidArgumentError(`Task ${taskIndex} was not defined in job "${jobName}"`);
    const address = cluster.taskAddress(jobName, taskIndex);
    this.#taskName = `/job:${jobName}/replica:0/task:${taskIndex}`;
    this.#address = parseTaskAddress(address, `the address of ${this.#taskName}`);
    this.#bind = bindOf(options.bindAddress, this.#address);
    this.#stopped = new Promise<void>((resolve, reject) => {
      this.#resolveStopped = resolve;
      this.#rejectStopped = reject;
    });
    this.#stopped.catch(() => undefined); // observed through join()
    if (options.start ?? true) {
      this.start().catch((e: unknown) => this.#logger.error(`${this.#taskName}: ${(e as Error).message}`));
    }
  }

  // -------------------------------------------------------------------------------------------
  // constructors
  // -------------------------------------------------------------------------------------------

  /**
   * A single-task cluster `{ localhost: ["localhost:0"] }` on loopback, started (unless
   * `start: false`), with the bound port in `target`.
   */
  static async createLocalServer(options: Omit<ServerOptions, "jobName" | "taskIndex" | "protocol" | "bindAddress"> = {}): Promise<Server> {
    const server = new Server({ localhost: ["localhost:0"] }, { ...options, protocol: "grpc", start: false });
    if (options.start ?? true) await server.start();
    return server;
  }

  // -------------------------------------------------------------------------------------------
  // operations
  // -------------------------------------------------------------------------------------------

  /**
   * The session target, `grpc://host:port`: the task's cluster address, with the bound port when
   * the address asked for port 0. @throws ValueError when port 0 has not been bound yet.
   */
  get target(): string {
    const port = this.#address.port !== 0 ? this.#address.port : this.#port;
    if (port === undefined) throw new ValueError(`${this.#taskName} asked for port 0 and has not bound one yet; await server.start() first`);
    return `grpc://${formatHost(this.#address.host)}:${port}`;
  }

  /** Where the server listens, `host:port` with the bound port; `undefined` until it has bound. */
  get boundAddress(): string | undefined {
    return this.#port === undefined ? undefined : `${formatHost(this.#bind.host)}:${this.#port}`;
  }

  /**
   * Binds the port and serves. Idempotent: every call returns the same promise.
   * @throws UnknownError when the port is in use; DeadlineExceededError when binding takes longer than `startTimeoutMs`.
   */
  start(): Promise<void> {
    this.#starting ??= this.#listen();
    return this.#starting;
  }

  /** Resolves when the server has stopped; rejects with the start error if it could not start. */
  join(): Promise<void> {
    return this.#stopped;
  }

  /**
   * Stops serving: new connections are refused, calls in flight get `stopGraceMs` to finish,
   * then their connections are closed. Idempotent.
   */
  stop(): Promise<void> {
    this.#stopping ??= this.#close();
    return this.#stopping;
  }

  /** `await using server = ...` stops the server at the end of the scope. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.stop();
  }

  async #listen(): Promise<void> {
    if (this.#state !== "new") throw new ValueError(`${this.#taskName}: cannot start a server that is ${this.#state}`);
    this.#state = "starting";
    try {
      const http = this.#createHttpServer();
      this.#http = http;
      http.on("session", (s) => {
        this.#sessions.add(s);
        s.once("close", () => this.#sessions.delete(s));
      });
      const timeoutMs = this.#options.startTimeoutMs ?? 10_000;
      await new Promise<void>((resolve, reject) => {
        const timer = this.#clock.setTimer(timeoutMs, () => {
          http.off("error", onError);
          reject(new DeadlineExceededError(`${this.#taskName}: binding ${this.#bindLabel()} took longer than ${timeoutMs} ms (startTimeoutMs)`));
        });
        const onError = (e: NodeJS.ErrnoException): void => {
          timer.cancel();
          reject(this.#bindError(e));
        };
        http.once("error", onError);
        http.listen({ host: this.#bind.host, port: this.#bind.port }, () => {
          timer.cancel();
          http.off("error", onError);
          resolve();
        });
      });
      this.#port = (http.address() as AddressInfo).port;
      http.on("error", (e) => this.#logger.error(`${this.#taskName}: server error: ${e.message}`));
      this.#state = "serving";
      this.#logger.info(`${this.#taskName} serving ${this.target} (bound ${this.boundAddress ?? "?"}${this.#options.tls === undefined ? "" : ", TLS"}${this.#options.token === undefined ? "" : ", token required"})`);
    } catch (e) {
      this.#state = "stopped";
      this.#http?.close();
      this.#rejectStopped(e);
      throw e;
    }
  }

  async #close(): Promise<void> {
    if (this.#starting !== undefined) await this.#starting.catch(() => undefined);
    const http = this.#http;
    if (http === undefined || this.#state === "stopped") {
      this.#state = "stopped";
      this.#resolveStopped();
      return;
    }
    this.#state = "stopping";
    const closed = new Promise<void>((resolve) => http.close(() => resolve()));
    for (const s of this.#sessions) s.close(); // no new streams; streams in flight finish
    const graceMs = this.#options.stopGraceMs ?? 5_000;
    const timer = this.#clock.setTimer(graceMs, () => {
      for (const s of this.#sessions) s.destroy();
    });
    await closed;
    timer.cancel();
    this.#state = "stopped";
    this.#resolveStopped();
  }

  #createHttpServer(): http2.Http2Server {
    const token = this.#options.token;
    const interceptors: Interceptor[] = token === undefined ? [] : [this.#tokenCheck(token)];
    const handler = connectNodeAdapter({
      routes: (router: ConnectRouter) => {
        router.service(StatusService, {
          getStatus: () =>
            create(GetStatusResponseSchema, {
              taskName: this.#taskName,
              jobName: this.#serverDef.jobName,
              taskIndex: this.#serverDef.taskIndex,
              incarnation: processIncarnation,
              serverVersion,
            }),
        });
        for (const register of this.#options.services ?? []) register(router);
      },
      interceptors,
      contextValues: (req) => createContextValues().set(peerKey, `${req.socket.remoteAddress ?? "?"}:${req.socket.remotePort ?? "?"}`),
      grpc: true,
      grpcWeb: false,
      connect: false,
    });
    const tls = this.#options.tls;
    if (tls === undefined) return http2.createServer(handler);
    const { cert, key, ca } = loadTlsCredentials(tls);
    return http2.createSecureServer(
      ca === undefined ? { cert, key, allowHTTP1: false } : { cert, key, ca, requestCert: true, rejectUnauthorized: true, allowHTTP1: false },
      handler,
    );
  }

  #tokenCheck(token: string): Interceptor {
    return (next) => async (req) => {
      const header = req.header.get(TOKEN_HEADER);
      if (!tokenMatches(header, token)) {
        const why = header === null ? "no cluster token" : "a wrong cluster token";
        this.#logger.warn(`${this.#taskName}: rejected ${req.method.name} from ${req.contextValues.get(peerKey)}: ${why}`);
        // No "/", ":", ";" or "," here: grpc-js decodes grpc-message with decodeURI, which leaves them percent-encoded.
        throw new ConnectError(`this cluster requires its token on every call but the call had ${why} (set the same token on every task)`, Code.Unauthenticated);
      }
      return next(req);
    };
  }

  #bindLabel(): string {
    return `${formatHost(this.#bind.host)}:${this.#bind.port}`;
  }

  #bindError(e: NodeJS.ErrnoException): Error {
    const where = this.#bindLabel();
    switch (e.code) {
      case "EADDRINUSE":
        return new UnknownError(`Could not start gRPC server for ${this.#taskName}: ${where} is already in use; stop the process that holds the port or give the task another address`, { cause: e });
      case "EADDRNOTAVAIL":
      case "ENOTFOUND":
      case "EAI_AGAIN":
        return new UnknownError(`Could not start gRPC server for ${this.#taskName}: ${where} is not an address of this machine (${e.code}); use bindAddress to listen on a local address`, { cause: e });
      case "EACCES":
        return new UnknownError(`Could not start gRPC server for ${this.#taskName}: no permission to bind ${where} (EACCES); use a port above 1023`, { cause: e });
      default:
        return new UnknownError(`Could not start gRPC server for ${this.#taskName} on ${where}: ${e.message}`, { cause: e });
    }
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const peerKey = createContextKey<string>("?", { description: "the caller's address" });

/** TensorFlow's `_make_server_def`: copy a ServerDef with overrides, or infer job and task from a cluster. */
export const makeServerDef = (serverOrClusterDef: ClusterSpecLike | ServerDef, options: Pick<ServerOptions, "jobName" | "taskIndex" | "protocol">): ServerDef => {
  if (isMessage(serverOrClusterDef, ServerDefSchema)) {
    const def = clone(ServerDefSchema, serverOrClusterDef);
    if (options.jobName !== undefined) def.jobName = options.jobName;
    if (options.taskIndex !== undefined) def.taskIndex = options.taskIndex;
    if (options.protocol !== undefined) def.protocol = options.protocol;
    return def;
  }
  let cluster: ClusterSpec;
  try {
    cluster = new ClusterSpec(serverOrClusterDef);
  } catch (e) {
    if (e instanceof TypeError) {
      throw new TypeError("Could not convert `server_or_cluster_def` to a `tf.train.ServerDef` or `tf.train.ClusterSpec`.", { cause: e });
    }
    throw e;
  }
  let jobName = options.jobName;
  if (jobName === undefined) {
    if (cluster.jobs.length !== 1) throw new ValueError("Must specify an explicit `job_name`.");
    jobName = cluster.jobs[0] as string;
  }
  let taskIndex = options.taskIndex;
  if (taskIndex === undefined) {
    const indices = cluster.taskIndices(jobName);
    if (indices.length !== 1) throw new ValueError("Must specify an explicit `task_index`.");
    taskIndex = indices[0] as number;
  }
  return create(ServerDefSchema, { cluster: cluster.asClusterDef(), jobName, taskIndex, protocol: options.protocol ?? "grpc" });
};

const parseTaskAddress = (address: string, what: string): { host: string; port: number } => {
  const parsed = parseAddress(address);
  if (parsed === undefined) {
    throw new InvalidArgumentError(`Could not parse port for local server from "${address}" (${what}); write it as host:port`);
  }
  return parsed;
};

/** Where to listen: the override (`host` or `host:port`) or the task's address; `localhost` is 127.0.0.1. */
const bindOf = (bindAddress: string | undefined, address: { host: string; port: number }): { host: string; port: number } => {
  const given =
    bindAddress === undefined
      ? address
      : (parseAddress(bindAddress) ??
        (/^(\[[^\]]+\]|[^:\s[\]]+)$/.test(bindAddress)
          ? { host: bindAddress.replace(/^\[|\]$/g, ""), port: address.port }
          : undefined));
  if (given === undefined) throw new InvalidArgumentError(`bindAddress "${bindAddress}" is neither host nor host:port`);
  return { host: given.host === "localhost" ? "127.0.0.1" : given.host, port: given.port };
};

const formatHost = (host: string): string => (host.includes(":") ? `[${host}]` : host);
