/**
 * Creates each session of a monitored session (TensorFlow's `_CoordinatedSessionCreator`):
 * the raw session from the user's `SessionCreator`, a coordinator from the factory, hooks'
 * `afterCreateSession`, the `sessionCreated` event, and the coordinated and hooked layers
 * around it.
 *
 * @module
 */

import type { Clock } from "../time/Clock.js";
import type { Coordinator, CoordinatorFactory } from "../coordinator/Coordinator.js";
import type { Logger } from "../Logger.js";
import type { Session } from "../session/Session.js";
import type { SessionCreator } from "../creation/SessionCreators.js";
import type { SessionRunHook } from "../hook/SessionRunHook.js";
import { CoordinatedSession } from "./CoordinatedSession.js";
import { HookedSession } from "./HookedSession.js";
import type { HookTimingSwitch } from "./HookTimingSwitch.js";
import { isPromiseLike } from "../util/promise.js";
import type { SessionEventStream } from "./SessionEventStream.js";

/** TensorFlow's `_CoordinatedSessionCreator`. */
export class CoordinatedSessionCreator {
  /** The raw session and coordinator of the last session created, until {@link release}. */
  tfSess: Session | undefined;
  coord: Coordinator | undefined;
  private created = 0;

  constructor(
    private readonly inner: SessionCreator,
    private readonly hooks: readonly SessionRunHook[],
    private readonly stopGracePeriodSecs: number,
    private readonly clock: Clock,
    private readonly logger: Logger,
    private readonly timing: HookTimingSwitch,
    private readonly coordinatorFactory: CoordinatorFactory,
    /** The monitored session's event stream: `sessionCreated`, and every run's events. */
    private readonly events: SessionEventStream | undefined,
  ) {}

  /** Forgets the last session created (the monitored session closed it). */
  release(): void {
    this.tfSess = undefined;
    this.coord = undefined;
  }

  async createSession(): Promise<CoordinatedSession> {
    const tfSess = await this.inner.createSession({ logger: this.logger });
    const coord = this.coordinatorFactory({ cleanStopExceptionTypes: [], clock: this.clock, logger: this.logger });
    this.tfSess = tfSess;
    this.coord = coord;
    for (const h of this.hooks) {
      const r = h.afterCreateSession?.(tfSess, coord);
      if (isPromiseLike(r)) await r;
    }
    const recovery = this.created++;
    const restoredFrom = this.inner.restoredFrom ?? null;
    this.events?.created({ type: "sessionCreated", time: this.clock.now(), session: tfSess, coord, recovery, restoredFrom });
    const hooked = new HookedSession(tfSess, this.hooks, this.events, this.clock, this.timing);
    return new CoordinatedSession(hooked, coord, this.stopGracePeriodSecs);
  }

  emitAborted(error: unknown): void {
    this.events?.aborted(error, this.clock.now());
  }
}

