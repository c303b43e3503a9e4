/**
 * Coordination backends as registrations: where a cluster's coordination state lives (in the
 * chief's server, in etcd, in this process) is a {@link CoordinationBackendDefinition} that
 * registers itself by name. The `cluster:` section's `backend` key, its backend-only settings and
 * their rules, the task runtime's connection, and what a lost service means are all asked of the
 * registry; nothing outside a backend's own folder or file names it. The built-in backends
 * (`embedded`, `etcd`, `memory`) register in backends.ts.
 *
 * A registration is light: it declares its settings and rules, and loads its implementation
 * (gRPC, an etcd client) only when a task connects, so reading a configuration loads none of it.
 *
 * @example
 * ```ts
 * import { coordinationBackend } from "monitored-session/cluster";
 *
 * console.log(coordinationBackend("etcd").doc);
 * ```
 *
 * @module
 */

import type { ClusterSpec } from "../ClusterSpec.js";
import type { ServerOptions } from "../Server.js";
import { closest, type Fields, show } from "../../codec.js";
import { InvalidArgumentError, type OpError } from "../../errors.js";
import type { Logger } from "../../Logger.js";
import type { Clock } from "../../time/Clock.js";
import type { CoordinationClient, CoordinationClientOptions } from "./CoordinationClient.js";
import type { HeartbeatFloor } from "./CoordinationConfig.js";

export type { HeartbeatFloor } from "./CoordinationConfig.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A rule of a backend on the `cluster:` section that chose it: a problem at `key` (dotted, in the section). */
export interface BackendIssue {
  readonly key?: string;
  readonly message: string;
}

/** What a backend is handed when a task of a cluster connects to it. */
export interface BackendTask {
  /** The cluster (TF_CONFIG's). */
  readonly spec: ClusterSpec;
  /** The `cluster:` section, whose keys this backend declared in its `settings` are its own to decode. */
  readonly settings: Readonly<Record<string, unknown>>;
  /** This task's client options (its coordination name, every task, chief or not, timeouts, clock). */
  readonly clientOptions: CoordinationClientOptions;
  /**
   * This task's server: a backend that hosts its service on the task's server adds its service
   * to these; any other starts the server as given (see `serveTask` in backendSupport.ts).
   */
  readonly serverOptions: ServerOptions;
  readonly clock: Clock;
  readonly logger: Logger;
}

/**
 * What this task can do as the host of the coordination service (a backend whose service lives in
 * one task: the embedded service in the chief). A host tells the others through its own service
 * and keeps serving until they heard or left.
 */
export interface CoordinationHost {
  /** Reports `error` to the cluster through the hosted service (this task's client may be gone). */
  report(error: OpError, options?: { readonly final?: boolean }): void;
  /** Resolves once each of `tasks` has heard the final report (or left), or at `timeoutMs`, with who was not told. */
  waitUntilTold(tasks: readonly string[], timeoutMs: number): Promise<readonly string[]>;
  /** Whether the service holds a final report (this task's, or another's). */
  hasFinalReport(): boolean;
  /** Resolves once every other task left, or at `timeoutMs`, with who was still in the cluster. */
  waitUntilAllLeft(timeoutMs: number): Promise<readonly string[]>;
}

/** A task's connection to its backend: its client and its server, both started. */
export interface CoordinationConnection {
  readonly client: CoordinationClient;
  /** Present when this task hosts the service (then its exit ends the service). */
  readonly host?: CoordinationHost | undefined;
  /** Where the state lives, for the task's start line: `etcd at http://…, keys under …`. */
  readonly where: string;
  /** Stops this task's server (and a service it hosts). The client is closed before. */
  stop(): Promise<void>;
}

/** A coordination backend: register one with {@link registerCoordinationBackend}. */
export interface CoordinationBackendDefinition {
  /** The `cluster.backend` value that selects it: lowercase letters, digits and `-`. */
  readonly name: string;
  /** One sentence for the configuration reference: where the state lives. */
  readonly doc: string;
  /**
   * The `cluster:` keys only this backend reads (documented in the reference). Another backend's
   * section that gives one gets "is only used with backend: <name>".
   */
  readonly settings?: Fields;
  /** Its rules on a section that chose it (beyond each setting's own codec), e.g. a required endpoint. */
  readonly check?: (section: Readonly<Record<string, unknown>>) => readonly BackendIssue[];
  /** The least heartbeat timeout it keeps, if any: a lower `heartbeatTimeoutSecs` is refused. */
  readonly heartbeat?: HeartbeatFloor;
  /**
   * Whether the service lives in the chief's process: its loss (`serviceGone` naming this
   * backend) then means the chief is lost too, and a worker waits for a new chief.
   */
  readonly servedByChief: boolean;
  /**
   * Whether every task must run in one process (tasks of other processes cannot reach its
   * state): `run`, `launch` and `manifest`, which start a process per task, refuse it for a
   * cluster of more than one task.
   */
  readonly singleProcess?: boolean;
  /** Connects this task: starts its server, creates its (unregistered) client. */
  connect(task: BackendTask): Promise<CoordinationConnection>;
}

// ---------------------------------------------------------------------------------------------
// registry
// ---------------------------------------------------------------------------------------------

const backends = new Map<string, CoordinationBackendDefinition>();
let version = 0;

/** Keys that would describe the cluster itself in a `cluster:` section; they belong in TF_CONFIG (the section's codec refuses them). */
export const SPEC_KEYS = ["cluster", "clusterSpec", "spec", "jobs", "task", "tfConfig", "TF_CONFIG"] as const;

/**
 * The `cluster:` keys no backend may declare as its setting: the section's own (read by every
 * backend) and those that would describe the cluster itself ({@link SPEC_KEYS}).
 */
export const RESERVED_SECTION_KEYS: readonly string[] = ["backend", "tokenFile", "tls", "bindAddress", "timeouts", "dataParallel", "collectiveTimeoutSecs", ...SPEC_KEYS];

/** The backend a section without `backend:` uses. */
export const DEFAULT_COORDINATION_BACKEND = "embedded";

/**
 * Registers `backend` under its name (once per name: a second registration is an error naming
 * the first). A backend's settings may not reuse a key of another backend's, nor one of
 * {@link RESERVED_SECTION_KEYS}. Register before the configuration is read: in `run`, from a
 * module the configuration's `plugins:` lists.
 *
 * @throws InvalidArgumentError for a bad or taken name, or a taken setting.
 */
export const registerCoordinationBackend = (backend: CoordinationBackendDefinition): void => {
  if (!/^[a-z][a-z0-9-]{0,31}$/.test(backend.name)) {
    throw new InvalidArgumentError(`registerCoordinationBackend: name ${JSON.stringify(backend.name)} must be 1-32 lowercase letters, digits or "-", starting with a letter`);
  }
  if (backends.has(backend.name)) throw new InvalidArgumentError(`registerCoordinationBackend: a backend named ${backend.name} is registered already; choose another name`);
  for (const key of Object.keys(backend.settings ?? {})) {
    if (RESERVED_SECTION_KEYS.includes(key)) throw new InvalidArgumentError(`registerCoordinationBackend: setting ${key} of backend ${backend.name} is a key of the cluster: section itself; prefix it with the backend's name`);
    const owner = [...backends.values()].find((b) => Object.hasOwn(b.settings ?? {}, key));
    if (owner !== undefined) throw new InvalidArgumentError(`registerCoordinationBackend: setting ${key} of backend ${backend.name} is backend ${owner.name}'s already; prefix it with the backend's name`);
  }
  backends.set(backend.name, backend);
  version += 1;
};

/**
 * The backend registered as `name`.
 *
 * @throws InvalidArgumentError naming the registered backends (and the likely one for a typo).
 */
export const coordinationBackend = (name: string = DEFAULT_COORDINATION_BACKEND): CoordinationBackendDefinition => {
  const found = backends.get(name);
  if (found !== undefined) return found;
  throw new InvalidArgumentError(`unknown coordination backend ${JSON.stringify(name)}${hint(name)}; the registered ones are ${coordinationBackendNames().join(", ")}`);
};

/** The registered backends' names, in registration order. */
export const coordinationBackendNames = (): readonly string[] => [...backends.keys()];

/** The registered backends, in registration order. */
export const coordinationBackends = (): readonly CoordinationBackendDefinition[] => [...backends.values()];

/** Counts registrations: a codec built from the registry rebuilds when it changed. */
export const coordinationBackendsVersion = (): number => version;

/** Whether a `serviceGone` failure of backend `name` means its chief is lost (the service lived in it). */
export const servedByChief = (name: string): boolean => backends.get(name)?.servedByChief === true;

/**
 * The settings `backend` declared, read from `section` and each checked with its codec (a
 * section that did not come through the configuration's codec is checked here too).
 *
 * @throws InvalidArgumentError naming the bad setting and what it must be.
 */
export const backendSettings = (backend: CoordinationBackendDefinition, section: Readonly<Record<string, unknown>>): Readonly<Record<string, unknown>> => {
  const out: Record<string, unknown> = {};
  for (const [key, field] of Object.entries(backend.settings ?? {})) {
    const value = section[key];
    if (value === undefined) continue;
    if (!field.codec.is(value)) throw new InvalidArgumentError(`cluster.${key}: expected ${field.codec.name}, got ${show(value)}`);
    out[key] = value;
  }
  return out;
};

/**
 * Why backend `name` cannot serve `tasks` tasks that `starter` starts one process each (`run`,
 * `launch`, a manifest's pods), or `undefined` when it can.
 */
export const processPerTaskProblem = (name: string | undefined, tasks: number, starter: string): string | undefined => {
  const backend = backends.get(name ?? DEFAULT_COORDINATION_BACKEND);
  if (backend?.singleProcess !== true || tasks <= 1) return undefined;
  const others = coordinationBackends()
    .filter((b) => b.singleProcess !== true)
    .map((b) => b.name);
  return `cluster.backend ${backend.name} keeps the coordination state ${backend.doc.split(",")[0]}, and ${starter} starts each of the ${tasks} tasks in a process of its own: use ${others.join(" or ")}, or start the tasks with startTask() in one program`;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const hint = (name: string): string => {
  const near = closest(name, coordinationBackendNames());
  return near === undefined ? "" : ` (did you mean ${near}?)`;
};
