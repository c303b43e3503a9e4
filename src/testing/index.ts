/**
 * `monitored-session/testing`: the test kit for unit-testing training loops and hooks with
 * fake sessions, a virtual clock, hook transcripts, an in-memory checkpoint saver, a
 * recording logger and an event recorder. See docs/testing.md.
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

/* Checkpoints */
export { InMemorySaver, type InMemorySave, type InMemorySaverOptions } from "./InMemorySaver.js";

/* Logging and events */
export { RecordingLogger, type LogEntry } from "./RecordingLogger.js";
export { EventRecorder } from "./EventRecorder.js";

/* Hooks */
export { HookRecorder, type HookMethod, type HookRecorderOptions } from "./HookRecorder.js";
