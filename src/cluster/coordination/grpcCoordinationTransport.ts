/**
 * A task's way to the embedded coordination service hosted by the chief's `Server` in another
 * process: {@link grpcCoordinationTransport} calls `monitored_session.v1.CoordinationService`
 * over gRPC (with the cluster token and TLS of `ClusterClientOptions`), and
 * {@link connectCoordinationService} makes a task's `CoordinationClient` of it.
 *
 * Heartbeats do not depend on the task's main event loop: `openPort()` starts a thread with its
 * own gRPC channel to the chief and serves the port protocol (`servePort`'s) on it, so the
 * client's heartbeat thread talks to that thread and never waits for the main thread.
 *
 * @example
 * ```ts
 * import { connectCoordinationService, taskName } from "monitored-session/cluster";
 *
 * const tasks = [taskName("chief", 0), taskName("worker", 0)];
 * const client = connectCoordinationService("grpc://localhost:2222", { task: tasks[1]!, tasks, isChief: false }, { token: process.env.MY_TOKEN });
 * await client.connect(); // waits for the chief (its server may start later), up to the registration timeout
 * console.log(await client.get("ready", { timeoutMs: 60_000 }));
 * await client.shutdown();
 * ```
 *
 * @module
 */

import { createRequire } from "node:module";
import { MessageChannel, type MessagePort, Worker } from "node:worker_threads";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { toBinary } from "@bufbuild/protobuf";
import { base64Encode } from "@bufbuild/protobuf/wire";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { systemClock, type Clock } from "../../time/Clock.js";
import { DeadlineExceededError, ErrorCode, OpError, UnauthenticatedError, UnavailableError } from "../../errors.js";
import { clusterTransport, clusterTransportSettings, type ClusterClientOptions, type ClusterTransportSettings } from "../clusterClient.js";
import {
  CoordinationService,
  file_monitored_session_v1_coordination,
} from "../proto/gen/monitored_session/v1/coordination_pb.js";
import type { CoordinationClient, CoordinationClientOptions } from "./CoordinationClient.js";
import { EmbeddedCoordinationClient, type EmbeddedTransport } from "./EmbeddedCoordinationClient.js";
import type { CoordinationServiceApi } from "./EmbeddedCoordinationService.js";
import { StatusService } from "../proto/gen/monitored_session/v1/status_pb.js";
import { decodeFailureHeader, EMBEDDED_SERVICE_GONE, FAILURE_HEADER, fromStatus } from "./status.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link grpcCoordinationTransport}: token, TLS, the unary deadline, and a clock. */
export interface GrpcCoordinationTransportOptions extends ClusterClientOptions {
  /** The source of time for registration retries (default: the system clock). */
  readonly clock?: Clock | undefined;
}

/** An {@link EmbeddedTransport} over gRPC. */
export interface GrpcCoordinationTransport extends EmbeddedTransport {
  /** The chief's server, `grpc://host:port`. */
  readonly target: string;
  /** Ends the heartbeat channel threads this transport started. */
  close(): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * The embedded coordination service at `target` (the chief's `Server`), over gRPC.
 *
 * - Unary calls have the deadline `timeoutMs` (default 10 s). A blocking get, a barrier, the
 *   registration and the shutdown barrier have their own timeout, sent to the server; the
 *   call's deadline is that timeout plus `timeoutMs`, so the server's error (naming the key or
 *   the stragglers) comes first.
 * - `register` retries while nobody serves at `target` (the chief has not started yet, or is
 *   restarting), up to the registration timeout, or the request's `unreachableTimeoutMs` from
 *   the first unanswered try.
 * - An error the server sent keeps its class and message; a call that got no answer is
 *   `UnavailableError` naming `target`, and a rejected token `UnauthenticatedError`.
 *
 * @throws TypeError for a target that is not `grpc://host:port`; InvalidArgumentError for unreadable TLS files.
 */
export const grpcCoordinationTransport = (
  target: string,
  options: GrpcCoordinationTransportOptions = {},
): GrpcCoordinationTransport => {
  const settings = clusterTransportSettings(target, options);
  const transport = clusterTransport(target, options);
  const client = createClient(CoordinationService, transport);
  const status = createClient(StatusService, transport);
  const clock = options.clock ?? systemClock;
  const graceMs = settings.defaultTimeoutMs;
  const threads = new Set<Worker>();
  const call = async <T>(run: () => Promise<T>): Promise<T> => {
    try {
      return await run();
    } catch (e) {
      throw callError(e, target);
    }
  };
  const api: CoordinationServiceApi = {
    register: async (req) => {
      const deadline = clock.now() + req.timeoutMs;
      // When nobody answers: from the first such try, for `unreachableTimeoutMs` at most.
      let unreachableUntil: number | undefined;
      // A registration waits for every task, so its own call may rightly go unanswered for long;
      // a chief that froze (SIGSTOP) keeps its connection open and never answers either. With
      // `unreachableTimeoutMs` (a rank registering again), a probe tells the two apart.
      const silence = req.unreachableTimeoutMs === undefined ? undefined : watchSilence((signal) => status.getStatus({}, { signal }), req.unreachableTimeoutMs, clock, target);
      try {
        for (let backoffMs = 100; ; backoffMs = Math.min(2 * backoffMs, 1000)) {
          const leftMs = Math.max(0, deadline - clock.now());
          try {
            const registering = call(() =>
              client.registerTask(
                {
                  task: req.task,
                  incarnation: req.incarnation,
                  isChief: req.isChief,
                  clusterTasks: [...req.tasks],
                  timeoutMs: wireMs(leftMs),
                  lastGeneration: req.lastGeneration ?? 0,
                },
                { timeoutMs: leftMs + graceMs, ...(silence === undefined ? {} : { signal: silence.signal }) },
              ),
            );
            const { generation, serviceId } = await (silence === undefined ? registering : Promise.race([registering, silence.lost]));
            return { generation, serviceId };
          } catch (e) {
            if (silence?.signal.aborted === true) throw await silence.lost.catch((lost: unknown) => lost);
            if (!(e instanceof Error && unanswered.has(e))) throw e;
            unreachableUntil ??= Math.min(deadline, clock.now() + (req.unreachableTimeoutMs ?? Number.POSITIVE_INFINITY));
            if (clock.now() + backoffMs >= unreachableUntil) throw e;
            await new Promise<void>((resolve) => clock.setTimer(backoffMs, resolve));
          }
        }
      } finally {
        silence?.stop();
      }
    },
    heartbeat: (req) => call(() => client.heartbeat({ caller: req })).then(() => undefined),
    insert: (req) => call(() => client.insertKey({ caller: req, key: req.key, value: req.value })).then(() => undefined),
    get: (req) =>
      call(() =>
        client.getKey({ caller: req, key: req.key, timeoutMs: wireMs(req.timeoutMs) }, { timeoutMs: req.timeoutMs + graceMs }),
      ).then((r) => r.value),
    tryGet: (req) => call(() => client.tryGetKey({ caller: req, key: req.key })).then((r) => r.value),
    delete: (req) => call(() => client.deleteKey({ caller: req, key: req.key })).then(() => undefined),
    listDir: (req) =>
      call(() => client.listDir({ caller: req, dir: req.dir })).then((r) =>
        r.entries.map(({ key, value }) => ({ key, value })),
      ),
    barrier: (req) =>
      call(() =>
        client.waitAtBarrier(
          { caller: req, barrierId: req.id, tasks: [...req.tasks], timeoutMs: wireMs(req.timeoutMs) },
          { timeoutMs: req.timeoutMs + graceMs },
        ),
      ).then(() => undefined),
    reportError: (req) =>
      call(() =>
        client.reportError({ caller: req, code: req.status.code, message: req.status.message, final: req.final === true, failureJson: req.status.failure === undefined ? "" : JSON.stringify(req.status.failure) }),
      ).then(
        () => undefined,
      ),
    shutdown: (req) =>
      call(() =>
        client.shutdownTask({ caller: req, timeoutMs: wireMs(req.timeoutMs) }, { timeoutMs: req.timeoutMs + graceMs }),
      ).then(() => undefined),
  };
  return {
    target,
    api,
    openPort: () => openChannelThread(target, settings, threads),
    close: async () => {
      const all = [...threads];
      threads.clear();
      await Promise.all(all.map((w) => w.terminate()));
    },
  };
};

/**
 * A task's {@link CoordinationClient} of the embedded service hosted at `target` (the chief's
 * `Server`, see `hostCoordinationService`). `close()` and `shutdown()` also end the transport's
 * heartbeat channel.
 */
export const connectCoordinationService = (
  target: string,
  options: CoordinationClientOptions,
  transportOptions: GrpcCoordinationTransportOptions = {},
): CoordinationClient => new GrpcCoordinationClient(grpcCoordinationTransport(target, transportOptions), options);

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** The embedded client, owning its gRPC transport. */
class GrpcCoordinationClient extends EmbeddedCoordinationClient {
  constructor(
    private readonly grpc: GrpcCoordinationTransport,
    options: CoordinationClientOptions,
  ) {
    super(grpc, options);
  }

  override async close(): Promise<void> {
    await super.close();
    await this.grpc.close();
  }
}

/** Milliseconds on the wire: a whole, non-negative number. */
const wireMs = (ms: number): bigint => BigInt(Math.max(0, Math.ceil(ms)));

/** Errors of calls that got no answer from the service (nobody listens, the connection broke). */
const unanswered = new WeakSet<Error>();

/** How often {@link watchSilence} asks, at most, and how long it gives one answer. */
const PROBE_EVERY_MS = 1_000;

/**
 * Asks `target` (its status service, through `probe`) every second, or every quarter of
 * `silenceMs` if that is shorter, one ask at a time (a refused connection is asked again at the
 * next tick). Any answer, an error status included, counts: the process serves. Once nothing has answered for `silenceMs`, `signal`
 * aborts and `lost` rejects with `UnavailableError` (the service gone): its host is frozen or
 * unreachable. Timers are `clock`'s; `stop()` ends the watch.
 */
const watchSilence = (
  probe: (signal: AbortSignal) => Promise<unknown>,
  silenceMs: number,
  clock: Clock,
  target: string,
): { readonly signal: AbortSignal; readonly lost: Promise<never>; stop(): void } => {
  const watch = new AbortController();
  const everyMs = Math.max(1, Math.min(PROBE_EVERY_MS, silenceMs / 4));
  let lastAnswer = clock.now();
  let stopped = false;
  let timer: { cancel(): void } | undefined;
  let asking: AbortController | undefined;
  let fail!: (e: Error) => void;
  const lost = new Promise<never>((_, reject) => (fail = reject));
  lost.catch(() => undefined); // observed by the caller's race, if it still waits
  const ask = (): void => {
    if (stopped) return;
    if (clock.now() - lastAnswer >= silenceMs) {
      stopped = true;
      fail(
        new UnavailableError(`the coordination service at ${target} has not answered for ${Math.round(clock.now() - lastAnswer)} ms (the heartbeat timeout is ${silenceMs} ms): its host (the chief) is frozen or unreachable`, {
          failure: EMBEDDED_SERVICE_GONE,
        }),
      );
      asking?.abort();
      watch.abort();
      return;
    }
    // One ask at a time, given until the watch ends: a slow answer is still an answer.
    if (asking === undefined) {
      const mine = new AbortController();
      asking = mine;
      probe(mine.signal).then(
        () => {
          lastAnswer = clock.now();
          asking = undefined;
        },
        (e: unknown) => {
          // An answer with a status (a token refused, say) is an answer; a refused connection is not.
          if (!mine.signal.aborted && ConnectError.from(e).metadata.has("grpc-status")) lastAnswer = clock.now();
          asking = undefined;
        },
      );
    }
    timer = clock.setTimer(everyMs, ask);
  };
  timer = clock.setTimer(everyMs, ask);
  return {
    signal: watch.signal,
    lost,
    stop: () => {
      stopped = true;
      timer?.cancel();
      asking?.abort();
    },
  };
};

/**
 * A failed call as the project's error. A status the server sent (it has `grpc-status`) keeps
 * its class and message; a call without an answer names `target`.
 */
const callError = (e: unknown, target: string): OpError => {
  if (e instanceof OpError) return e;
  const err = ConnectError.from(e);
  if (err.metadata.has("grpc-status")) {
    if (err.code === Code.Unauthenticated) return new UnauthenticatedError(`${target}: ${err.rawMessage}`, { cause: e });
    const failure = err.metadata.get(FAILURE_HEADER);
    return fromStatus({ code: err.code as number as ErrorCode, message: err.rawMessage, failure: failure === null ? undefined : decodeFailureHeader(failure, `${target}'s ${FAILURE_HEADER}`) });
  }
  if (err.code === Code.DeadlineExceeded) {
    // No answer at all (not the service's own deadline, which has a status): its host is frozen or cut off.
    return new DeadlineExceededError(`the coordination service at ${target} did not answer within the call's deadline (${err.rawMessage})`, { cause: e, failure: EMBEDDED_SERVICE_GONE });
  }
  const nodeCode = (err.cause as NodeJS.ErrnoException | undefined)?.code;
  const why = typeof nodeCode === "string" && !err.rawMessage.includes(nodeCode) ? `${nodeCode}: ${err.rawMessage}` : err.rawMessage;
  const error = new UnavailableError(`the coordination service at ${target} is unreachable (${why}); its host (the chief) stopped or has not started`, { cause: e, failure: EMBEDDED_SERVICE_GONE });
  unanswered.add(error);
  return error;
};

/** The service's file descriptor, base64: the channel thread rebuilds the service from it. */
let descriptorBase64: string | undefined;

const packagePaths = (): { connect: string; connectNode: string; codegen: string } => {
  const require = createRequire(import.meta.url);
  return {
    connect: require.resolve("@connectrpc/connect"),
    connectNode: require.resolve("@connectrpc/connect-node"),
    codegen: require.resolve("@bufbuild/protobuf/codegenv2"),
  };
};

/**
 * The heartbeat channel thread: its own gRPC channel to the chief, serving `heartbeat` (and
 * `openPort`) of the port protocol on the port it is given. Other methods are not carried:
 * only heartbeats go through a transport's ports. It ends when the port closes.
 */
const CHANNEL_SCRIPT = `
const { MessageChannel, workerData } = require("node:worker_threads");
const { port, paths, descriptor, settings, target } = workerData;
const unavailable = ${ErrorCode.UNAVAILABLE};
const serveWith = (client) => {
  const serve = (p, root) => {
    p.on("message", (msg) => {
      if (msg.method === "openPort") {
        const { port1, port2 } = new MessageChannel();
        serve(port1, false);
        p.postMessage({ id: msg.id, value: port2 }, [port2]);
        return;
      }
      if (msg.method !== "heartbeat") {
        p.postMessage({ id: msg.id, status: { code: ${ErrorCode.UNIMPLEMENTED}, message: "a gRPC coordination transport's port carries heartbeats only; call " + msg.method + " on the transport's api" } });
        return;
      }
      client.heartbeat({ caller: msg.request }).then(
        () => p.postMessage({ id: msg.id, value: undefined }),
        (e) => {
          // A status the server sent has grpc-status; anything else got no answer.
          const answered = e.metadata !== undefined && e.metadata.has("grpc-status");
          // The failure's header as sent (base64url JSON): decoded with its codec by the port's reader.
          const failureText = answered ? e.metadata.get(${JSON.stringify(FAILURE_HEADER)}) : null;
          const status = answered
            ? { code: e.code, message: e.rawMessage, ...(failureText === null ? {} : { failureHeader: failureText }) }
            : { code: unavailable, message: "the coordination service at " + target + " is unreachable (" + (e.rawMessage ?? e.message) + "); its host (the chief) stopped", failure: ${JSON.stringify(EMBEDDED_SERVICE_GONE)} };
          p.postMessage({ id: msg.id, status });
        },
      );
    });
    // The thread lives as long as the port it was started for.
    if (root) p.on("close", () => process.exit(0));
  };
  serve(port, true);
};
try {
  const { createClient } = require(paths.connect);
  const { createGrpcTransport } = require(paths.connectNode);
  const { fileDesc } = require(paths.codegen);
  const service = fileDesc(descriptor).services[0];
  const interceptors = settings.headers.length === 0 ? [] : [(next) => (req) => {
    for (const [name, value] of settings.headers) req.header.set(name, value);
    return next(req);
  }];
  const transport = createGrpcTransport({
    baseUrl: settings.baseUrl,
    interceptors,
    defaultTimeoutMs: settings.defaultTimeoutMs,
    ...(settings.nodeOptions === undefined ? {} : { nodeOptions: settings.nodeOptions }),
  });
  serveWith(createClient(service, transport));
  require("node:worker_threads").parentPort.postMessage("ready");
} catch (e) {
  port.postMessage({ id: -1, status: { code: unavailable, message: "the heartbeat channel thread could not start: " + e.message } });
  require("node:worker_threads").parentPort.postMessage("failed");
}
`;

/**
 * How long a channel thread may take to load its modules and build its channel. It is ready
 * before the task registers (see \`EmbeddedCoordinationClient.connect\`), so this is not part
 * of the heartbeat timeout; on a loaded machine loading gRPC in a new thread takes seconds.
 */
const CHANNEL_START_TIMEOUT_MS = 60_000;

/**
 * Starts a channel thread serving a new port; resolves with the port's other end once the thread
 * has its channel (or has failed to build it: the port then carries that error).
 */
const openChannelThread = (
  target: string,
  settings: ClusterTransportSettings,
  threads: Set<Worker>,
): Promise<MessagePort> => {
  descriptorBase64 ??= base64Encode(toBinary(FileDescriptorProtoSchema, file_monitored_session_v1_coordination.proto));
  const { port1, port2 } = new MessageChannel();
  const worker = new Worker(CHANNEL_SCRIPT, {
    eval: true,
    workerData: { port: port2, paths: packagePaths(), descriptor: descriptorBase64, settings: { ...settings, headers: [...settings.headers] }, target },
    transferList: [port2],
  });
  worker.unref();
  threads.add(worker);
  worker.on("exit", () => threads.delete(worker));
  // A thread that dies closes its port: the heartbeat thread reports the service as unreachable.
  worker.on("error", () => undefined);
  return new Promise<MessagePort>((resolve, reject) => {
    const timer = systemClock.setTimer(CHANNEL_START_TIMEOUT_MS, () => {
      void worker.terminate();
      reject(new UnavailableError(`the heartbeat channel thread to ${target} did not start within ${CHANNEL_START_TIMEOUT_MS} ms`));
    });
    const settle = (): void => {
      timer.cancel();
      resolve(port1);
    };
    worker.once("message", settle);
    worker.once("exit", settle);
  });
};
