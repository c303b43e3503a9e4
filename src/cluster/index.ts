/**
 * `monitored-session/cluster`: a cluster of training processes, as TensorFlow describes one.
 * `ClusterSpec` and TF_CONFIG say which tasks exist and which one this process is; `Server`
 * is a task's gRPC server; the `cluster:` configuration section says how tasks coordinate and
 * secure their calls; `TcpCollective` all-reduces buffers between the workers. See docs/distributed.md.
 *
 * Curated by hand: the wire helpers, the coordination service's thread transport and status
 * codec, and the generated messages a user never builds stay internal. The error classes
 * (`UnavailableError`, `UnauthenticatedError`, ...) come from `monitored-session`.
 * test/package.exports.test.ts holds this list to test/fixtures/exports/cluster.txt.
 *
 * @module
 */

/* ClusterSpec */
export { ClusterSpec } from "./ClusterSpec.js";
export type { ClusterDefShape, ClusterDict, ClusterSpecLike, JobTaskList, JobTasks } from "./ClusterSpec.js";

/* TF_CONFIG and the resolver */
export { decodeTfConfig, TaskAddress, TF_CONFIG, TfConfigCodec, TfConfigError, tfConfigFromEnv } from "./TfConfig.js";
export type { TfConfig } from "./TfConfig.js";
export { idInCluster, isChief, numWorkers, resolveCluster, resolveTfConfig } from "./ClusterResolver.js";
export type { ResolvedCluster } from "./ClusterResolver.js";
export { decodePodEnvironment, PeerNotResolvedError, POD_ENV, podDnsName, podHostnames, podTfConfig, podTfConfigOf, resolvePodCluster, waitForPodTfConfig, type PodEnvironment, type PodLayout, type PodMode, type PodResolverOptions } from "./PodClusterResolver.js";

/* Server */
export { Server } from "./Server.js";
export type { ServerOptions, ServiceRegistration } from "./Server.js";

/* Calling a server */
export { clusterTransport, getServerStatus } from "./clusterClient.js";
export type { ClusterClientOptions } from "./clusterClient.js";

/* Sessions across processes: the grpc:// target and the chief's model service */
export { clusterSessionTargets, GrpcChiefModel, grpcSessionTargetResolver } from "./grpcSessionTarget.js";
export type { GrpcSessionTargetOptions } from "./grpcSessionTarget.js";
export { ModelPublisher } from "./ModelPublisher.js";
export type { ModelPublisherOptions } from "./ModelPublisher.js";

/* Security */
export { CLUSTER_TOKEN_ENV, loadClusterToken, loadTlsCredentials } from "./security.js";
export type { TlsCredentials, TlsFiles } from "./security.js";

/* Configuration */
export { BindAddress, ClusterConfigCodec, ClusterConfigReference, ClusterTimeouts, ClusterTls } from "./ClusterConfig.js";
export type { ClusterConfig } from "./ClusterConfig.js";

/* Wire types (monitored_session.v1): the messages a user builds, and the services to call with `clusterTransport` */
export { ClusterDefSchema, ServerDefSchema } from "./proto/gen/monitored_session/v1/cluster_pb.js";
export type { ClusterDef, JobDef, ServerDef } from "./proto/gen/monitored_session/v1/cluster_pb.js";
export { StatusService } from "./proto/gen/monitored_session/v1/status_pb.js";
export type { GetStatusResponse } from "./proto/gen/monitored_session/v1/status_pb.js";
export { CoordinationService } from "./proto/gen/monitored_session/v1/coordination_pb.js";
export { ModelService } from "./proto/gen/monitored_session/v1/model_pb.js";
export type { GetReadinessResponse } from "./proto/gen/monitored_session/v1/model_pb.js";

/* Coordination service */
export {
  defaultCoordinationTimeouts,
  ETCD_MIN_HEARTBEAT_TIMEOUT_MS,
  EtcdEndpoint,
  resolveCoordinationTimeouts,
  registerCoordinationBackend,
  coordinationBackend,
  coordinationBackendNames,
  backendSettings,
  serveTask,
  DEFAULT_COORDINATION_BACKEND,
  type BackendIssue,
  type BackendTask,
  type CoordinationBackendDefinition,
  type CoordinationConnection,
  type CoordinationHost,
  type HeartbeatFloor,
  newIncarnation,
  taskName,
  EmbeddedCoordinationService,
  EmbeddedCoordinationClient,
  inProcessTransport,
  hostCoordinationService,
  connectCoordinationService,
  grpcCoordinationTransport,
  EtcdCoordinationClient,
  type BarrierOptions,
  type ConnectOptions,
  type CoordinationClient,
  type CoordinationClientOptions,
  type KeyValue,
  type ReportOptions,
  type WaitOptions,
  type CoordinationBackend,
  type CoordinationTimeouts,
  type EmbeddedCoordinationServiceOptions,
  type EmbeddedTransport,
  type HostCoordinationServiceOptions,
  type HostedCoordinationService,
  type GrpcCoordinationTransport,
  type GrpcCoordinationTransportOptions,
  type EtcdCoordinationClientOptions,
} from "./coordination/index.js";

/* Collectives */
export {
  CollectiveReformedError,
  DEFAULT_COLLECTIVE_TIMEOUT_SECS,
  RankStopVote,
  TcpCollective,
  type Collective,
  type CollectiveBuffer,
  type CollectiveCallOptions,
  type CollectiveStats,
  type ReduceOp,
  type StopVote,
  type TcpCollectiveOptions,
} from "./collective/index.js";
