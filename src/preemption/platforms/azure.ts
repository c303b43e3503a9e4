/**
 * Azure: Scheduled Events of the instance metadata service. A `Preempt` (spot eviction, at
 * least 30 s ahead) or `Terminate` event for this VM is a notice; its `NotBefore` is the
 * deadline. Once the save is done the event is acknowledged (`StartRequests`), so Azure goes
 * on at once instead of waiting out `NotBefore`.
 *
 * @module
 */

import * as E from "fp-ts/lib/Either.js";
import { pipe } from "fp-ts/lib/function.js";
import * as t from "io-ts";

import { decodeLines, JsonText, oneOf, Text } from "../../codec.js";
import { joinUrl, malformed, metadataRequest, unexpectedStatus, type MetadataServiceOptions } from "./metadataHttp.js";
import type { PlatformNotice, PlatformWatcher } from "./PlatformWatcher.js";

/** Options of {@link azureWatcher}. */
export interface AzureWatcherOptions extends MetadataServiceOptions {
  /**
   * This VM's name, to pick its events out of a scale set's. Default: asked once from the
   * metadata service (`instance/compute/name`) when an event names resources.
   */
  readonly vmName?: string | undefined;
}

/** The instance metadata service's address. */
export const AZURE_METADATA_URL = "http://169.254.169.254";

const EVENTS_PATH = "metadata/scheduledevents?api-version=2020-07-01";
const NAME_PATH = "metadata/instance/compute/name?api-version=2021-02-01&format=text";
const HEADERS = { Metadata: "true" };
/** The event types that end the VM (Reboot, Redeploy and Freeze keep or bring back the process' machine). */
const ENDING = new Set(["Preempt", "Terminate"]);

/**
 * A Scheduled Events document: the fields read here (Azure sends more). `Resources` and
 * `NotBefore` may be absent (no resources: the event is the whole scale set's; no time).
 */
const ScheduledEvents = JsonText.pipe(
  t.type({
    Events: t.array(
      t.type({
        EventId: Text,
        EventType: Text,
        Resources: oneOf("an array of strings or null", [t.array(Text), t.null, t.undefined]),
        NotBefore: oneOf("a string", [Text, t.undefined]),
      }),
      "an array of scheduled events",
    ),
  }),
  "Azure Scheduled Events",
);

type ScheduledEvent = t.TypeOf<typeof ScheduledEvents>["Events"][number];

/** The Azure watcher. */
export const azureWatcher = (options: AzureWatcherOptions = {}): PlatformWatcher => {
  const base = options.baseUrl ?? AZURE_METADATA_URL;
  let vmName = options.vmName;
  const ownName = async (signal: AbortSignal): Promise<string> => {
    if (vmName !== undefined) return vmName;
    const a = await metadataRequest(options.fetch, joinUrl(base, NAME_PATH), { headers: HEADERS }, signal);
    if (a.status !== 200) throw unexpectedStatus("Azure metadata instance/compute/name", a);
    const name = a.body.trim();
    if (name === "") throw malformed("Azure metadata instance/compute/name", a.body);
    vmName = name;
    return name;
  };
  return {
    platform: "azure",
    check: async (signal): Promise<PlatformNotice | undefined> => {
      const a = await metadataRequest(options.fetch, joinUrl(base, EVENTS_PATH), { headers: HEADERS }, signal);
      if (a.status !== 200) throw unexpectedStatus("Azure Scheduled Events", a);
      for (const e of parseEvents(a.body)) {
        if (!ENDING.has(e.EventType)) continue;
        const resources = e.Resources ?? [];
        if (resources.length > 0 && !resources.includes(await ownName(signal))) continue;
        const notBefore = e.NotBefore ?? "";
        const at = notBefore === "" ? Number.NaN : Date.parse(notBefore);
        return {
          platform: "azure",
          detail: `Scheduled Event ${e.EventType} ${e.EventId}${Number.isNaN(at) ? "" : ` not before ${notBefore}`}`,
          deadlineMs: Number.isNaN(at) ? undefined : at,
          eventId: e.EventId,
        };
      }
      return undefined;
    },
    acknowledge: async (notice, signal) => {
      if (notice.eventId === undefined) return;
      const body = JSON.stringify({ StartRequests: [{ EventId: notice.eventId }] });
      const a = await metadataRequest(options.fetch, joinUrl(base, EVENTS_PATH), { method: "POST", headers: { ...HEADERS, "Content-Type": "application/json" }, body }, signal);
      if (a.status < 200 || a.status > 299) throw unexpectedStatus("Azure Scheduled Events StartRequests", a);
    },
  };
};

/** The `Events` of a Scheduled Events document; throws, naming every problem's path, for anything else. */
const parseEvents = (body: string): readonly ScheduledEvent[] =>
  pipe(
    decodeLines(ScheduledEvents, body),
    E.match(
      (problems) => {
        throw malformed(`Azure Scheduled Events (${problems.join("; ")})`, body);
      },
      (doc) => doc.Events,
    ),
  );
