/**
 * Named error classes mirroring TensorFlow's `tf.errors` and the Python built-ins that its
 * session machinery raises. Every class sets `name`, so `instanceof` and `err.name` both work.
 *
 * @module
 */

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Canonical status codes, as in TensorFlow's `error_codes.proto`. */
export const ErrorCode = {
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  DATA_LOSS: 15,
  UNAUTHENTICATED: 16,
} as const;

/** One of {@link ErrorCode}'s values. */
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/**
 * What a cluster failure is, beside its code and its words: set where the failure is decided (the
 * coordination service, either backend, the collective) and carried with the status across every
 * boundary, so that recovery decides on data, never on a message's text.
 *
 * - `declaredFailed`: the coordination service declared `tasks` failed (no heartbeat within the
 *   heartbeat timeout, a liveness lease expired, a task restarted under a new incarnation).
 * - `reported`: `reporter` reported an error to the cluster (its class `errorName`, the status's
 *   code); every task raises that class.
 * - `preemption`: `reporter` got a termination notice (`notice`, e.g. `SIGTERM`) and told the cluster.
 * - `peerLost`: a rank of a replica group lost its link to `task` (it died, left, or the network
 *   between them failed); the coordination service says which, shortly after.
 * - `serviceGone`: the coordination service of `backend` is gone: the `embedded` one (hosted by
 *   the chief) stopped, restarted or cannot be reached, or `etcd` cannot be reached. Whether
 *   that means the chief is lost is the backend's to say (`servedByChief`).
 */
export type ClusterFailure =
  | { readonly kind: "declaredFailed"; readonly tasks: readonly string[] }
  | { readonly kind: "reported"; readonly reporter: string; readonly errorName: string }
  | { readonly kind: "preemption"; readonly reporter: string; readonly notice: string }
  | { readonly kind: "peerLost"; readonly task: string }
  | { readonly kind: "serviceGone"; readonly backend: string };

/** Options of an {@link OpError}'s constructor. */
export interface OpErrorOptions {
  readonly cause?: unknown;
  /** What the failure is, when it is a cluster's (see {@link ClusterFailure}). */
  readonly failure?: ClusterFailure | undefined;
}

/**
 * Base class of TensorFlow-style operation errors (`tf.errors.OpError`).
 * Carries a canonical {@link ErrorCode}, and for a cluster's failure its {@link ClusterFailure}.
 */
export class OpError extends Error {
  override readonly name: string = "OpError";
  /** What the failure is, when it is a cluster's: decided where it happened, never parsed from the message. */
  readonly failure: ClusterFailure | undefined;
  constructor(
    message: string,
    readonly code: ErrorCode = ErrorCode.UNKNOWN,
    options?: OpErrorOptions,
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.failure = options?.failure;
  }
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

const opError = <N extends string>(name: N, code: ErrorCode) =>
  class extends OpError {
    override readonly name: string = name;
    constructor(message: string = name, options?: OpErrorOptions) {
      super(message, code, options);
    }
  };

/** The input is exhausted. A clean end of training: hooks' `end()` still runs. */
export class OutOfRangeError extends opError("OutOfRangeError", ErrorCode.OUT_OF_RANGE) {}
/** The operation was aborted (e.g. a preempted worker). `MonitoredSession` recovers from it. */
export class AbortedError extends opError("AbortedError", ErrorCode.ABORTED) {}
/** The service is temporarily unavailable. `MonitoredSession` recovers from it. */
export class UnavailableError extends opError("UnavailableError", ErrorCode.UNAVAILABLE) {}
/** A deadline passed, e.g. `waitForSession` gave up waiting for the chief. */
export class DeadlineExceededError extends opError(
  "DeadlineExceededError",
  ErrorCode.DEADLINE_EXCEEDED,
) {}
/** The system is not in a state the operation requires (e.g. an uninitialized variable). */
export class FailedPreconditionError extends opError(
  "FailedPreconditionError",
  ErrorCode.FAILED_PRECONDITION,
) {}
/** The operation was cancelled. */
export class CancelledError extends opError("CancelledError", ErrorCode.CANCELLED) {}
/** An argument or input is invalid. */
export class InvalidArgumentError extends opError(
  "InvalidArgumentError",
  ErrorCode.INVALID_ARGUMENT,
) {}
/**
 * The replicas of a data-parallel group build different models (a layer, shape or dtype differs):
 * a configuration to fix before any update. An `InvalidArgumentError`; reported to the cluster it
 * keeps its name in the failure (`failure.errorName`), so every task can tell it apart without
 * reading the message.
 */
export class ModelMismatchError extends InvalidArgumentError {
  override readonly name: string = "ModelMismatchError";
}
/** Something was not found (a file, a checkpoint, an op name). */
export class NotFoundError extends opError("NotFoundError", ErrorCode.NOT_FOUND) {}
/** Something already exists. */
export class AlreadyExistsError extends opError("AlreadyExistsError", ErrorCode.ALREADY_EXISTS) {}
/** An unknown error. */
export class UnknownError extends opError("UnknownError", ErrorCode.UNKNOWN) {}
/** Unrecoverable data loss or corruption (e.g. a checksum mismatch). */
export class DataLossError extends opError("DataLossError", ErrorCode.DATA_LOSS) {}
/** The operation is not implemented. */
export class UnimplementedError extends opError("UnimplementedError", ErrorCode.UNIMPLEMENTED) {}
/** An internal invariant broke (e.g. a server asked to serve a job its cluster does not define). */
export class InternalError extends opError("InternalError", ErrorCode.INTERNAL) {}
/** The caller did not prove who it is (e.g. a cluster call without the right token). */
export class UnauthenticatedError extends opError("UnauthenticatedError", ErrorCode.UNAUTHENTICATED) {}
/** A resource (memory, disk, quota) is exhausted. */
export class ResourceExhaustedError extends opError(
  "ResourceExhaustedError",
  ErrorCode.RESOURCE_EXHAUSTED,
) {}

/** Python's `ValueError`: an argument has the right type but an invalid value. */
export class ValueError extends Error {
  override readonly name: string = "ValueError";
}

/** Python's `RuntimeError`: the call is not valid in the current state. */
export class RuntimeError extends Error {
  override readonly name: string = "RuntimeError";
}

/**
 * Python's `StopIteration`. `StepContext.requestStop()` throws it; like `OutOfRangeError` it
 * is a clean exit from `withSession`.
 */
export class StopIteration extends Error {
  override readonly name: string = "StopIteration";
}

/** Raised by `NanTensorHook` when the loss is NaN. The message is TensorFlow's. */
export class NanLossDuringTrainingError extends RuntimeError {
  override readonly name: string = "NanLossDuringTrainingError";
  constructor(message = "NaN loss during training.") {
    super(message);
  }
}

/**
 * A TensorFlow.js backend was requested whose package is missing (or of another version than
 * `@tensorflow/tfjs`). The message is one line that names the package and the install command.
 */
export class BackendNotInstalledError extends Error {
  override readonly name: string = "BackendNotInstalledError";
  constructor(
    message: string,
    /** The command that installs the missing package. */
    readonly installCommand: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** `true` for the errors `MonitoredSession` recovers from (TensorFlow's `_PREEMPTION_ERRORS`). */
export const isPreemptionError = (e: unknown): e is AbortedError | UnavailableError =>
  e instanceof AbortedError || e instanceof UnavailableError;

/** `true` for the errors that end a `with`-style scope cleanly (OutOfRange, StopIteration). */
export const isCleanExit = (e: unknown): boolean =>
  e instanceof OutOfRangeError || e instanceof StopIteration;

/**
 * The {@link ClusterFailure} that `e` or one of its causes carries (the nearest), if any: a
 * collective's or a session's error wraps the coordination service's.
 */
export const clusterFailureOf = (e: unknown): ClusterFailure | undefined => {
  let c: unknown = e;
  for (let depth = 0; c instanceof Error && depth < 8; depth++, c = c.cause) {
    if (c instanceof OpError && c.failure !== undefined) return c.failure;
  }
  return undefined;
};

/** The error in `e`'s chain of causes (`e` included) that carries a {@link ClusterFailure}, if any. */
export const clusterFailureErrorOf = (e: unknown): OpError | undefined => {
  let c: unknown = e;
  for (let depth = 0; c instanceof Error && depth < 8; depth++, c = c.cause) {
    if (c instanceof OpError && c.failure !== undefined) return c;
  }
  return undefined;
};
