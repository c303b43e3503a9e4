/**
 * What `run` starts for a cluster task (TF_CONFIG set): its {@link Server} on its TF_CONFIG
 * address (or `cluster.bindAddress`), with the cluster token and TLS; on the chief, the
 * {@link ModelPublisher} and, with the embedded backend, the coordination service; then its
 * coordination client (registration and heartbeats) before training. The session's `master` is
 * the task's `grpc://` target and its `sessionTargets` resolve it: a worker waits for the chief's
 * model and starts from its values.
 *
 * While training, a blocking call on the coordination service watches the cluster: a peer
 * declared failed, a reported error or a lost service ends it, and {@link ClusterRuntime.failed}
 * settles with that error (UnavailableError naming the task, or the reported error naming the
 * reporter). A termination notice that no preemption agreement can carry (one while the task
 * starts, or after its handler closed) is reported to the cluster as a preemption (a typed
 * status: its failure's kind is `preemption`), so that every task exits with the preemption code.
 *
 * A data-parallel group outlives a lost worker (src/runtime/groupRejoin.ts), started by hand or by
 * a `launch` that restarts a lost worker alone (LAUNCH_RESTARTS_ALONE_ENV): the watch hands the
 * loss to the group, which waits for the worker up to `maxWaitSecs` and re-forms its ring in a
 * new generation.
 *
 * A worker whose job holds no replica group, not started by `launch`, outlives its chief instead (src/runtime/chiefRecovery.ts): a loss of the chief starts a
 * recovery, bounded by `maxWaitSecs`, and `failed` settles only if the chief does not come back in
 * time.
 *
 * @module
 */

import type { Observable } from "rxjs";

import { systemClock, type Clock } from "../time/Clock.js";
import type { ClusterSpec } from "../cluster/ClusterSpec.js";
import type { CoordinationClient } from "../cluster/coordination/CoordinationClient.js";
import { defaultCoordinationTimeouts } from "../cluster/coordination/CoordinationConfig.js";
import { chiefTaskOf } from "../cluster/coordination/identity.js";
import { grpcSessionTargetResolver } from "../cluster/grpcSessionTarget.js";
import { ModelPublisher } from "../cluster/ModelPublisher.js";
import { ComponentEvents, type EventSource } from "../events/componentEvents.js";
import type { SessionRunHook } from "../hook/SessionRunHook.js";
import { TcpCollective } from "../cluster/collective/TcpCollective.js";
import { AlreadyExistsError, DeadlineExceededError, OpError, UnknownError } from "../errors.js";
import type { Logger } from "../Logger.js";
import type { PreemptionClusterResolver, ReplicaStop } from "../preemption/PreemptionCluster.js";
import { defaultSessionTargets, type SessionTargetRegistry, type SessionTargetResolver } from "../pipeline/SessionTarget.js";
import { isChiefLoss, MODEL_READY_KEY, type ChiefRecovery } from "./chiefRecovery.js";
import { failureReporter, preemptionReporter, survivalOf, watchTaskFailures, type TaskParts } from "./taskSurvival.js";
import { ChaosOpErrorHook, chaosGoodputDirOf, chaosOpErrorsOf } from "./chaosOpErrors.js";
import { connectTask, registerTask, StartLeave, taskPlan, tellWhileStarting } from "./taskStart.js";
import { startBarrierOnce, TaskExit } from "./taskExit.js";
import { preemptionReport, rejoiningReplicaStop } from "./groupPreemption.js";
import { joinCollective } from "./collectiveJoin.js";
import { launchStatusWriter } from "./launchStatus.js";
import type { ClusterTask } from "./clusterTask.js";
import type { ReplicaGroup } from "./replicaGroup.js";
import { runtimeEmitter, type RuntimeEvent } from "./events.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/**
 * A started task of a cluster: its server, its registered coordination client, the failure watch
 * and the session targets; the replica group when the job is data-parallel. It is the cluster
 * resolver of a multi-worker `PreemptionCheckpointHandler` (`clusterResolver: task`).
 */
export interface ClusterRuntime extends PreemptionClusterResolver, EventSource {
  /**
   * The task's events (src/runtime/events.ts: registered, group joined, a rank or the chief lost
   * and back, exiting) and its lines, as `log` events (`source: "runtime"`; the lines of the
   * parts it starts keep their own: `server`, `collective`, `notices`), from its start: printed
   * by the task's `logger` until a session adopts them (`session.forwardEvents(task)`).
   * Completes once the task finished.
   */
  readonly events$: Observable<RuntimeEvent>;
  /** The caller prints the task's lines from now on (a session that forwards them); call the result to hand them back. */
  adopt(): () => void;
  /** `<type>:<index>` (`worker:1`). */
  readonly name: string;
  /** This task's session target, TensorFlow's `master`: `grpc://<address>` (for `monitoredTrainingSession` or `Supervisor`). */
  readonly master: string;
  readonly clusterSpec: ClusterSpec;
  /** The coordination service as this task joined it (registered, heartbeating). */
  readonly coordination: CoordinationClient;
  /** The data-parallel replica group (a `Collective` with its stop vote), when the task joined one. */
  readonly collective: ReplicaGroup | undefined;
  /**
   * The replica group's stop vote (the group itself; for a group that outlives a lost rank, a
   * view of it that also lets the preemption agreement follow the group into its next generation).
   */
  readonly replicaStop: ReplicaStop | undefined;
  /** How long a silent task takes to be declared failed, ms. */
  readonly livenessTimeoutMs: number;
  /** Whether `error` from the coordination service says the chief is lost. */
  isChiefLoss(error: unknown): boolean;
  /** The registry that resolves the task's `grpc://` master (on the chief, with its publisher). */
  readonly sessionTargets: SessionTargetRegistry;
  /**
   * Hooks the task's session runs first: a worker's recovery from the loss of its chief (none on
   * the chief or a data-parallel rank), and under `launch --chaos` the schedule's opError faults.
   */
  readonly hooks: readonly SessionRunHook[];
  /** Under `launch --chaos` with a `-- <command>`: where the task's session writes its goodput log (the report reads it). */
  readonly goodputDir: string | undefined;
  /** Settles with the cluster's first failure (never resolves while the cluster is healthy). */
  readonly failed: Promise<OpError>;
  /**
   * The start barrier: resolves once every task has its session (so the chief keeps its model
   * published until every worker has taken it); fails for every task with DeadlineExceededError
   * naming the stragglers after the barrier timeout. Passed once per generation of the
   * coordination service: a second call there is the first's. A replica group that re-forms
   * around a returning rank waits here for it.
   */
  sessionsCreated(): Promise<void>;
  /** Tells every task that this one got a termination notice (`what`): they exit with the preemption code. */
  reportPreemption(what: string): Promise<void>;
  /** Tells every task that this one failed with `error` (they stop, naming this task). */
  reportFailure(error: unknown): Promise<void>;
  /**
   * Leaves the cluster and stops the server. `clean`: through the shutdown barrier, so that the
   * others do not take this exit for a failure (resolves with the barrier's error, if any).
   */
  finish(clean: boolean): Promise<Error | undefined>;
  /** `finish(true)`: the shutdown barrier, then the server stops (resolves with the barrier's error, if any). */
  close(): Promise<Error | undefined>;
  /** `close()`, for `await using`. */
  [Symbol.asyncDispose](): Promise<void>;
}

export { ClusterStartError } from "./taskStart.js";

/** Options of {@link startClusterTask}. */
export interface StartClusterOptions {
  readonly env: NodeJS.ProcessEnv;
  /** The data-parallel group the job holds: joined (a `TcpCollective`) once every task registered. */
  readonly group?: ReplicaGroup | undefined;
  /** How long a worker without a group waits for a lost chief to come back (the configuration's `maxWaitSecs`, default 7200). */
  readonly maxWaitSecs?: number | undefined;
  /**
   * Take the death of the parent process (it re-parents this one) as a termination notice: this
   * process sends itself SIGTERM, so that a handler saves, or Node's default ends it. For tasks of
   * `launch -- <command>`: no orphan trains on when `launch` is killed. Polled every second.
   */
  readonly watchParent?: boolean | undefined;
  /**
   * Resolves with a termination notice's description when this task must leave while it starts
   * (it registers, or joins its replica group): the start stops, and once every task registered
   * the others are told (a preemption report naming this task), so that they leave with the
   * preemption code rather than wait for this one until the heartbeat timeout declares it failed.
   * The start then rejects with a `CancelledError` saying so.
   */
  readonly leave?: Promise<string> | undefined;
  /** Prints the task's lines until a session adopts its events (see {@link ClusterRuntime.events$}). */
  readonly logger: Logger;
  /**
   * The task's event stream, when the caller made it before the start (`startTask()` does, so
   * that the lines of its termination notices are the task's events too); default: a new one
   * whose lines `logger` prints. The start's own events (`taskRegistered`, `replicaGroupJoined`)
   * come before this function resolves: to hear them, pass a stream subscribed to beforehand.
   * The caller then completes it; otherwise the task does, once it finished.
   */
  readonly events?: ComponentEvents<RuntimeEvent> | undefined;
  readonly clock?: Clock;
}

/** The barrier every task passes once its session exists. */
const STARTED_BARRIER = "monitored-session/run/sessions-created";

/** How long a chief that hosts the coordination service serves it for the tasks still training, by default. */
const DEFAULT_DRAIN_TIMEOUT_MS = 3_600_000;

/** How long a worker waits for its chief by default (`monitoredTrainingSession`'s `maxWaitSecs`). */
const DEFAULT_MAX_WAIT_SECS = 7200;


// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Starts `task`'s server and registers it with the coordination service (waiting for every task
 * of the cluster, up to the registration timeout).
 *
 * @throws ClusterStartError for what the user fixes: an unreadable token or TLS file, a port in
 *   use, a token the chief rejects, invalid coordination timeouts.
 */
export const startClusterTask = async (task: ClusterTask, options: StartClusterOptions): Promise<ClusterRuntime> => {
  const clock = options.clock ?? systemClock;
  const events = options.events ?? new ComponentEvents<RuntimeEvent>(options.logger, () => clock.now(), "runtime");
  // Every line of the task is one of its events.
  const { logger } = events;
  const emit = runtimeEmitter(events, clock);
  const o = task.options;
  const plan = taskPlan(task, options.env, clock, logger);
  // Under launch --chaos: the schedule's opError faults that hit this task, raised in its steps.
  const chaos = chaosOpErrorsOf(options.env);
  const spec = task.clusterSpec;
  const { me, tasks, others, token, timeouts } = plan;
  const tls = o.tls;
  /** Tells the workers waiting for the chief's model that it is published (set once the client is registered). */
  let announcePublished: () => void = () => undefined;
  const publisher = task.isChief ? new ModelPublisher({ taskName: me, logger, onPublished: () => announcePublished() }) : undefined;
  const connection = await connectTask(task, plan, publisher === undefined ? [] : [publisher.registration], clock, logger);
  const { client, host } = connection;
  const stopServer = (): Promise<void> => connection.stop();
  const heartbeatTimeoutMs = timeouts.heartbeatTimeoutMs ?? defaultCoordinationTimeouts.heartbeatTimeoutMs;
  /** How long a host that leaves waits for the others to hear its report before its service stops. */
  const tellBoundMs = 3 * heartbeatTimeoutMs;
  const exit = new TaskExit({
    name: task.name,
    me,
    tasks,
    client,
    host,
    stopServer,
    // The host of the coordination service keeps serving it, after a clean exit, until the others left.
    drainMs: o.timeouts?.drainTimeoutSecs === undefined ? DEFAULT_DRAIN_TIMEOUT_MS : o.timeouts.drainTimeoutSecs * 1000,
    tellBoundMs,
    logger,
  });
  // A termination notice while the task starts: tell the others (once registered), then stop the start.
  const leave = new StartLeave({ leave: options.leave, name: task.name, tell: tellWhileStarting(client, host, others, tellBoundMs), report: (what) => preemptionReport(task.name, what) });
  /** A host whose service holds a final report (another task's leave, say) keeps it until the others heard it, before it stops. */
  const stopAfterTelling = async (): Promise<void> => {
    if (host?.hasFinalReport() === true) await host.waitUntilTold(others, tellBoundMs).catch(() => undefined);
    await stopServer();
  };
  await registerTask(task, connection, plan, leave, stopAfterTelling, clock, logger);
  emit({ type: "taskRegistered", task: task.name, tasks: tasks.length, generation: client.generation ?? null });
  // The chief's model is published: a waiting worker hears it at once (see `publishWatched`).
  announcePublished = () => void insertOnce(client, MODEL_READY_KEY, client.incarnation).catch(() => undefined);
  if (publisher?.readiness().ready === true) announcePublished();

  const group = options.group;
  /** Joins the replica group's ring (at the start, and again once the group re-forms). */
  const joinGroup = async (g: ReplicaGroup): Promise<TcpCollective> => {
    const collective = await joinCollective(client, g, { address: task.address, token, tls, timeoutSecs: o.collectiveTimeoutSecs, clock, logger });
    emit({ type: "replicaGroupJoined", task: task.name, rank: g.rank, size: g.size });
    return collective;
  };
  if (group !== undefined) await joinGroupAtStart(group, () => leave.unless(joinGroup(group)), exit, async () => {
    await client.close().catch(() => undefined);
    await stopAfterTelling();
  });
  leave.started();

  const parts: TaskParts = { task, me, tasks, client, host, group, exit, env: options.env, clock, logger, emit };
  const survival = survivalOf(parts, {
    maxWaitSecs: options.maxWaitSecs ?? DEFAULT_MAX_WAIT_SECS,
    unreachableTimeoutMs: heartbeatTimeoutMs,
    startBarrier: STARTED_BARRIER,
    joinGroup,
    publisher,
    watchParent: options.watchParent === true,
  });
  const { rejoin, recovery, preemptions } = survival;
  const failed = watchTaskFailures(parts, survival);
  const toLaunch = launchStatusWriter(options.env);
  // Under launch: this task's group waits for a lost worker, so launch may restart one alone.
  if (rejoin !== undefined) toLaunch({ type: "rejoins" });
  const resolver = publishWatched(grpcSessionTargetResolver({ cluster: spec.asDict(), token, tls, publisher }), client, clock);
  const chiefName = chiefTaskOf(spec);
  // A stream the task made itself ends with it; the caller's is the caller's to end.
  const finish = (clean: boolean): Promise<Error | undefined> =>
    options.events === undefined
      ? exit.finish(clean).finally(() => events.complete())
      : exit.finish(clean);
  return {
    events$: events.events$,
    adopt: () => events.adopt(),
    name: task.name,
    master: task.master,
    clusterSpec: spec,
    taskType: task.taskType,
    taskIndex: task.taskIndex,
    isChief: task.isChief,
    numWorkers: task.numWorkers,
    idInCluster: task.idInCluster,
    coordination: client,
    collective: group,
    replicaStop: group === undefined || rejoin === undefined ? group : rejoiningReplicaStop(group, client, rejoin, preemptions, heartbeatTimeoutMs, clock),
    // The agreement of a worker that outlives its chief follows it into the chief's next generation.
    chiefRecovery:
      recovery === undefined
        ? undefined
        : {
            // Any error while a recovery is under way joins it (a call of a client that is between generations fails too).
            follow: (e, generation) =>
              recovery.recovering || (e instanceof OpError && recovery.isChiefLoss(e)) ? recovery.registered(e instanceof OpError ? e : new UnknownError(String(e)), generation) : undefined,
            noticed: (why, onChiefLost) => recovery.noticed(why, onChiefLost),
            onRegistered: (listener) => recovery.onRegistered(listener),
          },
    livenessTimeoutMs: heartbeatTimeoutMs,
    isChiefLoss: (e) => isChiefLoss(e, chiefName),
    chiefTaskName: chiefName,
    untilErrorHeard: () => exit.untilErrorHeard(),
    sessionTargets: defaultSessionTargets.with(recovery === undefined ? resolver : recovering(resolver, recovery)),
    goodputDir: chaosGoodputDirOf(options.env),
    hooks: [...(recovery === undefined ? [] : [recovery.hook]), ...(chaos.length === 0 ? [] : [new ChaosOpErrorHook(chaos, task.name, clock, toLaunch)])],
    failed,
    // Once per generation: `run`, the session (`monitoredTrainingSession({ task })`) and a
    // re-forming group's preemption handler may each pass it.
    sessionsCreated: startBarrierOnce(client, async () => {
      // The chief's model is published: a worker that lost the chief waits for this key.
      if (task.isChief) await insertOnce(client, MODEL_READY_KEY, client.incarnation);
      // A recovering worker passes the barrier in each generation, from its hook.
      if (recovery === undefined) await client.barrier(STARTED_BARRIER);
    }),
    reportPreemption: preemptionReporter(parts, survival),
    reportFailure: failureReporter(parts),
    finish,
    close: () => finish(true),
    [Symbol.asyncDispose]: async () => {
      await finish(true);
    },
  };
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/**
 * `resolver`, its chief model told of the chief's publish by the coordination service (a watch on
 * {@link MODEL_READY_KEY}): a worker waiting for the chief's model asks again as soon as the chief
 * published, not `recoveryWaitSecs` later. The key stays for the generation, so only the first
 * wait is a watch; later ones (the chief unpublished meanwhile) wait out their time.
 */
const publishWatched = (resolver: SessionTargetResolver, client: CoordinationClient, clock: Clock): SessionTargetResolver => ({
  scheme: resolver.scheme,
  resolve: (master) => {
    const target = resolver.resolve(master);
    const model = target.chiefModel;
    if (model === undefined) return target;
    let heard: number | undefined;
    const waitForChange = async (timeoutMs: number): Promise<void> => {
      if (heard === client.generation) {
        await new Promise<void>((ok) => clock.setTimer(timeoutMs, ok));
        return;
      }
      const generation = client.generation;
      const start = clock.now();
      try {
        await client.get(MODEL_READY_KEY, { timeoutMs });
        heard = generation;
      } catch (e) {
        // A timeout: ask the chief again. The cluster's failure (the failure watch reports it)
        // fails every call at once: wait out the rest of the time, not a busy loop of asks.
        const left = timeoutMs - (clock.now() - start);
        if (!(e instanceof DeadlineExceededError) && left > 0) await new Promise<void>((ok) => clock.setTimer(left, ok));
      }
    };
    return { ...target, chiefModel: { address: model.address, pull: () => model.pull(), waitForChange } };
  },
});

/**
 * Joins the replica group's ring at the start; the task leaves it (and the group) when it leaves.
 * A failure (a notice while it joins, a peer that never came) abandons the group and leaves the
 * cluster (`leaveCluster`) before it is thrown.
 */
const joinGroupAtStart = async (group: ReplicaGroup, join: () => Promise<TcpCollective>, exit: TaskExit, leaveCluster: () => Promise<void>): Promise<void> => {
  let collective: TcpCollective;
  try {
    collective = await join();
  } catch (e) {
    group.abandon(e as Error);
    await leaveCluster();
    throw e;
  }
  group.attach(collective);
  exit.closeOnLeave(group);
  exit.closeOnLeave(collective);
};

/** Inserts `key` unless present (the chief's model can be published before and after its start barrier). */
const insertOnce = async (client: CoordinationClient, key: string, value: string): Promise<void> => {
  try {
    await client.insert(key, value);
  } catch (e) {
    if (!(e instanceof AlreadyExistsError)) throw e;
  }
};

/** `resolver`, its chief model asked through `recovery` (which holds it back while the chief is lost). */
const recovering = (resolver: SessionTargetResolver, recovery: ChiefRecovery): SessionTargetResolver => ({
  scheme: resolver.scheme,
  resolve: (master) => {
    const target = resolver.resolve(master);
    return target.chiefModel === undefined ? target : { ...target, chiefModel: recovery.chiefModel(target.chiefModel) };
  },
});

