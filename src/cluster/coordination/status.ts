/**
 * Errors on the wire: a coordination error crosses a thread, process or network boundary as a
 * plain `{ code, message }` status (gRPC's model) and becomes the project's error class again
 * on the other side, so `instanceof UnavailableError` works whatever carried it.
 *
 * @module
 */

import * as t from "io-ts";
import { decodeOrThrow, JsonText, refined, Text } from "../../codec.js";
import {
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

/** An error as data: a canonical code and its message. */
export interface Status {
  readonly code: ErrorCode;
  readonly message: string;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

const classes: Partial<Record<ErrorCode, new (message: string) => OpError>> = {
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

/** The status of any thrown value: an `OpError` keeps its code, anything else is UNKNOWN. */
export const toStatus = (error: unknown): Status =>
  error instanceof OpError
    ? { code: error.code, message: error.message }
    : { code: ErrorCode.UNKNOWN, message: error instanceof Error ? error.message : String(error) };

/** The project's error class for a status (a plain `OpError` for codes without a class). */
export const fromStatus = (status: Status): OpError => {
  const Class = classes[status.code];
  return Class === undefined ? new OpError(status.message, status.code) : new Class(status.message);
};

/** A status as JSON text: `{"code": <number>, "message": <string>}` (other fields are the writer's, dropped). */
const StatusJson = JsonText.pipe(
  t.exact(
    t.type({
      code: refined("an error code (a number)", (u): u is ErrorCode => typeof u === "number"),
      message: Text,
    }),
  ),
  "a JSON status",
);

/** A status stored as JSON by another task (etcd backend): decoded, or `DataLossError` naming `where` and every problem's path. */
export const decodeStatusJson = (text: string, where: string): Status =>
  decodeOrThrow(StatusJson, text, (problems) => new DataLossError(`${where}: ${problems}`));

/** A fresh copy of an error (same class and message), so each waiter gets its own stack. */
export const copyError = (error: unknown): OpError => fromStatus(toStatus(error));
