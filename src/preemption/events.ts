/**
 * The preemption handler's session events, declared beside it by augmentation of
 * `SessionEventMap` (the core declares only its own): `PreemptionCheckpointHandler.events$`
 * emits them, and `session.forwardEvents(handler)` puts them on a monitored session's stream.
 * Importing anything of `monitored-session/preemption` brings them into `SessionEvent`.
 *
 * @module
 */

// A type-only module: the augmentation below needs the core's map in scope.
import type {} from "../events/SessionEvent.js";

declare module "../events/SessionEvent.js" {
  interface SessionEventMap {
    /** A termination notice arrived (a signal, a watched file...); a checkpoint follows at the next step boundary. */
    terminationNoticed: { readonly source: string };
    /**
     * The preemption checkpoint was saved before run `run + 1` (at `globalStep` when known);
     * `path` is `null` when a custom save function saved it. `exit`: the process exits next.
     */
    preemptionCheckpointSaved: {
      readonly run: number;
      readonly globalStep?: number | undefined;
      readonly path: string | null;
      readonly exit: boolean;
    };
    /** The preemption checkpoint did not finish within the grace period. */
    gracePeriodExceeded: { readonly run: number; readonly message: string };
    /**
     * Multi-worker: a task claimed the preemption (TensorFlow's `TERMINATED_WORKER`); `leader`
     * proposes the run to save at, `task` is this one (a later claimant leaves it to the leader).
     */
    preemptionClaimed: { readonly leader: string; readonly task: string };
    /**
     * Multi-worker: a task that got no notice of its own heard `claimant`'s claim (its proposal, or
     * the claim a data-parallel stop vote writes).
     */
    preemptionClaimHeard: { readonly claimant: string };
    /** Multi-worker: every task saves at run `run` (round 1 is a grace period's last save); `exit` after it. */
    preemptionStepAgreed: { readonly run: number; readonly round: number; readonly exit: boolean; readonly leader: boolean };
    /** Multi-worker, on the leader: every live task acknowledged the agreed run. */
    preemptionAcknowledged: { readonly run: number; readonly round: number; readonly tasks: number };
    /** The handler exits the process with `code`, after a preemption checkpoint or (`saved: false`) without one. */
    preemptionExiting: { readonly code: number; readonly saved: boolean; readonly reason: string };
  }
}
