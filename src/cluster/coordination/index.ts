/**
 * The coordination service: one interface ({@link CoordinationClient}), and backends that
 * register by name (backend.ts): the embedded service, etcd, and the in-process `memory`. What `monitored-session/cluster` re-exports; the thread
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
  resolveCoordinationTimeouts,
} from "./CoordinationConfig.js";

/* Backends */
export {
  type BackendIssue,
  type BackendTask,
  backendSettings,
  type CoordinationBackendDefinition,
  coordinationBackend,
  coordinationBackendNames,
  type CoordinationConnection,
  type CoordinationHost,
  DEFAULT_COORDINATION_BACKEND,
  type HeartbeatFloor,
  registerCoordinationBackend,
} from "./backends.js";
export { serveTask } from "./backendSupport.js";

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
export { ETCD_MIN_HEARTBEAT_TIMEOUT_MS, EtcdEndpoint } from "./etcdBackend.js";
export { EtcdCoordinationClient, type EtcdCoordinationClientOptions } from "./EtcdCoordinationClient.js";
