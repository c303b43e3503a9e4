/**
 * Google Compute Engine: the metadata server's `instance/preempted` (a spot or preemptible VM
 * being reclaimed, about 30 s ahead) and `instance/maintenance-event`
 * (`TERMINATE_ON_HOST_MAINTENANCE`, the notice TensorFlow's GCE watcher acts on).
 *
 * @module
 */

import { systemClock, type Clock } from "../../time/Clock.js";
import { joinUrl, malformed, metadataRequest, unexpectedStatus, type MetadataServiceOptions } from "./metadataHttp.js";
import type { PlatformNotice, PlatformWatcher } from "./PlatformWatcher.js";

/** Options of {@link gceWatcher}. */
export interface GceWatcherOptions extends MetadataServiceOptions {
  readonly clock?: Clock | undefined;
}

/** The metadata server's address (`GCE_METADATA_HOST` overrides it in {@link createPlatformWatcher}). */
export const GCE_METADATA_URL = "http://169.254.169.254";

/** Seconds a spot or preemptible VM gets between the notice and the stop. */
export const GCE_PREEMPTION_NOTICE_SECS = 30;
/** Seconds of notice before a host maintenance that terminates the VM (at least one minute). */
export const GCE_MAINTENANCE_NOTICE_SECS = 60;

/** The GCE watcher. */
export const gceWatcher = (options: GceWatcherOptions = {}): PlatformWatcher => {
  const base = options.baseUrl ?? GCE_METADATA_URL;
  const clock = options.clock ?? systemClock;
  const get = async (key: string, signal: AbortSignal): Promise<string> => {
    const url = joinUrl(base, `computeMetadata/v1/instance/${key}`);
    const a = await metadataRequest(options.fetch, url, { headers: { "Metadata-Flavor": "Google" } }, signal);
    if (a.status !== 200) throw unexpectedStatus(`GCE metadata ${key}`, a);
    return a.body.trim();
  };
  const notice = (detail: string, secs: number): PlatformNotice => ({ platform: "gce", detail, deadlineMs: clock.now() + secs * 1000 });
  return {
    platform: "gce",
    check: async (signal) => {
      const preempted = await get("preempted", signal);
      if (preempted === "TRUE") return notice("instance/preempted is TRUE (the spot VM is being reclaimed)", GCE_PREEMPTION_NOTICE_SECS);
      if (preempted !== "FALSE") throw malformed("GCE metadata instance/preempted (expected TRUE or FALSE)", preempted);
      const event = await get("maintenance-event", signal);
      if (event === "TERMINATE_ON_HOST_MAINTENANCE") return notice("instance/maintenance-event is TERMINATE_ON_HOST_MAINTENANCE", GCE_MAINTENANCE_NOTICE_SECS);
      // NONE, MIGRATE_ON_HOST_MAINTENANCE (a live migration keeps the process), or a newer value.
      if (!/^[A-Z][A-Z_]*$/.test(event)) throw malformed("GCE metadata instance/maintenance-event", event);
      return undefined;
    },
  };
};
