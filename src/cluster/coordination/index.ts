/**
 * The coordination service: one interface ({@link CoordinationClient}), two backends (the
 * embedded service and etcd). What `monitored-session/cluster` re-exports; the thread
 * transport (`portTransport.ts`) and the status codec (`status.ts`) are internal, imported from
 * their modules.
 *
 * @module
 */

/* Interface */
export type {
  BarrierOptions,
  ConnectOptions,
  CoordinationClient,
  CoordinationClientOptions,
  KeyValue,
  ReportOptions,
  WaitOptions,
} from "./CoordinationClient.js";

/* Timeouts */
export {
  type CoordinationBackend,
  type CoordinationTimeouts,
  defaultCoordinationTimeouts,
  ETCD_MIN_HEARTBEAT_TIMEOUT_MS,
  resolveCoordinationTimeouts,
} from "./CoordinationConfig.js";

/* Identity */
export { newIncarnation, processIncarnationId, taskName } from "./identity.js";

/* Embedded backend */
export {
  type CallerIdentity,
  type CoordinationServiceApi,
  EmbeddedCoordinationService,
  type EmbeddedCoordinationServiceOptions,
  type RegisterRequest,
  type RegisterResponse,
} from "./EmbeddedCoordinationService.js";
export { EmbeddedCoordinationClient, type EmbeddedTransport, inProcessTransport } from "./EmbeddedCoordinationClient.js";

/* Embedded backend over gRPC */
export {
  coordinationServiceRegistration,
  type HostCoordinationServiceOptions,
  type HostedCoordinationService,
  hostCoordinationService,
} from "./coordinationServer.js";
export {
  connectCoordinationService,
  type GrpcCoordinationTransport,
  grpcCoordinationTransport,
  type GrpcCoordinationTransportOptions,
} from "./grpcCoordinationTransport.js";

/* etcd backend */
export { EtcdCoordinationClient, type EtcdCoordinationClientOptions } from "./EtcdCoordinationClient.js";
