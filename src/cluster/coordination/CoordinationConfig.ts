/**
 * The coordination service's timeouts, their defaults (TensorFlow's where they make sense) and
 * their validation. Every value is configurable; a bad one is a one-line
 * `InvalidArgumentError` that names the setting and the fix.
 *
 * @module
 */

import { InvalidArgumentError } from "../../errors.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Which store holds the coordination state: a registered backend's name (`embedded`, `etcd`, `memory`, or a plugin's). */
export type CoordinationBackend = string;

/** The least heartbeat timeout a backend can keep, and why (shown in the error). */
export interface HeartbeatFloor {
  readonly minHeartbeatTimeoutMs: number;
  /** Why, in a few words: "etcd leases are whole seconds". */
  readonly why: string;
}

/** Every timeout of the coordination service, in milliseconds. */
export interface CoordinationTimeouts {
  /** How often a task proves it is alive (TensorFlow: timeout / 2 = 5 s). */
  readonly heartbeatIntervalMs: number;
  /** A task silent for this long is declared failed (TensorFlow: 10 s). */
  readonly heartbeatTimeoutMs: number;
  /** How long `connect()` waits for the chief and for every task to register (TensorFlow: 1 h). */
  readonly registrationTimeoutMs: number;
  /** A barrier's timeout when the call gives none (TensorFlow has no default; 10 min). */
  readonly barrierTimeoutMs: number;
  /** A blocking `get`'s timeout when the call gives none (TensorFlow waits forever; 1 h). */
  readonly getTimeoutMs: number;
  /** How long the shutdown barrier waits for the other tasks (TensorFlow: 10 s). */
  readonly shutdownTimeoutMs: number;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** The defaults: the table in docs/distributed.md, "Coordination service". */
export const defaultCoordinationTimeouts: CoordinationTimeouts = Object.freeze({
  heartbeatIntervalMs: 5_000,
  heartbeatTimeoutMs: 10_000,
  registrationTimeoutMs: 3_600_000,
  barrierTimeoutMs: 600_000,
  getTimeoutMs: 3_600_000,
  shutdownTimeoutMs: 10_000,
});

/**
 * The defaults overridden by `overrides`, validated for `backend` (its heartbeat floor, if it
 * has one: see `CoordinationBackendDefinition.heartbeat`). When only the timeout is given, the
 * interval follows it (timeout / 2, as in TensorFlow).
 *
 * @throws InvalidArgumentError naming the bad setting and what it must be.
 */
export const resolveCoordinationTimeouts = (
  overrides: Partial<CoordinationTimeouts> = {},
  backend: { readonly name: string; readonly heartbeat?: HeartbeatFloor | undefined } = { name: "embedded" },
): CoordinationTimeouts => {
  // A name from plain JavaScript would skip the backend's heartbeat floor without a word.
  if (typeof backend !== "object" || backend === null) {
    throw new InvalidArgumentError(`resolveCoordinationTimeouts: pass the backend's registration (coordinationBackend(${JSON.stringify(backend)})), not its name`);
  }
  const timeoutMs = overrides.heartbeatTimeoutMs ?? defaultCoordinationTimeouts.heartbeatTimeoutMs;
  const t: CoordinationTimeouts = {
    ...defaultCoordinationTimeouts,
    heartbeatIntervalMs: timeoutMs / 2,
    ...overrides,
  };
  for (const [name, value] of Object.entries(t)) {
    if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
      throw new InvalidArgumentError(
        `coordination timeout ${name}: expected a positive number of milliseconds, got ${String(value)}`,
      );
    }
  }
  if (t.heartbeatIntervalMs >= t.heartbeatTimeoutMs) {
    throw new InvalidArgumentError(
      `coordination timeout heartbeatIntervalMs (${t.heartbeatIntervalMs}) must be less than heartbeatTimeoutMs (${t.heartbeatTimeoutMs}); use at most half of it`,
    );
  }
  const floor = backend.heartbeat;
  if (floor !== undefined && t.heartbeatTimeoutMs < floor.minHeartbeatTimeoutMs) {
    throw new InvalidArgumentError(
      `coordination timeout heartbeatTimeoutMs (${t.heartbeatTimeoutMs}) is below the ${backend.name} backend's minimum of ${floor.minHeartbeatTimeoutMs} ms (${floor.why}); set it to ${floor.minHeartbeatTimeoutMs} or more`,
    );
  }
  return t;
};
