/**
 * The embedded coordination service served over gRPC by the chief's {@link Server}: one RPC of
 * `monitored_session.v1.CoordinationService` per method of {@link CoordinationServiceApi}, so
 * that tasks in other processes (see `connectCoordinationService`) reach the same object as an
 * in-process or cross-thread client. A failed call carries the error as a gRPC status; the
 * client turns it back into the project's error class.
 *
 * @example
 * ```ts
 * import { hostCoordinationService, taskName } from "monitored-session/cluster";
 *
 * const cluster = { chief: ["localhost:2222"], worker: ["localhost:2223"] };
 * await using host = await hostCoordinationService(cluster, { jobName: "chief", taskIndex: 0 });
 * const chief = host.client({ task: taskName("chief", 0), tasks: [taskName("chief", 0), taskName("worker", 0)], isChief: true });
 * await chief.connect(); // resolves once the worker registered too
 * ```
 *
 * @module
 */

import type { HandlerContext } from "@connectrpc/connect";
import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { type ErrorCode, InvalidArgumentError } from "../../errors.js";
import type { ClusterSpecLike } from "../ClusterSpec.js";
import type { CallerIdentity as CallerIdentityMessage } from "../proto/gen/monitored_session/v1/coordination_pb.js";
import { CoordinationService } from "../proto/gen/monitored_session/v1/coordination_pb.js";
import type { ServerDef } from "../proto/gen/monitored_session/v1/cluster_pb.js";
import { Server, type ServerOptions, type ServiceRegistration } from "../Server.js";
import type { CoordinationClientOptions } from "./CoordinationClient.js";
import { EmbeddedCoordinationClient, inProcessTransport } from "./EmbeddedCoordinationClient.js";
import {
  type CallerIdentity,
  type CoordinationServiceApi,
  EmbeddedCoordinationService,
  type EmbeddedCoordinationServiceOptions,
} from "./EmbeddedCoordinationService.js";
import { decodeFailureJson, encodeFailureHeader, FAILURE_HEADER, toStatus } from "./status.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link hostCoordinationService}: the server's (it always starts), and the service's. */
export interface HostCoordinationServiceOptions extends Omit<ServerOptions, "start"> {
  /** The embedded service's options (heartbeat timeout, clock). */
  readonly coordination?: EmbeddedCoordinationServiceOptions | undefined;
}

/** A started server that hosts an embedded coordination service. */
export interface HostedCoordinationService extends AsyncDisposable {
  readonly server: Server;
  readonly service: EmbeddedCoordinationService;
  /** A client for a task of this process (the chief's own), reaching the service in-process. */
  client(options: CoordinationClientOptions): EmbeddedCoordinationClient;
  /** Closes the service (pending and later calls fail with `UnavailableError`), then stops the server. */
  stop(): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Serves `service` as `monitored_session.v1.CoordinationService` (internal: a user hosts the service
 * with {@link hostCoordinationService}, which adds this to the server's `services`). Blocking calls (a blocking get, a barrier, registration,
 * shutdown) end at the request's timeout or at the call's deadline, whichever comes first.
 */
const coordinationServiceRegistration =
  (service: CoordinationServiceApi): ServiceRegistration =>
  (router: ConnectRouter) => {
    router.service(CoordinationService, {
      registerTask: (req, ctx) =>
        answer(async () => {
          const r = await service.register({
            task: req.task,
            incarnation: req.incarnation,
            isChief: req.isChief,
            tasks: req.clusterTasks,
            timeoutMs: boundedTimeout(req.timeoutMs, ctx),
            lastGeneration: req.lastGeneration,
          });
          return { generation: r.generation, serviceId: r.serviceId };
        }),
      heartbeat: (req) => answer(async () => service.heartbeat(caller(req.caller)).then(() => ({}))),
      insertKey: (req) =>
        answer(async () => service.insert({ ...caller(req.caller), key: req.key, value: req.value }).then(() => ({}))),
      getKey: (req, ctx) =>
        answer(async () => ({
          value: await service.get({ ...caller(req.caller), key: req.key, timeoutMs: boundedTimeout(req.timeoutMs, ctx) }),
        })),
      tryGetKey: (req) =>
        answer(async () => {
          const value = await service.tryGet({ ...caller(req.caller), key: req.key });
          return value === undefined ? {} : { value };
        }),
      deleteKey: (req) => answer(async () => service.delete({ ...caller(req.caller), key: req.key }).then(() => ({}))),
      listDir: (req) =>
        answer(async () => ({ entries: await service.listDir({ ...caller(req.caller), dir: req.dir }) })),
      waitAtBarrier: (req, ctx) =>
        answer(async () =>
          service
            .barrier({ ...caller(req.caller), id: req.barrierId, tasks: req.tasks, timeoutMs: boundedTimeout(req.timeoutMs, ctx) })
            .then(() => ({})),
        ),
      reportError: (req) =>
        answer(async () =>
          service
            .reportError({
              ...caller(req.caller),
              status: { code: errorCode(req.code), message: req.message, failure: decodeFailureJson(req.failureJson, (problems) => new InvalidArgumentError(`reported failure: ${problems}`)) },
              ...(req.final ? { final: true } : {}),
            })
            .then(() => ({})),
        ),
      shutdownTask: (req, ctx) =>
        answer(async () =>
          service.shutdown({ ...caller(req.caller), timeoutMs: boundedTimeout(req.timeoutMs, ctx) }).then(() => ({})),
        ),
    });
  };

/**
 * Starts a {@link Server} for this task that hosts a new {@link EmbeddedCoordinationService}
 * (next to any `services` given), for the chief of a cluster whose coordination backend is
 * embedded. Other tasks reach it with `connectCoordinationService(server.target, ...)`; this
 * process's own task with `host.client(...)`.
 *
 * @throws what `new Server` and `server.start()` throw (a bad cluster, a port in use).
 */
export const hostCoordinationService = async (
  clusterOrServerDef: ClusterSpecLike | ServerDef,
  options: HostCoordinationServiceOptions = {},
): Promise<HostedCoordinationService> => {
  const { coordination, ...serverOptions } = options;
  const service = new EmbeddedCoordinationService(coordination);
  let server: Server;
  try {
    server = new Server(clusterOrServerDef, {
      ...serverOptions,
      start: false,
      services: [...(serverOptions.services ?? []), coordinationServiceRegistration(service)],
    });
    await server.start();
  } catch (e) {
    service.close();
    throw e;
  }
  const stop = async (): Promise<void> => {
    service.close();
    await server.stop();
  };
  return {
    server,
    service,
    client: (clientOptions) => new EmbeddedCoordinationClient(inProcessTransport(service), clientOptions),
    stop,
    [Symbol.asyncDispose]: stop,
  };
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** The result of `run`, or its error as a gRPC status with the error's code and message. */
const answer = async <T>(run: () => Promise<T>): Promise<T> => {
  try {
    return await run();
  } catch (e) {
    const status = toStatus(e);
    // What the failure is travels as data beside the code and the message.
    const metadata = status.failure === undefined ? undefined : new Headers({ [FAILURE_HEADER]: encodeFailureHeader(status.failure) });
    throw new ConnectError(status.message, status.code as number as Code, metadata);
  }
};

/** The request's identity. @throws InvalidArgumentError when the request has none. */
const caller = (identity: CallerIdentityMessage | undefined): CallerIdentity => {
  if (identity === undefined) {
    throw new InvalidArgumentError("coordination request without a caller identity: register first and send the identity it returned");
  }
  return { task: identity.task, incarnation: identity.incarnation, generation: identity.generation, serviceId: identity.serviceId };
};

/** A canonical code from the wire. @throws InvalidArgumentError for a number that is not one. */
const errorCode = (code: number): ErrorCode => {
  if (!Number.isInteger(code) || code < 1 || code > 16) {
    throw new InvalidArgumentError(`reported error code ${code} is not a canonical error code (1..16)`);
  }
  return code as ErrorCode;
};

/** The request's timeout, cut to what is left of the call's deadline. */
const boundedTimeout = (timeoutMs: bigint, ctx: HandlerContext): number => {
  const left = ctx.timeoutMs();
  const requested = Number(timeoutMs);
  return left === undefined ? requested : Math.max(0, Math.min(requested, left));
};
