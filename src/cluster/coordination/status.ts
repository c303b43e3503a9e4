/**
 * Errors on the wire: a coordination error crosses a thread, process or network boundary as a
 * plain `{ code, message }` status (gRPC's model) and becomes the project's error class again
 * on the other side, so `instanceof UnavailableError` works whatever carried it.
 *
 * @module
 */

import * as t from "io-ts";
import { decodeOrThrow, JsonText, oneOf, refined, Text } from "../../codec.js";
import {
  type ClusterFailure,
  AbortedError,
  AlreadyExistsError,
  CancelledError,
  DataLossError,
  DeadlineExceededError,
  ErrorCode,
  FailedPreconditionError,
  InvalidArgumentError,
  NotFoundError,
  OpError,
  OutOfRangeError,
  ResourceExhaustedError,
  UnauthenticatedError,
  UnavailableError,
  UnimplementedError,
  UnknownError,
} from "../../errors.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** An error as data: a canonical code, its message, and what the failure is when it is a cluster's. */
export interface Status {
  readonly code: ErrorCode;
  readonly message: string;
  /** Carried as data by every transport (gRPC metadata, etcd JSON, a worker's port, a collective frame). */
  readonly failure?: ClusterFailure | undefined;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

const classes: Partial<Record<ErrorCode, new (message: string, options?: { failure?: ClusterFailure | undefined }) => OpError>> = {
  [ErrorCode.CANCELLED]: CancelledError,
  [ErrorCode.UNKNOWN]: UnknownError,
  [ErrorCode.INVALID_ARGUMENT]: InvalidArgumentError,
  [ErrorCode.DEADLINE_EXCEEDED]: DeadlineExceededError,
  [ErrorCode.NOT_FOUND]: NotFoundError,
  [ErrorCode.ALREADY_EXISTS]: AlreadyExistsError,
  [ErrorCode.RESOURCE_EXHAUSTED]: ResourceExhaustedError,
  [ErrorCode.FAILED_PRECONDITION]: FailedPreconditionError,
  [ErrorCode.ABORTED]: AbortedError,
  [ErrorCode.OUT_OF_RANGE]: OutOfRangeError,
  [ErrorCode.UNIMPLEMENTED]: UnimplementedError,
  [ErrorCode.UNAVAILABLE]: UnavailableError,
  [ErrorCode.DATA_LOSS]: DataLossError,
  [ErrorCode.UNAUTHENTICATED]: UnauthenticatedError,
};

/** The status of any thrown value: an `OpError` keeps its code and failure, anything else is UNKNOWN. */
export const toStatus = (error: unknown): Status =>
  error instanceof OpError
    ? { code: error.code, message: error.message, ...(error.failure === undefined ? {} : { failure: error.failure }) }
    : { code: ErrorCode.UNKNOWN, message: error instanceof Error ? error.message : String(error) };

/** The project's error class for a status (a plain `OpError` for codes without a class), with its failure. */
export const fromStatus = (status: Status): OpError => {
  const Class = classes[status.code];
  const options = { failure: status.failure };
  return Class === undefined ? new OpError(status.message, status.code, options) : new Class(status.message, options);
};

const TaskName = refined("a task name (a string)", (u): u is string => typeof u === "string" && u !== "");

/** A coordination backend's name, as registrations allow it (backend.ts). */
const BackendName = refined("a coordination backend's name", (u): u is string => typeof u === "string" && /^[a-z][a-z0-9-]{0,31}$/.test(u));

/** A {@link ClusterFailure} as another process wrote it. */
const ClusterFailureCodec: t.Type<ClusterFailure, ClusterFailure, unknown> = oneOf(
  "a cluster failure ({kind: declaredFailed|reported|preemption|peerLost|serviceGone, ...})",
  [
    t.exact(t.type({ kind: t.literal("declaredFailed"), tasks: t.readonlyArray(TaskName) })),
    t.exact(t.type({ kind: t.literal("reported"), reporter: TaskName, errorName: Text })),
    t.exact(t.type({ kind: t.literal("preemption"), reporter: TaskName, notice: Text })),
    t.exact(t.type({ kind: t.literal("peerLost"), task: TaskName })),
    t.exact(t.type({ kind: t.literal("serviceGone"), backend: BackendName })),
  ],
);

/** A status as JSON text: `{"code": <number>, "message": <string>, "failure"?: {...}}` (other fields are the writer's, dropped). */
const StatusJson = JsonText.pipe(
  t.exact(
    t.type({
      code: refined("an error code (a number)", (u): u is ErrorCode => typeof u === "number"),
      message: Text,
      failure: oneOf("a cluster failure ({kind: declaredFailed|reported|preemption|peerLost|serviceGone, ...}) or nothing", [ClusterFailureCodec, t.undefined]),
    }),
  ),
  "a JSON status",
);

/** A failure as metadata text (the gRPC transport's `x-ms-cluster-failure` header): base64url of its JSON. */
export const encodeFailureHeader = (failure: ClusterFailure): string => Buffer.from(JSON.stringify(failure), "utf8").toString("base64url");

/** A failure from its metadata text, or `DataLossError` naming `where` and every problem. */
export const decodeFailureHeader = (text: string, where: string): ClusterFailure => decodeFailureJson(Buffer.from(text, "base64url").toString("utf8"), (problems) => new DataLossError(`${where}: ${problems}`));

/** A failure from its JSON text (`undefined` for empty text), or `makeError(every problem)`. */
export const decodeFailureJson: {
  (text: string, makeError: (problems: string) => Error): ClusterFailure;
  (text: string | undefined, makeError: (problems: string) => Error): ClusterFailure | undefined;
} = (text: string | undefined, makeError: (problems: string) => Error): ClusterFailure =>
  (text === undefined || text === "" ? undefined : decodeOrThrow(JsonText.pipe(ClusterFailureCodec), text, makeError)) as ClusterFailure;

/** The embedded coordination service (hosted by the chief) is gone. */
export const EMBEDDED_SERVICE_GONE: ClusterFailure = { kind: "serviceGone", backend: "embedded" };

/** etcd cannot be reached. */
export const ETCD_GONE: ClusterFailure = { kind: "serviceGone", backend: "etcd" };

/** The metadata key that carries a status's failure over gRPC. */
export const FAILURE_HEADER = "x-ms-cluster-failure";

/** A status stored as JSON by another task (etcd backend): decoded, or `DataLossError` naming `where` and every problem's path. */
export const decodeStatusJson = (text: string, where: string): Status =>
  decodeOrThrow(StatusJson, text, (problems) => new DataLossError(`${where}: ${problems}`));

/**
 * `status` as the cluster holds it once `reporter` reported it: the message names the reporter
 * (for people), the failure says so (for code). A status that is a cluster's failure already (a
 * preemption, a rank that left the group) is relayed as it is; a preemption names `reporter`.
 */
export const reportedStatus = (status: Status, reporter: string): Status => ({
  code: status.code,
  message: `${status.message} (reported by task ${reporter})`,
  failure:
    status.failure === undefined
      ? { kind: "reported", reporter, errorName: fromStatus(status).name }
      : status.failure.kind === "preemption"
        ? { ...status.failure, reporter }
        : status.failure,
});

/** A fresh copy of an error (same class, message and failure), so each waiter gets its own stack. */
export const copyError = (error: unknown): OpError => fromStatus(toStatus(error));
