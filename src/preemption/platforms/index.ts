/**
 * Platform notice watchers and {@link createPlatformWatcher}, which turns a
 * `preemption.platform` value into one.
 *
 * @module
 */

import type { Clock } from "../../time/Clock.js";
import { defaultLogger, type Logger } from "../../Logger.js";
import { awsWatcher } from "./aws.js";
import { azureWatcher } from "./azure.js";
import { detectPlatform } from "./detectPlatform.js";
import { gceWatcher } from "./gce.js";
import { kubernetesWatcher } from "./kubernetes.js";
import type { FetchFn } from "./metadataHttp.js";
import type { PlatformName, PlatformWatcher, PreemptionPlatform } from "./PlatformWatcher.js";

export { PREEMPTION_PLATFORMS, type PlatformName, type PlatformNotice, type PlatformWatcher, type PreemptionPlatform } from "./PlatformWatcher.js";
export { awsWatcher, AWS_METADATA_URL, type AwsWatcherOptions } from "./aws.js";
export { azureWatcher, AZURE_METADATA_URL, type AzureWatcherOptions } from "./azure.js";
export { detectPlatform, PLATFORM_EVIDENCE_FILES, type DetectedPlatform, type DetectPlatformOptions } from "./detectPlatform.js";
export { gceWatcher, GCE_MAINTENANCE_NOTICE_SECS, GCE_METADATA_URL, GCE_PREEMPTION_NOTICE_SECS, type GceWatcherOptions } from "./gce.js";
export { kubernetesWatcher, TERMINATION_GRACE_PERIOD_ENV, type KubernetesWatcherOptions } from "./kubernetes.js";
export type { FetchFn, MetadataServiceOptions } from "./metadataHttp.js";

/** Options of {@link createPlatformWatcher}. */
export interface CreatePlatformWatcherOptions {
  /** The environment (default `process.env`): Kubernetes variables and metadata address overrides. */
  readonly env?: Readonly<Record<string, string | undefined>> | undefined;
  /** Where `auto` reads its evidence files (default `/`). */
  readonly root?: string | undefined;
  /** The metadata service's base URL for every platform (tests: a fake server on loopback). */
  readonly baseUrl?: string | undefined;
  readonly fetch?: FetchFn | undefined;
  readonly clock?: Clock | undefined;
  readonly logger?: Logger | undefined;
}

/**
 * The watcher for a `preemption.platform` value: `undefined` for `signals`, and for `auto` when
 * no platform is recognized (logged). The metadata address can be overridden with
 * `GCE_METADATA_HOST` (GCE) and `AWS_EC2_METADATA_SERVICE_ENDPOINT` (AWS), the variables
 * those platforms' own clients honour.
 */
export const createPlatformWatcher = (platform: PreemptionPlatform, options: CreatePlatformWatcherOptions = {}): PlatformWatcher | undefined => {
  const logger = options.logger ?? defaultLogger;
  const env = options.env ?? process.env;
  let name: PlatformName;
  if (platform === "signals") return undefined;
  if (platform === "auto") {
    const found = detectPlatform({ env, root: options.root });
    if (found === undefined) {
      logger.info("preemption.platform auto: no cloud platform recognized (no DMI, hypervisor or Kubernetes evidence); watching signals only.");
      return undefined;
    }
    logger.info(`preemption.platform auto: ${found.platform} (${found.evidence}).`);
    name = found.platform;
  } else {
    name = platform;
  }
  const common = { fetch: options.fetch, clock: options.clock };
  switch (name) {
    case "gce": {
      const host = env["GCE_METADATA_HOST"];
      return gceWatcher({ ...common, baseUrl: options.baseUrl ?? (host === undefined || host === "" ? undefined : `http://${host}`) });
    }
    case "aws": {
      const endpoint = env["AWS_EC2_METADATA_SERVICE_ENDPOINT"];
      return awsWatcher({ ...common, baseUrl: options.baseUrl ?? (endpoint === undefined || endpoint === "" ? undefined : endpoint) });
    }
    case "azure":
      return azureWatcher({ fetch: options.fetch, baseUrl: options.baseUrl });
    case "kubernetes":
      return kubernetesWatcher({ env });
  }
};
