/**
 * `monitored-session/testing`: the test kit for unit-testing training loops and hooks with
 * fake sessions, a virtual clock and hook transcripts. See docs/testing.md.
 *
 * @module
 */

/* Clock */
export { VirtualClock, flush, type VirtualClockOptions } from "./VirtualClock.js";

/* Sessions */
export {
  FakeSession,
  FakeSessionCreator,
  type FakeOp,
  type FakeOpContext,
  type FakeRunCall,
  type FakeSessionOptions,
  type InjectAt,
} from "./FakeSession.js";

/* Hooks */
export { HookRecorder, type HookMethod, type HookRecorderOptions } from "./HookRecorder.js";
