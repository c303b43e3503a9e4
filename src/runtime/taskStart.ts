/**
 * The first steps of a task's start, one function each (clusterRuntime.ts `startClusterTask`
 * runs them in order, then builds the task object):
 *
 * 1. {@link taskPlan}: who the task is and the options of its client and server (its token,
 *    TLS, timeouts), from the `cluster:` section;
 * 2. {@link connectTask}: the backend's connection (backend.ts): the task's server serving, its
 *    client made;
 * 3. {@link StartLeave}: a termination notice while the task starts ends the start, after
 *    telling the others once every task registered;
 * 4. {@link registerTask}: registration with the coordination service, under the leave; the
 *    collective join (collectiveJoin.ts `joinCollective`) runs under it too.
 *
 * @module
 */

import type { ClusterConfig } from "../cluster/ClusterConfig.js";
import { coordinationBackend, type CoordinationConnection, type CoordinationHost } from "../cluster/coordination/backends.js";
import type { CoordinationClient, CoordinationClientOptions } from "../cluster/coordination/CoordinationClient.js";
import { type CoordinationTimeouts, defaultCoordinationTimeouts } from "../cluster/coordination/CoordinationConfig.js";
import { taskName, taskNamesOf } from "../cluster/coordination/identity.js";
import { loadClusterToken } from "../cluster/security.js";
import type { ServerOptions, ServiceRegistration } from "../cluster/Server.js";
import { CancelledError, InvalidArgumentError, UnauthenticatedError, UnknownError } from "../errors.js";
import type { Logger } from "../Logger.js";
import type { Clock } from "../time/Clock.js";
import type { ClusterTask } from "./clusterTask.js";
import { connectCurrent, timeoutsOf } from "./coordinationSetup.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A cluster that cannot start for a reason the user fixes (a port in use, a wrong token, bad cluster files): exit 2. */
export class ClusterStartError extends Error {
  override readonly name = "ClusterStartError";
}

/** The start of a task that left for a termination notice while it started (see {@link StartLeave}). */
class StartLeftError extends CancelledError {
  override readonly name: string = "StartLeftError";
}

/** Who a task is in its cluster, and the options its client and server start with. */
export interface TaskPlan {
  /** This task's coordination name (`/job:worker/replica:0/task:1`). */
  readonly me: string;
  /** Every task's coordination name, this one included. */
  readonly tasks: readonly string[];
  /** Every task but this one. */
  readonly others: readonly string[];
  readonly token: string | undefined;
  readonly timeouts: Partial<CoordinationTimeouts>;
  readonly clientOptions: CoordinationClientOptions;
  readonly serverOptions: ServerOptions;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Step 1: `task`'s plan, from its `cluster:` section and `env` (the token's variable).
 *
 * @throws ClusterStartError for an unreadable token file.
 */
export const taskPlan = (task: ClusterTask, env: NodeJS.ProcessEnv, clock: Clock, logger: Logger): TaskPlan => {
  const o = task.options;
  const token = usage(() => loadClusterToken({ tokenFile: o.tokenFile, env }));
  const spec = task.clusterSpec;
  const tasks = taskNamesOf(spec);
  const me = taskName(task.taskType, task.taskIndex);
  const timeouts = timeoutsOf(o.timeouts);
  return {
    me,
    tasks,
    others: tasks.filter((t) => t !== me),
    token,
    timeouts,
    clientOptions: { task: me, tasks, isChief: task.isChief, timeouts, clock },
    serverOptions: {
      jobName: task.taskType,
      taskIndex: task.taskIndex,
      token,
      tls: o.tls,
      bindAddress: o.bindAddress,
      ...(o.timeouts?.serverStartTimeoutSecs === undefined ? {} : { startTimeoutMs: o.timeouts.serverStartTimeoutSecs * 1000 }),
      ...(o.timeouts?.serverStopGraceSecs === undefined ? {} : { stopGraceMs: o.timeouts.serverStopGraceSecs * 1000 }),
      logger,
    },
  };
};

/**
 * Step 2: the task's connection through its `cluster.backend`: its server serving `services`
 * (and the service itself, for a backend whose chief hosts it), its client made, not registered.
 *
 * @throws ClusterStartError for an unknown backend, a port in use, a bad address or bad timeouts.
 */
export const connectTask = async (task: ClusterTask, plan: TaskPlan, services: readonly ServiceRegistration[], clock: Clock, logger: Logger): Promise<CoordinationConnection> => {
  const backend = usage(() => coordinationBackend(task.options.backend));
  const settings: ClusterConfig = task.options;
  return serving(() => backend.connect({ spec: task.clusterSpec, settings, clientOptions: plan.clientOptions, serverOptions: { ...plan.serverOptions, services }, clock, logger }));
};

/**
 * Step 3: a termination notice while a task starts (`leave` resolves with its description). The
 * start's awaits race it ({@link unless}); once every task registered ({@link registered}) the
 * task first tells the others (a final preemption report, so that they exit with the preemption
 * code instead of waiting for it); once the start is over ({@link started}) the notice is the
 * caller's and this does nothing.
 */
export class StartLeave {
  private isRegistered = false;
  private isStarted = false;
  private readonly leaving: Promise<never>;

  constructor(o: {
    readonly leave: Promise<string> | undefined;
    /** The task's name in lines (`worker:1`). */
    readonly name: string;
    /** Tells every other task of `report` (final), as the task's backend allows. */
    readonly tell: (report: CancelledError) => Promise<void>;
    /** The report of the notice `what` (see clusterRuntime.ts `preemptionReport`). */
    readonly report: (what: string) => CancelledError;
  }) {
    this.leaving =
      o.leave === undefined
        ? new Promise<never>(() => undefined)
        : o.leave.then(async (what): Promise<never> => {
            // Started already: the caller's runtime handles the notice.
            if (this.isStarted) return new Promise<never>(() => undefined);
            if (this.isRegistered) await o.tell(o.report(what));
            throw new StartLeftError(`${o.name} left the cluster while it started: termination notice (${what})`);
          });
    this.leaving.catch(() => undefined);
  }

  /** `p`, unless the task leaves first (then its {@link StartLeftError}). */
  unless<T>(p: Promise<T>): Promise<T> {
    return Promise.race([p, this.leaving]);
  }

  /** Every task registered: a leave from now on tells the others first. */
  registered(): void {
    this.isRegistered = true;
  }

  /** The start is over: a leave from now on is the caller's. */
  started(): void {
    this.isStarted = true;
  }
}

/**
 * How a task tells the others of its final `report` while it starts: a host through its own
 * service, keeping it until they heard (up to `boundMs`); any other task through its client.
 */
export const tellWhileStarting =
  (client: CoordinationClient, host: CoordinationHost | undefined, others: readonly string[], boundMs: number) =>
  async (report: CancelledError): Promise<void> => {
    if (host !== undefined) {
      host.report(report, { final: true });
      await host.waitUntilTold(others, boundMs);
    } else await client.reportErrorToCluster(report, { final: true }).catch(() => undefined);
  };

/**
 * Step 4: registers `connection`'s client (again after each new generation, saying while it
 * waits), unless the task leaves first. A failed registration closes the client and stops the
 * connection (a host first keeps a final report it holds until the others heard it).
 *
 * @throws ClusterStartError when the service rejects the task's token; the registration's error
 *   (a timeout naming who did not register), or the leave's `StartLeftError`.
 */
export const registerTask = async (
  task: Pick<ClusterTask, "name" | "master">,
  connection: CoordinationConnection,
  plan: TaskPlan,
  leave: StartLeave,
  stop: () => Promise<void>,
  clock: Clock,
  logger: Logger,
): Promise<void> => {
  const { client } = connection;
  logger.info(
    `Server of ${task.name} serving ${task.master}; registering with the coordination service (${connection.where}): waiting for ${plan.tasks.length} task${plan.tasks.length === 1 ? "" : "s"}.`,
  );
  try {
    await leave.unless(connectCurrent(client, plan.timeouts.registrationTimeoutMs ?? defaultCoordinationTimeouts.registrationTimeoutMs, clock, logger));
  } catch (e) {
    await client.close().catch(() => undefined);
    await stop();
    if (e instanceof UnauthenticatedError) throw new ClusterStartError(`${task.name}: the coordination service rejected this task's cluster token (${e.message}); give every task the same token (cluster.tokenFile or MONITORED_SESSION_CLUSTER_TOKEN)`);
    throw e;
  }
  leave.registered();
  logger.info(`Every task of the cluster registered (generation ${client.generation ?? "?"}).`);
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** `f()`; an invalid setting it throws (InvalidArgumentError) is a {@link ClusterStartError}. */
const usage = <T>(f: () => T): T => {
  try {
    return f();
  } catch (e) {
    if (e instanceof InvalidArgumentError) throw new ClusterStartError(e.message);
    throw e;
  }
};

/** Starts serving; a port in use (UnknownError from `start()`) or a bad address is a {@link ClusterStartError}. */
const serving = async <T>(start: () => Promise<T>): Promise<T> => {
  try {
    return await start();
  } catch (e) {
    if (e instanceof UnknownError || e instanceof InvalidArgumentError) throw new ClusterStartError(e.message);
    throw e;
  }
};
