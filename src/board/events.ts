/**
 * The board's events, declared beside it by augmentation of `SessionEventMap` (the core declares
 * only its own). A running board ({@link Board}, `startBoard`) emits them on its `events$`, with
 * its lines as `log` events (`source: "board"`); importing `startBoard` brings them into
 * `SessionEvent`.
 *
 * @module
 */

import type { SessionEventOf } from "../events/SessionEvent.js";

declare module "../events/SessionEvent.js" {
  interface SessionEventMap {
    /**
     * The board met something it could not serve as written, went on, and wrote `message` as a
     * `warn` line beside this event. `kind`: `reader` (a file of the logdir is not an event
     * file, or a record is corrupt: skipped), `thinned` (images, histograms or text thinned out
     * to stay within the per-tag budget), `timelines` (a profiler timeline refused),
     * `goodput` (a run's goodput logs cannot be read), `request` (a request failed with 500).
     */
    boardIssue: { readonly kind: BoardIssueKind; readonly message: string };
  }
}

/** What a `boardIssue` is about (see the event). */
export type BoardIssueKind = "reader" | "thinned" | "timelines" | "goodput" | "request";

/** The board's events on its `events$`. */
export type BoardEvent = SessionEventOf<"boardIssue"> | SessionEventOf<"log">;
